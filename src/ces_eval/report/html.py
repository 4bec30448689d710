"""The HTML report of ``ces-eval run --html``: one self-contained file people open from CI.

:func:`render_report` reads the report file ``ces-eval run --json`` writes (its format:
docs/gate.md, "The report file"; every message in it is REST JSON) and gives one HTML document:
its CSS inline, its chart an inline SVG, every link an anchor within the page, so that it opens
from a CI artifact with no network and fetches nothing. It shows the gate's verdict and why, each
run with its counts and latency report, the results of each evaluation and repetition, every
result that did not pass rendered by :mod:`ces_eval.report.render` (the same rendering as the
web view's result page), the pass rates per tag, and, when the report was compared with a
baseline, what changed since (newly failing first).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ces_eval.report import render

__all__ = ["BASELINE_ORDER", "render_report"]

_Json = Mapping[str, Any]
_NO_DATA: _Json = {}
_PAGE_STYLE = Path(__file__).with_name("page.css").read_text(encoding="utf-8")
_TEMPLATES = render.environment()
BASELINE_ORDER = ("NEWLY_FAILING", "NEWLY_PASSING", "STILL_FAILING", "NEW")
"""The baseline classes the report lists, in the order it lists them (then the evaluations gone
since the baseline; the ones still passing are only counted)."""
_BASELINE_TITLES = {
    "NEWLY_FAILING": "Newly failing",
    "NEWLY_PASSING": "Newly passing",
    "STILL_FAILING": "Still failing",
    "NEW": "New (not in the baseline)",
}
_FINE = ("PASS", "SKIPPED")  # result statuses that are not failures


def _list(value: object) -> list[Any]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _count(value: object) -> int:
    """A count of REST JSON (an int32, or an int64 written as a string); 0 when absent."""
    try:
        return int(value) if isinstance(value, int | str) else 0
    except ValueError:
        return 0


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _evaluation_of(result_name: str) -> str:
    return result_name.rsplit("/results/", 1)[0]


def _anchor(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", name)


def _run_row(entry: _Json, evaluations: Mapping[str, _Json]) -> dict[str, Any]:
    """A run of the report: its counts, its results by evaluation (each repetition in the
    order it was created) and the failures among them, rendered."""
    run = entry.get("run") or _NO_DATA
    results = sorted(_list(entry.get("results")), key=lambda r: _text(r.get("createTime")))
    progress = run.get("progress") or _NO_DATA
    by_evaluation: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        name = _text(result.get("name"))
        status = render.result_status(result)
        view = render.result_view(result, evaluations.get(_evaluation_of(name)))
        cell = {"status": status, "anchor": view["anchor"] if status not in _FINE else ""}
        by_evaluation.setdefault(_evaluation_of(name), []).append(cell | {"view": view})
    order = [n for n in evaluations if n in by_evaluation]
    order += [n for n in by_evaluation if n not in evaluations]
    # The failures in the order of the table: by evaluation, then repetition.
    failures = [
        render.render_view(cell["view"], heading=4)
        for evaluation in order
        for cell in by_evaluation[evaluation]
        if cell["anchor"]
    ]
    repetitions = max((len(cells) for cells in by_evaluation.values()), default=0)
    name = _text(run.get("name"))
    error = run.get("errorInfo") or _NO_DATA
    return {
        "name": name,
        "display_name": _text(run.get("displayName")) or _short(name),
        "anchor": "run-" + _anchor(_short(name)),
        "state": _text(run.get("state")) or "EVALUATION_RUN_STATE_UNSPECIFIED",
        "counts": {
            field: _count(progress.get(f"{field}Count"))
            for field in ("total", "passed", "failed", "error", "cancelled")
        },
        "error": f"{_text(error.get('errorType'))} {_text(error.get('errorMessage'))}".strip(),
        "latency": render.render_latency_report(run.get("latencyReport")),
        "repetitions": range(1, repetitions + 1),
        "rows": [
            {
                "name": evaluation,
                "display_name": _text(evaluations.get(evaluation, _NO_DATA).get("displayName"))
                or _short(evaluation),
                "cells": by_evaluation[evaluation],
            }
            for evaluation in order
        ],
        "failures": failures,
    }


def _tag_rates(summary: Sequence[_Json]) -> list[dict[str, Any]]:
    """Per tag (from each evaluation of the summary; "(no tag)" for untagged ones): how many
    evaluations passed and how many results did."""
    tags: dict[str, dict[str, int]] = {}
    for entry in summary:
        names = [_text(t) for t in entry.get("tags") or []] or ["(no tag)"]
        for tag in dict.fromkeys(names):
            tally = tags.setdefault(
                tag, dict.fromkeys(("evaluations", "passing", "passed", "results"), 0)
            )
            tally["evaluations"] += 1
            tally["passing"] += _text(entry.get("status")) == "PASSED"
            passed = _count(entry.get("passed"))
            tally["passed"] += passed
            tally["results"] += passed + _count(entry.get("failed")) + _count(entry.get("errors"))
    rows = []
    for tag, tally in sorted(tags.items()):
        rate = tally["passed"] / tally["results"] if tally["results"] else None
        rows.append({"tag": tag, **tally, "rate": rate})
    return rows


def _chart(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The bars of the pass rates per tag, laid out for an inline SVG (no script, no font)."""
    bar, gap, label_width, width = 18, 8, 160, 640
    plot = width - label_width - 60
    bars = []
    for index, row in enumerate(rows):
        rate = row["rate"]
        y = index * (bar + gap)
        bars.append(
            {
                "y": y,
                "text_y": y + bar - 5,
                "tag": row["tag"] if len(row["tag"]) <= 24 else row["tag"][:23] + "…",
                "width": round(plot * rate, 1) if rate is not None else 0,
                "label": "\N{EN DASH}" if rate is None else f"{rate:.0%}",
                "label_x": label_width + (plot * rate if rate is not None else 0) + 6,
            }
        )
    return {
        "bars": bars,
        "x": label_width,
        "plot": plot,
        "width": width,
        "height": max(1, len(rows) * (bar + gap)),
        "bar": bar,
    }


def _baseline(
    report: _Json, summary: Sequence[_Json], baseline: _Json | None
) -> dict[str, Any] | None:
    """The comparison with the baseline: the evaluations of each class (the summary's own
    ``baseline`` classes, as ``ces-eval run --baseline`` set them), with their status in the
    baseline when it is at hand, and the ones gone since; None when the report was not
    compared."""
    compared = report.get("baseline")
    if not any("baseline" in entry for entry in summary) and not isinstance(compared, Mapping):
        return None
    compared = compared if isinstance(compared, Mapping) else _NO_DATA
    before: dict[str, _Json] = {}
    if baseline:
        listed = (baseline.get("summary") or _NO_DATA).get("evaluations")
        before = {_text(e.get("evaluation")): e for e in _list(listed)}
    classes: dict[str, list[dict[str, str]]] = {kind: [] for kind in BASELINE_ORDER}
    still_passing = 0
    for entry in summary:
        kind = _text(entry.get("baseline"))
        if kind == "STILL_PASSING":
            still_passing += 1
        elif kind in classes:
            name = _text(entry.get("evaluation"))
            classes[kind].append(
                {
                    "name": name,
                    "display_name": _text(entry.get("displayName")) or _short(name),
                    "status": _text(entry.get("status")),
                    "before": _text(before.get(name, _NO_DATA).get("status")),
                }
            )
    gone = []
    for name in compared.get("gone") or []:
        entry = before.get(_text(name), _NO_DATA)
        gone.append(
            {
                "name": _text(name),
                "display_name": _text(entry.get("displayName")) or _short(_text(name)),
                "before": _text(entry.get("status")),
            }
        )
    return {
        "file": _text(compared.get("file")),
        "end_time": _text(compared.get("endTime")) or _text((baseline or _NO_DATA).get("endTime")),
        "sections": [
            {"kind": kind, "title": _BASELINE_TITLES[kind], "entries": classes[kind]}
            for kind in BASELINE_ORDER
        ],
        "gone": gone,
        "still_passing": still_passing,
    }


def render_report(report: _Json, baseline: _Json | None = None) -> str:
    """The HTML report of ``report`` (a ``ces-eval#report`` document, as ``ces-eval run
    --json`` writes it), compared with ``baseline`` (the earlier report it was compared with,
    or None): one self-contained HTML document."""
    evaluations = {_text(e.get("name")): e for e in _list(report.get("evaluations"))}
    summary_json = report.get("summary") or _NO_DATA
    summary = _list(summary_json.get("evaluations"))
    totals = summary_json.get("results") or _NO_DATA
    app = report.get("app") or _NO_DATA
    gate = report.get("gate")
    tags = _tag_rates(summary)
    runs = [_run_row(entry, evaluations) for entry in _list(report.get("runs"))]
    values = {
        "css": _PAGE_STYLE + render.STYLESHEET,
        "app": {
            "name": _text(app.get("name")),
            "display_name": _text(app.get("displayName")) or _short(_text(app.get("name"))),
        },
        "server": _text(report.get("server")),
        # The RunEvaluationRequest fields sent, as one line.
        "options": json.dumps(options, ensure_ascii=False, separators=(", ", ": "))
        if isinstance(options := report.get("options"), Mapping) and options
        else "",
        "start": _text(report.get("startTime")),
        "end": _text(report.get("endTime")),
        "totals": {k: _count(totals.get(k)) for k in ("total", "passed", "failed", "errors")},
        "gate": {
            "held": bool(gate.get("held")),
            "reason": _text(gate.get("reason")),
            "fail_on": _text(gate.get("failOn")),
            "max_failures": _text(gate.get("maxFailures")),
            "failing": _count(gate.get("failing")),
        }
        if isinstance(gate, Mapping)
        else None,
        "runs": runs,
        "failures": sum(len(run["failures"]) for run in runs),
        "tags": tags,
        "chart": _chart(tags),
        "baseline": _baseline(report, summary, baseline),
        "summary": [
            {
                "name": _text(e.get("evaluation")),
                "display_name": _text(e.get("displayName")) or _short(_text(e.get("evaluation"))),
                "status": _text(e.get("status")),
                "passed": _count(e.get("passed")),
                "failed": _count(e.get("failed")),
                "errors": _count(e.get("errors")),
                "tags": [_text(t) for t in e.get("tags") or []],
            }
            for e in summary
        ],
    }
    return _TEMPLATES.get_template("report.html").render(values)
