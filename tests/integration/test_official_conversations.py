"""Google's official Python client makes evaluations of conversations the emulator seeds:
GenerateEvaluation (golden and scenario, unknown conversation, another source, a taken display
name) and ImportEvaluations' conversation_list, over gRPC and REST against the real server
(tests/official/conversations_scenario.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support import contract
from tests.support.server import RunningServer

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_conversations_through_the_official_client(server: RunningServer, transport: str) -> None:
    arguments = (
        [server.grpc_target, str(contract.DESCRIPTOR_SET)]
        if transport == "grpc"
        else [server.http_base]
    )
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / "conversations_scenario.py"),
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
    assert set(steps) == {"seed", "golden", "unique", "scenario", "not_found", "import"}
    assert steps["golden"]["turns"] == 2
    assert steps["unique"]["display_name"] == "Generated from c1 (2)"
    assert steps["not_found"] == {
        "missing": "RESOURCE_NOT_FOUND",
        "other_source": "RESOURCE_NOT_FOUND",
    }
