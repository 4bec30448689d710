"""Google's official Python client calls every official method, and one the server does not know.

Runs in the official client's own environment (``.venv-client``), never beside ``ces_eval``.
Usage: ``unimplemented_scenario.py grpc HOST:PORT`` or
``unimplemented_scenario.py rest http://HOST:PORT``, with a JSON list of methods on stdin, each
``{"client_method": ..., "service": ..., "http": [{"template": ...}, ...]}`` as in
official_routes.json. Each method is called once through the client of its service (no retry);
the request names a resource matching the method's first HTTP template, so the REST transport
can build its URL. One JSON line per method
on stdout: the exception the client raised (if any) and the ErrorInfo it parsed. A last line,
``{"unknown": ...}``, is what api_core makes of the server's answer to a method nobody declares:
over gRPC a call of ``UNKNOWN_METHOD`` on the client's channel, over REST a POST of an unbound
custom verb through the session the REST transport uses (google-auth's AuthorizedSession).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from typing import Any

import grpc
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession

# The scenarios run as scripts: their folder is on sys.path.
from harness import official_client  # type: ignore[import-not-found]

CES = "google.cloud.ces.v1beta."

_VARIABLE = re.compile(r"\{([^}=]+)(?:=([^}]*))?\}")
UNKNOWN_METHOD = "/google.cloud.ces.v1beta.EvaluationService/NoSuchMethod"
UNKNOWN_ROUTE = "/v1beta/projects/x/locations/x/apps/x:noSuchMethod"


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


def parsed(error: exceptions.GoogleAPICallError) -> dict[str, Any]:
    """What api_core parsed from an error answer."""
    return {
        "exception": type(error).__name__,
        "grpc_status": getattr(error.grpc_status_code, "name", None),
        # REST: the status of the HTTP response the client parsed (requests.Response)
        "http_status": getattr(error.response, "status_code", None),
        "message": error.message,
        "reason": error.reason,
        "domain": error.domain,
        "metadata": dict(error.metadata or {}),
    }


def call(client: Any, method: dict[str, Any], transport: str) -> dict[str, Any]:
    templates = [h["template"] for h in method["http"]]
    request = request_for(templates) if templates else {}
    report: dict[str, Any] = {"client_method": method["client_method"], "request": request}
    bound = getattr(client, method["client_method"])
    signature = inspect.signature(bound)
    streams = str(signature.return_annotation).startswith("typing.Iterable")
    try:
        if "requests" in signature.parameters:  # a bidirectional stream: gRPC only
            if transport != "grpc":
                report.update(exception=None, skipped="no HTTP binding")
                return report
            list(bound(requests=iter([{}]), retry=None, timeout=30))
        else:
            answer = bound(request=request, retry=None, timeout=30)
            if streams:  # a server stream answers (or fails) as it is read
                list(answer)
    except exceptions.GoogleAPICallError as error:
        report.update(parsed(error))
    except Exception as error:  # noqa: BLE001 - reported, for the test to show
        report.update(exception=type(error).__name__, message=str(error))
    else:
        report["exception"] = None
    return report


def unknown(transport: str, target: str, channel: grpc.Channel | None) -> dict[str, Any]:
    """api_core's reading of the answer to a method (gRPC) or route (REST) nobody declares."""
    if transport == "grpc":
        assert channel is not None
        try:
            channel.unary_unary(UNKNOWN_METHOD)(b"", timeout=30)
        except grpc.RpcError as error:
            return parsed(exceptions.from_grpc_error(error))
        return {"exception": None}
    session = AuthorizedSession(AnonymousCredentials())
    response = session.post(target + UNKNOWN_ROUTE, json={}, timeout=30)
    if response.ok:
        return {"exception": None, "http_status": response.status_code}
    return parsed(exceptions.from_http_response(response))


def main() -> int:
    transport, target = sys.argv[1], sys.argv[2]
    methods = json.load(sys.stdin)
    channel = grpc.insecure_channel(target) if transport == "grpc" else None
    clients: dict[str, Any] = {}
    for method in methods:
        # Each method through the client of its service (the mixins: EvaluationService's).
        service = method["service"].rsplit(".", 1)[-1]
        if not method["service"].startswith(CES):
            service = "EvaluationService"
        if service not in clients:
            clients[service] = official_client(transport, target, channel, service)
        print(json.dumps(call(clients[service], method, transport), default=str), flush=True)
    print(json.dumps({"unknown": unknown(transport, target, channel)}, default=str), flush=True)
    if channel is not None:
        channel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
