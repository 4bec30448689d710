"""Google's official Python client imports evaluations from the real server's export folder and
from a batch upload CSV, over gRPC and REST (tests/official/import_scenario.py)."""

from __future__ import annotations

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_import_through_the_official_client(server: RunningServer, transport: str) -> None:
    steps = run_official("import_scenario.py", [server], transport)
    assert set(steps) == {"export", "round_trip", "strategies", "csv", "missing_object"}
    exported = steps["export"]["uri"].removeprefix("gs://")
    assert (server.export_dir / exported).is_file()  # the object the import read back
    assert steps["missing_object"]["reason"] == "RESOURCE_NOT_FOUND"
