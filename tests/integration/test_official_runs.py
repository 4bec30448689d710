"""Google's official Python client drives evaluation runs (tests/official/runs_scenario.py, once
per transport) against the real server: runs and their results seeded through the emulator, then
got, listed, exported and deleted through the official client."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import contract
from tests.support.server import RunningServer

pytestmark = pytest.mark.external

APP = "projects/runs-project/locations/us-central1/apps/runs"
RUNS = APP + "/evaluationRuns/"


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_evaluation_runs_through_the_official_client(server: RunningServer, transport: str) -> None:
    arguments = (
        [server.grpc_target, str(contract.DESCRIPTOR_SET)]
        if transport == "grpc"
        else [server.http_base]
    )
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / "runs_scenario.py"),
            transport,
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr + server.output()
    steps = {s.pop("step"): s for s in map(json.loads, completed.stdout.splitlines())}
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
