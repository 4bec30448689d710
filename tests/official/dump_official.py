"""Dump the wire facts of Google's published client (``google-cloud-ces``) as JSON on stdout.

Runs in the client's own environment (``.venv-client``), never beside ``ces_eval``: both register
``google.cloud.ces.v1beta.*`` in protobuf's default pool. The test process loads the
dumped FileDescriptorSet into a separate DescriptorPool and compares it with ours.

Facts come from the client's runtime objects, not from its text or a list kept here:
- the RPCs and their gRPC paths: every RPC stub of the gRPC transport is called once through the
  client against a real in-process gRPC server that records the path it receives
  (``tools/official_routes.py``'s ``recorded_paths``); the RPCs of each service of its
  ``SERVICES`` (the whole v1beta API: EvaluationService, AgentService, SessionService,
  ToolService, WidgetService) are dumped, keyed ``Service.Rpc``, the Operations and Locations
  mixins are not;
- request/response types and streaming: the client methods' type annotations
  (``google.longrunning.Operation`` for long-running methods, ``google.protobuf.Empty`` for
  methods annotated ``None``; an iterator of requests, ``requests``, streams from the client,
  an iterable returned streams from the server);
- HTTP rules: the REST transport's ``_get_http_options`` (none for a method without a REST
  form, BidiRunSession);
- long-running response and metadata types: fixed by the client's ``operation.from_gapic`` calls
  (``services/<service>/client.py``). ``LRO_TYPES`` states them; the dump
  fails unless they are exactly what those calls name, one entry per method returning an
  operation, and each is found in the dumped descriptors.
"""

from __future__ import annotations

import ast
import base64
import collections.abc
import importlib
import inspect
import json
import sys
import typing
from pathlib import Path
from typing import Any

from google.api_core import operation
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import rest_base
from google.longrunning import operations_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from official_routes import SERVICES, recorded_paths

V1BETA = "google.cloud.ces.v1beta"
CLIENT_SERVICES = "google.cloud.ces_v1beta.services"
# Each dumped service's RPC → (response, metadata) full names of its long-running operation, as
# the client's operation.from_gapic calls unpack them (ExportEvaluations' metadata, like the
# AgentService's, is the OperationMetadata of the official agent_service file).
LRO_TYPES = {
    "EvaluationService": {
        "RunEvaluation": (
            f"{V1BETA}.RunEvaluationResponse",
            f"{V1BETA}.RunEvaluationOperationMetadata",
        ),
        "GenerateEvaluation": (
            f"{V1BETA}.Evaluation",
            f"{V1BETA}.GenerateEvaluationOperationMetadata",
        ),
        "ImportEvaluations": (
            f"{V1BETA}.ImportEvaluationsResponse",
            f"{V1BETA}.ImportEvaluationsOperationMetadata",
        ),
        "DeleteEvaluationRun": (
            "google.protobuf.Empty",
            f"{V1BETA}.DeleteEvaluationRunOperationMetadata",
        ),
        "ExportEvaluations": (
            f"{V1BETA}.ExportEvaluationsResponse",
            f"{V1BETA}.OperationMetadata",
        ),
        "ExportEvaluationRuns": (
            f"{V1BETA}.ExportEvaluationRunsResponse",
            f"{V1BETA}.ExportEvaluationRunsOperationMetadata",
        ),
        "ExportEvaluationResults": (
            f"{V1BETA}.ExportEvaluationResultsResponse",
            f"{V1BETA}.ExportEvaluationResultsOperationMetadata",
        ),
        "RunEvaluationResultMetrics": (
            f"{V1BETA}.RunEvaluationResultMetricsResponse",
            f"{V1BETA}.RunEvaluationResultMetricsOperationMetadata",
        ),
    },
    "SessionService": {},
    "ToolService": {},
    "WidgetService": {},
    "AgentService": {
        "CreateApp": (f"{V1BETA}.App", f"{V1BETA}.OperationMetadata"),
        "DeleteApp": ("google.protobuf.Empty", f"{V1BETA}.OperationMetadata"),
        "ExportApp": (f"{V1BETA}.ExportAppResponse", f"{V1BETA}.OperationMetadata"),
        "ImportApp": (f"{V1BETA}.ImportAppResponse", f"{V1BETA}.OperationMetadata"),
        "BatchDeleteConversations": (
            f"{V1BETA}.BatchDeleteConversationsResponse",
            f"{V1BETA}.OperationMetadata",
        ),
        "RestoreAppVersion": (
            f"{V1BETA}.RestoreAppVersionResponse",
            f"{V1BETA}.OperationMetadata",
        ),
        "GenerateAppResource": (
            f"{V1BETA}.GenerateAppResourceResponse",
            f"{V1BETA}.GenerateAppResourceOperationMetadata",
        ),
    },
}


def _message_descriptor(cls: Any) -> Any:
    return cls.pb().DESCRIPTOR if hasattr(cls, "pb") else cls.DESCRIPTOR


def _files(roots: list[Any]) -> descriptor_pb2.FileDescriptorSet:
    seen: dict[str, Any] = {}

    def visit(file: Any) -> None:
        if file.name in seen:
            return
        for dependency in file.dependencies:
            visit(dependency)
        seen[file.name] = file

    for root in roots:
        visit(root.file)
    out = descriptor_pb2.FileDescriptorSet()
    for file in seen.values():
        file.CopyToProto(out.file.add())
    return out


def _streamed(hint: Any) -> Any | None:
    """X of ``Iterable[X]`` or ``Iterator[X]`` (a stream of messages), else None."""
    origin = typing.get_origin(hint)
    if origin in (collections.abc.Iterable, collections.abc.Iterator):
        (item,) = typing.get_args(hint)
        return item
    return None


def _types(client_method: str, client: Any) -> tuple[Any, Any, bool, bool]:
    """The request and response descriptors of a client method, and whether the client
    streams its requests (its parameter ``requests``, an iterator) and the server its
    responses (an iterable returned)."""
    hints = typing.get_type_hints(getattr(client, client_method))
    client_streaming = "requests" in hints
    if client_streaming:
        request = next(
            _streamed(a) for a in typing.get_args(hints["requests"]) if _streamed(a) is not None
        )
    else:
        request = next(a for a in typing.get_args(hints["request"]) if hasattr(a, "pb"))
    returned = hints["return"]
    server_streaming = _streamed(returned) is not None
    if server_streaming:
        response: Any = _streamed(returned)
    elif returned is type(None):
        response: Any = empty_pb2.Empty
    elif returned is operation.Operation:
        response = operations_pb2.Operation
    elif not hasattr(returned, "pb"):  # a pager wraps the List response it was built from
        response = typing.get_type_hints(returned.__init__)["response"]
    else:
        response = returned
    return (
        _message_descriptor(request),
        _message_descriptor(response),
        client_streaming,
        server_streaming,
    )


def _evaluate(node: ast.expr, module: Any) -> Any:
    """A dotted name of the client ``module`` (``evaluation_service.RunEvaluationResponse``),
    as the module's own namespace resolves it."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError(f"not a dotted name: {ast.dump(node)}")
    value = getattr(module, node.id)
    for part in reversed(parts):
        value = getattr(value, part)
    return value


def _client_lro_types(name: str, client_methods: dict[str, str]) -> dict[str, tuple[str, str]]:
    """RPC → (response, metadata) full names, read from each method of the service ``name``'s
    client: ``operation.from_gapic(response, operations_client, <response type>,
    metadata_type=...)``."""
    rpc_of = {attribute: rpc for rpc, attribute in client_methods.items()}
    client = getattr(ces_v1beta, f"{name}Client")
    module = sys.modules[client.__module__]
    tree = ast.parse(inspect.getsource(client))
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef))
    found: dict[str, tuple[str, str]] = {}
    for function in cls.body:
        if not isinstance(function, ast.FunctionDef) or function.name not in rpc_of:
            continue
        for call in ast.walk(function):
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "from_gapic"
            ):
                continue
            metadata = next(k.value for k in call.keywords if k.arg == "metadata_type")
            names = tuple(
                _message_descriptor(_evaluate(node, module)).full_name
                for node in (call.args[2], metadata)
            )
            found[rpc_of[function.name]] = (names[0], names[1])
    return found


def _service_rpcs(module: str, name: str, roots: list[Any]) -> dict[str, Any]:
    """The facts of every RPC of the service ``name`` (client module ``module``), keyed
    ``Service.Rpc``; their request, response and long-running types join ``roots``."""
    service = f"{V1BETA}.{name}"
    paths = {
        path.rsplit("/", 1)[1]: (attribute, path)
        for attribute, path in recorded_paths((module, name)).items()
        if path.startswith(f"/{service}/")
    }
    client_methods = {rpc: attribute for rpc, (attribute, _) in paths.items()}
    client = getattr(ces_v1beta, f"{name}Client")
    rest = getattr(
        importlib.import_module(f"{CLIENT_SERVICES}.{module}.transports.rest_base"),
        f"_Base{name}RestTransport",
    )
    lro_types = LRO_TYPES[name]
    rpcs: dict[str, Any] = {}
    for rpc, (attribute, path) in sorted(paths.items()):
        request, response, client_streaming, server_streaming = _types(attribute, client)
        base = getattr(rest, f"_Base{rpc}")
        rpcs[f"{name}.{rpc}"] = {
            "service": service,
            "path": path,
            "client_method": attribute,
            "request": request.full_name,
            "response": response.full_name,
            "client_streaming": client_streaming,
            "server_streaming": server_streaming,
            # BidiRunSession has no REST form: its base declares no HTTP options.
            "http": base._get_http_options() if hasattr(base, "_get_http_options") else [],
            "lro": list(lro_types.get(rpc, ())),
        }
        roots += [request, response]
    long_running = {
        rpc.split(".")[1]
        for rpc, facts in rpcs.items()
        if facts["response"] == "google.longrunning.Operation"
    }
    if set(lro_types) != long_running:
        raise SystemExit(f"LRO_TYPES names {sorted(lro_types)}, the client {sorted(long_running)}")
    client_lro = _client_lro_types(name, client_methods)
    if client_lro != lro_types:
        raise SystemExit(
            f"LRO_TYPES[{name}] differs from the client's operation.from_gapic calls: {client_lro}"
        )
    default = descriptor_pool.Default()
    for names in lro_types.values():
        roots += [default.FindMessageTypeByName(full) for full in names]
    return rpcs


def main() -> int:
    rpcs: dict[str, Any] = {}
    roots: list[Any] = []
    for module, name in SERVICES:
        rpcs |= _service_rpcs(module, name, roots)
    files = _files(roots)
    dumped = descriptor_pool.DescriptorPool()
    for file in files.file:
        dumped.Add(file)
    for types in LRO_TYPES.values():
        for names in types.values():
            for full in names:
                dumped.FindMessageTypeByName(full)  # KeyError: not in the dumped descriptors
    base = rest_base._BaseEvaluationServiceRestTransport
    operations_http = {
        name: getattr(base, f"_Base{name}")._get_http_options()
        for name in ("GetOperation", "ListOperations", "DeleteOperation", "CancelOperation")
    }
    locations_http = {
        name: getattr(base, f"_Base{name}")._get_http_options()
        for name in ("GetLocation", "ListLocations")
    }
    json.dump(
        {
            "rpcs": rpcs,
            "operations_http": operations_http,
            "locations_http": locations_http,
            "roots": sorted({r.full_name for r in roots}),
            "file_descriptor_set": base64.b64encode(files.SerializeToString()).decode(),
        },
        sys.stdout,
        indent=1,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
