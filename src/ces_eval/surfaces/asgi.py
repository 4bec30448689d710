"""What every HTTP answer of an error shares (REST, ``/mcp`` and the middleware in front of
both), and the request parts they all read: written once here.

:func:`send_error` is the one ASGI error writer: the HTTP status and extra headers come from one
table (:func:`http_answer`), the body is Google's JSON error envelope, or its JSON-RPC form for
``/mcp`` requests MCP never read, and the request line (:mod:`ces_eval.logs`) gets the error's
canonical code. :data:`BODY_KEY` carries the request body that
:class:`~ces_eval.surfaces.http_app.BodyLimit` read, bounded and joined, to the surface behind
it, which never reads ``receive`` for it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ces_eval.admission import RETRY_AFTER_SECONDS
from ces_eval.errors import Code, ServiceError
from ces_eval.logs import CALL_KEY, Call
from ces_eval.transcoding import errors

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from starlette.types import Scope, Send

__all__ = [
    "AUTHORIZATION_HEADER",
    "BODY_KEY",
    "CALLER_HEADER",
    "body_of",
    "credentials",
    "http_answer",
    "send_error",
    "send_json",
]

AUTHORIZATION_HEADER: Final = b"authorization"
# The caller's identity, as Google front ends pass the authenticated user to backends; without
# it (and without --auth-tokens) the caller is the local user.
CALLER_HEADER: Final = b"x-goog-user"
# The ASGI scope key of the request body BodyLimit read (bytes, b"" for none).
BODY_KEY: Final = "ces_eval.body"
_JSON = b"application/json; charset=utf-8"
# The answers HTTP has and gRPC lacks, by ErrorInfo reason: the canonical code's mapping
# (errors.Code) applies to every other error.
_HTTP_STATUS = {
    "METHOD_NOT_ALLOWED": 405,
    "REQUEST_BODY_TIMEOUT": 408,
    "REQUEST_BODY_TOO_LARGE": 413,
    "UNSUPPORTED_CONTENT_TYPE": 415,
    "HOST_NOT_ALLOWED": 421,
}


def http_answer(error: ServiceError) -> tuple[int, list[tuple[bytes, bytes]]]:
    """The HTTP status of ``error`` and the headers that go with it: ``WWW-Authenticate`` for a
    401 (RFC 6750 §3: a bare challenge when no credentials came, ``error="invalid_token"`` when
    they were wrong), ``Allow`` for a 405, ``Retry-After`` for an admission refusal (429) and
    ``Connection: close`` for a body that did not arrive in time (408: the rest of it may still
    come)."""
    status = _HTTP_STATUS.get(error.reason, error.code.http_status)
    headers: list[tuple[bytes, bytes]] = []
    if error.code is Code.UNAUTHENTICATED:
        value = 'Bearer realm="ces-eval"'
        if error.reason != "CREDENTIALS_MISSING":
            value += ', error="invalid_token"'
        headers.append((b"www-authenticate", value.encode()))
    elif error.reason == "METHOD_NOT_ALLOWED":
        allowed = error.metadata.get("allowed", "")
        headers.append((b"allow", ", ".join(allowed.split(",")).encode()))
    elif error.reason == "TOO_MANY_REQUESTS":
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    elif error.reason == "REQUEST_BODY_TIMEOUT":
        headers.append((b"connection", b"close"))
    return status, headers


async def send_json(
    send: Send,
    status: int,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    line: Call | None = None,
) -> None:
    """Answer ``body`` (JSON) with ``status`` and ``headers`` besides Content-Type and
    Content-Length; the request line ``line``, if any, records the status."""
    await send_body(send, status, _JSON, body, headers, line=line)


async def send_body(
    send: Send,
    status: int,
    content_type: bytes,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    line: Call | None = None,
) -> None:
    """Answer ``body`` of ``content_type`` with ``status`` and ``headers`` besides
    Content-Type and Content-Length; the request line ``line``, if any, records the status."""
    if line is not None:
        line.status = status
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(
    scope: Scope, send: Send, error: ServiceError, *, jsonrpc: bool = False
) -> None:
    """Answer ``error`` (:func:`http_answer`): Google's error envelope, or with ``jsonrpc`` (an
    ``/mcp`` request refused before MCP read it) its JSON-RPC form
    (:func:`~ces_eval.transcoding.errors.jsonrpc_envelope`). The request line, if any, records
    the error's code (408, 413, 421 and 415 have no canonical code of their own)."""
    call = scope.get(CALL_KEY)
    line = call if isinstance(call, Call) else None
    if line is not None:
        line.code = error.code
    status, headers = http_answer(error)
    _, body = (errors.jsonrpc_envelope if jsonrpc else errors.envelope)(error, status)
    await send_json(send, status, body, headers, line=line)


def credentials(
    scope: Scope, params: Iterable[tuple[str, str]] = ()
) -> tuple[str | None, str | None]:
    """The ``Authorization`` value and the ``x-goog-user`` value of an HTTP request (None when
    absent). Without the header, a token given as the ``access_token`` query parameter (of the
    decoded ``params``) is a bearer token, as Google's APIs take it."""
    authorization = user = None
    for key, value in scope.get("headers", ()):
        if key == AUTHORIZATION_HEADER:
            authorization = value.decode("latin-1")
        elif key == CALLER_HEADER:
            user = value.decode("utf-8", "replace")
    if authorization is None:
        token = next((value for key, value in params if key == "access_token"), None)
        authorization = f"Bearer {token}" if token else None
    return authorization, user


def body_of(scope: Scope) -> bytes:
    """The request body :class:`~ces_eval.surfaces.http_app.BodyLimit` read for this request.
    A surface mounted without it is a wiring fault: it fails (INTERNAL) rather than read an
    unbounded body itself."""
    body = scope.get(BODY_KEY)
    if not isinstance(body, bytes):
        raise RuntimeError("the HTTP surfaces must be mounted behind BodyLimit")
    return body
