"""Long-running operations against the real server: crash recovery and export/import round trip."""

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
