"""The agent player's own pieces (core/engine/agents.py, core/resources/agent_endpoints.py): the
trace walk, what an answer may hold, the scrubbing of header values, the server's own ports, the
checks of an endpoint's URLs and headers, the last resort that ends one result ERROR, and the
judge calls the metrics config spares (docs/agents.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
from typing import Any

import pytest
from google.protobuf import json_format

from ces_eval.contract.limits import MAX_REPEATED, MAX_STRING_CHARS
from ces_eval.core.engine import agents, outcomes
from ces_eval.core.io.agent_http import HttpxAgents
from ces_eval.core.resources.agent_endpoints import (
    Endpoint,
    header_refusal,
    host_refusal,
    reaches_server,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, session_service_pb2
from tests.support.agent import golden_play, running_agent

SECRET = "Bearer s3cret-'quoted\"-7f3a"  # noqa: S105 - made up


def _endpoint(uri: str = "http://127.0.0.1:9/agent", **changed: Any) -> Endpoint:
    settings: dict[str, Any] = {
        "uri": uri,
        "headers": {"Authorization": SECRET},
        "timeout": 5.0,
        "max_response_bytes": 4 * 2**20,
        "judge_uri": "",
        "simulator_uri": "",
        **changed,
    }
    return Endpoint(**settings)


def _span(name: str, tool: str = "", children: list[dict[str, Any]] | None = None) -> Any:
    span: dict[str, Any] = {"name": name, "startTime": "2026-01-01T00:00:00Z"}
    if tool:
        span["attributes"] = {"tool": tool}
        span["endTime"] = "2026-01-01T00:00:01Z"
    if children:
        span["childSpans"] = children
    return span


def _trace(root: dict[str, Any]) -> Any:
    answer = session_service_pb2.RunSessionResponse()
    json_format.ParseDict({"outputs": [{"diagnosticInfo": {"rootSpan": root}}]}, answer)
    return answer.outputs[0].diagnostic_info.root_span


def test_the_trace_is_walked_in_pre_order_at_any_depth() -> None:
    root = _span(
        "turn",
        children=[
            _span("a", "tools/a", [_span("b", "tools/b", [_span("c", "tools/c")])]),
            _span("plain", children=[_span("d", "tools/d")]),
            _span("e", "tools/e"),
        ],
    )
    found: list[Any] = []
    agents._tool_latencies(_trace(root), found)
    assert [latency.display_name for latency in found] == ["a", "b", "c", "d", "e"]
    assert found[0].execution_latency.seconds == 1


def test_a_trace_past_the_count_limit_is_refused() -> None:
    many = [_span(f"s{index}", f"tools/t{index}") for index in range(MAX_REPEATED + 1)]
    with pytest.raises(agents.AgentFailure, match=f"more than {MAX_REPEATED} tool executions"):
        agents._tool_latencies(_trace(_span("turn", children=many)), [])


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"outputs": [{"text": "x" * MAX_STRING_CHARS}]}, None),
        ({"outputs": [{"text": "x" * (MAX_STRING_CHARS + 1)}]}, "a string of 262145 characters"),
        ({"x" * (MAX_STRING_CHARS + 1): 1}, "a key of 262145 characters"),
        ({"outputs": [[1, 2]] * 40_000}, "more than 100000 JSON values"),
    ],
)
def test_an_answer_holds_a_bounded_number_of_values_and_characters(
    document: dict[str, Any], problem: str | None
) -> None:
    found = agents._oversized(document)
    assert found == problem if problem is None else (found is not None and problem in found)


def test_header_values_are_scrubbed_before_a_message_is_cut() -> None:
    agent = agents.Agent(_endpoint(), (), HttpxAgents())
    try:
        quoted = [SECRET, repr(SECRET), json.dumps(SECRET), f"{'x' * 190}{SECRET}"]
        for text in quoted:  # as sent, as repr and JSON quote it, across the cut
            shown = agent._shown(text)
            assert "s3cret" not in shown and len(shown) <= agents.SHOWN_CHARS + 1, shown
        assert agent._shown(f"{'x' * 190}{SECRET}").startswith("x" * 190 + "***")
    finally:
        asyncio.run(agent.close())


def test_the_servers_own_ports_are_known_under_every_address_of_this_machine() -> None:
    own = (50051, 8080)
    for address in ("127.0.0.1", "127.0.0.2", "::1", "0.0.0.0", "::", "::ffff:127.0.0.1"):  # noqa: S104
        assert reaches_server(address, 8080, own), address
        assert not reaches_server(address, 8081, own), address
    for address in {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}:
        assert reaches_server(address, 50051, own), address
    assert not reaches_server("192.0.2.1", 8080, own)  # TEST-NET-1: no address of ours


@pytest.mark.parametrize("character", ["\r", "\n", "\t", " ", "\x00"])
def test_a_url_with_whitespace_or_a_control_character_is_refused(character: str) -> None:
    refusal = host_refusal(f"http://127.0.0.1:8081/a{character}b", ())
    assert refusal == "Must not hold whitespace or control characters."


@pytest.mark.parametrize(
    ("value", "sendable"), [("Bearer x\ty", True), ("s3cr\u00e9t", False), ("a\nb", False)]
)
def test_a_header_value_is_visible_ascii(value: str, sendable: bool) -> None:
    refusal = header_refusal(value)
    assert (refusal is None) == sendable
    assert refusal is None or value not in refusal


def test_an_unexpected_failure_ends_that_result_error_and_logs_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The last resort: a failure the player does not anticipate (here, a limit that is not a
    number) ends that result ERROR, logged by its kind and place, never its text."""
    given = golden_play(SECRET)

    async def play(url: str) -> outcomes.Played:
        agent = agents.Agent(
            _endpoint(url + "/agent", max_response_bytes=SECRET), (), HttpxAgents()
        )
        try:
            return await agent.play(given, 0)
        finally:
            await agent.close()

    with running_agent() as running, caplog.at_level(logging.ERROR):
        played = asyncio.run(play(running.url))
    assert played.result.execution_state == evaluation_pb2.EvaluationResult.ERROR
    assert "unexpected failure" in played.result.error_info.error_message
    [record] = caplog.records
    assert "TypeError at agents.py:" in record.getMessage()
    assert "s3cret" not in caplog.text and record.exc_info is None


@pytest.mark.parametrize("length", [10, 5_000])
def test_an_output_text_that_is_not_unicode_is_refused(length: int) -> None:
    """Long texts are set on the message rather than read by json_format: either way a lone
    surrogate is refused, and the texts are recorded as answered."""
    agent = agents.Agent(_endpoint(), (), HttpxAgents())
    budget = agents._Budget("conversation", 10 * 2**20)
    try:
        good = json.dumps({"outputs": [{"text": "y" * length}, {"text": "z"}]}).encode()
        observed = agents._Observed()
        assert agent._taken(agents._Body([good], len(good)), observed, [], budget) == []
        assert observed.texts == ["y" * length, "z"]
        bad = json.dumps({"outputs": [{"text": "\ud800" + "x" * length}]}).encode()
        with pytest.raises(agents.AgentFailure, match="RunSessionResponse"):
            agent._taken(agents._Body([bad], len(bad)), agents._Observed(), [], budget)
    finally:
        asyncio.run(agent.close())


def test_a_large_answer_is_read_string_by_string() -> None:
    """Past 4 MiB an answer is read by json's Python scanner (each string in one call of the C
    one): the same document as json.loads reads; a string no write accepts is refused first."""
    document = {
        "outputs": [{"text": f'caf\u00e9 "{index}"\n' + "y" * 200_000} for index in range(25)],
        "n": [1.5, -2, True, None, {"k": []}],
    }
    data = json.dumps(document).encode()
    assert len(data) > agents._PARSED_AT_ONCE
    assert agents._json(data) == document
    for text in ("x" * (6 * MAX_STRING_CHARS + 1), 'x\\"' * 2 * MAX_STRING_CHARS):
        long = b'{"outputs": [{"text": "' + text.encode() + b'"}], "pad": "' + b"p" * 5_000_000
        with pytest.raises(agents._LongString):
            agents._json(long + b'"}')
    with pytest.raises(ValueError, match="NaN is not JSON"):
        agents._json(b'{"a": NaN, "pad": ' + json.dumps(["p" * 1_000_000] * 5).encode() + b"}")


def _answered_golden(*expected: tuple[str, bool, bool]) -> outcomes.Play:
    """A golden of one turn saying "Hi", expecting answers (text, whether its semantic
    similarity and its hallucination are computed: the expectation's own overrides)."""
    evaluation = evaluation_pb2.Evaluation(name="projects/p/locations/l/apps/a/evaluations/e")
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.text = "Hi"
    for text, similarity, hallucination in expected:
        expectation = turn.steps.add().expectation
        expectation.agent_response.chunks.add().text = text
        if not similarity:
            expectation.agent_response_semantic_similarity_metrics_config_override.SetInParent()
        if not hallucination:
            expectation.agent_response_hallucination_metrics_config_override.SetInParent()
    return dataclasses.replace(golden_play("Hi"), evaluation=evaluation)


def test_the_judge_compares_only_the_answers_whose_similarity_is_computed() -> None:
    """An answer whose semantic similarity is switched off takes no part in the turn's score
    (the judge is sent the others' text: the agent's greeting, exactly) and is SKIPPED; a turn
    computing neither similarity nor hallucination is not sent to the judge at all."""
    Result = evaluation_pb2.EvaluationResult
    greeting = "Hello! Ask me about the weather."

    async def play(url: str, given: outcomes.Play) -> outcomes.Played:
        endpoint = _endpoint(url + "/agent", judge_uri=url + "/judge")
        agent = agents.Agent(endpoint, (), HttpxAgents())
        try:
            return await agent.play(given, 0)
        finally:
            await agent.close()

    with running_agent() as running:
        mixed = _answered_golden((greeting, True, True), ("Something else entirely.", False, True))
        played = asyncio.run(play(running.url, mixed)).result
        [turn] = played.golden_result.turn_replay_results
        assert turn.semantic_similarity_result.score == 4
        assert [o.outcome for o in turn.expectation_outcome] == [Result.PASS, Result.SKIPPED]
        assert played.evaluation_status == Result.PASS
        assert [r["path"] for r in running.requests].count("/judge") == 1
        before = len(running.requests)
        off = _answered_golden(("Something else entirely.", False, False))
        played = asyncio.run(play(running.url, off)).result
        [turn] = played.golden_result.turn_replay_results
        assert not turn.HasField("semantic_similarity_result")
        assert not turn.HasField("hallucination_result")
        assert [r["path"] for r in running.requests[before:]] == ["/agent"]
