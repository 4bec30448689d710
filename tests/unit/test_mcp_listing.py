"""--mcp-tools and --mcp-schema: which tools tools/list shows, and how compactly. A compact
schema cuts descriptions to their first sentence and drops output schemas; what validates is
untouched, so the same arguments pass or fail under both (generated valid and mutated ones for
every tool)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import message_factory
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from mcp import types

from ces_eval.surfaces import mcp_tools
from tests.support.generated import generated_examples, json_documents, messages

SEED_TOOLS = ("create_evaluation", "list_evaluation_results")
TOOLS = sorted(mcp_tools.tool_specs())


def _listing_bytes(tools: tuple[str, ...], schema: str) -> int:
    specs = mcp_tools.selected_tools(tools)
    listed = [mcp_tools.compact(s.tool) if schema == "compact" else s.tool for s in specs.values()]
    result = types.ListToolsResult(tools=listed).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    return len(json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode())


def test_a_selection_names_tools_or_groups() -> None:
    specs = mcp_tools.tool_specs()
    read = mcp_tools.selected_tools(("read",))
    write = mcp_tools.selected_tools(("write",))
    assert read and write
    assert all(s.tool.annotations and s.tool.annotations.read_only_hint for s in read.values())
    assert not set(read) & set(write)
    assert list(mcp_tools.selected_tools(("read", "write"))) == list(specs)
    assert list(mcp_tools.selected_tools(("all",))) == list(specs)
    assert list(mcp_tools.selected_tools(SEED_TOOLS[::-1])) == list(SEED_TOOLS)
    assert mcp_tools.unknown_tools(("read", "get_evaluation", "get_evalution")) == ["get_evalution"]


def test_compact_keeps_what_validates_and_cuts_what_describes() -> None:
    full = mcp_tools.tool_specs()["create_evaluation"].tool
    cut = mcp_tools.compact(full)
    assert cut.output_schema is None and full.output_schema is not None
    assert cut.description and "." not in cut.description.rstrip(".")
    assert (full.description or "").startswith(cut.description.rstrip("."))

    def without_descriptions(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
        if isinstance(node, list):
            return [without_descriptions(v) for v in node]
        return node

    assert without_descriptions(cut.input_schema) == without_descriptions(full.input_schema)


def test_the_seed_tools_compact_fit_an_assistant() -> None:
    """The issue's bound: the two tools of the reference pages, compact, under 100 KB."""
    assert _listing_bytes(SEED_TOOLS, "compact") < 100_000
    assert _listing_bytes(("all",), "compact") < _listing_bytes(("all",), "full") / 3


@pytest.mark.parametrize("name", TOOLS)
@given(data=st.data())
@generated_examples(8)
def test_the_same_arguments_validate_in_both_forms(name: str, data: st.DataObject) -> None:
    spec = mcp_tools.tool_specs()[name]
    request = message_factory.GetMessageClass(spec.request)
    body, _ = data.draw(
        json_documents(messages(request, max_depth=4, json_safe=True), spec.request)
    )
    arguments = json.loads(body)
    full = Draft202012Validator(spec.tool.input_schema)
    compact = Draft202012Validator(mcp_tools.compact(spec.tool).input_schema)
    assert full.is_valid(arguments) == compact.is_valid(arguments)
