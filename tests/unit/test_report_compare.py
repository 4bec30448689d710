"""ces_eval.report.compare: an evaluation's status in a run (from its results, or from the run's
summary of it) and what became of it between two runs, the rule the web view's comparison and
``ces-eval run --baseline`` share."""

from __future__ import annotations

from typing import Any

import pytest

from ces_eval.report import compare


@pytest.mark.parametrize(
    ("results", "status"),
    [
        ([], None),
        ([{"executionState": "COMPLETED", "evaluationStatus": "PASS"}], "PASSED"),
        ([{"evaluationStatus": "PASS"}, {"evaluationStatus": "FAIL"}], "FAILED"),
        ([{"evaluationStatus": "FAIL"}, {"executionState": "ERROR"}], "ERROR"),
        ([{"executionState": "CANCELLED"}], None),  # no outcome: neither passed nor failed
        ([{"executionState": "RUNNING"}, {"evaluationStatus": "PASS"}], "PASSED"),
        ([{"executionState": "COMPLETED"}], None),  # proto3 JSON omits OUTCOME_UNSPECIFIED
    ],
)
def test_an_evaluations_status_from_its_results(
    results: list[dict[str, Any]], status: str | None
) -> None:
    assert compare.results_status(results) == status


@pytest.mark.parametrize(
    ("summary", "status"),
    [
        ({}, None),
        ({"passedCount": 3}, "PASSED"),
        ({"passedCount": 2, "failedCount": 1}, "FAILED"),
        ({"passedCount": 2, "failedCount": 1, "errorCount": 1}, "ERROR"),
    ],
)
def test_an_evaluations_status_from_its_run_summary(
    summary: dict[str, int], status: str | None
) -> None:
    assert compare.summary_status(summary) == status


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        ("PASSED", "FAILED", "NEWLY_FAILING"),
        ("PASSED", "ERROR", "NEWLY_FAILING"),  # an error fails as a failure does
        ("FAILED", "PASSED", "NEWLY_PASSING"),
        ("ERROR", "PASSED", "NEWLY_PASSING"),
        ("FAILED", "ERROR", "STILL_FAILING"),
        ("ERROR", "FAILED", "STILL_FAILING"),
        ("PASSED", "PASSED", "STILL_PASSING"),
        (None, "FAILED", "NEW"),
        (None, "PASSED", "NEW"),
        ("FAILED", None, "GONE"),
        (None, None, None),
    ],
)
def test_what_became_of_an_evaluation(
    before: str | None, after: str | None, change: str | None
) -> None:
    assert compare.change(before, after) == change
    assert change is None or change in compare.CHANGES
