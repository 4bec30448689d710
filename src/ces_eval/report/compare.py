"""How an evaluation fared in a run, and how that changed from one run to another: the rule the
web view's run comparison and ``ces-eval run --baseline`` share (docs/web-ui.md, "Comparing two
runs"), written once so that both say the same of the same two runs.

Pure functions over REST JSON (proto3 JSON, camelCase; a field at its default is absent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "CHANGES",
    "ERROR",
    "FAILED",
    "PASSED",
    "change",
    "failing",
    "results_status",
    "summary_status",
]

PASSED: Final = "PASSED"
FAILED: Final = "FAILED"
ERROR: Final = "ERROR"

# What became of an evaluation between a run (or baseline) and a later one, in the order pages
# and reports list them: regressions first. NEW is only in the later run, GONE only in the earlier.
CHANGES: Final = (
    "NEWLY_FAILING",
    "NEWLY_PASSING",
    "STILL_FAILING",
    "STILL_PASSING",
    "NEW",
    "GONE",
)


def _status(*, errors: int, failed: int, passed: int) -> str | None:
    if errors:
        return ERROR
    if failed:
        return FAILED
    return PASSED if passed else None


def results_status(results: Iterable[Mapping[str, Any]]) -> str | None:
    """An evaluation's status from its results in one run (EvaluationResult REST JSON): ERROR
    when any result's ``executionState`` is ERROR, else FAILED when any ``evaluationStatus`` is
    FAIL, else PASSED when any is PASS; None when none of them has an outcome (cancelled, still
    running, nothing judged)."""
    errors = failed = passed = 0
    for result in results:
        if result.get("executionState") == "ERROR":
            errors += 1
        elif result.get("evaluationStatus") == "FAIL":
            failed += 1
        elif result.get("evaluationStatus") == "PASS":
            passed += 1
    return _status(errors=errors, failed=failed, passed=passed)


def summary_status(summary: Mapping[str, Any]) -> str | None:
    """The same status from a run's ``evaluationRunSummaries`` entry of the evaluation
    (EvaluationRunSummary REST JSON: ``passedCount``, ``failedCount``, ``errorCount``)."""
    return _status(
        errors=int(summary.get("errorCount", 0)),
        failed=int(summary.get("failedCount", 0)),
        passed=int(summary.get("passedCount", 0)),
    )


def failing(status: str | None) -> bool:
    """FAILED or ERROR: an error fails a gate as a failure does."""
    return status in (FAILED, ERROR)


def change(before: str | None, after: str | None) -> str | None:
    """One of :data:`CHANGES` for an evaluation whose status was ``before`` and is ``after``
    (None: not in that run, or no outcome in it); None when it has no outcome in either."""
    if before is None and after is None:
        return None
    if before is None:
        return "NEW"
    if after is None:
        return "GONE"
    if failing(after):
        return "STILL_FAILING" if failing(before) else "NEWLY_FAILING"
    return "NEWLY_PASSING" if failing(before) else "STILL_PASSING"
