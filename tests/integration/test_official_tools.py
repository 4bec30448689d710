"""Google's official Python client drives ToolService over gRPC and REST
(tests/official/tools_scenario.py; docs/tools.md): schemas retrieved, an OpenAPI toolset's tools
listed and one of them called on a real HTTP API in a thread, an MCP toolset's tools listed
from another ces-eval's /mcp (overrides applied, or bypassed) and one's schema read from there,
ExecuteTool answered by a mock and by a Python fake on a server started with
``CES_EVAL_RUN_TOOL_FAKES=on``, and the refusals."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support.mcp import call_tool
from tests.support.official import run_official

pytestmark = pytest.mark.external


class _Orders(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = json.dumps({"path": self.path, "status": "shipped"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Orders)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
def faking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    database = Path(tmp_path_factory.mktemp("tools")) / "ces-eval.db"
    running = start_server(database, env={"CES_EVAL_RUN_TOOL_FAKES": "on"})
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Another ces-eval, whose /mcp is the MCP server an MCP toolset names: two tools."""
    database = Path(tmp_path_factory.mktemp("mcp-server")) / "ces-eval.db"
    env = {"CES_EVAL_MCP_TOOLS": "get_location,list_locations", "CES_EVAL_MCP_SCHEMA": "compact"}
    running = start_server(database, env=env)
    try:
        yield running
    finally:
        running.kill()


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_tools_through_the_official_client(
    faking: RunningServer, mcp_server: RunningServer, api: str, transport: str
) -> None:
    mcp = f"{mcp_server.http_base}/mcp"
    steps = run_official("tools_scenario.py", [faking], transport, api, mcp)
    app = f"projects/tools/locations/us-central1/apps/{transport}"
    assert steps["schema"] == {
        "tool": f"{app}/tools/confirm",
        "input": ["ok"],
        "operation_input": ["order_id"],
        "operation_output": ["status"],
    }
    assert steps["tools"]["names"] == [f"{app}/toolsets/shop/tools/getOrder"]
    assert steps["mocked"]["response"] == {"output": "mocked"}
    assert steps["faked"] == {
        "response": {"output": {"order": 7.0, "faked": "confirm"}},
        "variables": {"calls": 2.0},
    }
    assert steps["called"]["response"] == {"output": {"path": "/api/orders/9", "status": "shipped"}}
    assert steps["called"]["toolset"] == f"{app}/toolsets/shop"
    assert steps["mcp"] == {
        "names": [f"{app}/toolsets/mcp/tools/get_location", f"{app}/toolsets/mcp/tools/places"],
        "raw": ["get_location", "list_locations"],
        "described": "Where",
        "input": "name",
        "far": "TOOL_UNSUPPORTED",
    }
    refusals = steps["refused"]
    assert refusals["unsupported"]["reason"] == "TOOL_UNSUPPORTED"
    assert refusals["missing"]["reason"] == "RESOURCE_NOT_FOUND"
    assert refusals["elsewhere"]["violations"] == ["tool"]


def test_tools_over_mcp(faking: RunningServer) -> None:
    """The same methods as MCP tools: a mocked call answered, a schema read, a refusal as an
    isError result carrying Google's error envelope."""
    app = "projects/tools-mcp/locations/us-central1/apps/a"
    with httpx.Client(base_url=faking.http_base, timeout=30) as http:
        created = http.post(
            f"/v1beta/{app}/tools",
            params={"toolId": "confirm"},
            json={"clientFunction": {"name": "confirm", "response": {"type": "STRING"}}},
        )
        assert created.status_code == 200, created.text
        tool = created.json()["name"]
        mock = {
            "mockedToolCalls": [
                {"toolId": tool, "expectedArgsPattern": {"id": 1}, "mockResponse": {"ok": True}}
            ],
            "unmatchedToolCallBehavior": "FAIL",
        }
        executed = call_tool(
            http,
            "execute_tool",
            {"parent": app, "tool": tool, "args": {"id": 1}, "mockConfig": mock},
        ).json()["result"]
        assert executed["structuredContent"] == {"tool": tool, "response": {"ok": True}}
        schema = call_tool(http, "retrieve_tool_schema", {"parent": app, "tool": tool})
        assert schema.json()["result"]["structuredContent"]["outputSchema"] == {"type": "STRING"}
        refused = call_tool(http, "execute_tool", {"parent": app, "tool": tool}).json()["result"]
        assert refused["isError"] is True
        envelope = json.loads(refused["content"][0]["text"])
        assert envelope["error"]["status"] == "FAILED_PRECONDITION"
        assert envelope["error"]["details"][0]["reason"] == "TOOL_UNSUPPORTED"
