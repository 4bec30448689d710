"""The gRPC surface: routes every method the descriptors declare to the core.

Request and response classes come from the method descriptors; errors leave as
``google.rpc.Status`` in ``grpc-status-details-bin`` (via grpcio-status). A method the core does
not implement, and any method path this server does not know, answers UNIMPLEMENTED naming it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from ces_eval import schema
from ces_eval.core.service import DEFAULT_USER, Caller, Handler
from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from google.protobuf import descriptor
    from google.protobuf.message import Message

__all__ = ["CALLER_METADATA", "Dispatcher"]

_log = logging.getLogger(__name__)
# The metadata key carrying the caller's identity, as Google front ends pass the authenticated
# user to backends; without it the caller is the local user.
CALLER_METADATA = "x-goog-user"


def caller_of(context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
    for key, value in context.invocation_metadata() or ():
        if key == CALLER_METADATA and isinstance(value, str) and value.strip():
            return Caller(user=value.strip())
    return Caller(user=DEFAULT_USER)


async def _abort(context: grpc.aio.ServicerContext[Any, Any], error: ServiceError) -> None:
    await context.abort_with_status(rpc_status.to_status(error.to_status()))


def _decode(request_class: type[Message], raw: bytes) -> Message:
    try:
        return request_class.FromString(raw)
    except DecodeError as error:
        # Malformed bytes, invalid UTF-8 in a string, or messages nested deeper than protobuf's
        # recursion limit (100).
        description = f"The request is not a valid {request_class.DESCRIPTOR.full_name}."
        raise ServiceError(Code.INVALID_ARGUMENT, description, "MALFORMED_REQUEST") from error


def _unary(
    method: descriptor.MethodDescriptor, implementation: Handler | None
) -> grpc.RpcMethodHandler:
    path = f"{method.containing_service.full_name}/{method.name}"
    request_class = message_factory.GetMessageClass(method.input_type)

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        try:
            if implementation is None:
                raise ServiceError.unimplemented(path)
            return await implementation(_decode(request_class, raw), caller_of(context))
        except ServiceError as error:
            await _abort(context, error)
        except Exception:  # noqa: BLE001 - the surface boundary: any bug becomes INTERNAL, logged
            _log.exception("unexpected error in %s", path)
            await _abort(
                context,
                ServiceError(Code.INTERNAL, "Internal error; see the server log.", "INTERNAL"),
            )
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    serialize: Callable[[Message], bytes] = lambda m: m.SerializeToString()  # noqa: E731
    # Requests are parsed inside ``behavior``: a malformed one is INVALID_ARGUMENT in our error
    # model, where a failing request_deserializer would answer UNKNOWN with the exception text.
    return grpc.unary_unary_rpc_method_handler(behavior, response_serializer=serialize)


def _unknown(path: str) -> grpc.RpcMethodHandler:
    async def behavior(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await _abort(context, ServiceError.unimplemented(path.lstrip("/")))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    return grpc.unary_unary_rpc_method_handler(behavior)


class Dispatcher(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    """Every method of our services, plus UNIMPLEMENTED for any other path.

    Register it after health checking and reflection: it answers every path it is asked for.
    """

    def __init__(self, implementations: Mapping[str, Handler]) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        for service in schema.services():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                self._handlers[path] = _unary(method, implementations.get(path))

    @property
    def service_names(self) -> list[str]:
        return [service.full_name for service in schema.services()]

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = str(handler_call_details.method)
        return self._handlers.get(path) or _unknown(path)
