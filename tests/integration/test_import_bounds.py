"""What an import reports stays within what every client reads (limits.MAX_RESOURCE_BYTES), on
the real server: the official ImportEvaluations' operation, read back by GetOperation over gRPC
and REST, and the emulator's ImportEvaluations answer.

A 3 MB CSV of bad rows, each quoting a cell of 30,000 control characters (four characters each
when quoted), made an operation of 12 MB: GetOperation over gRPC answered RESOURCE_EXHAUSTED (the
client's 4 MiB receive limit). A document of 100 evaluations with 54,000-character names made
an emulator answer of 5.4 MB. Each problem is now cut at limits.MAX_PROBLEM_CHARS and at most
limits.MAX_VIOLATIONS are listed, then how many more (docs/semantics.md, "ImportEvaluations").
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from ces_eval.contract.limits import MAX_IMPORT_EVALUATIONS, MAX_RESOURCE_BYTES, MAX_VIOLATIONS
from ces_eval.core.exchange import FORMAT
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.testing.server import RunningServer, start_server

APP = "projects/bounds/locations/l/apps/a"
BAD_ROWS = 100
CELL = "\x01" * 30_000  # quoted as '\x01\x01…': four characters each


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("import-bounds") / "db.sqlite")
    try:
        yield running
    finally:
        running.kill()


def _operation(server: RunningServer, http: httpx.Client, name: str) -> dict[str, Any]:
    for _ in range(600):
        answer = http.get(f"/v1beta/{name}")
        assert answer.status_code == 200, answer.text[:2000]
        operation: dict[str, Any] = answer.json()
        if operation.get("done"):
            return operation
        time.sleep(0.1)
    raise AssertionError(f"{name} did not end")


def test_a_csv_of_bad_rows_makes_an_operation_every_client_reads(server: RunningServer) -> None:
    rows = ["display_name,turn_index,action_type,text"]
    rows += [f"Bad {i},1,{CELL}," for i in range(BAD_ROWS)]
    rows += [f"Good {i},1,user_input,hi" for i in range(3)]
    rows[-3] = "Good 0,1,user_input,"  # text missing: the file holds both kinds
    content = ("\n".join(rows) + "\n").encode()
    assert len(content) > 3_000_000
    with httpx.Client(base_url=server.http_base, timeout=120) as http:
        started = http.post(
            f"/v1beta/{APP}:importEvaluations",
            json={"parent": APP, "csvContent": base64.b64encode(content).decode()},
        )
        assert started.status_code == 200, started.text[:2000]
        name = started.json()["name"]
        rest = _operation(server, http, name)
        rest_size = len(http.get(f"/v1beta/{name}").content)
    with grpc.insecure_channel(server.grpc_target) as channel:
        operation = operations_pb2_grpc.OperationsStub(channel).GetOperation(
            operations_pb2.GetOperationRequest(name=name), timeout=60
        )
    # Before: 12,017,367 bytes over gRPC (RESOURCE_EXHAUSTED), 15,017,429 bytes of JSON.
    print(f"operation: {operation.ByteSize()} bytes (gRPC), {rest_size} bytes (REST)")
    assert operation.ByteSize() <= MAX_RESOURCE_BYTES
    assert rest_size <= MAX_RESOURCE_BYTES
    response = service_pb2.ImportEvaluationsResponse()
    assert operation.response.Unpack(response)
    assert response.import_failure_count == BAD_ROWS + 1
    messages = list(response.error_messages)
    assert len(messages) == MAX_VIOLATIONS + 1
    assert messages[-1] == "… and 1 more errors."
    assert messages[0].startswith("line 2: unknown action_type '\\x01")
    assert "more characters)" in messages[0]
    assert [e["displayName"] for e in rest["response"]["evaluations"]] == ["Good 1", "Good 2"]
    assert "Traceback" not in server.output()


def _document(evaluations: list[dict[str, Any]]) -> str:
    text = json.dumps({"format": FORMAT, "evaluations": evaluations, "evaluationResults": []})
    return base64.b64encode(text.encode()).decode()


def _golden(name: str) -> dict[str, Any]:
    turns = [{"steps": [{"userInput": {"text": "hi"}}]}]
    return {"name": name, "displayName": name[-40:], "golden": {"turns": turns}}


def _grpc_refusal(server: RunningServer, content: str) -> status_pb2.Status:
    request = emulator_pb2.ImportEvaluationsRequest(parent=APP, content=base64.b64decode(content))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = emulator_grpc.EmulatorServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ImportEvaluations(request, timeout=60)
    trailers = dict(refused.value.trailing_metadata() or ())
    return status_pb2.Status.FromString(trailers["grpc-status-details-bin"])


def test_the_emulators_refusal_of_long_names_is_an_answer_every_client_reads(
    server: RunningServer,
) -> None:
    names = [f"projects/x/locations/l/apps/b/evaluations/e{i}{'x' * 54_000}" for i in range(100)]
    content = _document([_golden(n) for n in names])
    with httpx.Client(base_url=server.http_base, timeout=120) as http:
        answer = http.post(f"/emulator/v1/{APP}:importEvaluations", json={"content": content})
    # Before: 5.4 MB of JSON, each violation quoting a whole name.
    print(f"emulator answer: {len(answer.content)} bytes (REST)")
    assert answer.status_code == 400
    assert len(answer.content) <= MAX_RESOURCE_BYTES
    status = _grpc_refusal(server, content)
    print(f"emulator answer: {status.ByteSize()} bytes (gRPC status)")
    assert status.ByteSize() <= MAX_RESOURCE_BYTES
    rest = answer.json()["error"]["details"][1]["fieldViolations"]
    assert [v["field"] for v in rest] == [f"content.evaluations[{i}].name" for i in range(100)]
    assert all("more characters)" in v["description"] for v in rest)
    bad = error_details_pb2.BadRequest()
    assert next(d for d in status.details if d.Unpack(bad))
    # gRPC's trailers hold as many of them as fit (the gRPC surface's own bound).
    assert [v.field for v in bad.field_violations] == [v["field"] for v in rest][
        : len(bad.field_violations)
    ]
    assert "Traceback" not in server.output()


def test_the_emulator_imports_at_most_the_evaluations_its_answer_can_name(
    server: RunningServer,
) -> None:
    """An answer names each imported evaluation: at most MAX_IMPORT_EVALUATIONS of them,
    whose longest names fit in it."""
    app = "projects/bounds/locations/l/apps/many"
    evaluations = [_golden(f"{app}/evaluations/e{i}") for i in range(MAX_IMPORT_EVALUATIONS + 1)]
    with httpx.Client(base_url=server.http_base, timeout=120) as http:
        answer = http.post(
            f"/emulator/v1/{app}:importEvaluations", json={"content": _document(evaluations)}
        )
        assert answer.status_code == 400, answer.text[:2000]
        violations = answer.json()["error"]["details"][1]["fieldViolations"]
        assert [(v["field"], v["reason"]) for v in violations] == [
            ("content.evaluations", "TOO_MANY")
        ]
        assert http.get(f"/v1beta/{app}/evaluations").json().get("evaluations", []) == []
