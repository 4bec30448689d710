"""Dump the wire facts of Google's published client (``google-cloud-ces``) as JSON on stdout.

Runs in the client's own environment (``.venv-client``), never beside ``ces_eval``: both register
``google.cloud.ces.v1beta.*`` in protobuf's default pool. The test process loads the
dumped FileDescriptorSet into a separate DescriptorPool and compares it with ours.

Facts come from the client's runtime objects, not from its text or a list kept here:
- the RPCs and their gRPC paths: every RPC stub of the gRPC transport is called once through the
  client against a real in-process gRPC server that records the path it receives
  (``tools/official_routes.py``'s ``recorded_paths``); the EvaluationService's are dumped, the
  Operations and Locations mixins are not;
- request/response types: the client methods' type annotations (``google.longrunning.Operation``
  for long-running methods, ``google.protobuf.Empty`` for methods annotated ``None``);
- HTTP rules: the REST transport's ``_get_http_options``;
- long-running response and metadata types: fixed by the client's ``operation.from_gapic`` calls
  (``services/evaluation_service/client.py``). ``LRO_TYPES`` states them; the dump
  fails unless they are exactly what those calls name, one entry per method returning an
  operation, and each is found in the dumped descriptors;
- two named roots beside the EvaluationService's: the request and response of
  SessionService.RunSession, the session JSON the run engine exchanges with a team's own agent.
  ces-eval does not serve SessionService; ``SESSION_RPCS`` names the RPC and the dump reads its
  types from the annotations of the SessionService client's method, as it does for the
  EvaluationService's (they are dumped under ``session_rpcs``, not ``rpcs``).
"""

from __future__ import annotations

import ast
import base64
import inspect
import json
import sys
import typing
from pathlib import Path
from typing import Any

from google.api_core import operation
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service import client as client_module
from google.cloud.ces_v1beta.services.evaluation_service.transports import rest_base
from google.longrunning import operations_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from official_routes import recorded_paths

SERVICE = "google.cloud.ces.v1beta.EvaluationService"
V1BETA = "google.cloud.ces.v1beta"
# RPC → (response, metadata) full names of its long-running operation, as the client's
# operation.from_gapic calls unpack them (ExportEvaluations' metadata is the
# OperationMetadata of the official agent_service file).
LRO_TYPES = {
    "RunEvaluation": (
        f"{V1BETA}.RunEvaluationResponse",
        f"{V1BETA}.RunEvaluationOperationMetadata",
    ),
    "GenerateEvaluation": (f"{V1BETA}.Evaluation", f"{V1BETA}.GenerateEvaluationOperationMetadata"),
    "ImportEvaluations": (
        f"{V1BETA}.ImportEvaluationsResponse",
        f"{V1BETA}.ImportEvaluationsOperationMetadata",
    ),
    "DeleteEvaluationRun": (
        "google.protobuf.Empty",
        f"{V1BETA}.DeleteEvaluationRunOperationMetadata",
    ),
    "ExportEvaluations": (f"{V1BETA}.ExportEvaluationsResponse", f"{V1BETA}.OperationMetadata"),
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
}


# SessionService RPC → its client method: named roots whose request and response types the dump
# reads from that method's annotations (the run engine speaks them to a team's own agent).
SESSION_RPCS = {"RunSession": "run_session"}


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


def _types(client_method: str, client: Any = ces_v1beta.EvaluationServiceClient) -> tuple[Any, Any]:
    hints = typing.get_type_hints(getattr(client, client_method))
    request = next(a for a in typing.get_args(hints["request"]) if hasattr(a, "pb"))
    returned = hints["return"]
    if returned is type(None):
        response: Any = empty_pb2.Empty
    elif returned is operation.Operation:
        response = operations_pb2.Operation
    elif not hasattr(returned, "pb"):  # a pager wraps the List response it was built from
        response = typing.get_type_hints(returned.__init__)["response"]
    else:
        response = returned
    return _message_descriptor(request), _message_descriptor(response)


def _evaluate(node: ast.expr) -> Any:
    """A dotted name of the client module (``evaluation_service.RunEvaluationResponse``), as
    the module's own namespace resolves it."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError(f"not a dotted name: {ast.dump(node)}")
    value = getattr(client_module, node.id)
    for part in reversed(parts):
        value = getattr(value, part)
    return value


def _client_lro_types(client_methods: dict[str, str]) -> dict[str, tuple[str, str]]:
    """RPC → (response, metadata) full names, read from each client method's
    ``operation.from_gapic(response, operations_client, <response type>, metadata_type=...)``."""
    rpc_of = {attribute: rpc for rpc, attribute in client_methods.items()}
    tree = ast.parse(inspect.getsource(ces_v1beta.EvaluationServiceClient))
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
                _message_descriptor(_evaluate(node)).full_name for node in (call.args[2], metadata)
            )
            found[rpc_of[function.name]] = (names[0], names[1])
    return found


def main() -> int:
    paths = {
        path.rsplit("/", 1)[1]: (attribute, path)
        for attribute, path in recorded_paths().items()
        if path.startswith(f"/{SERVICE}/")
    }
    client_methods = {rpc: attribute for rpc, (attribute, _) in paths.items()}
    rpcs: dict[str, Any] = {}
    roots: list[Any] = []
    for rpc, (attribute, path) in sorted(paths.items()):
        request, response = _types(attribute)
        http = getattr(rest_base._BaseEvaluationServiceRestTransport, f"_Base{rpc}")
        rpcs[rpc] = {
            "path": path,
            "client_method": attribute,
            "request": request.full_name,
            "response": response.full_name,
            "http": http._get_http_options(),
            "lro": list(LRO_TYPES.get(rpc, ())),
        }
        roots += [request, response]
    long_running = {
        rpc for rpc, facts in rpcs.items() if facts["response"] == "google.longrunning.Operation"
    }
    if set(LRO_TYPES) != long_running:
        raise SystemExit(f"LRO_TYPES names {sorted(LRO_TYPES)}, the client {sorted(long_running)}")
    client_lro = _client_lro_types(client_methods)
    if client_lro != LRO_TYPES:
        raise SystemExit(
            f"LRO_TYPES differs from the client's operation.from_gapic calls: {client_lro}"
        )
    default = descriptor_pool.Default()
    for names in LRO_TYPES.values():
        roots += [default.FindMessageTypeByName(name) for name in names]
    session_rpcs: dict[str, Any] = {}
    for rpc, attribute in sorted(SESSION_RPCS.items()):
        request, response = _types(attribute, ces_v1beta.SessionServiceClient)
        session_rpcs[rpc] = {"request": request.full_name, "response": response.full_name}
        roots += [request, response]
    files = _files(roots)
    dumped = descriptor_pool.DescriptorPool()
    for file in files.file:
        dumped.Add(file)
    for names in LRO_TYPES.values():
        for name in names:
            dumped.FindMessageTypeByName(name)  # KeyError: not in the dumped descriptors
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
            "session_rpcs": session_rpcs,
            "roots": sorted({r.full_name for r in roots}),
            "file_descriptor_set": base64.b64encode(files.SerializeToString()).decode(),
        },
        sys.stdout,
        indent=1,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
