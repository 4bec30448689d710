"""Request limits against the real server (docs/security.md, "Limits"): message and body size on
gRPC, REST and MCP; Struct depth and golden turns naming the path on gRPC and REST; page size
coerced down past its maximum and refused when negative."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ces_eval.contract import limits
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import (
    emulator_service_pb2_grpc as emulator_grpc,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, start_server
from tests.support.mcp import ACCEPT

APP = "projects/p/locations/l/apps/limits"
EVALUATIONS = f"/v1beta/{APP}/evaluations"
OVER = 11 * 1024 * 1024  # bytes: over the 10 MiB request limit
ARGS = "evaluation.golden.turns[0].steps[0].expectation.tool_call.args"
TOO_DEEP_PATH = ARGS + '.fields["a"].struct_value' * limits.MAX_STRUCT_DEPTH


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("limits") / "ces-eval.db")
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def stub(server: RunningServer) -> Iterator[service_grpc.EvaluationServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield service_grpc.EvaluationServiceStub(channel)


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_base, timeout=60) as client:
        yield client


def evaluation(display_name: str, turns: int = 1, depth: int = 0) -> evaluation_pb2.Evaluation:
    """A golden evaluation of ``turns`` turns; the first step of the first is a tool call whose
    args nest ``depth`` Structs (args itself is the first)."""
    message = evaluation_pb2.Evaluation(display_name=display_name)
    for _ in range(turns):
        message.golden.turns.add().steps.add().user_input.text = "hi"
    if depth:
        step = message.golden.turns[0].steps[0]
        step.expectation.tool_call.tool = f"{APP}/tools/t"
        level = step.expectation.tool_call.args
        for _ in range(depth - 1):
            level = level.fields["a"].struct_value
        level.fields["leaf"].number_value = 1
    return message


def grpc_error(call: Any, request: Any) -> tuple[grpc.StatusCode, list[tuple[str, str]]]:
    """The status code of a failing call and its BadRequest violations (field, reason)."""
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=60)
    error: Any = raised.value
    found: list[tuple[str, str]] = []
    status = rpc_status.from_call(error)
    for detail in status.details if status else ():
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            found += [(v.field, v.reason) for v in bad_request.field_violations]
    return error.code(), found


def rest_violations(response: httpx.Response) -> list[tuple[str, str]]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    [bad_request] = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
    return [(v["field"], v.get("reason", "")) for v in bad_request["fieldViolations"]]


def assert_too_large(response: httpx.Response, *, jsonrpc: bool = False) -> None:
    """413 in Google's error envelope, with exactly one ErrorInfo naming the limit; with
    ``jsonrpc`` (/mcp) a JSON-RPC error carrying that envelope's error as its data."""
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    if jsonrpc:
        assert error["code"] == -32000
        error = error["data"]
    assert (error["code"], error["status"]) == (413, "RESOURCE_EXHAUSTED")
    [info] = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] == "REQUEST_BODY_TOO_LARGE"
    assert info["metadata"] == {"limit": str(limits.MAX_REQUEST_BYTES)}


# -- size ------------------------------------------------------------------------------------------


def test_grpc_message_over_the_limit_is_resource_exhausted(
    server: RunningServer, stub: service_grpc.EvaluationServiceStub
) -> None:
    big = evaluation("big")
    big.description = "d" * OVER
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=big)
    code, _ = grpc_error(stub.CreateEvaluation, request)
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    created = stub.CreateEvaluation(
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation("after big")),
        timeout=30,
    )
    assert created.display_name == "after big"
    assert "Traceback" not in server.output()


def test_grpc_message_under_the_size_limit_meets_the_field_limits(
    stub: service_grpc.EvaluationServiceStub,
) -> None:
    """9 MiB: above grpc's default 4 MiB, under ours; the string limit answers, by path."""
    big = evaluation("nine")
    big.description = "d" * (9 * 1024 * 1024)
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=big)
    assert grpc_error(stub.CreateEvaluation, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        [("evaluation.description", "TOO_LONG")],
    )


def test_rest_body_over_the_limit_is_413(http: httpx.Client) -> None:
    body = b"{" + b" " * OVER + b"}"
    assert_too_large(
        http.post(EVALUATIONS, content=body, headers={"content-type": "application/json"})
    )


def _mcp_list(http: httpx.Client, body: bytes | Iterator[bytes]) -> httpx.Request:
    return http.build_request(
        "POST",
        "/mcp",
        headers={"accept": ACCEPT, "content-type": "application/json"},
        content=body,
    )


def test_mcp_body_over_the_limit_is_413(http: httpx.Client) -> None:
    padding = b" " * OVER
    declared = http.send(
        _mcp_list(http, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"' + padding)
    )
    assert_too_large(declared, jsonrpc=True)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"'
        for _ in range(OVER // (1 << 20)):
            yield b" " * (1 << 20)
        yield b"}"

    streamed = http.send(_mcp_list(http, chunks()))
    assert "content-length" not in streamed.request.headers
    assert_too_large(streamed, jsonrpc=True)


def test_mcp_body_under_the_limit_is_served(http: httpx.Client) -> None:
    """The limit reads the body before MCP does; MCP still gets all of it, streamed or not."""
    request = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode()
    padded = request[:-1] + b" " * (2 * 1024 * 1024) + b"}"

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(padded), 1 << 16):
            yield padded[start : start + (1 << 16)]

    for body in (padded, chunks()):
        response = http.send(_mcp_list(http, body))
        assert response.status_code == 200, response.text
        assert response.json()["id"] == 3
        assert any(t["name"] == "create_evaluation" for t in response.json()["result"]["tools"])


# -- nesting and counts, named by path -----------------------------------------------------------


def test_a_too_deep_struct_is_refused_naming_it(
    http: httpx.Client, stub: service_grpc.EvaluationServiceStub
) -> None:
    deep = evaluation("deep", depth=limits.MAX_STRUCT_DEPTH + 1)
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=deep)
    code, [(field, reason)] = grpc_error(stub.CreateEvaluation, request)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TOO_DEEP")
    # gRPC errors travel in trailers, which the surface keeps small: a long path may be cut.
    assert field == TOO_DEEP_PATH or (field.endswith("…") and TOO_DEEP_PATH.startswith(field[:-1]))
    args = '{"a":' * limits.MAX_STRUCT_DEPTH + '{"leaf": 1}' + "}" * limits.MAX_STRUCT_DEPTH
    body = (
        '{"displayName": "deep", "golden": {"turns": [{"steps": [{"expectation": {"toolCall": '
        f'{{"tool": "{APP}/tools/t", "args": {args}}}}}}}]}}]}}}}'
    )
    response = http.post(EVALUATIONS, content=body, headers={"content-type": "application/json"})
    assert rest_violations(response) == [(TOO_DEEP_PATH, "TOO_DEEP")]


def test_a_struct_at_the_depth_limit_is_stored(
    http: httpx.Client, stub: service_grpc.EvaluationServiceStub
) -> None:
    deep = evaluation("at the limit", depth=limits.MAX_STRUCT_DEPTH)
    created = stub.CreateEvaluation(
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation=deep), timeout=30
    )
    assert created.golden == deep.golden
    read = http.get(f"/v1beta/{created.name}")
    assert read.status_code == 200
    assert '"leaf": 1' in json.dumps(read.json())


def test_golden_turns_over_the_limit_are_refused_naming_them(
    http: httpx.Client, stub: service_grpc.EvaluationServiceStub
) -> None:
    many = evaluation("many", turns=limits.MAX_GOLDEN_TURNS + 1)
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=many)
    assert grpc_error(stub.CreateEvaluation, request) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        [("evaluation.golden.turns", "TOO_MANY")],
    )
    turns = [{"steps": [{"userInput": {"text": "hi"}}]}] * (limits.MAX_GOLDEN_TURNS + 1)
    response = http.post(EVALUATIONS, json={"displayName": "many", "golden": {"turns": turns}})
    assert rest_violations(response) == [("evaluation.golden.turns", "TOO_MANY")]
    response = http.post(EVALUATIONS, json={"displayName": "many", "golden": {"turns": turns[1:]}})
    assert response.status_code == 200, response.text
    assert len(response.json()["golden"]["turns"]) == limits.MAX_GOLDEN_TURNS


# -- page size -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crowded_app(server: RunningServer) -> str:
    """An app holding one evaluation more than the largest page, imported in one request."""
    app = "projects/p/locations/l/apps/crowded"
    count = limits.MAX_PAGE_SIZE + 1
    document = {
        "format": "ces-eval.export/v1",
        "evaluations": [
            {
                "name": f"{app}/evaluations/e{i:04d}",
                "displayName": f"E{i}",
                "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
            }
            for i in range(count)
        ],
    }
    with grpc.insecure_channel(server.grpc_target) as channel:
        imported = emulator_grpc.EmulatorServiceStub(channel).ImportEvaluations(
            emulator_pb2.ImportEvaluationsRequest(
                parent=app, content=json.dumps(document).encode()
            ),
            timeout=120,
        )
    assert len(imported.evaluations) == count
    return app


def test_page_size_over_the_maximum_is_coerced_down(
    crowded_app: str, http: httpx.Client, stub: service_grpc.EvaluationServiceStub
) -> None:
    page = stub.ListEvaluations(
        service_pb2.ListEvaluationsRequest(parent=crowded_app, page_size=5_000, order_by="name"),
        timeout=60,
    )
    assert len(page.evaluations) == limits.MAX_PAGE_SIZE
    assert page.next_page_token
    rest = http.get(
        f"/v1beta/{crowded_app}/evaluations", params={"pageSize": 5_000, "orderBy": "name"}
    )
    assert rest.status_code == 200
    assert len(rest.json()["evaluations"]) == limits.MAX_PAGE_SIZE
    last = stub.ListEvaluations(
        service_pb2.ListEvaluationsRequest(
            parent=crowded_app, page_size=5_000, order_by="name", page_token=page.next_page_token
        ),
        timeout=60,
    )
    assert [e.display_name for e in last.evaluations] == [f"E{limits.MAX_PAGE_SIZE}"]
    assert not last.next_page_token


def test_negative_page_size_is_invalid_argument(
    http: httpx.Client, stub: service_grpc.EvaluationServiceStub
) -> None:
    request = service_pb2.ListEvaluationsRequest(parent=APP, page_size=-1)
    code, violations = grpc_error(stub.ListEvaluations, request)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in violations] == ["page_size"]
    response = http.get(EVALUATIONS, params={"pageSize": -1})
    assert [field for field, _ in rest_violations(response)] == ["page_size"]
