"""``ces-eval serve``'s options, declared once: :class:`ServerConfig`.

Each field is one option (:mod:`ces_eval.options`): its flag, its ``CES_EVAL_*`` variable, its
help, its default and its value check follow from the entry, in the order ``--help`` lists
them. :mod:`ces_eval.cli` builds the command line from it, :mod:`ces_eval.server` serves what
it holds, :mod:`ces_eval.workers` hands it to each worker as flags, and the core receives its
part as one :class:`~ces_eval.core.aip.context.Settings` (:meth:`ServerConfig.core`), whose fields
are named after the options that fill them. A new option is one entry here, plus its use.

The checks of host names, origins, location IDs and MCP tool names are those of the layer that
uses the value (:mod:`ces_eval.surfaces.http_app`, :mod:`ces_eval.core.aip.names`,
:mod:`ces_eval.surfaces.mcp_tools`), so an option and its use cannot disagree.
"""

from __future__ import annotations

import argparse
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from ces_eval import connections, logs, loops
from ces_eval.admission import DEFAULT_LIMIT
from ces_eval.core.aip.context import Settings
from ces_eval.core.aip.names import foreign_id
from ces_eval.options import bounded, comma_list, on_off, option, project, repeated, switch, timeout
from ces_eval.surfaces.http_app import host_name, origin_key
from ces_eval.surfaces.mcp_tools import SCHEMA_FORMS, unknown_tools

__all__ = ["DEFAULT_MAX_CONNECTIONS", "ServerConfig"]

# Per listener and process; at most 2 x this of the process's file descriptors go to clients.
DEFAULT_MAX_CONNECTIONS = 4096
_SCHEMES = ("sqlite:///", "postgresql://", "postgres://")
_CORE = Settings()  # the core's own defaults


def _host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the address to bind is empty")
    return text.strip()


_port = bounded("a port", 0, 65535, " (0: the system picks a free one)")


def _database_url(text: str) -> str:
    if text.startswith(_SCHEMES) and text not in _SCHEMES:
        return text
    hint = f"; for a SQLite file write sqlite:///{text}" if "://" not in text and text else ""
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a database URL: expected sqlite:///path/to/file.db, "
        f"sqlite:///:memory: or postgresql://user@host:port/database{hint}"
    )


def _locations(text: str) -> tuple[str, ...]:
    """``--locations``: one location ID or several, comma-separated."""
    found = comma_list(text)
    for location in found:
        if not foreign_id(location):
            raise argparse.ArgumentTypeError(
                f"{location!r} is not a location ID: a letter or digit, then up to 127 "
                "letters, digits, '.', '_', '~' or '-'"
            )
    return found


def _lease(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.3 <= value <= 86_400:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a lease: expected seconds from 0.3 to 86400"
        )
    return value


def _worker_count(text: str) -> int:
    value = bounded("a worker count", 1, 256)(text)
    if value > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise argparse.ArgumentTypeError("needs SO_REUSEPORT, which this system lacks")
    return value


def _host_names(text: str) -> tuple[str, ...]:
    """``--allow-host``: one name or several, comma-separated (as its variable takes them)."""
    names = comma_list(text)
    for name in names:
        if host_name(name) is None:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a host name: expected a DNS name or an IP address, no port"
            )
    return names


def _ca_file(text: str) -> Path:
    """``--agent-ca-file``: a PEM file of certificate authorities, loaded once to check it."""
    try:
        ssl.create_default_context(cafile=text)
    except (OSError, ssl.SSLError, ValueError) as error:
        reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or error
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a readable PEM file of certificate authorities ({reason})"
        ) from None
    return Path(text)


def _origins(text: str) -> tuple[str, ...]:
    """``--allow-origin``: one origin or several, comma-separated. ``*`` and ``null`` are
    refused: either would let every web page (``null``: every sandboxed or ``file:`` page)
    drive the server."""
    origins = comma_list(text)
    for origin in origins:
        if origin in {"*", "null"}:
            raise argparse.ArgumentTypeError(
                f"{origin!r} would let any web page call the server: list each origin"
            )
        if origin_key(origin) is None:
            raise argparse.ArgumentTypeError(
                f"{origin!r} is not an origin: expected http(s)://host[:port], no path"
            )
    return origins


def _mcp_tools(text: str) -> tuple[str, ...]:
    """``--mcp-tools``: tool names or groups, comma-separated."""
    names = comma_list(text)
    unknown = unknown_tools(names)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, unknown)) or 'nothing'}: expected all, read, write or MCP "
            "tool names (ces-eval describe lists them)"
        )
    return names


@dataclass(frozen=True)
class ServerConfig:
    """What ``ces-eval serve`` was told: one field per option (README, "Server options")."""

    host: str = option("127.0.0.1", "address to bind (both listeners)", parse=_host)
    grpc_port: int = option(
        50051,
        "gRPC port; 0: the system picks a free one (printed in the ready line)",
        parse=_port,
        metavar="PORT",
    )
    http_port: int = option(
        8080,
        "HTTP port (REST, MCP at /mcp, /healthz, /openapi.json); 0: the system picks",
        parse=_port,
        metavar="PORT",
    )
    database: str = option(
        "sqlite:///./data/ces-eval.db",
        "sqlite:///path/to/file.db (SQLite, WAL), sqlite:///:memory: (gone when the "
        "server stops), or postgresql://user:password@host:port/database shared by replicas",
        parse=_database_url,
        metavar="URL",
    )
    export_dir: Path = option(
        _CORE.export_dir,
        "folder standing in for Cloud Storage: gs://bucket/path is <export-dir>/bucket/path",
        metavar="DIR",
        into=Path,
    )
    # Every project has these (core/resources/locations.py).
    locations: tuple[str, ...] = repeated(
        _CORE.locations,
        "locations every project has (ListLocations, GetLocation), besides those its "
        "resources' names use; repeatable, or comma-separated",
        parse=_locations,
        metavar="ID",
    )
    operation_lease: float = option(
        30.0,
        "how long a long-running operation outlives a replica that stopped renewing it "
        "(renewed every third of this)",
        parse=_lease,
        metavar="SECONDS",
    )
    scheduler: bool = option(
        _CORE.scheduler,
        "on: fire scheduled evaluation runs when they are due (by the wall clock, or a "
        "project clock the emulator moved); off: never (FireScheduledEvaluationRun still fires)",
        parse=on_off,
        metavar="on|off",
    )
    require_apps: bool = option(
        _CORE.require_apps,
        "on: a call naming something inside an app that CreateApp or ImportApp did not make is "
        "NOT_FOUND, as in hosted CES; off: such an app exists from its first use, with the "
        "defaults docs/semantics.md lists",
        parse=on_off,
        metavar="on|off",
    )
    # The processes serving (workers.py); a worker is told nothing of it.
    workers: int = option(
        1,
        "serve from N worker processes sharing both ports (SO_REUSEPORT; Linux spreads "
        "connections over them) under one supervisor; 1: a single process",
        parse=_worker_count,
        metavar="N",
    )
    # The token file (docs/security.md).
    auth_tokens: Path | None = option(
        None,
        "require a bearer token on every call; FILE maps each token to the projects it may "
        "use, read-only or read-write (docs/security.md)",
        metavar="FILE",
        into=Path,
    )
    allow_unauthenticated: bool = switch(
        "serve a non-loopback --host without --auth-tokens (anyone who can connect may "
        "read and change every project)"
    )
    # Web pages (http_app.BrowserGuard): more Host names (any port) and cross-origin origins.
    allow_host: tuple[str, ...] = repeated(
        (),
        "also accept Host NAME, on any port (a reverse proxy's or a container's name); a "
        "Host naming none of this server's addresses gets 421 (docs/security.md); repeatable, "
        "or comma-separated",
        parse=_host_names,
        metavar="NAME",
    )
    # Hosts besides loopback that agent endpoints may name (docs/agents.md).
    agent_allow_hosts: tuple[str, ...] = repeated(
        _CORE.agent_allow_hosts,
        "let agent endpoints (docs/agents.md) name host NAME besides loopback; "
        "repeatable, or comma-separated",
        parse=_host_names,
        metavar="NAME",
    )
    # The certificate authorities https agents are verified against (docs/agents.md).
    agent_ca_file: Path | None = option(
        _CORE.agent_ca_file,
        "verify https agents, judges and simulators (docs/agents.md) against the certificate "
        "authorities in FILE (PEM) instead of the default set (certifi's)",
        parse=_ca_file,
        metavar="FILE",
    )
    # Sessions played against agents at once by all runs of the process (docs/agents.md).
    agent_sessions: int = option(
        _CORE.agent_sessions,
        "sessions all runs of a process play against agents at once, together (each run "
        "plays at most its endpoint's max_concurrent_sessions; docs/agents.md)",
        parse=bounded("a session count", 1, 10_000),
        metavar="N",
    )
    allow_origin: tuple[str, ...] = repeated(
        (),
        "let web pages of ORIGIN (http(s)://host[:port]) call the server (CORS); other "
        "cross-origin requests get 403 (docs/security.md); repeatable, or comma-separated",
        parse=_origins,
        metavar="ORIGIN",
    )
    # Per surface and process (admission.py).
    max_concurrent_requests: int = option(
        DEFAULT_LIMIT,
        "calls each surface (gRPC, REST, MCP) serves at once, per process; one more is "
        "refused at once with RESOURCE_EXHAUSTED (HTTP 429, Retry-After)",
        parse=bounded("a request limit", 1, 1_000_000),
        metavar="N",
    )
    # Open connections per listener (gRPC port, HTTP port) and process; one more is closed.
    max_connections: int = option(
        DEFAULT_MAX_CONNECTIONS,
        "open connections each port (gRPC, HTTP) keeps at once, per process; one more is "
        "closed at once (docs/security.md)",
        parse=bounded("a connection limit", 1, 1_000_000),
        metavar="N",
    )
    # How long the HTTP port waits for a client (connections.Timeouts), in seconds.
    header_timeout: float = option(
        connections.Timeouts.header,
        "HTTP port: a request head (line and headers) not complete this long after the "
        "connection opened or the previous answer closes the connection",
        parse=timeout(float),
        metavar="SECONDS",
    )
    idle_timeout: int = option(
        connections.Timeouts.idle,
        "HTTP port: a connection with no request in progress this long is closed",
        parse=timeout(int),
        metavar="SECONDS",
    )
    body_timeout: float = option(
        connections.Timeouts.body,
        "HTTP port: a request body gets this long, plus one second per 16 KiB received, "
        "or is answered 408",
        parse=timeout(float),
        metavar="SECONDS",
    )
    log_level: str = option(
        "info",
        "info: one request line per call; warning: none; debug: tracebacks too",
        choices=logs.LEVELS,
    )
    log_format: str = option(
        "text", "text lines, or one JSON object per line", choices=logs.FORMATS
    )
    loop: str = option(
        "auto",
        "the event loop: uvloop (auto, where installed) or asyncio's own",
        choices=loops.LOOPS,
    )
    # An export document imported at start (core/exchange/imports.py).
    seed: Path | None = option(
        None,
        "an export document (any format an export writes) imported at start into the "
        "apps its names name; what is stored already is kept, so every start may read it again; "
        "a regular file of at most 64 MiB",
        metavar="FILE",
        into=Path,
    )
    # MCP's tools/list: which tools (names, or all|read|write) and how (full|compact).
    mcp_tools: tuple[str, ...] = repeated(
        ("all",),
        "the MCP tools listed and callable: all, read (those that only read), write, or "
        "tool names (ces-eval describe lists them); repeatable, or comma-separated",
        parse=_mcp_tools,
        metavar="NAMES",
    )
    mcp_schema: str = option(
        "full",
        "how tools/list describes them: full, or compact (each description's first "
        "sentence, no output schemas; inputs are checked the same)",
        choices=SCHEMA_FORMS,
    )
    # A pipe's read end from the program that started the server; end-of-file there stops the
    # server as SIGTERM does (server.watch_lifeline). A worker's lifeline is its supervisor.
    lifeline: int | None = option(
        None,
        "the read end of a pipe inherited from the program that started the server (a "
        "test harness, as ces_eval.testing's): end-of-file there, which comes however that "
        "program ends, stops the server as SIGTERM does",
        parse=bounded("a file descriptor", 0, 2**31 - 1),
        metavar="FD",
    )

    @property
    def timeouts(self) -> connections.Timeouts:
        return connections.Timeouts(self.header_timeout, self.idle_timeout, self.body_timeout)

    def core(self, *, own_ports: tuple[int, ...]) -> Settings:
        """What the core receives: its options, and what follows from this configuration
        (with ``--auth-tokens`` every project has a bucket namespace of its own) or from the
        ports bound (``own_ports``, which no agent may be called at)."""
        return project(
            Settings, self, export_per_project=self.auth_tokens is not None, own_ports=own_ports
        )
