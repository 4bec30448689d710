"""Write README's methods table: ``ces_eval.methods.markdown_table()`` between its markers.

The table (what ``ces-eval describe --markdown`` prints) follows from the descriptors, the
official client's routes and the core's registry; README holds a copy between
``<!-- methods:begin -->`` and ``<!-- methods:end -->`` that tests/docs/test_readme_methods.py
compares. ``make generate`` runs this after regenerating, so a new method's row is written, not
pasted; ``--check`` writes nothing and fails when the copy is stale.
"""

from __future__ import annotations

import argparse
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- methods:begin -->\n", "<!-- methods:end -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail if stale")
    check = parser.parse_args(argv).check
    from ces_eval.methods import markdown_table  # noqa: PLC0415 - loads the whole server

    text = README.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{README} needs one {BEGIN.strip()} and one {END} marker")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    written = f"{head}{BEGIN}{markdown_table()}{END}{tail}"
    if written == text:
        return 0
    if check:
        print(f"stale: {README.name}'s methods table")
        return 1
    README.write_text(written, encoding="utf-8")
    print(f"wrote {README.name}'s methods table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
