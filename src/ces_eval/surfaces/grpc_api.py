"""The gRPC surface: routes every method the descriptors declare to the core.

Request and response classes come from the method descriptors; errors leave as
``google.rpc.Status`` in ``grpc-status-details-bin`` (via grpcio-status). A method the core does
not implement, and any method path this server does not know, answers UNIMPLEMENTED naming it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from ces_eval import logs, schema
from ces_eval.admission import Admission
from ces_eval.core.limits import ENCODED_CHECK_BYTES, LIMITS, LOOP_BYTES, off_loop
from ces_eval.core.validation import raise_if_invalid
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.identity import identify
from ces_eval.logs import Call, RequestLog

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import Tokens
    from ces_eval.core.service import Caller, Handler

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
    return identify(tokens, authorization, user)


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
    """The request in ``raw``, held to the count limits (docs/security.md, "Limits"): a large
    one on its encoding, before protobuf's decoder holds the interpreter for it, a smaller one
    right after (the smallest are left to the core's own walk). Run in a worker thread for
    all but the smallest (see ``serve``)."""
    message_type: descriptor.Descriptor = request_class.DESCRIPTOR  # type: ignore[assignment]
    size = len(raw)
    if size > ENCODED_CHECK_BYTES:
        raise_if_invalid(LIMITS.encoded_counts(message_type, raw), "request")
    try:
        request = request_class.FromString(raw)
    except DecodeError as error:
        # Malformed bytes, invalid UTF-8 in a string, or messages nested deeper than protobuf's
        # recursion limit (100).
        description = f"The request is not a valid {message_type.full_name}."
        raise ServiceError(Code.INVALID_ARGUMENT, description, "MALFORMED_REQUEST") from error
    if LOOP_BYTES < size <= ENCODED_CHECK_BYTES:
        raise_if_invalid(LIMITS.counts(request, "", size), "request")
    # Fields this contract does not declare are ignored, as a proto3 server ignores them, and
    # never kept: stored, they would be served back past every limit (docs/security.md). JSON
    # (REST, MCP, imports) refuses unknown fields, so only the binary surface can carry them.
    request.DiscardUnknownFields()
    return request


def _behavior(
    path: str,
    *,
    method: descriptor.MethodDescriptor | None,
    implementation: Handler | None,
    tokens: Tokens | None,
    admission: Admission,
    log: RequestLog | None,
) -> grpc.RpcMethodHandler:
    """The handler of one method path (``method`` None: a path no service of ours declares):
    admission (:mod:`ces_eval.admission`), authentication, decoding, the call, the error
    encoding and the request line, in that order. A client's deadline and cancellation need
    nothing here: grpc.aio cancels the handler's task for both, and the slot comes back in
    ``finally``."""
    name = path.lstrip("/")
    request_class = message_factory.GetMessageClass(method.input_type) if method else None
    resource = logs.resource_field(method) if method else ""

    async def serve(
        raw: bytes, context: grpc.aio.ServicerContext[Any, Any], call: Call | None
    ) -> Message:
        if not admission.enter():
            if call is not None:
                call.code = Code.RESOURCE_EXHAUSTED
            await context.abort_with_status(admission.grpc_refusal)
        error: ServiceError
        try:
            caller = caller_of(context, tokens)  # authenticates first, before anything is parsed
            if call is not None:
                call.caller = caller.user
            if implementation is None or request_class is None:
                raise ServiceError.unimplemented(name)
            request = await off_loop(len(raw) > LOOP_BYTES, _decode, request_class, raw)
            if call is not None and resource:
                call.resource = logs.field_value(request, resource)
            return await implementation(request, caller)
        except ServiceError as raised:
            error = raised
        except Exception:  # noqa: BLE001 - the surface boundary: any bug becomes INTERNAL, logged
            _log.exception("unexpected error in %s", name)
            error = ServiceError(Code.INTERNAL, "Internal error; see the server log.", "INTERNAL")
        finally:
            admission.leave()
        if call is not None:
            call.code = error.code
        await _abort(context, error)
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    async def quiet(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        return await serve(raw, context, None)

    finish = log.finish if log is not None else None

    async def logged(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        call = RequestLog.start("grpc", name)
        try:
            response = await serve(raw, context, call)
        except asyncio.CancelledError:
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0
            call.code = Code.DEADLINE_EXCEEDED if expired else Code.CANCELLED
            raise
        finally:
            if call.code is None:
                call.code = Code.OK
            if finish is not None:
                finish(call)
        return response

    serialize: Callable[[Message], bytes] = lambda m: m.SerializeToString()  # noqa: E731
    # Requests are parsed inside ``serve``: a malformed one is INVALID_ARGUMENT in our error
    # model, where a failing request_deserializer would answer UNKNOWN with the exception text.
    return grpc.unary_unary_rpc_method_handler(
        quiet if log is None else logged, response_serializer=serialize
    )


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
        log: RequestLog | None = None,
    ) -> None:
        """``tokens``: the ``--auth-tokens`` table; every call must then authenticate.
        ``admission``: the in-flight limit of this surface (default: :data:`DEFAULT_LIMIT`).
        ``log``: write a request line per call (:mod:`ces_eval.logs`); None: none."""
        self._tokens = tokens
        self._admission = admission = admission or Admission("grpc")
        self._log = log
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        for service in schema.services():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                self._handlers[path] = _behavior(
                    path,
                    method=method,
                    implementation=implementations.get(path),
                    tokens=tokens,
                    admission=admission,
                    log=log,
                )

    @property
    def service_names(self) -> list[str]:
        return [service.full_name for service in schema.services()]

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = str(handler_call_details.method)
        return self._handlers.get(path) or _behavior(
            path,
            method=None,
            implementation=None,
            tokens=self._tokens,
            admission=self._admission,
            log=self._log,
        )
