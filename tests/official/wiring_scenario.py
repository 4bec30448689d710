"""The client wiring a server prints under its ready line, run as printed (issue 14).

Runs in ``.venv-client`` (tests/integration/test_ready_line.py). Arguments: a JSON list of
``{"transport", "expression", "metadata"}`` read off the ready line, and the token that
``<token>`` stands for ("" on an open server). Each expression is evaluated with the names the
ready line assumes imported, then used to create and list an evaluation; prints one JSON line per
transport.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import grpc
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import (
    EvaluationServiceGrpcTransport,
)
from google.oauth2.credentials import Credentials

# The scenarios run as scripts: their folder is on sys.path.
from harness import smallest_evaluation  # type: ignore[import-not-found]

APP = "projects/proj-a/locations/l/apps/a"
NAMES = {
    "grpc": grpc,
    "ces_v1beta": ces_v1beta,
    "EvaluationServiceGrpcTransport": EvaluationServiceGrpcTransport,
    "AnonymousCredentials": AnonymousCredentials,
    "Credentials": Credentials,
}


def main() -> int:
    wirings: list[dict[str, Any]] = json.loads(sys.argv[1])
    token = sys.argv[2]
    for wiring in wirings:
        expression = wiring["expression"].replace("<token>", token)
        # The server's own ready line, evaluated as a user would paste it.
        client = eval(expression, dict(NAMES))  # noqa: S307
        metadata = [("authorization", f"Bearer {token}")] if wiring["metadata"] else []
        created = client.create_evaluation(
            parent=APP,
            evaluation=smallest_evaluation(f"wired over {wiring['transport']}"),
            metadata=metadata,
        )
        listed = [e.name for e in client.list_evaluations(parent=APP, metadata=metadata)]
        print(
            json.dumps(
                {"transport": wiring["transport"], "created": created.name, "listed": listed}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
