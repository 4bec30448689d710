"""Scoring what the team's own agent did (docs/agents.md, "Scoring"), an approximation of the
hosted judge that needs no model: pure functions from the expectations and what was observed to
the outcomes and scores of a result; :func:`ces_eval.core.engine.rerun.rerun` then applies the
evaluation's thresholds, as to every other result.

* Tool calls: an expectation takes the first observed call of the same tool (``tool``, or
  ``toolset_tool``) not taken yet; its parameter correctness is the share of the arguments named
  by either call whose values are equal (:func:`argument_score`): 1.0 for equal arguments, 0
  when the tool was not called. A golden turn's overall tool invocation score is the lowest of
  its calls'; calls no expectation took are recorded as extra tool calls.
* Agent responses: RapidFuzz's ``token_sort_ratio`` of the case-folded texts, mapped onto
  semantic similarity's 0 to 4 (:func:`similarity`), unless a judge scored it. Of a text longer
  than :data:`COMPARED_CHARS` only its beginning is compared (RapidFuzz holds the interpreter
  for the product of the two lengths), and the ratio is at most what the two lengths allow; each
  text is prepared once, however many expectations it is compared with.
* Transfers: met when the agent reported one to the expected agent.
* Scenario expectations: a tool expectation is met by an observed call of its tool with equal
  arguments; an agent response expectation by an agent message of similarity 3 or more (the
  default success threshold), the most similar one recorded.

Matching is linear: observed calls and responses are indexed by the tool they name
(:class:`ByTool`). What scoring records is spent from a :class:`Budget` as it is added, so a
result that would pass its bound stops growing at once (:class:`Overflow`; docs/agents.md,
"Bounds").
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from google.protobuf import json_format, struct_pb2
from rapidfuzz import fuzz, utils

from ces_eval.contract.limits import MAX_REPEATED
from ces_eval.core.engine import outcomes
from ces_eval.core.engine.metrics_config import Switches
from ces_eval.core.engine.rerun import DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2, evaluation_pb2

if TYPE_CHECKING:
    from collections.abc import Iterable

    from google.protobuf.message import Message

__all__ = [
    "COMPARED_CHARS",
    "Budget",
    "ByTool",
    "Observed",
    "Overflow",
    "Text",
    "argument_score",
    "identity",
    "score_golden_turn",
    "score_scenario",
    "similar",
    "similarity",
    "text_of",
]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_AGENT = "agent"
# Characters of a text compared by similarity(): RapidFuzz's ratio of two texts this long takes
# about half a millisecond (two of 262,144 and 4.1 million characters took 20 s, all of it
# holding the interpreter).
COMPARED_CHARS = 10_000
_Item = TypeVar("_Item", content_pb2.ToolCall, content_pb2.ToolResponse)


class Overflow(Exception):
    """What is being recorded would pass its bound; the message says which, briefly."""


class Budget:
    """The bytes one record (a result, a conversation) may still take, spent as it is built,
    and the count limit of its lists: :class:`Overflow` at the first step past either, so
    nothing larger than the record's bound is ever built."""

    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit
        self.left = limit

    def spend(self, message: Message, extra: int = 0) -> None:
        """Spend ``message``'s serialized size (and ``extra`` bytes)."""
        self.left -= message.ByteSize() + extra
        if self.left < 0:
            raise Overflow(
                f"The {self.what} would pass {self.limit} bytes, the most this server stores "
                "of one."
            )

    def count(self, entries: int, what: str) -> None:
        """Refuse a list of ``what`` holding more than the write path allows (MAX_REPEATED)."""
        if entries > MAX_REPEATED:
            raise Overflow(f"The {self.what} would hold more than {MAX_REPEATED} {what}.")


class ByTool(Generic[_Item]):
    """Tool calls (or responses) by the tool they name, in order: each :meth:`take` is one
    dictionary look-up, whatever the number of them (they were matched pairwise: 40,000 calls
    against 999 responses took 16 s)."""

    def __init__(self, items: Iterable[_Item]) -> None:
        self._items: list[_Item] = list(items)
        self._taken: set[int] = set()
        self._by_tool: dict[object, deque[int]] = {}
        for index, item in enumerate(self._items):
            self._by_tool.setdefault(identity(item), deque()).append(index)

    def take(self, tool: object) -> _Item | None:
        """The first item naming ``tool`` not taken yet (now taken), None when none is left."""
        waiting = self._by_tool.get(tool)
        if not waiting:
            return None
        index = waiting.popleft()
        self._taken.add(index)
        return self._items[index]

    def left(self) -> list[_Item]:
        """The items no :meth:`take` took, in order."""
        return [item for index, item in enumerate(self._items) if index not in self._taken]


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


@dataclass(frozen=True)
class Text:
    """A text as :func:`similar` compares it: its length, and its first COMPARED_CHARS
    characters case-folded (RapidFuzz's ``default_process``) with their words sorted, which is
    what ``token_sort_ratio`` compares."""

    length: int
    words: str

    @classmethod
    def of(cls, text: str) -> Text:
        processed = utils.default_process(text[:COMPARED_CHARS])
        return cls(len(text), " ".join(sorted(processed.split())))


def similar(expected: Text, observed: Text) -> int:
    """Semantic similarity on CES's 0 to 4 scale, approximated by word overlap: RapidFuzz's
    ``token_sort_ratio`` of the case-folded texts (0 to 100), one step per fifth of the range
    above 20 (20 or less: 0; above 80: 4). When a text is longer than COMPARED_CHARS, the ratio
    of their beginnings counts, at most what their lengths allow (the ratio of two texts is at
    most twice the shorter length over the sum of both)."""
    ratio = fuzz.ratio(expected.words, observed.words)
    shorter, longer = sorted((expected.length, observed.length))
    if longer > COMPARED_CHARS:
        ratio = min(ratio, 200 * shorter / (shorter + longer))
    return max(0, min(4, math.ceil(ratio / 20) - 1))


def similarity(expected: str, observed: str) -> int:
    """:func:`similar` of two texts."""
    return similar(Text.of(expected), Text.of(observed))


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

    calls: ByTool[content_pb2.ToolCall]
    said: str
    said_text: Text
    switches: Switches
    tools: list[float] = field(default_factory=list)
    similarities: list[int] = field(default_factory=list)


def score_golden_turn(
    turn: _Evaluation.GoldenTurn,
    observed: Observed,
    replay: _Result.GoldenResult.TurnReplayResult,
    judged_similarity: int | None = None,
    *,
    budget: Budget | None = None,
    switches: Switches | None = None,
) -> None:
    """Record the turn's expectation outcomes and scores from what the agent did;
    ``judged_similarity``: the judge's score, instead of the local one. Each outcome is spent
    from ``budget`` as it is added. The turn's similarity is the lowest of the agent response
    expectations that compute it (``switches``: the metrics config in force; all by
    default)."""
    said = observed.said
    scores = _Scores(ByTool(observed.calls), said, Text.of(said), switches or Switches())
    expectations = outcomes.expectations(turn)
    extras = scores.calls.left
    for expectation in expectations:
        outcome = replay.expectation_outcome.add()
        outcome.expectation.CopyFrom(expectation)
        _judge(outcome, observed, scores)
        if budget is not None:
            budget.spend(outcome, 8)
    left = extras()
    if budget is not None:
        budget.count(len(expectations) + len(left), "expectation outcomes in a turn")
    for extra in left:  # called, but expected by no expectation of the turn
        outcome = replay.expectation_outcome.add(observed_tool_call=extra)
        if budget is not None:
            budget.spend(outcome, 8)
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
        match = scores.calls.take(identity(expected))
        score = 0.0
        if match is None:
            outcome.tool_invocation_result.explanation = "The expected tool was not called."
            outcome.outcome = _Result.FAIL
        else:
            outcome.observed_tool_call.CopyFrom(match)
            score = argument_score(expected.args, match.args)
            if score < 1.0:
                outcome.tool_invocation_result.explanation = (
                    "The tool was called with other arguments."
                )
        outcome.tool_invocation_result.parameter_correctness_score = score
        scores.tools.append(score)
    elif condition == "agent_response":
        if scores.switches.similarity(expectation):
            expected_text = Text.of(text_of(expectation.agent_response))
            scores.similarities.append(similar(expected_text, scores.said_text))
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
    *,
    budget: Budget | None = None,
) -> None:
    """Record the scenario's expectation outcomes: ``observed`` over the whole conversation,
    ``answers`` the agent's messages, ``sent`` the mock tool responses given to it. Each
    outcome is spent from ``budget`` as it is added."""
    calls = ByTool(observed.calls)
    replies: dict[str, content_pb2.ToolResponse] = {}
    for reply in sent:
        if reply.id:
            replies.setdefault(reply.id, reply)
    said = [text_of(answer) for answer in answers]
    prepared = [Text.of(text) for text in said]
    for expectation in scenario.scenario_expectations:
        outcome = result.expectation_outcomes.add(expectation=expectation)
        if expectation.WhichOneof("expectation") == "tool_expectation":
            wanted = expectation.tool_expectation.expected_tool_call
            match = calls.take(identity(wanted))
            met = False
            if match is not None:
                outcome.observed_tool_call.tool_call.CopyFrom(match)
                found = replies.get(match.id) if match.id else None
                if found is not None:
                    outcome.observed_tool_call.tool_response.CopyFrom(found)
                met = argument_score(wanted.args, match.args) == 1.0
        else:
            expected = Text.of(text_of(expectation.agent_response))
            scored = [similar(expected, text) for text in prepared]
            best = max(range(len(scored)), key=scored.__getitem__, default=None)
            met = best is not None and (
                scored[best] >= DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD
            )
            if best is not None:  # what it said, without its tool calls
                outcome.observed_agent_response.CopyFrom(
                    content_pb2.Message(role=_AGENT, chunks=[content_pb2.Chunk(text=said[best])])
                )
        outcome.outcome = _Result.PASS if met else _Result.FAIL
        if budget is not None:
            budget.spend(outcome, 8)
