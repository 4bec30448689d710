"""The server's log: ``serve --log-level`` and ``--log-format``, and the request log.

Every log line goes to stderr, as text (``2026-12-01 10:00:00,000 INFO ces_eval: …``) or, with
``--log-format json``, one JSON object per line (``time``, ``level``, ``logger``, ``message``,
plus the fields of a request line), for log collectors that parse lines.

**The request log** (named ``ces_eval.access``, at INFO): one line per call on every surface
(gRPC, REST, MCP), for each call that ended, refused calls included: the surface, the method
(the gRPC method path; ``VERB /path`` for an HTTP request that matched no method), the resource
it addresses (the request's first path variable: ``name``, ``parent``, ``evaluation.name``, …),
the canonical status code and, on HTTP, the HTTP status, the duration, and the caller's name
(the ``--auth-tokens`` entry's name, or ``x-goog-user``; never a token). Health checks,
reflection, ``/healthz`` and ``/openapi.json`` are not logged.

The lines are written by :class:`RequestLog` itself, in batches, in the format of every other
line, not through :mod:`logging` (whose per-record cost was a fifth of a read's throughput):
the logger's level only says whether there is a request log. Below INFO (``--log-level
warning``) the surfaces get no :class:`RequestLog` at all: nothing is timed or formatted per
call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final, TextIO

from ces_eval.contract import schema
from ces_eval.contract.templates import parse_template
from ces_eval.errors import Code

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message
    from starlette.types import ASGIApp, Receive, Scope, Send

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
# Longest a request line waits before it is written.
FLUSH_SECONDS: Final = 0.05
# Routes that are probes or documents, not calls of the API.
_QUIET_PATHS = frozenset({"/healthz", "/openapi.json"})
_PARTS_KEPT = 4096  # formatted parts of text lines kept (RequestLog._text)
# HTTP statuses that no canonical code maps to, answered before a surface knows the call.
_HTTP_ONLY = {413: Code.RESOURCE_EXHAUSTED, 405: Code.UNIMPLEMENTED}
_BY_HTTP_STATUS = {code.http_status: code for code in reversed(Code)}


class _Style:
    """How :func:`configure` set the lines up, for the request log's own formatting."""

    json = False
    pid = ""


_STYLE = _Style()


class _JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text", *, with_pid: bool = False) -> None:
    """Send every log record at ``level`` or above to stderr in ``fmt`` (:data:`FORMATS`);
    ``with_pid``: text lines name the process (the workers of ``serve --workers``)."""
    _STYLE.json = fmt == "json"
    _STYLE.pid = f"[{os.getpid()}]" if with_pid else ""
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


@dataclass(slots=True)
class Call:
    """What a surface learnt about one call while serving it; :class:`RequestLog` writes it."""

    surface: str
    method: str
    started: float
    resource: str = ""
    caller: str = ""
    code: Code | None = None  # None: read from the HTTP status
    status: int | None = None  # the HTTP status answered, set by whoever answers


class RequestLog:
    """Writes request lines, in batches: a call only appends its fields to a list (a few
    microseconds), and the lines are formatted and written together at most
    :data:`FLUSH_SECONDS` later, or at :meth:`flush` (the server calls it when it stops).
    Formatting a record through :mod:`logging` for every call cost a fifth of a read's
    throughput (bench/README.md, "request log"); a crash may lose the last fraction of a
    second of lines. The lines have the format :func:`configure` set for every other one.

    Build one only when :meth:`wanted` (off below INFO); call it on the event loop's thread.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._pending: list[_Entry] = []
        self._scheduled = False
        self._second = -1
        self._stamp = ""
        self._millisecond = -1
        self._at = ""
        # A text line's parts around its duration, by what they say: the same call repeated
        # (a client polling one resource) is formatted once (at most _PARTS_KEPT kept).
        self._parts: dict[tuple[object, ...], tuple[str, str]] = {}

    @staticmethod
    def wanted() -> bool:
        return _ACCESS.isEnabledFor(logging.INFO)

    @staticmethod
    def start(surface: str, method: str) -> Call:
        return Call(surface, method, time.perf_counter())

    def finish(self, call: Call, http_status: int | None = None) -> None:
        now = time.perf_counter()
        self._pending.append(_entry(time.time(), call, http_status, (now - call.started) * 1000))
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a direct call): write at once
            self.flush()
            return
        self._scheduled = True
        loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        """Write every pending line."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return
        if _STYLE.json:
            text = "".join(self._json(entry) for entry in pending)
        else:
            text = "".join(self._text(entry) for entry in pending)
        stream = self._stream or sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # stderr closed or full: a log line is not worth a call
            return

    def _time(self, at: float) -> str:
        millisecond = int(at * 1000)
        if millisecond == self._millisecond:  # lines of one millisecond share their stamp
            return self._at
        second = millisecond // 1000
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        self._millisecond = millisecond
        self._at = f"{self._stamp},{millisecond - second * 1000:03d}"
        return self._at

    def _text(self, entry: _Entry) -> str:
        key = entry[1:7]
        parts = self._parts.get(key)
        if parts is None:
            _, surface, method, resource, caller, code, http_status, _ = entry
            status = "" if http_status is None else f" {http_status}"
            parts = (
                f" INFO {_ACCESS.name}{_STYLE.pid}: {surface} {method} "
                f"{resource or '-'} {code}{status} ",
                f"ms caller={caller or '-'}\n",
            )
            if len(self._parts) >= _PARTS_KEPT:
                self._parts.clear()
            self._parts[key] = parts
        return f"{self._time(entry[0])}{parts[0]}{entry[7]:.2f}{parts[1]}"

    def _json(self, entry: _Entry) -> str:
        at, surface, method, resource, caller, code, http_status, milliseconds = entry
        line: dict[str, object] = {
            "time": self._time(at),
            "level": "INFO",
            "logger": _ACCESS.name,
            "message": f"{surface} {method} {resource or '-'} {code}",
            "surface": surface,
            "method": method,
            "resource": resource,
            "code": code,
            "duration_ms": round(milliseconds, 3),
            "caller": caller,
        }
        if http_status is not None:
            line["http_status"] = http_status
        return json.dumps(line, ensure_ascii=False) + "\n"


# A pending line: its time, surface, method, resource, caller, code's name, HTTP status and
# duration (ms). Plain values only: the collector stops tracking such a tuple at its first pass,
# so the lines of a busy 50 ms add nothing to the collections meanwhile.
_Entry = tuple[float, str, str, str, str, str, "int | None", float]


def _entry(at: float, call: Call, http_status: int | None, milliseconds: float) -> _Entry:
    code = _code(call, http_status).name
    return (
        at,
        call.surface,
        call.method,
        call.resource,
        call.caller,
        code,
        http_status,
        milliseconds,
    )


def _code(call: Call, http_status: int | None) -> Code:
    if call.code is not None:
        return call.code
    status = http_status or 200
    if status < 400:  # answered: a redirect (/ to /ui) is no error either
        return Code.OK
    return _HTTP_ONLY.get(status) or _BY_HTTP_STATUS.get(status, Code.UNKNOWN)


class HttpRequestLog:
    """The HTTP app behind the request log: each REST or MCP request carries a :class:`Call`
    in its scope (:data:`CALL_KEY`) for the surface to fill in, and is logged with its HTTP
    status once the response has been sent (or the request ended without one)."""

    def __init__(self, app: ASGIApp, log: RequestLog, mcp_path: str = "/mcp") -> None:
        self._app = app
        self._log = log
        self._mcp_path = mcp_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _QUIET_PATHS:
            await self._app(scope, receive, send)
            return
        # The surface that serves the call names itself (Boundary.serve); MCP's calls are
        # served tool by tool, so its requests are named here.
        surface = "mcp" if path == self._mcp_path else "rest"
        call = RequestLog.start(surface, f"{scope['method']} {path}")
        scope[CALL_KEY] = call  # the scope is this request's own (ASGI): no copy
        try:
            # Every answer records its status in the call: the surfaces' own
            # (asgi.send_body), the plain routes' (MCP's among them) as they are sent
            # (http_app.build_app).
            await self._app(scope, receive, send)
        finally:
            if call.status is None and call.code is None:
                call.code = Code.CANCELLED  # the client went away before an answer
            self._log.finish(call, call.status)
