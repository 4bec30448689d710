"""When a scheduled evaluation run fires (src/ces_eval/core/engine/schedules.py).

The expected times are written out by hand from a calendar, with the weekday beside each date,
so that they share no arithmetic with the code under test. Hypothesis then checks the rules
against an oracle that walks the calendar one day at a time and counts biweekly weeks its own
way.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.core.engine.schedules import (
    DAY_NAMES,
    Frequency,
    Schedule,
    describe,
    next_execution,
    violations,
)
from ces_eval.errors import FieldViolation

NONE, DAILY, WEEKLY, BIWEEKLY = (
    Frequency.NONE,
    Frequency.DAILY,
    Frequency.WEEKLY,
    Frequency.BIWEEKLY,
)
MON, TUE, WED, THU, FRI, SAT, SUN = range(1, 8)
CONFIG = "scheduled_evaluation_run.scheduling_config"


def at(day: str, clock: str = "09:30") -> datetime:
    """``at("2026-12-07")`` is 2026-12-07T09:30:00Z; ``clock`` may carry seconds and fractions."""
    return datetime.fromisoformat(f"{day}T{clock}+00:00")


def fires(
    frequency: int, start: datetime, after: datetime, days: tuple[int, ...] = (), runs: int = 0
) -> datetime | None:
    return next_execution(Schedule(frequency, start, days), after, runs)


# --- the enum -------------------------------------------------------------------------------------


def test_frequency_numbers_are_the_official_ones() -> None:
    # google-cloud-ces 0.7.2, ScheduledEvaluationRun.SchedulingConfig.Frequency.
    assert {f.name: int(f) for f in Frequency} == {
        "FREQUENCY_UNSPECIFIED": 0,
        "NONE": 1,
        "DAILY": 2,
        "WEEKLY": 3,
        "BIWEEKLY": 4,
    }


def test_day_numbers_are_iso_weekdays() -> None:
    week = [date(2026, 12, 7) + timedelta(days=offset) for offset in range(7)]
    assert {day.isoweekday(): day.strftime("%A") for day in week} == DAY_NAMES


# --- the schedule value ---------------------------------------------------------------------------


def test_start_is_kept_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    schedule = Schedule(DAILY, datetime(2026, 12, 7, 10, 30, tzinfo=paris))
    assert schedule.start == at("2026-12-07")
    assert schedule.start.tzinfo is UTC


def test_a_naive_start_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Schedule(DAILY, datetime(2026, 12, 7, 9, 30))


def test_schedules_are_frozen_values() -> None:
    schedule = Schedule(WEEKLY, at("2026-12-07"), (MON,))
    assert schedule == Schedule(WEEKLY, at("2026-12-07"), (MON,))
    assert hash(schedule) == hash(Schedule(WEEKLY, at("2026-12-07"), (MON,)))
    with pytest.raises(AttributeError):
        schedule.days = ()  # type: ignore[misc]


# --- violations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frequency", "days"),
    [
        (NONE, ()),
        (DAILY, ()),
        (WEEKLY, ()),
        (WEEKLY, (MON,)),
        (WEEKLY, (SUN, MON, WED)),
        (WEEKLY, (MON, TUE, WED, THU, FRI, SAT, SUN)),
        (BIWEEKLY, ()),
        (BIWEEKLY, (THU, MON)),
    ],
)
def test_valid_schedules_have_no_violations(frequency: Frequency, days: tuple[int, ...]) -> None:
    assert violations(Schedule(frequency, at("2026-12-07"), days), CONFIG) == []


def test_an_unspecified_frequency_is_required() -> None:
    assert violations(Schedule(Frequency.FREQUENCY_UNSPECIFIED, at("2026-12-07")), CONFIG) == [
        FieldViolation(f"{CONFIG}.frequency", "Required.", "REQUIRED")
    ]


@pytest.mark.parametrize("number", [5, 9, -1, 2**31 - 1])
def test_a_frequency_no_value_names_is_invalid(number: int) -> None:
    assert violations(Schedule(number, at("2026-12-07")), CONFIG) == [
        FieldViolation(
            f"{CONFIG}.frequency",
            f"Not a valid frequency: {number}; use NONE, DAILY, WEEKLY or BIWEEKLY.",
            "INVALID_VALUE",
        )
    ]


def test_days_outside_monday_to_sunday_are_out_of_range() -> None:
    schedule = Schedule(WEEKLY, at("2026-12-07"), (0, MON, 8, -3, SUN, 2**31 - 1))
    assert violations(schedule, CONFIG) == [
        FieldViolation(
            f"{CONFIG}.days_of_week[{index}]",
            f"Must be between 1 (Monday) and 7 (Sunday); got {day}.",
            "OUT_OF_RANGE",
        )
        for index, day in ((0, 0), (2, 8), (3, -3), (5, 2**31 - 1))
    ]


def test_a_repeated_day_is_a_duplicate_of_its_first_listing() -> None:
    schedule = Schedule(BIWEEKLY, at("2026-12-07"), (MON, THU, MON, THU, THU, 0, 0))
    assert violations(schedule, CONFIG) == [
        FieldViolation(
            f"{CONFIG}.days_of_week[2]", "Monday is already listed at days_of_week[0].", "DUPLICATE"
        ),
        FieldViolation(
            f"{CONFIG}.days_of_week[3]",
            "Thursday is already listed at days_of_week[1].",
            "DUPLICATE",
        ),
        FieldViolation(
            f"{CONFIG}.days_of_week[4]",
            "Thursday is already listed at days_of_week[1].",
            "DUPLICATE",
        ),
        # A day out of range is reported as such every time, never as a duplicate.
        FieldViolation(
            f"{CONFIG}.days_of_week[5]",
            "Must be between 1 (Monday) and 7 (Sunday); got 0.",
            "OUT_OF_RANGE",
        ),
        FieldViolation(
            f"{CONFIG}.days_of_week[6]",
            "Must be between 1 (Monday) and 7 (Sunday); got 0.",
            "OUT_OF_RANGE",
        ),
    ]


@pytest.mark.parametrize(
    ("frequency", "days"),
    [(NONE, (MON,)), (DAILY, (MON, TUE)), (DAILY, (9, 9))],
)
def test_days_on_a_one_time_or_daily_schedule_are_not_applicable(
    frequency: Frequency, days: tuple[int, ...]
) -> None:
    # One violation for the field: which days were given does not matter any more.
    assert violations(Schedule(frequency, at("2026-12-07"), days), CONFIG) == [
        FieldViolation(
            f"{CONFIG}.days_of_week",
            f"Applies only to WEEKLY and BIWEEKLY schedules; this one is {frequency.name}.",
            "NOT_APPLICABLE",
        )
    ]


def test_every_problem_is_reported_together() -> None:
    schedule = Schedule(Frequency.FREQUENCY_UNSPECIFIED, at("2026-12-07"), (8, MON, MON))
    assert [(v.field, v.reason) for v in violations(schedule, CONFIG)] == [
        (f"{CONFIG}.frequency", "REQUIRED"),
        (f"{CONFIG}.days_of_week[0]", "OUT_OF_RANGE"),
        (f"{CONFIG}.days_of_week[2]", "DUPLICATE"),
    ]


def test_paths_start_with_the_prefix_the_caller_gives() -> None:
    schedule = Schedule(WEEKLY, at("2026-12-07"), (MON, 0))
    prefix = "scheduled_evaluation_runs[3].scheduling_config"
    assert [v.field for v in violations(schedule, prefix)] == [f"{prefix}.days_of_week[1]"]


# --- next_execution: one-time ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "after",
    [
        at("2026-01-01", "00:00"),
        at("2026-12-07", "09:29:59.999999"),
        at("2026-12-07"),  # exactly at start, not run yet
        at("2026-12-07", "09:30:00.000001"),
        at("2027-06-01"),  # long overdue: still due, never dropped
    ],
)
def test_a_one_time_schedule_fires_at_start_until_it_has_run(after: datetime) -> None:
    assert fires(NONE, at("2026-12-07"), after) == at("2026-12-07")
    assert fires(NONE, at("2026-12-07"), after, runs=1) is None
    assert fires(NONE, at("2026-12-07"), after, runs=7) is None


# --- next_execution: daily ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "after", "expected"),
    [
        # after before start: start itself
        (at("2026-12-07"), at("2026-11-01", "12:00"), at("2026-12-07")),
        (at("2026-12-07"), at("2026-12-07", "09:29:59.999999"), at("2026-12-07")),
        (at("2026-12-07"), at("2026-12-07", "00:00"), at("2026-12-07")),
        # after exactly on a firing: the next one
        (at("2026-12-07"), at("2026-12-07"), at("2026-12-08")),
        (at("2026-12-07"), at("2026-12-20"), at("2026-12-21")),
        # between firings
        (at("2026-12-07"), at("2026-12-07", "09:30:00.000001"), at("2026-12-08")),
        (at("2026-12-07"), at("2026-12-20", "08:00"), at("2026-12-20")),
        (at("2026-12-07"), at("2026-12-20", "23:59:59"), at("2026-12-21")),
        # month ends
        (at("2027-01-10"), at("2027-01-31", "10:00"), at("2027-02-01")),
        (at("2027-01-10"), at("2027-04-30", "10:00"), at("2027-05-01")),
        # February, common and leap years
        (at("2027-02-01"), at("2027-02-28", "12:00"), at("2027-03-01")),
        (at("2028-02-01"), at("2028-02-28", "12:00"), at("2028-02-29")),
        (at("2028-02-01"), at("2028-02-29"), at("2028-03-01")),
        # year end
        (at("2026-12-07"), at("2026-12-31"), at("2027-01-01")),
        # start's time of day, to the microsecond, whatever the time of after
        (
            at("2026-12-07", "23:59:59.999999"),
            at("2026-12-31", "23:59:59.999999"),
            at("2027-01-01", "23:59:59.999999"),
        ),
        (at("2026-12-07", "00:00"), at("2026-12-31", "00:00"), at("2027-01-01", "00:00")),
    ],
)
def test_daily(start: datetime, after: datetime, expected: datetime) -> None:
    assert fires(DAILY, start, after) == expected


def test_recurring_schedules_ignore_the_execution_count() -> None:
    for runs in (0, 1, 500):
        assert fires(DAILY, at("2026-12-07"), at("2026-12-07"), runs=runs) == at("2026-12-08")
        assert fires(BIWEEKLY, at("2026-12-07"), at("2026-12-07"), runs=runs) == at("2026-12-21")


def test_missed_firings_are_not_made_up() -> None:
    # A scheduler that was stopped since Dec 7 and asks on Dec 20 at noon gets Dec 21.
    assert fires(DAILY, at("2026-12-07"), at("2026-12-20", "12:00"), runs=1) == at("2026-12-21")


# --- next_execution: weekly -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "days", "after", "expected"),
    [
        # No days: start's weekday, start + 7k days. 2026-12-07 is a Monday.
        (at("2026-12-07"), (), at("2026-12-01"), at("2026-12-07")),
        (at("2026-12-07"), (), at("2026-12-07"), at("2026-12-14")),
        (at("2026-12-07"), (), at("2026-12-14", "09:29"), at("2026-12-14")),
        (at("2026-12-07"), (), at("2026-12-14", "09:31"), at("2026-12-21")),
        # across the year end: Mon 2026-12-28 → Mon 2027-01-04
        (at("2026-12-07"), (), at("2026-12-28"), at("2027-01-04")),
        # across a month end: Wed 2027-01-27 → Wed 2027-02-03
        (at("2027-01-27"), (), at("2027-01-27"), at("2027-02-03")),
        # onto a leap day: Tue 2028-02-22 → Tue 2028-02-29 → Tue 2028-03-07
        (at("2028-02-22"), (), at("2028-02-22"), at("2028-02-29")),
        (at("2028-02-22"), (), at("2028-02-29"), at("2028-03-07")),
        # Listed days. Start Wed 2026-12-09; Monday and Thursday.
        # The Monday of start's own week (Dec 7) is before start: the first firing is Thu Dec 10.
        (at("2026-12-09"), (MON, THU), at("2026-12-01"), at("2026-12-10")),
        # start's own weekday is not listed: start itself is no firing
        (at("2026-12-09"), (MON, THU), at("2026-12-09"), at("2026-12-10")),
        (at("2026-12-09"), (MON, THU), at("2026-12-09", "09:29"), at("2026-12-10")),
        (at("2026-12-09"), (MON, THU), at("2026-12-10"), at("2026-12-14")),
        (at("2026-12-09"), (THU, MON), at("2026-12-14"), at("2026-12-17")),
        # a listed day equal to start's weekday: start is the first firing
        (at("2026-12-07"), (FRI, MON), at("2026-12-07", "09:29"), at("2026-12-07")),
        (at("2026-12-07"), (FRI, MON), at("2026-12-07"), at("2026-12-11")),
        # a set that wraps the week: Sunday and Monday
        (at("2026-12-07"), (SUN, MON), at("2026-12-12", "22:00"), at("2026-12-13")),
        (at("2026-12-07"), (SUN, MON), at("2026-12-13"), at("2026-12-14")),
        (at("2026-12-07"), (SUN, MON), at("2026-12-14"), at("2026-12-20")),
        # Saturday to Tuesday, asked on Wednesday: the next Saturday
        (at("2026-12-07"), (SAT, SUN, MON, TUE), at("2026-12-16"), at("2026-12-19")),
        # year end: Thursday 2026-12-31 → Friday 2027-01-01 → Thursday 2027-01-07
        (at("2026-12-07"), (THU, FRI), at("2026-12-31"), at("2027-01-01")),
        (at("2026-12-07"), (THU, FRI), at("2027-01-01"), at("2027-01-07")),
        # month end and leap day: Tuesday and Saturday around Feb 29 2028 (a Tuesday)
        (at("2028-01-03"), (TUE, SAT), at("2028-02-26"), at("2028-02-29")),
        (at("2028-01-03"), (TUE, SAT), at("2028-02-29"), at("2028-03-04")),
        (at("2027-01-04"), (TUE, SAT), at("2027-02-27"), at("2027-03-02")),
        # every day listed: daily
        (at("2026-12-09"), tuple(range(1, 8)), at("2026-12-31"), at("2027-01-01")),
    ],
)
def test_weekly(
    start: datetime, days: tuple[int, ...], after: datetime, expected: datetime
) -> None:
    assert fires(WEEKLY, start, after, days) == expected


# --- next_execution: biweekly ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "days", "after", "expected"),
    [
        # No days: start + 14k days. Mon 2026-12-07.
        (at("2026-12-07"), (), at("2026-12-06"), at("2026-12-07")),
        (at("2026-12-07"), (), at("2026-12-07"), at("2026-12-21")),
        (at("2026-12-07"), (), at("2026-12-14"), at("2026-12-21")),
        (at("2026-12-07"), (), at("2026-12-21"), at("2027-01-04")),
        # Listed days from Wed 2026-12-09 (week 0 is Dec 7-13): Monday and Thursday.
        (at("2026-12-09"), (MON, THU), at("2026-12-01"), at("2026-12-10")),
        (at("2026-12-09"), (MON, THU), at("2026-12-10"), at("2026-12-21")),  # week 1 skipped
        (at("2026-12-09"), (MON, THU), at("2026-12-16"), at("2026-12-21")),
        (at("2026-12-09"), (MON, THU), at("2026-12-21"), at("2026-12-24")),
        (at("2026-12-09"), (MON, THU), at("2026-12-24"), at("2027-01-04")),
        # Weeks are Monday-based, counted from start's week, not 14 days from start:
        # from Sun 2026-12-13 (still week 0) the Monday after is week 1, skipped.
        (at("2026-12-13"), (MON, SUN), at("2026-12-12"), at("2026-12-13")),
        (at("2026-12-13"), (MON, SUN), at("2026-12-13"), at("2026-12-21")),
        (at("2026-12-13"), (MON, SUN), at("2026-12-21"), at("2026-12-27")),
        (at("2026-12-13"), (MON, SUN), at("2026-12-27"), at("2027-01-04")),
        # 2026 has 53 ISO weeks. From Mon 2026-12-21 (ISO week 52), the week of Dec 28 (ISO 53)
        # is week 1 of the schedule and skipped; Mon 2027-01-04 (ISO week 1) is week 2.
        (at("2026-12-21"), (), at("2026-12-21"), at("2027-01-04")),
        (at("2026-12-21"), (MON, THU), at("2026-12-24"), at("2027-01-04")),
        # From Mon 2026-12-14 (ISO 51), ISO week 53 fires and ISO week 1 does not.
        (at("2026-12-14"), (MON, THU), at("2026-12-17"), at("2026-12-28")),
        (at("2026-12-14"), (MON, THU), at("2026-12-31"), at("2027-01-11")),
        # 2027 has 52: from Mon 2027-12-20 (ISO 51) the next is Mon 2028-01-03 (ISO 1).
        (at("2027-12-20"), (), at("2027-12-20"), at("2028-01-03")),
        # Leap day in a firing week: from Tue 2028-02-15, Feb 29 is 14 days later.
        (at("2028-02-15"), (), at("2028-02-15"), at("2028-02-29")),
        (at("2028-02-15"), (TUE, FRI), at("2028-02-18"), at("2028-02-29")),
        (at("2028-02-15"), (TUE, FRI), at("2028-02-29"), at("2028-03-03")),
        # Long after start: week 52 after Mon 2026-12-07 fires (even), 53 does not.
        (at("2026-12-07"), (WED,), at("2027-12-05"), at("2027-12-08")),
        (at("2026-12-07"), (WED,), at("2027-12-08"), at("2027-12-22")),
    ],
)
def test_biweekly(
    start: datetime, days: tuple[int, ...], after: datetime, expected: datetime
) -> None:
    assert fires(BIWEEKLY, start, after, days) == expected


# --- next_execution: the rest ---------------------------------------------------------------------


def test_after_in_another_zone_is_the_same_instant() -> None:
    tokyo = timezone(timedelta(hours=9))
    # 2026-12-07 18:30 in Tokyo is start (09:30 UTC): the next daily firing is Dec 8.
    after = datetime(2026, 12, 7, 18, 30, tzinfo=tokyo)
    result = fires(DAILY, at("2026-12-07"), after)
    assert result == at("2026-12-08")
    assert result is not None
    assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("frequency", "start", "after"),
    [
        (DAILY, at("9999-12-31"), at("9999-12-31")),
        (DAILY, at("9999-12-30"), at("9999-12-31", "23:59:59.999999")),
        (WEEKLY, at("9999-12-27"), at("9999-12-27")),  # a Monday; the next is in 10000
        (BIWEEKLY, at("9999-12-20"), at("9999-12-20")),
    ],
)
def test_no_firing_past_the_last_representable_day(
    frequency: Frequency, start: datetime, after: datetime
) -> None:
    assert fires(frequency, start, after) is None


def test_weekly_days_near_the_end_of_time_still_fire_while_they_can() -> None:
    # Mon 9999-12-27: Friday Dec 31 exists, the next Monday does not.
    assert fires(WEEKLY, at("9999-12-27"), at("9999-12-27"), (MON, FRI)) == at("9999-12-31")
    assert fires(WEEKLY, at("9999-12-27"), at("9999-12-31"), (MON, FRI)) is None


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(Frequency.FREQUENCY_UNSPECIFIED, at("2026-12-07")),
        Schedule(7, at("2026-12-07")),
        Schedule(DAILY, at("2026-12-07"), (MON,)),
        Schedule(WEEKLY, at("2026-12-07"), (MON, MON)),
        Schedule(WEEKLY, at("2026-12-07"), (0,)),
    ],
)
def test_an_invalid_schedule_is_the_callers_bug(schedule: Schedule) -> None:
    with pytest.raises(ValueError, match=r"check violations\(\) first"):
        next_execution(schedule, at("2026-12-07"), 0)
    with pytest.raises(ValueError, match=r"check violations\(\) first"):
        describe(schedule)


def test_a_naive_after_or_a_negative_count_is_refused() -> None:
    schedule = Schedule(DAILY, at("2026-12-07"))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_execution(schedule, datetime(2026, 12, 7), 0)
    with pytest.raises(ValueError, match="negative"):
        next_execution(schedule, at("2026-12-07"), -1)


# --- describe -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "text"),
    [
        (
            Schedule(BIWEEKLY, at("2026-12-07"), (THU, MON)),
            "every Monday and Thursday at 09:30 UTC, every other week, from 2026-12-07",
        ),
        (Schedule(NONE, at("2026-12-07")), "once, on 2026-12-07 at 09:30 UTC"),
        (Schedule(DAILY, at("2026-12-07", "00:00")), "every day at 00:00 UTC, from 2026-12-07"),
        (Schedule(WEEKLY, at("2026-12-09")), "every Wednesday at 09:30 UTC, from 2026-12-09"),
        (
            Schedule(WEEKLY, at("2026-12-09"), (SUN,)),
            "every Sunday at 09:30 UTC, from 2026-12-09",
        ),
        (
            Schedule(WEEKLY, at("2026-12-09"), (FRI, WED, MON)),
            "every Monday, Wednesday and Friday at 09:30 UTC, from 2026-12-09",
        ),
        (
            Schedule(WEEKLY, at("2026-12-09"), (SUN, SAT, FRI, THU, WED, TUE, MON)),
            "every day at 09:30 UTC, from 2026-12-09",
        ),
        (
            Schedule(BIWEEKLY, at("2026-12-13")),
            "every Sunday at 09:30 UTC, every other week, from 2026-12-13",
        ),
        (
            Schedule(DAILY, at("2028-02-29", "17:05:09")),
            "every day at 17:05:09 UTC, from 2028-02-29",
        ),
        (
            Schedule(NONE, at("2026-12-31", "23:59:59.25")),
            "once, on 2026-12-31 at 23:59:59.250000 UTC",
        ),
        # In UTC, whatever zone the start was given in: 01:00 in UTC+2 is 23:00 the day before.
        (
            Schedule(WEEKLY, datetime(2027, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=2)))),
            "every Thursday at 23:00 UTC, from 2026-12-31",
        ),
    ],
)
def test_describe(schedule: Schedule, text: str) -> None:
    assert describe(schedule) == text


# --- properties -----------------------------------------------------------------------------------

_SPAN = timedelta(days=900)  # about two and a half years: several year ends and a leap day


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Schedule, datetime]:
    frequency = draw(st.sampled_from([DAILY, WEEKLY, BIWEEKLY]))
    start = draw(
        st.datetimes(
            min_value=datetime(2024, 1, 1),  # hypothesis takes naive bounds
            max_value=datetime(2032, 12, 31),
            timezones=st.just(UTC),
        )
    )
    days: tuple[int, ...] = ()
    if frequency != DAILY:
        days = tuple(draw(st.lists(st.integers(1, 7), unique=True, max_size=7)))
    offset = draw(
        st.one_of(
            # anywhere, to the microsecond
            st.timedeltas(min_value=-timedelta(days=40), max_value=_SPAN),
            # exactly on start's time of day, where firings lie
            st.integers(-40, _SPAN.days).map(lambda n: timedelta(days=n)),
            # a hair either side of it
            st.tuples(st.integers(-40, _SPAN.days), st.sampled_from([-1, 1])).map(
                lambda pair: timedelta(days=pair[0], microseconds=pair[1])
            ),
        )
    )
    return Schedule(frequency, start, days), start + offset


def _allowed(schedule: Schedule) -> set[int]:
    if schedule.frequency == DAILY:
        return set(range(1, 8))
    return set(schedule.days or [schedule.start.isoweekday()])


def _oracle(schedule: Schedule, after: datetime) -> datetime:
    """The first firing after ``after``, found by walking the calendar a day at a time from
    start's date; a biweekly week is the count of days since the Monday before start, by 7."""
    start = schedule.start
    day = start.date()
    while True:
        moment = datetime.combine(day, start.timetz())
        since_monday = (day - start.date()).days + start.weekday()
        in_week = schedule.frequency != BIWEEKLY or (since_monday // 7) % 2 == 0
        if moment > after and day.isoweekday() in _allowed(schedule) and in_week:
            return moment
        day += timedelta(days=1)


@given(_cases(), st.integers(0, 3))
def test_recurring_firings_follow_the_rules(case: tuple[Schedule, datetime], runs: int) -> None:
    schedule, after = case
    assert violations(schedule, CONFIG) == []
    result = next_execution(schedule, after, runs)
    assert result is not None
    start = schedule.start
    assert result > after
    assert result >= start
    if after < start and start.isoweekday() in _allowed(schedule):
        assert result == start
    assert result.tzinfo is UTC
    assert result.timetz() == start.timetz()  # start's time of day
    assert result.isoweekday() in _allowed(schedule)
    if schedule.frequency == BIWEEKLY:
        start_monday = start.date() - timedelta(days=start.weekday())
        assert (result.date() - start_monday).days // 7 % 2 == 0
    # No firing lies between after and the result: the day-by-day walk finds the same one.
    assert result == _oracle(schedule, after)


@given(_cases())
def test_asking_again_at_the_answer_moves_on(case: tuple[Schedule, datetime]) -> None:
    schedule, after = case
    first = next_execution(schedule, after, 1)
    assert first is not None
    second = next_execution(schedule, first, 2)
    assert second is not None
    assert second > first
    # Anything between two consecutive firings answers the second.
    assert next_execution(schedule, first + (second - first) / 2, 2) == second
    assert next_execution(schedule, second - timedelta(microseconds=1), 2) == second


@given(_cases(), st.integers(0, 3))
def test_one_time_schedules_fire_once_at_start(case: tuple[Schedule, datetime], runs: int) -> None:
    schedule, after = case
    once = Schedule(NONE, schedule.start)
    assert violations(once, CONFIG) == []
    assert next_execution(once, after, runs) == (once.start if runs == 0 else None)


@given(_cases())
def test_every_valid_schedule_has_a_description(case: tuple[Schedule, datetime]) -> None:
    schedule, _ = case
    text = describe(schedule)
    assert text.startswith("every ")
    assert text.endswith(f", from {schedule.start.date().isoformat()}")
    assert ("every other week" in text) == (schedule.frequency == BIWEEKLY)
