"""Run the real ``ces-eval serve`` as a subprocess: for ces-eval's integration tests and for the
pytest plugin (:mod:`ces_eval.testing.plugin`) in users' suites alike. Standard library only.

Ports are chosen by the server (port 0) and read from its start-up line, so parallel test runs
never race for a port. Readiness is ``GET /healthz`` == 200.

The server dies with the process that started it, however that process ends: it gets the read
end of a pipe (``serve --lifeline``) whose only write end this process holds (not inherited by
the programs it starts; a process it forks without exec holds a copy, and the server lives as
long as that one too). SIGKILL, SIGTERM or SIGHUP of a test run, where no teardown runs, close
that end, and the server stops on end-of-file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RunningServer",
    "ServerStartError",
    "run_serve",
    "serve_command",
    "start_server",
    "with_timeouts",
]

_READY_LINE = re.compile(r"serving gRPC on (\S+):(\d+) and HTTP on http://(\S+):(\d+)")


@dataclass
class RunningServer:
    process: subprocess.Popen[str]
    database: Path
    grpc_target: str
    http_base: str
    log: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None
    exports: Path | None = None
    lifeline: int | None = None  # the write end of the server's --lifeline pipe

    def _closed(self) -> None:
        if self.reader is not None:
            self.reader.join(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()
        _close_lifeline(self.lifeline)
        self.lifeline = None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self._closed()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self._closed()

    def output(self) -> str:
        return "".join(self.log)

    @property
    def export_dir(self) -> Path:
        return self.exports or self.database.parent / "exports"


class ServerStartError(RuntimeError):
    """``ces-eval serve`` exited, or never answered ``/healthz``, before it served: the message
    holds everything it printed, :attr:`output` the same text, and :attr:`status` its exit
    status (None when it was killed for never becoming healthy)."""

    def __init__(self, message: str, output: str, status: int | None) -> None:
        super().__init__(message + output)
        self.output = output
        self.status = status

    @property
    def reason(self) -> str:
        """The server's last line, where a refused start says why ("ces-eval: " dropped)."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        if not lines:
            return "it printed nothing"
        return lines[-1].removeprefix("ces-eval: ")


def _lifeline() -> tuple[int, int] | None:
    """A pipe for ``serve --lifeline``: (read end, for the server; write end, kept here), both
    not inheritable; None where file descriptors cannot be passed (Windows)."""
    return os.pipe() if os.name == "posix" else None


def _close_lifeline(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _drain(
    stream: Iterable[str],
    sink: list[str],
    ready: threading.Event,
    found: list[str],
    echo: Callable[[str], object] | None,
) -> None:
    for line in stream:
        if echo is not None:
            echo(line)
        if echo is None or not found:  # echoed: only the start-up is kept (for its errors)
            sink.append(line)
        if not found and (match := _READY_LINE.search(line)):
            found.extend(match.groups())
            ready.set()
    ready.set()


def serve_command(database_url: str, *extra: str, program: Sequence[str] = ()) -> list[str]:
    """``ces-eval serve`` on ``database_url`` with ports chosen by the system; ``program``: the
    ``ces-eval`` to run (default: this interpreter's ``-m ces_eval.cli``)."""
    return [
        *(program or (sys.executable, "-m", "ces_eval.cli")),
        "serve",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--database",
        database_url,
        *extra,
    ]


def with_timeouts(*, header: float, idle: int, body: float) -> list[str]:
    """The ``serve`` flags setting the HTTP port's timeouts, so that a test need not wait out
    the defaults."""
    return [
        "--header-timeout",
        str(header),
        "--idle-timeout",
        str(idle),
        "--body-timeout",
        str(body),
    ]


def run_serve(database_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``ces-eval serve`` run to its end, for servers that must refuse to start: its exit
    status and output."""
    return subprocess.run(
        serve_command(database_url, *extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def start_server(
    database: Path,
    *extra: str,
    timeout: float = 60,
    database_url: str | None = None,
    export_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    program: Sequence[str] = (),
    cwd: Path | None = None,
    echo: Callable[[str], object] | None = None,
    own_session: bool = False,
) -> RunningServer:
    """Start ``ces-eval serve`` on the SQLite file ``database``, or on ``database_url`` (then
    ``database`` only names the folder for exports); exports go to ``export_dir`` (default
    ``<database folder>/exports``). ``env``: variables added to the server's environment,
    ``base_env`` (default this process's); ``program`` and ``cwd``: which ``ces-eval`` runs
    where (:func:`serve_command`).

    ``echo``: called with each line the server prints, as it prints it; the server's
    :meth:`~RunningServer.output` then keeps only the lines up to its ready line, so that a
    long-running server's request log does not pile up here. ``own_session``: the server runs
    in a session of its own, so that a terminal's Ctrl-C, which reaches every process of the
    foreground group, leaves it to this process to stop it (``ces-eval exec`` does, once its
    command is done). A server that does not start raises :class:`ServerStartError`."""
    exports = export_dir or database.parent / "exports"
    pipe = _lifeline()
    command = serve_command(
        database_url or f"sqlite:///{database}",
        "--export-dir",
        str(exports),
        *(["--lifeline", str(pipe[0])] if pipe else []),
        *extra,
        program=program,
    )
    environ = {**(os.environ if base_env is None else base_env), "PYTHONUNBUFFERED": "1"}
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**environ, **(env or {})},
            cwd=cwd,
            pass_fds=pipe[:1] if pipe else (),
            start_new_session=own_session,
        )
    except BaseException:
        _close_lifeline(pipe[1] if pipe else None)
        raise
    finally:
        _close_lifeline(pipe[0] if pipe else None)  # the server's copy is its own
    lifeline = pipe[1] if pipe else None
    log: list[str] = []
    ready = threading.Event()
    found: list[str] = []
    reader = threading.Thread(
        target=_drain, args=(process.stdout, log, ready, found, echo), daemon=True
    )
    reader.start()
    if not ready.wait(timeout) or not found:
        process.kill()
        process.wait(timeout=30)
        reader.join(timeout=30)
        if process.stdout is not None:  # closed here, or the next test's GC warns about it
            process.stdout.close()
        _close_lifeline(lifeline)
        status = process.returncode if process.returncode >= 0 else None  # < 0: killed here
        raise ServerStartError("ces-eval serve did not start:\n", "".join(log), status)
    grpc_host, grpc_port, http_host, http_port = found
    server = RunningServer(
        process,
        database,
        f"{grpc_host}:{grpc_port}",
        f"http://{http_host}:{http_port}",
        log,
        reader,
        exports,
        lifeline,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            health = server.http_base + "/healthz"  # http://, from the server's own line
            with urllib.request.urlopen(health, timeout=5) as response:  # noqa: S310
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.05)
    server.kill()
    raise ServerStartError("ces-eval serve never became healthy:\n", server.output(), None)
