"""What failed in a result, as short text: the failing turn and expectation, what was expected
and what was observed (docs/gate.md, "What a failure shows"). The terminal table, the JUnit
``<failure>``, the GitHub annotations and the step summary all read these.

Over REST JSON as the server answers it: any field may be absent (proto3 JSON omits defaults),
and a result of a kind not known here still gets one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ces_eval.gate._verdict import result_outcome

__all__ = ["Failure", "describe", "failures"]


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


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _tool(call: Mapping[str, Any]) -> str:
    tool = call.get("displayName") or str(call.get("tool", "")).rsplit("/", 1)[-1]
    if not tool and isinstance(call.get("toolsetTool"), Mapping):
        tool = str(call["toolsetTool"].get("toolId", "toolset tool"))
    return str(tool or "tool")


def _message(message: Mapping[str, Any]) -> str:
    parts = []
    for chunk in message.get("chunks", []):
        if not isinstance(chunk, Mapping):
            continue
        if "text" in chunk or "transcript" in chunk:
            parts.append(str(chunk.get("text", chunk.get("transcript"))))
        elif isinstance(chunk.get("toolCall"), Mapping):
            parts.append(_tool_call(chunk["toolCall"]))
        elif chunk:
            parts.append(_compact(chunk))
    return " ".join(parts) if parts else "(nothing)"


def _tool_call(call: Mapping[str, Any]) -> str:
    return f"{_tool(call)}({_compact(call.get('args', {}))})"


def _tool_response(response: Mapping[str, Any]) -> str:
    return f"{_tool(response)} -> {_compact(response.get('response', {}))}"


def _transfer(transfer: Mapping[str, Any]) -> str:
    target = transfer.get("displayName") or str(transfer.get("targetAgent", ""))
    return f"transfer to {str(target).rsplit('/', 1)[-1]}"


_FLAGS = ("updatedVariables", "noToolCalls")  # members that are not messages
# How each kind of expectation or observation reads, by its proto3 JSON member.
_DESCRIBERS: dict[str, Callable[[Any], str]] = {
    "toolCall": _tool_call,
    "toolResponse": _tool_response,
    "agentResponse": lambda message: repr(_message(message)),
    "agentTransfer": _transfer,
    "updatedVariables": lambda variables: f"variables {_compact(variables)}",
    "noToolCalls": lambda _flag: "no tool call",
    "toolExpectation": lambda expectation: _tool_call(expectation.get("expectedToolCall", {})),
}


def describe(value: Mapping[str, Any]) -> str:
    """An expectation, or an observed value, in a few words: a tool call as ``tool({args})``,
    an answer as its text, a transfer as ``transfer to <agent>``; anything else as compact
    JSON."""
    for key, describer in _DESCRIBERS.items():
        if key in value and (isinstance(value[key], Mapping) or key in _FLAGS):
            return describer(value[key])
    return _compact(value) if value else "(nothing)"


def _kind(expectation: Mapping[str, Any]) -> str:
    for key in ("toolCall", "toolResponse", "agentResponse", "agentTransfer", "toolExpectation"):
        if key in expectation:
            return key
    return next(iter(expectation), "expectation") if expectation else "expectation"


def _observed(outcome: Mapping[str, Any]) -> str:
    for key, kind in (
        ("observedToolCall", "toolCall"),
        ("observedToolResponse", "toolResponse"),
        ("observedAgentResponse", "agentResponse"),
        ("observedAgentTransfer", "agentTransfer"),
    ):
        if isinstance(outcome.get(key), Mapping):
            observed = outcome[key]
            if kind == "toolCall" and "toolCall" in observed:  # a scenario's ObservedToolCall
                observed = observed["toolCall"]
            return describe({kind: observed})
    return "nothing"


def _expectation_name(index: int, expectation: Mapping[str, Any]) -> str:
    note = expectation.get("note")
    return f"expectation {index} ({note or _kind(expectation)})"


def _golden(golden: Mapping[str, Any]) -> list[Failure]:
    found: list[Failure] = []
    for turn, replay in enumerate(golden.get("turnReplayResults", []), start=1):
        in_turn = []
        for index, outcome in enumerate(replay.get("expectationOutcome", []), start=1):
            if outcome.get("outcome") == "FAIL":
                expectation = outcome.get("expectation", {})
                in_turn.append(
                    Failure(
                        turn,
                        _expectation_name(index, expectation),
                        describe(expectation),
                        _observed(outcome),
                    )
                )
        for key, metric in (
            ("semanticSimilarityResult", "semantic similarity"),
            ("overallToolInvocationResult", "tool invocation"),
        ):
            result = replay.get(key, {})
            if not in_turn and result.get("outcome") == "FAIL":
                score = result.get("score", result.get("toolInvocationScore", 0))
                in_turn.append(Failure(turn, metric, "PASS", f"FAIL (score {score})"))
        if isinstance(replay.get("errorInfo"), Mapping):
            in_turn.append(Failure(turn, "error", "", _error(replay["errorInfo"])))
        found += in_turn
    return found


def _scenario(scenario: Mapping[str, Any]) -> list[Failure]:
    found = []
    for index, outcome in enumerate(scenario.get("expectationOutcomes", []), start=1):
        if outcome.get("outcome") == "FAIL":
            expectation = outcome.get("expectation", {})
            name = _expectation_name(index, expectation)
            found.append(Failure(None, name, describe(expectation), _observed(outcome)))
    for outcome in scenario.get("rubricOutcomes", []):
        if not found and float(outcome.get("score", 0)) < 1:
            explanation = outcome.get("scoreExplanation", "")
            observed = f"score {outcome.get('score', 0)}" + (
                f": {explanation}" if explanation else ""
            )
            found.append(Failure(None, f"rubric {outcome.get('rubric', '')!r}", "met", observed))
    goal = scenario.get("userGoalSatisfactionResult", {})
    if not found and goal and goal.get("score", 0) == 0:
        found.append(Failure(None, "user goal", "satisfied", str(goal.get("label") or "not")))
    return found


def _error(info: Mapping[str, Any]) -> str:
    kind = str(info.get("errorType", "ERROR"))
    message = str(info.get("errorMessage", ""))
    return f"{kind}: {message}" if message else kind


def failures(result: Mapping[str, Any]) -> list[Failure]:
    """What failed in ``result``: nothing when it passed; for an ERROR result its error (from
    ``errorInfo``, the deprecated ``error`` else); for a FAIL each failing expectation, or the
    failing metric when no expectation failed."""
    outcome = result_outcome(result)
    if outcome == "PASS":
        return []
    if outcome == "ERROR":
        info = result.get("errorInfo")
        if isinstance(info, Mapping):
            return [Failure(None, "error", "", _error(info))]
        if isinstance(result.get("error"), Mapping):
            return [Failure(None, "error", "", str(result["error"].get("message", "error")))]
        state = result.get("executionState", "COMPLETED")
        if state == "COMPLETED":  # e.g. a golden with no judged expectation
            return [Failure(None, "verdict", "PASS or FAIL", "none: nothing was judged")]
        return [Failure(None, "error", "", f"execution {state}")]
    found = []
    if isinstance(result.get("goldenResult"), Mapping):
        found = _golden(result["goldenResult"])
    elif isinstance(result.get("scenarioResult"), Mapping):
        found = _scenario(result["scenarioResult"])
    return found or [Failure(None, "evaluation", "PASS", "FAIL")]
