"""The run engine (ces_eval.core.engine.running; docs/semantics.md, "Evaluation runs") over a real
SQLite file: the plan (defaults, run_count, persona tasks), caching, the request checks, a delay
observed with the results before it stored, cancellation, a run deleted or a server stopped
mid-run, and a crash recovered at the next start. The official client's view of the same
workflow is tests/integration/test_official_engine.py."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2

from ces_eval.contract import limits
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, Harness

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

Run = evaluation_pb2.EvaluationRun
Result = evaluation_pb2.EvaluationResult
Rule = emulator_pb2.OutcomeRule
DEFAULT_PERSONA = f"{APP}/evaluationPersonas/default"


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _golden(core: Harness, display_name: str, **fields: Any) -> evaluation_pb2.Evaluation:
    evaluation = evaluation_pb2.Evaluation(display_name=display_name, **fields)
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.text = "Where is order 42?"
    turn.steps.add().expectation.tool_call.tool = f"{APP}/tools/lookup"
    return core.call(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    )


def _scenario(core: Harness, display_name: str) -> evaluation_pb2.Evaluation:
    evaluation = evaluation_pb2.Evaluation(display_name=display_name)
    evaluation.scenario.task = "Ask for order 42."
    evaluation.scenario.rubrics.append("Gives the status.")
    expected = evaluation.scenario.scenario_expectations.add()
    expected.agent_response.role = "agent"
    expected.agent_response.chunks.add().text = "It has shipped."
    return core.call(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    )


def _rule(core: Harness, **fields: Any) -> Rule:
    return core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(parent=APP, outcome_rule=Rule(**fields)),
    )


def _start(core: Harness, **fields: Any) -> operations_pb2.Operation:
    return core.call("run_evaluation", evaluation_pb2.RunEvaluationRequest(app=APP, **fields))


def _wait(core: Harness, operation: operations_pb2.Operation) -> operations_pb2.Operation:
    done = core.call(
        "wait_operation",
        operations_pb2.WaitOperationRequest(
            name=operation.name, timeout=duration_pb2.Duration(seconds=30)
        ),
    )
    assert done.done, done
    return done


def _run_of(operation: operations_pb2.Operation) -> str:
    metadata = service_pb2.RunEvaluationOperationMetadata()
    assert operation.metadata.Unpack(metadata)
    return metadata.evaluation_run


def _get(core: Harness, run: str) -> Run:
    return core.call("get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=run))


def _results(core: Harness, run: str) -> list[Result]:
    page = core.call(
        "list_evaluation_results",
        service_pb2.ListEvaluationResultsRequest(
            parent=f"{APP}/evaluations/-", filter=f'evaluation_run = "{run}"', page_size=1000
        ),
    )
    return list(page.evaluation_results)


def _until(core: Harness, run: str, check: Any) -> Run:
    """Let the engine work until ``check(run)`` holds (a bounded number of looks)."""
    for _ in range(600):
        found = _get(core, run)
        if check(found):
            return found
        core.run(asyncio.sleep(0.01))
    raise AssertionError(f"{run} never got there: {found}")


def _completed(core: Harness, **fields: Any) -> tuple[Run, list[Result]]:
    done = _wait(core, _start(core, **fields))
    assert not done.HasField("error"), done.error
    response = service_pb2.RunEvaluationResponse()
    assert done.response.Unpack(response)
    run = _get(core, response.evaluation_run)
    assert run.state == Run.COMPLETED, run
    return run, _results(core, run.name)


def test_the_plan_defaults_run_count_and_persona_tasks(core: Harness) -> None:
    golden, scenario = _golden(core, "G"), _scenario(core, "S")
    run, results = _completed(core, evaluations=[golden.name, scenario.name])
    assert run.progress.total_count == len(results) == 6  # a golden once, a scenario 5 times
    assert run.run_count == 0 and run.evaluation_type == Run.MIXED
    run, results = _completed(core, evaluations=[golden.name], run_count=3)
    assert (run.run_count, run.evaluation_type, len(results)) == (3, Run.GOLDEN, 3)
    assert sorted(r.display_name.rsplit("(", 1)[1] for r in results) == [
        f"run {run.name.rsplit('/', 1)[1]}, {k} of 3)" for k in (1, 2, 3)
    ]
    run, results = _completed(
        core,
        evaluations=[scenario.name],
        run_count=2,
        persona_run_configs=[{"persona": DEFAULT_PERSONA, "task_count": 3}, {"task_count": 0}],
    )
    # task_count per persona; 0 (and a persona left empty: the default one) takes run_count.
    assert run.progress.total_count == len(results) == 5
    assert {r.persona.name for r in results} == {DEFAULT_PERSONA}
    assert run.evaluation_type == Run.SCENARIO


def test_results_carry_the_run_and_the_run_counts_them(core: Harness) -> None:
    first, second = _golden(core, "First"), _golden(core, "Second")
    _rule(core, evaluation=second.name, outcome=Rule.FAIL)
    run, results = _completed(
        core,
        evaluations=[first.name, second.name],
        run_count=2,
        config={"evaluation_channel": 1},
        golden_run_method=2,
        app_version=f"{APP}/versions/v1",
    )
    assert run.progress == Run.Progress(
        total_count=4, completed_count=4, passed_count=2, failed_count=2
    )
    assert run.evaluation_run_summaries[first.name] == Run.EvaluationRunSummary(passed_count=2)
    assert run.evaluation_run_summaries[second.name] == Run.EvaluationRunSummary(failed_count=2)
    assert sorted(run.evaluation_results) == sorted(r.name for r in results)
    for result in results:
        assert result.evaluation_run == run.name and result.initiated_by == run.initiated_by
        assert result.app_version == f"{APP}/versions/v1" and result.golden_run_method == 2
        assert result.config == run.config
        conversation = result.golden_result.turn_replay_results[0].conversation
        stored = core.call(
            "get_conversation", emulator_pb2.GetConversationRequest(name=conversation)
        )
        assert stored.turns[0].messages[0].chunks[0].text == "Where is order 42?"
    evaluation = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=second.name))
    assert list(evaluation.evaluation_runs) == [run.name]
    assert evaluation.aggregated_metrics.metrics_by_app_version[0].fail_count == 2


def test_skip_if_unchanged_reuses_the_last_completed_result(core: Harness) -> None:
    golden = _golden(core, "G")
    _, [original] = _completed(core, evaluations=[golden.name])
    caching = {"run_caching_mode": 2}  # SKIP_IF_UNCHANGED
    run, [reused] = _completed(
        core, evaluations=[golden.name], run_count=3, evaluation_run_caching_settings=caching
    )
    assert run.progress.total_count == 1 and reused.evaluation_run == run.name
    assert reused.name != original.name
    assert reused.golden_result == original.golden_result  # the same play, not a new one
    stored = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=golden.name))
    stored.description = "changed"
    core.call(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=stored, update_mask={"paths": ["description"]}
        ),
    )
    run, played = _completed(
        core, evaluations=[golden.name], run_count=2, evaluation_run_caching_settings=caching
    )
    assert len(played) == 2
    conversations = {r.golden_result.turn_replay_results[0].conversation for r in played}
    assert original.golden_result.turn_replay_results[0].conversation not in conversations


def test_a_dataset_runs_its_evaluations(core: Harness) -> None:
    first, second = _golden(core, "First"), _golden(core, "Second")
    dataset = core.call(
        "create_evaluation_dataset",
        service_pb2.CreateEvaluationDatasetRequest(
            parent=APP,
            evaluation_dataset={"display_name": "D", "evaluations": [second.name, first.name]},
        ),
    )
    run, results = _completed(core, evaluation_dataset=dataset.name, generate_latency_report=True)
    assert run.evaluation_dataset == dataset.name and not run.evaluations
    assert {r.name.rsplit("/results/", 1)[0] for r in results} == {first.name, second.name}
    assert run.latency_report.session_count == 2
    [tool] = run.latency_report.tool_latencies
    assert tool.tool == f"{APP}/tools/lookup" and tool.latency_metrics.call_count == 2
    metrics = tool.latency_metrics
    assert metrics.p50_latency.ToNanoseconds() <= metrics.p90_latency.ToNanoseconds()
    assert metrics.p90_latency.ToNanoseconds() <= metrics.p99_latency.ToNanoseconds()


def test_the_request_checks(core: Harness) -> None:
    golden = _golden(core, "G")
    elsewhere = "projects/p/locations/l/apps/other/evaluations/x"
    cases: list[tuple[dict[str, Any], Code, list[str]]] = [
        ({}, Code.INVALID_ARGUMENT, ["evaluations"]),
        ({"evaluations": [golden.name, golden.name]}, Code.INVALID_ARGUMENT, ["evaluations[1]"]),
        ({"evaluations": [elsewhere]}, Code.INVALID_ARGUMENT, ["evaluations[0]"]),
        ({"evaluations": [golden.name], "run_count": 0}, Code.INVALID_ARGUMENT, ["run_count"]),
        (
            {"evaluations": [golden.name], "persona_run_configs": [{"task_count": -1}]},
            Code.INVALID_ARGUMENT,
            ["persona_run_configs[0].task_count"],
        ),
        (
            {"evaluations": [f"{APP}/evaluations/a", golden.name, f"{APP}/evaluations/b"]},
            Code.NOT_FOUND,
            ["evaluations[0]", "evaluations[2]"],
        ),
        (
            {
                "evaluations": [golden.name],
                "persona_run_configs": [{"persona": f"{APP}/evaluationPersonas/pirate"}],
            },
            Code.NOT_FOUND,
            ["persona_run_configs[0].persona"],
        ),
        (
            {"evaluations": [golden.name], "run_count": limits.MAX_RUN_RESULTS + 1},
            Code.INVALID_ARGUMENT,
            ["run_count"],
        ),
    ]
    for fields, code, fields_named in cases:
        error = core.error("run_evaluation", evaluation_pb2.RunEvaluationRequest(app=APP, **fields))
        assert (error.code, [v.field for v in error.violations]) == (code, fields_named), fields
    error = core.error(
        "run_evaluation",
        evaluation_pb2.RunEvaluationRequest(
            app=APP, evaluations=[f"{APP}/evaluations/a", f"{APP}/evaluations/b"]
        ),
    )
    assert f"{APP}/evaluations/a" in error.message and f"{APP}/evaluations/b" in error.message
    listed = core.call("list_evaluation_runs", service_pb2.ListEvaluationRunsRequest(parent=APP))
    assert not listed.evaluation_runs  # nothing refused left a run behind


def test_a_delay_comes_after_what_was_played_is_stored_and_cancel_ends_the_rest(
    core: Harness,
) -> None:
    first, second = _golden(core, "First"), _golden(core, "Second")
    _rule(core, evaluation=second.name, delay=duration_pb2.Duration(seconds=600))
    operation = _start(core, evaluations=[first.name, second.name])
    run = _until(core, _run_of(operation), lambda r: r.progress.completed_count == 1)
    assert run.state == Run.RUNNING
    core.call("cancel_operation", operations_pb2.CancelOperationRequest(name=operation.name))
    done = _wait(core, operation)
    assert done.error.code == code_pb2.CANCELLED
    metadata = service_pb2.RunEvaluationOperationMetadata()
    assert done.metadata.Unpack(metadata) and metadata.cancel_requested and metadata.end_time
    run = _get(core, run.name)
    assert run.state == Run.CANCELLED
    assert (run.progress.completed_count, run.progress.cancelled_count) == (1, 1)
    states = {r.name.rsplit("/results/", 1)[0]: r.execution_state for r in _results(core, run.name)}
    assert states == {first.name: Result.COMPLETED, second.name: Result.CANCELLED}


def test_a_queued_hold_takes_no_operation_slot(core: Harness) -> None:
    """Held runs wait QUEUED outside the runner's slots: more held runs than slots do not
    keep another run from completing."""
    held, free = _golden(core, "Held"), _golden(core, "Free")
    rule = _rule(core, evaluation=held.name, hold=Rule.QUEUED)
    waiting = [_start(core, evaluations=[held.name]) for _ in range(5)]  # 4 slots
    run, _ = _completed(core, evaluations=[free.name])
    assert run.progress.passed_count == 1
    assert {_get(core, _run_of(o)).state for o in waiting} == {Run.QUEUED}
    core.call("release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=rule.name))
    for operation in waiting:
        assert not _wait(core, operation).HasField("error")
        assert _get(core, _run_of(operation)).state == Run.COMPLETED


def test_a_run_deleted_mid_run_ends_its_operation(core: Harness) -> None:
    golden = _golden(core, "G")
    rule = _rule(core, evaluation=golden.name, hold=Rule.RUNNING)
    operation = _start(core, evaluations=[golden.name])
    run = _until(core, _run_of(operation), lambda r: r.state == Run.RUNNING)
    deleting = core.call(
        "delete_evaluation_run", service_pb2.DeleteEvaluationRunRequest(name=run.name)
    )
    assert not _wait(core, deleting).HasField("error")
    core.call("release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=rule.name))
    done = _wait(core, operation)
    assert done.error.code == code_pb2.NOT_FOUND, done.error
    assert not _results(core, run.name)


def test_a_stopping_server_ends_the_run_in_error(core: Harness) -> None:
    golden = _golden(core, "G")
    _rule(core, evaluation=golden.name, hold=Rule.RUNNING)
    operation = _start(core, evaluations=[golden.name])
    run = _until(core, _run_of(operation), lambda r: r.state == Run.RUNNING)
    core.run(core.core.context.runner.shutdown())
    done = core.call("get_operation", operations_pb2.GetOperationRequest(name=operation.name))
    assert done.done and done.error.code == code_pb2.UNAVAILABLE
    run = _get(core, run.name)
    assert run.state == Run.ERROR and "shut down" in run.error_info.error_message


def test_a_crashed_run_ends_in_error_at_the_next_start(core: Harness, tmp_path: Path) -> None:
    """The database as a process killed mid-run leaves it (a copy of what was committed then)
    opened by the next start: the run and its operation end, never stuck RUNNING."""
    golden = _golden(core, "G")
    _rule(core, evaluation=golden.name, hold=Rule.RUNNING)
    operation = _start(core, evaluations=[golden.name])
    run = _until(core, _run_of(operation), lambda r: r.state == Run.RUNNING)
    crashed = tmp_path / "crashed.sqlite"
    with sqlite3.connect(tmp_path / "db.sqlite") as source, sqlite3.connect(crashed) as copy:
        source.backup(copy)
    after = Harness(crashed)
    try:
        assert after.run(after.core.context.runner.recover()) == 1
        found = _get(after, run.name)
        assert found.state == Run.ERROR and "stopped" in found.error_info.error_message
        done = after.call("get_operation", operations_pb2.GetOperationRequest(name=operation.name))
        assert done.done and done.error.code == code_pb2.ABORTED
    finally:
        after.run(after.core.context.runner.shutdown())
        after.close()


def test_an_evaluation_deleted_mid_run_ends_the_run_in_error(core: Harness) -> None:
    first, second = _golden(core, "First"), _golden(core, "Second")
    rule = _rule(core, evaluation=second.name, hold=Rule.RUNNING)
    operation = _start(core, evaluations=[first.name, second.name])
    run = _until(core, _run_of(operation), lambda r: r.progress.completed_count == 1)
    core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=second.name))
    core.call("release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=rule.name))
    done = _wait(core, operation)
    assert done.error.code == code_pb2.FAILED_PRECONDITION, done.error
    info = error_details_pb2.ErrorInfo()
    assert done.error.details[0].Unpack(info) and info.reason == "RESOURCE_DELETED"
    assert info.metadata["resource"] == second.name
    run = _get(core, run.name)
    assert run.state == Run.ERROR and second.name in run.error_info.error_message
    assert run.progress.completed_count == 1  # what was stored before stays


def _held_runs(core: Harness, count: int) -> list[operations_pb2.Operation]:
    """``count`` runs of one held (RUNNING) evaluation, once the slots of their project are
    taken: the runs past the project's share of the slots wait for one, QUEUED."""
    golden = _golden(core, "Held")
    _rule(core, evaluation=golden.name, hold=Rule.RUNNING)
    started = [_start(core, evaluations=[golden.name]) for _ in range(count)]
    states = lambda: [_get(core, _run_of(o)).state for o in started]  # noqa: E731
    for _ in range(600):
        if states().count(Run.RUNNING) >= 3:
            break
        core.run(asyncio.sleep(0.01))
    core.run(asyncio.sleep(0.2))  # let any further run take a slot it could get
    assert states().count(Run.QUEUED) >= 2, states()
    return started


def test_runs_cancelled_while_they_wait_for_a_slot_end_cancelled(core: Harness) -> None:
    """A cancel storm: every run ends CANCELLED whatever its state: RUNNING, QUEUED on a hold,
    and QUEUED waiting for an operation slot (those stayed QUEUED while their operations
    ended CANCELLED)."""
    started = _held_runs(core, 8)
    queued = _golden(core, "Queued")
    _rule(core, evaluation=queued.name, hold=Rule.QUEUED)
    started.append(_start(core, evaluations=[queued.name]))
    for operation in reversed(started):  # the waiting ones first: no slot frees meanwhile
        core.call("cancel_operation", operations_pb2.CancelOperationRequest(name=operation.name))
    for operation in started:
        assert _wait(core, operation).error.code == code_pb2.CANCELLED
    states = [Run.EvaluationRunState.Name(_get(core, _run_of(o)).state) for o in started]
    assert states == ["CANCELLED"] * len(started), states
    for operation in started:
        [result] = _results(core, _run_of(operation))
        assert result.execution_state == Result.CANCELLED


def test_a_stopping_server_ends_the_runs_waiting_for_a_slot_in_error(core: Harness) -> None:
    started = _held_runs(core, 6)
    core.run(core.core.context.runner.shutdown())
    for operation in started:
        done = core.call("get_operation", operations_pb2.GetOperationRequest(name=operation.name))
        assert done.done and done.error.code == code_pb2.UNAVAILABLE
    runs = [_get(core, _run_of(o)) for o in started]
    states = [Run.EvaluationRunState.Name(r.state) for r in runs]
    assert states == ["ERROR"] * len(started), states
    assert all("shut down" in r.error_info.error_message for r in runs)


def test_an_error_rule_gives_its_error_info_and_the_default_fills_what_it_leaves_unset(
    core: Harness,
) -> None:
    """The rule's error is its input (the emulator keeps it, though CES marks the fields of
    EvaluationErrorInfo output-only); unset, a RUNTIME_FAILURE naming the rule."""
    ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
    told = _golden(core, "Told")
    given = ErrorInfo(error_type=ErrorInfo.USER_SIMULATION_FAILURE, error_message="Scripted boom.")
    rule = _rule(core, outcome=Rule.ERROR, evaluation=told.name, error_info=given)
    assert rule.error_info == given
    only_message = _golden(core, "Only a message")
    _rule(
        core,
        outcome=Rule.ERROR,
        evaluation=only_message.name,
        error_info=ErrorInfo(error_message="Just this."),
    )
    silent = _golden(core, "Silent")
    default = _rule(core, outcome=Rule.ERROR, evaluation=silent.name)
    _, results = _completed(core, evaluations=[told.name, only_message.name, silent.name])
    errors = {result.name.split("/results/")[0]: result.error_info for result in results}
    assert errors[told.name] == given
    assert errors[only_message.name] == ErrorInfo(
        error_type=ErrorInfo.RUNTIME_FAILURE, error_message="Just this."
    )
    assert errors[silent.name] == ErrorInfo(
        error_type=ErrorInfo.RUNTIME_FAILURE,
        error_message=f"Scripted error (outcome rule {default.name}).",
    )
