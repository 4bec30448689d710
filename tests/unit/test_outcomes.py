"""What the run engine observes (ces_eval.core.engine.outcomes.play; docs/semantics.md, "Evaluation
runs" and "Scripted outcomes"): the golden is the truth by default, FAIL and ERROR rules, the
scores and latencies a rule sets, scenarios, and the recorded conversation."""

from __future__ import annotations

from typing import Any

from google.protobuf import duration_pb2, json_format, timestamp_pb2

from ces_eval.core.engine import outcomes
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

APP = "projects/p/locations/l/apps/a"
TOOL = f"{APP}/tools/lookup"
Rule = emulator_pb2.OutcomeRule
Result = evaluation_pb2.EvaluationResult
STARTED = timestamp_pb2.Timestamp(seconds=1_800_000_000)


def _golden() -> evaluation_pb2.Evaluation:
    """Two turns: a tool call and an agent response, then an agent response."""
    return json_format.ParseDict(
        {
            "name": f"{APP}/evaluations/e1",
            "displayName": "Order",
            "golden": {
                "turns": [
                    {
                        "steps": [
                            {"userInput": {"text": "Where is order 42?"}},
                            {"expectation": {"toolCall": {"tool": TOOL, "args": {"order": 42}}}},
                            {
                                "expectation": {
                                    "agentResponse": {
                                        "role": "agent",
                                        "chunks": [{"text": "It has shipped."}],
                                    }
                                }
                            },
                        ]
                    },
                    {
                        "steps": [
                            {"userInput": {"text": "Thanks"}},
                            {
                                "expectation": {
                                    "agentResponse": {
                                        "role": "agent",
                                        "chunks": [{"text": "You're welcome."}],
                                    }
                                }
                            },
                        ]
                    },
                ]
            },
        },
        evaluation_pb2.Evaluation(),
    )


def _scenario() -> evaluation_pb2.Evaluation:
    return json_format.ParseDict(
        {
            "name": f"{APP}/evaluations/s1",
            "displayName": "Asks",
            "scenario": {
                "task": "Ask for order 42.",
                "rubrics": ["Gives the status."],
                "scenarioExpectations": [
                    {
                        "toolExpectation": {
                            "expectedToolCall": {"tool": TOOL, "args": {"order": 42}},
                            "mockToolResponse": {"tool": TOOL, "response": {"ok": True}},
                        }
                    }
                ],
            },
        },
        evaluation_pb2.Evaluation(),
    )


def _play(evaluation: evaluation_pb2.Evaluation, rule: Rule | None = None, **more: Any) -> Any:
    return outcomes.play(
        outcomes.Play(
            evaluation=evaluation,
            repetition=more.pop("repetition", 0),
            rule=rule,
            result_name=f"{evaluation.name}/results/r1",
            conversation_name=f"{APP}/conversations/c1",
            started=STARTED,
            **more,
        )
    )


def _outcomes(result: Result) -> list[Result.GoldenExpectationOutcome]:
    return [
        o for turn in result.golden_result.turn_replay_results for o in turn.expectation_outcome
    ]


def test_by_default_the_golden_is_the_truth() -> None:
    played = _play(_golden())
    result = played.result
    assert result.execution_state == Result.COMPLETED
    assert result.evaluation_status == Result.PASS
    first, second = result.golden_result.turn_replay_results
    assert [o.outcome for o in _outcomes(result)] == [Result.PASS] * 3
    call = first.expectation_outcome[0]
    assert call.observed_tool_call.args["order"] == 42
    assert call.tool_invocation_result.parameter_correctness_score == 1.0
    assert first.overall_tool_invocation_result.tool_invocation_score == 1.0
    assert first.semantic_similarity_result.score == 4
    assert second.expectation_outcome[0].observed_agent_response.chunks[0].text == (
        "You're welcome."
    )
    assert first.conversation == f"{APP}/conversations/c1"
    # The conversation: the user's input, then what the agent did.
    conversation = played.conversation
    assert conversation.name == f"{APP}/conversations/c1"
    assert [[m.role for m in t.messages] for t in conversation.turns] == [["user", "agent"]] * 2
    agent = conversation.turns[0].messages[1]
    assert agent.chunks[0].tool_call.tool == TOOL
    assert agent.chunks[1].text == "It has shipped."
    assert conversation.end_time.ToNanoseconds() > conversation.start_time.ToNanoseconds()


def test_latencies_are_deterministic_per_evaluation_repetition_and_turn() -> None:
    once = _play(_golden()).result.golden_result
    again = _play(_golden()).result.golden_result
    other = _play(_golden(), repetition=1).result.golden_result
    latencies = [t.turn_latency.ToMilliseconds() for t in once.turn_replay_results]
    assert latencies == [t.turn_latency.ToMilliseconds() for t in again.turn_replay_results]
    assert latencies != [t.turn_latency.ToMilliseconds() for t in other.turn_replay_results]
    assert all(300 <= latency < 1200 for latency in latencies)
    [tool] = once.turn_replay_results[0].tool_call_latencies
    assert tool.tool == TOOL and tool.display_name == "lookup"
    assert 0 < tool.execution_latency.ToMilliseconds() <= latencies[0] // 2


def test_a_fail_rule_fails_the_first_expectation_with_other_arguments() -> None:
    result = _play(_golden(), Rule(name="r", outcome=Rule.FAIL)).result
    assert result.evaluation_status == Result.FAIL
    call, response, later = _outcomes(result)
    assert call.outcome == Result.FAIL
    assert call.observed_tool_call.args["order"] == 42
    assert call.observed_tool_call.args["ces_eval_observed"] == "other"
    assert call.tool_invocation_result.parameter_correctness_score == 0.0
    assert (response.outcome, later.outcome) == (Result.PASS, Result.PASS)


def test_a_fail_rule_chooses_the_turn_expectation_and_observation() -> None:
    rule = Rule(name="r", outcome=Rule.FAIL, turn=1, observed=Rule.Observed(text="Nope."))
    result = _play(_golden(), rule).result
    assert result.evaluation_status == Result.FAIL
    first, second = result.golden_result.turn_replay_results
    assert [o.outcome for o in first.expectation_outcome] == [Result.PASS, Result.PASS]
    assert second.expectation_outcome[0].observed_agent_response.chunks[0].text == "Nope."
    assert second.semantic_similarity_result.score == 1
    assert first.semantic_similarity_result.score == 4


def test_a_fail_rule_can_leave_the_tool_uncalled() -> None:
    rule = Rule(name="r", outcome=Rule.FAIL, observed=Rule.Observed(missing_tool_call=True))
    played = _play(_golden(), rule)
    call = _outcomes(played.result)[0]
    assert call.outcome == Result.FAIL and not call.HasField("observed_tool_call")
    chunks = played.conversation.turns[0].messages[1].chunks
    assert [c.WhichOneof("data") for c in chunks] == ["text"]


def test_scores_of_a_rule_decide_through_the_thresholds() -> None:
    """A PASS rule whose similarity score is below the threshold (3) fails that expectation:
    outcomes follow from the scores by RunEvaluationResultMetrics' rules."""
    result = _play(_golden(), Rule(name="r", outcome=Rule.PASS, semantic_similarity_score=2)).result
    assert result.evaluation_status == Result.FAIL
    latency = duration_pb2.Duration(seconds=2)
    timed = _play(_golden(), Rule(name="r", outcome=Rule.PASS, turn_latency=latency)).result
    assert all(t.turn_latency == latency for t in timed.golden_result.turn_replay_results)
    assert timed.evaluation_status == Result.PASS


def test_an_error_rule_does_not_execute() -> None:
    played = _play(_golden(), Rule(name=f"{APP}/outcomeRules/broken", outcome=Rule.ERROR))
    result = played.result
    assert result.execution_state == Result.ERROR
    assert result.evaluation_status == Result.OUTCOME_UNSPECIFIED
    info = result.error_info
    assert info.error_type == evaluation_config_pb2.EvaluationErrorInfo.RUNTIME_FAILURE
    assert f"{APP}/outcomeRules/broken" in info.error_message
    assert not result.golden_result.turn_replay_results
    given = evaluation_config_pb2.EvaluationErrorInfo(
        error_type=evaluation_config_pb2.EvaluationErrorInfo.CONVERSATION_RETRIEVAL_FAILURE,
        error_message="bad",
    )
    custom = _play(_golden(), Rule(name="r", outcome=Rule.ERROR, error_info=given)).result
    assert custom.error_info == given


def test_a_scenario_meets_its_expectations_rubrics_and_goal() -> None:
    persona = evaluation_config_pb2.EvaluationPersona(name=f"{APP}/evaluationPersonas/default")
    played = _play(_scenario(), persona=persona)
    result = played.result
    assert result.evaluation_status == Result.PASS
    scenario = result.scenario_result
    assert scenario.task_completed and scenario.user_goal_satisfaction_result.score == 1
    [outcome] = scenario.expectation_outcomes
    assert outcome.outcome == Result.PASS
    assert outcome.observed_tool_call.tool_call.args["order"] == 42
    assert [r.score for r in scenario.rubric_outcomes] == [1.0]
    assert result.persona == persona
    assert played.conversation.turns[0].messages[0].chunks[0].text == "Ask for order 42."


def test_a_failed_scenario_fails_its_expectation_rubrics_and_goal() -> None:
    result = _play(_scenario(), Rule(name="r", outcome=Rule.FAIL)).result
    assert result.evaluation_status == Result.FAIL
    scenario = result.scenario_result
    assert not scenario.task_completed and scenario.user_goal_satisfaction_result.score == 0
    assert scenario.expectation_outcomes[0].outcome == Result.FAIL
    assert [r.score for r in scenario.rubric_outcomes] == [0.0]


def test_play_changes_neither_the_evaluation_nor_the_rule() -> None:
    evaluation, rule = _golden(), Rule(name="r", outcome=Rule.FAIL, turn=1)
    before = (evaluation.SerializeToString(), rule.SerializeToString())
    _play(evaluation, rule)
    assert (evaluation.SerializeToString(), rule.SerializeToString()) == before


def test_a_player_judges_once_and_times_each_repetition() -> None:
    """The engine's Player reuses what one evaluation observes under one rule across its
    repetitions: each repetition is still exactly what playing it alone records."""
    player = outcomes.Player()
    later = timestamp_pb2.Timestamp(seconds=STARTED.seconds + 60)
    evaluation, rule = _golden(), Rule(name="r", outcome=Rule.FAIL)
    first = player.play(
        outcomes.Play(
            evaluation, 0, rule, f"{evaluation.name}/results/a", f"{APP}/conversations/a", STARTED
        )
    )
    given = outcomes.Play(
        evaluation, 1, rule, f"{evaluation.name}/results/b", f"{APP}/conversations/b", later
    )
    second = player.play(given)
    alone = outcomes.Player().play(given)
    assert (second.result, second.conversation) == (alone.result, alone.conversation)
    assert second.result.name.endswith("/results/b") and second.result.create_time == later
    replays = second.result.golden_result.turn_replay_results
    assert {replay.conversation for replay in replays} == {f"{APP}/conversations/b"}
    assert second.conversation.turns[0].messages[0].event_time == later
    assert [r.turn_latency for r in replays] != [
        r.turn_latency for r in first.result.golden_result.turn_replay_results
    ]
    assert second.result.evaluation_status == first.result.evaluation_status == Result.FAIL
