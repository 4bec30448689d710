"""Local scoring of what the team's own agent did (core/engine/agent_scoring.py) and the hosts agent
endpoints may name (core/resources/agent_endpoints.host_refusal): pure functions, no agent
needed."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from ces_eval.core.engine import agent_scoring
from ces_eval.core.resources.agent_endpoints import host_refusal
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2, evaluation_pb2

Result = evaluation_pb2.EvaluationResult
TOOL = "projects/p/locations/l/apps/a/tools/weather"


def _struct(**fields: object) -> struct_pb2.Struct:
    found = struct_pb2.Struct()
    found.update(fields)
    return found


@pytest.mark.parametrize(
    ("expected", "observed", "score"),
    [
        ("It is 21 degrees in Paris.", "It is 21 degrees in Paris.", 4),
        ("It is 21 degrees in Paris.", "it is 21 DEGREES in paris", 4),  # case, punctuation
        ("It is 21 degrees in Paris.", "In Paris it is 21 degrees.", 4),  # word order
        ("It is 21 degrees in Paris.", "", 0),
        ("It is 21 degrees in Paris.", "Bonjour", 0),
        ("It is 21 degrees in Paris.", "Your parcel has shipped to Lyon today.", 1),
    ],
)
def test_similarity_is_on_the_zero_to_four_scale(expected: str, observed: str, score: int) -> None:
    assert agent_scoring.similarity(expected, observed) == score


def test_similarity_grows_with_the_words_shared() -> None:
    expected = "the order 42 has shipped and arrives on monday"
    scores = [
        agent_scoring.similarity(expected, observed)
        for observed in (
            "nothing alike here at all",
            "the order has shipped",
            "the order 42 has shipped and arrives",
            expected,
        )
    ]
    assert scores == sorted(scores) and scores[0] < scores[-1] == 4


@pytest.mark.parametrize(
    ("expected", "observed", "score"),
    [
        ({"city": "Paris"}, {"city": "Paris"}, 1.0),
        ({"city": "Paris"}, {"city": "Paris", "units": "metric"}, 0.5),
        ({"city": "Paris", "day": "mon"}, {"city": "Paris"}, 0.5),
        ({"city": "Paris"}, {"city": "paris"}, 0.0),
        ({"filter": {"a": [1, 2]}}, {"filter": {"a": [1, 2]}}, 1.0),
        ({"filter": {"a": [1, 2]}}, {"filter": {"a": [2, 1]}}, 0.0),
        ({}, {}, 1.0),
    ],
)
def test_argument_score_is_the_share_of_equal_arguments(
    expected: dict[str, object], observed: dict[str, object], score: float
) -> None:
    assert agent_scoring.argument_score(_struct(**expected), _struct(**observed)) == score


def _turn(
    *expectations: evaluation_pb2.Evaluation.GoldenExpectation,
) -> evaluation_pb2.Evaluation.GoldenTurn:
    turn = evaluation_pb2.Evaluation.GoldenTurn()
    turn.steps.add().user_input.text = "Weather in Paris?"
    for expectation in expectations:
        turn.steps.add().expectation.CopyFrom(expectation)
    return turn


def test_a_golden_turn_records_calls_extras_transfers_and_scores() -> None:
    expect = evaluation_pb2.Evaluation.GoldenExpectation
    turn = _turn(
        expect(tool_call=content_pb2.ToolCall(tool=TOOL, args=_struct(city="Paris"))),
        expect(tool_call=content_pb2.ToolCall(tool=TOOL + "-2")),
        expect(agent_transfer=content_pb2.AgentTransfer(target_agent="agents/billing")),
        expect(
            agent_response=content_pb2.Message(
                role="agent", chunks=[content_pb2.Chunk(text="It is sunny in Paris.")]
            )
        ),
    )
    observed = agent_scoring.Observed(
        calls=[
            content_pb2.ToolCall(id="1", tool=TOOL, args=_struct(city="Paris")),
            content_pb2.ToolCall(id="2", tool=TOOL + "-other"),
        ],
        texts=["It is sunny in Paris."],
    )
    replay = Result.GoldenResult.TurnReplayResult()
    agent_scoring.score_golden_turn(turn, observed, replay)
    first, missing, transfer, answer, extra = replay.expectation_outcome
    assert first.observed_tool_call.id == "1"
    assert first.tool_invocation_result.parameter_correctness_score == 1.0
    assert missing.outcome == Result.FAIL and not missing.HasField("observed_tool_call")
    assert missing.tool_invocation_result.parameter_correctness_score == 0.0
    assert transfer.outcome == Result.FAIL  # no transfer was reported
    assert answer.observed_agent_response.chunks[0].text == "It is sunny in Paris."
    assert not extra.HasField("expectation") and extra.observed_tool_call.id == "2"
    assert replay.semantic_similarity_result.score == 4
    assert replay.overall_tool_invocation_result.tool_invocation_score == 0.0
    judged = Result.GoldenResult.TurnReplayResult()
    agent_scoring.score_golden_turn(turn, observed, judged, judged_similarity=1)
    assert judged.semantic_similarity_result.score == 1


def test_a_scenario_expectation_is_met_by_equal_arguments_and_similar_words() -> None:
    scenario = evaluation_pb2.Evaluation.Scenario(task="Weather in Rome.")
    tool = scenario.scenario_expectations.add().tool_expectation
    tool.expected_tool_call.CopyFrom(content_pb2.ToolCall(tool=TOOL, args=_struct(city="Rome")))
    said = scenario.scenario_expectations.add().agent_response
    said.chunks.add(text="It is 30 degrees in Rome.")
    other = scenario.scenario_expectations.add().agent_response
    other.chunks.add(text="Our shop opens at nine tomorrow morning.")
    observed = agent_scoring.Observed(
        calls=[content_pb2.ToolCall(id="7", tool=TOOL, args=_struct(city="Rome", units="F"))]
    )
    answers = [
        content_pb2.Message(role="agent", chunks=[content_pb2.Chunk(text="Let me look.")]),
        content_pb2.Message(role="agent", chunks=[content_pb2.Chunk(text="Rome: 30 degrees.")]),
    ]
    sent = [content_pb2.ToolResponse(id="7", tool=TOOL, response=_struct(temperature=30))]
    result = Result.ScenarioResult()
    agent_scoring.score_scenario(scenario, observed, answers, sent, result)
    call, answer, unsaid = result.expectation_outcomes
    assert call.outcome == Result.FAIL  # one argument more than expected
    assert call.observed_tool_call.tool_response.id == "7"
    assert answer.observed_agent_response.chunks[0].text == "Rome: 30 degrees."
    assert answer.outcome == Result.PASS  # similar enough: 3 or more
    assert unsaid.outcome == Result.FAIL


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:8081/agent",
        "http://127.9.9.9/",
        "https://localhost/agent",
        "http://LOCALHOST:1",
        "http://[::1]:8081/",
        "https://agents.internal/run",  # allowed below
        "http://Agents.Internal/run",
    ],
)
def test_loopback_and_allowed_hosts_may_be_called(uri: str) -> None:
    assert host_refusal(uri, ("agents.internal",)) is None


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("http://example.com/agent", "neither loopback nor allowed"),
        ("http://10.0.0.8/agent", "neither loopback nor allowed"),
        ("http://127.0.0.1.example.com/", "neither loopback nor allowed"),
        ("ftp://127.0.0.1/agent", "http or https"),
        ("http://user:pw@127.0.0.1/", "credentials"),
        ("http:///agent", "name a host"),
        ("http://127.0.0.1:99999/", "Not a URL"),
    ],
)
def test_other_hosts_and_urls_are_refused(uri: str, problem: str) -> None:
    refusal = host_refusal(uri, ("agents.internal",))
    assert refusal is not None and problem in refusal


def test_tools_are_taken_by_the_tool_they_name_in_order() -> None:
    calls = [content_pb2.ToolCall(id=str(index), tool=f"{TOOL}-{index % 3}") for index in range(9)]
    waiting = agent_scoring.ByTool(calls)
    assert waiting.take(f"{TOOL}-1") is calls[1]
    assert waiting.take(f"{TOOL}-1") is calls[4]
    assert waiting.take(f"{TOOL}-9") is None
    assert [call.id for call in waiting.left()] == ["0", "2", "3", "5", "6", "7", "8"]


def test_a_thousand_calls_meet_a_thousand_expectations_one_each() -> None:
    """Matched by an index (each take a look-up): every expectation takes its own call."""
    expect = evaluation_pb2.Evaluation.GoldenExpectation
    turn = _turn(*(expect(tool_call=content_pb2.ToolCall(tool=f"{TOOL}-{i}")) for i in range(999)))
    observed = agent_scoring.Observed(
        calls=[content_pb2.ToolCall(id=str(i), tool=f"{TOOL}-{998 - i}") for i in range(999)]
    )
    replay = Result.GoldenResult.TurnReplayResult()
    agent_scoring.score_golden_turn(turn, observed, replay)
    assert len(replay.expectation_outcome) == 999
    assert all(
        o.observed_tool_call.tool == o.expectation.tool_call.tool
        for o in replay.expectation_outcome
    )


@pytest.mark.parametrize(
    ("expected", "observed", "score"),
    [
        ("lorem ipsum " * 30_000, "lorem ipsum " * 30_000, 4),  # alike, 360,000 characters
        ("lorem ipsum " * 21_000, "lorem " * 700_000, 0),  # the lengths allow 20 at most
        ("lorem ipsum", "lorem ipsum " * 100_000, 0),
    ],
)
def test_long_texts_are_compared_by_their_beginnings_within_their_lengths(
    expected: str, observed: str, score: int
) -> None:
    assert len(observed) > agent_scoring.COMPARED_CHARS
    assert agent_scoring.similarity(expected, observed) == score


def test_a_budget_stops_a_record_at_its_bound() -> None:
    """A turn whose expectations would each quote a 1 MB answer: scoring stops at the outcome
    that passes the budget, with the outcomes so far."""
    expect = evaluation_pb2.Evaluation.GoldenExpectation
    answer = content_pb2.Message(role="agent", chunks=[content_pb2.Chunk(text="x")])
    turn = _turn(*(expect(agent_response=answer) for _ in range(1000)))
    observed = agent_scoring.Observed(texts=["y" * 1_000_000])
    replay = Result.GoldenResult.TurnReplayResult()
    budget = agent_scoring.Budget("result", 4_000_000)
    with pytest.raises(agent_scoring.Overflow, match="The result would pass 4000000 bytes"):
        agent_scoring.score_golden_turn(turn, observed, replay, budget=budget)
    assert len(replay.expectation_outcome) == 4
    with pytest.raises(agent_scoring.Overflow, match="more than 1000 things"):
        agent_scoring.Budget("conversation", 10).count(1001, "things")
