"""Google's official Python client calls methods the server does not serve yet, and reports.

Runs in the official client's own environment (``.venv-client``), never beside ``ces_eval``
(GUIDE §2). Usage: ``unimplemented_scenario.py grpc HOST:PORT`` or
``unimplemented_scenario.py rest http://HOST:PORT``, with a JSON list of methods on stdin, each
``{"client_method": ..., "http": [{"template": ...}, ...]}`` as in official_routes.json. Each
method is called once through the client (no retry); the request names a resource matching the
method's first HTTP template, so the REST transport can build its URL. One JSON line per method
on stdout: the exception the client raised and the ErrorInfo it parsed.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import grpc
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import grpc as grpc_transport

_VARIABLE = re.compile(r"\{([^}=]+)(?:=([^}]*))?\}")


def request_for(templates: list[str]) -> dict[str, Any]:
    """A request (as a dict, which every client method accepts) whose path fields fit the first
    template: ``{app=projects/*/locations/*/apps/*}`` → ``app="projects/x/locations/x/apps/x"``;
    dotted field paths become nested messages."""
    request: dict[str, Any] = {}
    for field_path, pattern in _VARIABLE.findall(templates[0]) if templates else []:
        value = (pattern or "*").replace("**", "x/y").replace("*", "x")
        *parents, leaf = field_path.split(".")
        target = request
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return request


def client_for(transport: str, target: str) -> Any:
    if transport == "grpc":
        channel = grpc.insecure_channel(target)
        return ces_v1beta.EvaluationServiceClient(
            transport=grpc_transport.EvaluationServiceGrpcTransport(channel=channel)
        )
    return ces_v1beta.EvaluationServiceClient(
        transport="rest",
        client_options={"api_endpoint": target},
        credentials=AnonymousCredentials(),
    )


def call(client: Any, method: dict[str, Any]) -> dict[str, Any]:
    request = request_for([h["template"] for h in method["http"]])
    report: dict[str, Any] = {"client_method": method["client_method"], "request": request}
    try:
        getattr(client, method["client_method"])(request=request, retry=None, timeout=30)
    except exceptions.GoogleAPICallError as error:
        report.update(
            exception=type(error).__name__,
            grpc_status=getattr(error.grpc_status_code, "name", None),
            # REST: the status of the HTTP response the client parsed (requests.Response)
            http_status=getattr(error.response, "status_code", None),
            message=error.message,
            reason=error.reason,
            domain=error.domain,
            metadata=dict(error.metadata or {}),
        )
    except Exception as error:  # noqa: BLE001 - reported, for the test to show
        report.update(exception=type(error).__name__, message=str(error))
    else:
        report["exception"] = None
    return report


def main() -> int:
    transport, target = sys.argv[1], sys.argv[2]
    methods = json.load(sys.stdin)
    client = client_for(transport, target)
    for method in methods:
        print(json.dumps(call(client, method), default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
