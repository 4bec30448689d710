"""connections.py in process: the accept-error handler, the descriptor rules and the body
deadline of http_app.BodyLimit (tests/integration/test_connections.py has the real server)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import uvloop
from starlette.types import Message, Receive, Scope, Send

from ces_eval import connections
from ces_eval.connections import AcceptErrors, Timeouts, _Joined, descriptor_problem
from ces_eval.surfaces.asgi import body_of
from ces_eval.surfaces.http_app import BodyLimit


class _Listening:
    """What asyncio's TransportSocket offers the handler."""

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8080)


def _accept_failure(code: int = errno.EMFILE) -> dict[str, Any]:
    return {
        "message": "socket.accept() out of system resource",
        "exception": OSError(code, "out"),
        "socket": _Listening(),
    }


def test_accept_failures_are_one_warning_per_interval_and_the_rest_passes_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "LOG_INTERVAL", 0.05)
    passed: list[dict[str, Any]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: passed.append(context))
        handler = AcceptErrors.install(loop)
        assert loop.get_exception_handler() is handler
        for _ in range(2_048):  # one of asyncio's accept loops before CPython gh-151615
            loop.call_exception_handler(_accept_failure())
        loop.call_exception_handler({"message": "something else", "exception": ValueError()})
        loop.call_exception_handler(_accept_failure(errno.ECONNABORTED))  # not for want of fds
        await asyncio.sleep(0.2)

    with caplog.at_level(logging.WARNING, logger="ces_eval"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records if record.name == "ces_eval"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("cannot accept connections on 127.0.0.1:8080: Too many open files")
    assert lines[1].endswith("(2047 more times in the last 0.05 s)")
    assert [context["message"] for context in passed] == [
        "something else",
        "socket.accept() out of system resource",
    ]


def test_descriptor_problem_counts_both_ports_and_a_reserve() -> None:
    assert descriptor_problem(20_000, 4_096) is None
    assert descriptor_problem(2 * 4_096 + connections.RESERVED_DESCRIPTORS, 4_096) is None
    problem = descriptor_problem(1_024, 4_096)
    assert problem is not None
    assert "open file limit (1024)" in problem
    assert "--max-connections" in problem


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from ces_eval.connections import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
        "print(raise_open_file_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        assert int(output[0]) > 64
    else:
        assert output == [str(hard), str(hard), str(hard)]


# -- joined writes -----------------------------------------------------------------------------


def _received(peer: socket.socket) -> bytes:
    """What has arrived on ``peer`` so far (b"" for nothing yet)."""
    got = b""
    while True:
        try:
            chunk = peer.recv(1 << 20)
        except BlockingIOError:
            return got
        if not chunk:
            return got + b"<eof>"
        got += chunk


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_joined_writes_hold_a_small_write_until_the_next_or_the_turns_end(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """connections._Joined over a real socket: a small write waits for the next write (both
    leave together) or for the end of the loop's turn, never longer; large writes and their
    order are kept; close sends what is held first."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
        joined = _Joined(transport, loop)  # type: ignore[arg-type]
        joined.write(b"head;")
        assert _received(peer) == b""  # held
        joined.write(b"body;")
        assert _received(peer) == b"head;body;"  # both at once, before the turn ends
        joined.write(b"late head;")
        await asyncio.sleep(0)  # a body that comes later: the head left at the turn's end
        await asyncio.sleep(0)
        assert _received(peer) == b"late head;"
        large = b"x" * 100_000
        joined.write(large)  # not held
        joined.write(b"small;")
        joined.writelines([b"one;", b"two;"])  # takes the held write along, in order
        await asyncio.sleep(0.05)
        assert _received(peer) == large + b"small;one;two;"
        joined.write(b"last;")
        joined.close()
        await asyncio.sleep(0.05)
        assert _received(peer) == b"last;<eof>"
        peer.close()

    loop = loop_factory()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


# -- BodyLimit's deadline ----------------------------------------------------------------------


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers the body BodyLimit read, as the surfaces take it."""
    body = body_of(scope)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def _run(app: Any, chunks: list[bytes], *, then_wait: bool) -> list[Message]:
    """``app`` given ``chunks`` of a declared 1 MB body, then nothing more (``then_wait``)."""
    sent: list[Message] = []

    async def scenario() -> None:
        queue = [
            {"type": "http.request", "body": chunk, "more_body": then_wait or i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]

        async def receive() -> Message:
            if queue:
                return queue.pop(0)
            await asyncio.Event().wait()  # a client that sends nothing more
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/x",
            "headers": [(b"content-length", b"1000000")],
        }
        await asyncio.wait_for(app(scope, receive, send), 10)

    asyncio.run(scenario())
    return sent


@pytest.mark.parametrize("jsonrpc", [False, True])
def test_a_body_not_complete_in_time_is_408_and_closes_the_connection(jsonrpc: bool) -> None:
    app = BodyLimit(_app, jsonrpc=jsonrpc, timeouts=Timeouts(body=0.1))
    start, body = _run(app, [b"{", b" "], then_wait=True)
    assert start["status"] == 408
    assert (b"connection", b"close") in start["headers"]
    document = json.loads(body["body"])
    error = document["error"]["data"] if jsonrpc else document["error"]
    assert error["status"] == "DEADLINE_EXCEEDED"
    assert error["details"][0]["reason"] == "REQUEST_BODY_TIMEOUT"
    assert error["details"][0]["metadata"]["received"] == "2"


def test_each_chunk_received_extends_the_deadline_by_its_share_of_the_rate() -> None:
    timeouts = Timeouts(body=10, body_rate=1_000)
    assert timeouts.body_deadline(100.0, 0) == 110.0
    assert timeouts.body_deadline(100.0, 5_000) == 115.0


def test_a_complete_body_reaches_the_app_whole() -> None:
    app = BodyLimit(_app, timeouts=Timeouts(body=0.1))
    start, body = _run(app, [b"{", b"}"], then_wait=False)
    assert start["status"] == 200
    assert body["body"] == b"{}"
