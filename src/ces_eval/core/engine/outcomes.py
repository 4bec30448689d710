"""What the run engine observes when it plays one repetition of an evaluation: the result and
the conversation it records (docs/semantics.md, "Evaluation runs" and "Scripted outcomes").

Without an agent of the app's own (:mod:`ces_eval.core.engine.agents`), by default the golden is the
truth: every expectation of a golden turn is observed as expected (tool calls with their
arguments, tool responses, agent responses, transfers) with full scores (semantic similarity 4,
parameter correctness and overall tool invocation 1.0, hallucination 1 "justified"), and a
scenario meets every scenario expectation, rubric and the user's goal. Latencies are
deterministic: a function of the evaluation's name, the repetition and the turn. An outcome
rule (:mod:`ces_eval.core.resources.outcome_rules`) that decides a repetition changes that:

* FAIL: the chosen expectation (``turn``, ``expectation``; by default the first expectation of
  the first turn that has one, or the first scenario expectation) observes something else:
  other arguments for a tool call (``observed.tool_args``, by default the expected ones with
  one more argument), other text for an agent response (``observed.text``), or no call at all
  (``observed.missing_tool_call``); its scores are the rule's, by default the failing ones
  (semantic similarity 1, parameter correctness 0). An expectation of another kind (a tool
  response, a transfer, variables) is recorded as FAIL. A scenario with no expectation fails
  its user goal (score 0) and is not completed.
* ERROR: the result does not execute: execution_state ERROR with the rule's ``error_info``
  (RUNTIME_FAILURE naming the rule when unset) and no outcome.
* PASS (or any rule): its scores apply to every turn, its ``hallucination_score`` and
  ``turn_latency`` too.

A scenario the agent starts (the app's ``scenario_conversation_initiator`` AGENT) opens its
conversation with the agent's :data:`GREETING`, before the user's task.

The outcomes and ``evaluation_status`` then follow from the scores by the same threshold rules
as RunEvaluationResultMetrics (:func:`ces_eval.core.engine.rerun.rerun`): one engine judges both,
and clears the metrics the metrics config in force switches off
(:mod:`ces_eval.core.engine.metrics_config`; a FAIL rule fails an expectation some metric
computed judges).
Pure: no I/O, the evaluation and the rule are not modified.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

from ces_eval.core.engine import metrics_config, rerun
from ces_eval.core.engine.metrics_config import Switches
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    content_pb2,
    conversation_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "GREETING",
    "Clock",
    "Play",
    "Played",
    "Player",
    "duration",
    "expectations",
    "input_chunks",
    "judged",
    "kind",
    "play",
    "user_message",
]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Rule = emulator_pb2.OutcomeRule
_Conversation = conversation_pb2.Conversation
_ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
_Settings = evaluation_config_pb2.EvaluationSettings
_FULL_SIMILARITY, _FAILED_SIMILARITY = 4, 1
_JUSTIFIED = 1
_USER_GOAL_SATISFIED, _USER_GOAL_NOT_SATISFIED = 1, 0
_AGENT = "agent"
_USER = "user"
# A default turn latency lies in [_LATENCY_FLOOR_MS, _LATENCY_FLOOR_MS + _LATENCY_SPREAD_MS).
_LATENCY_FLOOR_MS, _LATENCY_SPREAD_MS = 300, 900
_FAILED_ARGUMENT = "ces_eval_observed"  # the argument a failing tool call adds by default
_FAILED_TEXT = "(The agent answered something else.)"
# What the agent says first in a scripted scenario the agent starts (scenario_conversation_initiator
# AGENT; docs/semantics.md, "Apps", "What a run takes from its app").
GREETING = "Hello! How can I help you today?"


@dataclass(frozen=True)
class Play:
    """One repetition to play: which evaluation, which repetition, under which rule, recorded
    under which names, starting when."""

    evaluation: _Evaluation
    repetition: int
    rule: _Rule | None
    result_name: str
    conversation_name: str
    started: timestamp_pb2.Timestamp
    persona: evaluation_config_pb2.EvaluationPersona | None = None
    # The app's thresholds, recorded in the result and judging it where nothing closer is set.
    thresholds: evaluation_config_pb2.EvaluationMetricsThresholds | None = None
    # The app's evaluation settings: its metrics config, who starts a scenario, and the
    # scenarios' execution mode.
    settings: _Settings | None = None

    @property
    def metrics_config(self) -> evaluation_config_pb2.EvaluationMetricsConfig | None:
        """The app's metrics config (None: it sets none)."""
        return metrics_config.of_settings(self.settings)

    @property
    def switches(self) -> Switches:
        """The metrics the evaluation computes but for its expectations' own overrides."""
        return Switches.of(self.evaluation, self.metrics_config)

    @property
    def agent_starts(self) -> bool:
        """Whether the agent speaks first in a scenario (``scenario_conversation_initiator``
        AGENT; UNSPECIFIED is USER)."""
        return (
            self.settings is not None
            and self.settings.scenario_conversation_initiator == _Settings.AGENT
        )

    @property
    def execution_mode(self) -> _Settings.ScenarioExecutionMode.ValueType:
        """A scenario's execution mode: its own, else the app's, else QUALITY_OPTIMIZED."""
        own = self.evaluation.scenario.scenario_execution_mode
        if own:
            return own
        if self.settings is not None and self.settings.scenario_execution_mode:
            return self.settings.scenario_execution_mode
        return _Settings.QUALITY_OPTIMIZED


@dataclass(frozen=True)
class Played:
    """What a repetition recorded: its result (named, judged) and its conversation."""

    result: _Result
    conversation: _Conversation


def _millis(*key: object) -> int:
    """A deterministic latency in milliseconds for ``key``."""
    digest = hashlib.blake2b("/".join(map(str, key)).encode(), digest_size=8).digest()
    return _LATENCY_FLOOR_MS + int.from_bytes(digest, "big") % _LATENCY_SPREAD_MS


def duration(millis: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)


def _later(stamp: timestamp_pb2.Timestamp, millis: int) -> timestamp_pb2.Timestamp:
    moved = timestamp_pb2.Timestamp()
    moved.FromMicroseconds(stamp.ToMicroseconds() + millis * 1000)
    return moved


@dataclass
class Clock:
    """The played conversation's time: each turn advances it by its latency."""

    at: timestamp_pb2.Timestamp

    def advance(self, latency: duration_pb2.Duration) -> tuple[timestamp_pb2.Timestamp, int]:
        millis = latency.ToMilliseconds()
        start = self.at
        self.at = _later(start, millis)
        return start, millis


def expectations(turn: _Evaluation.GoldenTurn) -> list[_Evaluation.GoldenExpectation]:
    return [step.expectation for step in turn.steps if step.WhichOneof("step") == "expectation"]


def _failing_position(
    evaluation: _Evaluation, rule: _Rule, switches: Switches
) -> tuple[int, int] | None:
    """The (turn, expectation) a FAIL rule fails in a golden: the one it names (``turn`` by
    default the first turn with a judged expectation, ``expectation`` by default 0) when that
    expectation is judged (not skipped, and judged by a metric computed), else the first judged
    one of that turn, else the first judged one; None when the golden judges none."""
    judged = [
        (index, position)
        for index, turn in enumerate(evaluation.golden.turns)
        for position, expectation in enumerate(expectations(turn))
        if not expectation.skip_evaluation and switches.judges(expectation)
    ]
    if not judged:
        return None
    turn = rule.turn if rule.HasField("turn") else judged[0][0]
    if (turn, rule.expectation) in judged:
        return turn, rule.expectation
    of_turn = [place for place in judged if place[0] == turn]
    return of_turn[0] if of_turn else judged[0]


def _other_args(expected: content_pb2.ToolCall, rule: _Rule) -> struct_pb2.Struct:
    if rule.observed.HasField("tool_args"):
        return rule.observed.tool_args
    args = struct_pb2.Struct()
    args.CopyFrom(expected.args)
    args.fields[_FAILED_ARGUMENT].string_value = "other"
    return args


def _text_message(text: str) -> content_pb2.Message:
    return content_pb2.Message(role=_AGENT, chunks=[content_pb2.Chunk(text=text)])


def _observe(
    outcome: _Result.GoldenExpectationOutcome,
    failing: _Rule | None,
    played: list[content_pb2.Chunk],
) -> None:
    """Fill in what ``outcome``'s expectation observed: what it expected, or (``failing``) what
    the rule says was observed instead. ``played`` gathers the agent's chunks of the turn."""
    expectation = outcome.expectation
    condition = expectation.WhichOneof("condition")
    observed = failing.observed.WhichOneof("observed") if failing is not None else None
    if condition == "tool_call":
        score = 1.0
        if failing is not None:
            score = 0.0
            if failing.HasField("tool_invocation_score"):
                score = failing.tool_invocation_score
        outcome.tool_invocation_result.parameter_correctness_score = score
        if observed == "missing_tool_call":
            outcome.tool_invocation_result.explanation = "The expected tool was not called."
            outcome.outcome = _Result.FAIL
            return
        outcome.observed_tool_call.CopyFrom(expectation.tool_call)
        if failing is not None:
            outcome.observed_tool_call.args.CopyFrom(_other_args(expectation.tool_call, failing))
        played.append(content_pb2.Chunk(tool_call=outcome.observed_tool_call))
    elif condition == "agent_response":
        if failing is not None:
            text = failing.observed.text if observed == "text" else _FAILED_TEXT
            outcome.observed_agent_response.CopyFrom(_text_message(text))
        else:
            outcome.observed_agent_response.CopyFrom(expectation.agent_response)
        played.extend(outcome.observed_agent_response.chunks)
    elif condition in ("tool_response", "mock_tool_response"):
        outcome.observed_tool_response.CopyFrom(getattr(expectation, condition))
        played.append(content_pb2.Chunk(tool_response=outcome.observed_tool_response))
    elif condition == "agent_transfer":
        outcome.observed_agent_transfer.CopyFrom(expectation.agent_transfer)
        played.append(content_pb2.Chunk(agent_transfer=expectation.agent_transfer))
    elif condition == "updated_variables":
        played.append(content_pb2.Chunk(updated_variables=expectation.updated_variables))
    # Not judged by a score (rerun keeps it): recorded as met or, failing, as not met.
    outcome.outcome = _Result.FAIL if failing is not None else _Result.PASS


def input_chunks(given: content_pb2.SessionInput) -> list[content_pb2.Chunk]:
    """A user's input as the chunks a conversation records of it (DTMF digits as text)."""
    kind = given.WhichOneof("input_type")
    if kind in ("text", "dtmf"):
        return [content_pb2.Chunk(text=getattr(given, kind))]
    if kind == "variables":
        return [content_pb2.Chunk(updated_variables=given.variables)]
    if kind == "image":
        return [content_pb2.Chunk(image=given.image)]
    if kind == "blob":
        return [content_pb2.Chunk(blob=given.blob)]
    if kind == "tool_responses":
        return [content_pb2.Chunk(tool_response=r) for r in given.tool_responses.tool_responses]
    return []


def user_message(turn: _Evaluation.GoldenTurn) -> content_pb2.Message | None:
    """The user's message of a golden turn: its user_input steps' chunks (None without any)."""
    chunks = [
        chunk
        for step in turn.steps
        if step.WhichOneof("step") == "user_input"
        for chunk in input_chunks(step.user_input)
    ]
    return content_pb2.Message(role=_USER, chunks=chunks) if chunks else None


def _turn_latency(play: Play, index: int) -> duration_pb2.Duration:
    rule = play.rule
    if rule is not None and rule.HasField("turn_latency"):
        return rule.turn_latency
    return duration(_millis(play.evaluation.name, play.repetition, index))


def _tool_latencies(
    chunks: Sequence[content_pb2.Chunk], start: timestamp_pb2.Timestamp, millis: int
) -> list[_Result.ToolCallLatency]:
    """One latency per tool call of the turn: the calls share the turn's first half."""
    calls = [chunk.tool_call for chunk in chunks if chunk.WhichOneof("data") == "tool_call"]
    latencies = []
    share = millis // 2 // max(len(calls), 1)
    at = start
    for call in calls:
        end = _later(at, share)
        latencies.append(
            _Result.ToolCallLatency(
                tool=call.tool,
                display_name=call.display_name or call.tool.rsplit("/", 1)[-1],
                start_time=at,
                end_time=end,
                execution_latency=duration(share),
            )
        )
        at = end
    return latencies


def _golden(play: Play) -> tuple[_Result.GoldenResult, list[_Conversation.Turn]]:
    rule = play.rule
    failing = rule if rule is not None and rule.outcome == _Rule.FAIL else None
    fail_at = None
    if failing is not None:
        fail_at = _failing_position(play.evaluation, failing, play.switches)
    golden = _Result.GoldenResult()
    turns: list[_Conversation.Turn] = []
    for index, turn in enumerate(play.evaluation.golden.turns):
        replay = golden.turn_replay_results.add(conversation=play.conversation_name)
        agent: list[content_pb2.Chunk] = []
        of_turn = expectations(turn)
        failed_kind = None  # the condition of the expectation failing in this turn
        for position, expectation in enumerate(of_turn):
            outcome = replay.expectation_outcome.add()
            outcome.expectation.CopyFrom(expectation)
            fails = fail_at == (index, position)
            failed_kind = expectation.WhichOneof("condition") if fails else failed_kind
            _observe(outcome, failing if fails else None, agent)
        kinds = {expectation.WhichOneof("condition") for expectation in of_turn}
        failed_here = failed_kind is not None
        scoring = failing if failed_here else (rule if failing is None else None)
        if "agent_response" in kinds:
            similarity = _FULL_SIMILARITY
            if failed_kind == "agent_response":
                similarity = _FAILED_SIMILARITY
            if scoring is not None and scoring.HasField("semantic_similarity_score"):
                similarity = scoring.semantic_similarity_score
            replay.semantic_similarity_result.score = similarity
            replay.hallucination_result.score = _JUSTIFIED
        if "tool_call" in kinds:
            tool_scores = [
                o.tool_invocation_result.parameter_correctness_score
                for o in replay.expectation_outcome
                if o.expectation.WhichOneof("condition") == "tool_call"
            ]
            replay.overall_tool_invocation_result.tool_invocation_score = min(tool_scores)
        if rule is not None and rule.HasField("hallucination_score"):
            replay.hallucination_result.score = rule.hallucination_score
        messages = [m for m in (user_message(turn),) if m is not None]
        if agent:
            messages.append(content_pb2.Message(role=_AGENT, chunks=agent))
        turns.append(_Conversation.Turn(messages=messages))
    for listed in play.evaluation.golden.evaluation_expectations:
        golden.evaluation_expectation_results.add(
            evaluation_expectation=listed,
            outcome=_Result.PASS,
            explanation="Met: the agent behaved as the golden expects.",
        )
    return golden, turns


def _scenario(play: Play) -> tuple[_Result.ScenarioResult, list[_Conversation.Turn]]:
    scenario = play.evaluation.scenario
    rule = play.rule
    failing = rule if rule is not None and rule.outcome == _Rule.FAIL else None
    fail_at = failing.expectation if failing is not None else None  # 0 unless it says
    result = _Result.ScenarioResult(
        conversation=play.conversation_name, task=scenario.task, user_facts=scenario.user_facts
    )
    turns = [
        _Conversation.Turn(
            messages=[
                content_pb2.Message(role=_USER, chunks=[content_pb2.Chunk(text=scenario.task)])
            ]
        )
    ]
    if play.agent_starts:
        turns.insert(0, _Conversation.Turn(messages=[_text_message(GREETING)]))
    for index, expectation in enumerate(scenario.scenario_expectations):
        fails = fail_at == index
        outcome = result.expectation_outcomes.add(
            expectation=expectation, outcome=_Result.FAIL if fails else _Result.PASS
        )
        chunks: list[content_pb2.Chunk] = []
        if expectation.WhichOneof("expectation") == "tool_expectation":
            tool = expectation.tool_expectation
            observed = failing.observed.WhichOneof("observed") if fails and failing else None
            if observed != "missing_tool_call":
                call = outcome.observed_tool_call.tool_call
                call.CopyFrom(tool.expected_tool_call)
                if fails and failing is not None:
                    call.args.CopyFrom(_other_args(tool.expected_tool_call, failing))
                outcome.observed_tool_call.tool_response.CopyFrom(tool.mock_tool_response)
                chunks += [
                    content_pb2.Chunk(tool_call=call),
                    content_pb2.Chunk(tool_response=tool.mock_tool_response),
                ]
        else:
            if fails and failing is not None:
                text = failing.observed.text or _FAILED_TEXT
                outcome.observed_agent_response.CopyFrom(_text_message(text))
            else:
                outcome.observed_agent_response.CopyFrom(expectation.agent_response)
            chunks += outcome.observed_agent_response.chunks
        turns.append(_Conversation.Turn(messages=[content_pb2.Message(role=_AGENT, chunks=chunks)]))
    failed = failing is not None  # a failed scenario fails its goal and its rubrics
    for rubric in scenario.rubrics:
        result.rubric_outcomes.add(
            rubric=rubric,
            score=0.0 if failed else 1.0,
            score_explanation="Not met." if failed else "Met: the agent did as the rubric asks.",
        )
    user_goal = _USER_GOAL_NOT_SATISFIED if failed else _USER_GOAL_SATISFIED
    result.user_goal_satisfaction_result.score = user_goal
    result.user_goal_satisfaction_result.label = "Not satisfied" if failed else "Satisfied"
    result.task_completed = not failed
    justified = _JUSTIFIED
    if rule is not None and rule.HasField("hallucination_score"):
        justified = rule.hallucination_score
    result.hallucination_result.add(score=justified)
    for listed in scenario.evaluation_expectations:
        result.evaluation_expectation_results.add(
            evaluation_expectation=listed,
            outcome=_Result.FAIL if failed else _Result.PASS,
        )
    return result, turns


def _error_info(rule: _Rule) -> _ErrorInfo:
    """The rule's error, what it leaves unset the default's: RUNTIME_FAILURE, a message naming
    the rule."""
    found = _ErrorInfo(
        error_type=_ErrorInfo.RUNTIME_FAILURE,
        error_message=f"Scripted error (outcome rule {rule.name}).",
    )
    found.MergeFrom(rule.error_info)
    return found


def _judged(given: Play) -> Played:
    """What ``given`` observes, judged, before its names and times: everything that depends
    only on the evaluation, the rule and the persona (the same for every repetition)."""
    evaluation = given.evaluation
    result = _Result()
    conversation = _Conversation(
        source=_Conversation.EVAL,
        channel_type=_Conversation.TEXT,
        input_types=[_Conversation.INPUT_TYPE_TEXT],
    )
    rule = given.rule
    if rule is not None and rule.outcome == _Rule.ERROR:
        result.execution_state = _Result.ERROR
        result.error_info.CopyFrom(_error_info(rule))
        getattr(result, kind(evaluation)).SetInParent()
        return Played(result, conversation)
    if evaluation.WhichOneof("inputs") == "scenario":
        scenario, turns = _scenario(given)
        result.scenario_result.CopyFrom(scenario)
        if given.persona is not None:
            result.persona.CopyFrom(given.persona)
    else:
        golden, turns = _golden(given)
        result.golden_result.CopyFrom(golden)
    result.execution_state = _Result.COMPLETED
    if rule is not None and rule.outcome == _Rule.FAIL:
        result.evaluation_status = _Result.FAIL  # stands when nothing is judged
    conversation.turns.extend(turns)
    return Played(judged(result, given), conversation)


def judged(result: _Result, given: Play) -> _Result:
    """``result`` judged (:func:`ces_eval.core.engine.rerun.rerun`) with the app's thresholds
    of ``given`` recorded in it, under the metrics config in force."""
    if given.thresholds is not None:
        result.evaluation_metrics_thresholds.CopyFrom(given.thresholds)
    return rerun.rerun(result, given.evaluation, given.metrics_config)


def _timed(judged: Played, given: Play) -> Played:
    """``judged`` as ``given`` records it: its names, its start, and each turn's latency, tool
    call latencies and message times (a turn's clock starts where the turn before ended)."""
    result = _Result()
    result.CopyFrom(judged.result)
    result.name = given.result_name
    result.create_time.CopyFrom(given.started)
    conversation = _Conversation()
    conversation.CopyFrom(judged.conversation)
    conversation.name = given.conversation_name
    conversation.start_time.CopyFrom(given.started)
    clock = Clock(given.started)
    played_kind = result.WhichOneof("result")
    if result.execution_state != _Result.ERROR and played_kind == "golden_result":
        replays = result.golden_result.turn_replay_results
        for index, (replay, turn) in enumerate(zip(replays, conversation.turns, strict=True)):
            replay.conversation = given.conversation_name
            latency = _turn_latency(given, index)
            replay.turn_latency.CopyFrom(latency)
            start, millis = clock.advance(latency)
            for message in turn.messages:
                message.event_time.CopyFrom(start if message.role == _USER else clock.at)
                if message.role == _AGENT:
                    replay.tool_call_latencies.extend(
                        _tool_latencies(message.chunks, start, millis)
                    )
    elif result.execution_state != _Result.ERROR:
        scenario = result.scenario_result
        scenario.conversation = given.conversation_name
        answered = 0  # the agent's turns so far (its greeting, then its answers)
        for turn in conversation.turns:
            [message] = turn.messages
            if message.role == _USER:  # said at once
                message.event_time.CopyFrom(clock.at)
                continue
            start, millis = clock.advance(_turn_latency(given, answered))
            answered += 1
            message.event_time.CopyFrom(clock.at)
            scenario.tool_call_latencies.extend(_tool_latencies(message.chunks, start, millis))
    conversation.end_time.CopyFrom(clock.at)
    return Played(result, conversation)


class Player:
    """Plays repetitions, judging each evaluation once per rule and persona: repetitions
    differ only in names and times (:func:`_timed`). For one run, whose evaluations and rules
    do not change while it plays (rules are identified by name)."""

    def __init__(self) -> None:
        self._judged: dict[tuple[str, str, str], Played] = {}

    def play(self, given: Play) -> Played:
        """Play one repetition (see the module): its judged result, named
        ``given.result_name`` (the run's fields are the caller's to add), and the
        conversation it recorded."""
        key = (
            given.evaluation.name,
            given.rule.name if given.rule is not None else "",
            given.persona.name if given.persona is not None else "",
        )
        judged = self._judged.get(key)
        if judged is None:
            judged = self._judged[key] = _judged(given)
        return _timed(judged, given)


def play(given: Play) -> Played:
    """Play one repetition on its own (:meth:`Player.play`)."""
    return Player().play(given)


def kind(evaluation: _Evaluation) -> str:
    return "scenario_result" if evaluation.WhichOneof("inputs") == "scenario" else "golden_result"
