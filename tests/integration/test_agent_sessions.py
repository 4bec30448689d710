"""A run playing several sessions at once against a slow agent (docs/agents.md,
"Concurrency"), its server stopped mid-run: with SIGTERM the sessions in flight stop at once
and the run ends ERROR; with SIGKILL (of the server, or of a ``--workers`` group, every
process at once) the next start ends it ERROR, or on PostgreSQL another replica once the
lease ran out, every replica showing the run's progress meanwhile. Either way no run stays
RUNNING and no repetition is stored twice."""

from __future__ import annotations

import signal
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

import pytest

from ces_eval.testing import Emulator
from ces_eval.testing.server import start_server
from tests.support.agent import rest_call, running_agent
from tests.support.processes import kill_group

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ces_eval.testing.server import RunningServer
    from tests.support.agent import Agent

APP = "projects/sessions/locations/us-central1/apps/slow"
STOP_BOUND = 10.0  # seconds for a SIGTERM to end a server whose agent would take 60


@pytest.fixture
def agent() -> Iterator[Agent]:
    """An agent of the test's own: the calls a killed server left waiting are its alone."""
    with running_agent() as running:
        yield running


def _golden(server: RunningServer, display_name: str, text: str) -> str:
    body = {
        "displayName": display_name,
        "golden": {"turns": [{"steps": [{"userInput": {"text": text}}]}]},
    }
    return str(rest_call(server, "POST", f"/v1beta/{APP}/evaluations", body)["name"])


def _until(check: Any) -> None:
    for _ in range(1000):
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("never got there")


def _started(server: RunningServer, agent: Agent) -> str:
    """A run of 2 quick goldens and 6 that wait, 4 sessions at once, once 4 wait and a
    result is stored: its name."""
    set_to = Emulator(server.http_base).set_agent(
        APP, agent.url + "/agent", max_concurrent_sessions=4
    )
    assert set_to["maxConcurrentSessions"] == 4
    names = [_golden(server, f"Quick {index}", "Hello there") for index in range(2)]
    names += [_golden(server, f"Waiting {index}", "Please wait") for index in range(6)]
    operation = rest_call(server, "POST", f"/v1beta/{APP}:runEvaluation", {"evaluations": names})
    run = operation["metadata"]["evaluationRun"]
    _until(lambda: agent.at_once == 4)
    _until(lambda: rest_call(server, "GET", f"/v1beta/{run}")["progress"].get("completedCount"))
    return str(run)


def _ended(server: RunningServer, run: str, message: str) -> None:
    """``run`` ended ERROR saying ``message``, each of its results stored once."""
    found = rest_call(server, "GET", f"/v1beta/{run}")
    assert found["state"] == "ERROR", found
    assert message in found["errorInfo"]["errorMessage"]
    query = urllib.parse.urlencode({"pageSize": 100, "filter": f'evaluation_run = "{run}"'})
    listed = rest_call(server, "GET", f"/v1beta/{APP}/evaluations/-/results?{query}").get(
        "evaluationResults", []
    )
    names = [result["name"] for result in listed]
    assert len(set(names)) == len(names) == len(found.get("evaluationResults", []))
    evaluations = [name.rsplit("/results/", 1)[0] for name in names]
    assert len(set(evaluations)) == len(evaluations)  # one repetition each: none twice
    assert int(found["progress"].get("completedCount", 0)) == len(names) <= 2


@pytest.mark.parametrize(
    ("stop", "workers"),
    [(signal.SIGTERM, 1), (signal.SIGKILL, 1), (signal.SIGKILL, 2)],
    ids=["SIGTERM", "SIGKILL", "SIGKILL-workers"],
)
def test_a_server_stopped_mid_run_leaves_no_run_running_and_no_result_twice(
    tmp_path: Path, agent: Agent, stop: signal.Signals, workers: int
) -> None:
    agent.slow = 60
    database = tmp_path / "db.sqlite"
    group = ("--workers", str(workers)) if workers > 1 else ()
    first = start_server(database, *group)
    try:
        run = _started(first, agent)
        if stop == signal.SIGTERM:
            started = time.monotonic()
            first.stop(signal.SIGTERM, timeout=60)
            assert time.monotonic() - started < STOP_BOUND
        else:
            kill_group(first)  # SIGKILL: nothing of any process records anything
    finally:
        kill_group(first)
    second = start_server(database, *group)
    try:
        _ended(second, run, "shut down" if stop == signal.SIGTERM else "stopped")
    finally:
        second.stop()


def test_a_replica_killed_mid_run_leaves_its_run_to_another(
    tmp_path: Path, postgres_url: str, agent: Agent
) -> None:
    """PostgreSQL replicas: the survivor ends the killed replica's run once its lease ran
    out, each stored result once."""
    agent.slow = 60

    def replica(label: str) -> RunningServer:
        return start_server(
            tmp_path / label / "unused.db", "--operation-lease", "1", database_url=postgres_url
        )

    doomed, survivor = replica("a"), replica("b")
    try:
        run = _started(doomed, agent)

        # The survivor, which does not play the run, shows its progress as the player stores
        # it: both quick results (the 6 others wait for the agent).
        def progress(server: RunningServer) -> dict[str, Any]:
            found = rest_call(server, "GET", f"/v1beta/{run}")
            assert found["state"] == "RUNNING"
            return dict(found["progress"])

        _until(lambda: progress(survivor).get("completedCount") == 2)
        assert progress(survivor) == progress(doomed)
        assert progress(survivor)["totalCount"] == 8
        doomed.kill()  # SIGKILL
        _until(lambda: rest_call(survivor, "GET", f"/v1beta/{run}")["state"] != "RUNNING")
        _ended(survivor, run, "stopped")
    finally:
        doomed.kill()
        survivor.kill()
