"""The verdict of a run, in one place: each result's outcome, each evaluation's status, its
class against a baseline, and the gate's rule (docs/gate.md, "Baseline classes" and "The gate").

Pure functions over REST JSON (proto3 JSON as the server answers it: any field may be absent), so
that the terminal, JUnit, JSON, GitHub and HTML outputs all say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ces_eval.report import compare

__all__ = [
    "BASELINE_CLASSES",
    "FAIL_ON",
    "Outcome",
    "Status",
    "classify",
    "decide",
    "evaluation_of",
    "result_outcome",
    "summarize",
]

Outcome = Literal["PASS", "FAIL", "ERROR"]
Status = Literal["PASSED", "FAILED", "ERROR"]
FAIL_ON = ("any", "regression")
# The classes an evaluation of this run can have against a baseline (GONE ones are not in it).
BASELINE_CLASSES = tuple(kind for kind in compare.CHANGES if kind != "GONE")


def evaluation_of(result: Mapping[str, Any]) -> str:
    """The evaluation a result belongs to: its name is ``{evaluation}/results/{id}``."""
    name = str(result.get("name", ""))
    return name.rsplit("/results/", 1)[0] if "/results/" in name else ""


def result_outcome(result: Mapping[str, Any]) -> Outcome:
    """PASS or FAIL for a result whose execution completed with that status; ERROR for any
    other (ERROR, CANCELLED, still RUNNING, or completed without a PASS or FAIL status): a gate
    must not count what was not judged as a pass. A result without ``executionState`` (proto3
    JSON omits the default) is taken at its ``evaluationStatus``."""
    state = result.get("executionState", "COMPLETED")
    status = result.get("evaluationStatus")
    if state == "COMPLETED" and status in ("PASS", "FAIL"):
        return "PASS" if status == "PASS" else "FAIL"
    return "ERROR"


def summarize(
    evaluations: Sequence[Mapping[str, Any]], results: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The report's ``summary`` (docs/gate.md, "The report file"): the counts over ``results``
    and one entry per evaluation of ``evaluations``, in their order. An evaluation's status is
    ERROR if any of its results is, else FAILED if any failed, else PASSED; one with no result
    at all is ERROR (nothing says it passes)."""
    counts = {"total": 0, "passed": 0, "failed": 0, "errors": 0}
    per: dict[str, dict[str, int]] = {}
    key = {"PASS": "passed", "FAIL": "failed", "ERROR": "errors"}
    for result in results:
        outcome = key[result_outcome(result)]
        counts["total"] += 1
        counts[outcome] += 1
        tally = per.setdefault(evaluation_of(result), {"passed": 0, "failed": 0, "errors": 0})
        tally[outcome] += 1
    entries = []
    for evaluation in evaluations:
        name = str(evaluation.get("name", ""))
        tally = per.get(name, {"passed": 0, "failed": 0, "errors": 0})
        status: Status = "PASSED"
        if tally["errors"] or not any(tally.values()):
            status = "ERROR"
        elif tally["failed"]:
            status = "FAILED"
        entries.append(
            {
                "evaluation": name,
                "displayName": str(evaluation.get("displayName", "")),
                "tags": [str(tag) for tag in evaluation.get("tags", [])],
                "status": status,
                **tally,
            }
        )
    return {"results": counts, "evaluations": entries}


def classify(status: str, before: str | None) -> str:
    """An evaluation's class against a baseline: ``status`` now, ``before`` its status in the
    baseline (None: not in it). ERROR counts as failing on both sides. The rule the web view's
    run comparison uses too (:func:`ces_eval.report.compare.change`)."""
    return compare.change(before, status) or "NEW"  # status is never None: never None here


def decide(
    entries: Sequence[Mapping[str, Any]],
    fail_on: str,
    max_failures: int | None,
    *,
    run_state: str = "COMPLETED",
) -> dict[str, Any]:
    """The report's ``gate``: which evaluations fail it (``fail_on`` ``any``: every FAILED or
    ERROR one; ``regression``: the NEWLY_FAILING ones, classified beforehand), whether it holds
    (that count at most ``max_failures``, 0 when None), and why, in one line. A run that did
    not complete holds no gate, whatever its results."""
    if fail_on == "regression":
        counted = [entry for entry in entries if entry.get("baseline") == "NEWLY_FAILING"]
        kind = "newly failing evaluation"
    else:
        counted = [entry for entry in entries if compare.failing(str(entry.get("status")))]
        kind = "failing evaluation"
    count = len(counted)
    budget = 0 if max_failures is None else max_failures
    plural = "" if count == 1 else "s"
    if run_state != "COMPLETED":
        held, reason = False, f"the run ended {run_state}: no verdict"
    elif count <= budget:
        held = True
        reason = f"{count} {kind}{plural}" + (f", within the budget of {budget}" if budget else "")
    else:
        held = False
        reason = f"{count} {kind}{plural}" + (f", over the budget of {budget}" if budget else "")
    return {
        "failOn": fail_on,
        "maxFailures": max_failures,
        "failing": count,
        "held": held,
        "reason": reason,
    }
