"""GitHub Actions outputs of ``ces-eval run`` (docs/gate.md, "GitHub Actions"): an ``::error``
workflow command per failing result when ``GITHUB_ACTIONS=true``, and a Markdown summary
appended to the file ``GITHUB_STEP_SUMMARY`` names.

Workflow commands are one line each: GitHub's toolkit escapes ``%``, ``\\r`` and ``\\n`` in a
command's message (as ``%25``, ``%0D``, ``%0A``), and ``:`` and ``,`` too in a property's value
(``%3A``, ``%2C``), so that a value can neither end the line nor the property list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ces_eval.gate._failures import failures
from ces_eval.gate._report import labelled
from ces_eval.gate._verdict import BASELINE_CLASSES, result_outcome

__all__ = ["error_commands", "escape_data", "escape_property", "step_summary"]


def escape_data(value: str) -> str:
    """A workflow command's message, escaped."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """A workflow command's property value (``title=...``), escaped."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def error_commands(report: Mapping[str, Any]) -> list[str]:
    """One ``::error title=...::message`` line per result that failed or errored: the title
    names the evaluation (and its repetition when it ran more than once), the message says what
    failed, one failure per line."""
    lines = []
    for label, result in labelled(report):
        outcome = result_outcome(result)
        if outcome == "PASS":
            continue
        title = f"ces-eval: {label} " + ("failed" if outcome == "FAIL" else "errored")
        message = "\n".join(failure.line() for failure in failures(result))
        lines.append(f"::error title={escape_property(title)}::{escape_data(message)}")
    return lines


def _cell(value: object) -> str:
    """Text safe in a Markdown table cell: no line break, no column bar, no HTML."""
    text = " ".join(str(value).split())
    for char, escaped in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(char, escaped)
    return text


def step_summary(report: Mapping[str, Any]) -> str:
    """The Markdown summary: counts, the gate, the failing evaluations with expected and
    observed, and the baseline's classes when there was one."""
    counts = report.get("summary", {}).get("results", {})
    gate = report.get("gate", {})
    app = report.get("app", {}).get("name", "")
    mark = "✅ holds" if gate.get("held") else "❌ fails"
    lines = [
        f"## ces-eval run: {_cell(app)}",
        "",
        "| Results | Passed | Failed | Errors |",
        "|---:|---:|---:|---:|",
        f"| {counts.get('total', 0)} | {counts.get('passed', 0)} | {counts.get('failed', 0)} "
        f"| {counts.get('errors', 0)} |",
        "",
        f"**Gate {mark}** (`--fail-on {gate.get('failOn', 'any')}`"
        + (
            f", `--max-failures {gate['maxFailures']}`"
            if gate.get("maxFailures") is not None
            else ""
        )
        + f"): {_cell(gate.get('reason', ''))}",
    ]
    rows = [
        f"| {_cell(label)} | {result_outcome(result)} | {failure.turn or ''} "
        f"| {_cell(failure.expectation)} | {_cell(failure.expected)} "
        f"| {_cell(failure.observed)} |"
        for label, result in labelled(report)
        for failure in failures(result)
    ]
    if rows:
        lines += [
            "",
            "### Failures",
            "",
            "| Evaluation | Outcome | Turn | Expectation | Expected | Observed |",
            "|---|---|---:|---|---|---|",
            *rows,
        ]
    entries = report.get("summary", {}).get("evaluations", [])
    if "baseline" in report:
        lines += ["", f"### Against the baseline `{_cell(report['baseline'].get('file', ''))}`", ""]
        lines += ["| Class | Evaluations |", "|---|---|"]
        for kind in BASELINE_CLASSES:
            members = [
                _cell(entry.get("displayName") or entry.get("evaluation"))
                for entry in entries
                if entry.get("baseline") == kind
            ]
            lines.append(f"| {kind} ({len(members)}) | {', '.join(members)} |")
        gone = report["baseline"].get("gone", [])
        lines.append(f"| GONE ({len(gone)}) | {', '.join(_cell(name) for name in gone)} |")
    return "\n".join(lines) + "\n"
