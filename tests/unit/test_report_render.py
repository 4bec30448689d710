"""One rendering of a result (ces_eval.report.render) over tables of REST JSON: a pass, a failed
answer with its word diff, a tool call with other arguments or another tool, an ERROR with its
reason, thresholds from each level, scenarios, results missing any field, and hostile text, which
stays text. The HTML is parsed (tests/support/html.py) and read as a browser shows it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ces_eval.report import render
from tests.support.html import Element, parse

APP = "projects/p/locations/l/apps/shop"
EVALUATION = f"{APP}/evaluations/status"
TOOL = f"{APP}/tools/lookup-order-with-a-rather-long-identifier-that-must-never-be-cut"
HOSTILE = '<script>alert("x")</script><img src=https://evil.example/x.png>'


def _answer(text: str) -> dict[str, Any]:
    return {"role": "agent", "chunks": [{"text": text}]}


def _evaluation() -> dict[str, Any]:
    return {
        "name": EVALUATION,
        "displayName": "Status of 42",
        "tags": ["orders", "smoke"],
        "golden": {
            "turns": [
                {
                    "steps": [
                        {"userInput": {"text": "Where is order 42?"}},
                        {"expectation": {"toolCall": {"tool": TOOL, "args": {"order": 42}}}},
                        {"expectation": {"agentResponse": _answer("It ships on Monday.")}},
                    ]
                },
                {
                    "steps": [
                        {"userInput": {"text": "Thanks"}},
                        {"agentTransfer": {"targetAgent": "a/b"}},
                    ]
                },
            ]
        },
    }


def _result(**fields: Any) -> dict[str, Any]:
    """A passing result of :func:`_evaluation` (as a scripted run stores it), with ``fields``
    replaced."""
    result = {
        "name": f"{EVALUATION}/results/r1",
        "displayName": "Status of 42 Result (run x, 1 of 1)",
        "evaluationStatus": "PASS",
        "executionState": "COMPLETED",
        "evaluationRun": f"{APP}/evaluationRuns/x",
        "goldenResult": {
            "turnReplayResults": [
                {
                    "expectationOutcome": [
                        {
                            "expectation": {"toolCall": {"tool": TOOL, "args": {"order": 42}}},
                            "observedToolCall": {"tool": TOOL, "args": {"order": 42}},
                            "outcome": "PASS",
                            "toolInvocationResult": {
                                "parameterCorrectnessScore": 1.0,
                                "outcome": "PASS",
                            },
                        },
                        {
                            "expectation": {"agentResponse": _answer("It ships on Monday.")},
                            "observedAgentResponse": _answer("It ships on Monday."),
                            "outcome": "PASS",
                        },
                    ],
                    "hallucinationResult": {"score": 1},
                    "turnLatency": "0.952s",
                    "toolCallLatencies": [{"tool": TOOL, "executionLatency": "0.476s"}],
                    "semanticSimilarityResult": {"score": 4, "outcome": "PASS"},
                    "overallToolInvocationResult": {"toolInvocationScore": 1.0, "outcome": "PASS"},
                },
                {
                    "expectationOutcome": [
                        {
                            "expectation": {"agentTransfer": {"targetAgent": "a/b"}},
                            "observedAgentTransfer": {"targetAgent": "a/b"},
                            "outcome": "PASS",
                        }
                    ]
                },
            ]
        },
    }
    result.update(fields)
    return result


def _outcomes(result: dict[str, Any], turn: int = 0) -> list[dict[str, Any]]:
    outcomes: list[dict[str, Any]] = result["goldenResult"]["turnReplayResults"][turn][
        "expectationOutcome"
    ]
    return outcomes


def _page(result: dict[str, Any], evaluation: dict[str, Any] | None = None) -> Element:
    return parse(render.render_result(result, evaluation))


def _texts(page: Element, tag: str | None = None, cls: str | None = None) -> list[str]:
    return [e.text for e in page.find_all(tag, cls)]


def test_a_pass_is_the_conversation_with_nothing_marked() -> None:
    page = _page(_result(), _evaluation())
    assert page.find(cls="result-head").find(cls="badge").text == "PASS"
    assert _texts(page, "h2") == ["Turn 1 952 ms", "Turn 2"]
    assert _texts(page, cls="user") == ["UserWhere is order 42?", "UserThanks"]
    assert _texts(page, cls="transfer") == ["Transfertransfer to a/b"]
    assert page.find_all("del") == [] and page.find_all("ins") == []
    # The tool's name in full, on both sides; its arguments folded but there.
    assert _texts(page, cls="tool") == [TOOL, TOOL]
    folded = page.find_all("details")
    assert [d.attrs.get("open") for d in folded] == [None, None]
    assert folded[0].find("summary").text == '{"order": 42}'
    assert folded[0].find("pre").text == '{\n  "order": 42\n}'
    assert _texts(page, cls="tag") == ["orders", "smoke"]
    scores = _texts(page.find_all("ul", "scores")[1], "li")
    assert scores == [
        "Semantic similarity 4 (≥ 3 of 4) PASS",
        "Tool invocation 1 (≥ 1) PASS",
        "Hallucination 1 (1 justified, not counted)",
    ]
    assert _texts(page, cls="timings") == [f"{TOOL} 476 ms"]


def test_a_failed_answer_marks_the_words_that_differ() -> None:
    result = _result(evaluationStatus="FAIL")
    answer = _outcomes(result)[1]
    answer["observedAgentResponse"] = _answer("It ships next Friday, sorry.")
    answer["outcome"] = "FAIL"
    page = _page(result, _evaluation())
    failed = page.find(cls="failed")
    assert failed.find(cls="who").text == "Agent answer FAIL"
    expected, observed = failed.find(cls="expected"), failed.find(cls="observed")
    assert expected.find(cls="said").text == "It ships on Monday."
    assert _texts(expected, "del") == ["on Monday"]
    assert observed.find(cls="said").text == "It ships next Friday, sorry."
    assert _texts(observed, "ins") == ["next Friday, sorry"]


def test_a_tool_call_with_other_arguments_is_unfolded_and_its_lines_marked() -> None:
    result = _result(evaluationStatus="FAIL")
    call = _outcomes(result)[0]
    call["observedToolCall"] = {"tool": f"{APP}/tools/other", "args": {"order": 8, "x": "y"}}
    call["outcome"] = "FAIL"
    call["toolInvocationResult"] = {"parameterCorrectnessScore": 0.5, "outcome": "FAIL"}
    call["expectation"]["expectationLevelMetricsThresholdsOverride"] = {
        "toolInvocationParameterCorrectnessThreshold": 0.75
    }
    page = _page(result, _evaluation())
    failed = page.find(cls="failed")
    assert failed.find("details").attrs.get("open") == ""
    assert _texts(failed.find(cls="expected"), "del") == ['  "order": 42']
    assert _texts(failed.find(cls="observed"), "ins") == ['  "order": 8,\n  "x": "y"']
    # Another tool: both names in full, the observed one marked.
    assert _texts(failed, cls="tool") == [TOOL, f"{APP}/tools/other"]
    assert all("changed" in e.classes for e in failed.find_all(cls="tool"))
    assert _texts(failed.find("ul", "scores"), "li") == ["Parameter correctness 0.5 (≥ 0.75) FAIL"]


@pytest.mark.parametrize(
    ("fields", "reason", "message"),
    [
        (
            {"errorInfo": {"errorType": "RUNTIME_FAILURE", "errorMessage": "Scripted error."}},
            "RUNTIME_FAILURE",
            "Scripted error.",
        ),
        ({"errorInfo": {"errorMessage": "No kind."}}, "ERROR_TYPE_UNSPECIFIED", "No kind."),
        ({"error": {"code": 14, "message": "Agent away."}}, "UNAVAILABLE", "Agent away."),
        ({}, "no error details recorded", None),
    ],
)
def test_an_error_says_its_reason_never_an_unspecified_outcome(
    fields: dict[str, Any], reason: str, message: str | None
) -> None:
    result = {
        "name": f"{EVALUATION}/results/e",
        "executionState": "ERROR",
        "goldenResult": {},
        **fields,
    }
    page = _page(result, _evaluation())
    assert page.find(cls="badge").text == "ERROR"
    box = page.find(cls="error-box")
    assert box.find(cls="reason").text == reason
    assert [e.text for e in box.find_all(cls="message")] == ([message] if message else [])
    assert "UNSPECIFIED" not in page.text.replace("ERROR_TYPE_UNSPECIFIED", "")


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"executionState": "COMPLETED", "evaluationStatus": "PASS"}, "PASS"),
        ({"executionState": "COMPLETED", "evaluationStatus": "FAIL"}, "FAIL"),
        ({"evaluationStatus": "SKIPPED"}, "SKIPPED"),
        ({"executionState": "ERROR", "evaluationStatus": "FAIL"}, "ERROR"),
        ({"executionState": "CANCELLED"}, "CANCELLED"),
        ({"executionState": "RUNNING"}, "RUNNING"),
        ({"errorInfo": {"errorMessage": "x"}}, "ERROR"),
        ({"executionState": "COMPLETED"}, "UNKNOWN"),
        ({}, "UNKNOWN"),
    ],
)
def test_a_results_status_is_one_word(result: dict[str, Any], status: str) -> None:
    assert render.result_status(result) == status


def test_thresholds_come_from_the_most_specific_level_that_sets_them() -> None:
    result = _result(
        evaluationMetricsThresholds={
            "goldenEvaluationMetricsThresholds": {
                "turnLevelMetricsThresholds": {
                    "semanticSimilaritySuccessThreshold": 1,
                    "overallToolInvocationCorrectnessThreshold": 0.5,
                }
            },
            "goldenHallucinationMetricBehavior": "ENABLED",
        }
    )
    result["goldenResult"]["turnReplayResults"][0]["hallucinationResult"] = {
        "score": 0,
        "label": "0",
        "explanation": "Not backed by any tool.",
    }
    evaluation = _evaluation()
    evaluation["evaluationMetricsThresholdOverride"] = {
        "goldenEvaluationMetricsThresholds": {
            "turnLevelMetricsThresholds": {"semanticSimilaritySuccessThreshold": 2}
        }
    }
    scores = _texts(_page(result, evaluation).find_all("ul", "scores")[1], "li")
    assert scores == [
        "Semantic similarity 4 (≥ 2 of 4) PASS",  # the evaluation's, over the result's 1
        "Tool invocation 1 (≥ 0.5) PASS",  # the result's recorded one
        "Hallucination 0 (1 justified, counts) FAIL 0 – Not backed by any tool.",
    ]
    evaluation["golden"]["turns"][0]["turnLevelMetricsThresholdsOverride"] = {
        "semanticSimilaritySuccessThreshold": 4
    }
    scores = _texts(_page(result, evaluation).find_all("ul", "scores")[1], "li")
    assert scores[0] == "Semantic similarity 4 (≥ 4 of 4) PASS"
    # Without the evaluation at hand, the result's recorded thresholds, then the defaults.
    scores = _texts(_page(result).find_all("ul", "scores")[1], "li")
    assert scores[0] == "Semantic similarity 4 (≥ 1 of 4) PASS"
    scores = _texts(_page(_result()).find_all("ul", "scores")[1], "li")
    assert scores[0] == "Semantic similarity 4 (≥ 3 of 4) PASS"


def test_a_scenario_shows_its_task_expectations_rubrics_and_verdicts() -> None:
    result = {
        "name": f"{EVALUATION}/results/s",
        "executionState": "COMPLETED",
        "evaluationStatus": "FAIL",
        "persona": {"name": f"{APP}/evaluationPersonas/default", "displayName": "Default"},
        "scenarioResult": {
            "task": "Get a refund for order 7.",
            "userFacts": [{"name": "order", "value": "7"}],
            "expectationOutcomes": [
                {
                    "expectation": {
                        "toolExpectation": {"expectedToolCall": {"tool": TOOL, "args": {"o": 7}}}
                    },
                    "observedToolCall": {"toolCall": {"tool": TOOL, "args": {"o": 8}}},
                    "outcome": "FAIL",
                },
                {"expectation": {"agentResponse": _answer("Refunded.")}, "outcome": "FAIL"},
            ],
            "rubricOutcomes": [{"rubric": "Is polite", "score": 0.0, "scoreExplanation": "Rude."}],
            "userGoalSatisfactionResult": {"score": 0, "label": "0"},
            "hallucinationResult": [{"score": 1}],
            "taskCompleted": False,
            "milestoneResults": [{"milestone": {"goal": "Refund"}, "status": "IN_PROGRESS"}],
        },
    }
    page = _page(result)
    assert page.find(cls="user").text == "TaskGet a refund for order 7.order: 7"
    assert _texts(page.find(cls="observed"), "ins") == ['  "o": 8']
    assert page.find_all(cls="observed")[1].find(cls="nothing").text == "nothing observed"
    scores = _texts(page, "ul", "scores")
    assert scores == [
        "Rubric: Is polite 0 (of 1) Rude.User goal 0 0"
        "Hallucination, turn 1 1 (1 justified, not counted)"
    ]
    assert "Task completedno" in page.text and "IN_PROGRESS Refund" in page.text
    assert "Default" in page.find(cls="facts").text


@pytest.mark.parametrize(
    "result",
    [
        {},
        {"name": "x"},
        {"goldenResult": {}},
        {"goldenResult": {"turnReplayResults": [{}]}},
        {"goldenResult": {"turnReplayResults": [{"expectationOutcome": [{}]}]}},
        {"goldenResult": {"turnReplayResults": [{"expectationOutcome": [{"outcome": "PASS"}]}]}},
        {
            "goldenResult": {
                "turnReplayResults": [
                    {
                        "expectationOutcome": [
                            {"expectation": {"toolCall": {}}},
                            {"expectation": {"agentResponse": {}}, "observedAgentResponse": {}},
                            {"observedToolResponse": {"response": {"a": 1}}},
                            {"observedPayload": {"k": [1, 2]}},
                            {"expectation": {"noToolCalls": True}},
                            {"expectation": {"updatedVariables": {}}},
                        ],
                        "semanticSimilarityResult": {},
                        "hallucinationResult": {},
                        "overallToolInvocationResult": {},
                        "errorInfo": {},
                        "toolCallLatencies": [{}],
                        "spanLatencies": [{"type": "LLM", "model": "m"}],
                    }
                ],
                "evaluationExpectationResults": [{}],
            }
        },
        {"scenarioResult": {}},
        {"scenarioResult": {"expectationOutcomes": [{}], "rubricOutcomes": [{}]}},
        {"executionState": "RUNNING"},
    ],
)
def test_any_field_may_be_absent(result: dict[str, Any]) -> None:
    page = _page(result, {"golden": {"turns": [{}]}})
    assert len(page.find_all("section", "result")) == 1
    assert "None" not in page.text and "OUTCOME_UNSPECIFIED" not in page.text


def test_hostile_text_stays_text() -> None:
    result = _result(evaluationStatus="FAIL", displayName=HOSTILE)
    _outcomes(result)[1]["observedAgentResponse"] = _answer(HOSTILE)
    _outcomes(result)[1]["expectation"]["note"] = HOSTILE
    _outcomes(result)[0]["observedToolCall"] = {"tool": HOSTILE, "args": {HOSTILE: HOSTILE}}
    evaluation = _evaluation()
    evaluation["golden"]["turns"][0]["steps"][0]["userInput"]["text"] = HOSTILE
    evaluation["tags"] = [HOSTILE]
    error = _result(executionState="ERROR", errorInfo={"errorMessage": HOSTILE})
    for markup in (render.render_result(result, evaluation), render.render_result(error)):
        page = parse(markup)
        assert page.find_all("script") == [] and page.find_all("img") == []
        assert HOSTILE in page.text  # shown as the text it is
        assert "&lt;script&gt;" in markup


def test_long_texts_are_cut_and_the_cut_said() -> None:
    result = _result(evaluationStatus="FAIL")
    _outcomes(result)[1]["observedAgentResponse"] = _answer("word " * 10_000)
    view = render.result_view(result, _evaluation(), limit=100)
    observed = view["turns"][0]["outcomes"][1]["observed"]["text"]
    assert observed.startswith("word word") and observed.endswith("(49900 more characters)")
    assert len(observed) < 130


def test_turns_are_numbered_from_the_first_one_given() -> None:
    result = _result()
    result["goldenResult"]["turnReplayResults"] = result["goldenResult"]["turnReplayResults"][1:]
    evaluation = _evaluation()
    evaluation["golden"]["turns"] = evaluation["golden"]["turns"][1:]
    view = render.result_view(result, evaluation, first_turn=7)
    assert [t["number"] for t in view["turns"]] == [7]
    assert view["turns"][0]["inputs"] == [
        {"role": "user", "text": "Thanks"},
        {"role": "transfer", "text": "transfer to a/b"},
    ]


@pytest.mark.parametrize(
    ("expected", "observed", "lines", "left", "right"),
    [
        ("same text", "same text", False, [(False, "same text")], [(False, "same text")]),
        ("a b c", "a x c", False, [(False, "a "), (True, "b"), (False, " c")],
         [(False, "a "), (True, "x"), (False, " c")]),
        ("on Monday.", "next Friday.", False, [(True, "on Monday"), (False, ".")],
         [(True, "next Friday"), (False, ".")]),
        ("", "new", False, [], [(True, "new")]),
        ("a\nb\nc", "a\nB\nc", True, [(False, "a\n"), (True, "b"), (False, "\nc")],
         [(False, "a\n"), (True, "B"), (False, "\nc")]),
    ],
)  # fmt: skip
def test_the_diff_marks_what_differs_and_leaves_equal_parts_plain(
    expected: str,
    observed: str,
    lines: bool,
    left: list[tuple[bool, str]],
    right: list[tuple[bool, str]],
) -> None:
    assert render.diff(expected, observed, lines=lines) == (left, right)


def test_the_latency_report_lists_each_kind() -> None:
    report = {
        "toolLatencies": [
            {
                "tool": TOOL,
                "toolDisplayName": "lookup",
                "latencyMetrics": {
                    "p50Latency": "0.476s",
                    "p90Latency": "0.595s",
                    "p99Latency": "12s",
                    "callCount": 3,
                },
            }
        ],
        "llmCallLatencies": [{"model": "gemini", "latencyMetrics": {}}],
        "sessionCount": 1,
    }
    page = parse(render.render_latency_report(report))
    rows = [_texts(row, "td") for row in page.find_all("tr")[1:]]
    assert rows == [
        ["Tool", f"{TOOL} lookup", "476 ms", "595 ms", "12.0 s", "3"],
        ["Model", "gemini", "", "", "", "0"],
    ]
    assert page.find(cls="sessions").text == "Over 1 completed session."
    assert render.render_latency_report(None) == "" and render.render_latency_report({}) == ""


def test_the_result_is_not_changed_by_rendering() -> None:
    result, evaluation = _result(), _evaluation()
    before = copy.deepcopy((result, evaluation))
    render.render_result(result, evaluation)
    assert (result, evaluation) == before
