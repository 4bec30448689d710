"""``ces-eval serve``: the gRPC and HTTP (REST, health) listeners over one core and one database.

Start-up order: open the database (migrations), bind gRPC (EvaluationService, EmulatorService,
grpc.health.v1, server reflection), start the HTTP listener; ``/healthz`` turns 200 only when
both accept and the database answers. SIGTERM or SIGINT stops accepting, drains in-flight calls
(bounded grace period), stops this process's running operations (they end UNAVAILABLE), closes
the database and returns normally (exit status 0). Operations a crashed process left running are
marked failed at the next start (SQLite) or when their lease runs out (PostgreSQL replicas).

With ``worker_of`` (``ces-eval serve --workers N``, see :mod:`ces_eval.workers`) this process is
one of N workers of a supervisor: it opens the database shared (the supervisor holds a SQLite
file's lock and did the start-up recovery and the export sweep), binds the ports the supervisor
chose with SO_REUSEPORT, reports readiness to the supervisor over the inherited socket instead of
printing the ready line, and stops (as on SIGTERM) when that socket closes (the supervisor died).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ces_eval import openapi, schema
from ces_eval import storage as storage_backends
from ces_eval.access import TokenFileError, Tokens
from ces_eval.admission import DEFAULT_LIMIT, Admission, Admitted
from ces_eval.core import exchange, limits, pages
from ces_eval.core.operations import OperationRunner
from ces_eval.core.service import DEFAULT_EXPORT_ROOT, Core, handlers
from ces_eval.storage.base import InUse, Storage, Unavailable
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import build_app
from ces_eval.surfaces.mcp_tools import McpEndpoint, build_endpoint
from ces_eval.transcoding.app import Transcoder
from ces_eval.transcoding.router import Router

__all__ = ["ServerConfig", "ready_message", "reuseport_sockets", "serve"]

_log = logging.getLogger("ces_eval")
DRAIN_SECONDS = 10.0
HEALTH_PING_SECONDS = 2.0


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    http_port: int = 8080
    database: str = "sqlite:///./data/ces-eval.db"
    export_dir: Path = DEFAULT_EXPORT_ROOT
    operation_lease: float = 30.0
    auth_tokens: Path | None = None  # the --auth-tokens file (docs/security.md)
    allow_unauthenticated: bool = False
    max_concurrent_requests: int = DEFAULT_LIMIT  # per surface and process (admission.py)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: :func:`serve` owns SIGTERM/SIGINT and stops
    both listeners together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _hint(config: ServerConfig, grpc_port: int) -> str:
    return (
        "official Python client over gRPC: EvaluationServiceClient(transport="
        "EvaluationServiceGrpcTransport(channel=grpc.insecure_channel("
        f"'{config.host}:{grpc_port}')))"
    )


def ready_message(config: ServerConfig, grpc_port: int, http_port: int) -> str:
    """The start-up line (and the client hint under it) on stderr; harnesses read the ports
    from it."""
    return (
        f"ces-eval serving gRPC on {config.host}:{grpc_port} and HTTP on "
        f"http://{config.host}:{http_port} (database {config.database})\n"
        f"  {_hint(config, grpc_port)}"
    )


def reuseport_sockets(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound (not listening) with SO_REUSEPORT to every address ``host`` names, all
    on one port (``port``, or the one the kernel picks for the first address when 0). Workers
    listen on such sockets and share the port; the supervisor holds them to keep the port."""
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, kind, proto, _, address in addresses:
            if (family, str(address[0])) in seen:
                continue
            seen.add((family, str(address[0])))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # as asyncio does: IPv4 gets its own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]  # the kernel's pick, for the other addresses too
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def _start_grpc(
    config: ServerConfig, dispatcher: Dispatcher, *, reuse_port: bool = False
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The gRPC listener: our services, grpc.health.v1 (SERVING) and reflection."""
    # Messages as large as a REST body at most (docs/security.md, Limits). grpc refuses a larger
    # one itself with RESOURCE_EXHAUSTED before any handler runs, hence without our ErrorInfo:
    # the one error of ours that cannot carry it.
    options: list[tuple[str, int]] = [("grpc.max_receive_message_length", limits.MAX_REQUEST_BYTES)]
    if reuse_port:
        options.append(("grpc.so_reuseport", 1))
    server = grpc.aio.server(options=options)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*dispatcher.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    server.add_generic_rpc_handlers((dispatcher,))
    grpc_port = server.add_insecure_port(f"{config.host}:{config.grpc_port}")
    if grpc_port == 0:
        raise OSError(f"cannot bind gRPC to {config.host}:{config.grpc_port}")
    await server.start()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, grpc_port


class _Role:
    """What differs between a server serving alone and a worker of ``serve --workers``, whose
    ``link`` is its socket to the supervisor."""

    def __init__(self, link: socket.socket | None) -> None:
        self.link = link
        self.worker = link is not None

    def http_sockets(self, config: ServerConfig) -> list[socket.socket] | None:
        """A worker's HTTP sockets, shared with the other workers; None: uvicorn binds."""
        return reuseport_sockets(config.host, config.http_port) if self.worker else None

    def watch(self, stop: asyncio.Event) -> None:
        """Set ``stop`` once the supervisor's end of the link closes (it exited or was
        killed)."""
        link = self.link
        if link is None:
            return
        loop = asyncio.get_running_loop()

        def readable() -> None:
            try:
                data = link.recv(64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(link.fileno())
                if not stop.is_set():
                    _log.warning("the supervisor is gone; stopping")
                    stop.set()

        link.setblocking(False)
        loop.add_reader(link.fileno(), readable)

    async def serving(self, config: ServerConfig, grpc_port: int, http_port: int) -> None:
        """Print the ready line, or tell the supervisor (which prints it for the group)."""
        if self.link is None:
            print(ready_message(config, grpc_port, http_port), file=sys.stderr, flush=True)
            return
        _log.info("worker %d serving", os.getpid())
        with contextlib.suppress(OSError):  # a gone supervisor has already set ``stop``
            await asyncio.get_running_loop().sock_sendall(self.link, b"ready\n")

    def stopped(self) -> None:
        if self.link is None:
            print("ces-eval stopped", file=sys.stderr, flush=True)
        else:
            _log.info("worker %d stopped", os.getpid())


def loopback_only(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address."""
    try:
        addresses = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(addresses) and all(
        ipaddress.ip_address(str(address[0]).split("%", 1)[0]).is_loopback
        for *_, address in addresses
    )


def exposure_problem(config: ServerConfig) -> str | None:
    """Why the server must not start as configured: without ``--auth-tokens`` it serves every
    project to anyone who can connect, so it binds only loopback addresses unless told
    otherwise."""
    if config.auth_tokens is not None or config.allow_unauthenticated:
        return None
    if loopback_only(config.host):
        return None
    return (
        f"refusing to serve {config.host} without authentication: anyone who can reach it "
        "could read and change every project. Pass --auth-tokens FILE (docs/security.md), "
        "bind a loopback address, or pass --allow-unauthenticated to accept the risk"
    )


def preflight(config: ServerConfig) -> tuple[Tokens | None, str | None]:
    """The ``--auth-tokens`` table (None: an open server), or why the server must not start
    (the exposure check above, or what is wrong with the token file)."""
    problem = exposure_problem(config)
    if problem is not None or config.auth_tokens is None:
        return None, problem
    try:
        return Tokens.load(config.auth_tokens), None
    except TokenFileError as error:
        return None, f"--auth-tokens: {error}"


async def _open(
    config: ServerConfig, role: _Role
) -> tuple[Storage, list[socket.socket] | None] | None:
    """A worker's HTTP sockets and the opened database; None once the reason was printed."""
    try:
        http_sockets = role.http_sockets(config)
    except OSError as error:
        print(f"ces-eval: cannot bind HTTP to {config.host}: {error}", file=sys.stderr, flush=True)
        return None
    database = storage_backends.from_url(config.database, shared=role.worker)
    try:
        await database.open()
    except (InUse, Unavailable) as error:
        print(f"ces-eval: cannot open the database: {error}", file=sys.stderr, flush=True)
        for sock in http_sockets or []:
            sock.close()
        return None
    return database, http_sockets


def _surfaces(
    config: ServerConfig, core: Core, tokens: Tokens | None
) -> tuple[Dispatcher, Transcoder, McpEndpoint]:
    """The three surfaces over ``core``'s handlers; with ``tokens`` every call authenticates
    (at the surface) and is authorized per project (in the core)."""
    implementations = handlers(core, authorization=tokens is not None)
    limit = config.max_concurrent_requests
    dispatcher = Dispatcher(implementations, tokens=tokens, admission=Admission("grpc", limit))
    rest = Transcoder(Router(schema.http_bindings()), implementations, tokens=tokens)
    return dispatcher, rest, build_endpoint(implementations, tokens)


async def serve(config: ServerConfig, worker_of: socket.socket | None = None) -> int:
    """Serve until SIGTERM/SIGINT; ``worker_of``: run as a worker of ``serve --workers``, with
    this socket to the supervisor."""
    role = _Role(worker_of)
    tokens, problem = preflight(config)
    if problem is not None:
        print(f"ces-eval: {problem}", file=sys.stderr, flush=True)
        return 2
    opened = await _open(config, role)
    if opened is None:
        return 1
    database, http_sockets = opened
    runner = OperationRunner(database, lease=config.operation_lease)
    await runner.recover()
    # A worker leaves the sweep to its supervisor: other workers' exports may be under way.
    if not role.worker and (swept := exchange.sweep_temporary(config.export_dir)):
        _log.warning("removed %d partial export file(s) of interrupted operations", swept)
    dispatcher, rest, mcp = _surfaces(
        config,
        Core(
            database,
            pages.PageTokens(await database.secret()),
            runner,
            config.export_dir,
            export_per_project=tokens is not None,
        ),
        tokens,
    )
    if config.http_port:
        mcp.allow(config.host, config.http_port)

    server, health_servicer, grpc_port = await _start_grpc(
        config, dispatcher, reuse_port=role.worker
    )

    draining = asyncio.Event()

    async def ready() -> str | None:
        if not http.started:
            return "starting"
        if draining.is_set():
            return "draining"
        try:
            await asyncio.wait_for(database.ping(), HEALTH_PING_SECONDS)
        except (Unavailable, TimeoutError):
            return "database unavailable"
        return None

    http = _Uvicorn(
        uvicorn.Config(
            build_app(
                ready,
                rest=Admitted(rest, Admission("rest", config.max_concurrent_requests)),
                openapi=openapi.build_openapi(),
                mcp=Admitted(
                    mcp.app, Admission("mcp", config.max_concurrent_requests), jsonrpc=True
                ),
                lifespan=lambda _app: mcp.manager.run(),
            ),
            host=config.host,
            port=config.http_port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
        )
    )
    http_task = asyncio.create_task(http.serve(sockets=http_sockets))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    role.watch(stop)

    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        await server.stop(None)
        await database.close()
        http_task.result()  # raises the bind error
        return 1
    http_port = http.servers[0].sockets[0].getsockname()[1] if http.servers else config.http_port
    mcp.allow(config.host, http_port)
    await role.serving(config, grpc_port, http_port)

    await stop.wait()
    draining.set()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Both listeners stop accepting at once and drain their calls together, each for at most
    # DRAIN_SECONDS: a REST client must not get in while gRPC drains.
    http.should_exit = True
    await server.stop(DRAIN_SECONDS)
    await http_task
    await runner.shutdown()
    await database.close()
    role.stopped()
    return 0
