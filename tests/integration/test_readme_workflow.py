"""README's run workflow block (between ``<!-- workflow:begin -->`` and ``<!-- workflow:end -->``)
runs as written with Google's official client against the real server: only the addresses are
the test server's, and the client wiring is the quick start's gRPC one. What it prints is what
the README says it prints. Its ``ces_eval.testing`` runs in the client's process, beside
``google-cloud-ces``."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ces_eval.testing.server import RunningServer
from tests.support import contract

pytestmark = pytest.mark.external

_BLOCK = re.compile(r"<!-- workflow:begin -->\n```python\n(.*?)```\n<!-- workflow:end -->", re.S)
_WIRING = """\
import grpc
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import (
    EvaluationServiceGrpcTransport,
)

client = ces_v1beta.EvaluationServiceClient(
    transport=EvaluationServiceGrpcTransport(channel=grpc.insecure_channel("127.0.0.1:50051"))
)
"""


def test_the_readme_workflow_runs_as_written(server: RunningServer) -> None:
    found = _BLOCK.search((contract.ROOT / "README.md").read_text(encoding="utf-8"))
    assert found is not None, "README.md has no workflow block"
    program = (_WIRING + found.group(1)).replace("127.0.0.1:50051", server.grpc_target)
    program = program.replace("http://127.0.0.1:8080", server.http_base)
    # ces_eval.testing from this checkout (standard library only) in the client's environment,
    # as a user has it installed beside google-cloud-ces.
    environ = {**os.environ, "PYTHONPATH": str(contract.ROOT / "src")}
    completed = subprocess.run(
        [str(contract.CLIENT_PYTHON), "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environ,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr + server.output()
    lines = completed.stdout.splitlines()
    assert lines[0] == "COMPLETED 1 1", lines
    assert sorted(lines[1:]) == ["FAIL {'order': 8.0}", "PASS {'order': 42.0}"], lines
