"""schemathesis drives every operation of ``/openapi.json`` against the real server.

Checks: no 5xx, status codes and content types as documented, every response body valid against
the document. The document lists only the operations the REST surface serves
(``rest.served_bindings``): a method the core does not implement yet answers 501 by design and
is not in it, so nothing needs excluding.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ces_eval.contract import openapi
from ces_eval.core.service import implements
from ces_eval.surfaces.rest import served_bindings
from ces_eval.testing.server import RunningServer
from tests.support.tokens import ALICE, BOB, guarded_server

# Examples schemathesis generates per operation, by run: the open server's conformance over
# every operation (170: both services) gets the most; behind tokens, where the same handlers
# answer, fewer suffice, and a foreign token's 403 is decided before anything of the request is
# read. Schemathesis spends about half a second building each operation's strategies whatever
# the count (the AgentService's messages are large), so the runs behind tokens leave out the
# AgentService's operations, whose authorization the access tests check method by method
# (tests/integration/test_access.py).
CONFORMANCE_EXAMPLES = 12
OWNER_EXAMPLES = 10
FOREIGN_EXAMPLES = 5


def _unserved_operation_ids() -> list[str]:
    """Operations of the served document whose method the core does not implement: none."""
    return [
        f"{binding.method.containing_service.name}_{binding.method.name}"
        for binding in served_bindings()
        if not implements(binding.method)
    ]


CONFORMANCE = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance"
)


def _schemathesis(
    server: RunningServer,
    checks: str,
    examples: int,
    token: str | None = None,
    *,
    left_out: str = "",
    **env: str,
) -> tuple[str, int]:
    """Run schemathesis over every served operation (but those of the service ``left_out``);
    its report and how many it tested."""
    assert _unserved_operation_ids() == []
    operations = sum(len(item) for item in openapi.committed_openapi()["paths"].values())
    assert operations == len(served_bindings())
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.http_base}/openapi.json",
        "--url",
        server.http_base,
        "--checks",
        checks,
        "--max-examples",
        str(examples),
        "--generation-database",
        "none",
        "--seed",
        "160",
    ]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    if left_out:
        command += ["--exclude-tag", left_out]
    environment = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks", **env}
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=900, check=False, env=environment
    )
    report = completed.stdout + completed.stderr
    assert completed.returncode == 0, report[-6000:]
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None, report[-2000:]
    expected = [b for b in served_bindings() if b.method.containing_service.name != left_out]
    assert int(tested.group(1)) == len(expected)
    assert "Traceback" not in server.output()
    return report, int(tested.group(1))


def test_schemathesis_finds_no_server_errors_and_no_schema_violations(
    server: RunningServer,
) -> None:
    _schemathesis(server, CONFORMANCE, CONFORMANCE_EXAMPLES)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with guarded_server(tmp_path_factory.mktemp("guarded")) as running:
        yield running


def test_schemathesis_with_the_owners_token_finds_no_server_errors(
    guarded: RunningServer, tmp_path: Path
) -> None:
    """Every generated request addresses proj-a with alice's token: the checks of the open
    server hold behind authentication too."""
    statuses = tmp_path / "statuses.txt"
    _schemathesis(
        guarded,
        f"{CONFORMANCE},record_status",
        OWNER_EXAMPLES,
        ALICE,
        left_out="AgentService",
        CES_EVAL_ST_PROJECT="proj-a",
        CES_EVAL_ST_STATUS_LOG=str(statuses),
    )
    seen = Counter(int(line) for line in statuses.read_text().split())
    assert seen[401] == 0
    assert seen[200] > 0, seen  # the token worked: requests reached proj-a's data


def test_schemathesis_with_a_foreign_token_meets_only_403(guarded: RunningServer) -> None:
    """Every generated request addresses proj-a with bob's token (proj-b): whatever the path
    variables, query and body hold, the answer is 403 and never anything else."""
    _schemathesis(
        guarded,
        "only_expected_status",
        FOREIGN_EXAMPLES,
        BOB,
        left_out="AgentService",
        CES_EVAL_ST_PROJECT="proj-a",
        CES_EVAL_ST_ONLY_STATUS="403",
    )
