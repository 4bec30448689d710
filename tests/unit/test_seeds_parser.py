"""The seed page parser reads both page layouts: single-line and multi-line JSON blocks."""

from __future__ import annotations

from pathlib import Path

from tests.support import seeds

SINGLE_LINE = """Thing

JSON-Darstellung
{ "name": string, "nested": { object (Other) }, "map": { string: string }, // Union field kind can be only one of the following: "text": string, "blob": { object (Blob) } // End of list of possible types for union field kind. }

Felder
name\tstring Nur Ausgabe.

Colour

Enums
COLOUR_UNSPECIFIED\tNicht angegeben.
RED\tRot.

Next
"""  # noqa: E501 - the single-line layout of pages 000 and 003 puts a whole block on one line

MULTI_LINE = """תוצאה

ייצוג JSON
{
  "name": string,
  "spans": [
    {
      object (Span)
    }
  ],

  // Union field _score can be only one of the following:
  "score": integer
  // End of list of possible types for union field _score.
}
טיפוסים בני מנייה (enum)
PASS עבר.
FAIL נכשל.
"""


def test_single_line_block_and_enum_table(tmp_path: Path) -> None:
    page_file = tmp_path / "p.txt"
    page_file.write_text(SINGLE_LINE, encoding="utf-8")
    page = seeds.parse_page(page_file)
    (block,) = page.blocks
    assert block.keys == {"name", "nested", "map", "text", "blob"}
    assert block.unions == {"kind"}
    assert block.headings[0] == "Thing"
    assert [e.values for e in page.enums] == [("COLOUR_UNSPECIFIED", "RED")]


def test_multi_line_block_ignores_nested_keys(tmp_path: Path) -> None:
    page_file = tmp_path / "p.txt"
    page_file.write_text(MULTI_LINE, encoding="utf-8")
    page = seeds.parse_page(page_file)
    (block,) = page.blocks
    assert block.keys == {"name", "spans", "score"}
    assert block.unions == {"_score"}
    assert [e.values for e in page.enums] == [("PASS", "FAIL")]


def test_real_pages_parse() -> None:
    pages = seeds.load_pages()
    assert len(pages) == 4
    assert all(page.blocks and page.enums for page in pages)
