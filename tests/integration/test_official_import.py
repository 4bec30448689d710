"""Google's official Python client imports evaluations from the real server's export folder and
from a batch upload CSV, over gRPC and REST (tests/official/import_scenario.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from ces_eval.testing.server import RunningServer
from tests.support import contract

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_import_through_the_official_client(server: RunningServer, transport: str) -> None:
    target = server.grpc_target if transport == "grpc" else server.http_base
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / "import_scenario.py"),
            transport,
            target,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr + server.output()
    steps = {s.pop("step"): s for s in map(json.loads, completed.stdout.splitlines())}
    assert set(steps) == {"export", "round_trip", "strategies", "csv", "missing_object"}
    exported = steps["export"]["uri"].removeprefix("gs://")
    assert (server.export_dir / exported).is_file()  # the object the import read back
    assert steps["missing_object"]["reason"] == "RESOURCE_NOT_FOUND"
