"""A start-up interrupted at any point stops at once, with one line.

Ctrl-C (SIGINT) or SIGTERM reaches ``ces-eval serve`` at points of its start-up made observable
from outside: while Python imports the server's modules (the first second), while it stores a
large ``--seed`` (its database file exists, the ready line is not printed yet), while it waits
for a PostgreSQL that accepted the connection and never answers, and the same for a
``--workers`` supervisor. Before: Ctrl-C printed a traceback of 28 to 59 lines (exit status
-2, at every point but one: between the migrations and the ready line it was lost, the server
came up and needed a second one), SIGTERM ended the process silently. Now each is the line
``ces-eval: start-up interrupted by SIG…; stopped``, exit status 0 as for a stop once serving,
and the database the start-up had opened serves at the next start.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ces_eval.testing.server import serve_command, start_server
from tests.integration.test_startup import unreachable_postgresql

WAIT = 30.0  # seconds: a bound on waiting, not a latency assertion
SEED_EVALUATIONS = 10_000  # storing them takes the start-up several seconds
APP = "projects/seeded/locations/us-central1/apps/orders"


def _large_seed(path: Path) -> Path:
    golden = {"turns": [{"steps": [{"userInput": {"text": "Where is my order?"}}]}]}
    path.write_text(
        json.dumps(
            {
                "format": "ces-eval.export/v1",
                "evaluations": [
                    {"name": f"{APP}/evaluations/e{n}", "displayName": f"E{n}", "golden": golden}
                    for n in range(SEED_EVALUATIONS)
                ],
            }
        )
    )
    return path


def _wait_for(condition: object, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():  # type: ignore[operator]
        assert process.poll() is None, f"the server ended before {what}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.02)


def _interrupted(process: subprocess.Popen[str], signum: signal.Signals) -> str:
    """Send ``signum`` and return what the server said; it must stop as asked, in one line."""
    sent = time.monotonic()
    process.send_signal(signum)
    try:
        _, said = process.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        _, said = process.communicate()
        pytest.fail(f"still starting {WAIT:g} s after {signum.name}:\n{said}")
    print(f"stopped {time.monotonic() - sent:.2f} s after {signum.name}")  # the figure
    lines = [line for line in said.splitlines() if line.strip()]
    assert "ces-eval serving" not in said
    assert lines == [f"ces-eval: start-up interrupted by {signum.name}; stopped"], said
    assert process.returncode == 0, said
    return said


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*args, "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _importing(pid: int) -> bool:
    """Whether ``pid`` has begun importing the server's modules (grpc's extension is mapped,
    Linux's /proc), which take it a second more."""
    try:
        return "cygrpc" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_while_importing(tmp_path: Path, signum: signal.Signals) -> None:
    process = _start(*serve_command(f"sqlite:///{tmp_path / 'x.db'}"))
    _wait_for(lambda: _importing(process.pid), process, "it imported the server's modules")
    _interrupted(process, signum)
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_while_seeding(tmp_path: Path, signum: signal.Signals) -> None:
    database = tmp_path / "x.db"
    seed = _large_seed(tmp_path / "seed.json")
    process = _start(*serve_command(f"sqlite:///{database}", "--seed", str(seed)))
    _wait_for(database.exists, process, "its database was made")
    time.sleep(0.5)  # migrated; storing the seed
    _interrupted(process, signum)
    again = start_server(database)  # what was stored is whole: the next start serves it
    assert again.stop() == 0


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_while_connecting_to_postgresql(signum: signal.Signals, workers: str) -> None:
    """A PostgreSQL that accepted the connection and says nothing: the start-up waits for it
    (up to 5 s), and a signal meanwhile stops it there, a ``--workers`` group too."""
    with unreachable_postgresql("stalled") as stalled:
        url = f"postgresql://ces:pw@127.0.0.1:{stalled.port}/ces"
        process = _start(*serve_command(url, "--workers", workers))
        _wait_for(lambda: stalled.accepted, process, "it connected to the database")
        _interrupted(process, signum)
