"""Write the routes of Google's published client (``google-cloud-ces``) as JSON.

Runs in the client's own environment (``.venv-client/bin/python tools/official_routes.py``):
the client cannot share a process with our generated modules. ``tools/generate.py``
calls it and writes ``generated/official_routes.json``; the server reads that file
to answer 501 UNIMPLEMENTED (not 404) on the official routes it does not serve yet, and the
README's methods table lists them.

Every fact comes from the client's runtime objects:
- the methods: the RPC stubs of the gRPC transport that each client of :data:`SERVICES` exposes
  as methods (the service's RPCs and the Operations and Locations mixins, kept once);
- each method's gRPC path: the client calls it once against a real in-process gRPC server that
  records the path it receives (the RPC name is that path's last segment);
- each method's HTTP bindings: the REST transport's ``_Base<Rpc>._get_http_options()``, in the
  client's order (the first is the rule, the others its additional bindings).

``--output FILE`` writes there instead of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import sys
from concurrent import futures
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc

DISTRIBUTION = "google-cloud-ces"
CLIENT_MODULE = "google.cloud.ces_v1beta"
# The official services whose routes are recorded: the client's module of each, and its name.
SERVICES = (
    ("evaluation_service", "EvaluationService"),
    ("agent_service", "AgentService"),
    ("session_service", "SessionService"),
    ("tool_service", "ToolService"),
    ("widget_service", "WidgetService"),
)


def _client_modules(module: str = SERVICES[0][0]) -> tuple[Any, Any, Any, Any]:
    """The client package, the gRPC and REST transports of the service ``module`` and
    api_core's exceptions, imported by name: mypy checks this file in our environment, where
    the client is not installed (and must not be)."""
    service = f"{CLIENT_MODULE}.services.{module}"
    return (
        importlib.import_module(CLIENT_MODULE),
        importlib.import_module(service + ".transports.grpc"),
        importlib.import_module(service + ".transports.rest_base"),
        importlib.import_module("google.api_core.exceptions"),
    )


class _PathRecorder(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    """A gRPC server's handler that keeps the path of each call and serves none of them (the
    server then answers UNIMPLEMENTED)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def service(self, handler_call_details: Any) -> None:  # noqa: ANN401 - grpc is untyped
        self.paths.append(str(handler_call_details.method))


def _rpc_attributes(client_class: Any, transport_class: Any) -> list[str]:  # noqa: ANN401
    """Client methods backed by an RPC stub: the gRPC transport exposes each stub as a
    property of the same name as the client method calling it."""
    stubs = {
        name
        for name in dir(transport_class)
        if not name.startswith("_") and isinstance(getattr(transport_class, name), property)
    }
    return sorted(
        name
        for name in stubs
        if callable(getattr(client_class, name, None))
        and not isinstance(getattr(client_class, name), property)
    )


def _call_once(method: Any) -> None:  # noqa: ANN401 - a client method
    """One call of a client ``method``: a client-streaming one (its parameter is
    ``requests``) with no message, and a streamed answer read to its end (a stream's call is
    made when it is read)."""
    if "requests" in inspect.signature(method).parameters:
        answer = method(requests=iter(()), retry=None, timeout=30)
    else:
        answer = method(request=None, retry=None, timeout=30)
    if answer is not None and hasattr(answer, "__next__"):
        for _ in answer:
            pass


def recorded_paths(service: tuple[str, str] = SERVICES[0]) -> dict[str, str]:
    """Client method name → the gRPC path it calls, as a real server received it: every RPC
    method of the client of ``service`` (an entry of :data:`SERVICES`; its mixins' too)."""
    module, name = service
    client_module, grpc_transport, _, exceptions = _client_modules(module)
    client_class = getattr(client_module, f"{name}Client")
    transport_class = getattr(grpc_transport, f"{name}GrpcTransport")
    recorder = _PathRecorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[recorder])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            client = client_class(transport=transport_class(channel=channel))
            paths: dict[str, str] = {}
            for attribute in _rpc_attributes(client_class, transport_class):
                before = len(recorder.paths)
                with contextlib.suppress(exceptions.MethodNotImplemented):
                    _call_once(getattr(client, attribute))
                if len(recorder.paths) != before + 1:
                    raise RuntimeError(f"{attribute} did not make exactly one gRPC call")
                paths[attribute] = recorder.paths[-1]
            return paths
    finally:
        server.stop(None)


def _http_bindings(rest_base: Any, name: str, rpc: str) -> list[dict[str, str]]:  # noqa: ANN401
    """The REST transport's bindings of ``rpc`` of the service ``name`` (none when the client
    has no REST form)."""
    base = getattr(getattr(rest_base, f"_Base{name}RestTransport"), f"_Base{rpc}", None)
    if base is None or not hasattr(base, "_get_http_options"):  # (BidiRunSession: gRPC alone)
        return []
    return [
        {
            "verb": str(option["method"]).upper(),
            "template": str(option["uri"]),
            "body": str(option.get("body", "")),
        }
        for option in base._get_http_options()
    ]


def official_routes() -> dict[str, Any]:
    """The document written to ``official_routes.json``: methods sorted by gRPC path, each
    once (every client has the mixins)."""
    methods: list[dict[str, Any]] = []
    seen: set[str] = set()
    for module, name in SERVICES:
        _, _, rest_base, _ = _client_modules(module)
        for attribute, path in recorded_paths((module, name)).items():
            if path in seen:
                continue
            seen.add(path)
            service, rpc = path.lstrip("/").split("/")
            methods.append(
                {
                    "name": rpc,
                    "service": service,
                    "path": path,
                    "client_method": attribute,
                    "http": _http_bindings(rest_base, name, rpc),
                }
            )
    methods.sort(key=lambda m: str(m["path"]))
    return {
        "generated_by": "tools/official_routes.py; do not edit",
        "client": {"distribution": DISTRIBUTION, "version": metadata.version(DISTRIBUTION)},
        "methods": methods,
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    text = render(official_routes())
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
