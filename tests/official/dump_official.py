"""Dump the wire facts of Google's published client (``google-cloud-ces``) as JSON on stdout.

Runs in the client's own environment (``.venv-client``), never beside ``ces_eval``: both register
``google.cloud.ces.v1beta.*`` in protobuf's default pool (GUIDE §2). The test process loads the
dumped FileDescriptorSet into a separate DescriptorPool and compares it with ours.

Facts come from the client's runtime objects, not from its text:
- gRPC method paths: each client method is called once against a real in-process gRPC server
  that records the path it receives;
- request/response types: the client methods' type annotations (``google.longrunning.Operation``
  for long-running methods, ``google.protobuf.Empty`` for methods annotated ``None``);
- HTTP rules: the REST transport's ``_get_http_options``;
- long-running response and metadata types: fixed by the client's ``operation.from_gapic`` calls and
  given here as ``LRO_TYPES`` (GUIDE §2), then checked to exist in the dumped descriptors.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import sys
import typing
from concurrent import futures
from typing import Any

import grpc
from google.api_core import exceptions, operation
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import grpc as grpc_transport
from google.cloud.ces_v1beta.services.evaluation_service.transports import rest_base
from google.longrunning import operations_pb2
from google.protobuf import descriptor_pb2, empty_pb2

RPCS = [
    "CreateEvaluation",
    "GetEvaluation",
    "ListEvaluations",
    "UpdateEvaluation",
    "DeleteEvaluation",
    "ExportEvaluations",
    "GetEvaluationResult",
    "ListEvaluationResults",
    "DeleteEvaluationResult",
    "ExportEvaluationResults",
    "RunEvaluationResultMetrics",
]
LRO_TYPES = {
    "ExportEvaluations": ("ExportEvaluationsResponse", "OperationMetadata"),
    "ExportEvaluationResults": (
        "ExportEvaluationResultsResponse",
        "ExportEvaluationResultsOperationMetadata",
    ),
    "RunEvaluationResultMetrics": (
        "RunEvaluationResultMetricsResponse",
        "RunEvaluationResultMetricsOperationMetadata",
    ),
}


class _PathRecorder(grpc.GenericRpcHandler):
    """A real gRPC server's handler that notes each method path it is asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def service(self, handler_call_details: Any) -> None:
        # No handler: the server answers UNIMPLEMENTED.
        self.paths.append(handler_call_details.method)


def _message_descriptor(cls: Any) -> Any:
    return cls.pb().DESCRIPTOR if hasattr(cls, "pb") else cls.DESCRIPTOR


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


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


def _types(rpc: str) -> tuple[Any, Any]:
    hints = typing.get_type_hints(getattr(ces_v1beta.EvaluationServiceClient, _snake(rpc)))
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


def _paths() -> dict[str, str]:
    recorder = _PathRecorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[recorder])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        client = ces_v1beta.EvaluationServiceClient(
            transport=grpc_transport.EvaluationServiceGrpcTransport(channel=channel)
        )
        paths: dict[str, str] = {}
        for rpc in RPCS:
            method = getattr(client, _snake(rpc))
            request_type = typing.get_type_hints(method)["request"]
            request = next(a for a in typing.get_args(request_type) if hasattr(a, "pb"))()
            with contextlib.suppress(exceptions.MethodNotImplemented):
                method(request=request, retry=None, timeout=10)
            paths[rpc] = recorder.paths[-1]
        channel.close()
        return paths
    finally:
        server.stop(None)


def main() -> int:
    paths = _paths()
    rpcs: dict[str, Any] = {}
    roots: list[Any] = []
    for rpc in RPCS:
        request, response = _types(rpc)
        http = getattr(rest_base._BaseEvaluationServiceRestTransport, f"_Base{rpc}")
        rpcs[rpc] = {
            "path": paths[rpc],
            "request": request.full_name,
            "response": response.full_name,
            "http": http._get_http_options(),
            "lro": list(LRO_TYPES.get(rpc, ())),
        }
        roots += [request, response]
    for names in LRO_TYPES.values():
        for name in names:
            roots.append(getattr(ces_v1beta, name).pb().DESCRIPTOR)
    files = _files(roots)
    base = rest_base._BaseEvaluationServiceRestTransport
    operations_http = {
        name: getattr(base, f"_Base{name}")._get_http_options()
        for name in ("GetOperation", "ListOperations", "DeleteOperation", "CancelOperation")
    }
    json.dump(
        {
            "rpcs": rpcs,
            "operations_http": operations_http,
            "roots": sorted({r.full_name for r in roots}),
            "file_descriptor_set": base64.b64encode(files.SerializeToString()).decode(),
        },
        sys.stdout,
        indent=1,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
