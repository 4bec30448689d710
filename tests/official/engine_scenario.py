"""The run workflow driven by Google's official Python client: create evaluations, RunEvaluation,
wait for the operation, read the run and its results; scripted FAIL and ERROR outcomes, holds
observed QUEUED then RUNNING, a cancelled run, a dataset run with its latency report, a
schedule fired by moving the project's clock, and the request checks (harness.py's emulator
clients script the outcomes).

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import TOOL, golden  # type: ignore[import-not-found]
from harness import main, refused, step  # type: ignore[import-not-found]

Run = ces_v1beta.EvaluationRun
Result = ces_v1beta.EvaluationResult


def _scenario_evaluation(display_name: str) -> ces_v1beta.Evaluation:
    return ces_v1beta.Evaluation(
        display_name=display_name,
        scenario=ces_v1beta.Evaluation.Scenario(
            task="Ask where order 42 is.",
            rubrics=["The agent gives the order's status."],
            scenario_expectations=[
                ces_v1beta.Evaluation.ScenarioExpectation(
                    agent_response=ces_v1beta.Message(
                        role="agent", chunks=[ces_v1beta.Chunk(text="It has shipped.")]
                    )
                )
            ],
        ),
    )


def _run(client: Any, request: dict[str, Any]) -> tuple[Run, Any]:
    """RunEvaluation to its end: the run as GetEvaluationRun answers, and the operation."""
    operation = client.run_evaluation(request=request)
    response = operation.result(timeout=60)
    assert isinstance(response, ces_v1beta.RunEvaluationResponse), response
    metadata = operation.metadata
    assert isinstance(metadata, ces_v1beta.RunEvaluationOperationMetadata), metadata
    assert metadata.evaluation_run == response.evaluation_run and metadata.verb == "run"
    assert metadata.create_time and metadata.end_time, metadata
    return client.get_evaluation_run(name=response.evaluation_run), operation


def _results(client: Any, app: str, run: str) -> list[Result]:
    pages = client.list_evaluation_results(
        request={"parent": f"{app}/evaluations/-", "filter": f'evaluation_run = "{run}"'}
    )
    return list(pages)


def _state(client: Any, run: str, wanted: int, completed: int = 0, timeout: float = 30) -> Run:
    """Poll GetEvaluationRun until the run is in ``wanted`` with ``completed`` results (at
    least)."""
    deadline = time.monotonic() + timeout
    while True:
        found = client.get_evaluation_run(name=run)
        if found.state == wanted and found.progress.completed_count >= completed:
            return found
        assert time.monotonic() < deadline, f"{run} stayed {found.state.name}"
        time.sleep(0.05)


def scenario(client: Any, emulator: Any, app: str) -> None:
    first = client.create_evaluation(parent=app, evaluation=golden("Order status"))
    second = client.create_evaluation(parent=app, evaluation=golden("Refund"))
    simulated = client.create_evaluation(parent=app, evaluation=_scenario_evaluation("Asks"))
    listed = [first.name, second.name, simulated.name]

    run, operation = _run(client, {"app": app, "evaluations": listed})
    assert list(operation.metadata.evaluations) == listed
    assert run.state == Run.EvaluationRunState.COMPLETED, run.state
    assert run.evaluation_type == Run.EvaluationType.MIXED
    assert list(run.evaluations) == listed and run.operation == operation.operation.name
    assert run.golden_run_method == ces_v1beta.GoldenRunMethod.STABLE
    progress = run.progress
    # A golden runs once and a scenario five times by default.
    assert (progress.total_count, progress.completed_count, progress.passed_count) == (7, 7, 7)
    assert progress.failed_count == progress.error_count == progress.cancelled_count == 0
    results = _results(client, app, run.name)
    assert sorted(r.name for r in results) == sorted(run.evaluation_results)
    assert all(r.evaluation_status == Result.Outcome.PASS for r in results)
    assert all(r.execution_state == Result.ExecutionState.COMPLETED for r in results)
    assert all(r.evaluation_run == run.name and r.initiated_by for r in results)
    personas = {r.persona.name for r in results if r._pb.HasField("scenario_result")}
    assert personas == {f"{app}/evaluationPersonas/default"}, personas
    assert run.evaluation_run_summaries[simulated.name].passed_count == 5
    replay = next(r for r in results if r.name.startswith(first.name)).golden_result
    [turn] = replay.turn_replay_results
    [outcome] = turn.expectation_outcome
    assert outcome.observed_tool_call.args["order"] == 42 and outcome.outcome == Result.Outcome.PASS
    evaluation = client.get_evaluation(name=first.name)
    assert evaluation.last_completed_result.evaluation_run == run.name
    assert run.name in evaluation.evaluation_runs
    assert evaluation.aggregated_metrics.metrics_by_app_version[0].pass_count == 1
    step("run", run=run.name, results=len(results), total=progress.total_count)

    failing = emulator.create_outcome_rule(
        app,
        {"evaluation": second.name, "outcome": "FAIL", "observed": {"toolArgs": {"order": 7}}},
    )
    erring = emulator.create_outcome_rule(
        app, {"evaluationDisplayName": "Asks", "outcome": "ERROR"}
    )
    run, _ = _run(client, {"app": app, "evaluations": listed, "run_count": 2})
    progress = run.progress
    assert (progress.total_count, progress.passed_count, progress.failed_count) == (6, 2, 2)
    assert (progress.completed_count, progress.error_count) == (4, 2), progress
    assert run.state == Run.EvaluationRunState.COMPLETED
    results = _results(client, app, run.name)
    failed = [r for r in results if r.evaluation_status == Result.Outcome.FAIL]
    assert len(failed) == 2 and all(r.name.startswith(second.name) for r in failed)
    observed = failed[0].golden_result.turn_replay_results[0].expectation_outcome[0]
    assert observed.observed_tool_call.args["order"] == 7, observed
    assert observed.outcome == Result.Outcome.FAIL
    errors = [r for r in results if r.execution_state == Result.ExecutionState.ERROR]
    assert len(errors) == 2 and all(r.name.startswith(simulated.name) for r in errors)
    error_type = errors[0].error_info.error_type
    assert error_type == ces_v1beta.EvaluationErrorInfo.ErrorType.RUNTIME_FAILURE, error_type
    assert erring["name"] in errors[0].error_info.error_message
    summaries = run.evaluation_run_summaries
    assert (summaries[second.name].failed_count, summaries[simulated.name].error_count) == (2, 2)
    step("scripted", failed=len(failed), errors=len(errors))
    for rule in (failing, erring):
        emulator.delete_outcome_rule(rule["name"])

    held = emulator.create_outcome_rule(app, {"evaluation": first.name, "hold": "QUEUED"})
    operation = client.run_evaluation(request={"app": app, "evaluations": [first.name]})
    name = operation.metadata.evaluation_run
    time.sleep(0.3)
    assert client.get_evaluation_run(name=name).state == Run.EvaluationRunState.QUEUED
    assert not operation.done()
    emulator.release_outcome_rule(held["name"])
    operation.result(timeout=60)
    assert _state(client, name, Run.EvaluationRunState.COMPLETED).progress.passed_count == 1
    running = emulator.create_outcome_rule(app, {"tag": "orders", "hold": "RUNNING"})
    operation = client.run_evaluation(request={"app": app, "evaluations": [first.name]})
    name = operation.metadata.evaluation_run
    seen = _state(client, name, Run.EvaluationRunState.RUNNING)
    assert seen.progress.completed_count == 0 and seen.progress.total_count == 1
    emulator.release_outcome_rule(running["name"])
    operation.result(timeout=60)
    assert _state(client, name, Run.EvaluationRunState.COMPLETED).progress.completed_count == 1
    step("held", queued=held["name"], running=running["name"])

    stuck = emulator.create_outcome_rule(app, {"evaluation": second.name, "hold": "RUNNING"})
    operation = client.run_evaluation(
        request={"app": app, "evaluations": [first.name, second.name], "run_count": 3}
    )
    name = operation.metadata.evaluation_run
    _state(client, name, Run.EvaluationRunState.RUNNING, completed=3)
    operation.cancel()
    try:
        operation.result(timeout=60)
        raise AssertionError("a cancelled run's operation succeeded")
    except exceptions.GoogleAPICallError as error:  # the operation's error, as api_core raises it
        cancelled = type(error).__name__
    run = _state(client, name, Run.EvaluationRunState.CANCELLED)
    progress = run.progress
    # The first evaluation's three repetitions came before the hold; the rest were cancelled.
    assert (progress.completed_count, progress.cancelled_count) == (3, 3), progress
    assert operation.metadata.cancel_requested
    states = sorted(r.execution_state.name for r in _results(client, app, name))
    assert states == ["CANCELLED"] * 3 + ["COMPLETED"] * 3, states
    emulator.delete_outcome_rule(stuck["name"])
    step("cancelled", run=name, exception=cancelled)

    dataset = client.create_evaluation_dataset(
        parent=app,
        evaluation_dataset=ces_v1beta.EvaluationDataset(
            display_name="Nightly", evaluations=[first.name, second.name]
        ),
    )
    run, operation = _run(
        client,
        {
            "app": app,
            "evaluation_dataset": dataset.name,
            "display_name": "Nightly run",
            "generate_latency_report": True,
        },
    )
    assert run.display_name == "Nightly run" and run.evaluation_dataset == dataset.name
    assert not run.evaluations and list(operation.metadata.evaluations) == dataset.evaluations
    report = run.latency_report
    assert report.session_count == 2, report
    [tool] = report.tool_latencies
    assert tool.tool == TOOL and tool.latency_metrics.call_count == 2, tool
    assert tool.latency_metrics.p50_latency <= tool.latency_metrics.p99_latency
    stored = client.get_evaluation_dataset(name=dataset.name)
    assert stored.aggregated_metrics.metrics_by_app_version, stored
    step("dataset", run=run.name, tools=len(report.tool_latencies))

    start = datetime.now(UTC) + timedelta(hours=1)
    schedule = client.create_scheduled_evaluation_run(
        parent=app,
        scheduled_evaluation_run=ces_v1beta.ScheduledEvaluationRun(
            display_name="Hourly from now",
            active=True,
            request=ces_v1beta.RunEvaluationRequest(app=app, evaluations=[first.name]),
            scheduling_config=ces_v1beta.ScheduledEvaluationRun.SchedulingConfig(
                frequency=ces_v1beta.ScheduledEvaluationRun.SchedulingConfig.Frequency.DAILY,
                start_time=start,
            ),
        ),
    )
    clock = emulator.advance_clock(app.split("/locations/", maxsplit=1)[0], 2 * 3600)
    assert clock["offset"] == "7200s", clock
    fired = list(
        client.list_evaluation_runs(
            request={"parent": app, "filter": f'scheduled_evaluation_run = "{schedule.name}"'}
        )
    )
    assert len(fired) == 1, fired
    _state(client, fired[0].name, Run.EvaluationRunState.COMPLETED)
    counted = client.get_scheduled_evaluation_run(name=schedule.name)
    assert counted.total_executions == 1 and counted.last_completed_run == fired[0].name
    assert counted.next_scheduled_execution_time > start
    step("scheduled", run=fired[0].name, executions=counted.total_executions)

    both = refused(
        lambda: client.run_evaluation(
            request={"app": app, "evaluations": [first.name], "evaluation_dataset": dataset.name}
        ),
        exceptions.BadRequest,  # REST: HTTP 400; gRPC: InvalidArgument, its subclass
    )
    missing = refused(
        lambda: client.run_evaluation(
            request={"app": app, "evaluations": [first.name, f"{app}/evaluations/gone"]}
        ),
        exceptions.NotFound,
    )
    zero = refused(
        lambda: client.run_evaluation(
            request={"app": app, "evaluations": [first.name], "run_count": 0}
        ),
        exceptions.BadRequest,  # REST: HTTP 400; gRPC: InvalidArgument, its subclass
    )
    persona = refused(
        lambda: client.run_evaluation(
            request={
                "app": app,
                "evaluations": [simulated.name],
                "persona_run_configs": [{"persona": f"{app}/evaluationPersonas/pirate"}],
            }
        ),
        exceptions.NotFound,
    )
    step(
        "refused",
        both=both["violations"],
        missing=missing["reason"],
        zero=zero["violations"],
        persona=persona["reason"],
    )


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.emulator, wired.app("engine-project")))
