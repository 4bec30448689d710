"""Connections to the gRPC port against the real server (issue 15, item 4): a connection that
never finishes its HTTP/2 preface is closed after the handshake bound, one that carries no call
after the idle bound, one beyond ``--max-connections`` at once; a flood of connections leaves
the process's file descriptors to its other listener, and a server at its descriptor limit
logs that once a second and serves again once connections close.

The attackers are raw sockets speaking as little HTTP/2 as they need; the clients that must keep
working are grpcio channels, each on a connection of its own (``FRESH_CONNECTION``: channels to
one target otherwise share a connection).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ces_eval.testing.server import RunningServer, start_server
from tests.support.load import FRESH_CONNECTION

# What a client sends first (RFC 9113, 3.4): the preface, then its SETTINGS frame.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, HEADERS = 4, 1
ACK = 1
# The server's bounds (server.py, _grpc_server).
HANDSHAKE_SECONDS = 10
IDLE_SECONDS = 30
EMFILE_LINE = "File descriptor limit reached"


def frame(kind: int, stream: int = 0, payload: bytes = b"", flags: int = 0) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def connect(target: str, first: bytes = b"") -> socket.socket:
    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    if first:
        sock.sendall(first)
    return sock


# The preface, our SETTINGS and the acknowledgement of the server's (sent blind: a client may
# acknowledge before it reads them), as a client that then stays idle does.
HANDSHAKEN = PREFACE + frame(SETTINGS) + frame(SETTINGS, flags=ACK)


def closed(sock: socket.socket, wait: float = 0.0) -> bool:
    """Whether the server has closed ``sock`` (end of stream or reset), waiting at most
    ``wait`` seconds for it; whatever the server sent before is read and dropped."""
    deadline = time.monotonic() + wait
    while True:
        sock.settimeout(max(0.0, deadline - time.monotonic()) or 0.001)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            if time.monotonic() >= deadline:
                return False
        except ConnectionError:
            return True


def healthy(channel: grpc.Channel, timeout: float = 5) -> bool:
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=timeout
        )
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def fresh_channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, options=FRESH_CONNECTION)


def http_ready(server: RunningServer) -> bool:
    try:
        with urllib.request.urlopen(server.http_base + "/healthz", timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def open_descriptors(server: RunningServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


@contextmanager
def running(tmp_path: Path, *extra: str, descriptors: int = 0) -> Iterator[RunningServer]:
    """A server; with ``descriptors``, under that RLIMIT_NOFILE, soft and hard (so start-up
    cannot raise it)."""
    program: tuple[str, ...] = ()
    if descriptors:
        program = (
            sys.executable,
            "-c",
            "import resource, runpy, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({descriptors}, {descriptors})); "
            "sys.argv[0] = 'ces-eval'; runpy.run_module('ces_eval.cli', run_name='__main__')",
        )
    server = start_server(tmp_path / "db.sqlite", *extra, program=program)
    try:
        yield server
    finally:
        server.kill()


def test_connections_beyond_the_cap_are_closed_at_once_and_those_within_keep_working(
    tmp_path: Path,
) -> None:
    cap = 4
    with running(tmp_path, "--max-connections", str(cap)) as server, ExitStack() as stack:
        client = stack.enter_context(fresh_channel(server.grpc_target))
        assert healthy(client)
        within = [
            stack.enter_context(connect(server.grpc_target, HANDSHAKEN)) for _ in range(cap - 1)
        ]
        beyond = [stack.enter_context(connect(server.grpc_target, HANDSHAKEN)) for _ in range(3)]
        for sock in beyond:
            assert closed(sock, wait=5)
        assert not any(closed(sock, wait=0.5) for sock in within)
        # The connections within the cap keep being served; a new client is refused.
        assert all(healthy(client) for _ in range(5))
        assert not healthy(stack.enter_context(fresh_channel(server.grpc_target)), timeout=2)

        for sock in within:
            sock.close()
        # A closed connection gives its place back (the server notices the close first).
        deadline = time.monotonic() + 10
        while not healthy(stack.enter_context(fresh_channel(server.grpc_target)), timeout=2):
            assert time.monotonic() < deadline, "never served a new connection again"
        assert healthy(client)


def test_a_connection_without_a_preface_or_without_calls_is_closed(tmp_path: Path) -> None:
    with running(tmp_path) as server, ExitStack() as stack:
        started = time.monotonic()
        silent = stack.enter_context(connect(server.grpc_target))
        partial = stack.enter_context(connect(server.grpc_target, PREFACE[:16]))
        idle = stack.enter_context(connect(server.grpc_target, HANDSHAKEN))
        # A request whose headers never end: HEADERS without END_HEADERS, one field (:method).
        trickling = stack.enter_context(
            connect(server.grpc_target, HANDSHAKEN + frame(HEADERS, 1, b"\x83"))
        )
        client = stack.enter_context(fresh_channel(server.grpc_target))
        assert healthy(client)
        watching = health_pb2_grpc.HealthStub(client).Watch(health_pb2.HealthCheckRequest())
        assert next(watching).status == health_pb2.HealthCheckResponse.SERVING

        for sock in (silent, partial):
            assert closed(sock, wait=HANDSHAKE_SECONDS + 3)
        assert time.monotonic() - started > HANDSHAKE_SECONDS - 1
        assert not closed(idle) and not closed(trickling)

        for sock in (idle, trickling):
            assert closed(sock, wait=started + IDLE_SECONDS + 5 - time.monotonic())
        # Not before most of the idle time: grpc core's idle timer has closed one 27 s into 30.
        assert time.monotonic() - started > IDLE_SECONDS * 0.8
        # A call in flight (a Watch stream) keeps its connection; a client that was idle
        # reconnects by itself for its next call.
        assert watching.is_active()  # type: ignore[attr-defined]
        watching.cancel()  # type: ignore[attr-defined]
        assert healthy(client)


def test_a_connection_flood_leaves_descriptors_to_the_http_port(tmp_path: Path) -> None:
    descriptors, cap = 256, 64
    with (
        running(tmp_path, "--max-connections", str(cap), descriptors=descriptors) as server,
        ExitStack() as stack,
    ):
        client = stack.enter_context(fresh_channel(server.grpc_target))
        assert healthy(client)
        flood = [stack.enter_context(connect(server.grpc_target, HANDSHAKEN)) for _ in range(400)]
        time.sleep(1)  # the server has accepted (and closed) what it will
        assert open_descriptors(server) < descriptors - 16
        assert http_ready(server)
        assert healthy(client)
        assert sum(not closed(sock) for sock in flood) <= cap
        for sock in flood:
            sock.close()
        assert healthy(stack.enter_context(fresh_channel(server.grpc_target)))
        assert EMFILE_LINE not in server.output()


def test_at_the_descriptor_limit_grpc_logs_once_a_second_and_recovers(tmp_path: Path) -> None:
    descriptors = 128
    with running(tmp_path, descriptors=descriptors) as server, ExitStack() as stack:
        flood = [stack.enter_context(connect(server.grpc_target, HANDSHAKEN)) for _ in range(200)]
        started = time.monotonic()
        time.sleep(3)
        assert open_descriptors(server) == descriptors
        for sock in flood:
            sock.close()
        deadline = time.monotonic() + 10
        while not healthy(stack.enter_context(fresh_channel(server.grpc_target)), timeout=2):
            assert time.monotonic() < deadline, "never served again after the flood"
        lines = server.output().count(EMFILE_LINE)
        assert 1 <= lines <= time.monotonic() - started + 2
