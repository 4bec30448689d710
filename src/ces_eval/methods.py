"""The table of methods: every official method and ours, how to call it and whether it is served.

One row per method of the official client (EvaluationService, Operations, Locations:
``schema.official_routes``) and per method our descriptors declare (which adds WaitOperation and
the EmulatorService). "Served" is what the server serves: a method our descriptors declare and
the core implements (:func:`ces_eval.core.service.implements`, the test ``handlers`` uses), some
of which answer FAILED_PRECONDITION for want of a model (:func:`ces_eval.core.service.needs_model`);
any other method answers UNIMPLEMENTED on gRPC and 501 on REST. The HTTP column shows our bindings
where our descriptors bind the method, else the official ones (those answer 501).

README's "Methods" section holds :func:`markdown_table` (tests/docs/test_readme_methods.py keeps
them equal); ``ces-eval describe --markdown`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ces_eval.contract import schema
from ces_eval.core.service import implements, needs_model

__all__ = ["MethodRow", "markdown_table", "method_rows"]

NOT_SERVED = "not yet: 501 UNIMPLEMENTED"
SERVED = "served"
# Served, but a generative model is what it needs and ces-eval has none (docs/semantics.md).
NEEDS_MODEL = "needs a model: 400 FAILED_PRECONDITION"


@dataclass(frozen=True)
class MethodRow:
    """One method: its gRPC path, HTTP bindings (``VERB template``), MCP tool and status
    (``needs_model``: served, answering FAILED_PRECONDITION for want of a model)."""

    path: str
    bindings: tuple[str, ...]
    tool: str
    served: bool
    needs_model: bool = False

    @property
    def status(self) -> str:
        if self.needs_model:
            return NEEDS_MODEL
        return SERVED if self.served else NOT_SERVED

    @property
    def service(self) -> str:
        return self.path.lstrip("/").split("/")[0]


def method_rows() -> tuple[MethodRow, ...]:
    """Every method, grouped by service (the official services first, in the order of their
    gRPC paths, then ours), by name within a service."""
    # mcp_tools loads the MCP SDK; only this function needs it.
    from ces_eval.surfaces.mcp_tools import tool_specs  # noqa: PLC0415

    tools = {spec.rpc: name for name, spec in tool_specs().items()}
    declared = schema.methods()
    ours: dict[str, list[str]] = {path: [] for path in declared}
    for binding in schema.http_bindings():
        ours[schema.method_path(binding.method)].append(f"{binding.verb} {binding.template}")
    official = {method.path: method for method in schema.official_routes().methods}
    services = list(dict.fromkeys(m.service for m in official.values()))
    services += [s.full_name for s in schema.services() if s.full_name not in services]
    rows = []
    for path in {*official, *declared}:
        if path in declared:
            bindings = ours[path]
        else:
            bindings = [f"{b.verb} {b.template}" for b in official[path].bindings]
        served = path in declared and implements(declared[path])
        model = served and needs_model(declared[path])
        rows.append(MethodRow(path, tuple(bindings), tools.get(path, ""), served, model))
    rows.sort(key=lambda r: (services.index(r.service), r.path))
    return tuple(rows)


def _cell(values: tuple[str, ...], empty: str) -> str:
    return "<br>".join(f"`{v}`" for v in values) if values else empty


def markdown_table() -> str:
    """The methods as a Markdown table (GitHub-flavoured), ending in a newline."""
    lines = [
        "| Method (gRPC) | HTTP | MCP tool | Status |",
        "|---|---|---|---|",
    ]
    for row in method_rows():
        lines.append(
            f"| `{row.path.lstrip('/')}` | {_cell(row.bindings, 'gRPC only')} "
            f"| {_cell((row.tool,) if row.tool else (), '—')} "
            f"| {row.status} |"
        )
    return "\n".join(lines) + "\n"
