"""Write ``openapi.json`` and ``mcp_tools.json`` of a generated folder (``tools/generate.py``).

Both documents are what ces_eval builds from the descriptors: the OpenAPI document of the REST
surface (``ces_eval.contract.openapi.build_openapi`` of the bindings it serves,
``ces_eval.surfaces.rest.served_bindings``) and the MCP tool list with its input and output JSON
Schemas (``ces_eval.surfaces.mcp_tools.tool_specs``), as ``tools/list`` answers it. Neither lists
a method the core does not implement.
Committed in
``generated/``, a change of the contract shows in review as a change of these files, and
``make check-generated`` fails when they are stale.

They are built from the folder given, not from the installed ``ces_eval.generated``: this process
binds that import name to the folder before anything imports it, so a regeneration describes the
fresh modules and descriptor set. One process per folder: protobuf's default descriptor pool
accepts each file once.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

OPENAPI = "openapi.json"
MCP_TOOLS = "mcp_tools.json"
PACKAGE = "ces_eval.generated"


def encode(document: object) -> str:
    """The committed form: indented for review, non-ASCII text as is, keys in build order (the
    order the server serves)."""
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def _bind(folder: Path) -> None:
    """Make ``folder`` the ``ces_eval.generated`` package of this process."""
    if PACKAGE in sys.modules:
        raise RuntimeError(f"{PACKAGE} is already imported from elsewhere")
    import ces_eval  # noqa: PLC0415 - the parent package, before its generated child is bound

    spec = importlib.util.spec_from_file_location(
        PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{folder} is not a package")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    ces_eval.generated = module  # type: ignore[attr-defined] # what an import would set


def write(folder: Path) -> None:
    _bind(folder)
    # Imported once ces_eval.generated is bound: they load descriptors on import.
    from mcp import types  # noqa: PLC0415

    from ces_eval.contract.openapi import build_openapi  # noqa: PLC0415
    from ces_eval.surfaces.mcp_tools import tool_specs  # noqa: PLC0415
    from ces_eval.surfaces.rest import served_bindings  # noqa: PLC0415

    listing = types.ListToolsResult(tools=[spec.tool for spec in tool_specs().values()])
    tools = listing.model_dump(mode="json", by_alias=True, exclude_none=True)["tools"]
    (folder / OPENAPI).write_text(encode(build_openapi(served_bindings())), encoding="utf-8")
    (folder / MCP_TOOLS).write_text(encode(tools), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a generated folder (modules, descriptor set)")
    write(parser.parse_args(argv).folder.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
