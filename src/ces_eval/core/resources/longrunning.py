"""The google.longrunning.Operations service (AIP-151) over the stored operations: Get, List,
Delete, Cancel and Wait. Operations are started and run by the
:class:`~ces_eval.core.io.operations.OperationRunner` of the context; the methods that start them
live with their resources (exports, a result's metric rerun).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from ces_eval.contract import limits
from ces_eval.core.aip import names
from ces_eval.core.aip.pages import fill, page_size
from ces_eval.core.aip.standard import invalid
from ces_eval.errors import ServiceError
from ces_eval.storage.base import Cursor

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["LOCATION", "OPERATION", "RPCS"]

LOCATION = names.ResourcePattern(
    "ces.googleapis.com/Location", "projects/{project}/locations/{location}"
)
OPERATION = names.ResourcePattern(
    "longrunning.googleapis.com/Operation",
    "projects/{project}/locations/{location}/operations/{operation}",
)
_WAIT_DEFAULT = 60.0
_WAIT_MAX = 600.0


async def get_operation(
    context: Context, request: operations_pb2.GetOperationRequest, caller: Caller
) -> operations_pb2.Operation:
    OPERATION.parse(request.name, "name", owned=0)
    operation = await context.storage.get_operation(request.name)
    if operation is None:
        raise ServiceError.not_found(OPERATION.type, request.name)
    return operation


async def list_operations(
    context: Context, request: operations_pb2.ListOperationsRequest, caller: Caller
) -> operations_pb2.ListOperationsResponse:
    LOCATION.parse(request.name, "name", owned=0)
    size = page_size(request.page_size)
    done: bool | None = None
    text = " ".join(request.filter.split())
    if text in {"done = true", "done=true", "done:true"}:
        done = True
    elif text in {"done = false", "done=false", "done:false"}:
        done = False
    elif text:
        raise invalid("filter", "Only `done = true` and `done = false` are supported.")
    query_key = f"operations\x1f{request.name}\x1f{done}"
    tokens = context.page_tokens
    after = tokens.decode(request.page_token, query_key).name if request.page_token else None
    found = await context.storage.list_operations(
        request.name, size + 1, after, done, max_bytes=limits.MAX_PAGE_BYTES
    )
    taken = fill((operation.ByteSize() for operation in found), size, limits.MAX_PAGE_BYTES)
    response = operations_pb2.ListOperationsResponse(operations=found[:taken])
    if taken < len(found):
        last = found[taken - 1].name
        response.next_page_token = tokens.encode(query_key, Cursor(last, last))
    return response


def _done(name: str, found: bool) -> empty_pb2.Empty:
    """The empty answer of a call on operation ``name``, or NOT_FOUND when there was none."""
    if not found:
        raise ServiceError.not_found(OPERATION.type, name)
    return empty_pb2.Empty()


async def delete_operation(
    context: Context, request: operations_pb2.DeleteOperationRequest, caller: Caller
) -> empty_pb2.Empty:
    OPERATION.parse(request.name, "name", owned=0)
    return _done(request.name, await context.storage.delete_operation(request.name))


async def cancel_operation(
    context: Context, request: operations_pb2.CancelOperationRequest, caller: Caller
) -> empty_pb2.Empty:
    OPERATION.parse(request.name, "name", owned=0)
    return _done(request.name, await context.runner.cancel(request.name) is not None)


async def wait_operation(
    context: Context, request: operations_pb2.WaitOperationRequest, caller: Caller
) -> operations_pb2.Operation:
    OPERATION.parse(request.name, "name", owned=0)
    timeout = _WAIT_DEFAULT
    if request.HasField("timeout"):
        timeout = min(max(request.timeout.ToNanoseconds() / 1e9, 0.0), _WAIT_MAX)
    operation = await context.runner.wait(request.name, timeout)
    if operation is None:
        raise ServiceError.not_found(OPERATION.type, request.name)
    return operation


RPCS: dict[str, Rpc] = {
    "GetOperation": get_operation,
    "ListOperations": list_operations,
    "DeleteOperation": delete_operation,
    "CancelOperation": cancel_operation,
    "WaitOperation": wait_operation,
}
