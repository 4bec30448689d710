"""Scoring what the team's own agent did (docs/agents.md, "Scoring"), an approximation of the
hosted judge that needs no model: pure functions from the expectations and what was observed to
the outcomes and scores of a result; :func:`ces_eval.core.rerun.rerun` then applies the
evaluation's thresholds, as to every other result.

* Tool calls: an expectation takes the first observed call of the same tool (``tool``, or
  ``toolset_tool``) not taken yet; its parameter correctness is the share of the arguments named
  by either call whose values are equal (:func:`argument_score`): 1.0 for equal arguments, 0
  when the tool was not called. A golden turn's overall tool invocation score is the lowest of
  its calls'; calls no expectation took are recorded as extra tool calls.
* Agent responses: RapidFuzz's ``token_sort_ratio`` of the case-folded texts, mapped onto
  semantic similarity's 0 to 4 (:func:`similarity`), unless a judge scored it.
* Transfers: met when the agent reported one to the expected agent.
* Scenario expectations: a tool expectation is met by an observed call of its tool with equal
  arguments; an agent response expectation by an agent message of similarity 3 or more (the
  default success threshold), the most similar one recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from google.protobuf import json_format, struct_pb2
from rapidfuzz import fuzz, utils

from ces_eval.core import outcomes
from ces_eval.core.rerun import DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2, evaluation_pb2

__all__ = [
    "Observed",
    "argument_score",
    "identity",
    "score_golden_turn",
    "score_scenario",
    "similarity",
    "text_of",
]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_AGENT = "agent"


@dataclass
class Observed:
    """What the agent did in one turn (or a whole scenario): its chunks in order, the tool
    calls and transfers among them, its texts, and how long its calls took (ms)."""

    chunks: list[content_pb2.Chunk] = field(default_factory=list)
    calls: list[content_pb2.ToolCall] = field(default_factory=list)
    transfers: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    millis: int = 0

    @property
    def said(self) -> str:
        return " ".join(self.texts)


def similarity(expected: str, observed: str) -> int:
    """Semantic similarity on CES's 0 to 4 scale, approximated by word overlap: RapidFuzz's
    ``token_sort_ratio`` of the case-folded texts (0 to 100), one step per fifth of the range
    above 20 (20 or less: 0; above 80: 4)."""
    ratio = fuzz.token_sort_ratio(expected, observed, processor=utils.default_process)
    return max(0, min(4, math.ceil(ratio / 20) - 1))


def argument_score(expected: struct_pb2.Struct, observed: struct_pb2.Struct) -> float:
    """The share of the arguments named by either call whose values are equal (1.0 for two
    calls without arguments)."""
    wanted = json_format.MessageToDict(expected)
    given = json_format.MessageToDict(observed)
    keys = set(wanted) | set(given)
    if not keys:
        return 1.0
    equal = sum(1 for key in keys if key in wanted and key in given and wanted[key] == given[key])
    return equal / len(keys)


def identity(call: content_pb2.ToolCall | content_pb2.ToolResponse) -> object:
    """The tool a call or response names: its ``tool``, its ``toolset_tool``, else its
    display name."""
    kind = call.WhichOneof("tool_identifier")
    if kind == "toolset_tool":
        return (call.toolset_tool.toolset, call.toolset_tool.tool_id)
    return call.tool if kind == "tool" else call.display_name


def text_of(message: content_pb2.Message) -> str:
    return " ".join(chunk.text for chunk in message.chunks if chunk.WhichOneof("data") == "text")


@dataclass
class _Scores:
    """A turn's scores as its expectations are judged, and the calls not taken yet."""

    calls: list[content_pb2.ToolCall]
    said: str
    tools: list[float] = field(default_factory=list)
    similarities: list[int] = field(default_factory=list)


def score_golden_turn(
    turn: _Evaluation.GoldenTurn,
    observed: Observed,
    replay: _Result.GoldenResult.TurnReplayResult,
    judged_similarity: int | None = None,
) -> None:
    """Record the turn's expectation outcomes and scores from what the agent did;
    ``judged_similarity``: the judge's score, instead of the local one."""
    scores = _Scores(list(observed.calls), observed.said)
    for expectation in outcomes.expectations(turn):
        outcome = replay.expectation_outcome.add()
        outcome.expectation.CopyFrom(expectation)
        _judge(outcome, observed, scores)
    for extra in scores.calls:  # called, but expected by no expectation of the turn
        replay.expectation_outcome.add(observed_tool_call=extra)
    if scores.similarities:
        local = min(scores.similarities)
        replay.semantic_similarity_result.score = (
            local if judged_similarity is None else judged_similarity
        )
    if scores.tools:
        replay.overall_tool_invocation_result.tool_invocation_score = min(scores.tools)


def _judge(outcome: _Result.GoldenExpectationOutcome, observed: Observed, scores: _Scores) -> None:
    """Judge one expectation (``outcome.expectation``) against what the agent did."""
    expectation = outcome.expectation
    condition = expectation.WhichOneof("condition")
    if condition == "tool_call":
        expected = expectation.tool_call
        match = next((c for c in scores.calls if identity(c) == identity(expected)), None)
        score = 0.0
        if match is None:
            outcome.tool_invocation_result.explanation = "The expected tool was not called."
            outcome.outcome = _Result.FAIL
        else:
            scores.calls.remove(match)
            outcome.observed_tool_call.CopyFrom(match)
            score = argument_score(expected.args, match.args)
            if score < 1.0:
                outcome.tool_invocation_result.explanation = (
                    "The tool was called with other arguments."
                )
        outcome.tool_invocation_result.parameter_correctness_score = score
        scores.tools.append(score)
    elif condition == "agent_response":
        scores.similarities.append(similarity(text_of(expectation.agent_response), scores.said))
        outcome.observed_agent_response.CopyFrom(
            content_pb2.Message(role=_AGENT, chunks=[content_pb2.Chunk(text=scores.said)])
        )
    elif condition in ("tool_response", "mock_tool_response"):
        outcome.observed_tool_response.CopyFrom(getattr(expectation, condition))
        outcome.outcome = _Result.PASS
    elif condition == "agent_transfer":
        met = expectation.agent_transfer.target_agent in observed.transfers
        if met:
            outcome.observed_agent_transfer.CopyFrom(expectation.agent_transfer)
        outcome.outcome = _Result.PASS if met else _Result.FAIL
    else:  # updated variables: not observed here
        outcome.outcome = _Result.PASS


def score_scenario(
    scenario: _Evaluation.Scenario,
    observed: Observed,
    answers: list[content_pb2.Message],
    sent: list[content_pb2.ToolResponse],
    result: _Result.ScenarioResult,
) -> None:
    """Record the scenario's expectation outcomes: ``observed`` over the whole conversation,
    ``answers`` the agent's messages, ``sent`` the mock tool responses given to it."""
    calls = list(observed.calls)
    for expectation in scenario.scenario_expectations:
        outcome = result.expectation_outcomes.add(expectation=expectation)
        if expectation.WhichOneof("expectation") == "tool_expectation":
            wanted = expectation.tool_expectation.expected_tool_call
            match = next((c for c in calls if identity(c) == identity(wanted)), None)
            met = False
            if match is not None:
                calls.remove(match)
                outcome.observed_tool_call.tool_call.CopyFrom(match)
                reply = next((r for r in sent if r.id and r.id == match.id), None)
                if reply is not None:
                    outcome.observed_tool_call.tool_response.CopyFrom(reply)
                met = argument_score(wanted.args, match.args) == 1.0
            outcome.outcome = _Result.PASS if met else _Result.FAIL
            continue
        expected = text_of(expectation.agent_response)
        best = max(answers, key=lambda m: similarity(expected, text_of(m)), default=None)
        met = best is not None and (
            similarity(expected, text_of(best)) >= DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD
        )
        if best is not None:  # what it said, without its tool calls
            outcome.observed_agent_response.CopyFrom(
                content_pb2.Message(role=_AGENT, chunks=[content_pb2.Chunk(text=text_of(best))])
            )
        outcome.outcome = _Result.PASS if met else _Result.FAIL
