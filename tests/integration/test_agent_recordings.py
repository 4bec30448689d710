"""Record and replay through the real server (docs/agents.md, "Record and replay"): a run
recorded against the shared test agent (tests/support/agent.py), then replayed with the agent
stopped, gives results equal to the recorded run's, names and times aside; the recordings go
to a file under the export folder and come back from it after a project reset. On SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import (
    compared_results,
    rest_call,
    run_evaluations,
    running_agent,
    weather_golden,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PROJECT = "projects/rec-project"
APP = f"{PROJECT}/locations/us-central1/apps/recorded"
TOKEN = "Bearer rec-s3cret-5d1e"  # noqa: S105 - made up


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    """The real server on either backend (the recordings' generic table on both)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    running = start_server(tmp_path / "db.sqlite", database_url=url)
    yield running
    running.stop()


def _golden(server: RunningServer, city: str, degrees: int) -> str:
    evaluation = weather_golden(APP, city, degrees, greeting=True)
    body = rest_call(
        server, "POST", f"/v1beta/{APP}/evaluations?evaluationId={city.lower()}", evaluation
    )
    return str(body["name"])


def test_a_recorded_run_replays_equal_with_the_agent_stopped(server: RunningServer) -> None:
    emulator = Emulator(server.http_base)
    evaluations = [_golden(server, "Paris", 21), _golden(server, "Berlin", 15)]
    with running_agent() as agent:
        emulator.set_agent(
            APP,
            agent.url + "/agent",
            headers={"Authorization": TOKEN},
            judge_uri=agent.url + "/judge",
            recording_mode="RECORD",
        )
        run, recorded = run_evaluations(server, APP, evaluations, runCount=2)
        called = len(agent.requests)
    assert (run["progress"]["passedCount"], run["progress"]["failedCount"]) == (2, 2)
    stored = emulator.agent_recordings(APP)
    assert len(stored) == called
    assert {r["callee"] for r in stored} == {"AGENT", "JUDGE"}
    assert all(r["evaluationRun"] == run["name"] for r in stored)
    # The agent is stopped: the replay calls nothing and its results equal the recorded ones.
    emulator.set_agent(
        APP, agent.url + "/agent", judge_uri=agent.url + "/judge", recording_mode="REPLAY"
    )
    _, replayed = run_evaluations(server, APP, evaluations, runCount=2)
    assert compared_results(replayed) == compared_results(recorded)
    # To a file under the export folder, and back after a reset.
    uri = emulator.export_agent_recordings(APP, gcs_uri="gs://bucket/recordings")
    assert isinstance(uri, str) and uri.startswith("gs://bucket/recordings/agent-recordings-")
    written = server.export_dir / uri.removeprefix("gs://")
    assert len(written.read_bytes().splitlines()) == len(stored)
    assert TOKEN.split()[1].encode() not in written.read_bytes()
    reset = emulator.reset_project(PROJECT)
    assert reset["deletedResources"]["agentRecordings"] == str(len(stored))
    assert emulator.agent_recordings(APP) == []
    evaluations = [_golden(server, "Paris", 21), _golden(server, "Berlin", 15)]
    assert emulator.import_agent_recordings(APP, uri) == len(stored)
    nowhere = "http://127.0.0.1:9"  # nothing listens there: a replay calls nothing
    emulator.set_agent(
        APP, nowhere + "/agent", judge_uri=nowhere + "/judge", recording_mode="REPLAY"
    )
    _, again = run_evaluations(server, APP, evaluations, runCount=2)
    assert compared_results(again) == compared_results(recorded)
    assert TOKEN.split()[1] not in server.output()
