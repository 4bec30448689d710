"""Google's official Python client runs evaluations end to end against the real server
(tests/official/engine_scenario.py, once per transport): RunEvaluation, the operation, the run
and its results, scripted FAIL and ERROR outcomes, holds, cancellation, a dataset run with its
latency report, a schedule fired by a clock move, and the request checks."""

from __future__ import annotations

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external


def run_engine_scenario(servers: list[RunningServer], transport: str) -> None:
    """Run the scenario, its calls alternating between ``servers`` (replicas) when several,
    and check what it reports."""
    steps = run_official("engine_scenario.py", servers, transport)
    assert set(steps) == {
        "run",
        "scripted",
        "held",
        "cancelled",
        "dataset",
        "scheduled",
        "refused",
    }
    assert steps["scheduled"]["executions"] == 1
    assert steps["run"]["results"] == steps["run"]["total"] == 7
    assert steps["scripted"] == {"failed": 2, "errors": 2}
    assert steps["cancelled"]["exception"] == "Cancelled"  # code CANCELLED
    assert steps["refused"] == {
        "both": ["evaluation_dataset"],
        "missing": "RESOURCE_NOT_FOUND",
        "zero": ["run_count"],
        "persona": "RESOURCE_NOT_FOUND",
    }


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_the_run_workflow_through_the_official_client(
    server: RunningServer, transport: str
) -> None:
    run_engine_scenario([server], transport)
