"""The REST surface: an ASGI app that transcodes HTTP/JSON to the core's methods (http.proto).

Request: path variables, then the body (``*``, one field, or none), then query parameters fill
the request message; system parameters (``$alt``, ``key``, ...) are accepted. Response: proto3
JSON in lowerCamelCase, enums as names or, with ``$alt=json;enum-encoding=int`` (what the
official client sends), as numbers. Errors: Google's JSON envelope (AIP-193), written by
:func:`ces_eval.surfaces.asgi.send_error`.

Only the wire is here: admission, authentication (``Authorization``, or the ``access_token``
system parameter), the ``X-Server-Timeout`` deadline, the last-resort catch and the request
line's code are the boundary's (:mod:`ces_eval.surfaces.boundary`); the body arrives read and
bounded (:class:`~ces_eval.surfaces.http_app.BodyLimit`, :func:`~ces_eval.surfaces.asgi.body_of`).
The templates, router, query and body parsing and rendering are :mod:`ces_eval.transcoding`.

A server-streaming method (StreamRunSession) answers as Google's REST streaming does (what
google.api_core's ``rest_streaming.ResponseIterator`` reads): HTTP 200 and a JSON array written
element by element as the responses come (``[{…}``, ``,{…}``, ..., ``]``). An error before the
first response is an ordinary error answer; one after it is the array's last element, Google's
error envelope (``{"error": {…}}``), before the ``]``. A client that disconnects cancels the
stream (its slot is given back at once).

The routes served are our bindings of the methods the core implements (:func:`served_bindings`);
every other official binding, including those of methods our descriptors declare but the core
does not implement yet, answers 501 UNIMPLEMENTED before anything is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from ces_eval.access import VariableFields, authorize
from ces_eval.admission import WATCHED_METHODS, server_timeout, until_disconnected
from ces_eval.contract import schema
from ces_eval.contract.encoded import Encoded, message_of
from ces_eval.contract.limits import LOOP_BYTES
from ces_eval.core.service import implements
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.logs import CALL_KEY
from ces_eval.offload import off_loop
from ces_eval.surfaces.asgi import body_of, credentials, send_error, send_json
from ces_eval.surfaces.boundary import Boundary, Inputs
from ces_eval.transcoding import errors
from ces_eval.transcoding.body import heavy, parse_body
from ces_eval.transcoding.errors import envelope
from ces_eval.transcoding.query import SYSTEM_PARAMETERS, QueryError, apply_query
from ces_eval.transcoding.rendering import JsonRenderer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from google.protobuf.message import Message
    from starlette.types import Receive, Scope, Send

    from ces_eval.access import Caller, Handler, StreamHandler
    from ces_eval.core.aip.context import AnswerKeeper
    from ces_eval.logs import Call
    from ces_eval.transcoding.router import Route, Router

__all__ = ["Transcoder", "served_bindings"]

_ALT = ("$alt", "alt")


def _invalid(field: str, description: str) -> ServiceError:
    return ServiceError.invalid_argument(description, [FieldViolation(field, description)])


def _int_enums(params: list[tuple[str, str]]) -> bool:
    """``$alt=json;enum-encoding=int`` asks for enums as numbers; other ``$alt`` forms than JSON
    are refused."""
    int_enums = False
    for name, value in params:
        if name not in _ALT:
            continue
        parts = [p.strip() for p in value.split(";")]
        if parts[0] not in {"json", ""}:
            raise _invalid(name, f"Unsupported {name} {value!r}; only json is served.")
        for option in parts[1:]:
            if option == "enum-encoding=int":
                int_enums = True
            elif option:
                raise _invalid(name, f"Unsupported {name} option {option!r}.")
    return int_enums


def served_bindings() -> tuple[schema.HttpBinding, ...]:
    """Our HTTP bindings of the methods the core implements: the routes of this surface (its
    :class:`~ces_eval.transcoding.router.Router`) and the operations of the OpenAPI document.
    The official bindings of every other method become the router's 501 routes
    (:func:`ces_eval.contract.schema.unserved_bindings`)."""
    return tuple(binding for binding in schema.http_bindings() if implements(binding.method))


class Transcoder:
    """ASGI app serving every HTTP binding of the router over the core's handlers, behind
    ``boundary`` (default: an open REST boundary without an in-flight limit)."""

    def __init__(
        self,
        router: Router,
        handlers: Mapping[str, Handler],
        boundary: Boundary | None = None,
        keeper: AnswerKeeper | None = None,
        streams: Mapping[str, StreamHandler] | None = None,
    ) -> None:
        """``keeper``: where GET answers are kept by path and query while nothing is written
        (None: never; an open server's, :class:`~ces_eval.core.aip.context.AnswerKeeper`);
        ``streams``: the server-streaming methods' implementations."""
        self._router = router
        self._handlers = handlers
        self._streams = streams or {}
        self._boundary = boundary or Boundary("rest")
        self._renderer = JsonRenderer()
        self._keeper = keeper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        verb, raw_path = _target(scope)
        params: list[tuple[str, str]] = []

        def inputs() -> Inputs:
            deadline = server_timeout(scope.get("headers", ()))  # admission.py: deadlines
            params.extend(_query(scope.get("query_string", b"")))
            # A token in the query is read only where tokens are: an open server ignores it.
            given = params if self._boundary.tokens is not None else ()
            authorization, user = credentials(scope, given)
            return Inputs(authorization, user, deadline)

        async def work(caller: Caller) -> bytes:
            return await self._handle(scope, receive, raw_path, params, caller)

        line: Call | None = scope.get(CALL_KEY)  # logs.HttpRequestLog: the request line
        if self._streams:
            resolved = self._router.resolve(verb, raw_path.split("?", 1)[0])
            if isinstance(resolved, tuple) and resolved[0].path in self._streams:
                streamed = self._streamed(
                    scope, send=send, resolved=resolved, params=params, inputs=inputs, line=line
                )
                await until_disconnected(streamed, receive)
                return
        outcome = await self._boundary.serve(f"{verb} {raw_path}", inputs, work, line=line)
        if isinstance(outcome, ServiceError):
            await send_error(scope, send, outcome)
        else:
            await send_json(send, 200, outcome, line=line)

    async def _streamed(
        self,
        scope: Scope,
        *,
        send: Send,
        resolved: tuple[Route, dict[str, str]],
        params: list[tuple[str, str]],
        inputs: Callable[[], Inputs],
        line: Call | None,
    ) -> None:
        """A server-streaming call, answered as the module says."""
        verb, raw_path = _target(scope)
        route, variables = resolved
        handler = self._streams[route.path]
        if line is not None:
            line.method = route.path.lstrip("/")
            line.resource = next(iter(variables.values()), "")
        int_enums = False

        async def work(caller: Caller) -> AsyncIterator[bytes]:
            nonlocal int_enums
            if caller.principal is not None:
                authorize(caller.principal, route.binding.method, VariableFields(variables))
            int_enums = _int_enums(params)
            data = body_of(scope)
            large = heavy(data)
            request = await off_loop(large, self._request, route, variables, params, data)
            async for response in handler(request, caller):
                message = message_of(response)
                large = message.ByteSize() > LOOP_BYTES
                yield await off_loop(large, self._renderer.render, message, int_enums)

        started = False
        responses = self._boundary.stream(f"{verb} {raw_path}", inputs, work, line=line)
        try:
            async for rendered in responses:
                if not started:
                    started = True
                    if line is not None:
                        line.status = 200
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [(b"content-type", b"application/json; charset=utf-8")],
                        }
                    )
                    await send(
                        {"type": "http.response.body", "body": b"[" + rendered, "more_body": True}
                    )
                else:
                    await send(
                        {"type": "http.response.body", "body": b"," + rendered, "more_body": True}
                    )
        except ServiceError as error:
            if not started:
                await send_error(scope, send, error)
                return
            # After the first response the status is sent: the error is the array's last
            # element, in Google's envelope (its HTTP status inside).
            _, body = envelope(error)
            await send({"type": "http.response.body", "body": b"," + body + b"]"})
            return
        if not started:
            if line is not None:
                line.status = 200
            await send_json(send, 200, b"[]", line=line)
            return
        await send({"type": "http.response.body", "body": b"]"})

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        raw_path: str,
        params: list[tuple[str, str]],
        caller: Caller,
    ) -> bytes:
        keeper = self._keeper
        if keeper is None or scope["method"] != "GET":
            result = await self._answer(scope, receive, params, caller)
        else:
            # The same GET answered before while nothing was written: its rendering again,
            # without routing, parsing or calling the core.
            key = (raw_path, scope.get("query_string", b""))
            answer = partial(self._answer, scope, receive, params, caller)
            result = await keeper.answer(key, _Answer, answer)
            line: Call | None = scope.get(CALL_KEY)
            if line is not None and isinstance(result, _Answer):
                line.method, line.resource = result.method, result.resource
        return result if isinstance(result, bytes) else result.body

    async def _answer(
        self, scope: Scope, receive: Receive, params: list[tuple[str, str]], caller: Caller
    ) -> _Answer | bytes:
        """The call's JSON answer: an :class:`_Answer` when it holds while nothing is written
        (an answer of stored bytes), else its bytes alone."""
        verb, raw_path = _target(scope)
        line: Call | None = scope.get(CALL_KEY)
        resolved = self._router.resolve(verb, raw_path.split("?", 1)[0])
        if isinstance(resolved, list):
            if not resolved:
                raise errors.not_found_path(verb, raw_path)
            if caller.principal is not None:
                # A wrong verb on a foreign resource is still a foreign resource: answer 403,
                # as for every other request a restricted token makes outside its projects.
                # An unserved official route has no method to authorize against (see below).
                other = self._router.resolve(resolved[0], raw_path.split("?", 1)[0])
                served = isinstance(other, tuple) and (
                    other[0].path in self._handlers or other[0].path in self._streams
                )
                if isinstance(other, tuple) and served:
                    authorize(caller.principal, other[0].binding.method, VariableFields(other[1]))
            raise errors.method_not_allowed(verb, raw_path, resolved)  # 405 with Allow
        if not isinstance(resolved, tuple):
            # An official method this server does not serve yet (router.UnservedRoute): 501
            # naming it, as gRPC answers, before the body is parsed. The per-project
            # authorization (which reads the method's resource fields) does not apply, as gRPC
            # authorizes only implemented methods; the caller did authenticate, and nothing is
            # read or written.
            if line is not None:
                line.method = resolved.path.lstrip("/")
            raise ServiceError.unimplemented(resolved.path.lstrip("/"))
        route, variables = resolved
        method, resource = route.path.lstrip("/"), next(iter(variables.values()), "")
        if line is not None:
            line.method, line.resource = method, resource
        handler = self._handlers.get(route.path)
        if handler is None:
            # A route of a method the core does not implement (a router over more than
            # served_bindings()): 501 before authorization and parsing, as for an unserved
            # official route above and as gRPC answers.
            raise ServiceError.unimplemented(route.path.lstrip("/"))
        if caller.principal is not None:
            authorize(caller.principal, route.binding.method, VariableFields(variables))
        int_enums = _int_enums(params)
        data = body_of(scope)
        # A large body is parsed, checked and (below) answered in a worker thread, so that the
        # event loop keeps serving every other caller meanwhile (docs/security.md, "Limits").
        large = heavy(data)
        request = await off_loop(large, self._request, route, variables, params, data)
        call = handler(request, caller)
        if route.path in WATCHED_METHODS:  # long calls end when their client goes
            call = until_disconnected(call, receive)
        response = await call
        renderer = self._renderer
        if isinstance(response, Encoded):
            # Remembered renderings are joined on the loop; anything to render goes to a
            # worker thread when large.
            rendered = renderer.cached_encoded(response, int_enums)
            if rendered is None:
                large = large or response.size > LOOP_BYTES
                rendered = await off_loop(large, renderer.render_encoded, response, int_enums)
            return _Answer(rendered, method, resource)
        large = large or response.ByteSize() > LOOP_BYTES
        return await off_loop(large, renderer.render, response, int_enums)

    @staticmethod
    def _request(
        route: Route, variables: dict[str, str], params: list[tuple[str, str]], data: bytes
    ) -> Message:
        request = route.request_class()
        body_field = route.binding.body
        if body_field:
            given = bool(data.strip())
            if body_field == "*":
                parse_body(data if given else b"{}", request, "")
            elif given:
                # A body given for a message field sets that field, even as ``{}``: grpc-gateway
                # allocates the message before decoding into it, and gRPC's encoding of an empty
                # message present is the field's tag alone, so the core sees it present on every
                # surface. An empty body leaves the field unset (grpc-gateway likewise).
                target = getattr(request, body_field)
                parse_body(data, target, body_field)
                target.SetInParent()
        elif data.strip():
            raise _invalid(
                "body", f"{route.binding.verb} {route.binding.template} takes no request body."
            )
        try:
            apply_query(request, list(variables.items()))
        except QueryError as error:
            raise _invalid(error.field_path or error.parameter, error.description) from error
        user_params = [(k, v) for k, v in params if k not in SYSTEM_PARAMETERS]
        if body_field == "*" and user_params:
            names = ", ".join(sorted({k for k, _ in user_params}))
            raise _invalid(
                user_params[0][0],
                f"Unknown query parameter(s) {names}: this method takes every field in the body.",
            )
        bound = [*variables, *([body_field] if body_field else [])]
        try:
            apply_query(request, user_params, bound=bound)
        except QueryError as error:
            raise _invalid(error.parameter, error.description) from error
        return request


@dataclass(frozen=True, slots=True)
class _Answer:
    """A call's JSON answer of stored bytes, which holds while nothing is written (a GET's is
    kept, :class:`~ces_eval.core.aip.context.AnswerKeeper`), with what its request line names."""

    body: bytes
    method: str
    resource: str

    @property
    def size(self) -> int:
        return len(self.body)


async def _part(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


def _target(scope: Scope) -> tuple[str, str]:
    """The request's verb and raw path (as sent: percent-escapes kept for the router)."""
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    return scope["method"].upper(), raw_path


def _query(raw: bytes) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs in order; ``+`` is a space and escapes are UTF-8."""
    if not raw:
        return []
    try:
        return parse_qsl(
            raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict"
        )
    except UnicodeDecodeError as error:
        raise _invalid(
            "query", "The query string is not valid UTF-8 after percent-decoding."
        ) from error
