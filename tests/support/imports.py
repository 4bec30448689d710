"""What a source file imports, read from its syntax tree (type-only imports included), for the
tests that check the house's structure beside ``lint-imports`` (tests/unit/test_layers.py)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def source_of(module: str) -> Path:
    """The file of ``module`` (``ces_eval.surfaces.rest``)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


def imports_of(path: Path, *, members: bool = False) -> set[str]:
    """The modules ``path`` imports, at any level; ``members``: also ``package.name`` for each
    name of a ``from package import name`` (which may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if members:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found
