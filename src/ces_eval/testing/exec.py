"""``ces-eval exec``: a server for the length of one command (docs/exec.md).

:func:`run_command` starts ``ces-eval serve`` with :func:`~ces_eval.testing.server.start_server`
(ports chosen by the system, readiness by ``GET /healthz``, a lifeline, so that the server dies
with this process however it ends), runs the command with the pytest plugin's variables naming
the server (:data:`VARIABLES`), stops the server with SIGTERM (a drain) once the command is done,
and answers the command's exit status as a shell would: 128+N when signal N ended it. The
emulators' ``exec`` commands are the model (Firebase's ``emulators:exec``; the Cloud SDK's
emulators with ``env-init``): the server exists exactly as long as the command.

Google's own variables: none is set. Google's CES clients read no ``*_EMULATOR_HOST``;
google-cloud-ces reads ``GOOGLE_CLOUD_UNIVERSE_DOMAIN`` (the endpoint becomes
``ces.{domain}``, always over TLS), ``GOOGLE_API_USE_MTLS_ENDPOINT`` and
``GOOGLE_API_USE_CLIENT_CERTIFICATE``: none of them can name a plaintext server on a local
port, so setting them would only break the clients of a command that also calls Google.
docs/exec.md shows the wiring from :data:`VARIABLES`.

Signals: SIGTERM and SIGHUP received here are sent on to the command, and so is SIGINT, unless
it came from the terminal (this process is in the terminal's foreground group, as the command
is: the terminal gave the command its own SIGINT, and a second one would cut its clean-up
short). The server runs in a session of its own, so Ctrl-C never reaches it: it serves until the
command is done. Before the command starts, any of them stops the start-up (128+N).

Standard library only, like the rest of :mod:`ces_eval.testing`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from ces_eval.testing.server import RunningServer, ServerStartError, start_server

__all__ = ["GRPC_VARIABLE", "URL_VARIABLE", "VARIABLES", "ExecFailed", "exit_status", "run_command"]

URL_VARIABLE = "CES_EVAL_URL"  # http://host:port: REST, MCP at /mcp, /healthz, the web view
GRPC_VARIABLE = "CES_EVAL_GRPC"  # host:port, plaintext gRPC
VARIABLES = (URL_VARIABLE, GRPC_VARIABLE)  # what the pytest plugin reads (testing/plugin.py)
USAGE = "ces-eval exec [serve options] -- COMMAND [ARG...]"
NO_COMMAND = 2  # no COMMAND, a bad option, a server that did not start
NOT_EXECUTABLE = 126  # as shells answer a command found but not runnable
NOT_FOUND = 127  # as shells answer a command not found
# Relayed to the command; Windows has no SIGHUP (the pytest plugin imports this module there too).
_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
_STOP_TIMEOUT = 60.0  # seconds the server gets to drain before it is killed


class ExecFailed(Exception):
    """``exec`` could not run the command: one line for the user and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(returncode: int) -> int:
    """A shell's exit status for a process that ended with ``returncode`` (Popen's: -N when
    signal N ended it): 128+N then, the status itself otherwise."""
    return 128 - returncode if returncode < 0 else returncode


def command_environment(server: RunningServer, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with :data:`VARIABLES` naming ``server``."""
    return {**base, URL_VARIABLE: server.http_base, GRPC_VARIABLE: server.grpc_target}


def _from_terminal() -> bool:
    """Whether a SIGINT received now most likely came from the terminal: this process belongs
    to the foreground process group of the terminal on one of its standard streams, whose
    members (the command among them, started in this group) all received it."""
    if not hasattr(os, "tcgetpgrp"):  # Windows: no process groups
        return False
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class _Relay:
    """The signal handlers while ``exec`` runs (see the module's docstring); the previous ones
    again on leaving. Outside the main thread, where Python takes no handlers, none."""

    def __init__(self) -> None:
        self.command: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Relay:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in _SIGNALS}
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # what signal() returned

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        command = self.command
        if command is None:
            if not self.stopping:
                raise _Interrupted(signum)
            return
        if signum == signal.SIGINT and _from_terminal():
            return
        command.send_signal(signum)  # nothing once the command has exited


class _Echo:
    """The server's lines on ``write`` with ``prefix``: held until :meth:`release` (a server
    that does not start is one line of ``exec``'s instead), then written as they come."""

    def __init__(self, write: Callable[[str], object], prefix: str) -> None:
        self._write = write
        self._prefix = prefix
        self._held: list[str] | None = []
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(line)
            else:
                self._write(self._prefix + line)

    def release(self) -> None:
        with self._lock:
            for line in self._held or ():
                self._write(self._prefix + line)
            self._held = None


def run_command(
    command: Sequence[str],
    serve_args: Sequence[str] = (),
    *,
    database_url: str | None = None,
    export_dir: Path | None = None,
    write: Callable[[str], object] | None = None,
    prefix: str = "[ces-eval serve] ",
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` beside a ``ces-eval serve`` given ``serve_args``; its exit status.

    The database is ``database_url``, or a SQLite file in a temporary folder removed at the end
    (exports too, unless ``export_dir``). The server's output goes to ``write`` (nowhere when
    None), each line after ``prefix``. ``environ``: the server's and the command's environment
    (default: this process's), :data:`VARIABLES` added for the command. Raises
    :class:`ExecFailed` when the command cannot be run: no command, a server that did not start
    (exit status 2), a command not found (127) or not runnable (126), a signal before the
    command started (128+N)."""
    if not command:
        raise ExecFailed(f"no COMMAND to run: {USAGE}", NO_COMMAND)
    base = os.environ if environ is None else environ
    _runnable(command[0], base)  # before a server starts for nothing
    echo = _Echo(write or (lambda _line: None), prefix)
    with tempfile.TemporaryDirectory(prefix="ces-eval-exec-") as folder, _Relay() as relay:
        try:
            server = start_server(
                Path(folder) / "ces-eval.db",
                *serve_args,
                database_url=database_url,
                export_dir=export_dir,
                base_env=base,
                echo=echo,
                own_session=True,
            )
        except ServerStartError as error:
            raise ExecFailed(f"the server did not start: {error.reason}", NO_COMMAND) from None
        except _Interrupted as interrupted:
            name = signal.Signals(interrupted.signum).name
            raise ExecFailed(
                f"interrupted by {name} before the command started", 128 + interrupted.signum
            ) from None
        try:
            echo.release()
            relay.command = _start(command, command_environment(server, base))
            returncode = relay.command.wait()
        except _Interrupted as interrupted:  # between the server's start and the command's
            returncode = -interrupted.signum
        finally:
            relay.stopping = True
            relay.command = None
            _stop(server, write)
    return exit_status(returncode)


def _runnable(program: str, environ: Mapping[str, str]) -> None:
    """Raise :class:`ExecFailed` as a shell would answer ``program``: not found (127), or
    found but not executable (126)."""
    if shutil.which(program, path=environ.get("PATH", os.defpath)) is not None:
        return
    if os.sep in program and Path(program).exists():
        raise ExecFailed(f"{program}: cannot run it: not an executable file", NOT_EXECUTABLE)
    raise ExecFailed(f"{program}: command not found", NOT_FOUND)


def _start(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(list(command), env=dict(env))
    except FileNotFoundError:
        raise ExecFailed(f"{command[0]}: command not found", NOT_FOUND) from None
    except OSError as error:  # PermissionError, ENOEXEC, ...
        reason = error.strerror or type(error).__name__
        raise ExecFailed(f"{command[0]}: cannot run it: {reason}", NOT_EXECUTABLE) from None


def _stop(server: RunningServer, write: Callable[[str], object] | None) -> None:
    """SIGTERM and the server's drain; killed if it outlasts :data:`_STOP_TIMEOUT`. A server
    that stopped badly is said, but the command's status stands."""
    try:
        status = server.stop(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        server.kill()
        status = None
    if status != 0 and write is not None:
        said = "was killed: it did not stop" if status is None else f"stopped with status {status}"
        write(f"ces-eval exec: the server {said}\n")
