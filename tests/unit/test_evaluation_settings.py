"""What a run takes from its app's ``evaluation_settings`` beyond its request's defaults, through
the core over a real SQLite file (src/ces_eval/core/engine/metrics_config.py, rerun.py,
outcomes.py): the metrics config, resolved per metric from the expectation's override, the
evaluation's, the app's, then the default (computed), applied alike by scripted play and by
RunEvaluationResultMetrics; and who starts a scripted scenario's conversation."""

from __future__ import annotations

from typing import Any

from google.protobuf import field_mask_pb2

from ces_eval.core.aip.stamps import now
from ces_eval.core.engine import outcomes
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2 as agent_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    app_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit import test_running as running
from tests.unit.test_apps import Apps, core
from tests.unit.test_core import APP

__all__ = ["core"]  # the fixture, used by name

Rule = emulator_pb2.OutcomeRule
Result = evaluation_pb2.EvaluationResult
Evaluation = evaluation_pb2.Evaluation
C = evaluation_config_pb2.EvaluationMetricsConfig
Settings = evaluation_config_pb2.EvaluationSettings
Thresholds = evaluation_config_pb2.EvaluationMetricsThresholds
PASS, FAIL, SKIPPED = Result.PASS, Result.FAIL, Result.SKIPPED


def _config(**switches: bool) -> C:
    """A metrics config holding the messages named (``similarity``, ``tools``, ``steps``,
    ``user_goal``, ``expectations``), each with its flag as given."""
    config = C()
    golden, scenario = config.golden_metrics_config, config.scenario_metrics_config
    messages: dict[str, tuple[Any, str]] = {
        "similarity": (
            golden.semantic_similarity_metrics_config,
            "enable_semantic_similarity_metrics",
        ),
        "tools": (golden.tool_correctness_metrics_config, "enable_tool_correctness_metrics"),
        "steps": (golden.step_tool_correctness_metrics_config, "enable_tool_correctness_metrics"),
        "user_goal": (scenario.user_goal_met_metrics_config, "enable_user_goal_met_metrics"),
        "expectations": (
            scenario.expectations_met_metrics_config,
            "enable_expectations_met_metrics",
        ),
    }
    for name, on in switches.items():
        message, flag = messages[name]
        message.SetInParent()
        setattr(message, flag, on)
    return config


def _app(core: Apps, **settings: Any) -> None:
    """The app's evaluation settings, set with UpdateApp (the app created first when needed)."""
    if core.get_app().display_name != "App":
        core.create_app("a", display_name="App")
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, evaluation_settings=Settings(**settings)),
            update_mask=field_mask_pb2.FieldMask(paths=["evaluation_settings"]),
        ),
    )


def _golden(core: Apps) -> Evaluation:
    """A golden of one turn expecting a tool call, then an answer."""
    evaluation = Evaluation(display_name="Order")
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.text = "Where is order 42?"
    turn.steps.add().expectation.tool_call.tool = f"{APP}/tools/lookup"
    turn.steps.add().expectation.agent_response.chunks.add().text = "It has shipped."
    return core.call(  # type: ignore[no-any-return]
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    )


def _update(core: Apps, evaluation: Evaluation, *paths: str) -> Evaluation:
    """``evaluation``'s fields at ``paths`` stored (whatever its etag: runs changed it)."""
    evaluation.ClearField("etag")
    return core.call(  # type: ignore[no-any-return]
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=evaluation, update_mask=field_mask_pb2.FieldMask(paths=list(paths))
        ),
    )


def _played(core: Apps, evaluation: Evaluation) -> Result:
    _, (result,) = running._completed(core, evaluations=[evaluation.name], run_count=1)
    return result


def _turn(result: Result) -> Result.GoldenResult.TurnReplayResult:
    [turn] = result.golden_result.turn_replay_results
    return turn


def test_semantic_similarity_resolves_expectation_evaluation_app_then_default(
    core: Apps,
) -> None:
    evaluation = _golden(core)
    running._rule(core, outcome=Rule.PASS, semantic_similarity_score=1)  # below 3: fails
    default = _played(core, evaluation)
    assert default.evaluation_status == FAIL
    assert _turn(default).semantic_similarity_result.score == 1
    # A config without the metric's message falls back to the default: computed.
    _app(core, metrics_config=_config(tools=True))
    assert _played(core, evaluation).evaluation_status == FAIL
    # The app switches it off: not computed, the answer's only check SKIPPED, the call judged.
    _app(core, metrics_config=_config(similarity=False))
    off = _played(core, evaluation)
    assert off.evaluation_status == PASS
    assert not _turn(off).HasField("semantic_similarity_result")
    assert [o.outcome for o in _turn(off).expectation_outcome] == [PASS, SKIPPED]
    # The evaluation's override is closer than the app's.
    evaluation.evaluation_metrics_config_override.CopyFrom(_config(similarity=True))
    evaluation = _update(core, evaluation, "evaluation_metrics_config_override")
    on = _played(core, evaluation)
    assert on.evaluation_status == FAIL
    assert _turn(on).semantic_similarity_result.score == 1
    # The expectation's own override is closer still.
    answer = evaluation.golden.turns[0].steps[2].expectation
    answer.agent_response_semantic_similarity_metrics_config_override.SetInParent()
    evaluation = _update(core, evaluation, "golden")
    own = _played(core, evaluation)
    assert own.evaluation_status == PASS
    assert not _turn(own).HasField("semantic_similarity_result")
    assert [o.outcome for o in _turn(own).expectation_outcome] == [PASS, SKIPPED]


def test_turn_and_step_tool_correctness_are_switched_apart(core: Apps) -> None:
    evaluation = _golden(core)
    # The call (the first expectation) fails with a parameter correctness of 0.5.
    running._rule(core, outcome=Rule.FAIL, tool_invocation_score=0.5)
    default = _turn(_played(core, evaluation))
    assert default.overall_tool_invocation_result.outcome == FAIL
    assert default.expectation_outcome[0].tool_invocation_result.outcome == FAIL
    _app(core, metrics_config=_config(steps=False))
    steps_off = _played(core, evaluation)
    call = _turn(steps_off).expectation_outcome[0]
    assert call.outcome == SKIPPED and not call.HasField("tool_invocation_result")
    assert call.observed_tool_call.tool == f"{APP}/tools/lookup"  # observed all the same
    # The turn's check still counts: it was switched off by no one.
    assert _turn(steps_off).overall_tool_invocation_result.outcome == FAIL
    assert steps_off.evaluation_status == FAIL
    _app(core, metrics_config=_config(tools=False))
    turn_off = _played(core, evaluation)
    assert not _turn(turn_off).HasField("overall_tool_invocation_result")
    assert _turn(turn_off).expectation_outcome[0].outcome == FAIL
    assert turn_off.evaluation_status == FAIL
    _app(core, metrics_config=_config(tools=False, steps=False))
    # Nothing judges the call now: the rule fails the first expectation something judges.
    both_off = _played(core, evaluation)
    assert [o.outcome for o in _turn(both_off).expectation_outcome] == [SKIPPED, FAIL]
    assert _turn(both_off).semantic_similarity_result.outcome == FAIL


def test_hallucination_counts_when_computed_and_enabled(core: Apps) -> None:
    thresholds = Thresholds(golden_hallucination_metric_behavior=Thresholds.ENABLED)
    evaluation = _golden(core)
    running._rule(core, outcome=Rule.PASS, hallucination_score=0)  # not justified
    # Computed, but the behaviour (DISABLED by default) keeps it out of the verdict.
    computed = _played(core, evaluation)
    assert computed.evaluation_status == PASS
    assert _turn(computed).hallucination_result.score == 0
    evaluation.evaluation_metrics_threshold_override.CopyFrom(thresholds)
    evaluation = _update(core, evaluation, "evaluation_metrics_threshold_override")
    assert _played(core, evaluation).evaluation_status == FAIL
    # Only an expectation switches it off; then it is not computed, so it cannot count.
    answer = evaluation.golden.turns[0].steps[2].expectation
    answer.agent_response_hallucination_metrics_config_override.enable_hallucination_metrics = False
    evaluation = _update(core, evaluation, "golden")
    off = _played(core, evaluation)
    assert off.evaluation_status == PASS
    assert not _turn(off).HasField("hallucination_result")


def test_scenario_user_goal_and_expectations_met_are_switched(core: Apps) -> None:
    scenario = running._scenario(core, "Ask")
    running._rule(core, outcome=Rule.FAIL)
    default = _played(core, scenario).scenario_result
    assert [o.outcome for o in default.expectation_outcomes] == [FAIL]
    assert default.user_goal_satisfaction_result.score == 0
    assert default.HasField("all_expectations_satisfied")
    _app(core, metrics_config=_config(expectations=False))
    played = _played(core, scenario)
    result = played.scenario_result
    assert [o.outcome for o in result.expectation_outcomes] == [SKIPPED]
    assert result.expectation_outcomes[0].HasField("observed_agent_response")
    assert not result.HasField("all_expectations_satisfied")
    assert played.evaluation_status == FAIL  # the user goal still failed
    _app(core, metrics_config=_config(user_goal=False))
    played = _played(core, scenario)
    assert not played.scenario_result.HasField("user_goal_satisfaction_result")
    assert [o.outcome for o in played.scenario_result.expectation_outcomes] == [FAIL]


def test_result_metrics_are_computed_again_under_the_config_in_force_now(core: Apps) -> None:
    evaluation = _golden(core)
    running._rule(core, outcome=Rule.PASS, semantic_similarity_score=1)
    played = _played(core, evaluation)
    assert played.evaluation_status == FAIL
    _app(core, metrics_config=_config(similarity=False))
    done = core.finished(
        core.call(
            "run_evaluation_result_metrics",
            service_pb2.RunEvaluationResultMetricsRequest(evaluation_result_id=played.name),
        )
    )
    response = service_pb2.RunEvaluationResultMetricsResponse()
    assert done.response.Unpack(response)
    assert response.status == PASS
    stored = core.call(
        "get_evaluation_result", service_pb2.GetEvaluationResultRequest(name=played.name)
    )
    assert stored.evaluation_status == PASS
    assert not _turn(stored).HasField("semantic_similarity_result")


def _texts(core: Apps, result: Result) -> list[tuple[str, str]]:
    conversation = core.call(
        "get_conversation",
        agent_pb2.GetConversationRequest(name=result.scenario_result.conversation),
    )
    stamps = [m.event_time.ToNanoseconds() for t in conversation.turns for m in t.messages]
    assert stamps == sorted(stamps)
    return [
        (message.role, chunk.text)
        for turn in conversation.turns
        for message in turn.messages
        for chunk in message.chunks
    ]


def test_a_scripted_scenario_the_agent_starts_opens_with_its_greeting(core: Apps) -> None:
    scenario = running._scenario(core, "Ask")
    task, answer = ("user", "Ask for order 42."), ("agent", "It has shipped.")
    assert _texts(core, _played(core, scenario)) == [task, answer]
    _app(core, scenario_conversation_initiator=Settings.AGENT)
    played = _played(core, scenario)
    assert played.evaluation_status == PASS
    assert _texts(core, played) == [("agent", outcomes.GREETING), task, answer]
    _app(core, scenario_conversation_initiator=Settings.USER)
    assert _texts(core, _played(core, scenario)) == [task, answer]


def _mode(own: int, app: int | None) -> int:
    """The execution mode of a scenario whose own is ``own`` in an app whose is ``app``
    (None: the app sets nothing)."""
    evaluation = Evaluation()
    evaluation.scenario.scenario_execution_mode = own  # type: ignore[assignment]
    settings = None if app is None else Settings(scenario_execution_mode=app)  # type: ignore[arg-type]
    play = outcomes.Play(
        evaluation=evaluation,
        repetition=0,
        rule=None,
        result_name=f"{APP}/evaluations/e/results/r",
        conversation_name=f"{APP}/conversations/c",
        started=now(),
        settings=settings,
    )
    return play.execution_mode


def test_a_scenarios_own_execution_mode_wins_over_the_apps() -> None:
    quality, speed = Settings.QUALITY_OPTIMIZED, Settings.SPEED_OPTIMIZED
    assert _mode(0, None) == quality  # UNSPECIFIED: QUALITY_OPTIMIZED
    assert _mode(0, 0) == quality
    assert _mode(0, speed) == speed
    assert _mode(quality, speed) == quality
    assert _mode(speed, None) == speed
