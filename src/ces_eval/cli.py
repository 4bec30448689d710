"""The ``ces-eval`` command.

Every ``serve`` option is a flag and an environment variable, ``CES_EVAL_<FLAG>``
(``--grpc-port`` is ``CES_EVAL_GRPC_PORT``; switches take ``1``/``true``/``yes``/``on`` or
``0``/``false``/``no``/``off``): a flag beats the variable, the variable beats the default.
Each is one field of :class:`ces_eval.config.ServerConfig`, from which :mod:`ces_eval.options`
makes the flag, the variable, the help and the check.
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
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import NoReturn

from ces_eval import __version__, options

__all__ = ["main", "parse"]

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
    config = options.config(ServerConfig, args)
    if args.worker_of is not None:
        # A worker's lifeline is its link to the supervisor, which watches the harness's; the
        # variable, inherited, would name a descriptor the worker does not have.
        config = dataclasses.replace(config, lifeline=None)
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
            return loops.run(supervise(config, config.workers), "asyncio")
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


def _serve_parser(
    commands: argparse._SubParsersAction[_Parser], environ: Mapping[str, str]
) -> argparse.ArgumentParser:
    from ces_eval.config import ServerConfig  # noqa: PLC0415 - see the module's docstring

    serve_parser = commands.add_parser(
        "serve",
        help=_HELP["serve"],
        description="Serve the CES EvaluationService and AgentService over gRPC, REST and MCP "
        "until SIGTERM or Ctrl-C. Exit status: 0 stopped, 1 failed (database, workers, "
        "unexpected error), 2 bad configuration, 3 a port cannot be bound.",
    )
    options.add_options(serve_parser, ServerConfig, environ)
    serve_parser.add_argument("--worker-of", type=int, help=argparse.SUPPRESS)
    serve_parser.set_defaults(run=_serve)
    return serve_parser


# The subcommands whose options are the server's, as the command list names them.
_HELP = {
    "serve": "run the gRPC and HTTP server",
    "exec": "run a command beside a server started for it",
}

# The serve options exec chooses itself where neither a flag nor a variable gives them: free
# ports, and a throw-away database and export folder (testing/exec.py).
_EXEC_CHOOSES = ("grpc_port", "http_port", "database", "export_dir")
_EXEC_SHOWN = {
    "grpc_port": "0, a free port",
    "http_port": "0, a free port",
    "database": "a SQLite file in a temporary folder, removed at the end",
    "export_dir": "a temporary folder, removed at the end",
}


def _exec(args: argparse.Namespace) -> int:
    """Run COMMAND beside a server (:mod:`ces_eval.testing.exec`, docs/exec.md)."""
    from ces_eval.config import ServerConfig  # noqa: PLC0415 - see the module's docstring
    from ces_eval.testing.exec import ExecFailed, run_command  # noqa: PLC0415

    command = list(args.to_run)
    if command[:1] == ["--"]:
        command = command[1:]
    chosen = [name for name in _EXEC_CHOOSES if getattr(args, name) is None]
    for field, _spec in options.declared(ServerConfig):
        if field.name in chosen:
            setattr(args, field.name, field.default)  # a placeholder, left out below
    config = options.config(ServerConfig, args)
    try:
        return run_command(
            command,
            options.arguments(config, without=[*chosen, "lifeline"]),
            database_url=None if "database" in chosen else config.database,
            export_dir=None if "export_dir" in chosen else config.export_dir,
            write=_to_stderr,
        )
    except ExecFailed as failed:
        print(f"ces-eval exec: {failed}", file=sys.stderr, flush=True)
        return failed.status


def _to_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _exec_parser(
    commands: argparse._SubParsersAction[_Parser], environ: Mapping[str, str]
) -> argparse.ArgumentParser:
    from ces_eval.config import ServerConfig  # noqa: PLC0415 - see the module's docstring
    from ces_eval.testing.exec import USAGE  # noqa: PLC0415

    exec_parser = commands.add_parser(
        "exec",
        usage=USAGE,
        help=_HELP["exec"],
        description="Start ces-eval serve with these serve options (ports the system picks and "
        "a database in a temporary folder, unless --grpc-port, --http-port, --database or "
        "--export-dir, or their variables, say otherwise), wait until it is ready, run COMMAND "
        "with CES_EVAL_URL (http://host:port) and CES_EVAL_GRPC (host:port) naming it, then stop "
        "the server. The server's output goes to stderr, each line after '[ces-eval serve] '. "
        "Exit status: COMMAND's (128+N when signal N ended it); 2 no COMMAND, a bad option or "
        "a server that did not start; 126 COMMAND cannot be run, 127 COMMAND not found "
        "(docs/exec.md).",
    )
    options.add_options(exec_parser, ServerConfig, environ, _EXEC_SHOWN)
    exec_parser.set_defaults(
        **{name: None for name in _EXEC_CHOOSES if options.variable(name) not in environ}
    )
    exec_parser.add_argument(  # "command" is the subcommand's
        "to_run", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run"
    )
    exec_parser.set_defaults(run=_exec)
    return exec_parser


def _run(args: argparse.Namespace) -> int:
    from ces_eval import gate  # noqa: PLC0415 - see the module's docstring

    return gate.run(args)


def _run_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    from ces_eval.gate import add_arguments  # noqa: PLC0415 - see the module's docstring

    run_parser = commands.add_parser(
        "run",
        help="run an app's evaluations on a server and gate on their results (docs/gate.md)",
        description="Run evaluations of one app on a server (default: a throw-away local one), "
        "wait for them, write reports and gate. Exit status: 0 the gate holds, 1 it fails, "
        "2 the run could not be done (bad arguments, server unreachable or refusing, run "
        "ERROR or CANCELLED, interrupted).",
    )
    add_arguments(run_parser)
    run_parser.set_defaults(run=_run)


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
    given = os.environ if environ is None else environ
    # serve's and exec's options come from the server's configuration, whose import takes a
    # second (the MCP package): built only for the command that takes them, the other a name
    # and its help for the command list.
    wanted = next((word for word in (sys.argv[1:] if argv is None else argv)
                   if not word.startswith("-")), None)  # fmt: skip
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, build in (("serve", _serve_parser), ("exec", _exec_parser)):
        if name == wanted:
            parsers[name] = build(commands, given)
        else:
            commands.add_parser(name, help=_HELP[name])
    _run_parser(commands)
    args = parser.parse_args(argv)
    return options.resolve(parsers.get(args.command, parser), args)


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
            given = sys.argv[1:] if argv is None else argv
            if given[:1] == ["exec"]:  # before COMMAND started: not COMMAND's success
                print(
                    f"ces-eval exec: interrupted by {interrupted.signal} before the command "
                    "started",
                    file=sys.stderr,
                    flush=True,
                )
                return 128 + signal.Signals[interrupted.signal].value
            if "--worker-of" not in given:
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
