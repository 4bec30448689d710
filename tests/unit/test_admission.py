"""Admission, deadlines and disconnects in process (ces_eval.admission): the counter, the
``X-Server-Timeout`` header, and the real grpc.aio and ASGI surfaces over a handler that waits
until the test lets it go, so the in-flight count can be read exactly."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from ces_eval.access import Caller
from ces_eval.admission import (
    Admission,
    server_timeout,
    until_disconnected,
    within,
)
from ces_eval.contract import schema
from ces_eval.errors import Code, ServiceError
from ces_eval.storage._group_commit import GroupCommitWriter
from ces_eval.surfaces.boundary import Boundary
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import BodyLimit
from ces_eval.surfaces.mcp_tools import guarded
from ces_eval.surfaces.rest import Transcoder
from ces_eval.transcoding.router import Router

T = TypeVar("T")
WAIT = "/google.longrunning.Operations/WaitOperation"
GET = "/google.longrunning.Operations/GetOperation"
IMPORT = "/ces_eval.emulator.v1.EmulatorService/ImportEvaluations"
OPERATION = "projects/p/locations/l/operations/o"
IMPORT_URL = "/emulator/v1/projects/p/locations/l/apps/a:importEvaluations"


class Gate:
    """A handler that waits until :attr:`release` is set, counting entries and cancellations."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.cancelled = 0

    async def __call__(self, request: Message, caller: Caller) -> Message:
        self.entered += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return operations_pb2.Operation(name=OPERATION, done=True)


async def quick(request: Message, caller: Caller) -> Message:
    return operations_pb2.Operation(name=OPERATION, done=True)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) for ``condition``; the server side settles on its own schedule."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def settled(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s outcome, bounded: a regression fails the test instead of hanging it."""
    return await asyncio.wait_for(awaitable, 30)


def error_info(details: list[Any]) -> error_details_pb2.ErrorInfo:
    infos = []
    for detail in details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            infos.append(info)
    assert len(infos) == 1
    return infos[0]


# -- the counter and the header ----------------------------------------------------------------


def test_admission_counts_and_refuses_beyond_its_limit() -> None:
    admission = Admission("rest", 2)
    assert admission.enter()
    assert admission.enter()
    assert not admission.enter()
    assert admission.in_flight == 2
    admission.leave()
    assert admission.enter()
    refusal = admission.refusal()
    assert refusal.code is Code.RESOURCE_EXHAUSTED
    assert refusal.reason == "TOO_MANY_REQUESTS"
    assert refusal.metadata == {"surface": "rest", "limit": "2"}
    assert "--max-concurrent-requests" in refusal.message
    with pytest.raises(ValueError, match="at least 1"):
        Admission("grpc", 0)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(b"2.5", 2.5), (b"0", 0.0), (b"12.000", 12.0), (b" 3 ", 3.0), (b"0.001", 0.001)],
)
def test_server_timeout_reads_decimal_seconds(value: bytes, seconds: float) -> None:
    headers = [(b"accept", b"*/*"), (b"x-server-timeout", value)]
    assert server_timeout(headers) == seconds


@pytest.mark.parametrize(
    "value", [b"", b"-1", b"abc", b"1e3", b"inf", b"nan", b"2.5s", b".5", b"1.", b"1234567890"]
)
def test_server_timeout_refuses_anything_else(value: bytes) -> None:
    with pytest.raises(ServiceError) as raised:
        server_timeout([(b"x-server-timeout", value)])
    assert raised.value.code is Code.INVALID_ARGUMENT
    assert [v.field for v in raised.value.violations] == ["X-Server-Timeout"]


def test_no_header_means_no_deadline() -> None:
    assert server_timeout([(b"content-type", b"application/json")]) is None


def test_within_cancels_late_work_and_passes_its_own_timeouts_through() -> None:
    async def scenario() -> None:
        gate = Gate()
        with pytest.raises(ServiceError) as raised:
            await settled(within(0.05, gate(operations_pb2.GetOperationRequest(), Caller())))
        assert raised.value.code is Code.DEADLINE_EXCEEDED
        assert raised.value.metadata == {"timeout": "0.05s"}
        assert gate.cancelled == 1

        async def times_out_by_itself() -> None:
            raise TimeoutError("a timeout of the work, not the deadline")

        with pytest.raises(TimeoutError, match="of the work"):
            await within(30, times_out_by_itself())
        assert await within(30, quick(operations_pb2.GetOperationRequest(), Caller()))

    asyncio.run(scenario())


def test_until_disconnected_cancels_the_work_when_the_client_goes() -> None:
    async def scenario() -> None:
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        gate = Gate()
        waiting = asyncio.ensure_future(
            until_disconnected(gate(operations_pb2.GetOperationRequest(), Caller()), receive)
        )
        await until(lambda: gate.entered == 1)
        gone.set()
        with pytest.raises(ServiceError) as raised:
            await settled(waiting)
        assert raised.value.code is Code.CANCELLED
        assert gate.cancelled == 1

        # Work that ends first answers; the watcher is dropped without a disconnect.
        gone.clear()
        answered = await until_disconnected(
            quick(operations_pb2.GetOperationRequest(), Caller()), receive
        )
        assert isinstance(answered, operations_pb2.Operation)

    asyncio.run(scenario())


# -- gRPC: a real grpc.aio server in process ---------------------------------------------------


def grpc_error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    trailers = dict(error.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    return error_info(list(status.details))


def test_grpc_limit_deadline_and_cancellation_free_their_slots() -> None:
    async def scenario() -> None:
        gate = Gate()
        admission = Admission("grpc", 1)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (Dispatcher({WAIT: gate, GET: quick}, boundary=Boundary("grpc", admission=admission)),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = operations_pb2_grpc.OperationsStub(channel)
                wait = operations_pb2.WaitOperationRequest(name=OPERATION)
                held = stub.WaitOperation(wait)
                await until(lambda: gate.entered == 1)
                assert admission.in_flight == 1

                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.GetOperation(operations_pb2.GetOperationRequest(name=OPERATION))
                assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                info = grpc_error_info(raised.value)
                assert info.reason == "TOO_MANY_REQUESTS"
                assert dict(info.metadata) == {"surface": "grpc", "limit": "1"}

                held.cancel()  # the client cancels: the handler is cancelled, the slot freed
                await until(lambda: admission.in_flight == 0)
                assert gate.cancelled == 1

                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await stub.WaitOperation(wait, timeout=0.2)
                assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await until(lambda: gate.cancelled == 2 and admission.in_flight == 0)

                gate.release.set()
                done = await settled(stub.WaitOperation(wait))
                assert done.done
                assert admission.in_flight == 0
        finally:
            await server.stop(None)

    asyncio.run(scenario())


# -- HTTP: the ASGI apps through httpx's in-process transport ----------------------------------


def envelope_info(body: dict[str, Any]) -> dict[str, Any]:
    infos = [d for d in body["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert len(infos) == 1
    info: dict[str, Any] = infos[0]
    return info


async def gated_app(gate: Gate) -> Callable[[Any, Any, Any], Awaitable[None]]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await gate(operations_pb2.GetOperationRequest(), Caller())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


@pytest.mark.parametrize("jsonrpc", [False, True])
def test_http_refusal_is_429_with_retry_after(jsonrpc: bool) -> None:
    """REST's boundary (in the transcoder) and MCP's (:func:`guarded`, per HTTP request) refuse
    alike: 429, ``Retry-After``, Google's error (in a JSON-RPC error on ``/mcp``)."""

    async def scenario() -> None:
        gate = Gate()
        admission = Admission("mcp" if jsonrpc else "rest", 1)
        app: Any
        if jsonrpc:
            app = guarded(await gated_app(gate), Boundary("mcp", admission=admission))
            path = "/mcp"
        else:
            app = transcoder({GET: gate}, Boundary("rest", admission=admission))
            path = f"/v1beta/{OPERATION}"
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            def call() -> Awaitable[httpx.Response]:
                return client.post(path, json={}) if jsonrpc else client.get(path)

            held = asyncio.ensure_future(call())
            await until(lambda: gate.entered == 1)
            refused = await settled(call())
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            body = refused.json()
            if jsonrpc:
                assert body["jsonrpc"] == "2.0"
                assert body["id"] is None
                assert body["error"]["code"] == -32000
                error = body["error"]["data"]
            else:
                error = body["error"]
            assert error["code"] == 429
            assert error["status"] == "RESOURCE_EXHAUSTED"
            info = envelope_info(error)
            assert info["reason"] == "TOO_MANY_REQUESTS"
            assert info["metadata"] == {"surface": admission.surface, "limit": "1"}
            assert gate.entered == 1  # the refused request never reached the app

            gate.release.set()
            assert (await settled(held)).status_code == 200
            assert admission.in_flight == 0
            assert (await call()).status_code == 200

    asyncio.run(scenario())


def transcoder(handlers: dict[str, Any], boundary: Boundary | None = None) -> Any:
    """The REST surface as ``serve`` mounts it: behind the body limit."""
    return BodyLimit(Transcoder(Router(schema.http_bindings()), handlers, boundary))


def test_rest_x_server_timeout_answers_504_and_cancels_the_call() -> None:
    async def scenario() -> None:
        gate = Gate()
        transport = httpx.ASGITransport(app=transcoder({IMPORT: gate, GET: quick}))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            late = await settled(
                client.post(IMPORT_URL, json={"content": ""}, headers={"X-Server-Timeout": "0.050"})
            )
            assert late.status_code == 504
            error = late.json()["error"]
            assert error["status"] == "DEADLINE_EXCEEDED"
            assert envelope_info(error)["reason"] == "DEADLINE_EXCEEDED"
            assert gate.cancelled == 1

            invalid = await client.get(f"/v1beta/{OPERATION}", headers={"X-Server-Timeout": "soon"})
            assert invalid.status_code == 400
            violations = [
                d for d in invalid.json()["error"]["details"] if "BadRequest" in d["@type"]
            ]
            assert violations[0]["fieldViolations"][0]["field"] == "X-Server-Timeout"

            ample = await client.get(f"/v1beta/{OPERATION}", headers={"X-Server-Timeout": "30"})
            assert ample.status_code == 200
            assert ample.json()["done"] is True

    asyncio.run(scenario())


def test_rest_disconnect_cancels_a_long_call_and_quick_calls_never_watch() -> None:
    async def scenario() -> None:
        gate = Gate()
        app = transcoder({IMPORT: gate, GET: quick})
        gone = asyncio.Event()
        receives = 0
        body = b'{"content": ""}'

        async def receive() -> dict[str, Any]:
            nonlocal receives
            receives += 1
            if receives == 1:
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        def scope(method: str, path: str) -> dict[str, Any]:
            return {
                "type": "http",
                "method": method,
                "path": path,
                "raw_path": path.encode(),
                "query_string": b"",
                "headers": [
                    (b"content-type", b"application/json"),
                    *([(b"content-length", str(len(body)).encode())] if body else []),
                ],
            }

        call = asyncio.ensure_future(app(scope("POST", IMPORT_URL), receive, send))
        await until(lambda: gate.entered == 1)
        gone.set()
        await settled(call)
        assert gate.cancelled == 1
        assert sent[0]["status"] == 499  # what uvicorn drops: nobody is left to read it

        receives = 0
        body = b""
        sent.clear()
        gone.clear()
        await app(scope("GET", f"/v1beta/{OPERATION}"), receive, send)
        assert sent[0]["status"] == 200
        assert receives == 0  # no body to read, and a quick call does not watch the connection

    asyncio.run(scenario())


# -- a cancelled writer's caller leaves the group commit writer working ------------------------


def test_a_cancelled_write_commits_whole_or_not_at_all_and_the_writer_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    setup.close()

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        return connection

    writer = GroupCommitWriter(connect)
    writer.start()
    inside = threading.Event()
    proceed = threading.Event()

    def slow(connection: sqlite3.Connection) -> int:
        connection.execute("INSERT INTO t VALUES (1, 'first half')")
        inside.set()
        proceed.wait(30)
        connection.execute("INSERT INTO t VALUES (2, 'second half')")
        return 2

    def insert(key: int) -> Callable[[sqlite3.Connection], int]:
        def work(connection: sqlite3.Connection) -> int:
            connection.execute("INSERT INTO t VALUES (?, 'later')", (key,))
            return key

        return work

    async def scenario() -> None:
        cut = asyncio.ensure_future(writer.submit(slow))
        await asyncio.to_thread(inside.wait, 30)
        cut.cancel()  # a deadline or a client gone while the write is under way
        with pytest.raises(asyncio.CancelledError):
            await cut
        queued = asyncio.ensure_future(writer.submit(insert(9)))
        await asyncio.sleep(0)  # handed to the writer's queue
        queued.cancel()  # its answer is dropped; its write still runs
        unsent = asyncio.ensure_future(writer.submit(insert(8)))
        unsent.cancel()  # cancelled before it was handed over: nothing of it is written
        proceed.set()
        assert await writer.submit(insert(3)) == 3
        for cancelled in (queued, unsent):
            with pytest.raises(asyncio.CancelledError):
                await cancelled

    try:
        asyncio.run(scenario())
    finally:
        writer.stop()
    with sqlite3.connect(path) as check:
        rows = dict(check.execute("SELECT k, v FROM t").fetchall())
    check.close()
    # A write handed over before its caller went committed whole; the other left nothing.
    assert rows == {1: "first half", 2: "second half", 3: "later", 9: "later"}
