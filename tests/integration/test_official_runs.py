"""Google's official Python client drives evaluation runs (tests/official/runs_scenario.py, once
per transport) against the real server: runs and their results seeded through the emulator, then
got, listed, exported and deleted through the official client. test_replicas.py runs the same
scenario alternating between two replicas."""

from __future__ import annotations

from typing import Any

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external

APP = "projects/runs-project/locations/us-central1/apps/runs"
RUNS = APP + "/evaluationRuns/"


def run_runs_scenario(servers: list[RunningServer], transport: str) -> dict[str, dict[str, Any]]:
    """The scenario's steps by name; with several servers (replicas), calls alternate."""
    return run_official("runs_scenario.py", servers, transport)


def check_runs_steps(steps: dict[str, dict[str, Any]], server: RunningServer) -> None:
    """What the official client must have seen (``server``: one whose export folder the file
    export went to)."""
    assert steps["get"]["reason"] == "RESOURCE_NOT_FOUND"
    assert steps["get"]["state"] == "COMPLETED"
    assert steps["list"]["pages"] == 2
    assert steps["list"]["violations"] == ["filter"]
    export = steps["export"]
    assert export["runs"] == [RUNS + "nightly", RUNS + "manual"]
    assert export["metadata"] == "ExportEvaluationRunsOperationMetadata"
    assert isinstance(export["uri"], str) and export["uri"].startswith("gs://runs/exports/")
    assert (server.export_dir / export["uri"].removeprefix("gs://")).is_file()
    delete = steps["delete"]
    assert delete["metadata"] == "DeleteEvaluationRunOperationMetadata"
    assert delete["remaining"] == ["r3"]
    assert delete["evaluation_runs"] == {"one": [RUNS + "manual"], "two": []}
    assert delete["gone"]["reason"] == delete["again"]["reason"] == "RESOURCE_NOT_FOUND"


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_evaluation_runs_through_the_official_client(server: RunningServer, transport: str) -> None:
    check_runs_steps(run_runs_scenario([server], transport), server)
