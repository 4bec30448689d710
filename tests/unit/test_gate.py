"""The pure parts of ``ces-eval run`` (ces_eval.gate): selection and the request it sends, each
result's failures, the verdict (statuses, baseline classes, the gate's rule) over tables of
cases, the JUnit writer, the GitHub outputs and their escaping, the terminal table, and the
baseline reader's refusals. The command itself runs in tests/integration/test_gate.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ces_eval.gate import _command, _github, _junit, _report, _terminal
from ces_eval.gate._errors import RunNotDone
from ces_eval.gate._failures import Failure, failures
from ces_eval.gate._selection import RunOptions, Selection, qualify, request_body, select
from ces_eval.gate._verdict import classify, decide, result_outcome, summarize

APP = "projects/p/locations/l/apps/orders"
TOOL = f"{APP}/tools/lookup"


def _evaluation(evaluation_id: str, display_name: str, tags: list[str]) -> dict[str, Any]:
    return {"name": f"{APP}/evaluations/{evaluation_id}", "displayName": display_name, "tags": tags}


LISTED = [
    _evaluation("status", "Status of 42", ["smoke", "orders"]),
    _evaluation("refund", "Refund of 7", ["refunds"]),
    _evaluation("cancel", "Status cancel", []),
]


def _names(chosen: list[Any]) -> list[str]:
    return [str(evaluation["name"]).rsplit("/", 1)[1] for evaluation in chosen]


@pytest.mark.parametrize(
    ("selection", "chosen"),
    [
        (Selection(), ["status", "refund", "cancel"]),
        (Selection(evaluations=["refund"]), ["refund"]),
        (Selection(evaluations=[f"{APP}/evaluations/cancel", "status"]), ["status", "cancel"]),
        (Selection(tags=["smoke", "refunds"]), ["status", "refund"]),
        (Selection(display_name_prefix="Status"), ["status", "cancel"]),
        (Selection(tags=["orders"], display_name_prefix="Status"), ["status"]),
        (Selection(evaluations=["refund", "status"], tags=["refunds"]), ["refund"]),
    ],
)
def test_selection_narrows_across_kinds_and_widens_within_one(
    selection: Selection, chosen: list[str]
) -> None:
    selection.check()
    assert _names(select(APP, selection, LISTED)) == chosen


@pytest.mark.parametrize(
    ("selection", "refusal"),
    [
        (Selection(evaluations=["missing"]), "--evaluation .*/missing: no such evaluation"),
        (Selection(tags=["none"]), "no evaluation of .* matches --tag none"),
        (
            Selection(evaluations=["projects/x/locations/l/apps/other/evaluations/e"]),
            "neither an ID nor a name under",
        ),
    ],
)
def test_a_selection_matching_nothing_is_refused(selection: Selection, refusal: str) -> None:
    with pytest.raises(RunNotDone, match=refusal):
        select(APP, selection, LISTED)


def test_a_dataset_runs_as_kept_and_takes_no_other_criterion() -> None:
    dataset = {"name": f"{APP}/evaluationDatasets/nightly", "evaluations": [LISTED[2]["name"]]}
    assert _names(select(APP, Selection(dataset="nightly"), LISTED, dataset)) == ["cancel"]
    with pytest.raises(RunNotDone, match="--dataset runs the dataset"):
        Selection(dataset="nightly", tags=["smoke"]).check()
    with pytest.raises(RunNotDone, match="holds no evaluation"):
        select(APP, Selection(dataset="d"), LISTED, {"name": "d", "evaluations": []})
    body = request_body(APP, Selection(dataset="nightly"), [], RunOptions())
    assert body == {"evaluationDataset": f"{APP}/evaluationDatasets/nightly"}


def test_the_request_carries_one_field_per_option_given() -> None:
    options = RunOptions(
        run_count=3,
        golden_run_method="NAIVE",
        personas=["calm"],
        task_count=2,
        display_name="CI",
        app_version="v1",
        channel="TEXT",
        tool_call_behaviour="FAKE",
        latency_report=True,
        skip_unchanged=True,
        loss_report=True,
    )
    options.check()
    assert request_body(APP, Selection(), LISTED[:1], options) == {
        "evaluations": [f"{APP}/evaluations/status"],
        "displayName": "CI",
        "appVersion": f"{APP}/versions/v1",
        "config": {"evaluationChannel": "TEXT", "toolCallBehaviour": "FAKE"},
        "runCount": 3,
        "personaRunConfigs": [{"persona": f"{APP}/evaluationPersonas/calm", "taskCount": 2}],
        "optimizationConfig": {"generateLossReport": True},
        "goldenRunMethod": "NAIVE",
        "generateLatencyReport": True,
        "evaluationRunCachingSettings": {"runCachingMode": "SKIP_IF_UNCHANGED"},
    }
    assert request_body(APP, Selection(), LISTED[:1], RunOptions()) == {
        "evaluations": [f"{APP}/evaluations/status"]
    }


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (RunOptions(run_count=0), "--run-count must be at least 1"),
        (RunOptions(task_count=2), "--task-count applies to a --persona"),
        (RunOptions(personas=["p"], task_count=0), "--task-count must be at least 1"),
    ],
)
def test_run_options_that_mean_nothing_are_refused(options: RunOptions, refusal: str) -> None:
    with pytest.raises(RunNotDone, match=refusal):
        options.check()


def test_qualify_puts_an_id_under_the_app_and_refuses_another_apps_name() -> None:
    assert qualify(APP, "versions", "v1", "--app-version") == f"{APP}/versions/v1"
    with pytest.raises(RunNotDone, match="--persona"):
        qualify(APP, "evaluationPersonas", "projects/x/evaluationPersonas/p", "--persona")


def _passed(evaluation: str, number: int = 1) -> dict[str, Any]:
    return {
        "name": f"{APP}/evaluations/{evaluation}/results/r{number}",
        "executionState": "COMPLETED",
        "evaluationStatus": "PASS",
        "goldenResult": {"turnReplayResults": [{"turnLatency": "0.5s"}]},
    }


def _failed(evaluation: str, number: int = 1) -> dict[str, Any]:
    outcome = {
        "expectation": {"toolCall": {"tool": TOOL, "args": {"order": 42}}},
        "observedToolCall": {"tool": TOOL, "args": {"order": 8}},
        "outcome": "FAIL",
    }
    passed = {
        "expectation": {"agentResponse": {"role": "agent", "chunks": [{"text": "On its way"}]}},
        "outcome": "PASS",
    }
    return {
        "name": f"{APP}/evaluations/{evaluation}/results/r{number}",
        "executionState": "COMPLETED",
        "evaluationStatus": "FAIL",
        "goldenResult": {
            "turnReplayResults": [
                {"expectationOutcome": [passed], "turnLatency": "1s"},
                {"expectationOutcome": [passed, outcome], "turnLatency": "0.25s"},
            ]
        },
    }


def _errored(evaluation: str, number: int = 1) -> dict[str, Any]:
    return {
        "name": f"{APP}/evaluations/{evaluation}/results/r{number}",
        "executionState": "ERROR",
        "errorInfo": {"errorType": "RUNTIME_FAILURE", "errorMessage": "The agent\nfell over: 100%"},
    }


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        ({"executionState": "COMPLETED", "evaluationStatus": "PASS"}, "PASS"),
        ({"evaluationStatus": "FAIL"}, "FAIL"),  # executionState omitted: its status decides
        ({"executionState": "ERROR"}, "ERROR"),
        ({"executionState": "CANCELLED"}, "ERROR"),
        ({"executionState": "COMPLETED"}, "ERROR"),  # completed, nothing judged
        ({"executionState": "COMPLETED", "evaluationStatus": "SKIPPED"}, "ERROR"),
    ],
)
def test_a_result_passes_or_fails_only_when_judged(result: dict[str, Any], outcome: str) -> None:
    assert result_outcome(result) == outcome


def test_the_failing_turn_and_expectation_with_expected_and_observed() -> None:
    assert failures(_failed("refund")) == [
        Failure(2, "expectation 2 (Tool call)", 'lookup({"order": 42})', 'lookup({"order": 8})')
    ]
    assert failures(_passed("status")) == []
    assert [failure.line() for failure in failures(_errored("e"))] == [
        "error: RUNTIME_FAILURE: The agent\nfell over: 100%"
    ]
    scenario = {
        "executionState": "COMPLETED",
        "evaluationStatus": "FAIL",
        "scenarioResult": {
            "expectationOutcomes": [
                {
                    "expectation": {
                        "toolExpectation": {"expectedToolCall": {"tool": TOOL, "args": {}}}
                    },
                    "observedToolCall": {"toolCall": {"tool": TOOL, "args": {"x": 1}}},
                    "outcome": "FAIL",
                }
            ]
        },
    }
    assert failures(scenario) == [
        Failure(None, "expectation 1 (Tool call)", "lookup({})", 'lookup({"x": 1})')
    ]
    rubric = {
        "evaluationStatus": "FAIL",
        "scenarioResult": {"rubricOutcomes": [{"rubric": "polite", "score": 0.0}]},
    }
    assert failures(rubric)[0].line() == "rubric 'polite': expected met, observed score 0.0"
    assert failures({"evaluationStatus": "FAIL"}) == [Failure(None, "evaluation", "PASS", "FAIL")]


def _failing(expectation: dict[str, Any], observed: dict[str, Any]) -> dict[str, Any]:
    outcome = {"expectation": expectation, "outcome": "FAIL", **observed}
    return {
        "executionState": "COMPLETED",
        "evaluationStatus": "FAIL",
        "goldenResult": {"turnReplayResults": [{"expectationOutcome": [outcome]}]},
    }


@pytest.mark.parametrize(
    ("expectation", "observed", "shown"),
    [
        (
            {"agentResponse": {"chunks": [{"text": "Hello"}, {"text": "there"}]}},
            {"observedAgentResponse": {"chunks": [{"text": "Bye"}]}},
            ("expectation 1 (Agent answer)", "Hello there", "Bye"),
        ),
        (
            {"toolResponse": {"tool": TOOL, "response": {"ok": True}}},
            {"observedToolResponse": {"tool": TOOL, "response": {"ok": False}}},
            ("expectation 1 (Tool response)", 'lookup({"ok": true})', 'lookup({"ok": false})'),
        ),
        (
            {"toolCall": {"tool": TOOL, "args": {"order": 42}}, "note": "Check_Order"},
            {},
            ("expectation 1 (Check_Order)", 'lookup({"order": 42})', "nothing"),
        ),
    ],
)
def test_each_kind_of_expectation_on_one_line(
    expectation: dict[str, Any], observed: dict[str, Any], shown: tuple[str, str, str]
) -> None:
    (failure,) = failures(_failing(expectation, observed))
    assert (failure.turn, failure.expectation, failure.expected, failure.observed) == (1, *shown)


def test_a_turn_level_metric_fails_when_every_expectation_passed() -> None:
    turn = {"semanticSimilarityResult": {"score": 1, "outcome": "FAIL"}}
    result = {"evaluationStatus": "FAIL", "goldenResult": {"turnReplayResults": [turn]}}
    assert failures(result) == [Failure(1, "semantic similarity", "≥ 3 of 4", "1")]


def test_an_evaluations_status_is_its_worst_result() -> None:
    results = [
        _passed("status"),
        _passed("refund", 1),
        _failed("refund", 2),
        _failed("cancel", 1),
        _errored("cancel", 2),
    ]
    extra = _evaluation("never", "Never ran", [])
    summary = summarize([*LISTED, extra], results)
    assert summary["results"] == {"total": 5, "passed": 2, "failed": 2, "errors": 1}
    assert [
        (entry["status"], entry["passed"], entry["failed"], entry["errors"])
        for entry in summary["evaluations"]
    ] == [
        ("PASSED", 1, 0, 0),
        ("FAILED", 1, 1, 0),
        ("ERROR", 0, 1, 1),
        ("ERROR", 0, 0, 0),  # no result at all: nothing says it passes
    ]
    assert summary["evaluations"][0]["tags"] == ["smoke", "orders"]


@pytest.mark.parametrize(
    ("status", "before", "kind"),
    [
        ("FAILED", "PASSED", "NEWLY_FAILING"),
        ("ERROR", "PASSED", "NEWLY_FAILING"),
        ("PASSED", "FAILED", "NEWLY_PASSING"),
        ("PASSED", "ERROR", "NEWLY_PASSING"),
        ("FAILED", "ERROR", "STILL_FAILING"),
        ("ERROR", "FAILED", "STILL_FAILING"),
        ("PASSED", "PASSED", "STILL_PASSING"),
        ("FAILED", None, "NEW"),
        ("PASSED", None, "NEW"),
    ],
)
def test_baseline_classes(status: str, before: str | None, kind: str) -> None:
    assert classify(status, before) == kind


def _entries(*pairs: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [{"status": status, **({"baseline": kind} if kind else {})} for status, kind in pairs]


@pytest.mark.parametrize(
    ("entries", "fail_on", "budget", "state", "failing", "held", "reason"),
    [
        (_entries(("PASSED", None)), "any", None, "COMPLETED", 0, True, "0 failing evaluations"),
        (_entries(("FAILED", None)), "any", None, "COMPLETED", 1, False, "1 failing evaluation"),
        (_entries(("ERROR", None)), "any", None, "COMPLETED", 1, False, "1 failing evaluation"),
        (
            _entries(("FAILED", None), ("ERROR", None)),
            "any",
            2,
            "COMPLETED",
            2,
            True,
            "2 failing evaluations, within the budget of 2",
        ),
        (
            _entries(("FAILED", None), ("ERROR", None)),
            "any",
            1,
            "COMPLETED",
            2,
            False,
            "2 failing evaluations, over the budget of 1",
        ),
        (
            _entries(("FAILED", "STILL_FAILING"), ("FAILED", "NEW"), ("PASSED", "NEWLY_PASSING")),
            "regression",
            None,
            "COMPLETED",
            0,
            True,
            "0 newly failing evaluations",
        ),
        (
            _entries(("FAILED", "NEWLY_FAILING"), ("FAILED", "STILL_FAILING")),
            "regression",
            None,
            "COMPLETED",
            1,
            False,
            "1 newly failing evaluation",
        ),
        (
            _entries(("FAILED", "NEWLY_FAILING")),
            "regression",
            1,
            "COMPLETED",
            1,
            True,
            "1 newly failing evaluation, within the budget of 1",
        ),
        (_entries(("PASSED", None)), "any", 5, "ERROR", 0, False, "the run ended ERROR"),
    ],
)
def test_the_gates_rule(
    entries: list[dict[str, Any]],
    fail_on: str,
    budget: int | None,
    state: str,
    failing: int,
    held: bool,
    reason: str,
) -> None:
    gate = decide(entries, fail_on, budget, run_state=state)
    assert (gate["failing"], gate["held"]) == (failing, held)
    assert gate["reason"].startswith(reason)
    assert (gate["failOn"], gate["maxFailures"]) == (fail_on, budget)


def _sample() -> dict[str, Any]:
    results = [_errored("cancel"), _failed("refund", 2), _passed("status"), _passed("refund", 1)]
    run = {
        "name": f"{APP}/evaluationRuns/run-1",
        "displayName": "Nightly <run> & co",
        "createTime": "2026-12-07T18:00:00.123456Z",
        "state": "COMPLETED",
        "evaluationResults": [str(result["name"]) for result in reversed(results)],
    }
    summary = summarize(LISTED, results)
    report: dict[str, Any] = {
        "kind": _report.KIND,
        "version": _report.VERSION,
        "app": {"name": APP},
        "startTime": "2026-12-07T18:00:00Z",
        "endTime": "2026-12-07T18:01:00Z",
        "evaluations": LISTED,
        "runs": [{"run": run, "results": results}],
        "summary": summary,
    }
    report["gate"] = decide(summary["evaluations"], "any", None)
    return report


def test_junit_one_testsuite_per_run_one_testcase_per_repetition() -> None:
    root = ET.fromstring(_junit.junit(_sample()).encode())  # noqa: S314 - our own output
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "Nightly <run> & co"
    assert suite.get("timestamp") == "2026-12-07T18:00:00"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    assert float(suite.get("time", "")) == pytest.approx(2.25)
    cases = suite.findall("testcase")
    assert [(case.get("classname"), case.get("name")) for case in cases] == [
        ("orders", "Status of 42"),
        ("orders", "Refund of 7 (1 of 2)"),
        ("orders", "Refund of 7 (2 of 2)"),
        ("orders", "Status cancel"),
    ]
    assert all(case.get("time") for case in cases)
    failure = cases[2].find("failure")
    assert failure is not None
    assert failure.get("message") == (
        'turn 2, expectation 2 (Tool call): expected lookup({"order": 42}), '
        'observed lookup({"order": 8})'
    )
    error = cases[3].find("error")
    assert error is not None and error.get("type") == "RUNTIME_FAILURE"
    assert "fell over: 100%" in (error.text or "")
    assert cases[0].find("failure") is None and cases[0].find("error") is None


def test_junit_holds_no_character_xml_cannot() -> None:
    report = _sample()
    report["runs"][0]["run"]["displayName"] = "bell \x07 and nul \x00"
    root = ET.fromstring(_junit.junit(report).encode())  # noqa: S314 - our own output
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "bell \ufffd and nul \ufffd"


@pytest.mark.parametrize(
    ("value", "data", "prop"),
    [
        ("plain", "plain", "plain"),
        ("100%", "100%25", "100%25"),
        ("a\nb\r\nc", "a%0Ab%0D%0Ac", "a%0Ab%0D%0Ac"),
        ("x: y, z", "x: y, z", "x%3A y%2C z"),
        ("%0A", "%250A", "%250A"),  # an escape in the value stays text
    ],
)
def test_github_escaping(value: str, data: str, prop: str) -> None:
    assert _github.escape_data(value) == data
    assert _github.escape_property(value) == prop


def test_github_annotations_one_line_per_failing_result() -> None:
    assert _github.error_commands(_sample()) == [
        "::error title=ces-eval%3A Refund of 7 (2 of 2) failed::turn 2, expectation 2 "
        '(Tool call): expected lookup({"order": 42}), observed lookup({"order": 8})',
        "::error title=ces-eval%3A Status cancel errored::error: RUNTIME_FAILURE: The agent%0A"
        "fell over: 100%25",
    ]


def test_the_step_summary_has_counts_gate_failures_and_baseline_classes() -> None:
    report = _sample()
    baseline = {
        "summary": {
            "evaluations": [
                {"evaluation": LISTED[1]["name"], "status": "PASSED"},
                {"evaluation": f"{APP}/evaluations/gone", "status": "PASSED"},
            ]
        },
        "endTime": "t",
    }
    report["baseline"] = _report.compare(report["summary"]["evaluations"], baseline, "base.json")
    assert report["baseline"] == {
        "file": "base.json",
        "endTime": "t",
        "gone": [f"{APP}/evaluations/gone"],
    }
    text = _github.step_summary(report)
    assert "| 4 | 2 | 1 | 1 |" in text
    assert "**Gate ❌ fails** (`--fail-on any`): 2 failing evaluations" in text
    assert (
        '| Refund of 7 (2 of 2) | FAIL | 2 | expectation 2 (Tool call) | lookup({"order": 42}) '
        '| lookup({"order": 8}) |' in text
    )
    assert (
        "| Status cancel | ERROR |  | error |  | RUNTIME_FAILURE: The agent fell over: 100% |"
        in text
    )
    assert "| NEWLY_FAILING (1) | Refund of 7 |" in text
    assert "| NEW (2) | Status of 42, Status cancel |" in text
    assert f"| GONE (1) | {APP}/evaluations/gone |" in text


def test_a_markdown_cell_holds_no_bar_no_line_break_and_no_html() -> None:
    report = _sample()
    report["evaluations"] = [{**LISTED[2], "displayName": "a | b\n<script>"}]
    assert "| a \\| b &lt;script&gt; | ERROR |" in _github.step_summary(report)


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [
        ("short", 10, "short"),
        ("exactly10!", 10, "exactly10!"),
        ("a longer text", 8, "a longe…"),
        ("two\nlines", 20, "two lines"),
    ],
)
def test_cut(text: str, width: int, shown: str) -> None:
    assert _terminal.cut(text, width) == shown


def test_the_table_fits_the_width_and_the_widest_columns_give_way() -> None:
    rows = [["Status", "x" * 80, "y" * 80], ["Refund", "short", "short"]]
    lines = _terminal.fit(["Evaluation", "Expected", "Observed"], rows, 60)
    assert all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("Evaluation  Expected")
    assert lines[2].startswith("Status      xxx") and "…" in lines[2]


def test_values_sharing_a_long_start_show_where_they_differ() -> None:
    expected, observed = _terminal.shared_cut(
        'tool_with_a_long_name({"a":1})', 'tool_with_a_long_name({"a":2})'
    )
    assert (expected, observed) == ('…g_name({"a":1})', '…g_name({"a":2})')
    assert _terminal.shared_cut("a", "b") == ("a", "b")


def test_the_terminal_summary() -> None:
    lines = _terminal.summary(_sample(), 200)
    assert (
        lines[0]
        == f"run {APP}/evaluationRuns/run-1 COMPLETED: 4 results, 2 passed, 1 failed, 1 errors"
    )
    assert any(line.startswith("Refund of 7 (2 of 2)  FAIL") for line in lines)
    assert lines[-1] == "gate fails (--fail-on any): 2 failing evaluations"


def _write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


@pytest.mark.parametrize(
    ("document", "refusal"),
    [
        ("{not json", "not JSON"),
        ([], "not a ces-eval run --json report"),
        ({"kind": "something#else"}, "not a ces-eval run --json report"),
        (
            {"kind": "ces-eval#report", "version": 2},
            "report version 2, this ces-eval reads version 1",
        ),
        (
            {"kind": "ces-eval#report", "version": 1, "summary": {}},
            "summary.evaluations is malformed",
        ),
        (
            {
                "kind": "ces-eval#report",
                "version": 1,
                "summary": {"evaluations": [{"evaluation": "e", "status": "MAYBE"}]},
            },
            "summary.evaluations is malformed",
        ),
        (
            {
                "kind": "ces-eval#report",
                "version": 1,
                "app": {"name": "projects/p/locations/l/apps/other"},
                "summary": {"evaluations": []},
            },
            "a report of projects/p/locations/l/apps/other, not of",
        ),
    ],
)
def test_a_bad_or_foreign_baseline_is_refused(
    tmp_path: Path, document: object, refusal: str
) -> None:
    with pytest.raises(RunNotDone, match=refusal):
        _report.read_baseline(_write(tmp_path / "base.json", document), APP)


def test_a_missing_baseline_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunNotDone, match="No such file"):
        _report.read_baseline(tmp_path / "none.json", APP)


def test_a_report_reads_back_as_a_baseline(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    _report.write_json(_sample(), path)
    assert _report.read_baseline(path, APP)["summary"] == _sample()["summary"]
    assert path.read_text().startswith('{\n  "kind": "ces-eval#report",\n  "version": 1,')


def test_the_package_loads_no_generated_module_and_no_server() -> None:
    probe = (
        "import json, sys\n"
        "import ces_eval.gate, ces_eval.gate._command\n"
        "loaded = [m for m in sys.modules if m.startswith(('ces_eval.', 'google.cloud'))]\n"
        "print(json.dumps(sorted(m for m in loaded if not m.startswith('ces_eval.gate'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    assert "ces_eval.report.render" in loaded  # the one reading of a result it shares
    assert all(module.startswith("ces_eval.report") for module in loaded), loaded


def test_a_signal_is_noted_and_a_second_stops_at_once() -> None:
    before = signal.getsignal(signal.SIGINT)
    with _command.Interrupts() as interrupts:
        interrupts.check()  # nothing came
        assert not interrupts.sleep(0)
        os.kill(os.getpid(), signal.SIGTERM)
        assert interrupts.sleep(60)  # wakes at once: the signal came
        assert interrupts.signal == "SIGTERM"
        with pytest.raises(RunNotDone, match="interrupted by SIGTERM; stopped before the run"):
            interrupts.check()

        def again() -> None:
            os.kill(os.getpid(), signal.SIGINT)
            interrupts.sleep(60)

        with pytest.raises(KeyboardInterrupt):
            again()
    assert signal.getsignal(signal.SIGINT) is before


def test_the_command_line_of_run_loads_no_server_configuration() -> None:
    """``ces-eval run`` starts at once: serve's and exec's options (the server's configuration,
    a second of imports) are built only for those commands."""
    probe = (
        "import sys\n"
        "from ces_eval import cli\n"
        "args = cli.parse(['run', '--app', 'projects/p/locations/l/apps/a'])\n"
        "loaded = 'ces_eval.config' in sys.modules\n"
        "served = cli.parse(['serve', '--grpc-port', '7'])\n"
        "print(args.app, loaded, served.grpc_port)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["projects/p/locations/l/apps/a", "False", "7"]
