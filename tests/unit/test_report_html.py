"""The HTML report (ces_eval.report.html) of a report file: every failure rendered and linked
from the results table, the gate's verdict, the pass rates per tag, the comparison with a
baseline in its order, nothing referenced outside the file, any field absent; and
``python -m ces_eval.report`` writing it from real files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from ces_eval.report import __main__ as main
from ces_eval.report.html import render_report
from tests.support.html import Element, parse

if TYPE_CHECKING:
    from pathlib import Path

APP = "projects/p/locations/l/apps/shop"
RUN = f"{APP}/evaluationRuns/run-1"


def _evaluation(key: str, tags: list[str]) -> dict[str, Any]:
    return {
        "name": f"{APP}/evaluations/{key}",
        "displayName": f"Evaluation {key}",
        "tags": tags,
        "golden": {"turns": [{"steps": [{"userInput": {"text": f"Hello from {key}"}}]}]},
    }


def _result(key: str, number: int, status: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": f"{APP}/evaluations/{key}/results/{key}-{number}",
        "displayName": f"{key} result {number}",
        "createTime": f"2026-12-07T18:00:0{number}Z",
        "evaluationRun": RUN,
    }
    if status == "ERROR":
        result["executionState"] = "ERROR"
        result["errorInfo"] = {"errorType": "RUNTIME_FAILURE", "errorMessage": f"{key} broke"}
        return result
    result["executionState"] = "COMPLETED"
    result["evaluationStatus"] = status
    observed = "As expected." if status == "PASS" else f"Something else from {key}."
    result["goldenResult"] = {
        "turnReplayResults": [
            {
                "expectationOutcome": [
                    {
                        "expectation": {"agentResponse": {"chunks": [{"text": "As expected."}]}},
                        "observedAgentResponse": {"chunks": [{"text": observed}]},
                        "outcome": status,
                    }
                ]
            }
        ]
    }
    return result


def _summary(
    key: str, tags: list[str], status: str, counts: tuple[int, int, int], kind: str
) -> dict[str, Any]:
    passed, failed, errors = counts
    return {
        "evaluation": f"{APP}/evaluations/{key}",
        "displayName": f"Evaluation {key}",
        "tags": tags,
        "status": status,
        "passed": passed,
        "failed": failed,
        "errors": errors,
        "baseline": kind,
    }


def _report() -> dict[str, Any]:
    """Four evaluations, two repetitions each: ``ok`` passes, ``flaky`` fails once, ``broken``
    fails twice and ``err`` errs once; compared with a baseline."""
    results = [
        _result("ok", 1, "PASS"),
        _result("ok", 2, "PASS"),
        _result("flaky", 1, "PASS"),
        _result("flaky", 2, "FAIL"),
        _result("broken", 1, "FAIL"),
        _result("broken", 2, "FAIL"),
        _result("err", 1, "PASS"),
        _result("err", 2, "ERROR"),
    ]
    return {
        "kind": "ces-eval#report",
        "version": 1,
        "server": "http://127.0.0.1:8080",
        "app": {"name": APP, "displayName": "Shop"},
        "startTime": "2026-12-07T18:00:00Z",
        "endTime": "2026-12-07T18:01:00Z",
        "options": {"runCount": 2},
        "evaluations": [
            _evaluation("ok", ["smoke"]),
            _evaluation("flaky", ["smoke", "orders"]),
            _evaluation("broken", ["orders"]),
            _evaluation("err", []),
        ],
        "runs": [
            {
                "run": {
                    "name": RUN,
                    "displayName": "Nightly",
                    "state": "COMPLETED",
                    "progress": {
                        "totalCount": 8,
                        "passedCount": 4,
                        "failedCount": 3,
                        "errorCount": 1,
                        "completedCount": 7,
                    },
                    "latencyReport": {"sessionCount": 7},
                },
                "results": results,
            }
        ],
        "summary": {
            "results": {"total": 8, "passed": 4, "failed": 3, "errors": 1},
            "evaluations": [
                _summary("ok", ["smoke"], "PASSED", (2, 0, 0), "STILL_PASSING"),
                _summary("flaky", ["smoke", "orders"], "FAILED", (1, 1, 0), "NEWLY_FAILING"),
                _summary("broken", ["orders"], "FAILED", (0, 2, 0), "STILL_FAILING"),
                _summary("err", [], "ERROR", (1, 0, 1), "NEW"),
            ],
        },
        "baseline": {
            "file": "last.json",
            "endTime": "2026-12-06T18:01:00Z",
            "gone": [f"{APP}/evaluations/old"],
        },
        "gate": {
            "failOn": "regression",
            "maxFailures": None,
            "failing": 1,
            "held": False,
            "reason": "1 evaluation newly failing",
        },
    }


def _baseline() -> dict[str, Any]:
    return {
        "kind": "ces-eval#report",
        "version": 1,
        "endTime": "2026-12-06T18:01:00Z",
        "summary": {
            "evaluations": [
                {"evaluation": f"{APP}/evaluations/flaky", "status": "PASSED"},
                {
                    "evaluation": f"{APP}/evaluations/old",
                    "displayName": "Old one",
                    "status": "FAILED",
                },
            ]
        },
    }


def _rows(table: Element) -> list[list[str]]:
    return [[cell.text for cell in row.find_all("td")] for row in table.find_all("tr")[1:]]


def test_every_failure_is_rendered_and_linked_from_the_results_table() -> None:
    page = parse(render_report(_report(), _baseline()))
    failures = page.find_all("section", "result")
    ids = [section.attrs["id"] for section in failures]
    assert ids == [
        "result-flaky-flaky-2",
        "result-broken-broken-1",
        "result-broken-broken-2",
        "result-err-err-2",
    ]
    grid = page.find("table", "results")
    assert _rows(grid) == [
        ["Evaluation ok", "PASS", "PASS"],
        ["Evaluation flaky", "PASS", "FAIL"],
        ["Evaluation broken", "FAIL", "FAIL"],
        ["Evaluation err", "PASS", "ERROR"],
    ]
    links = [a.attrs["href"] for a in grid.find_all("a")]
    assert links == [f"#{i}" for i in ids]
    broken = failures[1]
    assert broken.find(cls="user").text == "UserHello from broken"
    assert broken.find("ins").text == "Something else from broken"
    assert failures[3].find(cls="reason").text == "RUNTIME_FAILURE"
    assert failures[3].find(cls="message").text == "err broke"


def test_the_header_says_whether_the_gate_held_and_why() -> None:
    page = parse(render_report(_report(), None))
    gate = page.find(cls="gate")
    assert "broken" in gate.classes
    assert gate.find("strong").text == "The gate failed"
    assert "1 evaluation newly failing" in gate.text and "Fails on regression" in gate.text
    assert page.find("h1").text == "Evaluation report · Shop"
    about = page.find("dl", "about").text
    assert "http://127.0.0.1:8080" in about and 'Options{"runCount": 2}' in about
    assert page.find(cls="totals").text == "8 results4 passed3 failed1 errors"
    runs = page.find_all("section")
    run_table = next(s for s in runs if s.attrs.get("id") == "runs").find("table")
    assert [cells[1:] for cells in _rows(run_table)] == [["COMPLETED", "8", "4", "3", "1", "0"]]
    held = _report()
    held["gate"] = {
        "failOn": "any",
        "maxFailures": 3,
        "failing": 3,
        "held": True,
        "reason": "3 of at most 3",
    }
    gate = parse(render_report(held, None)).find(cls="gate")
    assert "held" in gate.classes and gate.find("strong").text == "The gate held"
    assert "allowing 3" in gate.text


def test_pass_rates_are_per_tag() -> None:
    page = parse(render_report(_report(), None))
    rates = next(s for s in page.find_all("section") if s.attrs.get("id") == "rates")
    assert _rows(rates.find("table")) == [
        ["(no tag)", "0 of 1", "1 of 2", "50%"],
        ["orders", "0 of 2", "1 of 4", "25%"],
        ["smoke", "1 of 2", "3 of 4", "75%"],
    ]
    bars = [float(rect.attrs["width"]) for rect in rates.find_all("rect", "bar")]
    assert bars[1] * 3 == pytest.approx(bars[2]) and bars[0] * 3 == pytest.approx(bars[2] * 2)


def test_the_baseline_comparison_lists_newly_failing_first() -> None:
    page = parse(render_report(_report(), _baseline()))
    section = page.find("section", "baseline")
    assert [h.attrs["id"] for h in section.find_all("h3")] == [
        "baseline-NEWLY_FAILING",
        "baseline-NEWLY_PASSING",
        "baseline-STILL_FAILING",
        "baseline-NEW",
        "baseline-GONE",
    ]
    lists = [[li.text for li in ul.find_all("li")] for ul in section.find_all("ul")]
    assert lists == [
        [f"FAILED Evaluation flaky {APP}/evaluations/flaky was PASSED"],
        [f"FAILED Evaluation broken {APP}/evaluations/broken"],
        [f"ERROR Evaluation err {APP}/evaluations/err"],
        [f"Old one {APP}/evaluations/old was FAILED"],
    ]
    assert section.find_all("p", "empty")[0].text == "None."  # nothing newly passing
    assert "last.json" in section.text and "1 still passing" in section.text
    unclassified = _report()
    del unclassified["baseline"]
    for entry in unclassified["summary"]["evaluations"]:
        del entry["baseline"]
    assert parse(render_report(unclassified, None)).find_all("section", "baseline") == []


_REFERENCES = ("src", "href", "action", "formaction", "srcset", "poster", "data", "xlink:href")


def test_nothing_is_referenced_outside_the_file() -> None:
    markup = render_report(_report(), _baseline())
    page = parse(markup)
    for element in page.iter():
        assert element.tag not in ("script", "link", "iframe", "object", "embed", "base")
        for name in _REFERENCES:
            if name in element.attrs:
                assert element.attrs[name].startswith("#"), (element.tag, element.attrs)
    style = "".join(e.text for e in page.find_all("style"))
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    assert len(page.find_all("style")) == 1 and page.find_all("svg")


@pytest.mark.parametrize(
    "report",
    [
        {"kind": "ces-eval#report", "version": 1},
        {"runs": [{}], "summary": {}, "gate": {}, "baseline": {}},
        {"runs": [{"run": {}, "results": [{}]}], "summary": {"evaluations": [{}]}},
        {"evaluations": [{}], "app": {}, "summary": {"results": {"total": "3"}}},
    ],
)
def test_any_field_may_be_absent(report: dict[str, Any]) -> None:
    page = parse(render_report(report, None))
    assert page.find("h1").text.startswith("Evaluation report")
    assert "None" not in page.find("main").text.replace("None.", "")


def test_hostile_text_stays_text() -> None:
    report = _report()
    hostile = "<script>alert(1)</script>"
    report["app"]["displayName"] = hostile
    report["server"] = hostile
    report["gate"]["reason"] = hostile
    report["summary"]["evaluations"][0]["tags"] = [hostile]
    markup = render_report(report, None)
    assert parse(markup).find_all("script") == []
    assert markup.count("&lt;script&gt;") >= 4


def test_the_module_writes_the_report_of_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, baseline, out = tmp_path / "r.json", tmp_path / "b.json", tmp_path / "r.html"
    report.write_text(json.dumps(_report()), encoding="utf-8")
    baseline.write_text(json.dumps(_baseline()), encoding="utf-8")
    assert main.main([str(report), "--baseline", str(baseline), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render_report(_report(), _baseline())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers
    capsys.readouterr()
    cases = [
        ([str(tmp_path / "missing.json"), "-o", str(out)], "cannot read"),
        ([str(out), "-o", str(out)], "is not JSON"),
        ([str(baseline), "--baseline", str(out), "-o", str(out)], "is not JSON"),
    ]
    (tmp_path / "other.json").write_text('{"kind": "something#else"}', encoding="utf-8")
    cases.append(([str(tmp_path / "other.json"), "-o", str(out)], "is not a report file"))
    cases.append(([str(report), "-o", str(tmp_path / "nowhere" / "r.html")], "cannot write"))
    for argv, said in cases:
        assert main.main(argv) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and said in lines[0], lines
