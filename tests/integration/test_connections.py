"""Connections on the HTTP port against the real server (issue 15, item 4; connections.py):
clients that hold connections without finishing a request are cut off, a body still arriving
holds no admission slot, the open connections are capped, and running out of file descriptors
is one warning, not a traceback per accept().

Every client here speaks raw HTTP/1.1 over plain sockets: the attacks are what a client does
between bytes, which no HTTP library lets a test control. Servers whose timeouts a test waits
out run with short ones (``with_timeouts``); the rules are the same.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.connections import RESERVED_DESCRIPTORS
from ces_eval.server import DEFAULT_MAX_CONNECTIONS
from ces_eval.testing.server import RunningServer, start_server, with_timeouts
from tests.support.mcp import ACCEPT, call_tool

APP = "projects/conn/locations/l/apps/a"
EVALUATIONS = f"/v1beta/{APP}/evaluations"
HEADER, IDLE, BODY = 3.0, 1, 1.0  # the short timeouts of the ``quick`` server
DECLARED = 1_000_000  # the declared length of the bodies that trickle (under the 10 MiB limit)


def address(server: RunningServer) -> tuple[str, int]:
    host, port = server.http_base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def head(server: RunningServer, method: str, path: str, **headers: str) -> bytes:
    host, port = address(server)
    lines = [f"{method} {path} HTTP/1.1", f"host: {host}:{port}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def trickling_post(server: RunningServer, path: str) -> bytes:
    """A POST's head declaring a 1 MB JSON body, and the body's first byte."""
    return (
        head(
            server,
            "POST",
            path,
            content_type="application/json",
            content_length=str(DECLARED),
            accept=ACCEPT,
        )
        + b"{"
    )


class Clients:
    """Connections to one server held by this test; :meth:`watch` tells which the server has
    closed, and what each received before."""

    def __init__(self, server: RunningServer, count: int, first: bytes = b"") -> None:
        self.open: list[socket.socket] = []
        self.closed: list[socket.socket] = []
        self.received: dict[socket.socket, bytes] = {}
        for _ in range(count):
            sock = socket.create_connection(address(server), timeout=10)
            if first:
                sock.sendall(first)
            sock.setblocking(False)
            self.open.append(sock)
            self.received[sock] = b""

    def _read(self, sock: socket.socket) -> None:
        try:
            while chunk := sock.recv(65536):
                self.received[sock] += chunk
        except BlockingIOError:
            return
        except OSError:  # reset: closed as well
            pass
        self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        if sock in self.open:
            self.open.remove(sock)
            self.closed.append(sock)

    def watch(self, seconds: float, trickle: bytes = b"", until_closed: bool = True) -> None:
        """Read what the server sends for up to ``seconds`` (less once every connection is
        closed, with ``until_closed``), sending ``trickle`` on each open one every 0.25 s."""
        deadline = time.monotonic() + seconds
        next_byte = time.monotonic()
        while time.monotonic() < deadline and (self.open or not until_closed):
            if trickle and time.monotonic() >= next_byte:
                next_byte += 0.25
                for sock in list(self.open):
                    try:
                        sock.send(trickle)
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._close(sock)
            poll = select.poll()  # select() stops at descriptor 1,023
            by_fd = {sock.fileno(): sock for sock in self.open}
            for fd in by_fd:
                poll.register(fd, select.POLLIN)
            for fd, _ in poll.poll(50):
                self._read(by_fd[fd])
            if not self.open:
                time.sleep(0.05)

    def close(self) -> None:
        for sock in self.open + self.closed:
            sock.close()


@pytest.fixture
def clients() -> Iterator[list[Clients]]:
    made: list[Clients] = []
    yield made
    for group in made:
        group.close()


@pytest.fixture(scope="module", autouse=True)
def _descriptors() -> None:
    """Room in this process for the connections the tests open (a shell's soft limit is often
    1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4_500 if hard == resource.RLIM_INFINITY else min(4_500, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if wanted < 4_500:
        pytest.skip(f"needs 4,500 file descriptors; the hard limit is {hard}")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server whose header, idle and body timeouts are short (HEADER, IDLE, BODY)."""
    flags = with_timeouts(header=HEADER, idle=IDLE, body=BODY)
    running = start_server(tmp_path_factory.mktemp("quick") / "db.sqlite", *flags)
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[RunningServer]:
    """A server with 4 slots per surface and its default timeouts."""
    running = start_server(tmp_path / "db.sqlite", "--max-concurrent-requests", "4")
    try:
        yield running
    finally:
        running.kill()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def split(response: bytes) -> tuple[int, dict[str, str], Any]:
    head_part, _, body = response.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return status_of(response), headers, json.loads(body)


def golden(display_name: str) -> dict[str, Any]:
    return {
        "displayName": display_name,
        "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
    }


def mcp_call(base: str) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as http:
        return call_tool(http, "list_evaluations", {"parent": APP})


# -- timeouts ----------------------------------------------------------------------------------


def test_slow_headers_are_cut_off(quick: RunningServer, clients: list[Clients]) -> None:
    """2,000 connections sending a request head a byte every quarter second (slowloris): each
    is closed once the header timeout passes, without an answer; the server serves others
    meanwhile. uvicorn alone kept every one open."""
    slow = Clients(quick, 2_000, b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
    clients.append(slow)
    assert httpx.get(quick.http_base + "/healthz", timeout=30).status_code == 200
    slow.watch(HEADER + 20, trickle=b"x")
    assert not slow.open, f"{len(slow.open)} of 2,000 slow-header connections are still open"
    assert not any(slow.received.values())  # closed, never answered
    assert httpx.get(quick.http_base + "/healthz", timeout=30).status_code == 200


def test_the_header_clock_restarts_at_each_response(quick: RunningServer) -> None:
    """A keep-alive connection asking every half second for longer than the header timeout
    is never cut (its clock started again at each answer); a slow head after its last answer
    is cut once the header timeout has passed since that answer, not earlier."""
    sock = socket.create_connection(address(quick), timeout=10)
    try:
        request = head(quick, "GET", "/healthz")
        started = answered = time.monotonic()
        while True:
            sock.sendall(request)
            answer = b""
            while b'"SERVING"' not in answer:
                chunk = sock.recv(65536)
                assert chunk, f"closed after {time.monotonic() - started:.1f} s of requests"
                answer += chunk
            assert status_of(answer) == 200
            answered = time.monotonic()
            if answered - started > HEADER + 1.5:
                break
            time.sleep(0.5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        sock.settimeout(0.25)
        closed_after = None
        while time.monotonic() - answered < HEADER + 5:
            try:
                sock.sendall(b"x")  # a byte resets uvicorn's idle timer, not the header clock
                if sock.recv(65536) == b"":
                    closed_after = time.monotonic() - answered
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - answered
                break
        assert closed_after is not None, "the slow head was never cut off"
        assert HEADER - 0.25 <= closed_after <= HEADER + 2, closed_after
    finally:
        sock.close()


# The TCP segments a Linux socket has received carrying data: struct tcp_info's
# tcpi_data_segs_in (linux/tcp.h, since 4.6), a u32 at byte 152.
_DATA_SEGS_IN = 152


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int.from_bytes(info[_DATA_SEGS_IN : _DATA_SEGS_IN + 4], sys.byteorder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's TCP_INFO")
def test_each_answer_arrives_as_one_segment(quick: RunningServer) -> None:
    """An answer's head and body leave in one write (connections._Joined): a client on
    loopback receives each answer of a keep-alive connection, small or of tens of KB, as one
    TCP segment, where uvicorn alone sends the head and the body apart (two)."""
    created = httpx.post(
        f"{quick.http_base}{EVALUATIONS}?evaluationId=one-segment",
        json={**golden("One segment"), "description": "d" * 30_000},
        timeout=30,
    )
    assert created.status_code == 200, created.text
    sock = socket.create_connection(address(quick), timeout=10)
    try:
        for path, ending in [
            ("/healthz", b"}"),
            (f"{EVALUATIONS}/one-segment", b"}"),
            (f"{EVALUATIONS}/missing", b"}"),
            (f"{EVALUATIONS}/one-segment", b"}"),
        ]:
            before = _data_segments_in(sock)
            sock.sendall(head(quick, "GET", path))
            answer = b""
            while not (b"\r\n\r\n" in answer and answer.endswith(ending)):
                chunk = sock.recv(1 << 20)
                assert chunk, answer
                answer += chunk
            status, headers, _ = split(answer)  # the body is whole JSON
            assert status in {200, 404}
            assert len(answer.partition(b"\r\n\r\n")[2]) == int(headers["content-length"])
            assert _data_segments_in(sock) - before == 1, (path, len(answer))
    finally:
        sock.close()


def test_a_new_connection_that_sends_nothing_is_closed_when_idle(
    quick: RunningServer, clients: list[Clients]
) -> None:
    """The idle (keep-alive) timeout applies before the first request too: uvicorn armed it
    only after a response, so a silent connection stayed open forever. Closed before the
    (longer) header timeout: it is the idle rule that closed them."""
    silent = Clients(quick, 50)
    clients.append(silent)
    silent.watch(HEADER - 0.5)
    assert not silent.open, f"{len(silent.open)} of 50 silent connections are still open"
    answered = Clients(quick, 1, head(quick, "GET", "/healthz"))
    clients.append(answered)
    answered.watch(HEADER - 0.5)  # the keep-alive connection after a response, as before
    assert not answered.open
    assert status_of(answered.received[answered.closed[0]]) == 200


def test_a_body_left_unread_is_cut_off(quick: RunningServer, clients: list[Clients]) -> None:
    """A request answered without its body being read (``/healthz`` with a declared body): the
    rest of the body arriving byte by byte does not keep the connection, which no next request
    can use before the body ends."""
    early = Clients(quick, 20, head(quick, "GET", "/healthz", content_length=str(DECLARED)))
    clients.append(early)
    early.watch(HEADER + 20, trickle=b"x")
    assert not early.open, f"{len(early.open)} of 20 connections are still open"
    assert all(status_of(received) == 200 for received in early.received.values())


@pytest.mark.parametrize("path", [EVALUATIONS, "/mcp"])
def test_a_body_that_does_not_arrive_in_time_is_408(
    quick: RunningServer, clients: list[Clients], path: str
) -> None:
    """A declared 1 MB body sent a byte every quarter second: 408 once the body timeout (plus
    a second per 16 KiB received) passes, in Google's error model (JSON-RPC's on /mcp), and
    the connection is closed."""
    slow = Clients(quick, 3, trickling_post(quick, path))
    clients.append(slow)
    slow.watch(BODY + 20, trickle=b" ")
    assert not slow.open
    for received in slow.received.values():
        status, headers, body = split(received)
        assert status == 408, received[:300]
        assert headers["connection"] == "close"
        error = body["error"]["data"] if path == "/mcp" else body["error"]
        assert error["code"] == 408
        assert error["status"] == "DEADLINE_EXCEEDED"
        assert error["details"][0]["reason"] == "REQUEST_BODY_TIMEOUT"


# -- admission ---------------------------------------------------------------------------------


def test_bodies_still_arriving_hold_no_rest_slot(
    limited: RunningServer, clients: list[Clients]
) -> None:
    """8 REST POSTs trickling a declared 1 MB body, 4 slots: other REST calls are served. The
    transcoder used to read the body inside its slot, so every call was 429 until the bodies
    ended (at 1 byte/s, never)."""
    slow = Clients(limited, 8, trickling_post(limited, EVALUATIONS))
    clients.append(slow)
    slow.watch(1.0, trickle=b" ", until_closed=False)  # the server has read the 8 heads
    with httpx.Client(base_url=limited.http_base, timeout=30) as http:
        for _ in range(3):
            response = http.get(EVALUATIONS)
            assert response.status_code == 200, response.text
        created = http.post(EVALUATIONS, json=golden("while others trickle"))
        assert created.status_code == 200, created.text
    assert len(slow.open) == 8  # still sending, within the body timeout: not refused


def test_bodies_still_arriving_hold_no_mcp_slot(
    limited: RunningServer, clients: list[Clients]
) -> None:
    """The same for ``/mcp``, whose bodies were already read before its admission."""
    slow = Clients(limited, 8, trickling_post(limited, "/mcp"))
    clients.append(slow)
    slow.watch(1.0, trickle=b" ", until_closed=False)
    response = mcp_call(limited.http_base)
    assert response.status_code == 200, response.text
    assert "error" not in response.json()


def test_idle_get_mcp_streams_hold_no_mcp_slot(
    limited: RunningServer, clients: list[Clients]
) -> None:
    """More ``GET /mcp`` connections than slots, answered (405 at once) and left open, or with
    the head still coming: a tools/call is served. GET /mcp used to be held open as an event
    stream, one slot each, until every MCP call was 429."""
    answered = Clients(limited, 8, head(limited, "GET", "/mcp", accept="text/event-stream"))
    unfinished = Clients(limited, 8, b"GET /mcp HTTP/1.1\r\naccept: text/event-stream\r\n")
    clients += [answered, unfinished]
    answered.watch(1.0, until_closed=False)
    assert all(status_of(received) == 405 for received in answered.received.values())
    response = mcp_call(limited.http_base)
    assert response.status_code == 200, response.text
    assert "error" not in response.json()


# -- the connection cap ------------------------------------------------------------------------


def test_connections_beyond_the_cap_are_closed_at_once(
    tmp_path: Path, clients: list[Clients]
) -> None:
    """``--max-connections 3``: with 3 open, each new connection is closed before the server
    reads a byte of it (a request sent on it gets no answer), with one warning for them all;
    once one of the 3 closes, a new connection is served."""
    server = start_server(tmp_path / "db.sqlite", "--max-connections", "3")
    try:
        held = Clients(server, 3)
        clients.append(held)
        held.watch(0.5, until_closed=False)
        assert len(held.open) == 3
        extra = Clients(server, 10, head(server, "GET", "/healthz"))
        clients.append(extra)
        extra.watch(10)
        assert not extra.open, f"{len(extra.open)} of 10 connections over the cap are open"
        assert not any(extra.received.values())  # no answer: the request never reached the app
        held.open[0].close()
        held.open.pop(0)
        for _ in range(100):
            try:
                if httpx.get(server.http_base + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            pytest.fail("no connection was served once one of the 3 closed")
        warnings = [line for line in server.log if "closed a new connection at once" in line]
        assert len(warnings) == 1, warnings
    finally:
        server.kill()


# -- file descriptors --------------------------------------------------------------------------

# ``ces-eval`` under a low RLIMIT_NOFILE, soft and hard: the server cannot raise it.
LOW_FILES = 256
_LOW = [
    sys.executable,
    "-c",
    "import resource, runpy, sys\n"
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_FILES}, {LOW_FILES}))\n"
    "runpy.run_module('ces_eval.cli', run_name='__main__', alter_sys=True)\n",
]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_out_of_file_descriptors_is_refused_quietly_and_the_server_recovers(
    tmp_path: Path, clients: list[Clients], loop: str
) -> None:
    """Under 256 descriptors, 600 connections: the server runs out and serves again once the
    connections close. On asyncio's loop it says so once (asyncio logged an ERROR and a
    traceback per failed accept(), thousands a second) and new connections wait; on uvloop,
    libuv closes each connection it has no descriptor for at once, as the cap does, without a
    word (the start-up warning about the limit is the only line)."""
    server = start_server(tmp_path / "db.sqlite", "--loop", loop, program=_LOW)
    try:
        needed = 2 * DEFAULT_MAX_CONNECTIONS + RESERVED_DESCRIPTORS
        assert any(f"below the {needed} descriptors" in line for line in server.log)
        flood = Clients(server, 600)
        clients.append(flood)
        if loop == "asyncio":
            for _ in range(200):
                if any("Too many open files" in line for line in server.log):
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the server never ran out of descriptors:\n" + server.output())
            time.sleep(3)  # three of asyncio's retries, each a backlog's worth of failed accepts
            out_of_files = [line for line in server.log if "Too many open files" in line]
            assert len(out_of_files) == 1, f"{len(out_of_files)} lines, {len(server.output())} B"
        else:
            flood.watch(5, until_closed=False)
            # Fewer than 256 connections fit; libuv closed the rest as they came.
            assert len(flood.closed) > 600 - LOW_FILES, len(flood.closed)
            assert not any("Too many open files" in line for line in server.log)
        assert "Traceback" not in server.output()
        flood.close()
        clients.remove(flood)
        for _ in range(200):
            try:
                if httpx.get(server.http_base + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail("/healthz never answered again:\n" + server.output()[-2000:])
        with httpx.Client(base_url=server.http_base, timeout=30) as http:
            assert http.get(EVALUATIONS).status_code == 200
            created = http.post(EVALUATIONS, json=golden("after the flood"))
            assert created.status_code == 200, created.text
    finally:
        server.kill()
