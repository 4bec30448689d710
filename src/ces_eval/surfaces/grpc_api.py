"""The gRPC surface: routes every method the descriptors declare to the core.

Request and response classes come from the method descriptors; errors leave as
``google.rpc.Status`` in ``grpc-status-details-bin`` (via grpcio-status), trimmed to what gRPC
trailers carry. A method the core does not implement, and any method path this server does not
know, answers UNIMPLEMENTED naming it. Only the wire is here (metadata, decoding, the status):
admission, authentication, the last-resort catch and the request line are the boundary's
(:mod:`ces_eval.surfaces.boundary`).

Each method is served by the kind its descriptor declares: unary, server streaming
(StreamRunSession) or bidirectional (BidiRunSession). A stream is admitted, authenticated and
logged once and holds its in-flight slot while it lasts; its error ends it with the status
(never a traceback). When the server drains (:meth:`Dispatcher.drain`), a bidirectional
stream's request iterator raises :class:`~ces_eval.core.aip.context.Draining`: the method says
goodbye (BidiRunSession's ``go_away``) and the stream ends, within the drain's grace.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from ces_eval import logs
from ces_eval.access import method_access
from ces_eval.admission import Admission
from ces_eval.contract import schema
from ces_eval.contract.encoded import Encoded
from ces_eval.contract.limits import (
    ENCODED_CHECK_BYTES,
    LIMITS,
    LOOP_BYTES,
    STREAM_IDLE_SECONDS,
)
from ces_eval.core.aip.context import Draining
from ces_eval.core.aip.validation import raise_if_invalid
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.offload import off_loop
from ces_eval.surfaces.boundary import Boundary, Inputs

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import BidiHandler, Caller, Handler, StreamHandler
    from ces_eval.contract.encoded import Response
    from ces_eval.core.aip.context import AnswerKeeper
    from ces_eval.logs import Call

__all__ = ["CALLER_METADATA", "Dispatcher"]

# The metadata key carrying the caller's identity, as Google front ends pass the authenticated
# user to backends; without it the caller is the local user.
CALLER_METADATA = "x-goog-user"
AUTHORIZATION_METADATA = "authorization"


def _inputs(context: grpc.aio.ServicerContext[Any, Any]) -> Inputs:
    """The credentials of a call: ``authorization: Bearer …`` and ``x-goog-user`` metadata. No
    deadline: grpc.aio enforces the client's own (it cancels the handler)."""
    authorization = user = None
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            if key == AUTHORIZATION_METADATA:
                authorization = value
            elif key == CALLER_METADATA:
                user = value
    return Inputs(authorization, user)


def _expired(context: grpc.aio.ServicerContext[Any, Any]) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


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
    message_type = schema.descriptor_of(request_class)
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


@dataclass(frozen=True, slots=True)
class _Answer:
    """A read's answer as kept (:class:`~ces_eval.core.aip.context.AnswerKeeper`), with the
    resource its request line names."""

    answer: Encoded
    resource: str

    @property
    def size(self) -> int:
        return self.answer.size


def _behavior(
    path: str,
    *,
    method: descriptor.MethodDescriptor | None,
    implementation: Handler | None,
    boundary: Boundary,
    keeper: AnswerKeeper | None = None,
) -> grpc.RpcMethodHandler:
    """The handler of one method path (``method`` None: a path no service of ours declares):
    the boundary (admission, authentication, the last-resort catch, the request line) around
    decoding and the call, then the status. A client's deadline and cancellation need nothing
    here: grpc.aio cancels the handler's task for both, and the boundary gives the slot back.
    ``keeper``: where a read method's answers of stored bytes are kept by the request's bytes
    while nothing is written."""
    name = path.lstrip("/")
    request_class = message_factory.GetMessageClass(method.input_type) if method else None
    resource = logs.resource_field(method) if method else ""
    if method is None or method_access(method).write:
        keeper = None

    async def handle(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Response:
        line = boundary.start(name)

        async def answer(
            implementation: Handler, request_class: type[Message], caller: Caller
        ) -> Response | _Answer:
            """The call's answer; an :class:`_Answer` when it is kept (stored bytes)."""
            request = await off_loop(len(raw) > LOOP_BYTES, _decode, request_class, raw)
            named = ""
            if resource and (line is not None or keeper is not None):
                named = logs.field_value(request, resource)
            if line is not None:
                line.resource = named
            response = await implementation(request, caller)
            if keeper is not None and isinstance(response, Encoded):
                return _Answer(response, named)
            return response

        async def work(caller: Caller) -> Response:
            if implementation is None or request_class is None:
                raise ServiceError.unimplemented(name)
            if keeper is None:
                result = await answer(implementation, request_class, caller)
            else:
                # The same request answered before while nothing was written: the same bytes
                # again, without decoding or calling the core. Requests of two methods may be
                # the same bytes: the key holds the method.
                compute = partial(answer, implementation, request_class, caller)
                result = await keeper.answer((name, raw), _Answer, compute)
            if not isinstance(result, _Answer):
                return result
            if line is not None:
                line.resource = result.resource
            return result.answer

        try:
            outcome = await boundary.serve(
                name, lambda: _inputs(context), work, line=line, expired=lambda: _expired(context)
            )
        finally:
            boundary.finish(line)
        if isinstance(outcome, ServiceError):
            await _abort(context, outcome)
            raise AssertionError("abort_with_status returned")  # pragma: no cover
        return outcome

    # An answer held as its wire bytes goes out as it is (ces_eval.contract.encoded).
    serialize: Callable[[Response], bytes] = lambda m: (  # noqa: E731
        m.data if isinstance(m, Encoded) else m.SerializeToString()
    )
    # Requests are parsed inside ``handle``: a malformed one is INVALID_ARGUMENT in our error
    # model, where a failing request_deserializer would answer UNKNOWN with the exception text.
    return grpc.unary_unary_rpc_method_handler(handle, response_serializer=serialize)


def _serialized(response: Response) -> bytes:
    # An answer held as its wire bytes goes out as it is (ces_eval.contract.encoded).
    return response.data if isinstance(response, Encoded) else response.SerializeToString()


async def _decoded(request_class: type[Message], raw: bytes) -> Message:
    return await off_loop(len(raw) > LOOP_BYTES, _decode, request_class, raw)


async def _streamed(
    boundary: Boundary,
    name: str,
    context: grpc.aio.ServicerContext[Any, Any],
    work: Callable[[Caller], AsyncIterator[Response]],
    line: Call | None,
) -> AsyncIterator[Response]:
    """The responses of ``work`` through the boundary (:meth:`Boundary.stream`), sent as
    they come; the error that ends the stream as its status, once its request line is done."""
    failed: ServiceError | None = None
    try:
        responses = boundary.stream(
            name, lambda: _inputs(context), work, line=line, expired=lambda: _expired(context)
        )
        try:
            async for response in responses:
                yield response
        except ServiceError as error:
            failed = error
    finally:
        boundary.finish(line)
    if failed is not None:
        await _abort(context, failed)


def _stream_behavior(
    path: str,
    method: descriptor.MethodDescriptor,
    implementation: StreamHandler,
    boundary: Boundary,
) -> grpc.RpcMethodHandler:
    """The handler of a server-streaming method: the boundary once around the whole stream
    (:meth:`Boundary.stream`), each response sent as it comes, an error as the status."""
    name = path.lstrip("/")
    request_class = message_factory.GetMessageClass(method.input_type)
    resource = logs.resource_field(method)

    async def handle(
        raw: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Response]:
        line = boundary.start(name)

        async def work(caller: Caller) -> AsyncIterator[Response]:
            request = await _decoded(request_class, raw)
            if line is not None and resource:
                line.resource = logs.field_value(request, resource)
            async for response in implementation(request, caller):
                yield response

        async for response in _streamed(boundary, name, context, work, line):
            yield response

    return grpc.unary_stream_rpc_method_handler(handle, response_serializer=_serialized)


async def _requests(
    request_class: type[Message],
    incoming: AsyncIterator[bytes],
    draining: asyncio.Event,
    idle: float,
) -> AsyncIterator[Message]:
    """The client's messages, decoded as they come; :class:`Draining` once the server drains
    (whatever the client sends meanwhile), or once the client sent nothing for ``idle``
    seconds."""
    drained = asyncio.ensure_future(draining.wait())
    reading: asyncio.Future[bytes] | None = None
    try:
        while True:
            reading = asyncio.ensure_future(anext(incoming))
            await asyncio.wait(
                (reading, drained), timeout=idle, return_when=asyncio.FIRST_COMPLETED
            )
            if not reading.done():
                raise Draining
            try:
                raw = reading.result()
            except StopAsyncIteration:
                return
            reading = None
            yield await _decoded(request_class, raw)
    finally:
        drained.cancel()
        if reading is not None and not reading.done():
            reading.cancel()


def _bidi_behavior(
    path: str,
    method: descriptor.MethodDescriptor,
    implementation: BidiHandler,
    boundary: Boundary,
    *,
    draining: asyncio.Event,
    idle: float,
) -> grpc.RpcMethodHandler:
    """The handler of a bidirectional method, as :func:`_stream_behavior`; the client's
    messages are decoded as the method reads them (:func:`_requests`)."""
    name = path.lstrip("/")
    request_class = message_factory.GetMessageClass(method.input_type)

    async def handle(
        incoming: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Response]:
        line = boundary.start(name)

        def work(caller: Caller) -> AsyncIterator[Response]:
            return implementation(_requests(request_class, incoming, draining, idle), caller)

        async for response in _streamed(boundary, name, context, work, line):
            yield response

    return grpc.stream_stream_rpc_method_handler(handle, response_serializer=_serialized)


class Dispatcher(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    """Every method of our services, plus UNIMPLEMENTED for any other path.

    Register it after health checking and reflection: it answers every path it is asked for.
    """

    def __init__(
        self,
        implementations: Mapping[str, Handler],
        *,
        boundary: Boundary | None = None,
        keeper: AnswerKeeper | None = None,
        streams: Mapping[str, StreamHandler] | None = None,
        bidi: Mapping[str, BidiHandler] | None = None,
        draining: asyncio.Event | None = None,
        stream_idle: float = STREAM_IDLE_SECONDS,
    ) -> None:
        """``boundary``: this surface's (default: an open gRPC boundary with the default
        in-flight limit, :data:`~ces_eval.admission.DEFAULT_LIMIT`, and no request log);
        ``keeper``: where read answers are kept while nothing is written (None: never);
        ``streams`` and ``bidi``: the streaming methods' implementations
        (:func:`ces_eval.core.service.stream_handlers`, ``bidi_handlers``); ``draining``: set
        when the server drains (:meth:`drain` sets it too); ``stream_idle``: seconds a
        bidirectional stream waits for its client's next message before it is closed as on a
        drain."""
        self._boundary = boundary = boundary or Boundary("grpc", admission=Admission("grpc"))
        self._draining = draining or asyncio.Event()
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        streams = streams or {}
        bidi = bidi or {}
        for path, method in schema.methods().items():
            if path in streams:
                self._handlers[path] = _stream_behavior(path, method, streams[path], boundary)
                continue
            if path in bidi:
                self._handlers[path] = _bidi_behavior(
                    path, method, bidi[path], boundary, draining=self._draining, idle=stream_idle
                )
                continue
            self._handlers[path] = _behavior(
                path,
                method=method,
                implementation=implementations.get(path),
                boundary=boundary,
                keeper=keeper,
            )

    def drain(self) -> None:
        """The server drains (SIGTERM): every bidirectional stream is told
        (:class:`~ces_eval.core.aip.context.Draining`) and ends."""
        self._draining.set()

    @property
    def service_names(self) -> list[str]:
        return [service.full_name for service in schema.services()]

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = str(handler_call_details.method)
        return self._handlers.get(path) or _behavior(
            path, method=None, implementation=None, boundary=self._boundary
        )
