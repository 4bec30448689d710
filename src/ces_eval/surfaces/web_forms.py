"""What the web view's forms ask, as the API's own list filters: a search of an app's
evaluations by name and tag, a filter of its runs by state, tag and date, and the two runs a
comparison shows (docs/web-ui.md).

Each form is a plain GET (no script); its query parameters are checked here and turned into the
AIP-160 filter strings ListEvaluations and ListEvaluationRuns accept (docs/semantics.md,
"Lists"), so a page shows what the same filter shows through the API and no SQL is written
outside the storage. A bad parameter is INVALID_ARGUMENT naming it, as the API answers.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from ces_eval.contract import limits
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

__all__ = [
    "RUN_STATES",
    "EvaluationSearch",
    "RunFilter",
    "compared_runs",
    "quoted",
]

_FORM_CHARS = 256  # characters of one text field of a form (a name, a tag)
# The states a run can be in, as ListEvaluationRuns filters on them (by name).
RUN_STATES = tuple(
    name
    for name in evaluation_pb2.EvaluationRun.EvaluationRunState.keys()  # noqa: SIM118 - an enum wrapper
    if not name.endswith("_UNSPECIFIED")
)
_RUN_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # AIP-122 (docs/semantics.md)


def _refused(parameter: str, value: str, problem: str) -> ServiceError:
    return ServiceError.invalid_argument(
        f"{parameter} {limits.shown(value)!r}: {problem}", [FieldViolation(parameter, problem)]
    )


def quoted(text: str) -> str:
    """``text`` as an AIP-160 string literal: double quotes, with ``"`` and ``\\`` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text(params: list[tuple[str, str]], parameter: str) -> str:
    """The form's text field ``parameter`` (the last one given), trimmed; "" when absent."""
    value = next((v for k, v in reversed(params) if k == parameter), "").strip()
    if len(value) > _FORM_CHARS:
        raise _refused(parameter, value, f"Must be at most {_FORM_CHARS} characters.")
    if not value.isprintable():
        raise _refused(parameter, value, "Must be printable text.")
    return value


def _day(params: list[tuple[str, str]], parameter: str) -> datetime.date | None:
    text = _text(params, parameter)
    if not text:
        return None
    # fromisoformat alone also takes 20261207 and 2026-W49: the form's date input sends
    # YYYY-MM-DD, and the page says dates so.
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        try:
            return datetime.date.fromisoformat(text)
        except ValueError:
            pass
    raise _refused(parameter, text, "Must be a date, YYYY-MM-DD (UTC).")


def _midnight(day: datetime.date) -> str:
    return quoted(f"{day.isoformat()}T00:00:00Z")


@dataclass(frozen=True)
class EvaluationSearch:
    """``?q=`` (part of a display name, or a whole evaluation ID) and ``?tag=`` (one tag)."""

    text: str = ""
    tag: str = ""

    @classmethod
    def of(cls, params: list[tuple[str, str]]) -> EvaluationSearch:
        return cls(_text(params, "q"), _text(params, "tag"))

    def __bool__(self) -> bool:
        return bool(self.text or self.tag)

    def filter(self) -> str:
        """ListEvaluations ``evaluation_filter``: ``display_name`` contains the text, or the
        name's ID is it (``name:`` takes an ID, docs/semantics.md "Lists"); ``tags`` has the
        tag."""
        terms = []
        if self.text:
            terms.append(f"(display_name:{quoted(self.text)} OR name:{quoted(self.text)})")
        if self.tag:
            terms.append(f"tags:{quoted(self.tag)}")
        return " AND ".join(terms)

    def params(self) -> dict[str, str]:
        return {k: v for k, v in (("q", self.text), ("tag", self.tag)) if v}


@dataclass(frozen=True)
class RunFilter:
    """``?state=`` (a run state's name), ``?tag=`` (runs that produced a result of an
    evaluation with that tag), ``?from=`` and ``?to=`` (days, UTC, both included)."""

    state: str = ""
    tag: str = ""
    since: datetime.date | None = None
    until: datetime.date | None = None

    @classmethod
    def of(cls, params: list[tuple[str, str]]) -> RunFilter:
        state = _text(params, "state")
        if state and state not in RUN_STATES:
            raise _refused("state", state, f"Must be one of {', '.join(RUN_STATES)}.")
        since, until = _day(params, "from"), _day(params, "to")
        if since is not None and until is not None and since > until:
            problem = f"Must not be before from ({since.isoformat()})."
            raise _refused("to", until.isoformat(), problem)
        return cls(state, _text(params, "tag"), since, until)

    def __bool__(self) -> bool:
        return bool(self.state or self.tag or self.since or self.until)

    def filter(self) -> str:
        """ListEvaluationRuns ``filter`` for the state and the days; the tag is no field of a
        run (the page takes the runs of the tagged evaluations' ``evaluation_runs``)."""
        terms = []
        if self.state:
            terms.append(f"state = {self.state}")
        if self.since is not None:
            terms.append(f"create_time >= {_midnight(self.since)}")
        if self.until is not None:
            terms.append(f"create_time < {_midnight(self.until + datetime.timedelta(days=1))}")
        return " AND ".join(terms)

    def params(self) -> dict[str, str]:
        given = {
            "state": self.state,
            "tag": self.tag,
            "from": self.since.isoformat() if self.since else "",
            "to": self.until.isoformat() if self.until else "",
        }
        return {k: v for k, v in given.items() if v}


def compared_runs(params: list[tuple[str, str]], app: str) -> tuple[str, str] | None:
    """The runs ``?a=`` (the earlier, or baseline) and ``?b=`` name, each an ID or a whole
    name of a run of ``app``; None when either is not given yet (the page offers the form)."""
    names = []
    for parameter in ("a", "b"):
        value = _text(params, parameter)
        if not value:
            return None
        run_id = value.removeprefix(f"{app}/evaluationRuns/")
        if not _RUN_ID.fullmatch(run_id):
            raise _refused(parameter, value, f"Must be the ID or name of a run of {app}.")
        names.append(f"{app}/evaluationRuns/{run_id}")
    return names[0], names[1]
