"""One request under the size limit must not freeze the server (issue 15, item 1).

The attack: bodies and messages as large as the size limit allows, made of as many empty
elements as fit (``"turns": [{}, {}, …]``, millions of tags, a Struct with most of a million
keys), sent over REST, MCP and gRPC. Before the fix each one held the event loop for seconds to
minutes (validation built one violation per element): ``/healthz`` and gRPC Health did not
answer meanwhile, for every tenant. Also the worst requests the limits accept: 100 turns of
1,000 steps each, stored.

Each request is sent while another process polls ``/healthz`` and gRPC Health
(tests/support/stall.py): every probe must answer within 100 ms (the issue's bound), the
hostile request must get a clean INVALID_ARGUMENT naming the container over its limit (one
violation), and the server's peak RSS (VmHWM of a fresh server, reset before the request) must
stay bounded. The measurements are
printed (``pytest -s``) and kept in ``MEASURED`` for a report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2

from ces_eval.contract import limits
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.testing.server import RunningServer
from tests.support.errors import violations
from tests.support.mcp import ACCEPT, tool_call
from tests.support.stall import HEALTH_BOUND, probing

APP = "projects/p/locations/l/apps/freeze"
EVALUATIONS = f"/v1beta/{APP}/evaluations"
CREATE = "/google.cloud.ces.v1beta.EvaluationService/CreateEvaluation"
ARGS = "evaluation.golden.turns[0].steps[0].expectation.tool_call.args"
TURNS = "evaluation.golden.turns"
TAGS = "evaluation.tags"

ANSWER_TIMEOUT = 120  # seconds: a client timeout, not a latency assertion
PEAK_RSS_BOUND = 600 * 1024 * 1024  # bytes
REST_BODY = limits.MAX_REQUEST_BYTES - 1024  # just under the limit
# The MCP SDK refused bodies over 4 MiB before issue 15 raised its limit to ours (item 10);
# the attack stays under both.
MCP_BODY = 4 * 1024 * 1024 - 1024
GRPC_MESSAGE = limits.MAX_REQUEST_BYTES - 1024

MEASURED: dict[str, Measured] = {}


@dataclass
class Measured:
    seconds: float = 0.0  # until the answer arrived
    probes: list[float] = field(default_factory=list)  # each probe's latency, seconds
    peak_rss: int = 0  # bytes (VmHWM)
    outcome: object = None

    def line(self, name: str) -> str:
        worst = max(self.probes, default=0.0)
        return (
            f"{name}: answered in {self.seconds:.2f} s; {len(self.probes)} probes, slowest "
            f"{worst * 1000:.0f} ms; peak RSS {self.peak_rss / 2**20:.0f} MiB; {self.outcome}"
        )


# -- the requests ----------------------------------------------------------------------------------


def _fill(prefix: str, element: str, suffix: str, size: int) -> bytes:
    """``prefix`` + as many comma-separated ``element`` as fit in ``size`` bytes + ``suffix``."""
    count = (size - len(prefix) - len(suffix)) // (len(element) + 1)
    return (prefix + ",".join([element] * count) + suffix).encode()


def _keys(prefix: str, suffix: str, size: int) -> bytes:
    """A JSON object of distinct keys (``"k1a2b": 0``), as many as fit, inside prefix/suffix."""
    room = size - len(prefix) - len(suffix)
    keys: list[str] = []
    used = 0
    while True:
        key = f'"k{len(keys):x}":0'
        if used + len(key) + 1 > room:
            break
        keys.append(key)
        used += len(key) + 1
    return (prefix + ",".join(keys) + suffix).encode()


def _in_args(key_object_start: str) -> tuple[str, str]:
    """The JSON around a tool call's args object, in an evaluation."""
    head = (
        '{"displayName":"hostile","golden":{"turns":[{"steps":[{"expectation":{"toolCall":'
        f'{{"tool":"{APP}/tools/t","args":{key_object_start}'
    )
    return head, "}}}]}]}}"


def rest_turns() -> bytes:
    return _fill('{"displayName":"hostile","golden":{"turns":[', "{}", "]}}", REST_BODY)


def rest_tags() -> bytes:
    return _fill('{"displayName":"hostile","tags":[', '"a"', "]}", REST_BODY)


def rest_struct() -> bytes:
    head, tail = _in_args("{")
    return _keys(head, "}" + tail, REST_BODY)


def _mcp(evaluation: Callable[[int], bytes]) -> bytes:
    """A tools/call of create_evaluation whose evaluation is ``evaluation(room)``."""
    head = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_evaluation",'
        f'"arguments":{{"parent":"{APP}","evaluation":'
    ).encode()
    tail = b"}}}"
    return head + evaluation(MCP_BODY - len(head) - len(tail)) + tail


def mcp_turns() -> bytes:
    return _mcp(
        lambda room: _fill('{"displayName":"hostile","golden":{"turns":[', "{}", "]}}", room)
    )


def mcp_struct() -> bytes:
    head, tail = _in_args("{")
    return _mcp(lambda room: _keys(head, "}" + tail, room))


def _wire(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    tag, length = bytearray([number << 3 | 2]), len(payload)
    while length >= 0x80:
        tag.append(length & 0x7F | 0x80)
        length >>= 7
    tag.append(length)
    return bytes(tag) + payload


def _grpc_create(evaluation_fields: bytes) -> bytes:
    """A CreateEvaluationRequest whose evaluation is display_name plus ``evaluation_fields``."""
    evaluation = _wire(2, b"hostile") + evaluation_fields
    return _wire(1, APP.encode()) + _wire(3, evaluation)


def grpc_turns() -> bytes:
    # Evaluation.golden (11) holding Golden.turns (2), each empty: 2 bytes a turn.
    room = GRPC_MESSAGE - 200
    return _grpc_create(_wire(11, _wire(2, b"") * (room // 2)))


def grpc_tags() -> bytes:
    room = GRPC_MESSAGE - 200
    return _grpc_create(_wire(4, b"a") * (room // 3))  # Evaluation.tags (4)


def grpc_struct() -> bytes:
    """A tool call's args with as many distinct keys (each an empty Value) as fit."""
    entries: list[bytes] = []
    used, room = 0, GRPC_MESSAGE - 500
    while True:
        entry = _wire(1, _wire(1, f"k{len(entries):x}".encode()) + _wire(2, b""))
        if used + len(entry) > room:
            break
        entries.append(entry)
        used += len(entry)
    args = b"".join(entries)
    # Step.expectation (3) → GoldenExpectation.tool_call → ToolCall.args, by descriptor.
    expectation = evaluation_pb2.Evaluation.GoldenExpectation.DESCRIPTOR
    tool_call = expectation.fields_by_name["tool_call"]
    args_field = tool_call.message_type.fields_by_name["args"]
    tool_field = tool_call.message_type.fields_by_name["tool"]
    call = _wire(tool_field.number, f"{APP}/tools/t".encode()) + _wire(args_field.number, args)
    step = _wire(3, _wire(tool_call.number, call))
    return _grpc_create(_wire(11, _wire(2, _wire(1, step))))


def valid_evaluation() -> dict[str, Any]:
    """The largest golden conversation the count limits accept: 100 turns of 1,000 steps."""
    turn = {"steps": [{"userInput": {"text": "hi"}}] * limits.MAX_REPEATED}
    return {"displayName": "allowed", "golden": {"turns": [turn] * limits.MAX_GOLDEN_TURNS}}


# -- sending them ----------------------------------------------------------------------------------


def _violations_of(error: dict[str, Any]) -> list[tuple[str, str]]:
    assert error["status"] == "INVALID_ARGUMENT", error
    return violations(error)


@dataclass(frozen=True)
class Target:
    """Where a sender process sends its request."""

    http_base: str
    grpc_target: str


def send_rest(server: Target, body: bytes) -> object:
    response = httpx.post(
        server.http_base + EVALUATIONS,
        content=body,
        headers={"content-type": "application/json"},
        timeout=ANSWER_TIMEOUT,
    )
    if response.status_code == 200:
        return "created"
    assert response.status_code == 400, response.text[:2000]
    return _violations_of(response.json()["error"])


def send_mcp(server: Target, body: bytes) -> object:
    response = httpx.post(
        server.http_base + "/mcp",
        content=body,
        headers={"content-type": "application/json", "accept": ACCEPT},
        timeout=ANSWER_TIMEOUT,
    )
    if response.status_code == 400:  # refused before MCP read it: a JSON-RPC error
        return _violations_of(response.json()["error"]["data"])
    assert response.status_code == 200, response.text[:2000]
    result = response.json()["result"]
    if not result["isError"]:
        return "created"
    return _violations_of(json.loads(result["content"][0]["text"])["error"])


def send_grpc(server: Target, body: bytes) -> object:
    with grpc.insecure_channel(server.grpc_target) as channel:
        try:
            channel.unary_unary(CREATE)(body, timeout=ANSWER_TIMEOUT)
        except grpc.RpcError as raised:
            error: Any = raised
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
            status = status_pb2.Status()
            for key, value in error.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    status.ParseFromString(value)
            found: list[tuple[str, str]] = []
            for detail in status.details:
                bad_request = error_details_pb2.BadRequest()
                if detail.Unpack(bad_request):
                    found += [(v.field, v.reason) for v in bad_request.field_violations]
            return found
    return "created"


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def measure(
    server: RunningServer, send: Callable[[Target, bytes], object], body: bytes
) -> Measured:
    """Send ``body`` with ``send`` while another process probes /healthz and gRPC Health
    (tests/support/stall.py) until it is answered."""
    pid = server.process.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    measured = Measured()
    target = Target(server.http_base, server.grpc_target)
    with probing(server) as probes:
        started = time.monotonic()
        measured.outcome = send(target, body)
        measured.seconds = time.monotonic() - started
    measured.probes = [seconds for _, seconds in probes.latencies]
    measured.peak_rss = _peak_rss(pid)
    return measured


def _check(
    name: str,
    server: RunningServer,
    send: Callable[[Target, bytes], object],
    body: bytes,
    expected: object,
) -> None:
    measured = measure(server, send, body)
    MEASURED[name] = measured
    print(measured.line(name))
    assert measured.outcome == expected
    assert measured.peak_rss < PEAK_RSS_BOUND, f"peak RSS {measured.peak_rss / 2**20:.0f} MiB"
    assert "Traceback" not in server.output()
    slow = [f"{p * 1000:.0f} ms" for p in measured.probes if p > HEALTH_BOUND]
    assert not slow, f"health probes slower than {HEALTH_BOUND * 1000:.0f} ms: {slow}"


# Refused before MCP reads it (surfaces/mcp_bodies.py): the violation names the place in the
# JSON-RPC message, as sent.
MCP_TURNS = "params.arguments.evaluation.golden.turns"
MCP_ARGS = "params.arguments.evaluation.golden.turns[0].steps[0].expectation.toolCall.args"

HOSTILE = [
    pytest.param(send_rest, rest_turns, [(TURNS, "TOO_MANY")], id="rest-turns"),
    pytest.param(send_rest, rest_tags, [(TAGS, "TOO_MANY")], id="rest-tags"),
    pytest.param(send_rest, rest_struct, [(ARGS, "TOO_MANY")], id="rest-struct"),
    pytest.param(send_mcp, mcp_turns, [(MCP_TURNS, "TOO_MANY")], id="mcp-turns"),
    pytest.param(send_mcp, mcp_struct, [(MCP_ARGS, "TOO_MANY")], id="mcp-struct"),
    pytest.param(send_grpc, grpc_turns, [(TURNS, "TOO_MANY")], id="grpc-turns"),
    pytest.param(send_grpc, grpc_tags, [(TAGS, "TOO_MANY")], id="grpc-tags"),
    pytest.param(send_grpc, grpc_struct, [(ARGS, "TOO_MANY")], id="grpc-struct"),
]


@pytest.mark.parametrize(("send", "build", "expected"), HOSTILE)
def test_a_hostile_request_under_the_size_limit_freezes_nothing(
    server: RunningServer,
    send: Callable[[Target, bytes], object],
    build: Callable[[], bytes],
    expected: list[tuple[str, str]],
    request: pytest.FixtureRequest,
) -> None:
    _check(request.node.callspec.id, server, send, build(), expected)


def _valid_json() -> bytes:
    return json.dumps(valid_evaluation(), separators=(",", ":")).encode()


def _valid_mcp() -> bytes:
    arguments = {"parent": APP, "evaluation": {**valid_evaluation(), "displayName": "via MCP"}}
    message = tool_call("create_evaluation", arguments, request_id=2)
    return json.dumps(message, separators=(",", ":")).encode()


def _valid_grpc() -> bytes:
    evaluation = evaluation_pb2.Evaluation()
    evaluation.display_name = "via gRPC"
    for _ in range(limits.MAX_GOLDEN_TURNS):
        steps = evaluation.golden.turns.add().steps
        for _ in range(limits.MAX_REPEATED):
            steps.add().user_input.text = "hi"
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    return request.SerializeToString()


ALLOWED = [
    pytest.param(send_rest, _valid_json, id="rest"),
    pytest.param(send_mcp, _valid_mcp, id="mcp"),
    pytest.param(send_grpc, _valid_grpc, id="grpc"),
]


@pytest.mark.parametrize(("send", "build"), ALLOWED)
def test_the_largest_allowed_evaluation_is_stored_without_freezing_anything(
    server: RunningServer,
    send: Callable[[Target, bytes], object],
    build: Callable[[], bytes],
    request: pytest.FixtureRequest,
) -> None:
    name = f"allowed-{request.node.callspec.id}"
    _check(name, server, send, build(), "created")
