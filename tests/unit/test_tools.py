"""ToolService in the core over a real SQLite file (src/ces_eval/core/engine/tools.py and
tool_schemas.py; docs/tools.md): schemas read from each kind of tool, an OpenAPI toolset's
tools, the mocked-call matching rule, OpenAPI operations called on a real HTTP server in a
thread, and the refusals."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.engine import tool_schemas
from ces_eval.core.engine.tools import matches
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2 as agent_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    mocks_pb2,
    session_service_pb2,
    tool_pb2,
    tool_service_pb2,
    toolset_pb2,
)
from tests.unit.test_core import APP, Harness

Schema = tool_schemas.Schema
OTHER_APP = APP.rsplit("/", 1)[0] + "/other"

SPEC = """
openapi: 3.0.0
servers: [{url: "http://127.0.0.1:PORT/api"}]
paths:
  /orders/{order_id}:
    parameters: [{name: order_id, in: path, required: true, schema: {type: integer}}]
    get:
      operationId: getOrder
      summary: Look up an order
      parameters: [{name: verbose, in: query, schema: {type: boolean}}]
      responses:
        "200": {content: {application/json: {schema: {$ref: "#/components/schemas/Order"}}}}
  /orders:
    post:
      operationId: createOrder
      description: Create an order
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: "#/components/schemas/NewOrder"}}}
      responses:
        "201": {content: {application/json: {schema: {$ref: "#/components/schemas/Order"}}}}
  /nodes:
    get:
      operationId: getNode
      responses:
        "200": {content: {application/json: {schema: {$ref: "#/components/schemas/Node"}}}}
components:
  schemas:
    Order:
      type: object
      required: [id]
      properties:
        id: {type: integer}
        status: {type: string, enum: [open, shipped], nullable: true}
        items: {type: array, items: {$ref: "#/components/schemas/Item"}}
    Item:
      type: object
      properties: {sku: {type: string}, qty: {type: integer, minimum: 1}}
    NewOrder:
      type: object
      required: [items]
      properties: {items: {type: array, items: {$ref: "#/components/schemas/Item"}}}
    Node:
      type: object
      properties: {child: {$ref: "#/components/schemas/Node"}}
"""

PYTHON = '''
def lookup(order_id: int, verbose: Optional[bool] = False, tags: list[str] | None = None,
           extra: dict[str, float] = {}) -> dict:
    """Look up an order.

    Args:
        order_id: The order's number.
        verbose (bool): Whether to say more.

    Returns:
        The order.
    """
    return {"id": order_id}

def second(x: str) -> str:
    return x
'''


def _schema(value: dict[str, Any]) -> Schema:
    return json_format.ParseDict(value, Schema())


class _Api(BaseHTTPRequestHandler):
    """The tools' HTTP API: echoes what it received as JSON; /api/slow never answers in time,
    /api/large answers too much, /api/missing answers 404."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/api/large"):
            data = b'"' + b"x" * (2 * 1024 * 1024) + b'"'
        elif url.path.startswith("/api/deep"):
            data = b"[" * 200 + b"]" * 200
        else:
            status = 404 if url.path.startswith("/api/missing") else 200
            echoed = {
                "method": self.command,
                "path": url.path,
                "query": dict(urllib.parse.parse_qsl(url.query)),
                "body": json.loads(body) if body else None,
            }
            data = json.dumps(echoed).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


class Tools(Harness):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(),
        )

    def tool(self, tool_id: str, parent: str = APP, **fields: Any) -> tool_pb2.Tool:
        request = agent_pb2.CreateToolRequest(
            parent=parent, tool_id=tool_id, tool=json_format.ParseDict(fields, tool_pb2.Tool())
        )
        return self.call("create_tool", request)  # type: ignore[no-any-return]

    def toolset(self, toolset_id: str, **fields: Any) -> toolset_pb2.Toolset:
        request = agent_pb2.CreateToolsetRequest(
            parent=APP,
            toolset_id=toolset_id,
            toolset=json_format.ParseDict(fields, toolset_pb2.Toolset()),
        )
        return self.call("create_toolset", request)  # type: ignore[no-any-return]

    def schemas(self, **request: Any) -> tool_service_pb2.RetrieveToolSchemaResponse:
        return self.call(  # type: ignore[no-any-return]
            "retrieve_tool_schema",
            tool_service_pb2.RetrieveToolSchemaRequest(parent=APP, **request),
        )

    def execute(self, **request: Any) -> dict[str, Any]:
        answer = self.call(
            "execute_tool",
            json_format.ParseDict(
                {"parent": APP, **request}, tool_service_pb2.ExecuteToolRequest()
            ),
        )
        return json_format.MessageToDict(answer)


@pytest.fixture
def core(tmp_path: Path, api: int) -> Iterator[Tools]:
    harness = Tools(tmp_path / "db.sqlite")
    harness.tool(
        "orders",
        openApiTool={"openApiSchema": SPEC.replace("PORT", str(api)), "name": "getOrder"},
    )
    harness.toolset("shop", openApiToolset={"openApiSchema": SPEC.replace("PORT", str(api))})
    yield harness
    harness.close()


# -- schemas -------------------------------------------------------------------------------------

ORDER = {
    "type": "OBJECT",
    "required": ["id"],
    "properties": {
        "id": {"type": "INTEGER"},
        "status": {"type": "STRING", "enum": ["open", "shipped"], "nullable": True},
        "items": {
            "type": "ARRAY",
            "items": {
                "type": "OBJECT",
                "properties": {
                    "sku": {"type": "STRING"},
                    "qty": {"type": "INTEGER", "minimum": 1},
                },
            },
        },
    },
}


@pytest.mark.parametrize(
    ("tool", "inputs", "outputs"),
    [
        pytest.param(
            {
                "clientFunction": {
                    "name": "confirm",
                    "parameters": {"type": "OBJECT", "properties": {"ok": {"type": "BOOLEAN"}}},
                    "response": {"type": "STRING"},
                }
            },
            {"type": "OBJECT", "properties": {"ok": {"type": "BOOLEAN"}}},
            {"type": "STRING"},
            id="client function",
        ),
        pytest.param(
            {
                "mcpTool": {
                    "name": "weather",
                    "serverAddress": "http://127.0.0.1:9/mcp/",
                    "inputSchema": {"type": "OBJECT", "required": ["city"]},
                    "outputSchema": {"type": "NUMBER"},
                }
            },
            {"type": "OBJECT", "required": ["city"]},
            {"type": "NUMBER"},
            id="mcp tool",
        ),
        pytest.param(
            {"openApiTool": {"openApiSchema": SPEC, "name": "getOrder"}},
            {
                "type": "OBJECT",
                "required": ["order_id"],
                "properties": {"order_id": {"type": "INTEGER"}, "verbose": {"type": "BOOLEAN"}},
            },
            ORDER,
            id="openapi get: path and query parameters, $ref response",
        ),
        pytest.param(
            {"openApiTool": {"openApiSchema": SPEC, "name": "createOrder"}},
            {
                "type": "OBJECT",
                "required": ["items"],
                "properties": {"items": ORDER["properties"]["items"]},  # type: ignore[index]
            },
            ORDER,
            id="openapi post: body properties, 201 response",
        ),
        pytest.param(
            {"pythonFunction": {"name": "lookup", "pythonCode": PYTHON}},
            {
                "type": "OBJECT",
                "description": "Look up an order.",
                "required": ["order_id"],
                "properties": {
                    "order_id": {"type": "INTEGER", "description": "The order's number."},
                    "verbose": {
                        "type": "BOOLEAN",
                        "nullable": True,
                        "description": "Whether to say more.",
                        "default": False,
                    },
                    "tags": {
                        "type": "ARRAY",
                        "items": {"type": "STRING"},
                        "nullable": True,
                        "default": None,
                    },
                    "extra": {
                        "type": "OBJECT",
                        "additionalProperties": {"type": "NUMBER"},
                        "default": {},
                    },
                },
            },
            {"type": "OBJECT", "description": "The order."},
            id="python function: annotations, defaults, docstring",
        ),
        pytest.param(
            {"pythonFunction": {"pythonCode": "def f(a, *, b: 'float'):\n    pass\n"}},
            {
                "type": "OBJECT",
                "required": ["a", "b"],
                "properties": {"a": {}, "b": {"type": "NUMBER"}},
            },
            {},
            id="python function: the first, unannotated and string annotations",
        ),
    ],
)
def test_a_tool_s_schemas_come_from_its_declaration(
    core: Tools, tool: dict[str, Any], inputs: dict[str, Any], outputs: dict[str, Any]
) -> None:
    stored = core.tool("t", **tool)
    answer = core.schemas(tool=stored.name)
    assert answer.tool == stored.name
    assert answer.input_schema == _schema(inputs)
    assert answer.output_schema == _schema(outputs)


def test_a_toolset_tool_s_schemas_come_from_its_operation(core: Tools) -> None:
    chosen = common_pb2.ToolsetTool(toolset=f"{APP}/toolsets/shop", tool_id="getOrder")
    answer = core.schemas(toolset_tool=chosen)
    assert answer.toolset_tool == chosen
    assert answer.output_schema == _schema(ORDER)
    # An MCP toolset's tools are pinned only by their snapshots, which no caller writes.
    core.toolset("mcp", mcpToolset={"serverAddress": "http://127.0.0.1:9/mcp/"})
    error = core.error(
        "retrieve_tool_schema",
        tool_service_pb2.RetrieveToolSchemaRequest(
            parent=APP, toolset_tool={"toolset": f"{APP}/toolsets/mcp", "tool_id": "ping"}
        ),
    )
    assert error.code is Code.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ({"googleSearchTool": {"name": "search"}}, "Google Search"),
        ({"openApiTool": {"openApiSchema": "openapi: [", "name": "x"}}, "neither JSON nor YAML"),
        ({"openApiTool": {"openApiSchema": SPEC, "name": "nothing"}}, "0 operations"),
        ({"openApiTool": {"openApiSchema": SPEC, "name": "getNode"}}, "deeper than 32"),
        ({"pythonFunction": {"name": "absent", "pythonCode": PYTHON}}, "no function 'absent'"),
        ({"pythonFunction": {"name": "f", "pythonCode": "def f(:"}}, "does not parse"),
    ],
)
def test_a_tool_without_a_readable_schema_is_a_failed_precondition(
    core: Tools, tool: dict[str, Any], says: str
) -> None:
    stored = core.tool("t", **tool)
    error = core.error(
        "retrieve_tool_schema",
        tool_service_pb2.RetrieveToolSchemaRequest(parent=APP, tool=stored.name),
    )
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == "TOOL_UNSUPPORTED"
    assert says in error.message


def test_missing_and_foreign_tools_are_refused(core: Tools) -> None:
    missing = core.error(
        "retrieve_tool_schema",
        tool_service_pb2.RetrieveToolSchemaRequest(parent=APP, tool=f"{APP}/tools/nothing"),
    )
    assert missing.code is Code.NOT_FOUND
    foreign = core.tool("elsewhere", parent=OTHER_APP, clientFunction={"name": "x"})
    outside = core.error(
        "execute_tool", tool_service_pb2.ExecuteToolRequest(parent=APP, tool=foreign.name)
    )
    assert outside.code is Code.INVALID_ARGUMENT
    assert outside.violations[0].field == "tool"
    no_toolset = core.error(
        "retrieve_tools",
        tool_service_pb2.RetrieveToolsRequest(toolset=f"{APP}/toolsets/nothing"),
    )
    assert no_toolset.code is Code.NOT_FOUND


# -- RetrieveTools -------------------------------------------------------------------------------


def test_an_openapi_toolset_lists_its_operations(core: Tools) -> None:
    toolset = f"{APP}/toolsets/shop"
    listed = core.call("retrieve_tools", tool_service_pb2.RetrieveToolsRequest(toolset=toolset))
    assert [tool.name for tool in listed.tools] == [
        f"{toolset}/tools/getOrder",
        f"{toolset}/tools/createOrder",
        f"{toolset}/tools/getNode",
    ]
    first = listed.tools[0]
    assert first.open_api_tool.name == "getOrder"
    assert first.open_api_tool.description == "Look up an order"
    # Each holds its own operation alone, components and servers kept.
    alone = tool_schemas.load_spec(first.open_api_tool.open_api_schema)
    assert list(alone["paths"]) == ["/orders/{order_id}"]
    assert list(alone["paths"]["/orders/{order_id}"]) == ["get", "parameters"]
    assert "Order" in alone["components"]["schemas"]
    chosen = core.call(
        "retrieve_tools",
        tool_service_pb2.RetrieveToolsRequest(toolset=toolset, tool_ids=["createOrder"]),
    )
    assert [tool.display_name for tool in chosen.tools] == ["createOrder"]


def test_tools_past_an_answer_s_size_are_asked_for_by_id(core: Tools) -> None:
    paths = {f"/op{i}": {"get": {"operationId": f"op{i}", "responses": {}}} for i in range(30)}
    spec = {"openapi": "3.0.0", "info": {"description": "x" * 200_000}, "paths": paths}
    core.toolset("big", openApiToolset={"openApiSchema": json.dumps(spec)})
    toolset = f"{APP}/toolsets/big"
    error = core.error("retrieve_tools", tool_service_pb2.RetrieveToolsRequest(toolset=toolset))
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == "TOOLS_TOO_LARGE"
    one = core.call(
        "retrieve_tools", tool_service_pb2.RetrieveToolsRequest(toolset=toolset, tool_ids=["op3"])
    )
    assert [tool.display_name for tool in one.tools] == ["op3"]


def test_an_mcp_toolset_s_server_unreachable_or_not_allowed_is_a_failed_precondition(
    core: Tools,
) -> None:
    core.toolset("mcp", mcpToolset={"serverAddress": "http://127.0.0.1:9/mcp/"})
    error = core.error(
        "retrieve_tools", tool_service_pb2.RetrieveToolsRequest(toolset=f"{APP}/toolsets/mcp")
    )
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == "MCP_SERVER_UNREACHABLE"
    assert "could not be reached" in error.message
    core.toolset("far", mcpToolset={"serverAddress": "https://mcp.example.com/mcp/"})
    far = core.error(
        "retrieve_tools", tool_service_pb2.RetrieveToolsRequest(toolset=f"{APP}/toolsets/far")
    )
    assert far.reason == "TOOL_UNSUPPORTED"
    assert "--agent-allow-hosts" in far.message


# -- mocked calls --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "args", "expected"),
    [
        ({}, {"a": 1}, True),
        ({"a": 1}, {"a": 1, "b": 2}, True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {"b": 1}, False),
        ({"a": {"b": "x"}}, {"a": {"b": "x", "c": 1}}, True),
        ({"a": {"b": "x"}}, {"a": {"c": "x"}}, False),
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}]}, True),
        ({"a": [1]}, {"a": [1, 2]}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": None}, {"a": None}, True),
        ({"a": None}, {}, False),
        ({"a": "1"}, {"a": 1}, False),
    ],
)
def test_the_mock_matching_rule(pattern: Any, args: Any, expected: bool) -> None:
    assert matches(pattern, args) is expected


def test_execute_tool_answers_a_matching_mock_or_fails_unmatched_calls(core: Tools) -> None:
    tool = f"{APP}/tools/orders"
    config = session_service_pb2.MockConfig(
        mocked_tool_calls=[
            mocks_pb2.MockedToolCall(
                tool_id=f"{APP}/tools/other", expected_args_pattern={}, mock_response={"x": 1}
            ),
            mocks_pb2.MockedToolCall(
                tool_id=tool,
                expected_args_pattern={"order_id": 42},
                mock_response={"output": {"status": "shipped"}},
            ),
        ],
        unmatched_tool_call_behavior=session_service_pb2.MockConfig.FAIL,
    )
    mock = json_format.MessageToDict(config)
    answer = core.execute(tool=tool, args={"order_id": 42, "verbose": True}, mockConfig=mock)
    assert answer == {"tool": tool, "response": {"output": {"status": "shipped"}}}
    failed = core.execute(tool=tool, args={"order_id": 7}, mockConfig=mock)
    assert "No mocked tool call matches" in failed["response"]["error"]
    # PASS_THROUGH: the real tool answers (the API echoes the call).
    mock["unmatchedToolCallBehavior"] = "PASS_THROUGH"
    real = core.execute(tool=tool, args={"order_id": 7}, mockConfig=mock)
    assert real["response"]["output"]["path"] == "/api/orders/7"


def test_a_toolset_tool_is_mocked_by_its_toolset(core: Tools) -> None:
    chosen = {"toolset": f"{APP}/toolsets/shop", "toolId": "createOrder"}
    mock = {
        "mockedToolCalls": [
            {
                "toolset": {"toolset": chosen["toolset"]},
                "expectedArgsPattern": {},
                "mockResponse": {"ok": True},
            }
        ],
        "unmatchedToolCallBehavior": "FAIL",
    }
    answer = core.execute(toolsetTool=chosen, mockConfig=mock)
    assert answer == {"toolsetTool": chosen, "response": {"ok": True}}


# -- real calls ----------------------------------------------------------------------------------


def test_an_openapi_tool_calls_its_operation(core: Tools) -> None:
    got = core.execute(tool=f"{APP}/tools/orders", args={"order_id": 42, "verbose": True})
    assert got["response"] == {
        "output": {
            "method": "GET",
            "path": "/api/orders/42",
            "query": {"verbose": "true"},
            "body": None,
        }
    }
    posted = core.execute(
        toolsetTool={"toolset": f"{APP}/toolsets/shop", "toolId": "createOrder"},
        args={"items": [{"sku": "a", "qty": 2}]},
        variables={"customer": "c1"},
    )
    assert posted["response"]["output"]["method"] == "POST"
    assert posted["response"]["output"]["body"] == {"items": [{"sku": "a", "qty": 2}]}
    assert posted["variables"] == {"customer": "c1"}


def test_an_openapi_tool_s_errors_are_in_the_response(core: Tools, api: int) -> None:
    spec = SPEC.replace("PORT", str(api)).replace("/api", "/api/missing")
    missing = core.tool("missing", openApiTool={"openApiSchema": spec, "name": "getOrder"})
    got = core.execute(tool=missing.name, args={"order_id": 1})
    assert got["response"]["error"] == "The tool's server answered HTTP 404."
    large = SPEC.replace("PORT", str(api)).replace("/api", "/api/large")
    big = core.tool("big", openApiTool={"openApiSchema": large, "name": "getOrder"})
    too_much = core.execute(tool=big.name, args={"order_id": 1})
    assert too_much["response"]["error"] == "The tool's server answered more than 1048576 bytes."
    deep = SPEC.replace("PORT", str(api)).replace("/api", "/api/deep")
    nested = core.tool("deep", openApiTool={"openApiSchema": deep, "name": "getOrder"})
    too_deep = core.execute(tool=nested.name, args={"order_id": 1})
    assert too_deep["response"] == {"error": "The tool's answer nests deeper than 24 levels."}


def test_an_openapi_tool_on_a_host_not_allowed_is_refused(core: Tools) -> None:
    far = SPEC.replace("http://127.0.0.1:PORT", "http://tools.example.com")
    tool = core.tool("far", openApiTool={"openApiSchema": far, "name": "getOrder"})
    error = core.error(
        "execute_tool", tool_service_pb2.ExecuteToolRequest(parent=APP, tool=tool.name)
    )
    assert error.code is Code.FAILED_PRECONDITION
    assert "--agent-allow-hosts" in error.message


@pytest.mark.parametrize(
    ("tool", "reason", "says"),
    [
        ({"clientFunction": {"name": "c"}}, "TOOL_UNSUPPORTED", "client runs it"),
        ({"googleSearchTool": {"name": "g"}}, "TOOL_UNSUPPORTED", "cannot run here"),
        ({"pythonFunction": {"pythonCode": PYTHON}}, "TOOL_CODE_DISABLED", "--run-tool-fakes"),
        (
            {
                "clientFunction": {"name": "c"},
                "toolFakeConfig": {
                    "enableFakeMode": True,
                    "codeBlock": {"pythonCode": "def fake_tool_call(t, i, c):\n    return {}\n"},
                },
            },
            "TOOL_CODE_DISABLED",
            "--run-tool-fakes",
        ),
    ],
)
def test_tools_that_cannot_run_are_failed_preconditions(
    core: Tools, tool: dict[str, Any], reason: str, says: str
) -> None:
    stored = core.tool("t", **tool)
    error = core.error(
        "execute_tool", tool_service_pb2.ExecuteToolRequest(parent=APP, tool=stored.name)
    )
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == reason
    assert says in error.message


# -- hostile declarations ------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "items",
                    "$ref",
                    "required",
                    "enum",
                    "default",
                    "anyOf",
                    "allOf",
                    "additionalProperties",
                    "minimum",
                    "minItems",
                    "nullable",
                    "paths",
                    "parameters",
                    "requestBody",
                    "responses",
                    "content",
                    "schema",
                    "get",
                    "post",
                    "operationId",
                    "200",
                    "application/json",
                    "in",
                    "name",
                    "#",
                    "/",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_any_json_schema_reads_or_is_unreadable(node: Any) -> None:
    """Whatever a stored document holds, reading it gives a schema or Unreadable (which the
    RPCs answer FAILED_PRECONDITION), never another exception (an INTERNAL)."""
    with contextlib.suppress(tool_schemas.Unreadable):
        tool_schemas.from_json_schema(node)
    document = node if isinstance(node, dict) else {"paths": {"/x": {"get": node}}}
    try:
        spec = tool_schemas.load_spec(json.dumps({**document, "paths": document.get("paths")}))
        for operation in tool_schemas.operations(spec):
            tool_schemas.operation_schemas(spec, operation)
            tool_schemas.narrowed(spec, operation)
    except tool_schemas.Unreadable:
        pass


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("def f(a: int, b=1, *c, **d) -> list[str] | None:\n \"'x")),
        max_size=60,
    )
)
def test_any_python_code_reads_or_is_unreadable(code: str) -> None:
    _read(code)


@pytest.mark.parametrize(
    "annotation",
    ["list[()]", "Optional[()]", "Union[()]", "dict[()]", '""', '"list["', "int[str]", "1"],
)
def test_odd_annotations_read_as_some_type(annotation: str) -> None:
    inputs, _, _ = tool_schemas.python_function(f"def f(a: {annotation}, b=x, c=1e999): pass", "")
    assert sorted(inputs.properties) == ["a", "b", "c"]


def _read(code: str) -> None:
    with contextlib.suppress(tool_schemas.Unreadable):
        tool_schemas.python_function(code, "")
