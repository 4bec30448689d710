"""Google's official Python client lists and gets locations (the Locations mixin) over gRPC
and REST (tests/official/locations_scenario.py), on a server configured with ``CES_EVAL_LOCATIONS``
(``--locations``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support.official import run_official

pytestmark = pytest.mark.external


@pytest.fixture(scope="module")
def located(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    database = Path(tmp_path_factory.mktemp("locations")) / "ces-eval.db"
    running = start_server(database, env={"CES_EVAL_LOCATIONS": "us-central1,europe-west1"})
    try:
        yield running
    finally:
        running.kill()


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_locations_through_the_official_client(located: RunningServer, transport: str) -> None:
    steps = run_official("locations_scenario.py", [located], transport)
    assert steps["list"]["locations"] == ["asia-east1", "europe-west1", "us-central1"]
    assert steps["unknown"]["reason"] == "RESOURCE_NOT_FOUND"
