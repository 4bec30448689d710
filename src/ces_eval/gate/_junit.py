"""``ces-eval run --junit FILE``: the report as JUnit XML, in the common schema CI systems read
(Jenkins, GitLab, GitHub's reporters): ``testsuites`` > ``testsuite`` (name, tests, failures,
errors, skipped, time, timestamp) > ``testcase`` (classname, name, time) with ``failure`` or
``error``. One testsuite per run, one testcase per evaluation and repetition (docs/gate.md,
"JUnit")."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from ces_eval.gate._failures import failures
from ces_eval.gate._report import labelled, seconds
from ces_eval.gate._verdict import result_outcome

__all__ = ["junit"]

# What XML 1.0 cannot hold, even escaped (its Char production): ElementTree writes it as is.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: object) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def _timestamp(value: object) -> str:
    """An RFC 3339 UTC time as the schema's timestamp: seconds, no zone (it is UTC)."""
    match = re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", str(value))
    return match.group(0) if match else ""


def _case_time(result: Mapping[str, Any]) -> float:
    turns = result.get("goldenResult", {}).get("turnReplayResults", [])
    return sum(seconds(turn.get("turnLatency")) for turn in turns)


def junit(report: Mapping[str, Any]) -> str:
    """The JUnit XML document of ``report`` (a ``ces-eval run --json`` report)."""
    app = str(report.get("app", {}).get("name", ""))
    classname = app.rsplit("/", 1)[-1] or "ces-eval"
    root = ET.Element("testsuites", name=f"ces-eval run {app}")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for index, run in enumerate(report.get("runs", [])):
        described = run.get("run", {})
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_text(described.get("displayName") or described.get("name") or "run"),
            id=str(index),
            timestamp=_timestamp(described.get("createTime") or report.get("startTime")),
        )
        counts = {"tests": 0, "failures": 0, "errors": 0}
        suite_time = 0.0
        for name, result in labelled({**report, "runs": [run]}):
            time = _case_time(result)
            suite_time += time
            case = ET.SubElement(
                suite, "testcase", classname=_text(classname), name=_text(name), time=f"{time:.3f}"
            )
            counts["tests"] += 1
            outcome = result_outcome(result)
            found = failures(result)
            if outcome != "PASS":
                kind = "failure" if outcome == "FAIL" else "error"
                counts["failures" if outcome == "FAIL" else "errors"] += 1
                element = ET.SubElement(
                    case,
                    kind,
                    message=_text(found[0].line()),
                    type=_text(result.get("errorInfo", {}).get("errorType", outcome)),
                )
                element.text = _text("\n".join(failure.line() for failure in found) + "\n")
            ET.SubElement(case, "system-out").text = _text(result.get("name", ""))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("skipped", "0")
        suite.set("time", f"{suite_time:.3f}")
        total_time += suite_time
        # Attribute order as the schema lists them, for people reading the file.
        suite.attrib = {
            key: suite.attrib[key]
            for key in ("name", "id", "tests", "failures", "errors", "skipped", "time", "timestamp")
        }
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
