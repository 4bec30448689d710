"""The real server process: health, reflection, unknown methods, SIGTERM, crash durability."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, run_serve, start_server
from tests.support import contract
from tests.support.load import CreateLoad, golden_evaluation, list_names

APP = "projects/p/locations/l/apps/a"


def test_health_and_reflection(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", *contract.SERVICES):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        listed = {s.name for r in responses for s in r.list_services_response.service}
    assert listed == {
        *contract.SERVICES,
        "ces_eval.emulator.v1.EmulatorService",
        "google.longrunning.Operations",
        "google.cloud.location.Locations",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


@pytest.mark.parametrize(
    "method",
    [
        "google.cloud.ces.v1beta.EvaluationService/NoSuchMethod",
        # A method name the API has, on a service it does not.
        "google.cloud.ces.v1beta.NoSuchService/RunEvaluation",
        "ces_eval.emulator.v1.EmulatorService/Unknown",
    ],
)
def test_unknown_methods_are_unimplemented_with_error_info(
    server: RunningServer, method: str
) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_unary(f"/{method}")
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=10)
    error = raised.value
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    trailers = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "METHOD_NOT_IMPLEMENTED"
    assert info.metadata["method"] == method
    assert method in status.message


def test_sigterm_drains_and_exits_zero(tmp_path: Path) -> None:
    running = start_server(tmp_path / "db.sqlite")
    load = CreateLoad([running.grpc_target], APP, tolerate=[running.grpc_target])
    load.wait_for(20)
    assert running.stop(signal.SIGTERM) == 0
    acknowledged = load.stop()
    assert "ces-eval stopped" in running.output()

    again = start_server(tmp_path / "db.sqlite")
    try:
        with grpc.insecure_channel(again.grpc_target) as channel:
            stub = service_grpc.EvaluationServiceStub(channel)
            for name in acknowledged:
                stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name), timeout=10)
    finally:
        again.kill()


def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    count = 60
    running = start_server(tmp_path / "db.sqlite")
    with grpc.insecure_channel(running.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        names = [
            stub.CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation(f"e{i}")
                ),
                timeout=10,
            ).name
            for i in range(count)
        ]
    running.process.send_signal(signal.SIGKILL)
    running.kill()

    again = start_server(tmp_path / "db.sqlite")
    try:
        with grpc.insecure_channel(again.grpc_target) as channel:
            listed = list_names(service_grpc.EvaluationServiceStub(channel), APP, page_size=25)
    finally:
        again.kill()
    assert sorted(listed) == sorted(names)
    assert len(listed) == count


def test_a_second_server_on_the_same_sqlite_file_is_refused(server: RunningServer) -> None:
    second = run_serve(f"sqlite:///{server.database}")
    assert second.returncode == 1
    assert "in use by another ces-eval server" in second.stderr
    assert "Traceback" not in second.stderr
    with grpc.insecure_channel(server.grpc_target) as channel:  # the first one is unharmed
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
