"""ToolService driven by Google's official Python client (``ToolServiceClient``): schemas
retrieved from a client function and an OpenAPI toolset's operation, the toolset's tools
listed, ExecuteTool answered by a mocked call, by a tool's Python fake (the server runs with
``--run-tool-fakes on``) and by an OpenAPI operation on a local HTTP API, and the refusals.

Arguments after harness.py's: the URL of the HTTP API the OpenAPI document names, and of an
MCP server (another ces-eval's /mcp offering get_location and list_locations).
"""

from __future__ import annotations

import sys
from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta

# The scenarios run as scripts: their folder is on sys.path.
from harness import Wired, main, official_client, refused, step  # type: ignore[import-not-found]

SPEC = """
openapi: 3.0.0
servers: [{url: "API"}]
paths:
  /orders/{order_id}:
    get:
      operationId: getOrder
      summary: Look up an order
      parameters: [{name: order_id, in: path, required: true, schema: {type: integer}}]
      responses:
        "200":
          content:
            application/json:
              schema: {type: object, properties: {status: {type: string}}}
"""
FAKE = """
def fake_tool_call(tool, input, callback_context):
    callback_context.variables["calls"] = callback_context.variables.get("calls", 0) + 1
    return {"output": {"order": input["order_id"], "faked": tool["id"]}}
"""


def scenario(wired: Wired, api: str, mcp: str) -> None:
    target = sys.argv[2].split(",")[0]
    tools = official_client(wired.transport, target, service="ToolService")
    app = wired.app("tools")
    confirm = wired.agents.create_tool(
        parent=app,
        tool_id="confirm",
        tool=ces_v1beta.Tool(
            client_function=ces_v1beta.ClientFunction(
                name="confirm",
                parameters=ces_v1beta.Schema(
                    type_=ces_v1beta.Schema.Type.OBJECT,
                    properties={"ok": ces_v1beta.Schema(type_=ces_v1beta.Schema.Type.BOOLEAN)},
                ),
            ),
            tool_fake_config=ces_v1beta.ToolFakeConfig(
                enable_fake_mode=True, code_block=ces_v1beta.CodeBlock(python_code=FAKE)
            ),
        ),
    )
    shop = wired.agents.create_toolset(
        parent=app,
        toolset_id="shop",
        toolset=ces_v1beta.Toolset(
            open_api_toolset=ces_v1beta.OpenApiToolset(open_api_schema=SPEC.replace("API", api))
        ),
    )
    schema = tools.retrieve_tool_schema(
        request=ces_v1beta.RetrieveToolSchemaRequest(parent=app, tool=confirm.name)
    )
    assert schema.input_schema.properties["ok"].type_ == ces_v1beta.Schema.Type.BOOLEAN
    chosen = ces_v1beta.ToolsetTool(toolset=shop.name, tool_id="getOrder")
    operation = tools.retrieve_tool_schema(
        request=ces_v1beta.RetrieveToolSchemaRequest(parent=app, toolset_tool=chosen)
    )
    step(
        "schema",
        tool=schema.tool,
        input=sorted(schema.input_schema.properties),
        operation_input=list(operation.input_schema.required),
        operation_output=sorted(operation.output_schema.properties),
    )
    listed = tools.retrieve_tools(request=ces_v1beta.RetrieveToolsRequest(toolset=shop.name))
    step("tools", names=[tool.name for tool in listed.tools])

    mock = ces_v1beta.MockConfig(
        mocked_tool_calls=[
            ces_v1beta.MockedToolCall(
                tool_id=confirm.name,
                expected_args_pattern={"order_id": 42},
                mock_response={"output": "mocked"},
            )
        ],
        unmatched_tool_call_behavior=ces_v1beta.MockConfig.UnmatchedToolCallBehavior.FAIL,
    )
    mocked = tools.execute_tool(
        request=ces_v1beta.ExecuteToolRequest(
            parent=app, tool=confirm.name, args={"order_id": 42}, mock_config=mock
        )
    )
    step("mocked", response=_dict(mocked)["response"])
    faked = tools.execute_tool(
        request=ces_v1beta.ExecuteToolRequest(
            parent=app, tool=confirm.name, args={"order_id": 7}, variables={"calls": 1}
        )
    )
    step("faked", response=_dict(faked)["response"], variables=_dict(faked)["variables"])
    called = tools.execute_tool(
        request=ces_v1beta.ExecuteToolRequest(parent=app, toolset_tool=chosen, args={"order_id": 9})
    )
    step("called", response=_dict(called)["response"], toolset=called.toolset_tool.toolset)

    _mcp(wired, tools, app, mcp)

    search = wired.agents.create_tool(
        parent=app,
        tool_id="search",
        tool=ces_v1beta.Tool(google_search_tool=ces_v1beta.GoogleSearchTool(name="search")),
    )
    unsupported = refused(
        lambda: tools.retrieve_tool_schema(
            request=ces_v1beta.RetrieveToolSchemaRequest(parent=app, tool=search.name)
        ),
        exceptions.BadRequest,  # REST: HTTP 400; gRPC: FailedPrecondition, its subclass
    )
    missing = refused(
        lambda: tools.execute_tool(
            request=ces_v1beta.ExecuteToolRequest(parent=app, tool=f"{app}/tools/nothing")
        ),
        exceptions.NotFound,
    )
    elsewhere = refused(
        lambda: tools.execute_tool(
            request=ces_v1beta.ExecuteToolRequest(parent=wired.app("elsewhere"), tool=confirm.name)
        ),
        exceptions.BadRequest,  # REST: HTTP 400; gRPC: InvalidArgument, its subclass
    )
    step("refused", unsupported=unsupported, missing=missing, elsewhere=elsewhere)


def _mcp(wired: Wired, tools: Any, app: str, mcp: str) -> None:
    override = ces_v1beta.McpToolOverride(
        tool="list_locations", name_override="places", description_override="Where"
    )
    toolset = wired.agents.create_toolset(
        parent=app,
        toolset_id="mcp",
        toolset=ces_v1beta.Toolset(
            mcp_toolset=ces_v1beta.McpToolset(server_address=mcp, tool_overrides=[override])
        ),
    )
    listed = tools.retrieve_tools(request=ces_v1beta.RetrieveToolsRequest(toolset=toolset.name))
    raw = tools.retrieve_tools(
        request=ces_v1beta.RetrieveToolsRequest(
            toolset=toolset.name, bypass_persistence_config=True
        )
    )
    schema = tools.retrieve_tool_schema(
        request=ces_v1beta.RetrieveToolSchemaRequest(
            parent=app,
            toolset_tool=ces_v1beta.ToolsetTool(toolset=toolset.name, tool_id="get_location"),
        )
    )
    far = wired.agents.create_toolset(
        parent=app,
        toolset_id="far",
        toolset=ces_v1beta.Toolset(
            mcp_toolset=ces_v1beta.McpToolset(server_address="https://mcp.example.com/mcp/")
        ),
    )
    refusal = refused(
        lambda: tools.retrieve_tools(request=ces_v1beta.RetrieveToolsRequest(toolset=far.name)),
        exceptions.BadRequest,  # REST: HTTP 400; gRPC: FailedPrecondition, its subclass
    )
    step(
        "mcp",
        names=sorted(tool.name for tool in listed.tools),
        raw=sorted(tool.display_name for tool in raw.tools),
        described=next(t.mcp_tool.description for t in listed.tools if t.display_name == "places"),
        input=",".join(sorted(schema.input_schema.properties)),
        far=refusal["reason"],
    )


def _dict(message: Any) -> dict[str, Any]:
    """A response as proto3 JSON (whole numbers of a Struct come back as doubles)."""
    return dict(type(message).to_dict(message))


if __name__ == "__main__":
    main(scenario)
