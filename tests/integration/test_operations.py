"""Long-running operations against the real server: crash recovery, export/import round trip,
and operation slots shared between projects."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import code_pb2

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, start_server
from tests.support import samples
from tests.support.datasets import seed_large
from tests.support.load import start_export

APP = "projects/big/locations/l/apps/a"
Run = evaluation_pb2.EvaluationRun
Rule = emulator_pb2.OutcomeRule


def test_export_interrupted_by_sigkill_is_failed_after_restart(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    names = seed_large(SqliteStorage(database), APP, 30, 100)
    running = start_server(database)
    operation = start_export(running.grpc_target, APP, names)
    assert not operation.done
    time.sleep(0.3)
    running.process.send_signal(signal.SIGKILL)
    running.kill()

    again = start_server(database)
    try:
        with grpc.insecure_channel(again.grpc_target) as channel:
            stored = operations_pb2_grpc.OperationsStub(channel).GetOperation(
                operations_pb2.GetOperationRequest(name=operation.name), timeout=30
            )
    finally:
        again.kill()
    assert stored.done
    assert stored.error.code == code_pb2.ABORTED
    assert "stopped while this operation was running" in stored.error.message
    # Neither the export nor a temporary file of it is left behind.
    left = [p for p in running.export_dir.rglob("*") if p.is_file()]
    assert left == []


def test_export_then_import_into_a_reset_project_restores_identical_resources(
    server: RunningServer,
) -> None:
    app = "projects/round-trip/locations/l/apps/a"
    with grpc.insecure_channel(server.grpc_target) as channel:
        service = service_grpc.EvaluationServiceStub(channel)
        emulator = emulator_grpc.EmulatorServiceStub(channel)
        operations = operations_pb2_grpc.OperationsStub(channel)
        created = []
        for index in range(3):
            evaluation = samples.populate(evaluation_pb2.Evaluation(), index)
            evaluation.display_name = f"E{index}"
            created.append(
                service.CreateEvaluation(
                    service_pb2.CreateEvaluationRequest(parent=app, evaluation=_valid(evaluation)),
                    timeout=30,
                )
            )
            for r in range(2):
                result = samples.populate(evaluation_pb2.EvaluationResult(), r)
                result.ClearField("name")
                result.evaluation_run = f"{app}/evaluationRuns/run-{r}"
                result.app_version = f"{app}/versions/v1"
                result.execution_state = evaluation_pb2.EvaluationResult.ExecutionState.COMPLETED
                emulator.CreateEvaluationResult(
                    emulator_pb2.CreateEvaluationResultRequest(
                        parent=created[-1].name,
                        evaluation_result_id=f"r{r}",
                        evaluation_result=result,
                    ),
                    timeout=30,
                )
        names = [e.name for e in created]

        def snapshot() -> tuple[
            list[evaluation_pb2.Evaluation], list[evaluation_pb2.EvaluationResult]
        ]:
            evaluations = [
                service.GetEvaluation(service_pb2.GetEvaluationRequest(name=n), timeout=30)
                for n in names
            ]
            results = list(
                service.ListEvaluationResults(
                    service_pb2.ListEvaluationResultsRequest(
                        parent=f"{app}/evaluations/-", order_by="name", page_size=100
                    ),
                    timeout=30,
                ).evaluation_results
            )
            return evaluations, results

        before = snapshot()
        operation = service.ExportEvaluations(
            service_pb2.ExportEvaluationsRequest(
                parent=app, names=names, include_evaluations=True, include_evaluation_results=True
            ),
            timeout=30,
        )
        done = operations.WaitOperation(
            operations_pb2.WaitOperationRequest(name=operation.name), timeout=60
        )
        assert done.done, done
        response = service_pb2.ExportEvaluationsResponse()
        assert done.response.Unpack(response)
        emulator.ResetProject(
            emulator_pb2.ResetProjectRequest(name="projects/round-trip"), timeout=30
        )
        imported = emulator.ImportEvaluations(
            emulator_pb2.ImportEvaluationsRequest(parent=app, content=response.evaluations_content),
            timeout=30,
        )
        assert sorted(imported.evaluations) == sorted(names)
        assert imported.imported_evaluation_results == 6
        after = snapshot()
    assert after == before


def _valid(evaluation: evaluation_pb2.Evaluation) -> evaluation_pb2.Evaluation:
    """A populated sample trimmed to what create accepts (golden or scenario with limits, no
    references to evaluation expectations, which do not exist here)."""
    evaluation.ClearField("name")
    evaluation.ClearField("evaluation_metrics_threshold_override")
    if evaluation.HasField("scenario"):
        evaluation.scenario.max_turns = 5
        evaluation.scenario.ClearField("evaluation_expectations")
    if evaluation.HasField("golden"):
        evaluation.golden.ClearField("evaluation_expectations")
        for turn in evaluation.golden.turns:
            for step in turn.steps:
                if step.HasField("expectation"):
                    level = step.expectation.expectation_level_metrics_thresholds_override
                    level.tool_invocation_parameter_correctness_threshold = 0.5
            turn_level = turn.turn_level_metrics_thresholds_override
            turn_level.overall_tool_invocation_correctness_threshold = 0.5
            turn_level.semantic_similarity_success_threshold = 3
    return evaluation


def test_one_projects_held_runs_leave_other_projects_a_slot(server: RunningServer) -> None:
    """Four runs of project a held RUNNING (as runs against a slow agent are) while project b
    runs an evaluation and exports it: b's operations complete while a's runs are held, and a
    runs one of its four once a slot of its own frees (docs/semantics.md, "Long-running
    operations")."""
    holder = "projects/tenant-a/locations/l/apps/a"
    other = "projects/tenant-b/locations/l/apps/b"
    with grpc.insecure_channel(server.grpc_target) as channel:
        service = service_grpc.EvaluationServiceStub(channel)
        emulator = emulator_grpc.EmulatorServiceStub(channel)
        operations = operations_pb2_grpc.OperationsStub(channel)

        def golden(app: str) -> str:
            evaluation = evaluation_pb2.Evaluation(display_name="Golden")
            evaluation.golden.turns.add().steps.add().user_input.text = "Hi"
            request = service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation)
            return service.CreateEvaluation(request, timeout=30).name

        def runs(operations_started: list[operations_pb2.Operation]) -> list[int]:
            states = []
            for operation in operations_started:
                metadata = service_pb2.RunEvaluationOperationMetadata()
                assert operation.metadata.Unpack(metadata)
                request = service_pb2.GetEvaluationRunRequest(name=metadata.evaluation_run)
                states.append(service.GetEvaluationRun(request, timeout=30).state)
            return states

        def done(operation: operations_pb2.Operation) -> operations_pb2.Operation:
            request = operations_pb2.WaitOperationRequest(name=operation.name)
            request.timeout.seconds = 30
            return operations.WaitOperation(request, timeout=60)

        held = golden(holder)
        rule = emulator.CreateOutcomeRule(
            emulator_pb2.CreateOutcomeRuleRequest(
                parent=holder, outcome_rule=Rule(evaluation=held, hold=Rule.RUNNING)
            ),
            timeout=30,
        )
        started = [
            service.RunEvaluation(
                evaluation_pb2.RunEvaluationRequest(app=holder, evaluations=[held]), timeout=30
            )
            for _ in range(4)
        ]
        deadline = time.monotonic() + 30
        while runs(started).count(Run.RUNNING) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # a fourth run would take the last slot now

        free = golden(other)
        run = service.RunEvaluation(
            evaluation_pb2.RunEvaluationRequest(app=other, evaluations=[free]), timeout=30
        )
        export = service.ExportEvaluations(
            service_pb2.ExportEvaluationsRequest(
                parent=other, names=[free], include_evaluations=True
            ),
            timeout=30,
        )
        for operation in (run, export):
            finished = done(operation)
            assert finished.done and not finished.HasField("error"), finished
        assert runs([run]) == [Run.COMPLETED]
        states = runs(started)  # a's runs still held meanwhile, the fourth waiting for a slot
        assert sorted(states) == sorted([Run.RUNNING] * 3 + [Run.QUEUED]), states

        emulator.ReleaseOutcomeRule(
            emulator_pb2.ReleaseOutcomeRuleRequest(name=rule.name), timeout=30
        )
        for operation in started:
            finished = done(operation)
            assert finished.done and not finished.HasField("error"), finished
        assert runs(started) == [Run.COMPLETED] * 4
