"""Starting the real server wrong: taken ports, bad values, broken files (issue 14).

A start-up mistake is one line on stderr naming the problem and the flag, with a documented
exit status (2 configuration, 3 a port, 1 the database) and no traceback, unless
``--log-level debug`` asks for it. A taken port is refused, never shared: only the workers of
one ``serve --workers`` supervisor share their ports.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, run_serve, serve_command, start_server
from tests.support.load import golden_evaluation
from tests.unit.test_sqlite_files import immutable

APP = "projects/p/locations/l/apps/a"
CONNECTIONS = 20


def _one_line(completed: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    assert lines[0].startswith("ces-eval")
    return lines[0]


def _port(target: str) -> str:
    return target.rsplit(":", 1)[1]


def _only_the_first_answers(first: RunningServer, name: str) -> None:
    """Each of many new connections to the first server's ports reaches that server: the
    evaluation it holds is found every time (a second listener sharing the port would answer
    some of them NOT_FOUND)."""
    for _ in range(CONNECTIONS):
        with grpc.insecure_channel(first.grpc_target) as channel:
            stub = service_grpc.EvaluationServiceStub(channel)
            stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name), timeout=10)
        with httpx.Client(base_url=first.http_base, timeout=10) as http:
            assert http.get(f"/v1beta/{name}").status_code == 200


def _create(first: RunningServer) -> str:
    with grpc.insecure_channel(first.grpc_target) as channel:
        created = service_grpc.EvaluationServiceStub(channel).CreateEvaluation(
            service_pb2.CreateEvaluationRequest(
                parent=APP, evaluation_id="first", evaluation=golden_evaluation("first")
            ),
            timeout=10,
        )
    return str(created.name)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize(("flag", "which"), [("--grpc-port", "grpc"), ("--http-port", "http")])
def test_a_port_in_use_is_refused_not_shared(
    server: RunningServer, tmp_path: Path, flag: str, which: str, workers: str
) -> None:
    name = _create(server)
    port = _port(server.grpc_target if which == "grpc" else server.http_base)
    second = tmp_path / "second.db"
    completed = run_serve(f"sqlite:///{second}", flag, port, "--workers", workers)
    line = _one_line(completed)
    assert completed.returncode == 3
    assert f"{flag}: cannot serve " in line
    assert f":{port}: the port is in use" in line
    assert not second.exists()  # refused before the database was touched
    _only_the_first_answers(server, name)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("flag", ["--grpc-port", "--http-port"])
def test_a_worker_groups_ports_are_its_own(tmp_path: Path, flag: str, workers: str) -> None:
    group = start_server(tmp_path / "group.db", "--workers", "2")
    try:
        name = _create(group)
        port = _port(group.grpc_target if flag == "--grpc-port" else group.http_base)
        completed = run_serve(
            f"sqlite:///{tmp_path / 'other.db'}", flag, port, "--workers", workers
        )
        assert completed.returncode == 3, completed.stderr
        assert f"{flag}: cannot serve " in _one_line(completed)
        _only_the_first_answers(group, name)
    finally:
        assert group.stop() == 0


def _token_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("case", "status", "expected"),
    [
        ("bare database path", 2, "argument --database: './data/x.db' is not a database URL"),
        ("unsupported database", 2, "argument --database: 'mysql://h/x' is not a database URL"),
        ("token file missing", 2, "--auth-tokens: "),
        ("token file not YAML", 2, "--auth-tokens: "),
        ("token file empty list", 2, "tokens must be a non-empty list"),
        ("unresolvable host", 2, "--host: cannot resolve 'no-such-host.invalid'"),
        ("database folder is a file", 1, "--database: cannot open sqlite:///"),
        ("unknown MCP tool", 2, "argument --mcp-tools: 'get_evalution': expected all, read,"),
        ("lifeline not open", 2, "--lifeline: cannot watch file descriptor 999: Bad file"),
    ],
)
def test_a_start_up_mistake_is_one_line(
    tmp_path: Path, case: str, status: int, expected: str
) -> None:
    database = f"sqlite:///{tmp_path / 'x.db'}"
    extra: list[str] = []
    if case == "bare database path":
        extra = ["--database", "./data/x.db"]
    elif case == "unsupported database":
        extra = ["--database", "mysql://h/x"]
    elif case == "token file missing":
        extra = ["--auth-tokens", str(tmp_path / "missing.yaml")]
    elif case == "token file not YAML":
        extra = ["--auth-tokens", str(_token_file(tmp_path, "tokens: [\n  {name: a\n"))]
    elif case == "token file empty list":
        extra = ["--auth-tokens", str(_token_file(tmp_path, "tokens: []\n"))]
    elif case == "unresolvable host":
        extra = ["--host", "no-such-host.invalid", "--allow-unauthenticated"]
    elif case == "lifeline not open":
        extra = ["--lifeline", "999"]
    elif case == "unknown MCP tool":
        extra = ["--mcp-tools", "read,get_evalution"]
    elif case == "database folder is a file":
        (tmp_path / "file").write_text("")
        database = f"sqlite:///{tmp_path / 'file' / 'x.db'}"
    completed = run_serve(database, *extra)
    assert completed.returncode == status, completed.stderr
    assert expected in _one_line(completed)


def test_debug_logging_shows_the_traceback_of_a_start_up_mistake(tmp_path: Path) -> None:
    tokens = _token_file(tmp_path, "tokens: []\n")
    args = ("--auth-tokens", str(tokens))
    quiet = run_serve(f"sqlite:///{tmp_path / 'x.db'}", *args)
    debug = run_serve(f"sqlite:///{tmp_path / 'x.db'}", *args, "--log-level", "debug")
    assert quiet.returncode == debug.returncode == 2
    assert "Traceback" not in quiet.stderr
    assert "Traceback (most recent call last)" in debug.stderr
    assert "TokenFileError" in debug.stderr
    assert "ces-eval: --auth-tokens: " in debug.stderr


def test_variables_configure_the_real_server(tmp_path: Path) -> None:
    """``CES_EVAL_*`` reach ``serve``: a bad one is refused like its flag, a good one is used,
    and a flag beats it."""
    environ = {**os.environ, "CES_EVAL_DATABASE": str(tmp_path / "x.db")}
    completed = subprocess.run(
        serve_command("sqlite:///unused.db")[:-2],  # no --database flag: the variable counts
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environ,
    )
    assert completed.returncode == 2
    assert "CES_EVAL_DATABASE: " in _one_line(completed)
    assert f"for a SQLite file write sqlite:///{tmp_path / 'x.db'}" in completed.stderr
    # A flag beats the variable: the same bad variable, with --database given, starts; the
    # other variable (no flag) is used.
    running = start_server(
        tmp_path / "y.db",
        env={"CES_EVAL_DATABASE": "not-a-url", "CES_EVAL_LOG_FORMAT": "json"},
    )
    try:
        with httpx.Client(base_url=running.http_base, timeout=10) as http:
            assert http.get(f"/v1beta/{APP}/evaluations").status_code == 200
    finally:
        assert running.stop() == 0
    assert '"logger": "ces_eval.access"' in running.output()


def _open_files(pid: int) -> set[Path]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(Path(os.readlink(fd)))
        except OSError:  # closed meanwhile
            continue
    return found


def test_a_memory_database_serves_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """``sqlite:///:memory:`` (README: throw-away test runs): what one call writes the next
    reads, on both surfaces, and nothing of it is left once the server stopped."""
    running = start_server(tmp_path / "unused.db", database_url="sqlite:///:memory:")
    try:
        name = _create(running)
        with httpx.Client(base_url=running.http_base, timeout=10) as http:
            assert http.get(f"/v1beta/{name}").status_code == 200
            listed = http.get(f"/v1beta/{APP}/evaluations").json()["evaluations"]
        assert [e["name"] for e in listed] == [name]
        with grpc.insecure_channel(running.grpc_target) as channel:
            stub = service_grpc.EvaluationServiceStub(channel)
            got = stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name), timeout=10)
        assert got.name == name
        held = {
            path.parent
            for path in _open_files(running.process.pid)
            if path.parent.name.startswith("ces-eval-memory-")
        }
        assert len(held) == 1  # the stand-in file, in a private folder
    finally:
        assert running.stop() == 0
    assert not (tmp_path / "unused.db").exists()
    assert not any(folder.exists() for folder in held)


def _mapped(pid: int, library: str) -> bool:
    """Whether the process ``pid`` has a shared object of ``library`` loaded."""
    return f"/{library}/" in Path(f"/proc/{pid}/maps").read_text()


# ``ces-eval`` where neither uvloop nor httptools can be imported.
_WITHOUT_SPEEDUPS = [
    sys.executable,
    "-c",
    "import runpy, sys\n"
    "sys.modules['uvloop'] = sys.modules['httptools'] = None\n"
    "runpy.run_module('ces_eval.cli', run_name='__main__', alter_sys=True)\n",
]
_FALLBACK = "install uvicorn's standard extras"


@pytest.mark.parametrize("loop", ["auto", "asyncio"])
def test_the_server_runs_on_uvloop_and_httptools_where_installed(tmp_path: Path, loop: str) -> None:
    """The defaults users get from pip: uvloop's event loop (unless ``--loop asyncio``) and
    httptools' parser, with no fallback said."""
    running = start_server(tmp_path / "db.sqlite", "--loop", loop)
    try:
        name = _create(running)
        with httpx.Client(base_url=running.http_base, timeout=10) as http:
            assert http.get(f"/v1beta/{name}").status_code == 200
        assert _mapped(running.process.pid, "uvloop") == (loop == "auto")
        assert _mapped(running.process.pid, "httptools")
        assert _FALLBACK not in running.output()
    finally:
        assert running.stop() == 0


def test_without_uvloop_and_httptools_the_server_says_so_and_serves(tmp_path: Path) -> None:
    running = start_server(tmp_path / "db.sqlite", program=_WITHOUT_SPEEDUPS)
    try:
        name = _create(running)
        with httpx.Client(base_url=running.http_base, timeout=10) as http:
            assert http.get(f"/v1beta/{name}").status_code == 200
        said = [line for line in running.output().splitlines() if _FALLBACK in line]
        assert len(said) == 2, said
        assert "uvloop is not installed" in said[0]
        assert "httptools is not installed" in said[1]
        assert not _mapped(running.process.pid, "uvloop")
        assert not _mapped(running.process.pid, "httptools")
    finally:
        assert running.stop() == 0


def test_an_export_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """Before: the server started and the first export answered 500. Now it is refused at
    start, as a configuration mistake: here a folder under a regular file (the tests run as
    root, whom file modes do not stop)."""
    (tmp_path / "file").write_text("")
    exports = tmp_path / "file" / "exports"
    completed = run_serve(f"sqlite:///{tmp_path / 'x.db'}", "--export-dir", str(exports))
    assert completed.returncode == 2, completed.stderr
    line = _one_line(completed)
    assert line.startswith(f"ces-eval: --export-dir: cannot write to {exports}: "), line
    assert not (tmp_path / "x.db").exists()  # refused before the database was touched


@pytest.mark.external  # chattr (e2fsprogs)
def test_an_immutable_export_folder_is_one_line(tmp_path: Path) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    with immutable(exports):
        completed = run_serve(f"sqlite:///{tmp_path / 'x.db'}", "--export-dir", str(exports))
    assert completed.returncode == 2, completed.stderr
    assert _one_line(completed) == (
        f"ces-eval: --export-dir: cannot write to {exports}: Operation not permitted"
    )


@dataclass
class Unreachable:
    """Where :func:`unreachable_postgresql` listens, and the connections it took."""

    port: int
    accepted: list[socket.socket] = field(default_factory=list)


@contextlib.contextmanager
def unreachable_postgresql(kind: str) -> Iterator[Unreachable]:
    """A port where no PostgreSQL answers: ``refused`` (nothing listens) or ``stalled`` (a
    listener that accepts connections and never says a word, as a hung server or a
    firewall's black hole would)."""
    listener = socket.create_server(("127.0.0.1", 0))
    unreachable = Unreachable(int(listener.getsockname()[1]))
    accepted = unreachable.accepted
    if kind == "refused":
        listener.close()
        yield unreachable
        return
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield unreachable
    finally:
        stop.set()
        thread.join(timeout=10)
        for sock in [listener, *accepted]:
            sock.close()


@pytest.mark.parametrize("kind", ["refused", "stalled"])
def test_an_unreachable_postgresql_is_one_line_without_the_password(kind: str) -> None:
    """Before: 30 s of the driver's warnings, then a line that echoed the URL's password. Now
    one connection is tried first, for at most the URL's ``connect_timeout`` or 5 s, and its
    failure is one line with the password masked (exit status 1: the database)."""
    with unreachable_postgresql(kind) as unreachable:
        port = unreachable.port
        url = f"postgresql://ces:s3cret-pw@127.0.0.1:{port}/ces"
        completed = run_serve(url)
    assert completed.returncode == 1, completed.stderr
    line = _one_line(completed)
    assert "s3cret-pw" not in completed.stderr
    assert line.startswith(
        f"ces-eval: --database: cannot open postgresql://ces:***@127.0.0.1:{port}/ces: "
        "cannot connect to PostgreSQL: "
    ), line
