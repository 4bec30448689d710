"""The boundary every call crosses (ces_eval.surfaces.boundary) and the one HTTP error writer
(ces_eval.surfaces.asgi), in process: each outcome of a call, and the last-resort catch on each
surface."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import io
import json
import logging
import pkgutil
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import error_details_pb2, status_pb2
from mcp import Client

from ces_eval import logs
from ces_eval.access import DEFAULT_USER, Caller, Tokens
from ces_eval.admission import Admission
from ces_eval.contract import schema
from ces_eval.errors import Code, ServiceError
from ces_eval.surfaces.asgi import http_answer, send_error
from ces_eval.surfaces.boundary import INTERNAL_MESSAGE, Boundary, Inputs
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import BodyLimit
from ces_eval.surfaces.mcp_tools import build_server, tool_specs
from ces_eval.surfaces.rest import Transcoder
from ces_eval.transcoding import errors
from ces_eval.transcoding.router import Router
from tests.support.imports import imports_of, source_of
from tests.support.tokens import ALICE

GET = "/google.longrunning.Operations/GetOperation"
OPERATION = "projects/p/locations/l/operations/o"
BOUNDARY_LOGGER = "ces_eval.surfaces.boundary"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    logs.configure("info", "text")
    root.handlers[:] = handlers
    root.setLevel(level)


def _line() -> logs.Call:
    return logs.RequestLog.start("rest", "GET /x")


def _serve(
    boundary: Boundary,
    work: Callable[[Caller], Awaitable[Any]],
    inputs: Inputs | Callable[[], Inputs] = Inputs,
    line: logs.Call | None = None,
) -> Any:
    decode = inputs if callable(inputs) else lambda: inputs
    return asyncio.run(boundary.serve("GET /x", decode, work, line=line))


async def _ok(caller: Caller) -> str:
    return f"served {caller.user}"


def _tokens() -> Tokens:
    return Tokens.parse({"tokens": [{"name": "alice", "token": ALICE, "projects": ["p"]}]})


# -- each outcome of a call -----------------------------------------------------------------------


def test_a_served_call_returns_its_result_and_records_ok_and_the_caller() -> None:
    line = _line()
    admission = Admission("rest", 1)
    result = _serve(Boundary("rest", admission=admission), _ok, Inputs(user="bob"), line)
    assert result == "served bob"
    assert (line.code, line.caller) == (Code.OK, "bob")
    assert admission.in_flight == 0
    assert _serve(Boundary("rest"), _ok) == f"served {DEFAULT_USER}"


def test_a_service_error_is_the_answer_and_its_code_is_recorded() -> None:
    async def missing(caller: Caller) -> str:
        raise ServiceError(Code.NOT_FOUND, "gone", "NOT_FOUND")

    line = _line()
    admission = Admission("rest", 1)
    outcome = _serve(Boundary("rest", admission=admission), missing, line=line)
    assert isinstance(outcome, ServiceError)
    assert (outcome.code, outcome.message) == (Code.NOT_FOUND, "gone")
    assert line.code is Code.NOT_FOUND
    assert admission.in_flight == 0  # the slot comes back however the call ends


def test_an_unexpected_exception_is_internal_logged_once_and_never_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(caller: Caller) -> str:
        raise RuntimeError("secret database detail")

    line = _line()
    admission = Admission("rest", 1)
    with caplog.at_level(logging.ERROR, logger=BOUNDARY_LOGGER):
        outcome = _serve(Boundary("rest", admission=admission), broken, line=line)
    assert isinstance(outcome, ServiceError)
    assert (outcome.code, outcome.reason) == (Code.INTERNAL, "INTERNAL")
    assert outcome.message == INTERNAL_MESSAGE
    assert "secret" not in repr(outcome)
    assert line.code is Code.INTERNAL
    assert admission.in_flight == 0
    records = [r for r in caplog.records if r.name == BOUNDARY_LOGGER]
    assert len(records) == 1
    assert records[0].exc_info is not None
    assert "secret database detail" in caplog.text


def test_an_admission_refusal_answers_at_once_and_takes_no_slot() -> None:
    admission = Admission("grpc", 1)
    assert admission.enter()  # every slot taken
    called: list[bool] = []

    async def work(caller: Caller) -> str:
        called.append(True)
        return "never"

    line = _line()
    decoded: list[bool] = []

    def inputs() -> Inputs:
        decoded.append(True)
        return Inputs()

    outcome = _serve(Boundary("grpc", admission=admission), work, inputs, line)
    assert outcome is admission.refused
    assert (outcome.code, outcome.reason) == (Code.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS")
    assert line.code is Code.RESOURCE_EXHAUSTED
    assert (called, decoded, line.caller) == ([], [], "")  # refused before anything is read
    assert admission.in_flight == 1


def test_a_call_past_its_deadline_is_deadline_exceeded_and_cancelled() -> None:
    cancelled: list[bool] = []

    async def slow(caller: Caller) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "late"

    line = _line()
    outcome = _serve(Boundary("rest"), slow, Inputs(deadline=0.05), line)
    assert isinstance(outcome, ServiceError)
    assert (outcome.code, outcome.reason) == (Code.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED")
    assert outcome.metadata == {"timeout": "0.05s"}
    assert cancelled == [True]
    assert line.code is Code.DEADLINE_EXCEEDED


def test_authentication_comes_first_and_records_the_principal_not_the_claim() -> None:
    boundary = Boundary("rest", tokens=_tokens())
    called: list[bool] = []

    async def work(caller: Caller) -> str:
        called.append(True)
        return caller.user

    line = _line()
    outcome = _serve(boundary, work, Inputs(user="mallory"), line)
    assert isinstance(outcome, ServiceError)
    assert (outcome.code, outcome.reason) == (Code.UNAUTHENTICATED, "CREDENTIALS_MISSING")
    wrong = _serve(boundary, work, Inputs(authorization="Bearer wrong-token-of-length"))
    assert (wrong.code, wrong.reason) == (Code.UNAUTHENTICATED, "ACCESS_TOKEN_INVALID")
    assert called == []
    assert line.code is Code.UNAUTHENTICATED
    served = _line()
    assert _serve(boundary, work, Inputs(f"Bearer {ALICE}", "mallory"), served) == "alice"
    assert served.caller == "alice"


def test_an_inputs_error_is_the_answer() -> None:
    def inputs() -> Inputs:
        raise ServiceError.invalid_argument("bad header", [])

    outcome = _serve(Boundary("rest"), _ok, inputs)
    assert isinstance(outcome, ServiceError)
    assert outcome.code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("expired", "code"), [(False, Code.CANCELLED), (True, Code.DEADLINE_EXCEEDED)]
)
def test_a_cancelled_call_records_cancelled_or_its_passed_deadline(
    expired: bool, code: Code
) -> None:
    async def scenario() -> logs.Call:
        line = _line()
        admission = Admission("grpc", 1)
        boundary = Boundary("grpc", admission=admission)
        task = asyncio.ensure_future(
            boundary.serve(
                "x", Inputs, lambda caller: asyncio.sleep(30), line=line, expired=lambda: expired
            )
        )
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert admission.in_flight == 0
        return line

    assert asyncio.run(scenario()).code is code


async def _raises(error: Exception) -> str:
    raise error


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        ("served", Code.OK),
        (ServiceError(Code.NOT_FOUND, "gone", "NOT_FOUND"), Code.NOT_FOUND),
        (RuntimeError("a bug"), Code.INTERNAL),
        (asyncio.CancelledError(), Code.CANCELLED),
    ],
)
def test_run_and_serve_are_one_body(
    outcome: str | BaseException, code: Code, caplog: pytest.LogCaptureFixture
) -> None:
    """MCP's tool calls (run) and every other surface's calls (serve) end the same way."""

    async def work(caller: Caller) -> str:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def both() -> list[tuple[object, Code | None]]:
        seen: list[tuple[object, Code | None]] = []
        boundary = Boundary("mcp")
        for way in ("run", "serve"):
            line = _line()
            if way == "run":
                call = boundary.run(line, "x", lambda: work(Caller()))
            else:
                call = boundary.serve("x", Inputs, work, line=line)
            try:
                answer: object = await call
            except asyncio.CancelledError:
                answer = "cancelled"
            seen.append((answer.code if isinstance(answer, ServiceError) else answer, line.code))
        return seen

    with caplog.at_level(logging.ERROR, logger=BOUNDARY_LOGGER):
        ran, served = asyncio.run(both())
    assert ran == served
    assert ran[1] is code


def test_a_boundary_with_a_log_starts_and_writes_its_lines() -> None:
    logs.configure("info", "text")
    out = io.StringIO()
    boundary = Boundary("grpc", log=logs.RequestLog(out))
    line = boundary.start("google.longrunning.Operations/GetOperation")
    assert line is not None
    boundary.finish(line)  # no event loop: written at once
    assert " grpc google.longrunning.Operations/GetOperation - OK " in out.getvalue()
    assert Boundary("grpc").start("x") is None


# -- the one HTTP error writer ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "headers"),
    [
        (
            errors.method_not_allowed("GET", "/x", ["POST", "DELETE"]),
            405,
            [(b"allow", b"POST, DELETE")],
        ),
        (errors.payload_too_large(10), 413, []),
        (errors.request_body_timeout(1, 2.0, 10, 16384), 408, [(b"connection", b"close")]),
        (Admission("rest").refused, 429, [(b"retry-after", b"1")]),
        (
            ServiceError(Code.UNAUTHENTICATED, "none", "CREDENTIALS_MISSING"),
            401,
            [(b"www-authenticate", b'Bearer realm="ces-eval"')],
        ),
        (
            ServiceError(Code.UNAUTHENTICATED, "wrong", "ACCESS_TOKEN_INVALID"),
            401,
            [(b"www-authenticate", b'Bearer realm="ces-eval", error="invalid_token"')],
        ),
        (ServiceError(Code.PERMISSION_DENIED, "host", "HOST_NOT_ALLOWED"), 421, []),
        (ServiceError(Code.INVALID_ARGUMENT, "type", "UNSUPPORTED_CONTENT_TYPE"), 415, []),
        (ServiceError(Code.NOT_FOUND, "gone", "NOT_FOUND"), 404, []),
    ],
)
def test_the_http_answer_of_each_error(
    error: ServiceError, status: int, headers: list[tuple[bytes, bytes]]
) -> None:
    assert http_answer(error) == (status, headers)


@pytest.mark.parametrize("jsonrpc", [False, True])
def test_send_error_writes_the_envelope_its_headers_and_the_line_code(jsonrpc: bool) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    line = _line()
    error = errors.method_not_allowed("GET", "/mcp", ["POST"])
    asyncio.run(send_error({logs.CALL_KEY: line}, send, error, jsonrpc=jsonrpc))
    start, body = sent
    assert start["status"] == 405
    assert start["headers"][0] == (b"content-type", b"application/json; charset=utf-8")
    assert start["headers"][2:] == [(b"allow", b"POST")]
    document = json.loads(body["body"])
    envelope = document["error"]["data"] if jsonrpc else document["error"]
    assert (envelope["code"], envelope["status"]) == (405, "UNIMPLEMENTED")
    assert line.code is Code.UNIMPLEMENTED


# -- the last-resort catch on every surface -----------------------------------------------------


async def _broken(request: Any, caller: Any) -> Any:
    raise RuntimeError("secret database detail")


def _records(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == BOUNDARY_LOGGER and r.exc_info)


def _grpc_internal() -> tuple[grpc.StatusCode, str, str]:
    async def scenario() -> tuple[grpc.StatusCode, str, str]:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((Dispatcher({GET: _broken}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = operations_pb2_grpc.OperationsStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.GetOperation(operations_pb2.GetOperationRequest(name=OPERATION))
        finally:
            await server.stop(None)
        trailers = dict(raised.value.trailing_metadata() or ())
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info)
        return raised.value.code(), status.message, info.reason

    return asyncio.run(scenario())


def _rest_internal() -> tuple[int, str, str]:
    async def scenario() -> tuple[int, str, str]:
        app = BodyLimit(Transcoder(Router(schema.http_bindings()), {GET: _broken}))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.get(f"/v1beta/{OPERATION}")
        error = response.json()["error"]
        return response.status_code, error["message"], error["details"][0]["reason"]

    return asyncio.run(scenario())


def _mcp_internal() -> tuple[int, str, str]:
    server = build_server({spec.rpc: _broken for spec in tool_specs().values()})

    async def scenario() -> tuple[int, str, str]:
        async with Client(server) as client:
            result = await client.call_tool("get_operation", {"name": OPERATION})
        assert result.is_error
        error = json.loads(result.content[0].text)["error"]
        return error["code"], error["message"], error["details"][0]["reason"]

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("surface", "outcome"),
    [
        ("grpc", _grpc_internal),
        ("rest", _rest_internal),
        ("mcp", _mcp_internal),
    ],
)
def test_every_surface_answers_a_bug_internal_reason_internal_logged_once(
    caplog: pytest.LogCaptureFixture, surface: str, outcome: Callable[[], tuple[Any, str, str]]
) -> None:
    with caplog.at_level(logging.ERROR, logger=BOUNDARY_LOGGER):
        status, message, reason = outcome()
    assert status in {grpc.StatusCode.INTERNAL, 500}
    assert (message, reason) == (INTERNAL_MESSAGE, "INTERNAL")
    assert _records(caplog) == 1
    assert "secret database detail" in caplog.text
    assert f"serving {surface} " in caplog.text


def test_the_http_surfaces_refuse_to_run_without_the_body_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A REST surface mounted without BodyLimit never reads an unbounded body itself: the
    wiring fault is INTERNAL."""

    async def scenario() -> int:
        app = Transcoder(Router(schema.http_bindings()), {GET: _broken})
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (await client.get(f"/v1beta/{OPERATION}")).status_code

    with caplog.at_level(logging.ERROR, logger=BOUNDARY_LOGGER):
        assert asyncio.run(scenario()) == 500
    assert "mounted behind BodyLimit" in caplog.text


# -- where things live ----------------------------------------------------------------------------


def _imports(module: str) -> set[str]:
    """The ``ces_eval`` modules ``module`` imports (at any level, type-only ones included)."""
    return {name for name in imports_of(source_of(module)) if name.startswith("ces_eval")}


def _package_modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    return [package] + [f"{package}.{info.name}" for info in pkgutil.iter_modules(root.__path__)]


def test_transcoding_is_a_library_without_server_auth_or_surface_code() -> None:
    for module in _package_modules("ces_eval.transcoding"):
        bad = {
            name
            for name in _imports(module)
            if name.startswith(("ces_eval.surfaces", "ces_eval.access", "ces_eval.admission"))
            or name == "ces_eval.core.service"
        }
        assert not bad, (module, bad)


def test_surfaces_import_no_other_surfaces_internals() -> None:
    """MCP and gRPC reach REST's parts only through the shared modules (boundary, asgi)."""
    for module in ("ces_eval.surfaces.mcp_tools", "ces_eval.surfaces.mcp_bodies"):
        assert "ces_eval.surfaces.rest" not in _imports(module)
        assert "ces_eval.surfaces.grpc_api" not in _imports(module)
    assert not {n for n in _imports("ces_eval.surfaces.grpc_api") if "rest" in n or "mcp" in n}
