"""The derived fields of an Evaluation (src/ces_eval/storage/derived.py).

The expected AggregatedMetrics messages are written out by hand, with the arithmetic behind each
number in a comment, so that they do not share any logic with the code under test.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.generated.google.cloud.ces.v1beta import common_pb2, content_pb2, evaluation_pb2
from ces_eval.storage.derived import Derived, Tally, add_tally, contribution, derive, render_tally

R = evaluation_pb2.EvaluationResult
M = evaluation_pb2.AggregatedMetrics
E = evaluation_pb2.Evaluation

APP = "projects/p/locations/l/apps/a"
V1 = f"{APP}/versions/v1"
V2 = f"{APP}/versions/v2"
LOOKUP = f"{APP}/tools/lookup"
PAY = f"{APP}/tools/pay"
CRM = f"{APP}/toolsets/crm"
CRM_GET = f"{CRM}/get_customer"  # how a toolset tool is named in ToolMetrics
RUN0, RUN1, RUN2, RUN3 = (f"{APP}/evaluationRuns/r{i}" for i in range(4))


# --- builders -------------------------------------------------------------------------------------


def _dur(seconds: int = 0, nanos: int = 0) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(seconds * 1_000_000_000 + nanos)  # normalized, any nanos
    return duration


def _call(tool: str) -> content_pb2.ToolCall:
    return content_pb2.ToolCall(tool=tool)


def _toolset_call(toolset: str, tool_id: str) -> content_pb2.ToolCall:
    return content_pb2.ToolCall(
        toolset_tool=common_pb2.ToolsetTool(toolset=toolset, tool_id=tool_id)
    )


def _golden_tool(call: content_pb2.ToolCall, outcome: int) -> R.GoldenExpectationOutcome:
    return R.GoldenExpectationOutcome(
        expectation=E.GoldenExpectation(tool_call=call), outcome=outcome
    )


def _scenario_tool(call: content_pb2.ToolCall, outcome: int) -> R.ScenarioExpectationOutcome:
    tool_expectation = E.ScenarioExpectation.ToolExpectation(expected_tool_call=call)
    return R.ScenarioExpectationOutcome(
        expectation=E.ScenarioExpectation(tool_expectation=tool_expectation), outcome=outcome
    )


def _latency(tool: str, seconds: int = 0, nanos: int = 0) -> R.ToolCallLatency:
    return R.ToolCallLatency(tool=tool, execution_latency=_dur(seconds, nanos))


def _turn(
    *,
    outcomes: Sequence[R.GoldenExpectationOutcome] = (),
    semantic: int | None = None,
    hallucination: int | None = None,
    turn_latency: duration_pb2.Duration | None = None,
    latencies: Sequence[R.ToolCallLatency] = (),
) -> R.GoldenResult.TurnReplayResult:
    turn = R.GoldenResult.TurnReplayResult(
        expectation_outcome=outcomes, tool_call_latencies=latencies, conversation="c"
    )
    if semantic is not None:
        turn.semantic_similarity_result.score = semantic
    if hallucination is not None:
        turn.hallucination_result.score = hallucination
    if turn_latency is not None:
        turn.turn_latency.CopyFrom(turn_latency)
    return turn


def _result(
    name: str,
    *,
    state: int = R.COMPLETED,
    status: int = R.OUTCOME_UNSPECIFIED,
    app_version: str = "",
    created: int = 0,
    run: str = "",
    turns: Sequence[R.GoldenResult.TurnReplayResult] | None = None,
    scenario: R.ScenarioResult | None = None,
) -> R:
    result = R(
        name=f"{APP}/evaluations/e/results/{name}",
        display_name=name,
        execution_state=state,
        evaluation_status=status,
        app_version=app_version,
        create_time=timestamp_pb2.Timestamp(seconds=created),
        evaluation_run=run,
    )
    if turns is not None:
        result.golden_result.turn_replay_results.extend(turns)
    if scenario is not None:
        result.scenario_result.CopyFrom(scenario)
    return result


# --- the main example ------------------------------------------------------------------------

# r1: golden, v1, PASS, four turns.
R1 = _result(
    "r1",
    status=R.PASS,
    app_version=V1,
    created=100,
    run=RUN1,
    turns=[
        _turn(
            outcomes=[
                _golden_tool(_call(LOOKUP), R.PASS),
                _golden_tool(_toolset_call(CRM, "get_customer"), R.FAIL),
                _golden_tool(_call(PAY), R.SKIPPED),  # not counted: PAY gets no ToolMetrics
                # Not tool_call expectations: never counted.
                R.GoldenExpectationOutcome(
                    expectation=E.GoldenExpectation(agent_response=content_pb2.Message()),
                    outcome=R.PASS,
                ),
                R.GoldenExpectationOutcome(
                    expectation=E.GoldenExpectation(
                        tool_response=content_pb2.ToolResponse(tool=LOOKUP)
                    ),
                    outcome=R.FAIL,
                ),
            ],
            semantic=4,
            hallucination=1,
            turn_latency=_dur(2),
            latencies=[_latency(LOOKUP, 1), _latency(PAY, 0, 300_000_000)],
        ),
        _turn(
            outcomes=[_golden_tool(_call(LOOKUP), R.FAIL)],
            semantic=1,
            hallucination=-1,  # not applicable: excluded
            turn_latency=_dur(1, 2),
            latencies=[_latency(LOOKUP, 2)],
        ),
        _turn(hallucination=-1),  # nothing to report: turn 2 is omitted
        _turn(semantic=2),
    ],
)
# r2: golden, v1, FAIL, one turn.
R2 = _result(
    "r2",
    status=R.FAIL,
    app_version=V1,
    created=200,
    run=RUN2,
    turns=[
        _turn(
            outcomes=[_golden_tool(_call(LOOKUP), R.PASS)],
            semantic=3,
            hallucination=0,
            turn_latency=_dur(3),
            latencies=[_latency(LOOKUP, 1, 500_000_000)],
        )
    ],
)
# r3: scenario against the draft app (empty app_version), PASS.
R3 = _result(
    "r3",
    status=R.PASS,
    created=150,
    run=RUN1,
    scenario=R.ScenarioResult(
        expectation_outcomes=[
            _scenario_tool(_call(PAY), R.PASS),
            _scenario_tool(_toolset_call(CRM, "get_customer"), R.PASS),
            _scenario_tool(_call(PAY), R.SKIPPED),  # not counted
            R.ScenarioExpectationOutcome(  # an agent response expectation: not counted
                expectation=E.ScenarioExpectation(agent_response=content_pb2.Message()),
                outcome=R.FAIL,
            ),
        ],
        hallucination_result=[
            R.HallucinationResult(score=1),
            R.HallucinationResult(score=0),
            R.HallucinationResult(score=-1),  # excluded
            R.HallucinationResult(score=1),
            R.HallucinationResult(),  # unset: excluded
        ],
        tool_call_latencies=[_latency(PAY, 0, 100_000_000), _latency(PAY, 0, 200_000_003)],
    ),
)
# r4: still RUNNING, newest of all, full of metrics: must not count anywhere in the aggregate.
R4 = _result(
    "r4",
    state=R.RUNNING,
    status=R.FAIL,
    app_version=V1,
    created=300,
    run=RUN3,
    turns=[
        _turn(
            outcomes=[_golden_tool(_call(LOOKUP), R.FAIL)] * 5,
            semantic=0,
            hallucination=1,
            turn_latency=_dur(100),
            latencies=[_latency(LOOKUP, 100)],
        )
    ],
)
# r5: ERROR against v2 (so there is no v2 group); its run ties with RUN1 at t=150.
R5 = _result("r5", state=R.ERROR, status=R.PASS, app_version=V2, created=150, run=RUN0)
# r6: QUEUED, no run yet.
R6 = _result("r6", state=R.QUEUED, created=400)

MAIN = [R1, R2, R3, R4, R5, R6]
MAIN_METRICS = M(
    metrics_by_app_version=[
        M.MetricsByAppVersion(
            app_version_id="",
            pass_count=1,
            fail_count=0,
            # "tools/pay" sorts before "toolsets/..." ('/' < 's').
            tool_metrics=[
                M.ToolMetrics(tool=PAY, pass_count=1, fail_count=0),
                M.ToolMetrics(tool=CRM_GET, pass_count=1, fail_count=0),
            ],
            hallucination_metrics=[M.HallucinationMetrics(score=2 / 3)],  # (1 + 0 + 1) / 3
            # (100_000_000 + 200_000_003) // 2 = 150_000_001 ns: the half nanosecond is floored
            # (rounding half to even would give 150_000_002).
            tool_call_latency_metrics=[
                M.ToolCallLatencyMetrics(tool=PAY, average_latency=_dur(0, 150_000_001))
            ],
        ),
        M.MetricsByAppVersion(
            app_version_id="v1",
            pass_count=1,
            fail_count=1,
            tool_metrics=[
                # r1 turn 0 PASS, r1 turn 1 FAIL, r2 turn 0 PASS.
                M.ToolMetrics(tool=LOOKUP, pass_count=2, fail_count=1),
                M.ToolMetrics(tool=CRM_GET, pass_count=0, fail_count=1),
            ],
            semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=2.5)],  # (4+1+2+3)/4
            hallucination_metrics=[M.HallucinationMetrics(score=0.5)],  # (1 + 0) / 2
            tool_call_latency_metrics=[
                M.ToolCallLatencyMetrics(tool=LOOKUP, average_latency=_dur(1, 500_000_000)),
                M.ToolCallLatencyMetrics(tool=PAY, average_latency=_dur(0, 300_000_000)),
            ],
            # (2s + 1.000000002s + 3s) / 3 = 6_000_000_002 ns // 3 = 2s (not 2.000000001s).
            turn_latency_metrics=[M.TurnLatencyMetrics(average_latency=_dur(2))],
            metrics_by_turn=[
                M.MetricsByTurn(
                    turn_index=0,
                    tool_metrics=[
                        M.ToolMetrics(tool=LOOKUP, pass_count=2, fail_count=0),
                        M.ToolMetrics(tool=CRM_GET, pass_count=0, fail_count=1),
                    ],
                    semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=3.5)],
                    hallucination_metrics=[M.HallucinationMetrics(score=0.5)],
                    tool_call_latency_metrics=[
                        M.ToolCallLatencyMetrics(tool=LOOKUP, average_latency=_dur(1, 250_000_000)),
                        M.ToolCallLatencyMetrics(tool=PAY, average_latency=_dur(0, 300_000_000)),
                    ],
                    turn_latency_metrics=[
                        M.TurnLatencyMetrics(average_latency=_dur(2, 500_000_000))
                    ],
                ),
                M.MetricsByTurn(
                    turn_index=1,
                    tool_metrics=[M.ToolMetrics(tool=LOOKUP, pass_count=0, fail_count=1)],
                    semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=1)],
                    tool_call_latency_metrics=[
                        M.ToolCallLatencyMetrics(tool=LOOKUP, average_latency=_dur(2))
                    ],
                    turn_latency_metrics=[M.TurnLatencyMetrics(average_latency=_dur(1, 2))],
                ),
                M.MetricsByTurn(
                    turn_index=3,
                    semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=2)],
                ),
            ],
        ),
    ]
)

AGGREGATION_CASES = [
    pytest.param([], M(), id="no results"),
    pytest.param(
        [R4, R5, R6, _result("cancelled", state=R.CANCELLED, status=R.PASS, turns=[_turn()])],
        M(),
        id="only unfinished results",
    ),
    pytest.param(
        [_result("bare", app_version=f"{APP}/versions/v7")],
        M(metrics_by_app_version=[M.MetricsByAppVersion(app_version_id="v7")]),
        id="a completed result without metrics still forms its group",
    ),
    pytest.param(MAIN, MAIN_METRICS, id="two app versions, golden and scenario"),
    pytest.param(
        [
            _result(
                "naming",
                app_version=V1,
                turns=[
                    _turn(
                        outcomes=[
                            _golden_tool(_toolset_call(CRM, ""), R.PASS),  # named by the toolset
                            _golden_tool(_toolset_call("", "orphan"), R.PASS),  # no toolset
                            _golden_tool(content_pb2.ToolCall(), R.PASS),  # no identifier
                            _golden_tool(_call(""), R.FAIL),  # empty tool name
                            _golden_tool(_call(PAY), R.OUTCOME_UNSPECIFIED),
                        ],
                        latencies=[
                            R.ToolCallLatency(tool=PAY),  # no execution_latency
                            _latency("", 5),  # no tool
                        ],
                    )
                ],
                scenario=None,
            )
        ],
        M(
            metrics_by_app_version=[
                M.MetricsByAppVersion(
                    app_version_id="v1",
                    tool_metrics=[M.ToolMetrics(tool=CRM, pass_count=1)],
                    metrics_by_turn=[
                        M.MetricsByTurn(
                            turn_index=0, tool_metrics=[M.ToolMetrics(tool=CRM, pass_count=1)]
                        )
                    ],
                )
            ]
        ),
        id="tool naming and unnamed tools",
    ),
    pytest.param(
        [
            _result(
                "range",
                app_version=V1,
                turns=[
                    _turn(semantic=5, hallucination=2),  # out of range: excluded
                    _turn(semantic=-1, hallucination=-1),  # out of range / not applicable
                    _turn(semantic=0, hallucination=0),
                ],
            ),
            _result(
                "range-scenario",
                app_version=V1,
                scenario=R.ScenarioResult(hallucination_result=[R.HallucinationResult(score=2)]),
            ),
        ],
        M(
            metrics_by_app_version=[
                M.MetricsByAppVersion(
                    app_version_id="v1",
                    semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=0)],
                    hallucination_metrics=[M.HallucinationMetrics(score=0)],
                    metrics_by_turn=[
                        M.MetricsByTurn(
                            turn_index=2,
                            semantic_similarity_metrics=[M.SemanticSimilarityMetrics(score=0)],
                            hallucination_metrics=[M.HallucinationMetrics(score=0)],
                        )
                    ],
                )
            ]
        ),
        id="scores outside their documented range are ignored",
    ),
    pytest.param(
        [
            _result(
                "negative",
                app_version=V2,
                scenario=R.ScenarioResult(
                    tool_call_latencies=[
                        _latency(PAY, 0, -4),
                        _latency(PAY, 0, 0),
                        _latency(PAY, 0, 0),
                        # 10**8 s + 1 ns and + 2 ns: a float mean would lose the nanoseconds.
                        _latency(LOOKUP, 100_000_000, 1),
                        _latency(LOOKUP, 100_000_000, 2),
                    ]
                ),
            )
        ],
        # PAY: -4 ns // 3 = -2 ns: floor division rounds towards negative infinity (not -1).
        # LOOKUP: (2 * 10**17 + 3) // 2 = 10**17 + 1 ns exactly.
        M(
            metrics_by_app_version=[
                M.MetricsByAppVersion(
                    app_version_id="v2",
                    tool_call_latency_metrics=[
                        M.ToolCallLatencyMetrics(tool=LOOKUP, average_latency=_dur(100_000_000, 1)),
                        M.ToolCallLatencyMetrics(tool=PAY, average_latency=_dur(0, -2)),
                    ],
                )
            ]
        ),
        id="latency averages are exact and floored",
    ),
]


@pytest.mark.parametrize(("results", "expected"), AGGREGATION_CASES)
def test_aggregated_metrics(results: list[R], expected: M) -> None:
    actual = derive(results).aggregated_metrics
    assert str(actual) == str(expected)  # readable diff on failure
    assert actual == expected


def test_the_main_example_in_any_order_gives_the_same_bytes() -> None:
    forward = derive(MAIN)
    backward = derive(reversed(MAIN))  # any iterable will do, including a one-shot iterator
    assert forward == backward
    assert forward.aggregated_metrics.SerializeToString(
        deterministic=True
    ) == backward.aggregated_metrics.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param([], [], id="no results"),
        # RUN3 (r4, t=300), RUN2 (r2, t=200), then RUN0 and RUN1 both at t=150 (RUN1 from r3,
        # not r1's earlier t=100), tied and ordered by name; r6 has no run.
        pytest.param(MAIN, [RUN3, RUN2, RUN0, RUN1], id="main example"),
        pytest.param(
            [
                _result("a", created=10, run=RUN2),
                _result("b", created=30, run=RUN1),
                _result("c", created=20, run=RUN2),
                _result("d", created=40),
            ],
            [RUN1, RUN2],
            id="runs are distinct and ordered by their newest result",
        ),
    ],
)
def test_evaluation_runs(results: list[R], expected: list[str]) -> None:
    assert derive(results).evaluation_runs == expected


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param([], None, id="no results"),
        pytest.param([R4, R5, R6], None, id="no completed result"),
        pytest.param(MAIN, R2, id="the newer RUNNING result is skipped"),
        pytest.param(
            [_result("b", created=5), _result("c", created=5), _result("a", created=5)],
            _result("c", created=5),
            id="equal create_time: the larger name wins",
        ),
        pytest.param(
            [_result("b", created=5), _result("aa", created=5)],
            _result("b", created=5),
            id="names compare as strings, not by length",
        ),
        pytest.param(
            [_result("z", created=5), _result("a", created=6)],
            _result("a", created=6),
            id="create_time before name",
        ),
    ],
)
def test_last_completed_result(results: list[R], expected: R | None) -> None:
    assert derive(results).last_completed_result == expected


def test_last_completed_result_full_ties_do_not_depend_on_order() -> None:
    passed = _result("same", created=5, status=R.PASS)
    failed = _result("same", created=5, status=R.FAIL)
    first = derive([passed, failed]).last_completed_result
    assert first in (passed, failed)
    assert derive([failed, passed]).last_completed_result == first


def test_derive_does_not_alias_or_modify_its_input() -> None:
    before = [R.FromString(result.SerializeToString()) for result in MAIN]
    derived = derive(MAIN)
    assert derived.last_completed_result is not None
    assert derived.last_completed_result is not R2
    derived.last_completed_result.display_name = "changed"
    assert before == MAIN


def test_derived_is_frozen() -> None:
    derived = derive([])
    assert derived == Derived(M(), [], None)
    with pytest.raises(AttributeError):
        derived.evaluation_runs = [RUN1]  # type: ignore[misc]


# --- properties ----------------------------------------------------------------------------------

TOOL_CALLS = [_call(LOOKUP), _call(PAY), _toolset_call(CRM, "get_customer"), _toolset_call(CRM, "")]
OUTCOMES = list(R.Outcome.values())
STATES = list(R.ExecutionState.values())
NANOS = st.integers(min_value=0, max_value=10**12)


@st.composite
def _turns(draw: st.DrawFn) -> R.GoldenResult.TurnReplayResult:
    outcomes = draw(
        st.lists(
            st.builds(_golden_tool, st.sampled_from(TOOL_CALLS), st.sampled_from(OUTCOMES)),
            max_size=3,
        )
    )
    latencies = draw(
        st.lists(st.builds(_latency, st.sampled_from([LOOKUP, PAY]), st.just(0), NANOS), max_size=3)
    )
    return _turn(
        outcomes=outcomes,
        semantic=draw(st.none() | st.integers(-1, 5)),
        hallucination=draw(st.none() | st.integers(-1, 2)),
        turn_latency=draw(st.none() | NANOS.map(lambda nanos: _dur(0, nanos))),
        latencies=latencies,
    )


@st.composite
def _results(draw: st.DrawFn) -> R:
    kind = draw(st.sampled_from(["golden", "scenario", "none"]))
    turns = draw(st.lists(_turns(), max_size=3)) if kind == "golden" else None
    scenario = None
    if kind == "scenario":
        scenario = R.ScenarioResult(
            expectation_outcomes=draw(
                st.lists(
                    st.builds(
                        _scenario_tool, st.sampled_from(TOOL_CALLS), st.sampled_from(OUTCOMES)
                    ),
                    max_size=3,
                )
            ),
            hallucination_result=[
                R.HallucinationResult(score=score)
                for score in draw(st.lists(st.integers(-1, 2), max_size=3))
            ],
            tool_call_latencies=draw(
                st.lists(st.builds(_latency, st.sampled_from([LOOKUP, PAY]), st.just(0), NANOS))
            ),
        )
    return _result(
        draw(st.sampled_from(["a", "b"])),  # duplicate names and times force tie-breaks
        state=draw(st.sampled_from(STATES)),
        status=draw(st.sampled_from(OUTCOMES)),
        app_version=draw(st.sampled_from(["", V1, V2])),
        created=draw(st.integers(0, 2)),
        run=draw(st.sampled_from(["", RUN0, RUN1, RUN2])),
        turns=turns,
        scenario=scenario,
    )


RESULT_LISTS = st.lists(_results(), max_size=6)


@given(RESULT_LISTS.flatmap(lambda results: st.tuples(st.just(results), st.permutations(results))))
def test_output_does_not_depend_on_input_order(pair: tuple[list[R], list[R]]) -> None:
    results, shuffled = pair
    first, second = derive(results), derive(shuffled)
    assert first == second
    assert first.aggregated_metrics.SerializeToString(
        deterministic=True
    ) == second.aggregated_metrics.SerializeToString(deterministic=True)


def _completed_by_version(results: list[R]) -> dict[str, list[R]]:
    groups: dict[str, list[R]] = {}
    for result in results:
        if result.execution_state == R.COMPLETED:
            groups.setdefault(result.app_version.split("/")[-1], []).append(result)
    return groups


@given(RESULT_LISTS)
def test_pass_and_fail_counts_are_bounded_by_completed_results(results: list[R]) -> None:
    groups = _completed_by_version(results)
    metrics = derive(results).aggregated_metrics.metrics_by_app_version
    assert [group.app_version_id for group in metrics] == sorted(groups)
    for group in metrics:
        assert 0 <= group.pass_count + group.fail_count <= len(groups[group.app_version_id])
    total = sum(group.pass_count + group.fail_count for group in metrics)
    assert total <= sum(result.execution_state == R.COMPLETED for result in results)


def _within(average: float, inputs: list[int]) -> bool:
    return min(inputs) <= average <= max(inputs)


@given(RESULT_LISTS)
def test_averages_lie_within_their_inputs(results: list[R]) -> None:
    groups = _completed_by_version(results)
    for group in derive(results).aggregated_metrics.metrics_by_app_version:
        semantic: list[int] = []
        hallucination: list[int] = []
        turn_latency: list[int] = []
        tool_latency: dict[str, list[int]] = {}
        for result in groups[group.app_version_id]:
            turns = result.golden_result.turn_replay_results
            for turn in turns:
                if turn.semantic_similarity_result.HasField("score"):
                    semantic.append(turn.semantic_similarity_result.score)
                if turn.hallucination_result.HasField("score"):
                    hallucination.append(turn.hallucination_result.score)
                if turn.HasField("turn_latency"):
                    turn_latency.append(turn.turn_latency.ToNanoseconds())
            hallucination += [h.score for h in result.scenario_result.hallucination_result]
            for latency in [
                *(latency for turn in turns for latency in turn.tool_call_latencies),
                *result.scenario_result.tool_call_latencies,
            ]:
                tool_latency.setdefault(latency.tool, []).append(
                    latency.execution_latency.ToNanoseconds()
                )
        semantic = [score for score in semantic if 0 <= score <= 4]
        hallucination = [score for score in hallucination if 0 <= score <= 1]

        assert len(group.semantic_similarity_metrics) == (1 if semantic else 0)
        for metric in group.semantic_similarity_metrics:
            assert _within(metric.score, semantic)
        assert len(group.hallucination_metrics) == (1 if hallucination else 0)
        for metric in group.hallucination_metrics:
            assert _within(metric.score, hallucination)
        assert len(group.turn_latency_metrics) == (1 if turn_latency else 0)
        for latency_metric in group.turn_latency_metrics:
            assert _within(latency_metric.average_latency.ToNanoseconds(), turn_latency)
        assert [metric.tool for metric in group.tool_call_latency_metrics] == sorted(tool_latency)
        for tool_metric in group.tool_call_latency_metrics:
            nanos = tool_metric.average_latency.ToNanoseconds()
            assert _within(nanos, tool_latency[tool_metric.tool])


@given(RESULT_LISTS, RESULT_LISTS)
def test_incremental_tallies_equal_recomputing_from_scratch(
    kept: list[R], removed: list[R]
) -> None:
    """Storage adds a result's tally on insert and subtracts it on delete; after any such
    sequence (and a JSON round trip, as stored) the metrics equal ``derive`` of what is left."""
    total: Tally = {}
    for result in [*removed, *kept]:
        add_tally(total, contribution(result))
    for result in removed:
        add_tally(total, contribution(result), sign=-1)
    stored = json.loads(json.dumps(total))
    assert render_tally(stored) == derive(kept).aggregated_metrics
    if not any(result.execution_state == R.COMPLETED for result in kept):
        assert stored == {}
