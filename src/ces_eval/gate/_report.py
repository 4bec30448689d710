"""The report file of ``ces-eval run --json`` (docs/gate.md, "The report file"): built from what
the server answered, read back as a baseline, and compared with one.

Every other output (the terminal summary, JUnit, the GitHub outputs, the HTML page) is a
function of this one document, so that they cannot disagree.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ces_eval.gate._errors import RunNotDone
from ces_eval.gate._verdict import classify, evaluation_of

__all__ = [
    "KIND",
    "VERSION",
    "compare",
    "labelled",
    "ordered_results",
    "read_baseline",
    "seconds",
    "write_json",
    "write_text",
]

KIND = "ces-eval#report"
VERSION = 1
# A run stores at most 256 MiB of results as binary protobuf (docs/semantics.md, "Byte budget");
# their JSON is larger. What a baseline may hold, read whole into memory, is bounded here.
BASELINE_MAX_BYTES = 1024 * 1024 * 1024


def read_baseline(path: Path, app: str) -> dict[str, Any]:
    """The report at ``path`` for use as a baseline of a run of ``app``; a file that cannot be
    read, is not such a report, or is one of another app is refused in one line."""
    try:
        if path.stat().st_size > BASELINE_MAX_BYTES:
            raise RunNotDone(f"--baseline {path}: larger than a report can be")
        document = json.loads(path.read_bytes())
    except OSError as error:
        raise RunNotDone(f"--baseline {path}: {error.strerror or error}") from None
    except (ValueError, RecursionError) as error:
        raise RunNotDone(f"--baseline {path}: not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise RunNotDone(f"--baseline {path}: not a ces-eval run --json report")
    if document.get("version") != VERSION:
        raise RunNotDone(
            f"--baseline {path}: report version {document.get('version')!r}, "
            f"this ces-eval reads version {VERSION}"
        )
    summary = document.get("summary")
    entries = summary.get("evaluations") if isinstance(summary, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict)
        and isinstance(entry.get("evaluation"), str)
        and entry.get("status") in ("PASSED", "FAILED", "ERROR")
        for entry in entries
    ):
        raise RunNotDone(f"--baseline {path}: its summary.evaluations is malformed")
    other = document.get("app", {}).get("name") if isinstance(document.get("app"), dict) else None
    if other != app:
        raise RunNotDone(f"--baseline {path}: a report of {other}, not of {app}")
    return document


def compare(
    entries: Sequence[dict[str, Any]], baseline: Mapping[str, Any], file: str
) -> dict[str, Any]:
    """Set each entry's ``baseline`` class (in place) against ``baseline``'s statuses, and answer
    the report's ``baseline`` member: the file as given, its end time and the evaluations it
    had that this run has not."""
    before = {entry["evaluation"]: entry["status"] for entry in baseline["summary"]["evaluations"]}
    for entry in entries:
        entry["baseline"] = classify(entry["status"], before.get(entry["evaluation"]))
    now = {entry["evaluation"] for entry in entries}
    return {
        "file": file,
        "endTime": baseline.get("endTime", ""),
        "gone": [name for name in before if name not in now],
    }


def seconds(duration: object) -> float:
    """A proto3 JSON Duration (``"1.5s"``) in seconds; 0 for anything else."""
    if isinstance(duration, str) and duration.endswith("s"):
        try:
            value = float(duration[:-1])
        except ValueError:
            return 0.0
        return value if math.isfinite(value) else 0.0
    return 0.0


def ordered_results(
    report: Mapping[str, Any], run: Mapping[str, Any]
) -> list[tuple[Mapping[str, Any], int, int]]:
    """The results of one of the report's runs, each with its repetition (from 1) and the number
    of its evaluation's results, ordered as the report's evaluations, then as the run lists
    them (results are stored as they end, not in the plan's order: docs/semantics.md)."""
    listed = run.get("run", {}).get("evaluationResults", [])
    position = {str(name): index for index, name in enumerate(listed)}
    rank = {
        str(evaluation.get("name")): index
        for index, evaluation in enumerate(report.get("evaluations", []))
    }
    results = sorted(
        run.get("results", []),
        key=lambda result: (
            rank.get(evaluation_of(result), len(rank)),
            evaluation_of(result),
            position.get(str(result.get("name")), len(position)),
            str(result.get("createTime", "")),
        ),
    )
    totals: dict[str, int] = {}
    for result in results:
        totals[evaluation_of(result)] = totals.get(evaluation_of(result), 0) + 1
    seen: dict[str, int] = {}
    ordered = []
    for result in results:
        evaluation = evaluation_of(result)
        seen[evaluation] = seen.get(evaluation, 0) + 1
        ordered.append((result, seen[evaluation], totals[evaluation]))
    return ordered


def labelled(report: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every result of the report's runs (:func:`ordered_results`' order) with the label people
    read: its evaluation's display name, and its repetition when the evaluation ran more than
    once."""
    names = {
        str(evaluation.get("name")): str(evaluation.get("displayName") or evaluation.get("name"))
        for evaluation in report.get("evaluations", [])
    }
    for run in report.get("runs", []):
        for result, repetition, repetitions in ordered_results(report, run):
            evaluation = evaluation_of(result)
            label = names.get(evaluation, evaluation.rsplit("/", 1)[-1])
            if repetitions > 1:
                label += f" ({repetition} of {repetitions})"
            yield label, result


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """Write ``report`` (UTF-8, 2-space indent) to ``path``, whole or not at all."""
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    write_text(path, text, "--json")


def write_text(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, renamed over it: a reader
    never sees half a report. A folder that cannot be written is one line."""
    temporary = path.with_name(f".{path.name}.partial")
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise RunNotDone(f"{flag} {path}: {error.strerror or error}") from None
