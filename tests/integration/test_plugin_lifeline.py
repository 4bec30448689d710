"""The pytest plugin's server dies with its pytest process, however that ends.

A user's pytest run is a real ``python -m pytest`` process here, with the plugin as it is
installed (the ``pytest11`` entry point) and a test holding ``ces_eval_server``; once that test
runs, the pytest process is ended by a signal and the server it started must exit by itself.
Before: on SIGTERM, SIGHUP and SIGKILL pytest's teardown never ran and the server went on
answering (54 s later, in the attack; here past the 30 s the test waits). Now the server holds
the read end of a pipe whose write end only the pytest process has (``serve --lifeline``): the
kernel closes that end however the process dies, and the server stops on end-of-file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

WAIT = 30.0  # seconds: a bound on waiting, not a latency assertion
_HOLDING_TEST = """\
import os, pathlib, time

def test_holds_the_server(ces_eval_server):
    pathlib.Path(os.environ["LIFELINE_REPORT"]).write_text(ces_eval_server.http_url)
    time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _answers(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{http_url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _gone_after(pid: int) -> float | None:
    """Seconds until ``pid`` exited, or None if it still ran after :data:`WAIT`."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT:
        if not _running(pid):
            return time.monotonic() - started
        time.sleep(0.05)
    return None


@dataclass
class Harness:
    """A process that started servers (a pytest run, a script), what it reported once they
    served (``report``'s text) and the processes it had started by then."""

    process: subprocess.Popen[bytes]
    report: str
    started: list[int]

    def gone(self, pid: int, after: str) -> None:
        """``pid`` exits within :data:`WAIT` (the figure is printed), and the server no longer
        answers at the reported URL."""
        waited = _gone_after(pid)
        assert waited is not None, f"process {pid} still ran {WAIT:g} s after {after}"
        print(f"process {pid} gone {waited:.2f} s after {after}")
        assert not _answers(self.report.split()[-1])


@contextlib.contextmanager
def _harness(command: list[str], folder: Path, **env: str) -> Iterator[Harness]:
    """``command`` run in ``folder`` until it wrote ``folder/report`` (``LIFELINE_REPORT``);
    afterwards it and whatever it had started are killed, if they still run."""
    report = folder / "report"
    process = subprocess.Popen(
        command,
        cwd=folder,
        env={**os.environ, "LIFELINE_REPORT": str(report), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not report.exists() and time.monotonic() < deadline:
            assert process.poll() is None, "it ended before its servers served"
            time.sleep(0.1)
        started = _descendants(process.pid)
        yield Harness(process, report.read_text(), started)
    finally:
        process.kill()
        process.wait(timeout=WAIT)
        for pid in started:  # only ever what this test's harness started
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _user_suite(folder: Path, *options: str) -> list[str]:
    (folder / "test_user_suite.py").write_text(_HOLDING_TEST)
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options,
            "test_user_suite.py"]  # fmt: skip


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGINT])
def test_the_plugins_server_dies_with_its_pytest_process(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with _harness(_user_suite(tmp_path), tmp_path) as pytest_run:
        [server] = _children(pytest_run.process.pid)
        assert _answers(pytest_run.report)
        pytest_run.process.send_signal(signum)
        pytest_run.process.wait(timeout=WAIT)
        pytest_run.gone(server, f"pytest got {signum.name}")


@pytest.mark.external  # pytest-xdist and execnet, installed from the package index
def test_an_xdist_workers_server_dies_with_that_worker(tmp_path: Path) -> None:
    """pytest -n 1: the worker process that holds ``ces_eval_server`` is sent SIGTERM (no
    teardown runs); its server stops, not only the one of the main process."""
    site = tmp_path / "site"  # pytest-xdist beside this environment, its pytest shared
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
         "--no-deps", "--target", str(site), "pytest-xdist", "execnet"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    with _harness(_user_suite(tmp_path, "-n", "1"), tmp_path, PYTHONPATH=path) as pytest_run:
        main = pytest_run.process.pid
        [server] = [pid for pid in pytest_run.started if "ces_eval.cli" in _command_line(pid)]
        [worker] = [pid for pid in _children(main) if server in _children(pid)]
        assert _answers(pytest_run.report)
        os.kill(worker, signal.SIGTERM)
        pytest_run.gone(server, "its xdist worker got SIGTERM")


_HARNESS = """\
import os, pathlib, time
from ces_eval.testing.server import start_server

running = start_server(pathlib.Path("group.db").resolve(), "--workers", "2")
pathlib.Path(os.environ["LIFELINE_REPORT"]).write_text(running.http_base)
time.sleep(600)
"""


def test_a_worker_group_dies_with_the_harness_that_started_it(tmp_path: Path) -> None:
    """``start_server(..., "--workers", "2")`` in a harness killed with SIGKILL: the supervisor
    reads its lifeline's end and stops its workers as on SIGTERM."""
    with _harness([sys.executable, "-c", _HARNESS], tmp_path) as harness:
        [supervisor] = _children(harness.process.pid)
        workers = _children(supervisor)
        assert len(workers) == 2, workers
        harness.process.kill()
        harness.process.wait(timeout=WAIT)
        for pid in [supervisor, *workers]:
            harness.gone(pid, "its harness got SIGKILL")
