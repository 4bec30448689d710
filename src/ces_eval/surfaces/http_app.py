"""The HTTP surface (ASGI, served by uvicorn): readiness, the OpenAPI document, MCP and REST.

``/healthz``, ``/openapi.json`` and ``/mcp`` (MCP Streamable HTTP) are plain routes; every other
request goes to the REST transcoder, which owns its own 404/405 answers in Google's error format.
``/mcp`` bodies are limited like REST bodies (:class:`BodyLimit`).
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ces_eval.core.limits import MAX_REQUEST_BYTES
from ces_eval.transcoding import errors

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit", "build_app"]


class BodyLimit:
    """``app`` refusing HTTP request bodies over ``limit`` bytes with 413 and Google's error
    envelope (RESOURCE_EXHAUSTED, ``REQUEST_BODY_TOO_LARGE``), as the REST transcoder does.

    Never more than ``limit`` bytes (plus one chunk) are held: a declared Content-Length over
    the limit is refused before any of the body is read; otherwise the body is read and counted
    chunk by chunk (chunked uploads declare no length), refused as soon as it passes the limit,
    and replayed to ``app`` once complete. uvicorn discards whatever of a refused body is still
    on the way. A class, not a function: Starlette's ``Route`` mounts instances as ASGI apps.
    """

    def __init__(self, app: ASGIApp, limit: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _content_length(scope) > self.limit:
            await self._refuse(send)
            return
        received: deque[Message] = deque()
        size = 0
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the app sees that too
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return received.popleft() if received else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        status, body = errors.envelope(errors.payload_too_large(self.limit), 413)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int:
    """The declared body length; -1 when absent or unreadable (the server rejects malformed
    lengths itself; a chunked body is counted as it arrives)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return -1


def build_app(
    ready: Callable[[], Awaitable[str | None]],
    rest: ASGIApp | None = None,
    openapi: dict[str, Any] | None = None,
    mcp: ASGIApp | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """``GET /healthz``: 200 once every listener accepts connections and the database answers,
    503 otherwise (before start-up ends, while draining, while the database is away), so load
    balancers and test harnesses can poll it. ``ready`` returns None when serving, else why
    not. ``lifespan`` encloses serving (the MCP session manager's run context)."""

    async def healthz(request: Request) -> JSONResponse:
        problem = await ready()
        if problem is None:
            return JSONResponse({"status": "SERVING"})
        return JSONResponse({"status": "NOT_SERVING", "reason": problem}, status_code=503)

    routes = [Route("/healthz", healthz, methods=["GET"])]
    if openapi is not None:
        document = json.dumps(openapi, ensure_ascii=False).encode()

        async def openapi_json(request: Request) -> Response:
            return Response(document, media_type="application/json")

        routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))
    if mcp is not None:
        routes.append(Route("/mcp", BodyLimit(mcp)))
    app = Starlette(routes=routes, lifespan=lifespan)
    if rest is not None:
        app.router.default = rest  # requests no route above matches
    return app
