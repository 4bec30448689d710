"""Input the server must refuse cleanly on every surface: malformed protobuf, messages nested
deeper than protobuf allows, JSON nested deeper than Python's parser recurses. Each is
INVALID_ARGUMENT (400) in Google's error model, never UNKNOWN/INTERNAL or a leaked exception."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.testing.server import RunningServer

APP = "projects/p/locations/l/apps/a"
CREATE = "/google.cloud.ces.v1beta.EvaluationService/CreateEvaluation"


def _deep_request(depth: int) -> bytes:
    """A CreateEvaluationRequest whose tool-call args nest ``depth`` Structs."""
    request = service_pb2.CreateEvaluationRequest(parent=APP)
    request.evaluation.display_name = f"deep {depth}"
    step = request.evaluation.golden.turns.add().steps.add()
    step.expectation.tool_call.tool = f"{APP}/tools/t"
    level = step.expectation.tool_call.args
    for _ in range(depth):
        level = level.fields["a"].struct_value
    return request.SerializeToString()


def _grpc_error(server: RunningServer, payload: bytes) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_unary(CREATE)
        with pytest.raises(grpc.RpcError) as raised:
            call(payload, timeout=10)
    error = raised.value
    status = status_pb2.Status()
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    info = error_details_pb2.ErrorInfo()
    assert status.details and status.details[0].Unpack(info), error
    return error.code(), info.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xff\xff\xff\xff", id="not protobuf"),
        pytest.param(b"\x0a\x02\xc3\x28", id="invalid UTF-8 in parent"),
        pytest.param(b"\x12\x80\x80\x80\x80\x10", id="length beyond the message"),
        pytest.param(_deep_request(200), id="Structs nested 200 deep"),
    ],
)
def test_malformed_grpc_requests_are_invalid_argument(
    server: RunningServer, payload: bytes
) -> None:
    assert _grpc_error(server, payload) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    assert "Traceback" not in server.output()


def test_moderately_nested_structs_are_accepted(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        answer = channel.unary_unary(CREATE)(_deep_request(20), timeout=10)
    created = service_pb2.CreateEvaluationRequest().evaluation.FromString(answer)
    assert created.display_name == "deep 20"


def _json_create(server: RunningServer, depth: int) -> tuple[int, dict[str, object]]:
    """POST a create whose tool-call args nest ``depth`` JSON objects."""
    args = '{"a":' * depth + "1" + "}" * depth
    body = (
        f'{{"displayName":"deep {depth}","golden":{{"turns":[{{"steps":[{{"expectation":'
        f'{{"toolCall":{{"tool":"{APP}/tools/t","args":{args}}}}}}}]}}]}}}}'
    )
    request = urllib.request.Request(
        f"{server.http_base}/v1beta/{APP}/evaluations",
        data=body.encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_moderately_nested_json_is_accepted(server: RunningServer) -> None:
    status, created = _json_create(server, 3)
    assert status == 200
    assert created["displayName"] == "deep 3"


@pytest.mark.parametrize("depth", [60, 3_000, 200_000])
def test_deeply_nested_json_bodies_are_invalid_argument(server: RunningServer, depth: int) -> None:
    status, answer = _json_create(server, depth)
    assert status == 400
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["status"] == "INVALID_ARGUMENT"
    assert "deep" in error["message"]
    assert "Traceback" not in server.output()
