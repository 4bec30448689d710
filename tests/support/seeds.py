"""Parse the public reference pages in ``tests/seeds`` into JSON key sets and enum value sets.

The pages are localized (German, Hebrew, Spanish) renderings of Google's reference docs. Two kinds
of facts are language independent and are what the coverage test checks:

* the "JSON representation" blocks: a ``{ ... }`` sketch of one message's proto3 JSON form, whose
  quoted keys are the message's ``json_name`` values;
* the "Enums" tables: one ``VALUE_NAME  description`` row per line after a localized heading.

Headings that name a block are localized (``הערכה`` for ``Evaluation``), so a block is identified by
its key set, never by its title.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SEEDS_DIR", "SeedBlock", "SeedEnum", "SeedPage", "load_pages", "parse_page"]

SEEDS_DIR = Path(__file__).resolve().parents[1] / "seeds"

_JSON_MARKERS = ("JSON-Darstellung", "Representación JSON", "ייצוג JSON")
_ENUM_MARKERS = ("Enums", "טיפוסים בני מנייה (enum)", "Enumeraciones")
_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')
_UNION = re.compile(r"Union field (\w+)")
_ENUM_ROW = re.compile(r"^([A-Z][A-Z0-9_]*)(?:\s|$)")


@dataclass(frozen=True)
class SeedBlock:
    """One JSON representation block: its top-level keys and the oneof groups it declares."""

    line: int
    keys: frozenset[str]
    unions: frozenset[str]
    headings: tuple[str, ...]
    """The non-empty lines just above the block, nearest first: its title and, on some pages,
    a one-line description between the title and the block."""


@dataclass(frozen=True)
class SeedEnum:
    line: int
    values: tuple[str, ...]


@dataclass
class SeedPage:
    path: Path
    blocks: list[SeedBlock] = field(default_factory=list)
    enums: list[SeedEnum] = field(default_factory=list)


def _top_level_keys(text: str) -> set[str]:
    """Keys at brace depth 1 of ``text`` (which starts at the block's opening brace)."""
    keys: set[str] = set()
    depth = 0
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "/" and text.startswith("//", pos):
            end = text.find("\n", pos)
            # Single-line pages put the whole block on one line; a comment there ends at the
            # next quoted key, so only skip the comment marker itself.
            pos = pos + 2 if end == -1 else (end if '"' not in text[pos:end] else pos + 2)
            continue
        elif ch == '"':
            match = _KEY.match(text, pos)
            if match is not None and depth == 1:
                keys.add(match.group(1))
                pos = match.end()
                continue
        pos += 1
    return keys


def _block_text(lines: list[str], start: int) -> str:
    """Text of the ``{ ... }`` block beginning at or after ``lines[start]``, braces balanced."""
    text = "\n".join(lines[start:])
    open_at = text.find("{")
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at : i + 1]
    raise ValueError(f"unbalanced JSON block after line {start + 1}")


def _headings(lines: list[str], marker: int, count: int = 3) -> tuple[str, ...]:
    found: list[str] = []
    index = marker - 1
    while index >= 0 and len(found) < count:
        text = lines[index].strip()
        if text:
            found.append(text)
        index -= 1
    return tuple(found)


def parse_page(path: Path) -> SeedPage:
    page = SeedPage(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    for index, raw in enumerate(lines):
        line = raw.strip()
        if line in _JSON_MARKERS:
            block = _block_text(lines, index + 1)
            page.blocks.append(
                SeedBlock(
                    line=index + 1,
                    keys=frozenset(_top_level_keys(block)),
                    unions=frozenset(_UNION.findall(block)),
                    headings=_headings(lines, index),
                )
            )
        elif line in _ENUM_MARKERS:
            values: list[str] = []
            for row in lines[index + 1 :]:
                match = _ENUM_ROW.match(row.strip())
                if not row.strip() or match is None:
                    break
                values.append(match.group(1))
            if values:
                page.enums.append(SeedEnum(line=index + 1, values=tuple(values)))
    return page


def load_pages(directory: Path = SEEDS_DIR) -> list[SeedPage]:
    return [parse_page(p) for p in sorted(directory.glob("*.txt"))]
