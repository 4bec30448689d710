"""Large ``/mcp`` requests and results, kept away from the event loop (docs/security.md, "Limits").

The MCP SDK reads a POST body with ``pydantic_core.from_json`` and writes the answer with
pydantic's serializer, both on the event loop and both holding the interpreter for as long as they
run: ~0.2 s to read the largest evaluation the limits allow (2.8 MB of JSON) and ~0.4 s to write
it back, in which no caller of any surface, nor a health check, is answered.

So the SDK is only ever handed small documents. :func:`lightened` takes the body
:class:`~ces_eval.surfaces.http_app.BodyLimit` read (:func:`~ces_eval.surfaces.asgi.body_of`)
and, when it is large (:func:`ces_eval.transcoding.body.heavy`), reads it in a worker thread
with the bounded JSON reader, which
lets other threads run every few milliseconds and refuses a container of more than
MAX_DECODED_ENTRIES entries at once (400, a JSON-RPC error carrying Google's error envelope,
like the other refusals of ``/mcp`` requests MCP never read). A ``tools/call``'s arguments are
then kept aside in the request's :class:`Large` and replaced by a stand-in ``{STAND_IN: token}``
before the SDK reads the rest; the tool handler takes them back (:func:`arguments_of`).

A large result goes the other way: the handler renders its text and structured content in a
worker thread, in pieces (:func:`ces_eval.transcoding.rendering.encode`), and returns stand-ins
for both; the SDK serializes a small answer, in which :func:`lightened` puts the rendered JSON
in their place before it is sent. The token is random per request, so nothing a client sends or
stored can be taken for a stand-in.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types as types

from ces_eval.contract.limits import MAX_DECODED_ENTRIES, key_path
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.offload import heavy_held, off_loop
from ces_eval.surfaces.asgi import body_of, send_error
from ces_eval.surfaces.boundary import internal_error
from ces_eval.transcoding.body import Overflow, heavy, load_json

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["STAND_IN", "Large", "arguments_of", "large_of", "lightened"]

_log = logging.getLogger("ces_eval.mcp")

STAND_IN = "ces-eval-stand-in"
_KEY = "ces_eval.mcp_large"


@dataclass
class Large:
    """What :func:`lightened` kept aside for one ``/mcp`` request."""

    token: str = field(default_factory=lambda: secrets.token_hex(16))
    arguments: dict[str, Any] | None = None  # the tools/call arguments the SDK never saw
    text: bytes = b""  # the result's text, as a JSON string
    structured: bytes = b""  # the result's structuredContent, as JSON

    @property
    def _text_stand_in(self) -> str:
        return f"{STAND_IN}:{self.token}"

    def result(self, text: str, structured: str) -> types.CallToolResult:
        """A result standing in for one whose text is ``text`` and whose structured content
        is the JSON object ``structured``, both rendered already."""
        self.text = json.dumps(text, ensure_ascii=False).encode()
        self.structured = structured.encode()
        return types.CallToolResult(
            content=[types.TextContent(text=self._text_stand_in)],
            structured_content={STAND_IN: self.token},
        )

    def forget(self) -> None:
        """Let the arguments go (freed in the thread that calls this)."""
        self.arguments = None

    def replaced(self, body: bytes) -> bytes | None:
        """``body``, the SDK's answer, with the rendered result in place of its stand-ins;
        None when they are not both there exactly once (nothing of ours to replace)."""
        text = json.dumps(self._text_stand_in).encode()
        structured = json.dumps({STAND_IN: self.token}, separators=(",", ":")).encode()
        if body.count(text) != 1 or body.count(structured) != 1:
            return None
        return body.replace(text, self.text).replace(structured, self.structured)


def large_of(scope: Scope | None) -> Large | None:
    """The :class:`Large` of this request's ASGI scope; None outside :func:`lightened`."""
    found = scope.get(_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Large) else None


def arguments_of(scope: Scope | None, given: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments: those kept aside in place of the stand-in ``given``, or
    ``given`` itself."""
    large = large_of(scope)
    if large is not None and large.arguments is not None and given == {STAND_IN: large.token}:
        return large.arguments
    return given


def _path(steps: list[str | int]) -> str:
    """A location in the JSON-RPC message: ``params.arguments.evaluation.golden.turns``."""
    path = ""
    for step in steps:
        if isinstance(step, int) or not step.isidentifier():
            path += key_path(step)
        else:
            path += f".{step}" if path else step
    return path


def _overflow(overflow: Overflow) -> ServiceError:
    where = _path(list(reversed(overflow.steps)))
    kind = "object has more than" if overflow.is_object else "array has more than"
    description = f"This JSON {kind} {MAX_DECODED_ENTRIES} entries."
    return ServiceError.invalid_argument(
        f"The request body is invalid: {where}: {description}",
        [FieldViolation(where, description, "TOO_MANY")],
    )


def _lightened_body(body: bytes, large: Large) -> bytes:
    """The large ``body`` the SDK is handed instead, re-encoded without its whitespace and,
    for a tools/call, without its arguments (set aside in ``large``). Refused
    (INVALID_ARGUMENT) when it is not JSON, holds a container over MAX_DECODED_ENTRIES, or is
    still large then: no other part of an MCP message has a reason to be."""
    try:
        document = load_json(body)
    except Overflow as overflow:
        raise _overflow(overflow) from None
    except RecursionError:
        description = "The request body nests deeper than a JSON document may here."
        raise ServiceError.invalid_argument(
            description, [FieldViolation("body", description, "TOO_DEEP")]
        ) from None
    except ValueError as error:
        description = f"The request body is not valid JSON: {error}."
        raise ServiceError.invalid_argument(
            description, [FieldViolation("body", description)]
        ) from None
    params = document.get("params") if isinstance(document, dict) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    tool_call = isinstance(document, dict) and document.get("method") == "tools/call"
    if tool_call and isinstance(params, dict) and isinstance(arguments, dict):
        params["arguments"] = {STAND_IN: large.token}
    else:
        arguments = None
    lightened = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    if heavy(lightened):
        description = (
            "Only the arguments of a tools/call may make an MCP request this large "
            f"({len(body)} bytes)."
        )
        raise ServiceError.invalid_argument(description, [FieldViolation("body", description)])
    large.arguments = arguments
    return lightened


def lightened(app: ASGIApp) -> ASGIApp:
    """``app`` (the MCP SDK's) handed no large document either way (see the module)."""

    async def light(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = body_of(scope)
        large = Large()
        if not heavy(body):
            await _handed(app, scope, receive, send, large=large, body=body)
            return
        with heavy_held():  # the arguments stay alive until the tool has parsed them
            try:
                body = await off_loop(True, _lightened_body, body, large)
            except ServiceError as error:
                await send_error(scope, send, error, jsonrpc=True)
                return
            try:
                await _handed(app, scope, receive, send, large=large, body=body)
            finally:
                # Freed before the collector is back (its first collection would walk them)
                # and off the loop: freeing their ~10^5 objects takes tens of milliseconds.
                await off_loop(True, large.forget)

    return light


async def _handed(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, *, large: Large, body: bytes
) -> None:
    """``app`` called with ``body`` as the request's, its answer's stand-ins replaced."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    start: Message | None = None

    async def splice(message: Message) -> None:
        nonlocal start
        if not large.text:
            await send(message)
            return
        if message["type"] == "http.response.start":
            start = message  # sent with the body, whose length changes
            return
        if message["type"] == "http.response.body" and start is not None:
            answer = await off_loop(True, large.replaced, message.get("body", b""))
            if answer is None or message.get("more_body", False):
                _log.error("the MCP SDK's answer does not hold the result's stand-ins")
                await send_error(scope, send, internal_error(), jsonrpc=True)
                return
            headers = [
                (name, str(len(answer)).encode() if name == b"content-length" else value)
                for name, value in start["headers"]
            ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        await send(message)

    await app({**scope, _KEY: large}, replay, splice)
