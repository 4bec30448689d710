"""When a scheduled evaluation run fires: the arithmetic of its scheduling configuration.

``ScheduledEvaluationRun.SchedulingConfig`` (google.cloud.ces.v1beta) holds a ``frequency``, a
required ``start_time`` and, for weekly and biweekly schedules only, ``days_of_week`` (1 Monday
… 7 Sunday). Its output-only ``next_scheduled_execution_time`` is computed here. This module
knows no messages: the resource's module turns its config into a :class:`Schedule`, reports
:func:`violations` (and the missing ``start_time``, its own REQUIRED check), stores
:func:`next_execution` and shows :func:`describe`. docs/semantics.md ("Scheduled evaluation
runs: when they fire") states the same rules for users.

The rules:

* Everything is UTC, which has no daylight-saving shifts: a schedule fires at ``start``'s time
  of day, to the microsecond, on every day it allows, and never before ``start``.
* NONE fires once, at ``start``. DAILY fires every day. WEEKLY fires on each listed weekday,
  or on ``start``'s weekday when none is listed (so ``start + 7k`` days). BIWEEKLY is WEEKLY in
  every other week: weeks are counted from the Monday of the week that holds ``start`` (ISO
  weeks begin on Monday), and only weeks 0, 2, 4, … fire; without listed days that is
  ``start + 14k`` days.
* :func:`next_execution` answers the first firing strictly after ``after``; when ``after`` is
  before ``start``, that is the first firing of all (``start`` itself if ``start`` falls on an
  allowed day).

The edge cases, decided here:

* ``start`` on a weekday the list does not hold is not a firing: WEEKLY on Monday and Thursday
  from a Wednesday first fires that Thursday. A listed day earlier in ``start``'s own week
  (that Monday) never fires: nothing runs before ``start``.
* ``after`` exactly on a firing answers the next one, so a scheduler that passes the time of
  the run it just started gets the following run.
* A one-time schedule answers ``start`` while ``executions`` is 0, even once ``start`` has
  passed: a run that was due and did not happen is still due (the scheduler starts it at
  once), never silently dropped. After its execution it answers None. Recurring schedules
  ignore ``executions`` and do not make up missed firings: they answer the first firing after
  ``after``: a scheduler stopped for a week that passes the current time gets the next firing
  to come, not the seven it missed.
* BIWEEKLY counts weeks by the days elapsed since that first Monday, not by the parity of ISO
  week numbers, so a year of 53 ISO weeks (2026) keeps the rhythm across New Year: from
  Monday 2026-12-21 (week 52) the next firing is Monday 2027-01-04 (week 1), 14 days later.
* A firing past 9999-12-31, the last day both ``datetime`` and ``google.protobuf.Timestamp``
  can hold, does not exist: None.

``days_of_week`` on a DAILY or one-time schedule is refused rather than ignored: the field's
documentation says it applies only to weekly and biweekly ones, and a caller who sends it
expects it to matter.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from ces_eval.errors import FieldViolation

__all__ = [
    "DAY_NAMES",
    "Frequency",
    "Schedule",
    "describe",
    "next_execution",
    "violations",
]


class Frequency(enum.IntEnum):
    """``ScheduledEvaluationRun.SchedulingConfig.Frequency``, with the official numbers."""

    FREQUENCY_UNSPECIFIED = 0
    NONE = 1
    DAILY = 2
    WEEKLY = 3
    BIWEEKLY = 4


# ``days_of_week`` numbering (ISO 8601, as datetime.isoweekday): 1 Monday … 7 Sunday.
DAY_NAMES = {
    1: "Monday",
    2: "Tuesday",
    3: "Wednesday",
    4: "Thursday",
    5: "Friday",
    6: "Saturday",
    7: "Sunday",
}
_EVERY_DAY = tuple(DAY_NAMES)
_KNOWN = frozenset(Frequency)
_WITH_DAYS = frozenset({Frequency.WEEKLY, Frequency.BIWEEKLY})
_WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Schedule:
    """A scheduling configuration as the caller sent it, valid or not.

    ``frequency`` is a :class:`Frequency`, or the number as received: proto3 enums are open, so
    a gRPC caller can send one no value names, and :func:`violations` reports it. ``start``
    must be timezone-aware; it is kept in UTC. ``days`` are the ``days_of_week`` in the order
    sent (``tuple(config.days_of_week)``).
    """

    frequency: int
    start: datetime
    days: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _utc(self.start, "start"))


def violations(schedule: Schedule, path: str) -> list[FieldViolation]:
    """What is wrong with ``schedule``, each at its field below ``path`` (the scheduling
    config's own path, such as ``scheduled_evaluation_run.scheduling_config``). A missing
    ``start_time`` is not seen here: the caller checks it with the other REQUIRED fields."""
    found: list[FieldViolation] = []
    frequency = schedule.frequency
    if frequency == Frequency.FREQUENCY_UNSPECIFIED:
        found.append(FieldViolation(f"{path}.frequency", "Required.", "REQUIRED"))
    elif frequency not in _KNOWN:
        found.append(
            FieldViolation(
                f"{path}.frequency",
                f"Not a valid frequency: {frequency}; use NONE, DAILY, WEEKLY or BIWEEKLY.",
                "INVALID_VALUE",
            )
        )
    elif schedule.days and frequency not in _WITH_DAYS:
        # Which days a one-time or daily schedule was given no longer matters: one violation.
        found.append(
            FieldViolation(
                f"{path}.days_of_week",
                "Applies only to WEEKLY and BIWEEKLY schedules; this one is "
                f"{Frequency(frequency).name}.",
                "NOT_APPLICABLE",
            )
        )
        return found
    first_at: dict[int, int] = {}
    for index, day in enumerate(schedule.days):
        at = f"{path}.days_of_week[{index}]"
        if day not in DAY_NAMES:
            found.append(
                FieldViolation(
                    at, f"Must be between 1 (Monday) and 7 (Sunday); got {day}.", "OUT_OF_RANGE"
                )
            )
        elif day in first_at:
            found.append(
                FieldViolation(
                    at,
                    f"{DAY_NAMES[day]} is already listed at days_of_week[{first_at[day]}].",
                    "DUPLICATE",
                )
            )
        else:
            first_at[day] = index
    return found


def next_execution(schedule: Schedule, after: datetime, executions: int) -> datetime | None:
    """The first firing of ``schedule`` strictly after ``after`` (the first of all when
    ``after`` is before ``start``), in UTC; None when there is none. ``executions`` is how many
    times the schedule has run: only a one-time schedule depends on it (see the module's
    docstring). Raises ValueError for a schedule with :func:`violations`, a naive ``after`` or
    a negative count: those are the caller's bugs, not the user's."""
    _require_valid(schedule)
    after = _utc(after, "after")
    if executions < 0:
        raise ValueError(f"executions must not be negative; got {executions}")
    start = schedule.start
    if schedule.frequency == Frequency.NONE:
        return start if executions == 0 else None
    clock = start.timetz()
    # Every firing is at ``clock``: on ``after``'s own date only if ``clock`` is later there.
    # No firing is before ``start``, whose time of day is ``clock``: not before its date either.
    earliest = after.date()
    if datetime.combine(earliest, clock) <= after:
        if earliest == date.max:
            return None
        earliest += timedelta(days=1)
    earliest = max(earliest, start.date())
    firings = (_first_on_or_after(schedule, day, earliest) for day in _days(schedule))
    found = [day for day in firings if day is not None]
    return datetime.combine(min(found), clock) if found else None


def describe(schedule: Schedule) -> str:
    """One line for people, such as "every Monday and Thursday at 09:30 UTC, every other week,
    from 2026-12-07". Raises ValueError for a schedule with :func:`violations`."""
    _require_valid(schedule)
    start = schedule.start
    precision = "minutes"
    if start.microsecond:
        precision = "microseconds"
    elif start.second:
        precision = "seconds"
    at = f"at {start.time().isoformat(timespec=precision)} UTC"
    since = start.date().isoformat()
    if schedule.frequency == Frequency.NONE:
        return f"once, on {since} {at}"
    days = sorted(set(_days(schedule)))
    which = "every day" if len(days) == len(DAY_NAMES) else "every " + _listed(days)
    rhythm = ", every other week" if schedule.frequency == Frequency.BIWEEKLY else ""
    return f"{which} {at}{rhythm}, from {since}"


def _days(schedule: Schedule) -> tuple[int, ...]:
    """The weekdays ``schedule`` fires on (recurring schedules only)."""
    if schedule.frequency == Frequency.DAILY:
        return _EVERY_DAY
    return schedule.days or (schedule.start.isoweekday(),)


def _first_on_or_after(schedule: Schedule, weekday: int, earliest: date) -> date | None:
    """The first date from ``earliest`` on that falls on ``weekday`` in a week that fires."""
    try:
        day = earliest + timedelta(days=(weekday - earliest.isoweekday()) % 7)
        if schedule.frequency == Frequency.BIWEEKLY and _week_of(schedule.start.date(), day) % 2:
            day += _WEEK
    except OverflowError:
        return None
    return day


def _week_of(start: date, day: date) -> int:
    """Which week, counted from 0 at the Monday-based week holding ``start``, holds ``day``."""
    return (_monday(day) - _monday(start)).days // 7


def _monday(day: date) -> date:
    # Cannot overflow: date.min (0001-01-01) is a Monday.
    return day - timedelta(days=day.isoweekday() - 1)


def _listed(days: list[int]) -> str:
    names = [DAY_NAMES[day] for day in days]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _require_valid(schedule: Schedule) -> None:
    problems = violations(schedule, "schedule")
    if problems:
        listed = "; ".join(f"{v.field}: {v.description}" for v in problems)
        raise ValueError(f"an invalid schedule ({listed}); check violations() first")


def _utc(moment: datetime, what: str) -> datetime:
    if moment.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware; got {moment!r}")
    return moment.astimezone(UTC)
