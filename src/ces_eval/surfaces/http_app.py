"""The HTTP surface (ASGI, served by uvicorn): readiness, the OpenAPI document, MCP and REST.

``/healthz``, ``/openapi.json`` and ``/mcp`` (MCP Streamable HTTP) are plain routes; every other
request goes to the REST transcoder, which owns its own 404/405 answers in Google's error format.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from starlette.requests import Request
    from starlette.types import ASGIApp

__all__ = ["build_app"]


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
        routes.append(Route("/mcp", mcp))
    app = Starlette(routes=routes, lifespan=lifespan)
    if rest is not None:
        app.router.default = rest  # requests no route above matches
    return app
