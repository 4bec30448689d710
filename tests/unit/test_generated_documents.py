"""The documents committed in ``generated/`` are what ces_eval builds, and what it serves.

``generated/openapi.json`` and ``generated/mcp_tools.json`` are written by ``make generate``
(``tools/documents.py``) so that a contract change shows in review. The server serves the
OpenAPI file (``openapi.committed_openapi``) and builds its MCP tools at start: both must stay
equal, byte for byte, to what the builders return. The generated modules, descriptor set and
route table reach the package under ``ces_eval.generated`` from the top-level ``generated/``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

import httpx
from mcp import types

from ces_eval.contract import openapi
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.surfaces.http_app import build_app
from ces_eval.surfaces.mcp_tools import tool_specs
from ces_eval.surfaces.rest import served_bindings

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"


def documents_tool() -> ModuleType:
    """tools/documents.py as a module (tools/ is a folder of scripts, not a package)."""
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("documents")


def test_the_package_maps_the_top_level_folder_in() -> None:
    assert Path(evaluation_pb2.__file__).resolve().is_relative_to(GENERATED)
    assert not (ROOT / "src" / "ces_eval" / "generated").exists()
    packaged = resources.files("ces_eval.generated")
    for name in ("descriptor_set.binpb", "official_routes.json", "openapi.json", "mcp_tools.json"):
        assert packaged.joinpath(name).read_bytes() == (GENERATED / name).read_bytes(), name


def test_committed_openapi_is_what_build_openapi_builds() -> None:
    documents = documents_tool()
    committed = (GENERATED / documents.OPENAPI).read_text(encoding="utf-8")
    built = openapi.build_openapi(served_bindings())
    assert committed == documents.encode(built), "run `make generate`"
    assert openapi.committed_openapi() == built


def test_committed_mcp_tools_are_what_tools_list_answers() -> None:
    documents = documents_tool()
    listing = types.ListToolsResult(tools=[spec.tool for spec in tool_specs().values()])
    built = listing.model_dump(mode="json", by_alias=True, exclude_none=True)["tools"]
    committed = (GENERATED / documents.MCP_TOOLS).read_text(encoding="utf-8")
    assert committed == documents.encode(built), "run `make generate`"
    tools = json.loads(committed)
    assert [tool["name"] for tool in tools] == list(tool_specs())
    assert all({"inputSchema", "outputSchema"} <= set(tool) for tool in tools)


def test_served_openapi_is_the_built_document_byte_for_byte() -> None:
    """What ``/openapi.json`` answered when the server built the document at start."""

    async def ready() -> None:
        return None

    async def get() -> httpx.Response:
        app = build_app(ready, openapi=openapi.committed_openapi())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get("/openapi.json")

    served = asyncio.run(get())
    assert served.status_code == 200
    assert served.headers["content-type"] == "application/json"
    expected = json.dumps(openapi.build_openapi(served_bindings()), ensure_ascii=False).encode()
    assert served.content == expected
