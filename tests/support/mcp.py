"""MCP over HTTP as the tests speak it to the real server: the JSON-RPC ``tools/call`` message and
its POST to ``/mcp``, sent as the reference pages' curl example does (tests/seeds): no
``initialize`` first, the server is stateless."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["ACCEPT", "call_tool", "tool_call"]

# What MCP's streamable HTTP transport asks a client to accept on every POST.
ACCEPT = "application/json, text/event-stream"


def tool_call(name: str, arguments: Mapping[str, Any], request_id: int = 1) -> dict[str, Any]:
    """The JSON-RPC request calling the tool ``name`` with ``arguments``."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": dict(arguments)},
    }


def call_tool(
    http: httpx.Client,
    name: str,
    arguments: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    request_id: int = 1,
) -> httpx.Response:
    """POST :func:`tool_call` to ``/mcp`` of ``http``'s server, with ``headers`` besides
    :data:`ACCEPT`."""
    return http.post(
        "/mcp",
        headers={**(headers or {}), "accept": ACCEPT},
        json=tool_call(name, arguments, request_id),
    )
