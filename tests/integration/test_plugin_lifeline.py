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

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGINT])
def test_the_plugins_server_dies_with_its_pytest_process(
    tmp_path: Path, signum: signal.Signals
) -> None:
    (tmp_path / "test_user_suite.py").write_text(_HOLDING_TEST)
    report = tmp_path / "report"
    pytest_process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user_suite.py"],
        cwd=tmp_path,
        env={**os.environ, "LIFELINE_REPORT": str(report)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not report.exists() and time.monotonic() < deadline:
            assert pytest_process.poll() is None, "pytest ended before its test ran"
            time.sleep(0.1)
        http_url = report.read_text()
        servers = _children(pytest_process.pid)
        assert len(servers) == 1, servers
        assert _answers(http_url)
        pytest_process.send_signal(signum)
        pytest_process.wait(timeout=WAIT)
        gone = _gone_after(servers[0])
        assert gone is not None, f"the server still ran {WAIT:g} s after pytest got {signum.name}"
        print(f"server gone {gone:.2f} s after pytest got {signum.name}")
        assert not _answers(http_url)
    finally:
        if pytest_process.poll() is None:
            pytest_process.kill()
            pytest_process.wait(timeout=WAIT)
        for pid in servers:  # only ever the server this test's pytest started
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


def _path(site: Path) -> str:
    """PYTHONPATH with ``site`` first."""
    return os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])


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
    (tmp_path / "test_user_suite.py").write_text(_HOLDING_TEST)
    report = tmp_path / "report"
    main = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider",
         "test_user_suite.py"],
        cwd=tmp_path,
        env={**os.environ, "LIFELINE_REPORT": str(report), "PYTHONPATH": _path(site)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not report.exists() and time.monotonic() < deadline:
            assert main.poll() is None, "pytest ended before its test ran"
            time.sleep(0.1)
        http_url = report.read_text()
        started = _descendants(main.pid)
        [server] = [pid for pid in started if "ces_eval.cli" in _command_line(pid)]
        [worker] = [pid for pid in _children(main.pid) if server in _children(pid)]
        assert _answers(http_url)
        os.kill(worker, signal.SIGTERM)
        gone = _gone_after(server)
        assert gone is not None, f"the server still ran {WAIT:g} s after its worker's SIGTERM"
        print(f"server gone {gone:.2f} s after its xdist worker got SIGTERM")
        assert not _answers(http_url)
    finally:
        main.kill()
        main.wait(timeout=WAIT)
        for pid in started:  # only ever what this test's pytest started
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


_HARNESS = """\
import pathlib, sys, time
from ces_eval.testing.server import start_server

folder = pathlib.Path(sys.argv[1])
running = start_server(folder / "group.db", "--workers", "2")
(folder / "report").write_text(f"{running.process.pid} {running.http_base}")
time.sleep(600)
"""


def test_a_worker_group_dies_with_the_harness_that_started_it(tmp_path: Path) -> None:
    """``start_server(..., "--workers", "2")`` in a harness killed with SIGKILL: the supervisor
    reads its lifeline's end and stops its workers as on SIGTERM."""
    harness = subprocess.Popen([sys.executable, "-c", _HARNESS, str(tmp_path)])
    report = tmp_path / "report"
    processes: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not report.exists() and time.monotonic() < deadline:
            assert harness.poll() is None, "the harness ended before its server was ready"
            time.sleep(0.1)
        supervisor, http_url = report.read_text().split()
        workers = _children(int(supervisor))
        processes = [int(supervisor), *workers]
        assert len(workers) == 2, workers
        harness.kill()
        harness.wait(timeout=WAIT)
        for pid in processes:
            gone = _gone_after(pid)
            assert gone is not None, f"process {pid} of the group still ran after {WAIT:g} s"
        assert not _answers(http_url)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(timeout=WAIT)
        for pid in processes:  # only ever the group this test's harness started
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
