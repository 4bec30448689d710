"""Running a scenario of tests/official with Google's official client, in its own environment
(``.venv-client``, GUIDE §2), against real servers."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING, Any

from tests.support import contract

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ces_eval.testing.server import RunningServer

__all__ = ["run_official"]


def run_official(
    script: str, servers: Sequence[RunningServer], transport: str
) -> dict[str, dict[str, Any]]:
    """Run ``tests/official/<script>`` over ``transport`` (``grpc`` or ``rest``) against
    ``servers`` (several: replicas of one database, called in turn); the steps it printed (one
    JSON object per line), by name. Fails with everything it and the servers wrote when it
    exits non-zero."""
    arguments = (
        [",".join(s.grpc_target for s in servers), str(contract.DESCRIPTOR_SET)]
        if transport == "grpc"
        else [",".join(s.http_base for s in servers)]
    )
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / script),
            transport,
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, (
        completed.stdout + completed.stderr + "".join(s.output() for s in servers)
    )
    steps = [json.loads(line) for line in completed.stdout.splitlines()]
    return {step.pop("step"): step for step in steps}
