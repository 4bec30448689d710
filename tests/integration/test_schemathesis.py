"""schemathesis drives every operation of ``/openapi.json`` against the real server.

Checks: no 5xx, status codes and content types as documented, every response body valid against
the document. Operations whose method the core does not implement yet answer 501 by design (the
long-running exports and metric runs, issue 5) and are excluded until they are served.
"""

from __future__ import annotations

import re
import subprocess
import sys

from ces_eval import schema
from ces_eval.core.service import implements
from tests.support.server import RunningServer

EXAMPLES_PER_OPERATION = 20


def _unserved_operation_ids() -> list[str]:
    return [
        f"{service.name}_{method.name}"
        for service in schema.services()
        for method in service.methods
        if not implements(method)
    ]


def test_schemathesis_finds_no_server_errors_and_no_schema_violations(
    server: RunningServer,
) -> None:
    excluded = _unserved_operation_ids()
    assert len(excluded) < 5  # the exclusion must stay narrow
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.http_base}/openapi.json",
        "--url",
        server.http_base,
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance",
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--generation-database",
        "none",
        "--seed",
        "160",
    ]
    for operation_id in excluded:
        command += ["--exclude-operation-id", operation_id]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    report = completed.stdout + completed.stderr
    assert completed.returncode == 0, report[-6000:]
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None, report[-2000:]
    assert int(tested.group(1)) == len(schema.http_bindings()) - len(excluded)
    assert "Traceback" not in server.output()
