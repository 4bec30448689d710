"""Large evaluations read back by Google's official Python client (issue 15, item 8).

Runs in the official client's own environment (``.venv-client``). Usage:
``large_scenario.py grpc HOST:PORT APP`` or ``large_scenario.py rest http://HOST:PORT APP``.
The client is wired as README shows, with every default kept: over gRPC that includes grpc's
4 MiB receive limit, which a response over it fails on the client's side
(RESOURCE_EXHAUSTED: "Received message larger than max"). The script lists ``APP``'s
evaluations with the default page size, gets each one, then tries to create one just over the
server's bound, and prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.rpc import error_details_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import official_client  # type: ignore[import-not-found]

TEXT = 200_000  # characters of one step: under the string limit


def violations_of(error: exceptions.GoogleAPICallError) -> list[list[str]]:
    found: list[list[str]] = []
    for detail in error.details:
        if isinstance(detail, error_details_pb2.BadRequest):  # gRPC: unpacked messages
            found += [[v.field, v.reason] for v in detail.field_violations]
        elif isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.BadRequest"):
            found += [[v["field"], v.get("reason", "")] for v in detail["fieldViolations"]]
    return found


def main(transport: str, target: str, app: str, over: int) -> int:
    client = official_client(transport, target)  # default options: 4 MiB receive limit
    pager = client.list_evaluations(parent=app)  # default page size
    pages: list[list[str]] = []
    for page in pager.pages:
        pages.append([evaluation.name for evaluation in page.evaluations])
    sizes = {}
    for name in (name for page in pages for name in page):
        evaluation = client.get_evaluation(name=name)
        sizes[name] = ces_v1beta.Evaluation.pb(evaluation).ByteSize()
    steps = [
        ces_v1beta.Evaluation.Step(user_input=ces_v1beta.SessionInput(text="x" * TEXT))
        for _ in range(over // TEXT + 1)
    ]
    refused: dict[str, Any] = {}
    try:
        client.create_evaluation(
            parent=app,
            evaluation=ces_v1beta.Evaluation(
                display_name=f"over via {transport}",
                golden=ces_v1beta.Evaluation.Golden(
                    turns=[ces_v1beta.Evaluation.GoldenTurn(steps=steps)]
                ),
            ),
        )
    except exceptions.BadRequest as error:  # REST: HTTP 400; gRPC: InvalidArgument
        refused = {
            "type": type(error).__name__,
            "reason": error.reason,
            "violations": violations_of(error),
            "message": error.message,
        }
    print(json.dumps({"pages": pages, "sizes": sizes, "refused": refused}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
