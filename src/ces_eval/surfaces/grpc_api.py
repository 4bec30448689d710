"""The gRPC surface: routes every method the descriptors declare to the core.

Request and response classes come from the method descriptors; errors leave as
``google.rpc.Status`` in ``grpc-status-details-bin`` (via grpcio-status). A method the core does
not implement, and any method path this server does not know, answers UNIMPLEMENTED naming it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from ces_eval import schema
from ces_eval.admission import Admission
from ces_eval.core.service import Caller, Handler
from ces_eval.errors import Code, FieldViolation, ServiceError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import Tokens

__all__ = ["CALLER_METADATA", "Dispatcher"]

_log = logging.getLogger(__name__)
# The metadata key carrying the caller's identity, as Google front ends pass the authenticated
# user to backends; without it the caller is the local user.
CALLER_METADATA = "x-goog-user"
AUTHORIZATION_METADATA = "authorization"


def caller_of(context: grpc.aio.ServicerContext[Any, Any], tokens: Tokens | None) -> Caller:
    """The caller, from ``authorization: Bearer …`` (with ``--auth-tokens``) or ``x-goog-user``
    metadata."""
    authorization = user = None
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            if key == AUTHORIZATION_METADATA:
                authorization = value
            elif key == CALLER_METADATA:
                user = value
    return Caller.identify(tokens, authorization, user)


# An error travels in trailers: grpc-message (the message, percent-encoded) and
# grpc-status-details-bin (the Status, base64 on the wire). gRPC clients refuse trailers past
# 8 KiB by default (grpc.max_metadata_size; 16 KiB always), answering RESOURCE_EXHAUSTED
# "received metadata size exceeds ..." instead of our error, so an error is trimmed to this
# budget: the message and each violation cut, then violations dropped from the end (the
# message still counts them all). What remains always holds a few violations.
_TRAILER_BUDGET = 6 * 1024
_MESSAGE_BYTES = 512
_VIOLATION_BYTES = 256


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` UTF-8 bytes, ending in "…" when cut."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode(errors="ignore") + "…"


def _trailer_size(error: ServiceError) -> int:
    message = error.message.encode()
    percent_encoded = len(message) + 2 * sum(
        1 for b in message if not 0x20 <= b < 0x7F or b == 0x25
    )
    return percent_encoded + 4 * (int(error.to_status().ByteSize()) + 2) // 3


def _fitted(error: ServiceError) -> ServiceError:
    """``error`` within :data:`_TRAILER_BUDGET` (the same object when it already is)."""
    if _trailer_size(error) <= _TRAILER_BUDGET:
        return error
    fitted = replace(
        error,
        message=_cut(error.message, _MESSAGE_BYTES),
        violations=[
            FieldViolation(
                _cut(v.field, _VIOLATION_BYTES), _cut(v.description, _VIOLATION_BYTES), v.reason
            )
            for v in error.violations
        ],
    )
    while fitted.violations and _trailer_size(fitted) > _TRAILER_BUDGET:
        fitted = replace(fitted, violations=fitted.violations[: len(fitted.violations) // 2])
    return fitted


async def _abort(context: grpc.aio.ServicerContext[Any, Any], error: ServiceError) -> None:
    await context.abort_with_status(rpc_status.to_status(_fitted(error).to_status()))


def _decode(request_class: type[Message], raw: bytes) -> Message:
    try:
        return request_class.FromString(raw)
    except DecodeError as error:
        # Malformed bytes, invalid UTF-8 in a string, or messages nested deeper than protobuf's
        # recursion limit (100).
        description = f"The request is not a valid {request_class.DESCRIPTOR.full_name}."
        raise ServiceError(Code.INVALID_ARGUMENT, description, "MALFORMED_REQUEST") from error


def _unary(
    method: descriptor.MethodDescriptor, implementation: Handler | None, tokens: Tokens | None
) -> grpc.RpcMethodHandler:
    path = f"{method.containing_service.full_name}/{method.name}"
    request_class = message_factory.GetMessageClass(method.input_type)

    async def behavior(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        try:
            caller = caller_of(context, tokens)  # authenticates first, before anything is parsed
            if implementation is None:
                raise ServiceError.unimplemented(path)
            return await implementation(_decode(request_class, raw), caller)
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


def _admitted(handler: grpc.RpcMethodHandler, admission: Admission) -> grpc.RpcMethodHandler:
    """``handler`` behind the surface's in-flight limit (:mod:`ces_eval.admission`). A client's
    deadline and cancellation need nothing here: grpc.aio cancels the handler's task for both,
    and the slot comes back in ``finally``."""
    behavior = handler.unary_unary

    async def admitted(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        if not admission.enter():
            await context.abort_with_status(admission.grpc_refusal)
        try:
            response: Message = await behavior(raw, context)
        finally:
            admission.leave()
        return response

    return grpc.unary_unary_rpc_method_handler(
        admitted, response_serializer=handler.response_serializer
    )


def _unknown(path: str) -> grpc.RpcMethodHandler:
    async def behavior(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await _abort(context, ServiceError.unimplemented(path.lstrip("/")))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    return grpc.unary_unary_rpc_method_handler(behavior)


class Dispatcher(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    """Every method of our services, plus UNIMPLEMENTED for any other path.

    Register it after health checking and reflection: it answers every path it is asked for.
    """

    def __init__(
        self,
        implementations: Mapping[str, Handler],
        *,
        tokens: Tokens | None = None,
        admission: Admission | None = None,
    ) -> None:
        """``tokens``: the ``--auth-tokens`` table; every call must then authenticate.
        ``admission``: the in-flight limit of this surface (default: :data:`DEFAULT_LIMIT`)."""
        admission = admission or Admission("grpc")
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        for service in schema.services():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                handler = _unary(method, implementations.get(path), tokens)
                self._handlers[path] = _admitted(handler, admission)

    @property
    def service_names(self) -> list[str]:
        return [service.full_name for service in schema.services()]

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = str(handler_call_details.method)
        return self._handlers.get(path) or _unknown(path)
