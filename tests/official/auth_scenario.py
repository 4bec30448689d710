"""Google's official client with bearer tokens against ``serve --auth-tokens`` (run in
``.venv-client`` by tests/integration/test_official_client.py; prints one JSON line per
transport).

Arguments: gRPC target, HTTP base URL, a token for proj-a, a token for proj-b. The wiring is the
one docs/security.md shows: ``google.oauth2.credentials.Credentials(token)`` as the client's
credentials; over gRPC with local (loopback) channel credentials, since gRPC sends call
credentials only on a secure or local channel.
"""

from __future__ import annotations

import json
import sys

import grpc
from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import (
    EvaluationServiceGrpcTransport,
)
from google.oauth2.credentials import Credentials

# The scenarios run as scripts: their folder is on sys.path.
from harness import smallest_evaluation  # type: ignore[import-not-found]

APP = "projects/proj-a/locations/us/apps/app"


def client(transport: str, target: str, token: str) -> ces_v1beta.EvaluationServiceClient:
    if transport == "grpc":
        return ces_v1beta.EvaluationServiceClient(
            transport=EvaluationServiceGrpcTransport(
                host=target,
                credentials=Credentials(token),
                ssl_channel_credentials=grpc.local_channel_credentials(),
            )
        )
    return ces_v1beta.EvaluationServiceClient(
        transport="rest",
        credentials=Credentials(token),
        client_options={"api_endpoint": target},
    )


def refusals(other: ces_v1beta.EvaluationServiceClient, name: str) -> dict[str, str]:
    """What each call of ``other`` (a foreign project's client) on ``name`` met."""
    outcomes = {}
    for label, call in (
        ("get", lambda: other.get_evaluation(name=name)),
        ("list", lambda: list(other.list_evaluations(parent=APP))),
        ("delete", lambda: other.delete_evaluation(name=name)),
    ):
        try:
            call()
            outcomes[label] = "allowed"
        except exceptions.GoogleAPICallError as error:
            outcomes[label] = type(error).__name__
    return outcomes


def main() -> None:
    grpc_target, http_base, owner, stranger = sys.argv[1:5]
    for transport, target in (("grpc", grpc_target), ("rest", http_base)):
        mine = client(transport, target, owner)
        created = mine.create_evaluation(
            parent=APP,
            evaluation=smallest_evaluation(f"via {transport}"),
        )
        listed = [e.name for e in mine.list_evaluations(parent=APP)]
        outcomes = refusals(client(transport, target, stranger), created.name)
        print(
            json.dumps(
                {
                    "transport": transport,
                    "created_by": created.created_by,
                    "listed": created.name in listed,
                    "stranger": outcomes,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
