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
import enum
import errno
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ces_eval import connections
from ces_eval import storage as storage_backends
from ces_eval.access import (
    TokenFileError,
    Tokens,
    authorized,
    authorized_bidi,
    authorized_streams,
)
from ces_eval.access.caller import DEFAULT_USER
from ces_eval.access.chat_tokens import ChatTokens
from ces_eval.admission import Admission
from ces_eval.config import DEFAULT_MAX_CONNECTIONS, ServerConfig
from ces_eval.contract import limits, openapi
from ces_eval.core.aip import pages
from ces_eval.core.aip.context import AnswerKeeper
from ces_eval.core.engine.scheduler import Scheduler
from ces_eval.core.exchange import imports
from ces_eval.core.io import objects
from ces_eval.core.io.operations import OperationRunner
from ces_eval.core.service import Core, bidi_handlers, handlers, stream_handlers
from ces_eval.errors import ServiceError
from ces_eval.logs import HttpRequestLog, RequestLog
from ces_eval.storage.base import InUse, Storage, Unavailable
from ces_eval.surfaces.boundary import Boundary
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import BrowserRules, build_app
from ces_eval.surfaces.mcp_tools import McpEndpoint, build_endpoint
from ces_eval.surfaces.rest import Transcoder, served_bindings
from ces_eval.surfaces.web_ui import WebView
from ces_eval.transcoding.router import Router

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "SEED_MAX_BYTES",
    "ExitStatus",
    "ServerConfig",
    "StartupError",
    "bind_sockets",
    "client_wiring",
    "ready_message",
    "serve",
    "shown_database",
    "watch_lifeline",
]

_log = logging.getLogger("ces_eval")
DRAIN_SECONDS = 10.0
HEALTH_PING_SECONDS = 2.0
# The largest ``--seed`` file read (README, "Server options"): an export document is parsed
# whole in memory, and a bigger one is refused by its size before any of it is read.
SEED_MAX_BYTES = 64 * 1024 * 1024


class ExitStatus(enum.IntEnum):
    """``ces-eval serve``'s exit statuses (README, "Server options")."""

    STOPPED = 0  # stopped by SIGTERM or SIGINT after draining
    FAILED = 1  # the database cannot be opened, a worker group failed, an unexpected error
    CONFIGURATION = 2  # a flag or CES_EVAL_* value, the token file, or the exposure check
    PORT_UNAVAILABLE = 3  # a port is taken by another program or cannot be bound


class StartupError(Exception):
    """Why the server cannot start, as one line naming the flag to change, and the exit
    status it ends with."""

    def __init__(self, message: str, status: ExitStatus = ExitStatus.CONFIGURATION) -> None:
        super().__init__(message)
        self.status = status


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: :func:`serve` owns SIGTERM/SIGINT and stops
    both listeners together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _client_host(host: str) -> str:
    """The address a client on this machine dials for a server bound to ``host``."""
    if host in {"", "0.0.0.0"}:  # noqa: S104 - recognizing the wildcard, not binding it
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def client_wiring(config: ServerConfig, grpc_port: int, http_port: int) -> list[str]:
    """How Google's Python client reaches this server as configured, one line per transport:
    expressions over ``ces_v1beta``, ``EvaluationServiceGrpcTransport``, ``grpc`` and, open,
    ``AnonymousCredentials`` or, with ``--auth-tokens``, ``Credentials``
    (``google.oauth2.credentials``) with ``<token>`` standing for a token of the file."""
    host = _client_host(config.host)
    rest = (
        'ces_v1beta.EvaluationServiceClient(transport="rest", client_options='
        f'{{"api_endpoint": "http://{host}:{http_port}"}}, credentials='
    )
    if config.auth_tokens is None:
        return [
            "gRPC: ces_v1beta.EvaluationServiceClient(transport=EvaluationServiceGrpcTransport("
            f'channel=grpc.insecure_channel("{host}:{grpc_port}")))',
            f"REST: {rest}AnonymousCredentials())",
        ]
    if loopback_only(config.host):
        # gRPC sends call credentials only over a secure or a local channel.
        grpc_line = (
            "gRPC: ces_v1beta.EvaluationServiceClient(transport=EvaluationServiceGrpcTransport("
            f'host="{host}:{grpc_port}", credentials=Credentials("<token>"), '
            "ssl_channel_credentials=grpc.local_channel_credentials()))"
        )
    else:
        grpc_line = (
            "gRPC: ces_v1beta.EvaluationServiceClient(transport=EvaluationServiceGrpcTransport("
            f'channel=grpc.insecure_channel("{host}:{grpc_port}"))), passing '
            'metadata=[("authorization", "Bearer <token>")] on every call'
        )
    return [grpc_line, f'REST: {rest}Credentials("<token>"))']


def shown_database(url: str) -> str:
    """``url`` as the server prints it: a password it holds is ``***``
    (``postgresql://user:***@host/database``), so that logs and terminals never show it."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def ready_message(config: ServerConfig, grpc_port: int, http_port: int) -> str:
    """The start-up line on stderr (harnesses read the ports from it) and, under it, the
    wiring of the official client that works in this server's mode."""
    lines = [
        f"ces-eval serving gRPC on {config.host}:{grpc_port} and HTTP on "
        f"http://{config.host}:{http_port} (database {shown_database(config.database)})",
    ]
    if config.auth_tokens is not None:
        lines.append(
            f"  every call needs 'authorization: Bearer <token>' with a token of "
            f"{config.auth_tokens}"
        )
    lines.append("  official Python client (google-cloud-ces), as README.md's quick start shows:")
    lines += [f"    {line}" for line in client_wiring(config, grpc_port, http_port)]
    return "\n".join(lines)


def _bind(host: str, port: int, *, reuse_port: bool) -> list[socket.socket]:
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
            if reuse_port:
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


def _port_problem(
    host: str, port: int, flag: str, what: str, error: OSError | None
) -> StartupError:
    """The one line for a port that cannot be bound: taken, not permitted, or a bad host."""
    if isinstance(error, socket.gaierror):
        return StartupError(f"--host: cannot resolve {host!r}: {error.strerror}")
    if error is not None and error.errno == errno.EADDRINUSE:
        reason = "the port is in use by another program (choose another, or 0 for any free one)"
    elif error is not None and error.errno == errno.EACCES:
        reason = "not permitted (ports below 1024 need privileges)"
    elif error is not None and error.errno == errno.EADDRNOTAVAIL:
        return StartupError(f"--host: {host!r} is not an address of this machine")
    else:
        reason = error.strerror if error is not None and error.strerror else "cannot bind"
    return StartupError(
        f"{flag}: cannot serve {what} on {host}:{port}: {reason}", ExitStatus.PORT_UNAVAILABLE
    )


def bind_sockets(
    host: str, port: int, *, flag: str, what: str, shared: bool = False, join: bool = False
) -> list[socket.socket]:
    """TCP sockets bound (not listening) to every address ``host`` names, all on one port
    (``port``, or the one the kernel picks for the first address when 0).

    Alone, a port in use is refused: the sockets do not set SO_REUSEPORT, so nothing can
    share it. ``shared`` (a ``serve --workers`` supervisor): SO_REUSEPORT, for its own
    workers, once a bind without it showed that no other program holds the port. ``join``
    (such a worker): SO_REUSEPORT on the supervisor's port, without that check. A refusal is
    a :class:`StartupError` naming ``flag``."""
    try:
        if shared:
            for probe in _bind(host, port, reuse_port=False):
                port = probe.getsockname()[1]
                probe.close()
        return _bind(host, port, reuse_port=shared or join)
    except OSError as error:
        raise _port_problem(host, port, flag, what, error) from error


def _grpc_server(config: ServerConfig, *, join: bool) -> tuple[grpc.aio.Server, int]:
    """A gRPC server bound to the gRPC port, services not yet added. Alone it binds without
    SO_REUSEPORT (grpcio's default is on: a second server on a taken port would share it
    silently); ``join``: a worker of ``serve --workers``, sharing the supervisor's port."""
    # Messages as large as a REST body at most (docs/security.md, Limits). grpc refuses a larger
    # one itself with RESOURCE_EXHAUSTED before any handler runs, hence without our ErrorInfo:
    # the one error of ours that cannot carry it.
    options: list[tuple[str, int]] = [
        ("grpc.max_receive_message_length", limits.MAX_REQUEST_BYTES),
        ("grpc.so_reuseport", 1 if join else 0),
        # Connections (docs/security.md, "Connections"). One past the cap is accepted and
        # closed at once, so a flood never takes the descriptors the HTTP port needs; grpc
        # counts per address bound (``--host localhost``: 127.0.0.1 and ::1 each).
        ("grpc.max_allowed_incoming_connections", config.max_connections),
        # The client's preface and SETTINGS must arrive within this (grpc's default: 120 s);
        # a real client sends them with its first bytes.
        ("grpc.server_handshake_timeout_ms", 10_000),
        # A connection without a call for this long gets a graceful GOAWAY; clients reconnect
        # by themselves at their next call. Longer than google-api-core's longest gap between
        # two polls of an operation (20 s), so a client waiting on one keeps its connection.
        ("grpc.max_connection_idle_ms", 30_000),
        # Calls grpc has received but the event loop has not begun yet wait in grpc's queue.
        # Past 1,000 of them grpc dropped new calls at random, past 3,000 all of them, answering
        # CANCELLED (no ErrorInfo; clients do not retry it). Up to this many wait for the loop
        # instead, which refuses them like any call beyond --max-concurrent-requests:
        # RESOURCE_EXHAUSTED, TOO_MANY_REQUESTS. Past it grpc still drops them, the memory
        # bound of last resort (about 15 KB per waiting call).
        ("grpc.server.max_pending_requests", 10_000),
        ("grpc.server.max_pending_requests_hard_limit", 10_000),
    ]
    if not join and config.grpc_port:
        # grpc would say only that it failed (and log it): a plain socket bound the same way
        # first tells why.
        for sock in bind_sockets(config.host, config.grpc_port, flag="--grpc-port", what="gRPC"):
            sock.close()
    server = grpc.aio.server(options=options)
    target = f"[{config.host}]" if ":" in config.host else config.host
    try:
        port = server.add_insecure_port(f"{target}:{config.grpc_port}")
    except RuntimeError:  # grpcio >= 1.5x raises "Failed to bind to address ..."
        port = 0
    if port == 0:
        raise _port_problem(config.host, config.grpc_port, "--grpc-port", "gRPC", None)
    return server, port


async def _start_grpc(server: grpc.aio.Server, dispatcher: Dispatcher) -> health.aio.HealthServicer:
    """Our services, grpc.health.v1 (SERVING) and reflection on ``server``, started."""
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*dispatcher.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    server.add_generic_rpc_handlers((dispatcher,))
    await server.start()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return health_servicer


class _Role:
    """What differs between a server serving alone and a worker of ``serve --workers``, whose
    ``link`` is its socket to the supervisor."""

    def __init__(self, link: socket.socket | None) -> None:
        self.link = link
        self.worker = link is not None

    def http_sockets(self, config: ServerConfig) -> list[socket.socket]:
        """The HTTP sockets: a worker's shared with the other workers, else this server's
        own (a port in use is refused)."""
        return bind_sockets(
            config.host, config.http_port, flag="--http-port", what="HTTP", join=self.worker
        )

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


def watch_lifeline(fd: int | None) -> None:
    """Stop this process, as SIGTERM would, once ``fd`` (``--lifeline``) reads end-of-file.

    A test harness keeps the write end of a pipe and passes the read end: the kernel closes
    the write end when the harness's process ends, however it ends (SIGKILL included, where
    no clean-up of its own runs), so its server never outlives it. SIGTERM is raised rather
    than a stop set here, so that the one path that handles SIGTERM at that moment (an
    interrupted start-up, or a drain once serving) handles this too. Bytes written to the
    pipe are read and ignored."""
    if fd is None:
        return
    try:
        # Left blocking (the flag would be the harness's too): read only when readable.
        os.set_inheritable(fd, False)  # a worker process or an agent must not hold it open
        loop = asyncio.get_running_loop()

        def readable() -> None:
            try:
                if os.read(fd, 4096):
                    return
            except BlockingIOError:
                return
            except OSError:
                pass
            loop.remove_reader(fd)
            os.close(fd)
            _log.warning("the program that started this server is gone (--lifeline); stopping")
            signal.raise_signal(signal.SIGTERM)

        loop.add_reader(fd, readable)
    except OSError as error:  # not open, or not a pipe, FIFO or socket (a file cannot be watched)
        raise StartupError(
            f"--lifeline: cannot watch file descriptor {fd}: {error.strerror or error} "
            "(expected the read end of a pipe this process inherited)"
        ) from error


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
        f"--host: refusing to serve {config.host} without authentication: anyone who can reach it "
        "could read and change every project. Pass --auth-tokens FILE (docs/security.md), "
        "bind a loopback address, or pass --allow-unauthenticated to accept the risk"
    )


def preflight(config: ServerConfig) -> Tokens | None:
    """The ``--auth-tokens`` table (None: an open server); a :class:`StartupError` when the
    server must not start (the exposure check above, an export folder that cannot be written,
    or what is wrong with the token file)."""
    problem = exposure_problem(config)
    if problem is not None:
        raise StartupError(problem)
    _check_export_folder(config.export_dir)
    if config.auth_tokens is None:
        return None
    try:
        return Tokens.load(config.auth_tokens)
    except TokenFileError as error:
        raise StartupError(f"--auth-tokens: {error}") from error


def _check_export_folder(folder: Path) -> None:
    """``--export-dir`` made (with its parents) and written once, an unnamed file created and
    gone at once: a folder no export could write to is a configuration mistake said at start,
    not an INTERNAL answer to the first export. Written, not judged by its mode: file modes
    do not stop root, a read-only mount or an immutable folder do."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise StartupError(
            f"--export-dir: cannot write to {folder}: {error.strerror or error}"
        ) from error


async def open_database(config: ServerConfig, *, shared: bool = False) -> Storage:
    """The opened database (migrations applied); a :class:`StartupError` naming
    ``--database`` when it cannot be."""
    try:
        database = storage_backends.from_url(config.database, shared=shared)
    except ValueError as error:
        raise StartupError(f"--database: {error}") from error
    try:
        await database.open()
    except (InUse, Unavailable, OSError) as error:  # OSError: e.g. its folder cannot be made
        raise StartupError(
            f"--database: cannot open {shown_database(config.database)}: {error}",
            ExitStatus.FAILED,
        ) from error
    return database


def _surfaces(
    config: ServerConfig,
    core: Core,
    tokens: Tokens | None,
    log: RequestLog | None,
    draining: asyncio.Event | None = None,
) -> tuple[Dispatcher, Transcoder, McpEndpoint, WebView]:
    """The three surfaces over ``core``'s handlers, each behind its boundary
    (:mod:`ces_eval.surfaces.boundary`): with ``tokens`` every call authenticates (at the
    boundary) and is authorized per project (:func:`ces_eval.access.authorized` wraps the
    handlers every surface dispatches to); each surface has its own in-flight limit. gRPC writes
    its request lines itself; HTTP's come from ``HttpRequestLog``."""
    implementations = handlers(core)
    streams, bidi = stream_handlers(core), bidi_handlers(core)
    if tokens is not None:
        implementations = authorized(implementations)
        streams, bidi = authorized_streams(streams), authorized_bidi(bidi)
        # Chat tokens (GenerateChatToken) are signed under the database's secret.
        tokens.chat = ChatTokens(core.context.page_tokens.secret)

    def boundary(surface: str, log: RequestLog | None = None) -> Boundary:
        admission = Admission(surface, config.max_concurrent_requests)
        return Boundary(surface, tokens=tokens, admission=admission, log=log)

    def keeper(surface: str) -> AnswerKeeper | None:
        # An open server's reads are answered again from what a surface kept; with tokens,
        # every call is authorized on its decoded request (core/aip/context.py, AnswerKeeper).
        return AnswerKeeper(core.context, surface) if tokens is None else None

    dispatcher = Dispatcher(
        implementations,
        boundary=boundary("grpc", log),
        keeper=keeper("grpc"),
        streams=streams,
        bidi=bidi,
        draining=draining,  # set, bidirectional streams say goodbye (go_away) and end
    )
    rest = Transcoder(
        Router(served_bindings()), implementations, boundary("rest"), keeper("rest"), streams
    )
    mcp = build_endpoint(
        implementations, boundary("mcp"), tools=config.mcp_tools, schema=config.mcp_schema
    )
    ui = WebView(implementations, boundary("ui"), core.context.storage.apps)
    return dispatcher, rest, mcp, ui


def _read_seed(path: Path) -> bytes:
    """The bytes of the ``--seed`` file: a regular file of at most :data:`SEED_MAX_BYTES`.
    Anything else is refused by what ``fstat`` says of it, before a byte is read: opened
    without blocking, a FIFO cannot hang the start, nor can ``/dev/zero`` fill memory."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return objects.read_regular(descriptor, SEED_MAX_BYTES)
    except objects.NotRegular as refused:
        raise StartupError(f"--seed: {path} is {refused}") from None
    except objects.ObjectTooLarge as large:
        raise StartupError(
            f"--seed: {path} is {large}; a seed may hold at most {SEED_MAX_BYTES} bytes"
        ) from None
    except OSError as error:
        raise StartupError(f"--seed: cannot read {path}: {error.strerror or error}") from error


def _seed_plan(config: ServerConfig) -> imports.SeedPlan | None:
    """``--seed``: the document read and checked before the database is opened, so that one
    that cannot be read or imported stops the start in one line and changes nothing."""
    if config.seed is None:
        return None
    data = _read_seed(config.seed)
    try:
        return imports.seed_plan(data)
    except ServiceError as error:
        raise StartupError(f"--seed: {config.seed}: {error.message}") from error


async def _seed(core: Core, path: Path, plan: imports.SeedPlan) -> None:
    """Store the ``--seed`` document (what is stored already is kept), saying what it did."""
    try:
        seeded = await imports.seed(core.context, plan, DEFAULT_USER)
    except ServiceError as error:
        raise StartupError(f"--seed: {path}: {error.message}") from error
    _log.info(
        "seeded from %s: %d evaluations, %d results and %d runs imported; %d already present "
        "(evaluations and runs, kept as stored)",
        path,
        seeded.evaluations,
        seeded.results,
        seeded.runs,
        seeded.present,
    )


async def serve(config: ServerConfig, worker_of: socket.socket | None = None) -> int:
    """Serve until SIGTERM/SIGINT; ``worker_of``: run as a worker of ``serve --workers``, with
    this socket to the supervisor. What stops the start raises :class:`StartupError`; the
    ports are bound before the database is opened, so a taken port changes nothing."""
    role = _Role(worker_of)
    watch_lifeline(config.lifeline)
    tokens = preflight(config)
    seed = _seed_plan(config)
    open_files = connections.raise_open_file_limit()
    if (problem := connections.descriptor_problem(open_files, config.max_connections)) is not None:
        _log.warning("%s", problem)
    async with contextlib.AsyncExitStack() as cleanup:
        http_sockets = role.http_sockets(config)
        for sock in http_sockets:
            cleanup.callback(sock.close)
        server, grpc_port = _grpc_server(config, join=role.worker)
        cleanup.push_async_callback(server.stop, None)
        database = await open_database(config, shared=role.worker)
        cleanup.push_async_callback(database.close)
        return await _serve(
            config,
            role,
            tokens=tokens,
            database=database,
            server=server,
            grpc_port=grpc_port,
            http_sockets=http_sockets,
            seed=seed,
        )
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def _serve(
    config: ServerConfig,
    role: _Role,
    *,
    tokens: Tokens | None,
    database: Storage,
    server: grpc.aio.Server,
    grpc_port: int,
    http_sockets: list[socket.socket],
    seed: imports.SeedPlan | None = None,
) -> int:
    log = RequestLog() if RequestLog.wanted() else None  # logs.py: the request log
    runner = OperationRunner(database, lease=config.operation_lease, export_root=config.export_dir)
    # Also sweeps the export folder, of what provably no process writes any more.
    await runner.recover()
    own_ports = (grpc_port, int(http_sockets[0].getsockname()[1]))
    core = Core(
        database,
        pages.PageTokens(await database.secret()),
        runner,
        config.core(own_ports=own_ports),
    )
    if config.seed is not None and seed is not None:
        await _seed(core, config.seed, seed)
    draining = asyncio.Event()
    dispatcher, rest, mcp, ui = _surfaces(config, core, tokens, log, draining)
    scheduler = Scheduler(core.context)
    http_port = int(http_sockets[0].getsockname()[1])
    health_servicer = await _start_grpc(server, dispatcher)
    # What start-up built (modules, descriptors, schemas: ~110,000 objects) lives as long as the
    # process: the cyclic collector no longer walks it, so a full collection during a request
    # holds the interpreter for a few milliseconds instead of ~50.
    gc.freeze()

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

    app: ASGIApp = build_app(
        ready,
        rest=rest,
        openapi=openapi.committed_openapi(),
        mcp=mcp.app,
        ui=ui,
        lifespan=lambda _app: mcp.manager.run(),
        browser=BrowserRules(config.host, config.allow_host, config.allow_origin),
        timeouts=config.timeouts,
    )
    if log is not None:
        app = HttpRequestLog(app, log)
    connections.AcceptErrors.install(asyncio.get_running_loop())
    listener = connections.Listener("HTTP", config.max_connections, config.timeouts)
    http = _Uvicorn(
        uvicorn.Config(
            app,
            host=config.host,
            port=http_port,
            log_level="debug" if config.log_level == "debug" else "warning",
            lifespan="on",
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
            http=connections.http_protocol(listener),
            ws="none",
            access_log=False,  # our own request log (logs.RequestLog) writes each call's line
            timeout_keep_alive=config.timeouts.idle,
        )
    )
    http_task = asyncio.create_task(http.serve(sockets=http_sockets))

    stop = asyncio.Event()
    role.watch(stop)

    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        await runner.shutdown()
        error = http_task.exception()
        raise StartupError(
            f"--http-port: the HTTP listener did not start: {error}", ExitStatus.FAILED
        ) from error
    # Until here a signal interrupts the start-up where it is (cli.StartupInterrupted, one
    # line); from here on it drains. Set on the line before the ready line: a signal is never
    # lost between the two, nor does it stop a server that printed it without a drain.
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await role.serving(config, grpc_port, http_port)
    if config.scheduler:
        scheduler.start()

    await stop.wait()
    draining.set()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Both listeners stop accepting at once and drain their calls together, each for at most
    # DRAIN_SECONDS: a REST client must not get in while gRPC drains.
    http.should_exit = True
    await server.stop(DRAIN_SECONDS)
    await http_task
    await scheduler.stop()
    await runner.shutdown()
    if log is not None:
        log.flush()
    role.stopped()
    return ExitStatus.STOPPED
