"""Recomputing a stored result's outcomes (src/ces_eval/core/engine/rerun.py).

Every case is hand-computed: the recorded result, the evaluation in force and the complete
expected result are written out, with every outcome as a literal. The recorded outcomes are
deliberately the opposite of the right ones wherever a rule recomputes them, so that a rule that
stops being applied shows up as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from google.protobuf import struct_pb2, text_format

from ces_eval.core.engine.rerun import rerun
from ces_eval.generated.google.cloud.ces.v1beta import (
    content_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)

R = evaluation_pb2.EvaluationResult
E = evaluation_pb2.Evaluation
T = evaluation_config_pb2.EvaluationMetricsThresholds
G = T.GoldenEvaluationMetricsThresholds
C = evaluation_config_pb2.EvaluationMetricsConfig

PASS, FAIL, SKIPPED, UNSET = R.PASS, R.FAIL, R.SKIPPED, R.OUTCOME_UNSPECIFIED
ENABLED, DISABLED = T.ENABLED, T.DISABLED

APP = "projects/p/locations/l/apps/a"


# --- builders -------------------------------------------------------------------------------------


def _call(tool: str, **args: float | str) -> content_pb2.ToolCall:
    call = content_pb2.ToolCall(tool=f"{APP}/tools/{tool}")
    call.args.update(args)
    return call


LOOKUP = _call("lookup", id=7)
PAY = _call("pay", amount=10)
HELLO = content_pb2.Message(role="agent", chunks=[content_pb2.Chunk(text="Hello!")])


def _tool_exp(
    call: content_pb2.ToolCall, *, skip: bool = False, threshold: float | None = None
) -> E.GoldenExpectation:
    expectation = E.GoldenExpectation(tool_call=call, skip_evaluation=skip)
    if threshold is not None:
        level = expectation.expectation_level_metrics_thresholds_override
        level.tool_invocation_parameter_correctness_threshold = threshold
    return expectation


def _agent_exp(
    *, skip: bool = False, comparison: int = C.COMPARISON_TYPE_UNSPECIFIED
) -> E.GoldenExpectation:
    return E.GoldenExpectation(
        agent_response=HELLO, skip_evaluation=skip, comparison_type=comparison
    )


def _tool_outcome(
    expectation: E.GoldenExpectation, score: float, outcome: int, tool_outcome: int
) -> R.GoldenExpectationOutcome:
    return R.GoldenExpectationOutcome(
        expectation=expectation,
        outcome=outcome,
        observed_tool_call=expectation.tool_call,
        tool_invocation_result=R.GoldenExpectationOutcome.ToolInvocationResult(
            parameter_correctness_score=score, outcome=tool_outcome, explanation="params"
        ),
    )


def _agent_outcome(expectation: E.GoldenExpectation, outcome: int) -> R.GoldenExpectationOutcome:
    return R.GoldenExpectationOutcome(
        expectation=expectation, outcome=outcome, observed_agent_response=HELLO
    )


def _extra_call(call: content_pb2.ToolCall, outcome: int) -> R.GoldenExpectationOutcome:
    """A tool call the run observed that no expectation expected."""
    return R.GoldenExpectationOutcome(outcome=outcome, observed_tool_call=call)


def _turn(
    *outcomes: R.GoldenExpectationOutcome,
    similarity: tuple[int, int] | None = None,
    overall: tuple[float, int] | None = None,
    hallucination: int | None = None,
) -> R.GoldenResult.TurnReplayResult:
    turn = R.GoldenResult.TurnReplayResult(conversation="c", expectation_outcome=outcomes)
    if similarity is not None:
        score, outcome = similarity
        turn.semantic_similarity_result.CopyFrom(
            R.SemanticSimilarityResult(score=score, outcome=outcome, label=str(score))
        )
    if overall is not None:
        tool_score, tool_outcome = overall
        turn.overall_tool_invocation_result.CopyFrom(
            R.OverallToolInvocationResult(tool_invocation_score=tool_score, outcome=tool_outcome)
        )
    if hallucination is not None:
        turn.hallucination_result.CopyFrom(R.HallucinationResult(score=hallucination))
    return turn


def _golden(
    *turns: R.GoldenResult.TurnReplayResult,
    status: int,
    state: int = R.COMPLETED,
    thresholds: T | None = None,
    expectation_results: tuple[int, ...] = (),
) -> R:
    return R(
        name=f"{APP}/evaluations/e/results/r",
        display_name="r",
        execution_state=state,
        evaluation_status=status,
        evaluation_metrics_thresholds=thresholds,
        golden_result=R.GoldenResult(
            turn_replay_results=turns,
            evaluation_expectation_results=[
                R.EvaluationExpectationResult(evaluation_expectation=f"{APP}/x/{i}", outcome=o)
                for i, o in enumerate(expectation_results)
            ],
        ),
    )


def _golden_turn(
    *expectations: E.GoldenExpectation,
    semantic: int | None = None,
    hallucination: int = T.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED,
) -> E.GoldenTurn:
    steps = [E.Step(user_input=content_pb2.SessionInput(text="Hi"))]
    steps += [E.Step(expectation=expectation) for expectation in expectations]
    turn = E.GoldenTurn(steps=steps, hallucination_metric_behavior_override=hallucination)
    if semantic is not None:
        turn.turn_level_metrics_thresholds_override.semantic_similarity_success_threshold = semantic
    return turn


def _evaluation(*turns: E.GoldenTurn, override: T | None = None) -> E:
    return E(
        name=f"{APP}/evaluations/e",
        display_name="e",
        golden=E.Golden(turns=turns),
        evaluation_metrics_threshold_override=override,
    )


def _thresholds(
    *,
    semantic: int | None = None,
    overall: float | None = None,
    parameter: float | None = None,
    extra: int = T.ToolMatchingSettings.EXTRA_TOOL_CALL_BEHAVIOR_UNSPECIFIED,
    golden_hallucination: int = T.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED,
    deprecated_hallucination: int = T.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED,
    scenario_hallucination: int = T.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED,
) -> T:
    thresholds = T(
        golden_hallucination_metric_behavior=golden_hallucination,
        hallucination_metric_behavior=deprecated_hallucination,
        scenario_hallucination_metric_behavior=scenario_hallucination,
    )
    golden = thresholds.golden_evaluation_metrics_thresholds
    if semantic is not None:
        golden.turn_level_metrics_thresholds.semantic_similarity_success_threshold = semantic
    if overall is not None:
        golden.turn_level_metrics_thresholds.overall_tool_invocation_correctness_threshold = overall
    if parameter is not None:
        level = golden.expectation_level_metrics_thresholds
        level.tool_invocation_parameter_correctness_threshold = parameter
    if extra:
        golden.tool_matching_settings.extra_tool_call_behavior = extra
    return thresholds


def _scenario(
    *outcomes: int,
    status: int,
    satisfied: bool | None = None,
    hallucinations: tuple[int, ...] = (),
    user_goal: int | None = None,
    thresholds: T | None = None,
) -> R:
    scenario = R.ScenarioResult(
        conversation="c",
        task="book a table",
        expectation_outcomes=[
            R.ScenarioExpectationOutcome(
                expectation=E.ScenarioExpectation(agent_response=HELLO),
                outcome=outcome,
                observed_agent_response=HELLO,
            )
            for outcome in outcomes
        ],
        hallucination_result=[R.HallucinationResult(score=score) for score in hallucinations],
    )
    if satisfied is not None:
        scenario.all_expectations_satisfied = satisfied
    if user_goal is not None:
        scenario.user_goal_satisfaction_result.score = user_goal
    return R(
        name=f"{APP}/evaluations/s/results/r",
        display_name="r",
        execution_state=R.COMPLETED,
        evaluation_status=status,
        evaluation_metrics_thresholds=thresholds,
        scenario_result=scenario,
    )


def _scenario_evaluation(override: T | None = None) -> E:
    return E(
        name=f"{APP}/evaluations/s",
        display_name="s",
        scenario=E.Scenario(task="book a table"),
        evaluation_metrics_threshold_override=override,
    )


@dataclass(frozen=True)
class Case:
    id: str
    result: R
    evaluation: E
    expected: R


def _assert_same(actual: R, expected: R) -> None:
    assert text_format.MessageToString(actual) == text_format.MessageToString(expected)
    assert actual == expected


# --- golden cases ---------------------------------------------------------------------------------

AGENT = _agent_exp()
TOOL_LOOKUP = _tool_exp(LOOKUP)
TOOL_PAY = _tool_exp(PAY)

SIMILARITY_CASES = [
    Case(
        "score 3 equals the default threshold 3: PASS",
        _golden(_turn(_agent_outcome(AGENT, FAIL), similarity=(3, FAIL)), status=FAIL),
        _evaluation(_golden_turn(AGENT)),
        _golden(_turn(_agent_outcome(AGENT, PASS), similarity=(3, PASS)), status=PASS),
    ),
    Case(
        "score 2 below the default threshold 3: FAIL",
        _golden(_turn(_agent_outcome(AGENT, PASS), similarity=(2, PASS)), status=PASS),
        _evaluation(_golden_turn(AGENT)),
        _golden(_turn(_agent_outcome(AGENT, FAIL), similarity=(2, FAIL)), status=FAIL),
    ),
    Case(
        "turn override raises turn 0 to 4; turn 1 keeps the default 3",
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(3, PASS)),
            _turn(_agent_outcome(AGENT, FAIL), similarity=(3, FAIL)),
            status=PASS,
        ),
        _evaluation(_golden_turn(AGENT, semantic=4), _golden_turn(AGENT)),
        _golden(
            _turn(_agent_outcome(AGENT, FAIL), similarity=(3, FAIL)),
            _turn(_agent_outcome(AGENT, PASS), similarity=(3, PASS)),
            status=FAIL,
        ),
    ),
    Case(
        "turn override 4 beats the evaluation override 2, which beats the recorded 4",
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(3, PASS)),
            _turn(_agent_outcome(AGENT, FAIL), similarity=(2, FAIL)),
            status=FAIL,
            thresholds=_thresholds(semantic=4),
        ),
        _evaluation(
            _golden_turn(AGENT, semantic=4), _golden_turn(AGENT), override=_thresholds(semantic=2)
        ),
        _golden(
            _turn(_agent_outcome(AGENT, FAIL), similarity=(3, FAIL)),
            _turn(_agent_outcome(AGENT, PASS), similarity=(2, PASS)),
            status=FAIL,
            thresholds=_thresholds(semantic=4),
        ),
    ),
    Case(
        "recorded threshold 4 applies when nothing overrides it",
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(3, PASS)),
            status=PASS,
            thresholds=_thresholds(semantic=4),
        ),
        _evaluation(_golden_turn(AGENT)),
        _golden(
            _turn(_agent_outcome(AGENT, FAIL), similarity=(3, FAIL)),
            status=FAIL,
            thresholds=_thresholds(semantic=4),
        ),
    ),
    Case(
        "agent response compared with EQUALS keeps its recorded outcome",
        _golden(
            _turn(_agent_outcome(_agent_exp(comparison=C.EQUALS), PASS), similarity=(1, PASS)),
            status=PASS,
        ),
        _evaluation(_golden_turn(_agent_exp(comparison=C.EQUALS))),
        _golden(
            _turn(_agent_outcome(_agent_exp(comparison=C.EQUALS), PASS), similarity=(1, FAIL)),
            status=FAIL,
        ),
    ),
]


def _with_own_similarity(
    outcome: R.GoldenExpectationOutcome, score: int, result: int
) -> R.GoldenExpectationOutcome:
    outcome.semantic_similarity_result.CopyFrom(
        R.SemanticSimilarityResult(score=score, outcome=result)
    )
    return outcome


SIMILARITY_CASES.append(
    Case(
        "without a turn score, the deprecated per-expectation similarity decides",
        _golden(
            _turn(_with_own_similarity(_agent_outcome(AGENT, PASS), 2, PASS)),
            status=PASS,
        ),
        _evaluation(_golden_turn(AGENT)),
        _golden(
            _turn(_with_own_similarity(_agent_outcome(AGENT, FAIL), 2, FAIL)),
            status=FAIL,
        ),
    )
)

TOOL_CASES = [
    Case(
        "expectation override 0.5 passes a score of 0.5; the default 1.0 fails it",
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.5, FAIL, FAIL),
                _tool_outcome(TOOL_PAY, 0.5, PASS, PASS),
            ),
            status=PASS,
        ),
        _evaluation(_golden_turn(_tool_exp(LOOKUP, threshold=0.5), TOOL_PAY)),
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.5, PASS, PASS),
                _tool_outcome(TOOL_PAY, 0.5, FAIL, FAIL),
            ),
            status=FAIL,
        ),
    ),
    Case(
        "expectation override 0.5 beats an evaluation-level 0.75",
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.5, FAIL, FAIL),
                _tool_outcome(TOOL_PAY, 0.5, PASS, PASS),
            ),
            status=PASS,
        ),
        _evaluation(
            _golden_turn(_tool_exp(LOOKUP, threshold=0.5), TOOL_PAY),
            override=_thresholds(parameter=0.75),
        ),
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.5, PASS, PASS),
                _tool_outcome(TOOL_PAY, 0.5, FAIL, FAIL),
            ),
            status=FAIL,
        ),
    ),
    Case(
        "the recorded expectation's override applies when the evaluation no longer has it",
        _golden(
            _turn(_tool_outcome(_tool_exp(LOOKUP, threshold=0.5), 0.5, FAIL, FAIL)),
            status=FAIL,
        ),
        _evaluation(_golden_turn(TOOL_PAY)),
        _golden(
            _turn(_tool_outcome(_tool_exp(LOOKUP, threshold=0.5), 0.5, PASS, PASS)),
            status=PASS,
        ),
    ),
    Case(
        "overall tool invocation score 0.5 fails the default threshold 1.0",
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), overall=(0.5, PASS)),
            status=PASS,
        ),
        _evaluation(_golden_turn(TOOL_LOOKUP)),
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), overall=(0.5, FAIL)),
            status=FAIL,
        ),
    ),
    Case(
        "overall tool invocation score 0.5 passes an evaluation override of 0.5",
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), overall=(0.5, FAIL)),
            status=FAIL,
        ),
        _evaluation(_golden_turn(TOOL_LOOKUP), override=_thresholds(overall=0.5)),
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), overall=(0.5, PASS)),
            status=PASS,
        ),
    ),
    Case(
        "a turn override of one threshold leaves the others to the next level",
        _golden(
            _turn(
                _agent_outcome(AGENT, PASS),
                _tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS),
                similarity=(3, PASS),
                overall=(0.5, FAIL),
            ),
            status=PASS,
        ),
        _evaluation(
            _golden_turn(AGENT, TOOL_LOOKUP, semantic=4), override=_thresholds(overall=0.5)
        ),
        _golden(
            _turn(
                _agent_outcome(AGENT, FAIL),
                _tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS),
                similarity=(3, FAIL),
                overall=(0.5, PASS),
            ),
            status=FAIL,
        ),
    ),
]

SKIP_CASES = [
    Case(
        "a skipped tool expectation is SKIPPED and not counted",
        _golden(
            _turn(
                _agent_outcome(AGENT, PASS),
                _tool_outcome(TOOL_LOOKUP, 0.0, FAIL, FAIL),
                similarity=(4, PASS),
            ),
            status=FAIL,
        ),
        _evaluation(_golden_turn(AGENT, _tool_exp(LOOKUP, skip=True))),
        _golden(
            _turn(
                _agent_outcome(AGENT, PASS),
                _tool_outcome(TOOL_LOOKUP, 0.0, SKIPPED, FAIL),
                similarity=(4, PASS),
            ),
            status=PASS,
        ),
    ),
    Case(
        "the overall tool check of a turn whose tool expectations are all skipped is not counted",
        _golden(
            _turn(
                _agent_outcome(AGENT, PASS),
                _tool_outcome(TOOL_LOOKUP, 0.0, FAIL, FAIL),
                similarity=(4, PASS),
                overall=(0.0, FAIL),
            ),
            status=FAIL,
        ),
        _evaluation(_golden_turn(AGENT, _tool_exp(LOOKUP, skip=True))),
        _golden(
            _turn(
                _agent_outcome(AGENT, PASS),
                _tool_outcome(TOOL_LOOKUP, 0.0, SKIPPED, FAIL),
                similarity=(4, PASS),
                overall=(0.0, FAIL),
            ),
            status=PASS,
        ),
    ),
    Case(
        "the similarity check of a turn whose agent responses are all skipped is not counted",
        _golden(
            _turn(
                _agent_outcome(AGENT, FAIL),
                _tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS),
                similarity=(1, FAIL),
            ),
            status=FAIL,
        ),
        _evaluation(_golden_turn(_agent_exp(skip=True), TOOL_LOOKUP)),
        _golden(
            _turn(
                _agent_outcome(AGENT, SKIPPED),
                _tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS),
                similarity=(1, FAIL),
            ),
            status=PASS,
        ),
    ),
    Case(
        "identical expectations are matched in order: only the first one is skipped",
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.0, FAIL, FAIL),
                _tool_outcome(TOOL_LOOKUP, 1.0, FAIL, FAIL),
            ),
            status=FAIL,
        ),
        _evaluation(_golden_turn(_tool_exp(LOOKUP, skip=True), TOOL_LOOKUP)),
        _golden(
            _turn(
                _tool_outcome(TOOL_LOOKUP, 0.0, SKIPPED, FAIL),
                _tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS),
            ),
            status=PASS,
        ),
    ),
    Case(
        "nothing evaluated keeps the recorded status",
        _golden(_turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS)), status=FAIL),
        _evaluation(_golden_turn(_tool_exp(LOOKUP, skip=True))),
        _golden(_turn(_tool_outcome(TOOL_LOOKUP, 1.0, SKIPPED, PASS)), status=FAIL),
    ),
    Case(
        "an observed custom payload is always SKIPPED",
        _golden(
            _turn(
                R.GoldenExpectationOutcome(outcome=FAIL, observed_payload=struct_pb2.Struct()),
                _agent_outcome(AGENT, PASS),
                similarity=(4, PASS),
            ),
            status=FAIL,
        ),
        _evaluation(_golden_turn(AGENT)),
        _golden(
            _turn(
                R.GoldenExpectationOutcome(outcome=SKIPPED, observed_payload=struct_pb2.Struct()),
                _agent_outcome(AGENT, PASS),
                similarity=(4, PASS),
            ),
            status=PASS,
        ),
    ),
]


def _hallucination_case(
    name: str,
    score: int,
    status: int,
    *,
    turn_behavior: int = T.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED,
    override: T | None = None,
    recorded: T | None = None,
) -> Case:
    """One passing agent response (similarity 4) plus a hallucination score; only the
    hallucination check can change the recorded status (the opposite of ``status``)."""
    recorded_status = FAIL if status == PASS else PASS
    return Case(
        name,
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(4, PASS), hallucination=score),
            status=recorded_status,
            thresholds=recorded,
        ),
        _evaluation(_golden_turn(AGENT, hallucination=turn_behavior), override=override),
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(4, PASS), hallucination=score),
            status=status,
            thresholds=recorded,
        ),
    )


HALLUCINATION_CASES = [
    _hallucination_case(
        "ENABLED: score 0 (not justified) fails",
        0,
        FAIL,
        override=_thresholds(golden_hallucination=ENABLED),
    ),
    _hallucination_case(
        "ENABLED: score 1 (justified) passes",
        1,
        PASS,
        override=_thresholds(golden_hallucination=ENABLED),
    ),
    _hallucination_case(
        "ENABLED: score -1 (no claim to assess) is not a check",
        -1,
        PASS,
        override=_thresholds(golden_hallucination=ENABLED),
    ),
    _hallucination_case(
        "DISABLED: score 0 is ignored",
        0,
        PASS,
        override=_thresholds(golden_hallucination=DISABLED),
    ),
    _hallucination_case("unspecified defaults to DISABLED: score 0 is ignored", 0, PASS),
    _hallucination_case(
        "turn override ENABLED beats evaluation DISABLED",
        0,
        FAIL,
        turn_behavior=ENABLED,
        override=_thresholds(golden_hallucination=DISABLED),
    ),
    _hallucination_case(
        "turn override DISABLED beats evaluation ENABLED",
        0,
        PASS,
        turn_behavior=DISABLED,
        override=_thresholds(golden_hallucination=ENABLED),
    ),
    _hallucination_case(
        "recorded deprecated hallucination_metric_behavior ENABLED applies to golden",
        0,
        FAIL,
        recorded=_thresholds(deprecated_hallucination=ENABLED),
    ),
    _hallucination_case(
        "golden_hallucination_metric_behavior beats the deprecated field of the same level",
        0,
        PASS,
        override=_thresholds(golden_hallucination=DISABLED, deprecated_hallucination=ENABLED),
    ),
    _hallucination_case(
        "scenario_hallucination_metric_behavior does not apply to golden",
        0,
        PASS,
        override=_thresholds(scenario_hallucination=ENABLED),
    ),
]


def _extra_call_case(name: str, extra: int, status: int, *, override: T | None = None) -> Case:
    recorded_status = FAIL if status == PASS else PASS
    return Case(
        name,
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), _extra_call(PAY, UNSET)),
            status=recorded_status,
        ),
        _evaluation(_golden_turn(TOOL_LOOKUP), override=override),
        _golden(
            _turn(_tool_outcome(TOOL_LOOKUP, 1.0, PASS, PASS), _extra_call(PAY, extra)),
            status=status,
        ),
    )


EXTRA_CALL_CASES = [
    _extra_call_case("default FAIL: an extra tool call fails the turn", FAIL, FAIL),
    _extra_call_case(
        "explicit FAIL: an extra tool call fails the turn",
        FAIL,
        FAIL,
        override=_thresholds(extra=T.ToolMatchingSettings.FAIL),
    ),
    _extra_call_case(
        "ALLOW: an extra tool call is SKIPPED and ignored",
        SKIPPED,
        PASS,
        override=_thresholds(extra=T.ToolMatchingSettings.ALLOW),
    ),
]

EXPECTATION_RESULT_CASES = [
    Case(
        "a failed evaluation expectation result fails the golden status",
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(4, PASS)),
            status=PASS,
            expectation_results=(PASS, FAIL, SKIPPED),
        ),
        _evaluation(_golden_turn(AGENT)),
        _golden(
            _turn(_agent_outcome(AGENT, PASS), similarity=(4, PASS)),
            status=FAIL,
            expectation_results=(PASS, FAIL, SKIPPED),
        ),
    ),
]

SCENARIO_CASES = [
    Case(
        "a failing scenario expectation: not all satisfied, FAIL",
        _scenario(PASS, FAIL, status=PASS, satisfied=True),
        _scenario_evaluation(),
        _scenario(PASS, FAIL, status=FAIL, satisfied=False),
    ),
    Case(
        "passing and skipped scenario expectations: all satisfied, PASS",
        _scenario(PASS, SKIPPED, status=FAIL, satisfied=False),
        _scenario_evaluation(),
        _scenario(PASS, SKIPPED, status=PASS, satisfied=True),
    ),
    Case(
        "only skipped scenario expectations: recorded satisfaction and status kept",
        _scenario(SKIPPED, status=FAIL),
        _scenario_evaluation(),
        _scenario(SKIPPED, status=FAIL),
    ),
    Case(
        "scenario hallucination ENABLED: a score of 0 fails",
        _scenario(PASS, status=PASS, satisfied=True, hallucinations=(1, 0)),
        _scenario_evaluation(_thresholds(scenario_hallucination=ENABLED)),
        _scenario(PASS, status=FAIL, satisfied=True, hallucinations=(1, 0)),
    ),
    Case(
        "scenario hallucination from the recorded thresholds",
        _scenario(
            PASS,
            status=PASS,
            hallucinations=(0,),
            thresholds=_thresholds(scenario_hallucination=ENABLED),
        ),
        _scenario_evaluation(),
        _scenario(
            PASS,
            status=FAIL,
            satisfied=True,
            hallucinations=(0,),
            thresholds=_thresholds(scenario_hallucination=ENABLED),
        ),
    ),
    Case(
        "golden hallucination behaviour does not apply to scenarios",
        _scenario(PASS, status=FAIL, satisfied=True, hallucinations=(0,)),
        _scenario_evaluation(_thresholds(golden_hallucination=ENABLED)),
        _scenario(PASS, status=PASS, satisfied=True, hallucinations=(0,)),
    ),
    Case(
        "user goal not satisfied (score 0) fails the scenario",
        _scenario(PASS, status=PASS, satisfied=True, user_goal=0),
        _scenario_evaluation(),
        _scenario(PASS, status=FAIL, satisfied=True, user_goal=0),
    ),
    Case(
        "user goal graceful handoff (score 2) passes the scenario",
        _scenario(status=FAIL, user_goal=2),
        _scenario_evaluation(),
        _scenario(status=PASS, user_goal=2),
    ),
]

# Each table of cases by what it covers: one test runs them all, named "<table>: <case>".
TABLES = {
    "semantic similarity": SIMILARITY_CASES,
    "tool invocation": TOOL_CASES,
    "skipped and unevaluated": SKIP_CASES,
    "hallucination": HALLUCINATION_CASES,
    "extra tool calls": EXTRA_CALL_CASES,
    "evaluation expectation results": EXPECTATION_RESULT_CASES,
    "scenario": SCENARIO_CASES,
}
ALL_CASES = [
    pytest.param(case, id=f"{table}: {case.id}")
    for table, cases in TABLES.items()
    for case in cases
]


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ALL_CASES)
def test_rerun_case(case: Case) -> None:
    _assert_same(rerun(case.result, case.evaluation), case.expected)


@pytest.mark.parametrize(
    "state", [R.EXECUTION_STATE_UNSPECIFIED, R.RUNNING, R.ERROR, R.CANCELLED, R.QUEUED]
)
def test_status_unchanged_unless_completed(state: int) -> None:
    result = _golden(
        _turn(_agent_outcome(AGENT, PASS), similarity=(2, PASS)), status=PASS, state=state
    )
    expected = _golden(
        _turn(_agent_outcome(AGENT, FAIL), similarity=(2, FAIL)), status=PASS, state=state
    )
    _assert_same(rerun(result, _evaluation(_golden_turn(AGENT))), expected)


def test_completed_result_without_outcome_keeps_status() -> None:
    result = R(name="r", execution_state=R.COMPLETED, evaluation_status=PASS)
    _assert_same(
        rerun(result, _evaluation()),
        R(name="r", execution_state=R.COMPLETED, evaluation_status=PASS),
    )


def test_input_not_mutated() -> None:
    result = _golden(
        _turn(
            _agent_outcome(AGENT, FAIL),
            _tool_outcome(TOOL_LOOKUP, 0.5, FAIL, FAIL),
            _extra_call(PAY, UNSET),
            similarity=(3, FAIL),
            overall=(0.5, PASS),
            hallucination=0,
        ),
        status=FAIL,
    )
    evaluation = _evaluation(
        _golden_turn(AGENT, _tool_exp(LOOKUP, threshold=0.5), semantic=3, hallucination=ENABLED),
        override=_thresholds(extra=T.ToolMatchingSettings.ALLOW, overall=0.5),
    )
    result_before = result.SerializeToString(deterministic=True)
    evaluation_before = evaluation.SerializeToString(deterministic=True)

    rerun_result = rerun(result, evaluation)

    assert rerun_result is not result
    assert rerun_result.evaluation_status == FAIL  # the hallucination fails it
    assert (
        rerun_result.golden_result.turn_replay_results[0].semantic_similarity_result.outcome == PASS
    )
    assert result.SerializeToString(deterministic=True) == result_before
    assert evaluation.SerializeToString(deterministic=True) == evaluation_before
    rerun_result.golden_result.turn_replay_results[0].conversation = "changed"
    assert result.golden_result.turn_replay_results[0].conversation == "c"


@pytest.mark.parametrize("case", ALL_CASES)
def test_rerun_is_idempotent(case: Case) -> None:
    once = rerun(case.result, case.evaluation)
    _assert_same(rerun(once, case.evaluation), once)


def test_switched_off_step_scores_leave_the_turns_check_and_stay_off() -> None:
    """Step level tool correctness off: each call SKIPPED and its score cleared, the turn's
    overall check still counted, on the first rerun and on a rerun of the rerun (where every
    call is a recorded SKIPPED); a call the user skips holds the turn's check out."""
    config = C()
    step = config.golden_metrics_config.step_tool_correctness_metrics_config
    step.enable_tool_correctness_metrics = False
    result = _golden(
        _turn(_tool_outcome(TOOL_LOOKUP, 0.5, PASS, PASS), overall=(0.5, PASS)), status=PASS
    )
    evaluation = _evaluation(_golden_turn(TOOL_LOOKUP))
    once = rerun(result, evaluation, config)
    [outcome] = once.golden_result.turn_replay_results[0].expectation_outcome
    assert outcome.outcome == SKIPPED and not outcome.HasField("tool_invocation_result")
    assert once.evaluation_status == FAIL  # the turn's 0.5 is below 1.0
    _assert_same(rerun(once, evaluation, config), once)
    skipped = _evaluation(_golden_turn(_tool_exp(LOOKUP, skip=True)))
    assert rerun(once, skipped, config).evaluation_status == FAIL  # nothing counted: kept
    assert rerun(result, skipped, config).evaluation_status == PASS  # nothing counted: kept


def _all_off() -> C:
    """A metrics config switching off every metric it has a message for."""
    config = C()
    golden = config.golden_metrics_config
    golden.semantic_similarity_metrics_config.SetInParent()
    golden.tool_correctness_metrics_config.SetInParent()
    golden.step_tool_correctness_metrics_config.SetInParent()
    config.scenario_metrics_config.user_goal_met_metrics_config.SetInParent()
    config.scenario_metrics_config.expectations_met_metrics_config.SetInParent()
    return config


@pytest.mark.parametrize("case", ALL_CASES)
def test_rerun_with_metrics_switched_off_is_idempotent_and_leaves_them_unset(case: Case) -> None:
    once = rerun(case.result, case.evaluation, _all_off())
    _assert_same(rerun(once, case.evaluation, _all_off()), once)
    for turn in once.golden_result.turn_replay_results:
        assert not turn.HasField("semantic_similarity_result")
        assert not turn.HasField("overall_tool_invocation_result")
        for outcome in turn.expectation_outcome:
            assert not outcome.HasField("tool_invocation_result")
            assert not outcome.HasField("semantic_similarity_result")
    scenario = once.scenario_result
    assert not scenario.HasField("user_goal_satisfaction_result")
    assert not scenario.HasField("all_expectations_satisfied")
    assert all(o.outcome == SKIPPED for o in scenario.expectation_outcomes)
