"""The server's log: ``serve --log-level`` and ``--log-format``, and the request log.

Every log line goes to stderr, as text (``2026-12-01 10:00:00,000 INFO ces_eval: …``) or, with
``--log-format json``, one JSON object per line (``time``, ``level``, ``logger``, ``message``,
plus the fields of a request line), for log collectors that parse lines.

**The request log** (logger ``ces_eval.access``, level INFO): one line per call on every surface
(gRPC, REST, MCP), written when the call ends, refused calls included: the surface, the method
(the gRPC method path; ``VERB /path`` for an HTTP request that matched no method), the resource
it addresses (the request's first path variable: ``name``, ``parent``, ``evaluation.name``, …),
the canonical status code and, on HTTP, the HTTP status, the duration, and the caller's name
(the ``--auth-tokens`` entry's name, or ``x-goog-user``; never a token). Health checks,
reflection, ``/healthz`` and ``/openapi.json`` are not logged.

Below INFO (``--log-level warning``) the surfaces get no :class:`RequestLog` at all: nothing
is timed or formatted per call.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

from ces_eval import schema
from ces_eval.errors import Code
from ces_eval.transcoding.templates import parse_template

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message
    from starlette.types import ASGIApp, Receive, Scope, Send
    from starlette.types import Message as AsgiMessage

__all__ = [
    "CALL_KEY",
    "FORMATS",
    "LEVELS",
    "Call",
    "HttpRequestLog",
    "RequestLog",
    "configure",
    "field_value",
    "resource_field",
]

LEVELS: Final = ("debug", "info", "warning", "error")
FORMATS: Final = ("text", "json")
# The ASGI scope key under which an HTTP request's :class:`Call` travels to the surfaces.
CALL_KEY: Final = "ces_eval.call"
_ACCESS = logging.getLogger("ces_eval.access")
# Routes that are probes or documents, not calls of the API.
_QUIET_PATHS = frozenset({"/healthz", "/openapi.json"})
# HTTP statuses that no canonical code maps to, answered before a surface knows the call.
_HTTP_ONLY = {413: Code.RESOURCE_EXHAUSTED, 405: Code.UNIMPLEMENTED}
_BY_HTTP_STATUS = {code.http_status: code for code in reversed(Code)}


class _JsonFormatter(logging.Formatter):
    """One JSON object per record; a request line adds its fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        call = getattr(record, "call", None)
        if isinstance(call, dict):
            entry.update(call)
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text", *, with_pid: bool = False) -> None:
    """Send every log record at ``level`` or above to stderr in ``fmt`` (:data:`FORMATS`);
    ``with_pid``: text lines name the process (the workers of ``serve --workers``)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        pid = "[%(process)d]" if with_pid else ""
        text = f"%(asctime)s %(levelname)s %(name)s{pid}: %(message)s"
        handler.setFormatter(logging.Formatter(text))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


@cache
def resource_field(method: descriptor.MethodDescriptor) -> str:
    """The request field naming the resource a call of ``method`` addresses: the first
    variable of its HTTP binding (``name``, ``parent``, ``evaluation.name``, …), else ``name``
    when the request has one; "" for none."""
    for binding in schema.http_bindings():
        if binding.method is method:
            variables = parse_template(binding.template).variables
            if variables:
                return variables[0]
    return "name" if "name" in method.input_type.fields_by_name else ""


def field_value(message: Message, path: str) -> str:
    """The string at dotted field ``path`` of ``message`` ("" when a step is not a message or
    the value is not a string)."""
    value: object = message
    for name in path.split("."):
        value = getattr(value, name, None)
    return value if isinstance(value, str) else ""


@dataclass
class Call:
    """What a surface learnt about one call while serving it; :class:`RequestLog` writes it."""

    surface: str
    method: str
    started: float
    resource: str = ""
    caller: str = ""
    code: Code | None = None  # None: read from the HTTP status


class RequestLog:
    """Writes request lines; build one only when :meth:`wanted` (off below INFO)."""

    @staticmethod
    def wanted() -> bool:
        return _ACCESS.isEnabledFor(logging.INFO)

    @staticmethod
    def start(surface: str, method: str) -> Call:
        return Call(surface, method, time.perf_counter())

    @staticmethod
    def finish(call: Call, http_status: int | None = None) -> None:
        milliseconds = (time.perf_counter() - call.started) * 1000
        code = call.code
        if code is None:
            code = _HTTP_ONLY.get(http_status or 200) or _BY_HTTP_STATUS.get(
                http_status or 200, Code.UNKNOWN
            )
        fields: dict[str, object] = {
            "surface": call.surface,
            "method": call.method,
            "resource": call.resource,
            "code": code.name,
            "duration_ms": round(milliseconds, 3),
            "caller": call.caller,
        }
        status = ""
        if http_status is not None:
            fields["http_status"] = http_status
            status = f" {http_status}"
        _ACCESS.info(
            "%s %s %s %s%s %.2fms caller=%s",
            call.surface,
            call.method,
            call.resource or "-",
            code.name,
            status,
            milliseconds,
            call.caller or "-",
            extra={"call": fields},
        )


class HttpRequestLog:
    """The HTTP app behind the request log: each REST or MCP request carries a :class:`Call`
    in its scope (:data:`CALL_KEY`) for the surface to fill in, and is logged with its HTTP
    status once the response has been sent (or the request ended without one)."""

    def __init__(self, app: ASGIApp, mcp_path: str = "/mcp") -> None:
        self._app = app
        self._mcp_path = mcp_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _QUIET_PATHS:
            await self._app(scope, receive, send)
            return
        surface = "mcp" if path == self._mcp_path else "rest"
        call = RequestLog.start(surface, f"{scope['method']} {path}")
        status: int | None = None

        async def sending(message: AsgiMessage) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app({**scope, CALL_KEY: call}, receive, sending)
        finally:
            if status is None and call.code is None:
                call.code = Code.CANCELLED  # the client went away before an answer
            RequestLog.finish(call, status)
