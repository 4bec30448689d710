"""The HTTP surface (ASGI, served by uvicorn): readiness, the OpenAPI document, MCP and REST.

``/healthz``, ``/openapi.json`` and ``/mcp`` (MCP Streamable HTTP) are plain routes; every other
request goes to the REST transcoder, which owns its own 404/405 answers in Google's error format.
REST and ``/mcp`` bodies are read once, whole, bounded in size and time, before the surface (and
its admission) sees the request, and handed on joined (:class:`BodyLimit`). Every request,
whatever its path, first passes :class:`BrowserGuard`: web pages must not drive a local server
(docs/security.md, "Web pages").
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ces_eval import logs
from ces_eval.admission import SERVER_TIMEOUT_HEADER
from ces_eval.connections import Timeouts
from ces_eval.contract.limits import MAX_REQUEST_BYTES
from ces_eval.errors import Code, ServiceError
from ces_eval.surfaces.asgi import AUTHORIZATION_HEADER, BODY_KEY, CALLER_HEADER, send_error
from ces_eval.transcoding import errors

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "UI_PATH",
    "BodyLimit",
    "BrowserGuard",
    "BrowserRules",
    "build_app",
    "host_name",
    "origin_key",
]

MCP_PATH = "/mcp"
UI_PATH = "/ui"  # the web view (surfaces/web_ui.py)


class BodyLimit:
    """``app`` behind a complete request body: read here, once, bounded in size and in time,
    and handed to ``app`` joined, in the scope (:data:`~ces_eval.surfaces.asgi.BODY_KEY`, read
    with :func:`~ces_eval.surfaces.asgi.body_of`; ``app`` never reads ``receive`` for it). In
    front of admission, a body still arriving holds no slot (docs/security.md, "Connections").

    **Size.** Bodies over ``limit`` bytes get 413 and Google's error envelope
    (RESOURCE_EXHAUSTED, ``REQUEST_BODY_TOO_LARGE``), as the REST transcoder answers. Never
    more than ``limit`` bytes (plus one chunk) are held: a declared Content-Length over the
    limit is refused before any of the body is read; otherwise the body is counted chunk by
    chunk (chunked uploads declare no length) and refused as soon as it passes the limit.
    uvicorn discards whatever of a refused body is still on the way (for at most the header
    timeout, :mod:`ces_eval.connections`).

    **Time.** The body must be complete by :meth:`~ces_eval.connections.Timeouts.body_deadline`
    (10 s, plus a second per 16 KiB received), else 408 (DEADLINE_EXCEEDED,
    ``REQUEST_BODY_TIMEOUT``) and the connection is closed: a client sending a byte a second
    holds neither a slot nor a connection for long.

    A request without a body (no Content-Length or a zero one, no Transfer-Encoding) goes to
    ``app`` with an empty one, at once; a client gone before its body is complete gets nothing
    (no app runs). A class, not a function: Starlette's ``Route`` mounts instances as ASGI apps.
    ``jsonrpc`` (``/mcp``): refusals are JSON-RPC errors carrying that envelope's error
    (:func:`~ces_eval.surfaces.asgi.send_error`).
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int = MAX_REQUEST_BYTES,
        *,
        jsonrpc: bool = False,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.app = app
        self.limit = limit
        self.jsonrpc = jsonrpc
        self.timeouts = timeouts or Timeouts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _body_headers(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(scope, send, errors.payload_too_large(self.limit))
            return
        if not chunked and not declared:  # no body: nothing to wait for
            scope[BODY_KEY] = b""  # the scope is this request's own (ASGI): no copy
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        start = asyncio.get_running_loop().time()
        bound = asyncio.timeout_at(self.timeouts.body_deadline(start, 0))
        try:
            async with bound:
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away: nobody to answer
                    chunk = message.get("body", b"")
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.limit:
                        await self._refuse(scope, send, errors.payload_too_large(self.limit))
                        return
                    if not message.get("more_body", False):
                        break
                    bound.reschedule(self.timeouts.body_deadline(start, size))
        except TimeoutError:
            if not bound.expired():
                raise
            elapsed = asyncio.get_running_loop().time() - start
            timeouts = self.timeouts
            late = errors.request_body_timeout(size, elapsed, timeouts.body, timeouts.body_rate)
            # The rest of the body may still come: the answer closes the connection.
            await self._refuse(scope, send, late)
            return
        scope[BODY_KEY] = b"".join(chunks)
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, send: Send, error: ServiceError) -> None:
        await send_error(scope, send, error, jsonrpc=self.jsonrpc)


def _body_headers(scope: Scope) -> tuple[int | None, bool]:
    """The declared body length (None when absent or unreadable: the server rejects malformed
    lengths itself) and whether a Transfer-Encoding is given (a chunked body is counted as it
    arrives)."""
    declared: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                declared = None
        elif name == b"transfer-encoding":
            chunked = True
    return declared, chunked


# -- web pages ------------------------------------------------------------------------------------

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The addresses every server answers on: a browser cannot be made to send these names for a
# page of another site.
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN = 200  # characters of a refused header quoted back in the error
# What a preflight may ask for: the methods of the HTTP bindings and the headers Google's clients
# and MCP clients send (a browser checks each requested header against this list itself).
_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, HEAD, POST, PATCH, DELETE"),
    (
        b"access-control-allow-headers",
        b", ".join(
            [
                b"content-type",
                AUTHORIZATION_HEADER,
                CALLER_HEADER,
                SERVER_TIMEOUT_HEADER,
                b"x-goog-api-client",
                b"x-goog-request-params",
                b"x-goog-user-project",
                b"mcp-protocol-version",
                b"mcp-session-id",
            ]
        ),
    ),
    (b"access-control-max-age", b"600"),
    (b"vary", b"Origin"),
]


@functools.lru_cache(maxsize=256)  # called per request for the connection's own address
def host_name(text: str) -> str | None:
    """``text`` (a DNS name or an IP address, no port) as the Host rule compares it: lower
    case, without a trailing dot, IPv6 in brackets and compressed (``[::1]``); None when it is
    neither a name nor an address."""
    name = text.strip().lower().rstrip(".")
    inner = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if ":" in inner:
        try:
            return f"[{ipaddress.IPv6Address(inner.split('%', 1)[0]).compressed}]"
        except ValueError:
            return None
    return name if _NAME.fullmatch(name) else None


@functools.lru_cache(maxsize=256)  # a server sees few distinct Host values
def _authority(text: str) -> tuple[str, int | None] | None:
    """A Host header (or an origin's host part): ``name``, ``name:port``, ``[v6]:port``; its
    normalized name and port (None when absent); None when malformed."""
    bracketed = re.fullmatch(r"(\[[^\]]*\])(?::([^:]*))?", text)
    if bracketed is not None:
        name, port = bracketed.group(1), bracketed.group(2) or ""
    else:
        name, _, port = text.partition(":")  # a bare IPv6 address is no Host: no name below
    normalized = host_name(name)
    valid = (
        normalized is not None
        and normalized.startswith("[") == (bracketed is not None)
        and (not port or (_PORT.fullmatch(port) is not None and 0 < int(port) < 65536))
    )
    if not valid or normalized is None:
        return None
    return normalized, int(port) if port else None


def _origin(text: str) -> tuple[str, str, int] | None:
    """An Origin (RFC 6454 serialization: ``scheme://host[:port]``) as scheme, normalized host
    name and port (the scheme's default when absent); None for ``null`` and anything else."""
    scheme, separator, rest = text.strip().partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in _DEFAULT_PORTS or "/" in rest:
        return None
    authority = _authority(rest)
    if authority is None:
        return None
    name, port = authority
    return scheme, name, _DEFAULT_PORTS[scheme] if port is None else port


def origin_key(text: str) -> str | None:
    """``text`` as an ``--allow-origin`` entry is compared: ``scheme://host:port``, always with
    the port; None when it is no http(s) origin (``null`` and ``*`` included)."""
    parsed = _origin(text)
    return None if parsed is None else f"{parsed[0]}://{parsed[1]}:{parsed[2]}"


def _media_type(content_type: bytes | None) -> str | None:
    if content_type is None:
        return None
    return content_type.decode("latin-1").split(";", 1)[0].strip().lower()


def _shown(value: bytes | None) -> str:
    text = "" if value is None else value.decode("latin-1")
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


@dataclass
class _Headers:
    """What :class:`BrowserGuard` reads of a request's headers, in one pass."""

    hosts: list[bytes]
    origin: bytes | None = None
    content_type: bytes | None = None
    body: bool = False  # a Content-Length other than 0, or a Transfer-Encoding
    preflight: bool = False  # Access-Control-Request-Method is present

    @classmethod
    def of(cls, scope: Scope) -> _Headers:
        found = cls([])
        for key, value in scope["headers"]:
            if key == b"host":
                found.hosts.append(value)
            elif key == b"origin":
                found.origin = value
            elif key == b"content-type":
                found.content_type = value
            elif key == b"content-length":
                found.body = found.body or value.strip() != b"0"
            elif key == b"transfer-encoding":
                found.body = True
            elif key == b"access-control-request-method":
                found.preflight = True
        return found


@dataclass(frozen=True)
class BrowserRules:
    """What :class:`BrowserGuard` accepts besides this server's own addresses: ``host`` is
    ``--host``, ``allow_host`` the ``--allow-host`` names (any port), ``allow_origin`` the
    ``--allow-origin`` origins."""

    host: str = "127.0.0.1"
    allow_host: tuple[str, ...] = ()
    allow_origin: tuple[str, ...] = ()


class BrowserGuard:
    """``app`` closed to web pages (docs/security.md, "Web pages"): a page a browser shows may send
    requests to any address, this server's included, and in an open server nothing else would stop
    it. Checked in this order, before anything else sees the request:

    1. **Host** (DNS rebinding: a page of ``evil.example`` whose name now resolves to 127.0.0.1
       sends ``Host: evil.example:PORT``). Accepted when its name is ``--host`` (a wildcard
       such as ``0.0.0.0`` too: the ready line prints it, clients dial it, and no page's DNS
       name is spelled so), the address the connection reached (ASGI ``scope["server"]``, so
       a wildcard bind reached by any of its addresses), a loopback name or address
       (``localhost``, ``127.0.0.1``, ``[::1]``) or this machine's host name
       (``socket.gethostname()``, ``getfqdn()``), on the port the connection reached (the
       scheme's default, 80, when the Host names none); or when its name is an
       ``--allow-host`` name, on any port (behind a reverse proxy or a container's port
       mapping the port a client dials is not ours). A request without Host (HTTP/1.0) passes:
       browsers always send it, and a program that can connect could send a valid one.
       Otherwise 421 Misdirected Request, reason ``HOST_NOT_ALLOWED``.
    2. **Origin** (a page of another site calling this server). No Origin (curl, Google's
       clients, same-origin GETs) passes; so does this server's own origin (``http(s)://``
       with a host and port the Host rule accepts) and an ``--allow-origin`` origin, whose
       responses carry ``Access-Control-Allow-Origin`` and ``Vary: Origin``. Anything else,
       ``null`` (sandboxed frames, ``file:`` pages) included, is 403, reason
       ``ORIGIN_NOT_ALLOWED``.
    3. **CORS preflight** (OPTIONS with Origin and ``Access-Control-Request-Method``) from an
       accepted origin: 204 with the methods and headers a client may use, cached 10 minutes.
    4. **Content-Type** (a page's form or ``fetch`` sends ``text/plain``, form types and
       body-less POSTs without any preflight). A POST, and any other request that may change
       state (every method but GET, HEAD, OPTIONS) carrying a body or a Content-Type, must
       declare ``application/json`` (parameters such as ``charset`` allowed), else 415,
       reason ``UNSUPPORTED_CONTENT_TYPE``. Another method without body or Content-Type
       (``curl -X DELETE``) passes: browsers preflight every method but GET, HEAD and POST,
       so rules 2 and 3 already stop a page sending one.

    Refusals are Google's error envelope; on ``/mcp`` a JSON-RPC error carrying it
    (:func:`~ces_eval.surfaces.asgi.send_error`). They are PERMISSION_DENIED (421, 403) or
    INVALID_ARGUMENT (415)."""

    def __init__(self, app: ASGIApp, rules: BrowserRules, jsonrpc_path: str = MCP_PATH) -> None:
        self._app = app
        self._jsonrpc_path = jsonrpc_path
        own = [rules.host, *_LOOPBACK, socket.gethostname(), socket.getfqdn()]
        self._names = frozenset(name for name in map(host_name, own) if name is not None)
        anywhere = {text: host_name(text) for text in rules.allow_host}
        origins = {text: origin_key(text) for text in rules.allow_origin}
        if bad := [text for text, name in {**anywhere, **origins}.items() if name is None]:
            raise ValueError(f"not a host name or an http(s) origin: {bad[0]!r}")
        self._anywhere = frozenset(name for name in anywhere.values() if name is not None)
        self._origins = frozenset(key for key in origins.values() if key is not None)

    def _host_allowed(self, name: str, port: int, scope: Scope) -> bool:
        if name in self._anywhere:
            return True
        server = scope.get("server")
        if name not in self._names and (server is None or name != host_name(str(server[0]))):
            return False
        return server is None or server[1] is None or port == server[1]

    def _origin_allowed(self, origin: bytes, scope: Scope) -> bool:
        parsed = _origin(origin.decode("latin-1"))
        if parsed is None:
            return False
        scheme, name, port = parsed
        return f"{scheme}://{name}:{port}" in self._origins or self._host_allowed(name, port, scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = _Headers.of(scope)
        refused = self._refused(scope, request)
        if refused is not None:
            await send_error(scope, send, refused, jsonrpc=scope.get("path") == self._jsonrpc_path)
            return
        origin = request.origin
        if origin is None:
            await self._app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and request.preflight:
            status = 204
            self._code(scope, Code.OK, status)
            headers = [(b"access-control-allow-origin", origin), *_PREFLIGHT]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        allowed = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *allowed]}
            await send(message)

        await self._app(scope, receive, with_cors)

    def _refused(self, scope: Scope, request: _Headers) -> ServiceError | None:
        """The refusal of rules 1, 2 and 4, if any (421, 403 and 415:
        :func:`~ces_eval.surfaces.asgi.http_answer`)."""
        if request.hosts:
            hosts = request.hosts
            authority = _authority(hosts[0].decode("latin-1")) if len(hosts) == 1 else None
            default = _DEFAULT_PORTS.get(str(scope.get("scheme")), 80)
            if authority is None or not self._host_allowed(
                authority[0], default if authority[1] is None else authority[1], scope
            ):
                return _host_not_allowed(hosts)
        if request.origin is not None and not self._origin_allowed(request.origin, scope):
            return _origin_not_allowed(request.origin)
        method = scope["method"]
        if (
            method not in _SAFE_METHODS
            and (method == "POST" or request.body or request.content_type is not None)
            and _media_type(request.content_type) != "application/json"
        ):
            return _unsupported_content_type(method, request.content_type)
        return None

    @staticmethod
    def _code(scope: Scope, code: Code, status: int) -> None:
        call = scope.get(logs.CALL_KEY)
        if isinstance(call, logs.Call):
            call.code = code
            call.status = status


def _host_not_allowed(hosts: list[bytes]) -> ServiceError:
    host = _shown(hosts[0]) if len(hosts) == 1 else "several Host headers"
    return ServiceError(
        Code.PERMISSION_DENIED,
        f"The Host {host!r} is not a name of this server: a web page reaching it through "
        "another name (DNS rebinding) must not drive it. Call it by its address or pass "
        "--allow-host NAME.",
        "HOST_NOT_ALLOWED",
        {"host": host},
    )


def _origin_not_allowed(origin: bytes) -> ServiceError:
    shown = _shown(origin)
    return ServiceError(
        Code.PERMISSION_DENIED,
        f"Requests from the web origin {shown!r} are refused: only this server's own origin "
        "and those given with --allow-origin may call it.",
        "ORIGIN_NOT_ALLOWED",
        {"origin": shown},
    )


def _unsupported_content_type(method: str, content_type: bytes | None) -> ServiceError:
    shown = _shown(content_type) if content_type is not None else "none"
    return ServiceError(
        Code.INVALID_ARGUMENT,
        f"A {method} request must have Content-Type: application/json, not {shown}: web pages "
        "send the other types without a CORS preflight.",
        "UNSUPPORTED_CONTENT_TYPE",
        {"contentType": shown, "expected": "application/json"},
    )


def build_app(
    ready: Callable[[], Awaitable[str | None]],
    rest: ASGIApp | None = None,
    openapi: dict[str, Any] | None = None,
    mcp: ASGIApp | None = None,
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
    *,
    ui: ASGIApp | None = None,
    browser: BrowserRules | None = None,
    timeouts: Timeouts | None = None,
) -> ASGIApp:
    """``GET /healthz``: 200 once every listener accepts connections and the database answers,
    503 otherwise (before start-up ends, while draining, while the database is away), so load
    balancers and test harnesses can poll it. ``ready`` returns None when serving, else why
    not. ``lifespan`` encloses serving (the MCP session manager's run context). Every request,
    ``/healthz`` included, passes :class:`BrowserGuard` with ``browser`` (default: a loopback
    server's rules, no other name or origin). ``rest`` and ``mcp`` get their requests with
    complete bodies (:class:`BodyLimit`, reading them within ``timeouts``)."""

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
        routes.append(Route(MCP_PATH, BodyLimit(mcp, jsonrpc=True, timeouts=timeouts)))
    if ui is not None:  # the web view (surfaces/web_ui.py) at /ui, where / leads

        async def home(request: Request) -> Response:
            return RedirectResponse(UI_PATH, status_code=302)

        routes.append(Route("/", home, methods=["GET"]))
    app: ASGIApp = _StatusRecorded(Starlette(routes=routes, lifespan=lifespan))
    if rest is not None:
        own = frozenset(route.path for route in routes)
        app = _RestElsewhere(app, own, BodyLimit(rest, timeouts=timeouts), ui)
    return BrowserGuard(app, browser or BrowserRules())


class _RestElsewhere:
    """``rest`` for every HTTP request whose path is none of ``own`` (the plain routes), else
    ``app`` (which also runs the lifespan). A REST call, nearly every request, goes straight to
    the transcoder: Starlette's middleware and route scan cost a tenth of a Get."""

    __slots__ = ("_app", "_own", "_rest", "_ui")

    def __init__(
        self, app: ASGIApp, own: frozenset[str], rest: ASGIApp, ui: ASGIApp | None = None
    ) -> None:
        self._app = app
        self._own = own
        self._rest = rest
        self._ui = ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self._own:
            await self._app(scope, receive, send)
        elif self._ui is not None and (path == UI_PATH or path.startswith(_UI_PREFIX)):
            await self._ui(scope, receive, send)
        else:
            await self._rest(scope, receive, send)


_UI_PREFIX = UI_PATH + "/"


class _StatusRecorded:
    """``app``, the plain routes (MCP's library among them), answering through Starlette,
    which knows nothing of request lines: the status each answer is sent with is recorded in
    the request's line, when there is one."""

    __slots__ = ("_app",)

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        line: logs.Call | None = scope.get(logs.CALL_KEY) if scope["type"] == "http" else None
        if line is None:
            await self._app(scope, receive, send)
            return

        async def recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                line.status = int(message["status"])
            await send(message)

        await self._app(scope, receive, recording)
