"""Large /mcp requests and results never reach the MCP SDK whole (surfaces/mcp_bodies.py): the
answers are the ones the SDK gives for small ones, through raw HTTP and the SDK's own client."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp import Client

from ces_eval.testing.server import RunningServer
from tests.support.mcp import ACCEPT

APP = "projects/p/locations/l/apps/bodies"
HEADERS = {"content-type": "application/json", "accept": ACCEPT}
PADDING = b" " * (70 * 1024)  # whitespace the JSON reader skips: a body past the 64 KiB mark


def _post(server: RunningServer, body: bytes) -> httpx.Response:
    return httpx.post(server.http_base + "/mcp", content=body, headers=HEADERS, timeout=60)


def _tool_call(name: str, arguments: dict[str, Any], padding: bytes = b"") -> bytes:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    params = json.dumps({"name": name, "arguments": arguments}).encode()
    head = json.dumps(message).encode()[:-1]
    return head + b', "params": ' + padding + params + b"}"


def _large_evaluation(steps: int, turns: int = 1) -> dict[str, Any]:
    step = {"userInput": {"text": "a line of what the user says, ünïcödé €"}}
    return {"displayName": "large", "golden": {"turns": [{"steps": [step] * steps}] * turns}}


def _created(server: RunningServer, evaluation_id: str, evaluation: dict[str, Any]) -> None:
    response = httpx.post(
        f"{server.http_base}/v1beta/{APP}/evaluations",
        params={"evaluationId": evaluation_id},
        json=evaluation,
        timeout=60,
    )
    assert response.status_code == 200, response.text


def test_a_large_tool_call_is_answered_as_the_same_call_small(server: RunningServer) -> None:
    _created(server, "small", _large_evaluation(1))
    arguments = {"name": f"{APP}/evaluations/small"}
    small = _post(server, _tool_call("get_evaluation", arguments))
    large = _post(server, _tool_call("get_evaluation", arguments, PADDING))
    assert len(_tool_call("get_evaluation", arguments, PADDING)) > 64 * 1024
    assert small.status_code == large.status_code == 200
    assert large.content == small.content  # the very bytes the SDK wrote for the small body
    assert large.headers["content-type"] == small.headers["content-type"]


def test_a_large_result_is_the_resource_as_rest_renders_it(server: RunningServer) -> None:
    _created(server, "large", _large_evaluation(900, 3))
    rest = httpx.get(f"{server.http_base}/v1beta/{APP}/evaluations/large", timeout=60)
    assert len(rest.content) > 64 * 1024
    response = _post(server, _tool_call("get_evaluation", {"name": f"{APP}/evaluations/large"}))
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    answer = response.json()
    assert answer["id"] == 7
    result = answer["result"]
    assert result.get("isError") in (None, False)
    assert result["structuredContent"] == rest.json()
    [block] = result["content"]
    assert block["text"] == json.dumps(rest.json(), ensure_ascii=False)
    assert "ces-eval-stand-in" not in response.text

    async def through_the_sdk_client() -> None:
        async with Client(f"{server.http_base}/mcp") as client:
            read = await client.call_tool("get_evaluation", {"name": f"{APP}/evaluations/large"})
            assert read.structured_content == rest.json()
            [text] = read.content
            assert isinstance(text, types.TextContent)
            assert json.loads(text.text) == rest.json()

    anyio.run(through_the_sdk_client)


def test_large_arguments_are_read_aside_and_stored(server: RunningServer) -> None:
    evaluation = _large_evaluation(900)
    body = _tool_call("create_evaluation", {"parent": APP, "evaluation": evaluation})
    assert len(body) > 64 * 1024
    response = _post(server, body)
    assert response.status_code == 200, response.text[:500]
    created = response.json()["result"]["structuredContent"]
    assert len(created["golden"]["turns"][0]["steps"]) == 900
    stored = httpx.get(f"{server.http_base}/v1beta/{created['name']}", timeout=60).json()
    assert stored["golden"] == created["golden"]


def test_a_stand_in_sent_by_a_client_is_only_an_unknown_argument(server: RunningServer) -> None:
    forged = {"ces-eval-stand-in": "0" * 32}
    large = _post(server, _tool_call("create_evaluation", forged, PADDING))
    small = _post(server, _tool_call("create_evaluation", forged))
    assert large.status_code == small.status_code == 200
    assert large.content == small.content  # the forged arguments themselves were read
    result = large.json()["result"]
    assert result["isError"] is True
    error = json.loads(result["content"][0]["text"])["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    # Checked as any arguments are (REST's body checks): the stand-in's key is a field the
    # request does not have, named as such, and nothing was looked up by it.
    assert "ces-eval-stand-in: Unknown field" in error["message"]
    [bad_request] = [d for d in error["details"] if "fieldViolations" in d]
    assert [v["field"] for v in bad_request["fieldViolations"]] == ["ces-eval-stand-in"]


def test_only_a_tool_calls_arguments_may_be_large(server: RunningServer) -> None:
    listing = b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}' + PADDING + b"}"
    small = _post(server, listing.replace(PADDING, b""))
    padded = _post(server, listing)  # large by its whitespace alone: the SDK gets it without
    assert small.status_code == padded.status_code == 200
    assert padded.content == small.content
    meta = json.dumps({"_meta": {"big": [0] * 1000}}).encode()
    refused = (
        listing.replace(b"{}", meta),
        b'{"jsonrpc": "2.0", "id": 3, "method": ' + PADDING + b"[}",
    )
    deep = b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": ' + PADDING
    deep += b"[" * 100_000 + b"]" * 100_000 + b"}"
    for body, reason in [(refused[0], None), (refused[1], None), (deep, "TOO_DEEP")]:
        response = _post(server, body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["data"]["status"] == "INVALID_ARGUMENT"
        [violation] = next(
            d["fieldViolations"] for d in error["data"]["details"] if "fieldViolations" in d
        )
        assert violation["field"] == "body"
        assert violation.get("reason") == reason
    assert server.process.poll() is None
    assert "Traceback" not in server.output()
