"""The HTTP surface (ASGI, served by uvicorn): readiness now; the REST API joins it later."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.requests import Request

__all__ = ["build_app"]


def build_app(ready: Callable[[], bool]) -> Starlette:
    """``GET /healthz``: 200 once every listener accepts connections, 503 before and while
    draining, so load balancers and test harnesses can poll it."""

    async def healthz(request: Request) -> JSONResponse:
        if ready():
            return JSONResponse({"status": "SERVING"})
        return JSONResponse({"status": "NOT_SERVING"}, status_code=503)

    return Starlette(routes=[Route("/healthz", healthz, methods=["GET"])])
