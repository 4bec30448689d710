"""Runs the Node.js client test (tests/node) against the real server."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ces_eval.testing.server import RunningServer
from tests.support import contract

pytestmark = pytest.mark.external  # Node.js and the npm packages in node_modules


def test_node_client_creates_gets_and_lists(server: RunningServer) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is required"
    include = os.pathsep.join(
        [str(contract.ROOT / "protos"), str(contract.ROOT / "build" / "third_party")]
    )
    completed = subprocess.run(
        [node, "--test", str(contract.ROOT / "tests" / "node" / "evaluations.test.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=contract.ROOT,
        env={**os.environ, "CES_EVAL_TARGET": server.grpc_target, "CES_EVAL_PROTO_PATH": include},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "# pass 1" in completed.stdout
