"""What ``ces-eval run`` shows on the terminal (docs/gate.md, "On the terminal"): a progress
line while the run plays, on stderr and only when it is a terminal, and at the end a summary
on stdout: the counts, a table of each failure (evaluation, turn, expectation, expected,
observed) fitted to the width, and the gate's verdict."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from ces_eval.gate._failures import failures
from ces_eval.gate._report import labelled
from ces_eval.gate._verdict import result_outcome

__all__ = ["Progress", "cut", "fit", "shared_cut", "summary"]

_ELLIPSIS = "…"
_MIN_COLUMN = 6


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters: longer ends with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: max(width - 1, 0)] + _ELLIPSIS if width > 0 else ""


def fit(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """A plain-text table at most ``width`` characters wide (when it can be: each column keeps
    a few characters): the widest columns give way first, their cells cut with an ellipsis."""
    widths = [
        max(len(" ".join(str(row[index]).split())) for row in [header, *rows])
        for index in range(len(header))
    ]
    gaps = 2 * (len(header) - 1)
    while sum(widths) + gaps > width:
        widest = max(range(len(widths)), key=lambda index: widths[index])
        if widths[widest] <= _MIN_COLUMN:
            break
        widths[widest] -= 1

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cut(str(cell), size).ljust(size) for cell, size in zip(cells, widths, strict=True)
        ).rstrip()

    return [line(header), line(["-" * size for size in widths]), *(line(row) for row in rows)]


def shared_cut(expected: str, observed: str, keep: int = 12) -> tuple[str, str]:
    """``expected`` and ``observed`` without the long start they share (an ellipsis and its last
    ``keep`` characters left): cut to a column's width, two values that differ only after a
    long tool name would otherwise read the same."""
    shared = 0
    for left, right in zip(expected, observed, strict=False):
        if left != right:
            break
        shared += 1
    if shared <= keep + 8:
        return expected, observed
    start = shared - keep
    return _ELLIPSIS + expected[start:], _ELLIPSIS + observed[start:]


def _width(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to (``COLUMNS`` first, as shutil's)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


class Progress:
    """The progress line: rewritten in place on ``stream`` when it is a terminal, nothing when
    not (a CI log would fill with it)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        self.drawn = False

    def update(self, run: Mapping[str, Any]) -> None:
        """Show how far ``run`` (an EvaluationRun as REST JSON) has got."""
        if not self.shown:
            return
        progress = run.get("progress", {})
        total = int(progress.get("totalCount", 0))
        passed = int(progress.get("passedCount", 0))
        failed = int(progress.get("failedCount", 0))
        errors = int(progress.get("errorCount", 0))
        done = passed + failed + errors + int(progress.get("cancelledCount", 0))
        state = str(run.get("state", "QUEUED"))
        counts = f" {done}/{total}  passed {passed}  failed {failed}  errors {errors}  {state}"
        width = _width(self.stream) - 1
        bar_width = max(min(30, width - len(counts) - 2), 0)
        filled = bar_width * done // total if total else 0
        bar = f"[{'#' * filled}{'.' * (bar_width - filled)}]" if bar_width else ""
        line = bar + counts
        if len(line) > width:
            line = line[: max(width - 1, 0)] + _ELLIPSIS
        self.stream.write("\r" + line.ljust(width))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the line, so that what follows starts on its own."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def summary(report: Mapping[str, Any], width: int) -> list[str]:
    """The lines printed at the end: the run and its counts, each failure in a table, the
    baseline's news when there was one, and the gate's verdict."""
    counts = report.get("summary", {}).get("results", {})
    lines = []
    for run in report.get("runs", []):
        described = run.get("run", {})
        lines.append(
            f"run {described.get('name', '')} {described.get('state', '')}: "
            f"{counts.get('total', 0)} results, {counts.get('passed', 0)} passed, "
            f"{counts.get('failed', 0)} failed, {counts.get('errors', 0)} errors"
        )
    rows = [
        [
            label,
            result_outcome(result),
            str(failure.turn or ""),
            failure.expectation,
            *shared_cut(failure.expected, failure.observed),
        ]
        for label, result in labelled(report)
        for failure in failures(result)
    ]
    if rows:
        header = ["Evaluation", "Outcome", "Turn", "Expectation", "Expected", "Observed"]
        lines += ["", *fit(header, rows, width), ""]
    entries = report.get("summary", {}).get("evaluations", [])
    if "baseline" in report:
        for kind in ("NEWLY_FAILING", "NEWLY_PASSING"):
            members = [
                str(entry.get("displayName") or entry.get("evaluation"))
                for entry in entries
                if entry.get("baseline") == kind
            ]
            if members:
                lines.append(cut(f"{kind.lower().replace('_', ' ')}: {', '.join(members)}", width))
    gate = report.get("gate", {})
    verdict = "holds" if gate.get("held") else "fails"
    lines.append(
        f"gate {verdict} (--fail-on {gate.get('failOn', 'any')}): {gate.get('reason', '')}"
    )
    return lines
