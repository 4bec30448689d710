"""ToolService (docs/tools.md): RetrieveToolSchema, RetrieveTools and ExecuteTool over an app's
stored tools and toolsets (AgentService).

* **RetrieveToolSchema** reads a tool's input and output schemas from its declaration
  (:mod:`.tool_schemas`); a kind that declares none is FAILED_PRECONDITION ``TOOL_UNSUPPORTED``.
* **RetrieveTools** lists an OpenAPI toolset's operations, each as an ``open_api_tool`` named
  ``{toolset}/tools/{operationId}`` (its tool ID is the operationId, what a ``ToolsetTool``'s
  ``tool_id`` names); an MCP toolset's tools as its server lists them now, on an allowed host
  (:class:`~ces_eval.core.aip.ports.McpServers`), with the toolset's overrides. Anything else
  is FAILED_PRECONDITION.
* **ExecuteTool** answers, in this order: a mocked call of ``mock_config`` that matches
  (:func:`matches`), or the unmatched call's behaviour (FAIL: an ``error`` in the response); the
  tool's fake (``tool_fake_config``, its own or its toolset's) and a Python function tool, both
  run only under ``--run-tool-fakes`` (:class:`~ces_eval.core.aip.ports.CodeRunner`); an OpenAPI
  operation called over HTTP on a host the agent endpoints' rules allow
  (:func:`~ces_eval.core.resources.agent_endpoints.host_refusal`), within the tool's timeout
  (the agent endpoint's default) and an answer bound. Every other tool is FAILED_PRECONDITION
  saying why.

A tool or toolset named outside the request's ``parent`` app is INVALID_ARGUMENT: the caller's
access was granted for ``parent`` (docs/security.md), never for what the body names.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from ces_eval.contract import limits
from ces_eval.core.aip import standard
from ces_eval.core.aip.ports import AgentUnreachable, AgentUnreadable, CodeFailed
from ces_eval.core.engine import tool_schemas
from ces_eval.core.engine.tool_schemas import Unreadable
from ces_eval.core.resources import agent_endpoints, app_resources
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    mcp_tool_pb2,
    mocks_pb2,
    open_api_tool_pb2,
    session_service_pb2,
    tool_pb2,
    tool_service_pb2,
    toolset_pb2,
)
from ces_eval.storage import tables

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "matches"]

Tool = tool_pb2.Tool
Toolset = toolset_pb2.Toolset
Schema = tool_schemas.Schema
MockConfig = session_service_pb2.MockConfig
UNSUPPORTED = "TOOL_UNSUPPORTED"
FAKES_OFF = "TOOL_CODE_DISABLED"
MCP_UNREACHABLE = "MCP_SERVER_UNREACHABLE"
_NO_SCHEMA = {
    "google_search_tool": "a Google Search tool is Google's own",
    "connector_tool": "an Integration Connectors tool's schema lives in its connection",
    "data_store_tool": "a data store tool is Google's own",
    "file_search_tool": "a file search tool is Google's own",
    "system_tool": "a system tool is Google's own",
    "agent_tool": "an agent tool talks to an agent, not through a schema",
    "widget_tool": "a widget tool's schema is its widget's",
    "remote_agent_tool": "a remote agent tool talks to an agent, not through a schema",
}


def _unsupported(message: str, reason: str = UNSUPPORTED) -> ServiceError:
    return ServiceError(Code.FAILED_PRECONDITION, message, reason)


# -- finding the tool ----------------------------------------------------------------------------


class _Target:
    """The tool a request names: a stored tool, or one operation (or pinned tool) of a
    stored toolset."""

    def __init__(
        self,
        tool: Tool | None = None,
        toolset: Toolset | None = None,
        tool_id: str = "",
    ) -> None:
        self.tool = tool
        self.toolset = toolset
        self.tool_id = tool_id

    @property
    def id(self) -> str:
        """What ``fake_{id}`` names: the tool's ID, or the toolset tool's."""
        if self.tool is not None:
            return self.tool.name.rsplit("/", 1)[-1]
        return self.tool_id


def _in_parent(name: str, parent: str, field: str) -> None:
    if tables.parent_of(name) != parent:
        description = f"{name!r} is not in the app {parent}."
        raise ServiceError.invalid_argument(
            f"{field}: {description}", [FieldViolation(field, description)]
        )


async def _tool(context: Context, name: str, parent: str, field: str) -> Tool:
    resource = app_resources.TOOLS
    resource.pattern.parse(name, field, owned=resource.owned)
    _in_parent(name, parent, field)
    tool: Tool = await standard.existing(context, resource, name)
    return tool


async def _toolset(context: Context, name: str, parent: str | None, field: str) -> Toolset:
    resource = app_resources.TOOLSETS
    resource.pattern.parse(name, field, owned=resource.owned)
    if parent is not None:
        _in_parent(name, parent, field)
    toolset: Toolset = await standard.existing(context, resource, name)
    return toolset


async def _target(context: Context, request: Any, toolset_field: str) -> _Target:  # noqa: ANN401
    """The tool of a request's ``tool_identifier`` oneof."""
    which = request.WhichOneof("tool_identifier")
    if which == "tool":
        return _Target(tool=await _tool(context, request.tool, request.parent, "tool"))
    if which is None:
        description = "Name a tool or a toolset_tool."
        raise ServiceError.invalid_argument(description, [FieldViolation("tool", description)])
    chosen: common_pb2.ToolsetTool = getattr(request, toolset_field)
    toolset = await _toolset(context, chosen.toolset, request.parent, f"{toolset_field}.toolset")
    return _Target(toolset=toolset, tool_id=chosen.tool_id)


def _one_operation(spec: dict[str, Any], tool_id: str, where: str) -> tool_schemas.Operation:
    """The operation ``tool_id`` names (the only one when empty); FAILED_PRECONDITION when
    not exactly one matches."""
    found = tool_schemas.operations(spec)
    chosen = [op for op in found if op.operation_id == tool_id] if tool_id else found
    if len(chosen) != 1:
        named = f"the operationId {tool_id!r}" if tool_id else "a single operation"
        raise _unsupported(
            f"{where} has {len(chosen)} operations matching {named}; exactly one must match."
        )
    return chosen[0]


def _spec(text: str, where: str) -> dict[str, Any]:
    try:
        return tool_schemas.load_spec(text)
    except Unreadable as error:
        raise _unsupported(f"{where}: {error}") from None


# -- RetrieveToolSchema --------------------------------------------------------------------------


def _schemas_of_tool(tool: Tool) -> tuple[Schema, Schema]:
    kind = tool.WhichOneof("tool_type")
    where = f"The tool {tool.name}"
    if kind == "client_function":
        return tool.client_function.parameters, tool.client_function.response
    if kind == "mcp_tool":
        return tool.mcp_tool.input_schema, tool.mcp_tool.output_schema
    if kind == "open_api_tool":
        spec = _spec(tool.open_api_tool.open_api_schema, where)
        operation = _one_operation(spec, tool.open_api_tool.name, where)
        return _operation_schemas(spec, operation, where)
    if kind == "python_function":
        function = tool.python_function
        try:
            inputs, outputs, _ = tool_schemas.python_function(function.python_code, function.name)
        except Unreadable as error:
            raise _unsupported(f"{where}: {error}") from None
        return inputs, outputs
    why = _NO_SCHEMA.get(kind or "", "it declares no kind of tool")
    raise _unsupported(f"{where} has no schema to give: {why}.")


def _operation_schemas(
    spec: dict[str, Any], operation: tool_schemas.Operation, where: str
) -> tuple[Schema, Schema]:
    try:
        return tool_schemas.operation_schemas(spec, operation)
    except Unreadable as error:
        raise _unsupported(f"{where}, operation {operation.operation_id}: {error}") from None


async def _schemas_of_toolset_tool(
    context: Context, toolset: Toolset, tool_id: str
) -> tuple[Schema, Schema]:
    kind = toolset.WhichOneof("toolset_type")
    where = f"The toolset {toolset.name}"
    if kind == "open_api_toolset":
        spec = _spec(toolset.open_api_toolset.open_api_schema, where)
        return _operation_schemas(spec, _one_operation(spec, tool_id, where), where)
    if kind == "mcp_toolset":
        found = [
            tool
            for tool in await _mcp_tools(context, toolset, bypass=False)
            if tool.name.rsplit("/", 1)[-1] == tool_id or tool.mcp_tool.name == tool_id
        ]
        if len(found) != 1:
            raise _unsupported(
                f"{where} has {len(found)} tools named {tool_id!r}; exactly one must match."
            )
        return found[0].mcp_tool.input_schema, found[0].mcp_tool.output_schema
    raise _unsupported(f"{where} has no schema to give: its tools live in its connection.")


async def retrieve_tool_schema(
    context: Context, request: tool_service_pb2.RetrieveToolSchemaRequest, caller: Caller
) -> tool_service_pb2.RetrieveToolSchemaResponse:
    target = await _target(context, request, "toolset_tool")
    answer = tool_service_pb2.RetrieveToolSchemaResponse()
    if target.tool is not None:
        inputs, outputs = _schemas_of_tool(target.tool)
        answer.tool = target.tool.name
    else:
        assert target.toolset is not None
        inputs, outputs = await _schemas_of_toolset_tool(context, target.toolset, target.tool_id)
        answer.toolset_tool.CopyFrom(request.toolset_tool)
    answer.input_schema.CopyFrom(inputs)
    answer.output_schema.CopyFrom(outputs)
    return answer


# -- RetrieveTools -------------------------------------------------------------------------------


async def _toolset_tools(context: Context, toolset: Toolset, *, bypass: bool) -> list[Tool]:
    kind = toolset.WhichOneof("toolset_type")
    where = f"The toolset {toolset.name}"
    found: list[Tool] = []
    if kind == "open_api_toolset":
        source = toolset.open_api_toolset
        spec = _spec(source.open_api_schema, where)
        for operation in tool_schemas.operations(spec):
            tool = Tool(
                name=f"{toolset.name}/tools/{operation.operation_id}",
                display_name=operation.operation_id,
                execution_type=toolset.execution_type,
            )
            tool.open_api_tool.CopyFrom(
                open_api_tool_pb2.OpenApiTool(
                    open_api_schema=tool_schemas.narrowed(spec, operation),
                    name=operation.operation_id,
                    description=operation.description,
                    ignore_unknown_fields=source.ignore_unknown_fields,
                    url=source.url,
                )
            )
            found.append(tool)
        return found  # each is bounded by the toolset it comes from: retrieve_tools bounds all
    if kind == "mcp_toolset":
        return await _mcp_tools(context, toolset, bypass=bypass)
    raise _unsupported(f"{where} lists its tools from its connection, which this server lacks.")


def _mcp_tool(toolset: Toolset, listed: Mapping[str, Any]) -> Tool | None:
    """One tool of an MCP server's listing as the toolset's Tool (None: no name)."""
    name = listed.get("name")
    if not isinstance(name, str) or not name:
        return None
    tool = Tool(name=f"{toolset.name}/tools/{name}", display_name=name)
    mcp = tool.mcp_tool
    mcp.name = name
    mcp.description = str(listed.get("description") or "")
    mcp.server_address = toolset.mcp_toolset.server_address
    mcp.state = mcp_tool_pb2.McpTool.ACTIVE
    for key, field in (("inputSchema", mcp.input_schema), ("outputSchema", mcp.output_schema)):
        if isinstance(listed.get(key), dict):
            with contextlib.suppress(Unreadable):  # a schema past the depth bound: left out
                field.CopyFrom(tool_schemas.from_json_schema(listed[key]))
    return tool


def _overridden(toolset: Toolset, tools: list[Tool]) -> list[Tool]:
    """``tools`` with the toolset's overrides applied (new names and descriptions), and its
    pinned tools the server did not list, INACTIVE (McpTool.State)."""
    overrides = {override.tool: override for override in toolset.mcp_toolset.tool_overrides}
    listed = set()
    for tool in tools:
        listed.add(tool.mcp_tool.name)
        override = overrides.get(tool.mcp_tool.name)
        if override is None:
            continue
        if override.name_override:
            tool.mcp_tool.name_override = override.name_override
            tool.name = f"{toolset.name}/tools/{override.name_override}"
            tool.display_name = override.name_override
        if override.description_override:
            tool.mcp_tool.description = override.description_override
    for name, override in overrides.items():
        if name in listed or not override.HasField("snapshot"):
            continue
        shown = override.name_override or name
        tool = Tool(name=f"{toolset.name}/tools/{shown}", display_name=shown)
        tool.mcp_tool.name = name
        tool.mcp_tool.name_override = override.name_override
        snapshot = override.snapshot
        tool.mcp_tool.description = override.description_override or snapshot.description
        tool.mcp_tool.input_schema.CopyFrom(snapshot.input_schema)
        tool.mcp_tool.output_schema.CopyFrom(snapshot.output_schema)
        tool.mcp_tool.server_address = toolset.mcp_toolset.server_address
        tool.mcp_tool.state = mcp_tool_pb2.McpTool.INACTIVE
        tools.append(tool)
    return tools


async def _mcp_tools(context: Context, toolset: Toolset, *, bypass: bool) -> list[Tool]:
    """The tools of an MCP toolset: as its server lists them now (when its host is allowed,
    as for agent endpoints), with the toolset's overrides unless ``bypass``."""
    url = toolset.mcp_toolset.server_address
    where = f"The MCP toolset {toolset.name}"
    refusal = agent_endpoints.host_refusal(url, context.settings.agent_allow_hosts)
    if refusal is not None:
        raise _unsupported(f"{where}'s server {url} may not be called: {refusal}")
    if context.mcp is None:
        raise _unsupported(f"{where}'s server cannot be asked from this server.")
    own = context.settings.own_ports
    try:
        listed = await context.mcp.list_tools(
            url,
            _timeout(toolset),
            limits.MAX_TOOL_ANSWER_BYTES,
            lambda address, port: agent_endpoints.reaches_server(address, port, own),
        )
    except TimeoutError:
        why = f"did not answer within {_timeout(toolset):g} seconds"
    except AgentUnreachable:
        why = "could not be reached"
    except AgentUnreadable as error:
        why = f"answered what could not be read ({error})"
    else:
        tools = [tool for tool in (_mcp_tool(toolset, item) for item in listed) if tool]
        return tools if bypass else _overridden(toolset, tools)
    raise ServiceError(Code.FAILED_PRECONDITION, f"{where}'s server {url} {why}.", MCP_UNREACHABLE)


async def retrieve_tools(
    context: Context, request: tool_service_pb2.RetrieveToolsRequest, caller: Caller
) -> tool_service_pb2.RetrieveToolsResponse:
    toolset = await _toolset(context, request.toolset, None, "toolset")
    tools = await _toolset_tools(context, toolset, bypass=request.bypass_persistence_config)
    if request.tool_ids:
        wanted = set(request.tool_ids)
        tools = [tool for tool in tools if tool.name.rsplit("/", 1)[-1] in wanted]
    answer = tool_service_pb2.RetrieveToolsResponse(tools=tools)
    size = answer.ByteSize()
    if size > limits.MAX_RESOURCE_BYTES:  # what a client receives at most (docs/security.md)
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"The toolset's {len(tools)} tools take {size} bytes, more than an answer holds "
            f"({limits.MAX_RESOURCE_BYTES}); ask for fewer with tool_ids.",
            "TOOLS_TOO_LARGE",
            {"size": str(size), "limit": str(limits.MAX_RESOURCE_BYTES)},
        )
    return answer


# -- ExecuteTool ---------------------------------------------------------------------------------


def matches(pattern: Any, value: Any) -> bool:  # noqa: ANN401 - JSON values
    """Whether ``value`` matches ``pattern`` (docs/tools.md, "Mocked calls"): an object
    matches when every key of the pattern is present with a matching value (other keys are
    free); a list when it has as many elements, each matching in order; any other value when
    equal (numbers as numbers, so 1 matches 1.0)."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            key in value and matches(expected, value[key]) for key, expected in pattern.items()
        )
    if isinstance(pattern, list):
        return (
            isinstance(value, list)
            and len(pattern) == len(value)
            and all(matches(p, v) for p, v in zip(pattern, value, strict=True))
        )
    if isinstance(pattern, bool) or isinstance(value, bool):
        return type(pattern) is type(value) and pattern == value
    return bool(pattern == value)


def _mocks_target(mocked: mocks_pb2.MockedToolCall, request: Any) -> bool:  # noqa: ANN401
    which = mocked.WhichOneof("tool_identifier")
    if request.WhichOneof("tool_identifier") == "tool":
        named = mocked.tool_id if which == "tool_id" else mocked.tool
        return bool(named) and named == request.tool
    if which != "toolset":
        return False
    wanted: common_pb2.ToolsetTool = request.toolset_tool
    return mocked.toolset.toolset == wanted.toolset and (
        not mocked.toolset.tool_id or mocked.toolset.tool_id == wanted.tool_id
    )


def _mocked(config: MockConfig, request: Any, args: dict[str, Any]) -> dict[str, Any] | None:  # noqa: ANN401
    """The response the mock config gives the call: a matching mocked call's, an error when
    none matches and unmatched calls FAIL, None when they pass through."""
    for mocked in config.mocked_tool_calls:
        if _mocks_target(mocked, request) and matches(
            json_format.MessageToDict(mocked.expected_args_pattern), args
        ):
            return json_format.MessageToDict(mocked.mock_response)
    if config.unmatched_tool_call_behavior == MockConfig.PASS_THROUGH:
        return None
    return {"error": "No mocked tool call matches this call, and unmatched calls fail."}


def _fake(target: _Target) -> str:
    """The fake code in force for the target: its own tool's, else its toolset's."""
    for holder in (target.tool, target.toolset):
        if holder is None:
            continue
        config = holder.tool_fake_config
        if config.enable_fake_mode and config.code_block.python_code:
            return str(config.code_block.python_code)
    return ""


def _code_runner(context: Context, what: str) -> Any:  # noqa: ANN401 - the port
    if context.code is None:
        raise _unsupported(
            f"{what} is the team's own Python code, which this server runs only when started "
            "with --run-tool-fakes on (docs/tools.md).",
            FAKES_OFF,
        )
    return context.code


def _described(target: _Target) -> dict[str, Any]:
    """The tool as a fake receives it: its name, ID and display name."""
    if target.tool is not None:
        return {
            "name": target.tool.name,
            "id": target.id,
            "display_name": target.tool.display_name,
        }
    assert target.toolset is not None
    return {"name": f"{target.toolset.name}/tools/{target.tool_id}", "id": target.tool_id}


async def _run_code(
    context: Context, target: _Target, code: str, convention: str, call: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """What the team's code answers: (response or None when it defines no such function or
    a fake passed the call on, the variables as it left them)."""
    names = (
        [f"fake_{target.id}", "fake_tool_call"] if convention == "fake" else [call.pop("function")]
    )
    runner = _code_runner(context, "The tool's fake" if convention == "fake" else "The tool")
    variables = dict(call.get("variables") or {})
    try:
        answer: Mapping[str, Any] = await runner.call(code, names, convention, call)
    except CodeFailed as error:
        return {"error": error.message}, variables
    if "error" in answer:
        return {"error": str(answer["error"])}, variables
    if "function" not in answer:
        if convention == "fake":
            return None, variables
        raise _unsupported(f"The tool's Python code defines no function {names[0]!r}.")
    left = answer.get("variables")
    variables = dict(left) if isinstance(left, dict) else variables
    value = answer.get("value")
    if convention == "fake":
        if value is None:
            return None, variables  # the real tool runs instead (CodeBlock's contract)
        return (value if isinstance(value, dict) else {"output": value}), variables
    return {"output": value}, variables


@dataclass(frozen=True)
class _Call:
    """One HTTP request of an OpenAPI operation."""

    method: str
    uri: str
    body: bytes | None
    headers: dict[str, str]


def _server(spec: dict[str, Any], url: str) -> str:
    """Where the operations are served: the tool's ``url``, else the document's first
    server; FAILED_PRECONDITION when neither says."""
    if not url:
        servers = spec.get("servers")
        if isinstance(servers, list) and servers and isinstance(servers[0], dict):
            url = str(servers[0].get("url", ""))
    if not url:
        raise _unsupported("The OpenAPI document names no server (servers[0].url) to call.")
    return url


def _request(operation: tool_schemas.Operation, server: str, args: dict[str, Any]) -> _Call:
    """The request of ``operation`` with ``args``: path, query and header parameters by
    name, the other arguments as the JSON body (the argument ``body`` alone as itself)."""
    path = operation.path
    query: list[tuple[str, str]] = []
    headers = {"accept": "application/json", "accept-encoding": "identity"}
    rest = dict(args)
    for parameter in [
        *operation.path_parameters,
        *tool_schemas.listed(operation.spec.get("parameters")),
    ]:
        name = parameter.get("name") if isinstance(parameter, dict) else None
        if not isinstance(name, str) or name not in rest:
            continue
        value = rest.pop(name)
        text = value if isinstance(value, str) else json.dumps(value)
        where = parameter.get("in")
        if where == "path":
            path = path.replace("{" + name + "}", urllib.parse.quote(text, safe=""))
        elif where == "query":
            query.append((name, text))
        elif where == "header" and agent_endpoints.header_refusal(text) is None:
            headers[name] = text
    uri = server.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
    body: bytes | None = None
    if rest and operation.method not in ("GET", "HEAD", "DELETE"):
        body = json.dumps(rest["body"] if list(rest) == ["body"] else rest).encode()
        headers["content-type"] = "application/json"
    return _Call(operation.method, uri, body, headers)


async def _call_operation(
    context: Context,
    spec: dict[str, Any],
    operation: tool_schemas.Operation,
    url: str,
    *,
    args: dict[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """Call ``operation`` of ``spec`` with ``args`` on a host the agent endpoints' rules
    allow; its answer, or what went wrong, as the tool's response."""
    server = _server(spec, url)
    refusal = agent_endpoints.host_refusal(server, context.settings.agent_allow_hosts)
    if refusal is not None:
        raise _unsupported(f"The tool's server {server} may not be called: {refusal}")
    call = _request(operation, server, args)
    own = context.settings.own_ports
    session = context.agents.session(
        [call.uri],
        timeout,
        lambda address, port: agent_endpoints.reaches_server(address, port, own),
    )
    limit = limits.MAX_TOOL_ANSWER_BYTES
    parts: list[bytes] = []
    try:
        async with session.send(call.method, call.uri, call.body, call.headers) as answer:
            size = 0
            async for chunk in answer.chunks():
                size += len(chunk)
                if size > limit:
                    return {"error": f"The tool's server answered more than {limit} bytes."}
                parts.append(chunk)
            status = answer.status
    except TimeoutError:
        return {"error": f"The tool's server did not answer within {timeout:g} seconds."}
    except (AgentUnreachable, AgentUnreadable):
        return {"error": "The tool's server could not be reached or its answer read."}
    finally:
        await session.close()
    return _answered(status, b"".join(parts))


def _answered(status: int, data: bytes) -> dict[str, Any]:
    """An HTTP answer as the tool's response: its JSON (else its text) as ``output``, and an
    ``error`` for a status other than 2xx."""
    try:
        loaded: Any = json.loads(data) if data else None
    except (ValueError, RecursionError):
        loaded = data.decode("utf-8", "replace")
    if not 200 <= status < 300:
        return {"error": f"The tool's server answered HTTP {status}.", "output": loaded}
    return {"output": loaded}


def _timeout(*holders: Tool | Toolset | None) -> float:
    for holder in holders:
        if holder is not None and holder.HasField("timeout"):
            seconds = holder.timeout.ToNanoseconds() / 1e9
            if seconds > 0:
                return min(seconds, agent_endpoints.MAX_TIMEOUT_SECONDS)
    return agent_endpoints.DEFAULT_TIMEOUT_SECONDS


async def _run_for_real(
    context: Context, target: _Target, args: dict[str, Any], variables: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    fake = _fake(target)
    if fake:
        faked = {"tool": _described(target), "input": args, "variables": variables}
        response, variables = await _run_code(context, target, fake, "fake", faked)
        if response is not None:
            return response, variables
    timeout = _timeout(target.tool, target.toolset)
    if target.tool is not None:
        tool = target.tool
        kind = tool.WhichOneof("tool_type")
        where = f"The tool {tool.name}"
        if kind == "python_function":
            function = tool.python_function
            try:  # the function's name, checked as the schema reads it (never run here)
                tool_schemas.python_function(function.python_code, function.name)
            except Unreadable as error:
                raise _unsupported(f"{where}: {error}") from None
            name = function.name or _first_function(function.python_code)
            call = {"function": name, "input": args, "variables": variables}
            response, variables = await _run_code(
                context, target, tool.python_function.python_code, "function", call
            )
            assert response is not None
            return response, variables
        if kind == "open_api_tool":
            spec = _spec(tool.open_api_tool.open_api_schema, where)
            operation = _one_operation(spec, tool.open_api_tool.name, where)
            response = await _call_operation(
                context, spec, operation, tool.open_api_tool.url, args=args, timeout=timeout
            )
            return response, variables
        if kind == "client_function":
            raise _unsupported(f"{where} is a client function: the client runs it, not CES.")
        raise _unsupported(
            f"{where} cannot run here: only OpenAPI tools, and Python tools and fakes under "
            "--run-tool-fakes, run (docs/tools.md)."
        )
    assert target.toolset is not None
    toolset = target.toolset
    where = f"The toolset {toolset.name}"
    if toolset.WhichOneof("toolset_type") == "open_api_toolset":
        spec = _spec(toolset.open_api_toolset.open_api_schema, where)
        operation = _one_operation(spec, target.tool_id, where)
        response = await _call_operation(
            context, spec, operation, toolset.open_api_toolset.url, args=args, timeout=timeout
        )
        return response, variables
    raise _unsupported(
        f"{where}'s tools cannot run here: only OpenAPI toolsets' operations run (docs/tools.md)."
    )


def _first_function(code: str) -> str:
    import ast  # noqa: PLC0415 - only for a Python tool without a name

    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node.name
    return ""


def _whole(value: Any) -> Any:  # noqa: ANN401 - JSON values
    """``value`` with its whole numbers as ints: a Struct holds every number as a double, and
    a tool is called with ``42``, not ``42.0`` (in a path, a query or a body)."""
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


async def execute_tool(
    context: Context, request: tool_service_pb2.ExecuteToolRequest, caller: Caller
) -> tool_service_pb2.ExecuteToolResponse:
    target = await _target(context, request, "toolset_tool")
    args = _whole(json_format.MessageToDict(request.args))
    variables: dict[str, Any] = {}
    if request.HasField("variables"):
        variables = json_format.MessageToDict(request.variables)
    elif request.HasField("context"):
        found = json_format.MessageToDict(request.context).get("variables")
        variables = found if isinstance(found, dict) else {}
    response: dict[str, Any] | None = None
    if request.HasField("mock_config"):
        response = _mocked(request.mock_config, request, args)
    if response is None:
        response, variables = await _run_for_real(context, target, args, variables)
    answer = tool_service_pb2.ExecuteToolResponse()
    if target.tool is not None:
        answer.tool = target.tool.name
    else:
        answer.toolset_tool.CopyFrom(request.toolset_tool)
    depth = limits.MAX_STRUCT_DEPTH
    if _deeper(response, depth) or _deeper(variables, depth):
        # What a client could not parse (protobuf's nesting limit) or store again.
        response = {"error": f"The tool's answer nests deeper than {depth} levels."}
        variables = {}
    try:
        answer.response.update(response)
        answer.variables.update(variables)
    except (TypeError, ValueError):
        answer.response.Clear()
        answer.variables.Clear()
        answer.response.update({"error": "The tool's answer is not a JSON object."})
    return answer


def _deeper(value: Any, levels: int) -> bool:  # noqa: ANN401 - JSON values
    """Whether ``value`` holds objects or lists nested more than ``levels`` deep (a Struct
    holding only scalars is one level, as docs/security.md counts)."""
    if isinstance(value, dict):
        return levels < 1 or any(_deeper(item, levels - 1) for item in value.values())
    if isinstance(value, list):
        return levels < 1 or any(_deeper(item, levels - 1) for item in value)
    return False


RPCS: dict[str, Rpc] = {
    "ExecuteTool": execute_tool,
    "RetrieveToolSchema": retrieve_tool_schema,
    "RetrieveTools": retrieve_tools,
}
