"""A run's byte budget while it plays, against the real server (docs/semantics.md, "Evaluation
runs"): a 79-byte golden passes the request's estimate, but an outcome rule makes each of its
repetitions store 2 MiB (a failing answer of 1 MiB, recorded in the result and in its
conversation), as an agent's large answers would. The run ends ERROR once the next result
would pass :data:`limits.MAX_RUN_BYTES`, and the database grows by no more than that."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import code_pb2, error_details_pb2

from ces_eval.contract import limits
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ces_eval.testing.server import RunningServer

APP = "projects/budget/locations/l/apps/a"
Run = evaluation_pb2.EvaluationRun
Rule = emulator_pb2.OutcomeRule
_MiB = 1024 * 1024
# Room the database needs beside the results and conversations themselves: the run's row and
# the evaluation's derived fields (its last completed result, rewritten at each batch), pages.
_BESIDE = 16 * _MiB


def _size(database: Path) -> int:
    return sum(
        path.stat().st_size
        for path in (database, database.with_name(database.name + "-wal"))
        if path.exists()
    )


def test_a_run_stops_at_its_byte_budget(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        service = service_grpc.EvaluationServiceStub(channel)
        emulator = emulator_grpc.EmulatorServiceStub(channel)
        operations = operations_pb2_grpc.OperationsStub(channel)
        golden = evaluation_pb2.Evaluation(display_name="Small")
        turn = golden.golden.turns.add()
        turn.steps.add().user_input.text = "hi"
        answer = turn.steps.add().expectation.agent_response
        answer.role = "agent"
        answer.chunks.add().text = "ok"
        evaluation = service.CreateEvaluation(
            service_pb2.CreateEvaluationRequest(parent=APP, evaluation=golden), timeout=30
        )
        rule = Rule(evaluation=evaluation.name, outcome=Rule.FAIL)
        rule.observed.text = "\U0001f600" * limits.MAX_STRING_CHARS  # 1 MiB of UTF-8
        emulator.CreateOutcomeRule(
            emulator_pb2.CreateOutcomeRuleRequest(parent=APP, outcome_rule=rule), timeout=30
        )
        before = _size(server.database)
        # 200 repetitions of 2 MiB: 400 MiB, past the 256 MiB budget.
        operation = service.RunEvaluation(
            evaluation_pb2.RunEvaluationRequest(
                app=APP, evaluations=[evaluation.name], run_count=200
            ),
            timeout=30,
        )
        wait = operations_pb2.WaitOperationRequest(name=operation.name)
        wait.timeout.seconds = 600
        done = operations.WaitOperation(wait, timeout=660)
        assert done.done
        metadata = service_pb2.RunEvaluationOperationMetadata()
        assert done.metadata.Unpack(metadata)
        run = service.GetEvaluationRun(
            service_pb2.GetEvaluationRunRequest(name=metadata.evaluation_run), timeout=30
        )
    assert server.stop() == 0  # a clean stop: the database's log is folded into its file
    grown = _size(server.database) - before
    stored = run.progress.completed_count
    state = Run.EvaluationRunState.Name(run.state)
    assert (state, done.error.code) == ("ERROR", code_pb2.INVALID_ARGUMENT), (state, grown)
    info = error_details_pb2.BadRequest()
    assert any(detail.Unpack(info) for detail in done.error.details), done.error
    [violation] = info.field_violations
    assert (violation.field, violation.reason) == ("run_count", "TOO_LARGE")
    assert f"{limits.MAX_RUN_BYTES} bytes" in run.error_info.error_message
    # Every result that fits is stored (each repetition is 2 MiB and a little more) ...
    assert limits.MAX_RUN_BYTES // (2 * _MiB + 1024) <= stored < limits.MAX_RUN_BYTES // (2 * _MiB)
    assert len(run.evaluation_results) == stored
    # ... and the database holds no more than the budget.
    assert grown <= limits.MAX_RUN_BYTES + _BESIDE, grown
