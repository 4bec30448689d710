"""The REST surface: an ASGI app that transcodes HTTP/JSON to the core's methods (http.proto).

Request: path variables, then the body (``*``, one field, or none), then query parameters fill
the request message; system parameters (``$alt``, ``key``, ...) are accepted. Response: proto3
JSON in lowerCamelCase, enums as names or, with ``$alt=json;enum-encoding=int`` (what the
official client sends), as numbers. Errors: Google's JSON envelope (AIP-193).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from ces_eval.access import authorize_values
from ces_eval.admission import WATCHED_METHODS, server_timeout, until_disconnected, within
from ces_eval.core.limits import LOOP_BYTES, MAX_REQUEST_BYTES, off_loop
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.identity import identify
from ces_eval.logs import CALL_KEY
from ces_eval.transcoding import errors
from ces_eval.transcoding.body import heavy, parse_body
from ces_eval.transcoding.query import SYSTEM_PARAMETERS, QueryError, apply_query
from ces_eval.transcoding.rendering import JsonRenderer

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from google.protobuf.message import Message
    from starlette.types import Receive, Scope, Send

    from ces_eval.access import Tokens
    from ces_eval.core.service import Caller, Handler
    from ces_eval.logs import Call
    from ces_eval.transcoding.router import Route, Router

__all__ = ["MAX_BODY_BYTES", "Transcoder"]

_log = logging.getLogger(__name__)
MAX_BODY_BYTES = MAX_REQUEST_BYTES  # larger bodies get 413 (docs/security.md, Limits)
_JSON = b"application/json; charset=utf-8"
_ALT = ("$alt", "alt")
CALLER_HEADER = b"x-goog-user"
AUTHORIZATION_HEADER = b"authorization"


class _HttpError(Exception):
    def __init__(
        self,
        error: ServiceError,
        status: int | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status
        self.headers = headers or []


def _invalid(field: str, description: str) -> _HttpError:
    return _HttpError(
        ServiceError.invalid_argument(description, [FieldViolation(field, description)])
    )


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


class Transcoder:
    """ASGI app serving every HTTP binding of the router over the core's handlers."""

    def __init__(
        self, router: Router, handlers: Mapping[str, Handler], *, tokens: Tokens | None = None
    ) -> None:
        """``tokens``: the ``--auth-tokens`` table; every request must then authenticate."""
        self._router = router
        self._handlers = handlers
        self._tokens = tokens
        self._renderer = JsonRenderer()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        verb = scope["method"].upper()
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        headers: list[tuple[bytes, bytes]] = []
        line: Call | None = scope.get(CALL_KEY)  # logs.HttpRequestLog: the request line
        failed: ServiceError | None = None
        try:
            deadline = server_timeout(scope.get("headers", ()))  # admission.py: deadlines
            work = self._handle(scope, receive, verb, raw_path)
            status, body = await (work if deadline is None else within(deadline, work))
        except _HttpError as failure:
            failed = failure.error
            status, body = errors.envelope(failure.error, failure.status)
            headers = failure.headers
        except ServiceError as error:
            failed = error
            status, body = errors.envelope(error)
            headers = challenge(error)
        except Exception:  # noqa: BLE001 - the surface boundary: any bug becomes a logged 500
            _log.exception("unexpected error serving %s %s", verb, raw_path)
            failed = ServiceError(Code.INTERNAL, "Internal error; see the server log.", "INTERNAL")
            status, body = errors.envelope(failed)
        if line is not None:
            line.code = Code.OK if failed is None else failed.code
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", _JSON),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _HttpError(errors.payload_too_large(MAX_BODY_BYTES), status=413)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _handle(
        self, scope: Scope, receive: Receive, verb: str, raw_path: str
    ) -> tuple[int, bytes]:
        params = _query(scope.get("query_string", b""))
        caller = caller_of(scope, self._tokens, params)  # authenticates before routing
        line: Call | None = scope.get(CALL_KEY)  # the request line (logs.HttpRequestLog)
        if line is not None:
            line.caller = caller.user
        resolved = self._router.resolve(verb, raw_path.split("?", 1)[0])
        if isinstance(resolved, list):
            if not resolved:
                raise _HttpError(errors.not_found_path(verb, raw_path))
            if caller.principal is not None:
                # A wrong verb on a foreign resource is still a foreign resource: answer 403,
                # as for every other request a restricted token makes outside its projects.
                # An unserved official route has no method to authorize against (see below).
                other = self._router.resolve(resolved[0], raw_path.split("?", 1)[0])
                if isinstance(other, tuple):
                    authorize_values(caller.principal, other[0].binding.method, other[1])
            raise _HttpError(
                errors.method_not_allowed(verb, raw_path, resolved),
                status=405,
                headers=[(b"allow", ", ".join(resolved).encode())],
            )
        if not isinstance(resolved, tuple):
            # An official method this server does not serve yet (router.UnservedRoute): 501
            # naming it, as gRPC answers, before the body is read. Our descriptors do not declare
            # it, so the per-project authorization (which reads the method's resource fields)
            # cannot apply; the caller did authenticate above, and nothing is read or written.
            if line is not None:
                line.method = resolved.path.lstrip("/")
            raise ServiceError.unimplemented(resolved.path.lstrip("/"))
        route, variables = resolved
        if line is not None:
            line.method = route.path.lstrip("/")
            line.resource = next(iter(variables.values()), "")
        if caller.principal is not None:
            authorize_values(caller.principal, route.binding.method, variables)
        int_enums = _int_enums(params)
        data = await self._read_body(receive)
        # A large body is parsed, checked and (below) answered in a worker thread, so that the
        # event loop keeps serving every other caller meanwhile (docs/security.md, "Limits").
        large = heavy(data)
        request = await off_loop(large, self._request, route, variables, params, data)
        handler = self._handlers.get(route.path)
        if handler is None:
            raise ServiceError.unimplemented(route.path.lstrip("/"))
        call = handler(request, caller)
        if route.path in WATCHED_METHODS:  # long calls end when their client goes
            call = until_disconnected(call, receive)
        response = await call
        large = large or response.ByteSize() > LOOP_BYTES
        return 200, await off_loop(large, self._renderer.render, response, int_enums)

    @staticmethod
    def _request(
        route: Route, variables: dict[str, str], params: list[tuple[str, str]], data: bytes
    ) -> Message:
        request = route.request_class()
        body_field = route.binding.body
        if body_field:
            if not data.strip():
                data = b"{}"
            if body_field == "*":
                parse_body(data, request, "")
            else:
                parse_body(data, getattr(request, body_field), body_field)
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


def _query(raw: bytes) -> list[tuple[str, str]]:
    """Decoded (name, value) pairs in order; ``+`` is a space and escapes are UTF-8."""
    try:
        return parse_qsl(
            raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict"
        )
    except UnicodeDecodeError as error:
        raise _invalid(
            "query", "The query string is not valid UTF-8 after percent-decoding."
        ) from error


def caller_of(
    scope: Scope, tokens: Tokens | None, params: Sequence[tuple[str, str]] = ()
) -> Caller:
    """The caller, from ``Authorization: Bearer …`` or the ``access_token`` system parameter
    (with ``--auth-tokens``), or ``x-goog-user``."""
    authorization = user = None
    for key, value in scope.get("headers", []):
        if key == AUTHORIZATION_HEADER:
            authorization = value.decode("latin-1")
        elif key == CALLER_HEADER:
            user = value.decode("utf-8", "replace")
    if authorization is None and tokens is not None:
        token = next((v for k, v in params if k == "access_token"), None)
        authorization = f"Bearer {token}" if token else None
    return identify(tokens, authorization, user)


def challenge(error: ServiceError) -> list[tuple[bytes, bytes]]:
    """``WWW-Authenticate`` for a 401 (RFC 6750 §3): a bare challenge when no credentials came,
    ``error="invalid_token"`` when they were wrong."""
    if error.code is not Code.UNAUTHENTICATED:
        return []
    value = 'Bearer realm="ces-eval"'
    if error.reason != "CREDENTIALS_MISSING":
        value += ', error="invalid_token"'
    return [(b"www-authenticate", value.encode())]
