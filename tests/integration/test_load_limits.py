"""Graceful behaviour under load against the real server (issue 9): the per-surface in-flight
limit (RESOURCE_EXHAUSTED / 429 + Retry-After beyond it), deadlines (DEADLINE_EXCEEDED / 504),
client cancellation giving slots back, and SIGTERM letting calls in flight finish.

Slow calls are made slow the way they are in real life, and released by the test:
* WaitOperation on an operation another process runs (written through the storage layer, as a
  worker of ``serve --workers`` would): it waits until that operation is done;
* writes while something else holds SQLite's write lock (a slow disk, a backup): the server's
  group commit writer waits for the lock, and so do the calls that wrote.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ces_eval.core import exchange
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, start_server
from tests.support.load import FRESH_CONNECTION
from tests.support.mcp import call_tool

T = TypeVar("T")
LOCATION = "projects/load/locations/l"
APP = f"{LOCATION}/apps/a"
EVALUATIONS = f"/v1beta/{APP}/evaluations"
LIMIT = 2


def poll(condition: Callable[[], T | None], what: str, attempts: int = 1500) -> T:
    """``condition``'s first truthy answer; the server settles on its own schedule (a
    cancellation travels, a signal is handled), so the test waits for the state, boundedly."""
    for _ in range(attempts):
        answer = condition()
        if answer:
            return answer
        time.sleep(0.02)
    raise AssertionError(f"never {what}")


# -- the slow calls ----------------------------------------------------------------------------


def _storage_call(database: Path, work: Callable[[SqliteStorage], Any]) -> None:
    storage = SqliteStorage(database, shared=True)

    async def run() -> None:
        await storage.open()
        try:
            await work(storage)
        finally:
            await storage.close()

    asyncio.run(run())


def running_operation(database: Path) -> str:
    """A new operation, not done, that another process runs (its lease is an hour long)."""
    name = f"{LOCATION}/operations/held-{uuid.uuid4().hex[:8]}"
    operation = operations_pb2.Operation(name=name, done=False)
    _storage_call(
        database,
        lambda storage: storage.insert_operation(operation, "ExportEvaluations", "elsewhere", 3600),
    )
    return name


def finish(database: Path, name: str) -> None:
    """The other process finishes the operation: waiters get it done."""
    _storage_call(
        database,
        lambda storage: storage.finish_operation(operations_pb2.Operation(name=name, done=True)),
    )


class WriteLock:
    """SQLite's write lock on the server's file, held by this process until :meth:`release`:
    every write of the server waits for it (reads do not, in WAL mode)."""

    def __init__(self, database: Path) -> None:
        self._connection = sqlite3.connect(database, isolation_level=None)
        self._connection.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")
        self._connection.close()


def wait_request(name: str, seconds: int = 60) -> operations_pb2.WaitOperationRequest:
    return operations_pb2.WaitOperationRequest(
        name=name, timeout=duration_pb2.Duration(seconds=seconds)
    )


def golden(display_name: str) -> dict[str, Any]:
    return {
        "displayName": display_name,
        "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
    }


def import_content(evaluation_id: str) -> str:
    evaluation = evaluation_pb2.Evaluation(
        name=f"{APP}/evaluations/{evaluation_id}", display_name="imported"
    )
    evaluation.golden.turns.add().steps.add().user_input.text = "hello"
    return base64.b64encode(exchange.dump(exchange.Bundle([evaluation], []), 0)).decode()


# -- probes ------------------------------------------------------------------------------------


def grpc_refusal(stub: operations_pb2_grpc.OperationsStub) -> grpc.RpcError | None:
    """The RESOURCE_EXHAUSTED a quick call gets, or None when it was served."""
    try:
        stub.GetOperation(operations_pb2.GetOperationRequest(name=f"{LOCATION}/operations/x"))
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # type: ignore[attr-defined]
            return error
        assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    return None


def rest_refusal(http: httpx.Client) -> httpx.Response | None:
    response = http.get(f"/v1beta/{LOCATION}/operations/x")
    if response.status_code == 429:
        return response
    assert response.status_code == 404, response.text
    return None


def grpc_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    trailers = dict(error.trailing_metadata())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert len(status.details) == 1
    assert status.details[0].Unpack(info)
    return info


def envelope_info(error: dict[str, Any]) -> dict[str, Any]:
    infos = [d for d in error["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert len(infos) == 1
    info: dict[str, Any] = infos[0]
    return info


def grpc_pair_admitted(stub: operations_pb2_grpc.OperationsStub, database: Path) -> bool:
    """Whether two WaitOperation calls are served at once: with a limit of two, only when no
    slot is held by a call that ended. Both wait for one operation until it is finished."""
    name = running_operation(database)
    holders = [stub.WaitOperation.future(wait_request(name), timeout=60) for _ in range(2)]
    poll(
        lambda: grpc_refusal(stub) is not None or any(h.done() for h in holders),
        "saw both holders in flight or one refused",
    )
    finish(database, name)
    return all(h.exception() is None and h.result().done for h in holders)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "db.sqlite", "--max-concurrent-requests", str(LIMIT))
    try:
        yield running
    finally:
        running.kill()


# -- gRPC --------------------------------------------------------------------------------------


def test_grpc_beyond_the_limit_is_resource_exhausted_and_cancelled_calls_give_slots_back(
    limited: RunningServer,
) -> None:
    with grpc.insecure_channel(limited.grpc_target) as channel:
        stub = operations_pb2_grpc.OperationsStub(channel)
        name = running_operation(limited.database)
        holders = [stub.WaitOperation.future(wait_request(name), timeout=60) for _ in range(LIMIT)]
        error = poll(lambda: grpc_refusal(stub), "refused a third call")
        assert "--max-concurrent-requests" in error.details()  # type: ignore[attr-defined]
        info = grpc_info(error)
        assert info.reason == "TOO_MANY_REQUESTS"
        assert info.domain == "ces.googleapis.com"
        assert dict(info.metadata) == {"surface": "grpc", "limit": str(LIMIT)}
        assert not any(h.done() for h in holders)

        # Health checks and the HTTP surfaces are not counted against gRPC's slots.
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        with httpx.Client(base_url=limited.http_base, timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            assert rest_refusal(http) is None

        for holder in holders:
            holder.cancel()
        # Every slot comes back: two calls are served at once again.
        poll(lambda: grpc_pair_admitted(stub, limited.database), "admitted two calls again")
        assert grpc_refusal(stub) is None


def test_grpc_deadline_ends_a_long_wait_with_deadline_exceeded(limited: RunningServer) -> None:
    with grpc.insecure_channel(limited.grpc_target) as channel:
        stub = operations_pb2_grpc.OperationsStub(channel)
        name = running_operation(limited.database)
        for _ in range(LIMIT):  # more than the limit, one after another: each frees its slot
            with pytest.raises(grpc.RpcError) as raised:
                stub.WaitOperation(wait_request(name, seconds=600), timeout=0.5)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
        poll(lambda: grpc_pair_admitted(stub, limited.database), "admitted two calls again")

        # A wait shorter than the deadline answers with the operation as it stands.
        answered = stub.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=name, timeout=duration_pb2.Duration(nanos=200_000_000)
            ),
            timeout=30,
        )
        assert answered.name == name
        assert not answered.done


async def _flood(target: str, calls: int, in_flight: int) -> Counter[str]:
    """``calls`` GetOperation calls, ``in_flight`` at a time over four connections: how each
    ended (a RESOURCE_EXHAUSTED without our ErrorInfo counts apart)."""
    request = operations_pb2.GetOperationRequest(name=f"{LOCATION}/operations/x")
    outcomes: Counter[str] = Counter()
    channels = [grpc.aio.insecure_channel(target, options=FRESH_CONNECTION) for _ in range(4)]
    stubs = [operations_pb2_grpc.OperationsStub(channel) for channel in channels]
    gate = asyncio.Semaphore(in_flight)

    async def one(index: int) -> None:
        async with gate:
            try:
                await stubs[index % len(stubs)].GetOperation(request, timeout=60)
            except grpc.aio.AioRpcError as error:
                code = error.code().name
                if code == "RESOURCE_EXHAUSTED" and grpc_info(error).reason != "TOO_MANY_REQUESTS":
                    code += " (not ours)"
                outcomes[code] += 1
            else:
                outcomes["OK"] += 1

    try:
        await asyncio.gather(*(one(index) for index in range(calls)))
    finally:
        for channel in channels:
            await channel.close()
    return outcomes


def test_grpc_refusals_under_overload_are_all_resource_exhausted(limited: RunningServer) -> None:
    """Thousands of calls in flight while both slots are held: every one is refused with our
    RESOURCE_EXHAUSTED. grpc queues the calls the event loop has not begun yet and, past 1,000
    by default, dropped some with CANCELLED (a fifth to a third of a first burst) before our
    admission saw them (issue 15, item 11)."""
    with grpc.insecure_channel(limited.grpc_target) as channel:
        stub = operations_pb2_grpc.OperationsStub(channel)
        name = running_operation(limited.database)
        holders = [stub.WaitOperation.future(wait_request(name), timeout=60) for _ in range(LIMIT)]
        poll(lambda: grpc_refusal(stub), "refused a third call")
        try:
            for _ in range(2):
                outcomes = asyncio.run(_flood(limited.grpc_target, calls=5000, in_flight=2500))
                assert outcomes == {"RESOURCE_EXHAUSTED": 5000}
        finally:
            finish(limited.database, name)
        assert all(holder.result().done for holder in holders)


# -- REST --------------------------------------------------------------------------------------


def _post(base: str, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=60) as http:
        return http.post(path, json=body, headers=headers)


def rest_pair_admitted(base: str, database: Path, pool: ThreadPoolExecutor) -> bool:
    """Whether two REST writes are served at once (both wait for SQLite's write lock)."""
    lock = WriteLock(database)
    try:
        holders = [pool.submit(_post, base, EVALUATIONS, golden(f"pair-{i}")) for i in range(LIMIT)]
        with httpx.Client(base_url=base, timeout=30) as http:
            poll(
                lambda: rest_refusal(http) is not None or any(h.done() for h in holders),
                "saw both writers in flight or one refused",
            )
    finally:
        lock.release()
    return all(h.result().status_code == 200 for h in holders)


def _admitted_post(base: str, path: str, display_name: str = "slow") -> httpx.Response:
    """A slow write that comes back while a probe holds the slot it needs, until admitted."""
    while True:
        response = _post(base, path, golden(display_name))
        if response.status_code != 429:
            return response


def _disconnecting_import(base: str, evaluation_id: str) -> socket.socket:
    """Send ImportEvaluations over a raw connection and return the socket, unread."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"content": import_content(evaluation_id)}).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        f"POST /emulator/v1/{APP}:importEvaluations HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def test_rest_beyond_the_limit_is_429_and_a_gone_client_gives_its_slot_back(
    limited: RunningServer,
) -> None:
    base = limited.http_base
    with ThreadPoolExecutor(4) as pool, httpx.Client(base_url=base, timeout=30) as http:
        lock = WriteLock(limited.database)
        try:
            writer = pool.submit(_admitted_post, base, EVALUATIONS + "?evaluationId=slow")
            gone = _disconnecting_import(base, "abandoned")
            refused = poll(lambda: rest_refusal(http), "refused a third call")
            assert refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert error["code"] == 429
            assert error["status"] == "RESOURCE_EXHAUSTED"
            info = envelope_info(error)
            assert info["reason"] == "TOO_MANY_REQUESTS"
            assert info["metadata"] == {"surface": "rest", "limit": str(LIMIT)}
            # Neither readiness nor the OpenAPI document is counted.
            assert http.get("/healthz").status_code == 200
            assert http.get("/openapi.json").status_code == 200

            gone.close()  # the importing client goes: its call is cancelled, its slot freed
            poll(lambda: rest_refusal(http) is None, "served a call after the client went")
            assert not writer.done()
        finally:
            lock.release()
        assert writer.result().status_code == 200
        poll(lambda: rest_pair_admitted(base, limited.database, pool), "admitted two writes")
        # The abandoned import had reached the writer before its client went: it committed
        # whole (a cancelled call either committed or left nothing).
        imported = http.get(f"{EVALUATIONS}/abandoned")
        assert imported.status_code in (200, 404)
        if imported.status_code == 200:
            assert imported.json()["displayName"] == "imported"


def test_rest_x_server_timeout_gives_504_and_an_invalid_one_400(limited: RunningServer) -> None:
    base = limited.http_base
    with ThreadPoolExecutor(4) as pool, httpx.Client(base_url=base, timeout=30) as http:
        lock = WriteLock(limited.database)
        try:
            late = http.post(
                EVALUATIONS,
                params={"evaluationId": "late"},
                json=golden("late"),
                headers={"X-Server-Timeout": "0.500"},
            )
        finally:
            lock.release()
        assert late.status_code == 504, late.text
        error = late.json()["error"]
        assert error["status"] == "DEADLINE_EXCEEDED"
        assert envelope_info(error)["reason"] == "DEADLINE_EXCEEDED"
        # Cut short after it reached the writer, the create committed whole or not at all.
        stored = http.get(f"{EVALUATIONS}/late")
        assert stored.status_code in (200, 404)
        if stored.status_code == 200:
            assert stored.json()["displayName"] == "late"

        invalid = http.get(f"{EVALUATIONS}/late", headers={"X-Server-Timeout": "-1"})
        assert invalid.status_code == 400
        details = invalid.json()["error"]["details"]
        violations = [d for d in details if d["@type"].endswith("google.rpc.BadRequest")]
        assert violations[0]["fieldViolations"][0]["field"] == "X-Server-Timeout"

        ample = http.post(EVALUATIONS, json=golden("in time"), headers={"X-Server-Timeout": "30"})
        assert ample.status_code == 200
        poll(lambda: rest_pair_admitted(base, limited.database, pool), "admitted two writes")


# -- MCP ---------------------------------------------------------------------------------------


def _mcp_call(base: str, tool: str, arguments: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=120) as http:
        return call_tool(http, tool, arguments)


def test_mcp_beyond_the_limit_is_429_with_a_json_rpc_error(limited: RunningServer) -> None:
    base = limited.http_base
    name = running_operation(limited.database)
    probe = {"name": f"{LOCATION}/operations/x"}

    def hold() -> httpx.Response:
        # A holder that arrives while a probe has a slot is refused itself: it comes back until
        # it is admitted, so that in the end every slot is held by a waiting call.
        while True:
            response = _mcp_call(base, "wait_operation", {"name": name, "timeout": "60s"})
            if response.status_code != 429:
                return response

    with ThreadPoolExecutor(LIMIT) as pool:
        holders = [pool.submit(hold) for _ in range(LIMIT)]

        def refused() -> httpx.Response | None:
            response = _mcp_call(base, "get_operation", probe)
            return response if response.status_code == 429 else None

        try:
            response = poll(refused, "refused a third MCP call")
        finally:
            finish(limited.database, name)
        assert response.headers["retry-after"] == "1"
        body = response.json()
        assert body["jsonrpc"] == "2.0"
        assert body["id"] is None
        assert body["error"]["code"] == -32000
        assert body["error"]["data"]["status"] == "RESOURCE_EXHAUSTED"
        info = envelope_info(body["error"]["data"])
        assert info["reason"] == "TOO_MANY_REQUESTS"
        assert info["metadata"] == {"surface": "mcp", "limit": str(LIMIT)}
        for holder in holders:
            answered = holder.result()
            assert answered.status_code == 200
            assert answered.json()["result"]["structuredContent"]["done"] is True
    assert _mcp_call(base, "get_operation", {"name": name}).status_code == 200


# -- SIGTERM -----------------------------------------------------------------------------------


def _connects(base: str) -> bool:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def _new_grpc_call_refused(target: str, name: str) -> bool:
    with grpc.insecure_channel(target) as channel:
        try:
            operations_pb2_grpc.OperationsStub(channel).GetOperation(
                operations_pb2.GetOperationRequest(name=name), timeout=5
            )
        except grpc.RpcError as error:
            return error.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    return False


def _grpc_holder(stub: operations_pb2_grpc.OperationsStub, name: str) -> grpc.Future:
    """A WaitOperation holding the server's one gRPC slot, once a probe beside it is refused.
    A holder refused because a probe had the slot is sent again (as the REST and MCP holders
    are); one that ended otherwise fails the test with its own status, not after 30 s of
    probes that "never held the one gRPC slot"."""
    holders = [stub.WaitOperation.future(wait_request(name), timeout=60)]

    def holding() -> grpc.Future | None:
        holder = holders[-1]
        if holder.done():
            error = holder.exception()
            if not isinstance(error, grpc.RpcError) or (
                error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
            ):
                raise AssertionError(f"the holder ended before holding the slot: {error!r}")
            holders.append(stub.WaitOperation.future(wait_request(name), timeout=60))
            return None
        return holder if grpc_refusal(stub) is not None else None

    return poll(holding, "held the one gRPC slot")


def test_sigterm_lets_calls_in_flight_finish_and_refuses_new_connections(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite"
    running = start_server(database, "--max-concurrent-requests", "1")
    try:
        name = running_operation(database)
        with grpc.insecure_channel(running.grpc_target) as channel, ThreadPoolExecutor(2) as pool:
            stub = operations_pb2_grpc.OperationsStub(channel)
            waiting = _grpc_holder(stub, name)
            lock = WriteLock(database)
            try:
                # A writer that arrives while a probe has the one REST slot is refused (429):
                # it comes back until admitted, as in the tests above.
                writing: Future[httpx.Response] = pool.submit(
                    _admitted_post, running.http_base, EVALUATIONS + "?evaluationId=drained", "d"
                )
                with httpx.Client(base_url=running.http_base, timeout=30) as http:
                    poll(lambda: rest_refusal(http), "held the one REST slot")

                running.process.send_signal(signal.SIGTERM)
                poll(lambda: not _connects(running.http_base), "refused new HTTP connections")
                poll(
                    lambda: _new_grpc_call_refused(running.grpc_target, name),
                    "refused new gRPC calls",
                )
                assert not waiting.done()
                assert not writing.done()
            finally:
                lock.release()
            finish(database, name)
            assert waiting.result().done
            created = writing.result()
            assert created.status_code == 200, created.text
        # Waited for, not signalled again: a second SIGTERM that lands after the server's
        # event loop closed (its last 0.1-0.3 s) ends it by the signal (exit status -15).
        assert running.process.wait(timeout=60) == 0
        running.stop()
        assert "ces-eval stopped" in running.output()
    finally:
        running.kill()

    again = start_server(database)
    try:
        with httpx.Client(base_url=again.http_base, timeout=30) as http:
            assert http.get(f"{EVALUATIONS}/drained").json()["displayName"] == "d"
    finally:
        again.kill()
