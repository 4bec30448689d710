"""The MCP surface: every implemented RPC as an MCP tool at ``/mcp`` (README, "MCP (for AI
assistants)").

Built on the official ``mcp`` SDK's low-level :class:`~mcp.server.lowlevel.Server`, served by its
Streamable HTTP session manager in stateless mode with JSON responses (the initialize handshake
of 2025-06-18/2025-11-25 and the per-request 2026-07-28 protocol alike), in process over the
same service core as gRPC and REST.

Tools are generated from the descriptors of :data:`TOOL_SERVICES`: one per unary method the core
implements (MCP answers one result per tool call: StreamRunSession and BidiRunSession are left
out, RunSession plays the same turn), named by the RPC in snake_case (``CreateEvaluation`` →
``create_evaluation``). The title is the first sentence of the method's proto comment, the
description the whole comment. ``inputSchema`` is the request message's proto3-JSON Schema
(parser view), ``outputSchema`` the response message's (printer view; ``google.protobuf.Empty``
is ``{"type": "object"}``), both JSON Schema 2020-12 with a ``type: object`` root and ``$defs``
for the messages they reference.

Annotations (all four always present; openWorldHint is false everywhere but ``execute_tool``,
which may call an OpenAPI tool's own API: the others act on this closed local server only).
The reference pages fix two rows, three POSTs say what they do (an import may overwrite, an
upload deletes the audio it replaces, a voice test changes nothing), ToolService's two
retrievals only read; the rest follow the HTTP binding:

=============================  =========  ===========  ==========  ==========
tool / HTTP binding            readOnly   destructive  idempotent  openWorld
=============================  =========  ===========  ==========  ==========
list_evaluation_results        true       false        true        false
create_evaluation              false      false        false       false
import_evaluations             false      true         false       false
upload_evaluation_audio        false      true         false       false
test_persona_voice             true       false        true        false
GET (get_*, list_*)            true       false        true        false
no HTTP binding (wait_*)       true       false        true        false
DELETE (delete_*)              false      true         true        false
PATCH (update_*)               false      true         false       false
POST ``:cancel``               false      false        true        false
other POST (exports, run)      false      false        false       false
=============================  =========  ===========  ==========  ==========

``tools/call`` parses the arguments as proto3 JSON into the request message with the checks a
REST body gets (:func:`ces_eval.transcoding.body.parse_document`: count limits, unknown fields,
JSON types, enum values, oneofs) and calls the core, whose validation then answers as on gRPC and
REST. The ``inputSchema`` is published for clients and not checked here: one checker for both
HTTP surfaces cannot drift from itself (the parity table, tests/integration/test_error_parity.py).
A success carries ``structuredContent`` (the response as proto3 JSON) and the same JSON as a text
block. API errors are ``isError: true`` results whose text is Google's JSON error envelope
(invalid arguments are INVALID_ARGUMENT with a BadRequest listing each field, in REST's words);
an unexpected exception is logged and
answered with a generic INTERNAL envelope (reason ``INTERNAL``, as on gRPC and REST), never its
text. An unknown tool is a JSON-RPC error (``-32602``).

Admission, authentication and the last-resort catch are the boundary's
(:mod:`ces_eval.surfaces.boundary`): MCP admits and authenticates each HTTP request
(:func:`guarded`, before the SDK runs) and catches per tool call.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import mcp_types as types
from google.protobuf import descriptor, message_factory
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from ces_eval import logs
from ces_eval.access import Caller, Handler, JsonFields, authorize
from ces_eval.contract import schema
from ces_eval.contract.comments import comment
from ces_eval.contract.encoded import message_of
from ces_eval.contract.jsonschema import JsonSchema, document
from ces_eval.contract.limits import LOOP_BYTES, MAX_REQUEST_BYTES
from ces_eval.core.service import implements, snake_case
from ces_eval.errors import Code, ServiceError
from ces_eval.logs import Call
from ces_eval.offload import off_loop
from ces_eval.surfaces.asgi import credentials, send_error
from ces_eval.surfaces.boundary import Boundary
from ces_eval.surfaces.mcp_bodies import Large, arguments_of, large_of, lightened
from ces_eval.transcoding import printer
from ces_eval.transcoding.body import heavy_document, parse_document
from ces_eval.transcoding.errors import envelope, method_not_allowed
from ces_eval.transcoding.rendering import encode

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from mcp.server.context import ServerRequestContext
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["McpEndpoint", "ToolSpec", "build_endpoint", "build_server", "guarded", "tool_specs"]

TOOL_SERVICES = (
    "google.cloud.ces.v1beta.EvaluationService",
    "google.cloud.ces.v1beta.AgentService",
    "google.cloud.ces.v1beta.ToolService",
    "google.cloud.ces.v1beta.SessionService",
    "google.cloud.ces.v1beta.WidgetService",
    "google.longrunning.Operations",
    "google.cloud.location.Locations",
)
_EMPTY = "google.protobuf.Empty"
_CALLER_KEY = "ces_eval.caller"
_TEXT = (", ", ": ")  # the text block's JSON: json.dumps's default separators


@dataclass(frozen=True)
class Hints:
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool = False


# The two rows the reference pages state and the POSTs whose effect their verb does not say;
# every other tool follows its HTTP binding.
_STATED = {
    "list_evaluation_results": Hints(read_only=True, destructive=False, idempotent=True),
    "create_evaluation": Hints(read_only=False, destructive=False, idempotent=False),
    "import_evaluations": Hints(read_only=False, destructive=True, idempotent=False),
    "upload_evaluation_audio": Hints(read_only=False, destructive=True, idempotent=False),
    "test_persona_voice": Hints(read_only=True, destructive=False, idempotent=True),
    # AgentService POSTs that delete or overwrite what is stored.
    "batch_delete_conversations": Hints(read_only=False, destructive=True, idempotent=True),
    "import_app": Hints(read_only=False, destructive=True, idempotent=False),
    "restore_app_version": Hints(read_only=False, destructive=True, idempotent=True),
    # ToolService (docs/tools.md): two POSTs that only read, and the one tool that may reach
    # past this server (an OpenAPI tool's own API).
    "retrieve_tool_schema": Hints(read_only=True, destructive=False, idempotent=True),
    "retrieve_tools": Hints(read_only=True, destructive=False, idempotent=True),
    "execute_tool": Hints(read_only=False, destructive=False, idempotent=False, open_world=True),
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its MCP definition and how to call the core."""

    tool: types.Tool
    rpc: str  # "/package.Service/Method", the key of core.service.handlers()
    method: descriptor.MethodDescriptor
    request: descriptor.Descriptor


def _hints(name: str, method: descriptor.MethodDescriptor) -> Hints:
    if name in _STATED:
        return _STATED[name]
    rule = schema.http_rule(method)
    verb = rule.WhichOneof("pattern") if rule is not None else None
    if verb is None or verb == "get":  # GET, or no binding: WaitOperation only reads
        return Hints(read_only=True, destructive=False, idempotent=True)
    if verb == "delete":
        return Hints(read_only=False, destructive=True, idempotent=True)
    if verb == "patch":
        return Hints(read_only=False, destructive=True, idempotent=False)
    path = str(getattr(rule, verb))
    if path.endswith(":cancel"):
        return Hints(read_only=False, destructive=False, idempotent=True)
    return Hints(read_only=False, destructive=False, idempotent=False)


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    return re.split(r"(?<=[.!?])\s", flat, maxsplit=1)[0]


def _title(method: descriptor.MethodDescriptor) -> str:
    first = _first_sentence(comment(method)).rstrip(".")
    return first or " ".join(re.findall(r"[A-Z][a-z0-9]*", method.name))


def _schema(message: descriptor.Descriptor, *, output: bool) -> JsonSchema:
    if output and message.full_name == _EMPTY:
        return {"type": "object"}
    return document(message, output=output)


def _tool(service: descriptor.ServiceDescriptor, method: descriptor.MethodDescriptor) -> ToolSpec:
    name = snake_case(method.name)
    hints = _hints(name, method)
    title = _title(method)
    input_schema = _schema(method.input_type, output=False)
    tool = types.Tool(
        name=name,
        title=title,
        description=comment(method) or title,
        input_schema=input_schema,
        output_schema=_schema(method.output_type, output=True),
        annotations=types.ToolAnnotations(
            title=title,
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )
    return ToolSpec(
        tool=tool,
        rpc=f"/{service.full_name}/{method.name}",
        method=method,
        request=method.input_type,
    )


@cache
def tool_specs() -> Mapping[str, ToolSpec]:
    """Every tool by name, in descriptor order."""
    specs: dict[str, ToolSpec] = {}
    for service in schema.services():
        if service.full_name not in TOOL_SERVICES:
            continue
        for method in service.methods:
            if implements(method) and not (method.client_streaming or method.server_streaming):
                spec = _tool(service, method)
                specs[spec.tool.name] = spec
    return specs


# --mcp-tools: the groups a selection may name besides tool names.
TOOL_GROUPS = ("all", "read", "write")
# --mcp-schema: every description whole and each tool's output schema, or the compact listing.
SCHEMA_FORMS = ("full", "compact")


def unknown_tools(selection: Iterable[str]) -> list[str]:
    """The names in a ``--mcp-tools`` selection that are neither a tool nor a group."""
    return [name for name in selection if name not in TOOL_GROUPS and name not in tool_specs()]


def selected_tools(selection: Iterable[str] = ("all",)) -> dict[str, ToolSpec]:
    """The tools a ``--mcp-tools`` selection lists, in descriptor order: ``all``, ``read``
    (the tools whose annotations say they only read), ``write`` (the others), or tool names."""
    wanted = set(selection)
    return {
        name: spec
        for name, spec in tool_specs().items()
        if "all" in wanted
        or name in wanted
        or ("read" if spec.tool.annotations and spec.tool.annotations.read_only_hint else "write")
        in wanted
    }


def _compact_schema(node: Any) -> Any:  # noqa: ANN401 - any part of a JSON Schema
    """``node`` with each description cut to its first sentence; everything that validates
    (types, properties, required lists, patterns, ``$defs``) kept as it is."""
    if isinstance(node, dict):
        return {
            key: _first_sentence(value)
            if key == "description" and isinstance(value, str)
            else _compact_schema(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_compact_schema(item) for item in node]
    return node


def compact(tool: types.Tool) -> types.Tool:
    """The tool as ``--mcp-schema compact`` lists it: its input schema with first-sentence
    descriptions, and no output schema, which would define the resource a second time (the
    structured result is the same either way)."""
    return tool.model_copy(
        update={
            "description": _first_sentence(tool.description or ""),
            "input_schema": _compact_schema(tool.input_schema),
            "output_schema": None,
        }
    )


# Arguments with more values than this are checked and parsed in a worker thread (~5 ms).
_LOOP_VALUES = 32


def _request(spec: ToolSpec, arguments: dict[str, Any]) -> Message:
    """The request message of ``arguments``, checked as REST checks a body (one proto3-JSON
    checker for both HTTP surfaces, :func:`ces_eval.transcoding.body.parse_document`): the
    count limits first (a ``len()`` per container: they bound hostile input before any
    per-element work), then unknown fields, JSON types, enum values and oneofs with their field
    paths, all in one walk. What a request must hold (required fields, resource names) is the
    core's validation, as on every surface, so MCP names the same fields as gRPC and REST."""
    request: Message = message_factory.GetMessageClass(spec.request)()
    parse_document(arguments, request, "", refusal="The tool arguments are invalid")
    return request


def _error_result(error: ServiceError) -> types.CallToolResult:
    _, body = envelope(error)
    return types.CallToolResult(content=[types.TextContent(text=body.decode())], is_error=True)


async def _call(
    spec: ToolSpec,
    implementations: Mapping[str, Handler],
    arguments: dict[str, Any],
    caller: Caller,
    *,
    call: Call | None = None,
    aside: Large | None = None,
) -> types.CallToolResult:
    """``call``: the request line to complete (:mod:`ces_eval.logs`); ``aside``: where a large
    result is rendered to (:mod:`ces_eval.surfaces.mcp_bodies`)."""
    if caller.principal is not None:  # before validation: a foreign token learns nothing
        authorize(caller.principal, spec.method, JsonFields(arguments))

    def result(response: Message) -> types.CallToolResult:
        if aside is not None and response.ByteSize() > LOOP_BYTES:
            return aside.result(encode(response, False, _TEXT), encode(response))
        structured = cast("dict[str, Any]", printer.to_dict(response))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(structured, ensure_ascii=False))],
            structured_content=structured,
        )

    # Large arguments are checked and parsed, and their answer rendered, in a worker thread:
    # the event loop keeps serving every other caller meanwhile (docs/security.md, "Limits").
    large = heavy_document(arguments, _LOOP_VALUES)
    request = await off_loop(large, _request, spec, arguments)
    if call is not None and (field := logs.resource_field(spec.method)):
        call.resource = logs.field_value(request, field)
    response = message_of(await implementations[spec.rpc](request, caller))
    return await off_loop(large or response.ByteSize() > LOOP_BYTES, result, response)


def _call_of(ctx: ServerRequestContext[Any]) -> Call | None:
    """The request line of this HTTP request (:class:`ces_eval.logs.HttpRequestLog`)."""
    scope = getattr(ctx.request, "scope", None)
    call = scope.get(logs.CALL_KEY) if isinstance(scope, dict) else None
    return call if isinstance(call, Call) else None


def _caller(ctx: ServerRequestContext[Any], *, required: bool) -> Caller:
    """The caller :func:`guarded` authenticated for this HTTP request; the local user for an
    in-process transport of an open server (``required`` false)."""
    scope = getattr(ctx.request, "scope", None)
    caller = scope.get(_CALLER_KEY) if isinstance(scope, dict) else None
    if isinstance(caller, Caller):
        return caller
    if required:
        # Every /mcp request passes through ``guarded``; fail closed if one did not.
        raise ServiceError(
            Code.UNAUTHENTICATED, "The request has no credentials.", "CREDENTIALS_MISSING"
        )
    return Caller()


def guarded(app: ASGIApp, boundary: Boundary) -> ASGIApp:
    """``app`` behind the HTTP steps of ``boundary``, in this order, each refusal a JSON-RPC
    error (id null) whose ``data`` is Google's error, before the MCP layer runs:

    1. admission: beyond the in-flight limit, 429 with ``Retry-After``;
    2. POST only: this stateless server keeps no session, so it offers no server-initiated
       stream (GET) and no session to end (DELETE). The Streamable HTTP transport lets a server
       answer both with 405 Method Not Allowed (``Allow: POST``); the SDK would instead hold a
       GET open as an event stream on which nothing ever arrives;
    3. authentication from the request's headers (with ``--auth-tokens``): 401 with
       ``WWW-Authenticate`` (MCP authorization, RFC 6750) without valid credentials. The caller
       is stored in the ASGI scope for the tool handlers."""

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        refused = boundary.enter()
        if refused is not None:
            await send_error(scope, send, refused, jsonrpc=True)
            return
        try:
            if scope["method"] != "POST":
                error = method_not_allowed(scope["method"], scope["path"], ["POST"])
                await send_error(scope, send, error, jsonrpc=True)
                return
            line = scope.get(logs.CALL_KEY)
            try:
                caller = boundary.authenticate(
                    line if isinstance(line, Call) else None, *credentials(scope)
                )
            except ServiceError as error:
                await send_error(scope, send, error, jsonrpc=True)
                return
            await app({**scope, _CALLER_KEY: caller}, receive, send)
        finally:
            boundary.leave()

    return guard


def build_server(
    implementations: Mapping[str, Handler],
    boundary: Boundary | None = None,
    *,
    tools: Iterable[str] = ("all",),
    schema: str = "full",
) -> Server[Any]:
    """The low-level MCP server over the core's handlers, each tool call run by ``boundary``
    (default: an open MCP boundary); with ``--auth-tokens`` (the boundary's tokens) every call
    must come through :func:`guarded` with valid credentials. ``tools``: the ``--mcp-tools``
    selection (a tool not listed is unknown); ``schema``: ``--mcp-schema``, how they are
    listed (calls are checked against the full input schema either way)."""
    boundary = boundary or Boundary("mcp")
    authentication = boundary.tokens is not None
    specs = selected_tools(tools)
    listed = [compact(s.tool) if schema == "compact" else s.tool for s in specs.values()]
    listing = types.ListToolsResult(tools=listed)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        call = _call_of(ctx)
        if call is not None:
            call.method = spec.rpc.lstrip("/")

        async def work() -> types.CallToolResult:
            caller = _caller(ctx, required=authentication)
            scope = getattr(ctx.request, "scope", None)
            arguments = arguments_of(scope, params.arguments or {})
            return await _call(
                spec, implementations, arguments, caller, call=call, aside=large_of(scope)
            )

        outcome = await boundary.run(call, spec.tool.name, work)
        return _error_result(outcome) if isinstance(outcome, ServiceError) else outcome

    return Server(
        "ces-eval",
        title="CES EvaluationService (local)",
        instructions=(
            "Tools of the Customer Engagement Suite EvaluationService (google.cloud.ces.v1beta) "
            "and its long-running operations, served by a local ces-eval server."
        ),
        get_tool_input_schema=lambda name: specs[name].tool.input_schema if name in specs else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


@dataclass(frozen=True)
class McpEndpoint:
    """The ``/mcp`` ASGI app and the session manager whose ``run()`` must enclose serving."""

    app: ASGIApp
    manager: StreamableHTTPSessionManager


def build_endpoint(
    implementations: Mapping[str, Handler],
    boundary: Boundary | None = None,
    *,
    tools: Iterable[str] = ("all",),
    schema: str = "full",
) -> McpEndpoint:
    """Stateless Streamable HTTP with JSON responses behind :func:`guarded` (``boundary``:
    this surface's, default an open MCP boundary without an in-flight limit).

    One rule for every HTTP request, so the SDK's own checks never answer first: Host, Origin
    and Content-Type are checked for REST and MCP alike by
    :class:`ces_eval.surfaces.http_app.BrowserGuard` (the SDK's DNS-rebinding protection is
    off; its Content-Type check is looser than ours), and bodies are limited by
    :class:`ces_eval.surfaces.http_app.BodyLimit` to ``MAX_REQUEST_BYTES`` (10 MiB) with
    Google's error shape; the SDK's limit (4 MiB by default, answered in plain text) is raised
    to the same size."""
    boundary = boundary or Boundary("mcp")
    # The SDK logs every stateless request at INFO ("Terminating session: None"): keep warnings.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    manager = StreamableHTTPSessionManager(
        app=build_server(implementations, boundary, tools=tools, schema=schema),
        json_response=True,
        stateless=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_REQUEST_BYTES,
    )
    app = guarded(lightened(StreamableHTTPASGIApp(manager)), boundary)
    return McpEndpoint(app, manager)
