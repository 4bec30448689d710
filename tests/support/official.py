"""Running a script of tests/official with Google's official client, in its own environment
(``.venv-client``), against real servers.

:func:`run_script` runs any of them; :func:`run_official` runs a scenario, whose command line
(``TRANSPORT TARGETS DESCRIPTOR_SET [ARGUMENT ...]``) and step reports are
``tests/official/harness.py``'s.
"""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING, Any

from tests.support import contract

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ces_eval.testing.server import RunningServer

__all__ = ["run_official", "run_script", "targets"]

# What a failure shows of the script's own output, from its end: the traceback of the failed
# assertion is last, and a large report must not drown it.
_SHOWN = 20_000


def run_script(
    script: str,
    *arguments: str,
    servers: Sequence[RunningServer] = (),
    stdin: str | None = None,
    timeout: float = 300,
) -> list[Any]:
    """Run ``tests/official/<script> ARGUMENT ...`` with the official client's interpreter
    (``stdin`` on its standard input); the JSON documents it printed, one a line. Fails with
    what it and ``servers`` wrote when it exits non-zero."""
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / script),
            *arguments,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, (
        completed.stdout[-_SHOWN:]
        + completed.stderr[-_SHOWN:]
        + "".join(server.output() for server in servers)
    )
    return [json.loads(line) for line in completed.stdout.splitlines()]


def targets(servers: Sequence[RunningServer], transport: str) -> str:
    """The command line's TARGETS: each server's gRPC address (``grpc``) or HTTP base (``rest``),
    comma-separated."""
    return ",".join(s.grpc_target if transport == "grpc" else s.http_base for s in servers)


def run_official(
    script: str, servers: Sequence[RunningServer], transport: str, *arguments: str
) -> dict[str, dict[str, Any]]:
    """Run the scenario ``tests/official/<script>`` over ``transport`` (``grpc`` or ``rest``)
    against ``servers`` (several: replicas of one database, called in turn), with its own
    ``arguments`` last; the steps it printed, by name."""
    steps = run_script(
        script,
        transport,
        targets(servers, transport),
        str(contract.DESCRIPTOR_SET),
        *arguments,
        servers=servers,
    )
    return {step.pop("step"): step for step in steps}
