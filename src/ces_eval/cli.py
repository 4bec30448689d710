"""The ``ces-eval`` command.

Every ``serve`` option is a flag and an environment variable, ``CES_EVAL_<FLAG>``
(``--grpc-port`` is ``CES_EVAL_GRPC_PORT``; switches take ``1``/``true``/``yes``/``on`` or
``0``/``false``/``no``/``off``): a flag beats the variable, the variable beats the default.
A bad value, from either, is one line naming it and exit status 2, as is any other start-up
mistake (:class:`ces_eval.server.StartupError`); ``--log-level debug`` adds the traceback.

SIGINT (Ctrl-C) or SIGTERM at any point of the start-up, before the ready line, stops it at
once with one line, ``ces-eval: start-up interrupted by SIGINT; stopped``, and exit status 0 (as
a stop once serving): :func:`main` installs the handlers first, which is why the server's
modules, a second's worth of imports, are imported inside the functions below rather than at
the top. Once the server serves, it handles both signals itself (a drain).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

from ces_eval import __version__

__all__ = ["ENV_PREFIX", "main", "parse"]

ENV_PREFIX = "CES_EVAL_"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
_SCHEMES = ("sqlite:///", "postgresql://", "postgres://")
_log = logging.getLogger("ces_eval")
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)  # what stops the start-up (main) or the server


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where to read more, no usage block."""

    def error(self, message: str) -> NoReturn:
        from ces_eval.server import ExitStatus  # noqa: PLC0415 - see the module's docstring

        self.exit(ExitStatus.CONFIGURATION, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _describe(args: argparse.Namespace) -> int:
    """Print every method with its HTTP binding, as read from the descriptors; with
    ``--markdown`` the table of every official method and whether it is served (README)."""
    if args.markdown:
        # Imported here: the table reads the MCP tools, which serve needs only when serving.
        from ces_eval.methods import markdown_table  # noqa: PLC0415

        print(markdown_table())
        return 0
    from ces_eval.contract import schema  # noqa: PLC0415 - see the module's docstring

    for binding in schema.http_bindings():
        body = f"  body={binding.body}" if binding.body else ""
        print(f"{binding.verb:6} {binding.template}  {binding.method.full_name}{body}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    # See the module's docstring.
    from ces_eval import logs, loops  # noqa: PLC0415
    from ces_eval.server import (  # noqa: PLC0415
        ExitStatus,
        ServerConfig,
        StartupError,
        preflight,
        serve,
    )

    several = args.workers > 1 or args.worker_of is not None
    logs.configure(args.log_level, args.log_format, with_pid=several)
    config = ServerConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        database=args.database,
        export_dir=Path(args.export_dir),
        locations=tuple(args.locations),
        operation_lease=args.operation_lease,
        scheduler=args.scheduler,
        auth_tokens=Path(args.auth_tokens) if args.auth_tokens else None,
        allow_unauthenticated=args.allow_unauthenticated,
        max_concurrent_requests=args.max_concurrent_requests,
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        idle_timeout=args.idle_timeout,
        body_timeout=args.body_timeout,
        log_level=args.log_level,
        log_format=args.log_format,
        loop=args.loop,
        allow_host=tuple(args.allow_host),
        allow_origin=tuple(args.allow_origin),
        agent_allow_hosts=tuple(args.agent_allow_hosts),
        seed=Path(args.seed) if args.seed else None,
        mcp_tools=tuple(args.mcp_tools),
        mcp_schema=args.mcp_schema,
        # A worker's lifeline is its link to the supervisor, which watches the harness's; the
        # variable, inherited, would name a descriptor the worker does not have.
        lifeline=args.lifeline if args.worker_of is None else None,
    )
    try:
        if args.worker_of is not None:  # started by a supervisor (below), never by hand
            return loops.run(
                serve(config, worker_of=socket.socket(fileno=args.worker_of)), config.loop
            )
        if args.workers > 1:
            # Imported here: a single-process server does not need the supervisor.
            from ces_eval.workers import supervise  # noqa: PLC0415

            # Checked before any worker starts: a refusal must not become a restart loop.
            preflight(config)
            # The supervisor runs on asyncio's own loop: it only starts and watches workers,
            # and uvloop's subprocesses take no process_group. Workers run on config.loop.
            return loops.run(supervise(config, args.workers), "asyncio")
        return loops.run(serve(config), config.loop)
    except StartupError as error:
        _log.debug("start-up failed", exc_info=True)
        print(f"ces-eval: {error}", file=sys.stderr, flush=True)
        return error.status
    except Exception as error:  # noqa: BLE001 - one line, not a traceback, unless debugging
        _log.debug("stopped by an unexpected error", exc_info=True)
        print(
            f"ces-eval: stopped by an unexpected error: {type(error).__name__}: {error} "
            "(--log-level debug shows the traceback)",
            file=sys.stderr,
            flush=True,
        )
        return ExitStatus.FAILED


def _bounded(kind: str, low: int, high: int, note: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {kind}: expected a whole number from {low} to {high}{note}"
            )
        return value

    return parse


_port = _bounded("a port", 0, 65535, " (0: the system picks a free one)")
_request_limit = _bounded("a request limit", 1, 1_000_000)
_connection_limit = _bounded("a connection limit", 1, 1_000_000)


def _worker_count(text: str) -> int:
    value = _bounded("a worker count", 1, 256)(text)
    if value > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise argparse.ArgumentTypeError("needs SO_REUSEPORT, which this system lacks")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.3 <= value <= 86_400:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a lease: expected seconds from 0.3 to 86400"
        )
    return value


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a switch: expected on or off")
    return text == "on"


def _timeout(kind: type[float] | type[int]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if not 0 < value <= 3600:
            unit = "whole seconds" if kind is int else "seconds"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a timeout: expected {unit} from {1 if kind is int else 0.1} "
                "to 3600"
            )
        return value

    return parse


def _database_url(text: str) -> str:
    if text.startswith(_SCHEMES) and text not in _SCHEMES:
        return text
    hint = f"; for a SQLite file write sqlite:///{text}" if "://" not in text and text else ""
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a database URL: expected sqlite:///path/to/file.db, "
        f"sqlite:///:memory: or postgresql://user@host:port/database{hint}"
    )


def _host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the address to bind is empty")
    return text.strip()


def _host_names(text: str) -> tuple[str, ...]:
    """``--allow-host``: one name or several, comma-separated (as its variable takes them)."""
    from ces_eval.surfaces.http_app import host_name  # noqa: PLC0415 - see the module's docstring

    names = tuple(item.strip() for item in text.split(",") if item.strip())
    for name in names:
        if host_name(name) is None:
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a host name: expected a DNS name or an IP address, no port"
            )
    return names


def _locations(text: str) -> tuple[str, ...]:
    """``--locations``: one location ID or several, comma-separated."""
    from ces_eval.core.aip.names import foreign_id  # noqa: PLC0415 - see the module's docstring

    found = tuple(item.strip() for item in text.split(",") if item.strip())
    for location in found:
        if not foreign_id(location):
            raise argparse.ArgumentTypeError(
                f"{location!r} is not a location ID: a letter or digit, then up to 127 "
                "letters, digits, '.', '_', '~' or '-'"
            )
    return found


def _origins(text: str) -> tuple[str, ...]:
    """``--allow-origin``: one origin or several, comma-separated. ``*`` and ``null`` are
    refused: either would let every web page (``null``: every sandboxed or ``file:`` page)
    drive the server."""
    from ces_eval.surfaces.http_app import origin_key  # noqa: PLC0415 - see the module's docstring

    origins = tuple(item.strip() for item in text.split(",") if item.strip())
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
    from ces_eval.surfaces.mcp_tools import unknown_tools  # noqa: PLC0415 - see the docstring

    names = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = unknown_tools(names)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(map(repr, unknown)) or 'nothing'}: expected all, read, write or MCP "
            "tool names (ces-eval describe lists them)"
        )
    return names


class _Repeated(argparse.Action):
    """A repeatable option whose values (each a tuple, from a comma-separated list) add up;
    its first flag replaces the variable's list (a flag beats its variable)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = current if isinstance(current, list) else []
        items.extend(values if isinstance(values, tuple) else ())
        setattr(namespace, self.dest, items)


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a switch: expected 1/true/yes/on or 0/false/no/off"
    )


@dataclass(frozen=True)
class _FromEnvironment:
    """An option's value as its variable gave it, checked only if no flag replaced it."""

    name: str
    text: str
    action: argparse.Action

    def value(self, parser: argparse.ArgumentParser) -> object:
        action = self.action
        switch = isinstance(action, argparse._StoreTrueAction)
        convert: Callable[[str], object] = _switch if switch else (action.type or str)  # type: ignore[assignment]
        try:
            value = convert(self.text)
        except (argparse.ArgumentTypeError, ValueError) as error:
            parser.error(f"{self.name}: {error}")
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            parser.error(f"{self.name}: invalid choice: {self.text!r} (choose from {choices})")
        return value


def _environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Document each option's variable and default in ``--help``, and make the variable's
    value the default where it is set (checked by :func:`_resolve` as the flag's value would
    be, unless a flag replaced it)."""
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS):
            continue
        flag = max(action.option_strings, key=len)
        if flag in {"--help", "--version"}:
            continue
        name = ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")
        switch = isinstance(action, argparse._StoreTrueAction)
        unset = action.default in (None, ())  # (): a repeatable option without entries
        shown = "off" if switch else ("none" if unset else action.default)
        action.help = f"{action.help} [env {name}; default {shown}]"
        if name in environ:
            action.default = _FromEnvironment(name, environ[name], action)


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    for key, value in vars(args).items():
        if isinstance(value, _FromEnvironment):
            setattr(args, key, value.value(parser))
    return args


def _serve_parser(commands: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
    # See the module's docstring.
    from ces_eval import logs, loops  # noqa: PLC0415
    from ces_eval.server import ServerConfig  # noqa: PLC0415
    from ces_eval.surfaces.mcp_tools import SCHEMA_FORMS  # noqa: PLC0415

    defaults = ServerConfig()
    serve_parser = commands.add_parser(
        "serve",
        help="run the gRPC and HTTP server",
        description="Serve the EvaluationService over gRPC, REST and MCP until SIGTERM or "
        "Ctrl-C. Exit status: 0 stopped, 1 failed (database, workers, unexpected error), "
        "2 bad configuration, 3 a port cannot be bound.",
    )
    add = serve_parser.add_argument
    add("--host", type=_host, default=defaults.host, help="address to bind (both listeners)")
    add(
        "--grpc-port",
        type=_port,
        default=defaults.grpc_port,
        metavar="PORT",
        help="gRPC port; 0: the system picks a free one (printed in the ready line)",
    )
    add(
        "--http-port",
        type=_port,
        default=defaults.http_port,
        metavar="PORT",
        help="HTTP port (REST, MCP at /mcp, /healthz, /openapi.json); 0: the system picks",
    )
    add(
        "--database",
        type=_database_url,
        default=defaults.database,
        metavar="URL",
        help="sqlite:///path/to/file.db (SQLite, WAL), sqlite:///:memory: (gone when the "
        "server stops), or postgresql://user:password@host:port/database shared by replicas",
    )
    add(
        "--export-dir",
        default=str(defaults.export_dir),
        metavar="DIR",
        help="folder standing in for Cloud Storage: gs://bucket/path is <export-dir>/bucket/path",
    )
    add(
        "--locations",
        action=_Repeated,
        type=_locations,
        default=defaults.locations,
        metavar="ID",
        help="locations every project has (ListLocations, GetLocation), besides those its "
        "resources' names use; repeatable, or comma-separated",
    )
    add(
        "--operation-lease",
        type=_positive_seconds,
        default=defaults.operation_lease,
        metavar="SECONDS",
        help="how long a long-running operation outlives a replica that stopped renewing it "
        "(renewed every third of this)",
    )
    add(
        "--scheduler",
        type=_on_off,
        default=defaults.scheduler,
        metavar="on|off",
        help="on: fire scheduled evaluation runs when they are due (by the wall clock, or a "
        "project clock the emulator moved); off: never (FireScheduledEvaluationRun still fires)",
    )
    add(
        "--workers",
        type=_worker_count,
        default=1,
        metavar="N",
        help="serve from N worker processes sharing both ports (SO_REUSEPORT; Linux spreads "
        "connections over them) under one supervisor; 1: a single process",
    )
    add(
        "--auth-tokens",
        metavar="FILE",
        help="require a bearer token on every call; FILE maps each token to the projects it may "
        "use, read-only or read-write (docs/security.md)",
    )
    add(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a non-loopback --host without --auth-tokens (anyone who can connect may "
        "read and change every project)",
    )
    add(
        "--allow-host",
        action=_Repeated,
        type=_host_names,
        default=defaults.allow_host,
        metavar="NAME",
        help="also accept Host NAME, on any port (a reverse proxy's or a container's name); a "
        "Host naming none of this server's addresses gets 421 (docs/security.md); repeatable, "
        "or comma-separated",
    )
    add(
        "--agent-allow-hosts",
        action=_Repeated,
        type=_host_names,
        default=defaults.agent_allow_hosts,
        metavar="NAME",
        help="let agent endpoints (docs/agents.md) name host NAME besides loopback; "
        "repeatable, or comma-separated",
    )
    add(
        "--allow-origin",
        action=_Repeated,
        type=_origins,
        default=defaults.allow_origin,
        metavar="ORIGIN",
        help="let web pages of ORIGIN (http(s)://host[:port]) call the server (CORS); other "
        "cross-origin requests get 403 (docs/security.md); repeatable, or comma-separated",
    )
    add(
        "--max-concurrent-requests",
        type=_request_limit,
        default=defaults.max_concurrent_requests,
        metavar="N",
        help="calls each surface (gRPC, REST, MCP) serves at once, per process; one more is "
        "refused at once with RESOURCE_EXHAUSTED (HTTP 429, Retry-After)",
    )
    add(
        "--max-connections",
        type=_connection_limit,
        default=defaults.max_connections,
        metavar="N",
        help="open connections each port (gRPC, HTTP) keeps at once, per process; one more is "
        "closed at once (docs/security.md)",
    )
    add(
        "--header-timeout",
        type=_timeout(float),
        default=defaults.header_timeout,
        metavar="SECONDS",
        help="HTTP port: a request head (line and headers) not complete this long after the "
        "connection opened or the previous answer closes the connection",
    )
    add(
        "--idle-timeout",
        type=_timeout(int),
        default=defaults.idle_timeout,
        metavar="SECONDS",
        help="HTTP port: a connection with no request in progress this long is closed",
    )
    add(
        "--body-timeout",
        type=_timeout(float),
        default=defaults.body_timeout,
        metavar="SECONDS",
        help="HTTP port: a request body gets this long, plus one second per 16 KiB received, "
        "or is answered 408",
    )
    add(
        "--log-level",
        choices=logs.LEVELS,
        default=defaults.log_level,
        help="info: one request line per call; warning: none; debug: tracebacks too",
    )
    add(
        "--log-format",
        choices=logs.FORMATS,
        default=defaults.log_format,
        help="text lines, or one JSON object per line",
    )
    add(
        "--loop",
        choices=loops.LOOPS,
        default=defaults.loop,
        help="the event loop: uvloop (auto, where installed) or asyncio's own",
    )
    add(
        "--seed",
        metavar="FILE",
        help="an export document (any format an export writes) imported at start into the "
        "apps its names name; what is stored already is kept, so every start may read it again; "
        "a regular file of at most 64 MiB",
    )
    add(
        "--mcp-tools",
        action=_Repeated,
        type=_mcp_tools,
        default=defaults.mcp_tools,
        metavar="NAMES",
        help="the MCP tools listed and callable: all, read (those that only read), write, or "
        "tool names (ces-eval describe lists them); repeatable, or comma-separated",
    )
    add(
        "--mcp-schema",
        choices=SCHEMA_FORMS,
        default=defaults.mcp_schema,
        help="how tools/list describes them: full, or compact (each description's first "
        "sentence, no output schemas; inputs are checked the same)",
    )
    add(
        "--lifeline",
        type=_bounded("a file descriptor", 0, 2**31 - 1),
        metavar="FD",
        help="the read end of a pipe inherited from the program that started the server (a "
        "test harness, as ces_eval.testing's): end-of-file there, which comes however that "
        "program ends, stops the server as SIGTERM does",
    )
    add("--worker-of", type=int, help=argparse.SUPPRESS)
    serve_parser.set_defaults(run=_serve)
    return serve_parser


def parse(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """The options of ``argv`` (default: the command line) over the ``CES_EVAL_*`` variables of
    ``environ`` (default: the process environment); a bad value exits with status 2."""
    parser = _Parser(
        prog="ces-eval",
        description="Local server for Google's CES EvaluationService (google.cloud.ces.v1beta).",
    )
    parser.add_argument("--version", action="version", version=f"ces-eval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", help="list the methods and their HTTP bindings")
    describe.add_argument(
        "--markdown",
        action="store_true",
        help="print README's table of every official method and whether it is served",
    )
    describe.set_defaults(run=_describe)
    serve_parser = _serve_parser(commands)
    _environment(serve_parser, os.environ if environ is None else environ)
    return _resolve(serve_parser, parser.parse_args(argv))


class StartupInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM before the server serves. A KeyboardInterrupt, so that asyncio's and
    uvloop's loops let it out of whatever callback it interrupts, as they do Ctrl-C's, and the
    tasks under way are cancelled (their clean-up runs: the database is closed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signal = signal.Signals(signum).name


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise StartupInterrupted(signum)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`StartupInterrupted` in the block, until the server
    replaces the handlers with its own once it serves (server.py); the previous ones after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _interrupt) for signum in _INTERRUPTS}
    unraisable = sys.unraisablehook
    sys.unraisablehook = _again(unraisable)
    try:
        yield
    finally:
        sys.unraisablehook = unraisable
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _again(
    otherwise: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], object]:
    """A hook for exceptions Python cannot raise: the interrupt's handler can run inside a
    weakref callback or a ``__del__`` (the import system's module locks have one), where what it
    raises is printed and dropped, and the start-up would go on as if no signal had come. Such
    an interrupt is raised again, silently, as the next Python function is called (a trace
    function's exception is raised in the frame it traces); any other exception goes to the
    hook that was there before."""

    def hook(unraisable: sys.UnraisableHookArgs) -> object:
        interrupted = unraisable.exc_value
        if not isinstance(interrupted, StartupInterrupted):
            return otherwise(unraisable)
        tracing = sys.gettrace()

        def again(_frame: FrameType, _event: str, _arg: object) -> NoReturn:
            sys.settrace(tracing)
            raise interrupted

        sys.settrace(again)
        return None

    return hook


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run ``ces-eval`` (see :func:`parse`); its exit status. An interrupted start-up is one
    line (a worker of ``serve --workers``, stopped by its supervisor, says nothing)."""
    with _interruptible():
        try:
            args = parse(argv, environ)
            result: int = args.run(args)
        except StartupInterrupted as interrupted:
            if "--worker-of" not in (sys.argv[1:] if argv is None else argv):
                print(
                    f"ces-eval: start-up interrupted by {interrupted.signal}; stopped",
                    file=sys.stderr,
                    flush=True,
                )
            # ExitStatus.STOPPED, not imported: the signal may have come during that import.
            return 0
    return result


if __name__ == "__main__":
    sys.exit(main())
