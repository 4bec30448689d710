"""Google's official Python client drives the standard methods of every resource the generic
methods serve (tests/official/resource_scenario.py, one run per kind and transport) against the
real server."""

from __future__ import annotations

import ast

import pytest

from ces_eval.testing.server import RunningServer
from tests.support import contract
from tests.support.official import run_official

pytestmark = pytest.mark.external


def _scenario_kinds() -> list[str]:
    """The kinds resource_scenario.py declares (its ``KINDS``' keys), read from its source: it
    runs in the official client's environment, never imported here."""
    tree = ast.parse((contract.ROOT / "tests" / "official" / "resource_scenario.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "KINDS":
            assert isinstance(node.value, ast.Dict)
            return [ast.literal_eval(key) for key in node.value.keys if key is not None]
    raise AssertionError("resource_scenario.py declares no KINDS")


KINDS = _scenario_kinds()
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
