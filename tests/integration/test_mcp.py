"""The MCP surface at /mcp against the real server: the SDK's own client and raw HTTP (issue 6)."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import jsonschema
import mcp_types as types
import pytest
from mcp import Client

from ces_eval.contract import schema
from ces_eval.core.aip.names import snake_case
from ces_eval.core.service import RPCS
from ces_eval.surfaces import mcp_tools
from ces_eval.surfaces.mcp_tools import build_server, tool_specs
from ces_eval.testing.server import RunningServer, start_server
from tests.support.errors import violation_fields
from tests.support.mcp import ACCEPT, call_tool, tool_call
from tests.support.standard_routes import standard_routes

APP = "projects/p/locations/l/apps/a"

# The tools: the custom methods' written out by hand, the standard methods' named after their
# RPCs (the official service's alone: the emulator's are not tools).
EXPECTED_TOOLS = {
    "export_evaluations",
    "generate_evaluation",
    "import_evaluations",
    "upload_evaluation_audio",
    "test_persona_voice",
    "export_evaluation_results",
    "run_evaluation_result_metrics",
    "delete_evaluation_run",
    "export_evaluation_runs",
    "run_evaluation",
    "list_operations",
    "get_operation",
    "delete_operation",
    "cancel_operation",
    "wait_operation",
    "get_location",
    "list_locations",
    "get_conversation",
    "run_session",
    "generate_chat_token",
    "list_conversations",
    "delete_conversation",
    "batch_delete_conversations",
    "get_security_settings",
    "update_security_settings",
    "generate_app_resource",
    "create_app",
    "update_app",
    "delete_app",
    "export_app",
    "import_app",
    "restore_app_version",
    "execute_tool",
    "retrieve_tool_schema",
    "retrieve_tools",
    *(
        snake_case(r.rpc)
        for r in standard_routes()
        if r.service in ("EvaluationService", "AgentService")
    ),
}

# (readOnly, destructive, idempotent, openWorld)
EXPECTED_HINTS = {
    "list_evaluation_results": (True, False, True, False),
    "batch_delete_conversations": (False, True, True, False),
    "import_app": (False, True, False, False),
    "restore_app_version": (False, True, True, False),
    "retrieve_tool_schema": (True, False, True, False),
    "retrieve_tools": (True, False, True, False),
    "execute_tool": (False, False, False, True),
    "delete_app": (False, True, True, False),
    "export_app": (False, False, False, False),
    "create_evaluation": (False, False, False, False),
    "import_evaluations": (False, True, False, False),
    "upload_evaluation_audio": (False, True, False, False),
    "test_persona_voice": (True, False, True, False),
    "get_evaluation": (True, False, True, False),
    "list_evaluations": (True, False, True, False),
    "update_evaluation": (False, True, False, False),
    "delete_evaluation": (False, True, True, False),
    "export_evaluations": (False, False, False, False),
    "run_evaluation_result_metrics": (False, False, False, False),
    "create_scheduled_evaluation_run": (False, False, False, False),
    "list_scheduled_evaluation_runs": (True, False, True, False),
    "delete_scheduled_evaluation_run": (False, True, True, False),
    "get_evaluation_run": (True, False, True, False),
    "delete_evaluation_run": (False, True, True, False),
    "export_evaluation_runs": (False, False, False, False),
    "run_evaluation": (False, False, False, False),
    "cancel_operation": (False, False, True, False),
    "get_operation": (True, False, True, False),
    "list_locations": (True, False, True, False),
}


def golden(display_name: str) -> dict[str, Any]:
    return {
        "displayName": display_name,
        "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
    }


def run_with_client(
    server: RunningServer, scenario: Callable[[Client], Awaitable[None]], mode: str = "legacy"
) -> None:
    async def main() -> None:
        async with Client(f"{server.http_base}/mcp", mode=mode) as client:  # type: ignore[arg-type]
            await scenario(client)

    anyio.run(main)


def envelope_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error
    assert result.structured_content is None
    [block] = result.content
    assert isinstance(block, types.TextContent)
    body = json.loads(block.text)
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    return error


class Checked:
    """Calls tools and checks every success against the tool's outputSchema."""

    def __init__(self, client: Client, tools: list[types.Tool]) -> None:
        self.client = client
        self.tools = {tool.name: tool for tool in tools}

    async def ok(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        assert not result.is_error, result.content
        structured = result.structured_content
        assert isinstance(structured, dict)
        [block] = result.content
        assert isinstance(block, types.TextContent)
        assert json.loads(block.text) == structured
        schema = self.tools[name].output_schema
        assert schema is not None
        jsonschema.Draft202012Validator(schema).validate(structured)
        return structured

    async def error(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return envelope_of(await self.client.call_tool(name, arguments))


def test_tools_list_names_annotations_and_schemas(server: RunningServer) -> None:
    async def scenario(client: Client) -> None:
        assert client.server_info is not None
        listing = await client.list_tools()
        tools = {tool.name: tool for tool in listing.tools}
        assert set(tools) == EXPECTED_TOOLS
        for name, tool in tools.items():
            annotations = tool.annotations
            assert annotations is not None, name
            hints = (
                annotations.read_only_hint,
                annotations.destructive_hint,
                annotations.idempotent_hint,
                annotations.open_world_hint,
            )
            assert None not in hints, name
            if name in EXPECTED_HINTS:
                assert hints == EXPECTED_HINTS[name], name
            assert tool.title, name
            assert tool.description, name
            assert tool.input_schema["type"] == "object", name
            jsonschema.Draft202012Validator.check_schema(tool.input_schema)
            assert tool.output_schema is not None, name
            assert tool.output_schema["type"] == "object", name
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tools["delete_evaluation"].output_schema == {"type": "object"}
        create = tools["create_evaluation"].input_schema
        assert "parent" in create["required"]
        assert "evaluation" in create["properties"]

    run_with_client(server, scenario)


def test_tools_are_the_methods_the_core_implements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tools are picked by the core's registry, not by what the descriptors declare: every
    method of EvaluationService, Operations and Locations the core implements has its tool, and
    so every official method (RunEvaluation too); a method it lacked would have none.
    EmulatorService's methods (its ImportEvaluations too) are not tools, nor are streaming
    methods (StreamRunSession, BidiRunSession: MCP answers one result per call)."""
    specs = tool_specs()
    assert all(spec.rpc in RPCS for spec in specs.values())
    emulator_service = "/ces_eval.emulator.v1.EmulatorService/"
    methods = schema.methods()

    def streams(path: str) -> bool:
        method = methods.get(path)
        return method is not None and (method.client_streaming or method.server_streaming)

    assert {spec.rpc for spec in specs.values()} == {
        path for path in RPCS if not path.startswith(emulator_service) and not streams(path)
    }
    assert "run_session" in specs and "stream_run_session" not in specs
    # Every official unary method (EvaluationService's and the mixins') is a tool.
    official = {m.path for m in schema.official_routes().methods}
    assert {path for path in official if not streams(path)} <= {s.rpc for s in specs.values()}
    run_evaluation = "/google.cloud.ces.v1beta.EvaluationService/RunEvaluation"
    assert specs["run_evaluation"].rpc == run_evaluation
    assert "reset_project" not in specs
    assert "generate_evaluation" in specs
    assert specs["import_evaluations"].rpc != f"{emulator_service}ImportEvaluations"

    implemented = mcp_tools.implements
    monkeypatch.setattr(
        mcp_tools,
        "implements",
        lambda method: method.name != "RunEvaluation" and implemented(method),
    )
    lacking = tool_specs.__wrapped__()  # past the cache, which holds the real registry's
    assert "run_evaluation" not in lacking
    assert set(specs) - set(lacking) == {"run_evaluation"}


def test_run_evaluation_tool_reaches_its_method(server: RunningServer) -> None:
    """RunEvaluation is served as a tool: its call reaches the method, which validates it."""

    async def scenario(client: Client) -> None:
        call = Checked(client, (await client.list_tools()).tools)
        refused = await call.error("run_evaluation", {"app": APP})
        assert (refused["code"], refused["status"]) == (400, "INVALID_ARGUMENT")
        assert refused["details"][0]["reason"] == "INVALID_ARGUMENT"
        assert violation_fields(refused) == ["evaluations"]

    run_with_client(server, scenario)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_evaluation_lifecycle_and_errors(server: RunningServer, mode: str) -> None:
    async def scenario(client: Client) -> None:
        expected = "2026-07-28" if mode == "auto" else "2025-11-25"
        assert client.protocol_version == expected
        call = Checked(client, (await client.list_tools()).tools)
        created = await call.ok(
            "create_evaluation",
            {"parent": APP, "evaluationId": "e1", "evaluation": golden("First")},
        )
        assert created["name"] == f"{APP}/evaluations/e1"
        assert created["displayName"] == "First"
        fetched = await call.ok("get_evaluation", {"name": created["name"]})
        assert fetched == created
        listed = await call.ok("list_evaluations", {"parent": APP})
        assert [e["name"] for e in listed["evaluations"]] == [created["name"]]
        results = await call.ok("list_evaluation_results", {"parent": f"{APP}/evaluations/-"})
        assert results.get("evaluationResults", []) == []

        missing = await call.error("get_evaluation", {"name": f"{APP}/evaluations/nope"})
        assert (missing["code"], missing["status"]) == (404, "NOT_FOUND")

        # Invalid arguments, each named by its field path: wrong JSON types and an unknown field
        # (the proto3-JSON checks REST bodies get), a missing required field (the core's).
        bad = await call.error("get_evaluation", {"name": 5})
        assert (bad["code"], bad["status"]) == (400, "INVALID_ARGUMENT")
        assert violation_fields(bad) == ["name"]
        bad = await call.error("create_evaluation", {"evaluation": golden("x")})
        assert bad["status"] == "INVALID_ARGUMENT"
        assert "parent" in violation_fields(bad)
        bad = await call.error("list_evaluations", {"parent": APP, "pageSize": "many"})
        assert violation_fields(bad) == ["page_size"]
        bad = await call.error("list_evaluations", {"parent": APP, "colour": "blue"})
        assert violation_fields(bad) == ["colour"]
        assert "Unknown field 'colour'" in bad["message"]
        # Past the JSON types, the core's own validation answers the same way.
        bad = await call.error("get_evaluation", {"name": "not-a-resource-name"})
        assert bad["status"] == "INVALID_ARGUMENT"

        assert await call.ok("delete_evaluation", {"name": created["name"]}) == {}
        gone = await call.error("get_evaluation", {"name": created["name"]})
        assert gone["status"] == "NOT_FOUND"

    run_with_client(server, scenario, mode)


def test_seeded_results_across_evaluations_with_filter(server: RunningServer) -> None:
    run = f"{APP}/evaluationRuns/run-1"
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        base = f"/v1beta/{APP}/evaluations"
        http.post(base, params={"evaluationId": "e"}, json=golden("E")).raise_for_status()
        for result_id, evaluation_run in (("r1", run), ("r2", f"{APP}/evaluationRuns/other")):
            http.post(
                f"/emulator/v1/{APP}/evaluations/e/results",
                params={"evaluationResultId": result_id},
                json={"executionState": "COMPLETED", "evaluationRun": evaluation_run},
            ).raise_for_status()

    async def scenario(client: Client) -> None:
        call = Checked(client, (await client.list_tools()).tools)
        everything = await call.ok("list_evaluation_results", {"parent": f"{APP}/evaluations/-"})
        assert len(everything["evaluationResults"]) == 2
        filtered = await call.ok(
            "list_evaluation_results",
            {"parent": f"{APP}/evaluations/-", "filter": f'evaluation_run = "{run}"'},
        )
        assert [r["name"] for r in filtered["evaluationResults"]] == [
            f"{APP}/evaluations/e/results/r1"
        ]
        one = await call.ok("get_evaluation_result", {"name": f"{APP}/evaluations/e/results/r1"})
        assert one["executionState"] == "COMPLETED"

    run_with_client(server, scenario)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_initialize_handshake(server: RunningServer, version: str) -> None:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = http.post(
            "/mcp",
            headers={"accept": ACCEPT},
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            },
        )
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert "tools" in result["capabilities"]


def test_unknown_tool_is_a_protocol_error(server: RunningServer) -> None:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = call_tool(http, "no_such_tool", {}, request_id=7)
    body = response.json()
    assert body["id"] == 7
    assert "result" not in body
    assert body["error"]["code"] == types.INVALID_PARAMS


def test_curl_request_of_the_reference_pages(server: RunningServer) -> None:
    """tools/call without initialize, as the pages' curl example sends it."""
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = http.post(
            "/mcp",
            headers={"content-type": "application/json", "accept": ACCEPT},
            content=json.dumps(
                tool_call("list_evaluation_results", {"parent": f"{APP}/evaluations/-"})
            ),
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert body["id"] == 1
        assert body["result"]["isError"] is False
        assert body["result"]["structuredContent"] == {}

        listing = http.post(
            "/mcp",
            headers={"accept": ACCEPT},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ).json()
        names = {tool["name"] for tool in listing["result"]["tools"]}
        assert names == EXPECTED_TOOLS
        tool = next(t for t in listing["result"]["tools"] if t["name"] == "create_evaluation")
        assert tool["annotations"] == {
            "title": tool["annotations"]["title"],
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": False,
            "openWorldHint": False,
        }


def test_bad_origin_is_403_and_own_origin_is_accepted(server: RunningServer) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        bad = http.post(
            "/mcp",
            headers={"accept": ACCEPT, "origin": "http://evil.example"},
            json=request,
        )
        assert bad.status_code == 403
        own = http.post(
            "/mcp",
            headers={
                "accept": ACCEPT,
                "origin": server.http_base.replace("127.0.0.1", "localhost"),
            },
            json=request,
        )
        assert own.status_code == 200, own.text


def test_unexpected_exceptions_never_leak(caplog: pytest.LogCaptureFixture) -> None:
    """In process: a core failure is a generic INTERNAL result, its text only in the log."""

    async def broken(request: Any, caller: Any) -> Any:
        raise RuntimeError("secret database detail")

    server = build_server({spec.rpc: broken for spec in tool_specs().values()})

    async def main() -> None:
        async with Client(server) as client:
            result = await client.call_tool("get_evaluation", {"name": f"{APP}/evaluations/e"})
            error = envelope_of(result)
            assert (error["code"], error["status"]) == (500, "INTERNAL")
            assert error["details"][0]["reason"] == "INTERNAL"  # docs/semantics.md, Errors
            assert "secret" not in result.model_dump_json()

    anyio.run(main)
    assert "secret database detail" in caplog.text


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
def test_only_post_is_served_and_get_does_not_hang(server: RunningServer, verb: str) -> None:
    """A stateless server offers no server-initiated stream (GET) and no session to end
    (DELETE): 405 with ``Allow: POST`` at once (Streamable HTTP), where GET used to answer 200
    ``text/event-stream`` and then send nothing, forever."""
    with httpx.Client(base_url=server.http_base, timeout=5) as http:
        response = http.request(verb, "/mcp", headers={"accept": ACCEPT})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == -32000


def test_import_audio_and_location_tools(server: RunningServer) -> None:
    """The tools of ImportEvaluations (an operation, awaited with wait_operation),
    UploadEvaluationAudio, TestPersonaVoice and the Locations mixin, bytes as base64."""

    async def scenario(client: Client) -> None:
        call = Checked(client, (await client.list_tools()).tools)
        csv = "display_name,turn_index,action_type,text\nSpoken,1,user_input,Hello\nBad,1,x,y\n"
        operation = await call.ok(
            "import_evaluations",
            {"parent": APP, "csvContent": base64.b64encode(csv.encode()).decode()},
        )
        done = await call.ok("wait_operation", {"name": operation["name"], "timeout": "30s"})
        response = done["response"]
        assert response["@type"].endswith("ImportEvaluationsResponse")
        assert [e["displayName"] for e in response["evaluations"]] == ["Spoken"]
        assert response["importFailureCount"] == 1
        assert response["errorMessages"][0].startswith("line 3: unknown action_type 'x'")
        name = response["evaluations"][0]["name"]
        audio = base64.b64encode(bytes(16_000)).decode()  # half a second at 16 kHz
        uploaded = await call.ok("upload_evaluation_audio", {"name": name, "audioContent": audio})
        assert (uploaded["duration"], uploaded["transcript"]) == ("0.500s", "Hello")
        odd = await call.error("upload_evaluation_audio", {"name": name, "audioContent": "AA=="})
        assert violation_fields(odd) == ["audio_content"]
        voice = await call.ok(
            "test_persona_voice", {"app": APP, "personaId": "default", "text": "Hi"}
        )
        assert base64.b64decode(voice["audio"])[:4] == b"RIFF"
        listed = await call.ok("list_locations", {"name": "projects/p"})
        assert [x["locationId"] for x in listed["locations"]] == ["l"]
        got = await call.ok("get_location", {"name": "projects/p/locations/l"})
        assert got["name"] == "projects/p/locations/l"

    run_with_client(server, scenario)


def test_a_server_lists_the_tools_it_is_told_to_compactly(tmp_path: Path) -> None:
    """``--mcp-tools`` the two tools of the reference pages, ``--mcp-schema compact``: tools/list
    holds those two without output schemas, under 100 KB; another tool is unknown; the listed
    ones work as ever."""
    served = start_server(
        tmp_path / "x.db",
        "--mcp-tools",
        "create_evaluation",
        "--mcp-tools",
        "list_evaluation_results",
        "--mcp-schema",
        "compact",
    )
    try:
        with httpx.Client(base_url=served.http_base, timeout=30) as http:

            def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
                request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
                answer = http.post("/mcp", headers={"accept": ACCEPT}, json=request)
                assert answer.status_code == 200, answer.text
                assert len(answer.content) < 100_000 or method != "tools/list"
                body: dict[str, Any] = answer.json()
                return body

            tools = rpc("tools/list")["result"]["tools"]
            assert [t["name"] for t in tools] == ["create_evaluation", "list_evaluation_results"]
            assert all("outputSchema" not in t for t in tools)
            unknown = rpc("tools/call", {"name": "get_evaluation", "arguments": {"name": "x"}})
            assert unknown["error"]["code"] == types.INVALID_PARAMS
            created = rpc(
                "tools/call",
                {
                    "name": "create_evaluation",
                    "arguments": {"parent": APP, "evaluation": golden("c")},
                },
            )
            assert created["result"]["isError"] is False
            assert created["result"]["structuredContent"]["displayName"] == "c"
            refused = rpc(
                "tools/call",
                {"name": "create_evaluation", "arguments": {"parent": APP, "evaluation": {"x": 1}}},
            )
            assert refused["result"]["isError"] is True  # checked as under the full schema
    finally:
        served.kill()
