"""Google's official Python client drives the standard methods of every resource the generic
methods serve (tests/official/resource_scenario.py, one run per kind and transport) against the
real server."""

from __future__ import annotations

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external

KINDS = ("expectation", "scheduled_run", "dataset")
STEPS = {"create", "create_assigned_id", "create_taken_id", "get", "list", "update", "delete"}


@pytest.mark.parametrize("transport", ["grpc", "rest"])
@pytest.mark.parametrize("kind", KINDS)
def test_standard_methods_through_the_official_client(
    server: RunningServer, kind: str, transport: str
) -> None:
    steps = run_official("resource_scenario.py", [server], transport, kind)
    assert set(steps) >= STEPS
    assert steps["create_taken_id"]["reason"] == "RESOURCE_ALREADY_EXISTS"
    assert steps["get"]["domain"] == "ces.googleapis.com"
    assert steps["list"]["violations"] == ["filter"]
    assert steps["update"]["unknown"]["violations"] == ["update_mask"]
    if kind == "scheduled_run":
        # Weekly on Mondays and Thursdays from Monday 2100-03-01 09:30 UTC: the start itself.
        assert steps["create"]["next"] == "2100-03-01T09:30:00+00:00", steps["create"]
        assert steps["create"]["total_executions"] == 0
    if kind == "dataset":  # its references, through the client (resource_scenario.py)
        references = steps["references"]
        assert references["bad"]["violations"] == ["evaluation_dataset.evaluations[1]"]
        assert references["in_use"]["reason"] == "EVALUATION_IN_USE"
