"""What failed in a result, as short text: the failing turn and expectation, what was expected
and what was observed (docs/gate.md, "What a failure shows"). The terminal table, the JUnit
``<failure>``, the GitHub annotations and the step summary all read these.

Read from :func:`ces_eval.report.render.result_view`, the one reading of a result that the web
view and the HTML report show too, so that every output names the same expectation and the same
values; only which of them failed, and their one-line form, are decided here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ces_eval.gate._verdict import result_outcome
from ces_eval.report import render

__all__ = ["Failure", "failures"]


@dataclass(frozen=True)
class Failure:
    """One thing that went wrong in a result. ``turn`` counts from 1 (None: not of a turn)."""

    turn: int | None
    expectation: str
    expected: str
    observed: str

    def line(self) -> str:
        """The failure in one line."""
        where = f"turn {self.turn}, {self.expectation}" if self.turn else self.expectation
        if not self.expected:
            return f"{where}: {self.observed}"
        return f"{where}: expected {self.expected}, observed {self.observed}"


def _one_line(side: Mapping[str, str] | None) -> str:
    """One side of an expectation (render's ``expected`` or ``observed``) on one line: a tool
    call as ``tool(arguments)``, anything else as its text."""
    if side is None:
        return "nothing"
    if side.get("tool"):
        tool = side["tool"].rsplit("/", 1)[-1]
        return f"{tool}({side.get('summary') or ''})"
    return " ".join(str(side.get("text", "")).split()) or "(nothing)"


def _items(items: Sequence[Mapping[str, Any]], turn: int | None) -> list[Failure]:
    return [
        Failure(
            turn,
            f"expectation {index} ({item.get('note') or item.get('label', '')})",
            _one_line(item.get("expected")),
            _one_line(item.get("observed")),
        )
        for index, item in enumerate(items, start=1)
        if item.get("outcome") == "FAIL"
    ]


def _error(error: Mapping[str, str]) -> str:
    reason, message = error.get("reason", "ERROR"), error.get("message", "")
    return f"{reason}: {message}" if message else reason


def _turns(view: Mapping[str, Any]) -> list[Failure]:
    found: list[Failure] = []
    for turn in view.get("turns", []):
        number = turn.get("number")
        in_turn = _items(turn.get("outcomes", []), number)
        if not in_turn:  # expectations met, a turn-level metric below its threshold
            in_turn = [
                Failure(number, score["name"].lower(), score["threshold"], score["score"])
                for score in turn.get("scores", [])
                if score.get("outcome") == "FAIL"
            ]
        if turn.get("error"):
            in_turn.append(Failure(number, "error", "", _error(turn["error"])))
        found += in_turn
    return found


def _scenario(view: Mapping[str, Any], result: Mapping[str, Any]) -> list[Failure]:
    found = _items((view.get("scenario") or {}).get("outcomes", []), None)
    scenario = result.get("scenarioResult", {})
    if not found:  # expectations met: the rubrics that scored under 1, else the user's goal
        for rubric in scenario.get("rubricOutcomes", []):
            if float(rubric.get("score", 0)) < 1:
                explanation = rubric.get("scoreExplanation", "")
                observed = f"score {rubric.get('score', 0)}"
                observed += f": {explanation}" if explanation else ""
                found.append(Failure(None, f"rubric {rubric.get('rubric', '')!r}", "met", observed))
    goal = scenario.get("userGoalSatisfactionResult", {})
    if not found and goal and goal.get("score", 0) == 0:
        found.append(Failure(None, "user goal", "satisfied", str(goal.get("label") or "not")))
    return found


def failures(
    result: Mapping[str, Any], evaluation: Mapping[str, Any] | None = None
) -> list[Failure]:
    """What failed in ``result`` (of ``evaluation``, when at hand: its thresholds): nothing when
    it passed; for an ERROR its error; for a FAIL each failing expectation, or the failing
    metric when no expectation failed."""
    outcome = result_outcome(result)
    if outcome == "PASS":
        return []
    if outcome == "ERROR":
        if result.get("executionState", "COMPLETED") == "COMPLETED" and not result.get(
            "errorInfo"
        ):  # e.g. a golden with no judged expectation
            return [Failure(None, "verdict", "PASS or FAIL", "none: nothing was judged")]
        view = render.result_view(result, evaluation)
        if view.get("error"):
            return [Failure(None, "error", "", _error(view["error"]))]
        return [Failure(None, "error", "", f"execution {view.get('status', 'unknown')}")]
    view = render.result_view(result, evaluation)
    found = _scenario(view, result) if view.get("scenario") else _turns(view)
    return found or [Failure(None, "evaluation", "PASS", "FAIL")]
