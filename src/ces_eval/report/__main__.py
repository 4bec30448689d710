"""``python -m ces_eval.report REPORT.json [--baseline BASELINE.json] -o REPORT.html``: the HTML
report of a report file ``ces-eval run --json`` wrote, as ``ces-eval run --html`` writes it.

Exit status 0 when written; 2, with one line, when a file cannot be read or is not a report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ces_eval.report.html import render_report

_KIND = "ces-eval#report"


class _Refused(Exception):
    """A file that cannot be used, said in one line."""


def _read(path: str) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise _Refused(f"cannot read {path}: {error.strerror or error}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _Refused(f"{path} is not JSON: {error}") from error
    if not isinstance(document, dict) or document.get("kind") != _KIND:
        raise _Refused(f'{path} is not a report file (its "kind" is not "{_KIND}")')
    return document


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` atomically: a reader never sees half a report."""
    folder = path.parent
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=folder, prefix=f".{path.name}.", delete=False
    ) as temporary:
        temporary.write(text)
    os.replace(temporary.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ces_eval.report",
        description="Write the HTML report of a ces-eval run --json report file.",
    )
    parser.add_argument("report", help="the report file (ces-eval run --json)")
    parser.add_argument("--baseline", help="the earlier report file it was compared with")
    parser.add_argument("-o", "--output", required=True, help="the HTML file to write")
    arguments = parser.parse_args(argv)
    try:
        report = _read(arguments.report)
        baseline = _read(arguments.baseline) if arguments.baseline else None
        _write(Path(arguments.output), render_report(report, baseline))
    except _Refused as refused:
        print(f"python -m ces_eval.report: {refused}", file=sys.stderr)
        return 2
    except OSError as error:
        problem = error.strerror or error
        print(
            f"python -m ces_eval.report: cannot write {arguments.output}: {problem}",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
