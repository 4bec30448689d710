"""Bring your own agent (docs/agents.md): evaluations played against a small real agent
(tests/support/agent.py, an HTTP server speaking CES's session JSON with a deterministic bug),
scored locally; Google's official client creates the goldens, runs them and reads the results
(tests/official/agent_scenario.py). Every way the agent can fail ends that result ERROR with the
reason and the run still COMPLETED; a host neither loopback nor allowed is refused when the
endpoint is set; the agent's token is sent to it and written nowhere else."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ces_eval.testing import Emulator, EmulatorError
from ces_eval.testing.server import RunningServer, start_server
from tests.support import contract
from tests.support.agent import (
    Agent,
    refusal,
    rest_call,
    run_evaluations,
    running_agent,
    violation_fields,
    weather_golden,
)
from tests.support.official import run_official
from tests.support.tls import make_certificates

pytestmark = pytest.mark.external

PROJECT = "projects/agent-project/locations/us-central1/apps"
TOKEN = "Bearer agent-s3cret-7f3a"  # noqa: S105 - the test agent's made-up token


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("agents") / "db.sqlite")
    yield running
    running.stop()


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_the_official_client_runs_goldens_against_the_agent(
    server: RunningServer, agent: Agent, transport: str
) -> None:
    app = f"{PROJECT}/{transport}"
    emulator = Emulator(server.http_base)
    answered = emulator.set_agent(app, agent.url + "/agent", headers={"Authorization": TOKEN})
    assert answered["headerNames"] == ["Authorization"] and "headers" not in answered
    assert "headers" not in emulator.agent(app)
    before = len(agent.requests)
    steps = run_official("agent_scenario.py", [server], transport)
    for method in ("stable", "naive"):
        played = steps[method]
        assert played["state"] == "COMPLETED" and played["method"] == method.upper()
        assert played["progress"] == {"total": 2, "passed": 1, "failed": 1, "errors": 0}
        assert played["status"] == {"Weather in Paris": "PASS", "Weather in Berlin": "FAIL"}
        greeting, weather = played["outcomes"]["Weather in Berlin"]
        assert [o["outcome"] for o in greeting] == ["PASS"]
        call, response, answer = weather
        # The bug: one argument more than the golden's; half the arguments named agree.
        assert call == {
            "outcome": "FAIL",
            "args": {"city": "Berlin", "units": "fahrenheit"},
            "score": 0.5,
        }
        assert response["outcome"] == answer["outcome"] == "PASS"
        paris = played["outcomes"]["Weather in Paris"][1][0]
        assert paris == {"outcome": "PASS", "args": {"city": "Paris"}, "score": 1.0}
        assert played["latencies_positive"]
    sent = agent.requests[before:]
    assert {request["authorization"] for request in sent} == {TOKEN}
    # STABLE: the second turn's session starts with the first turn as context; NAIVE: one
    # session a golden, no context. Each golden: greeting, question, tool response (x2 goldens,
    # played at once: their calls interleave, each session's in order).
    stable, naive = sent[:6], sent[6:]
    contexts: dict[str, list[int]] = {}
    for request in stable:
        contexts.setdefault(request["session"], []).append(request["context"])
    assert sorted(contexts.values()) == [[0], [0], [2, 0], [2, 0]]
    assert [r["context"] for r in naive] == [0] * 6
    assert len({r["session"] for r in naive}) == 2
    assert TOKEN.split()[1] not in server.output()


def _golden(server: RunningServer, app: str) -> str:
    evaluation = {
        "displayName": "Greeting",
        "golden": {
            "turns": [
                {
                    "steps": [
                        {"userInput": {"text": "Hi"}},
                        {
                            "expectation": {
                                "agentResponse": {
                                    "role": "agent",
                                    "chunks": [{"text": "Hello! Ask me about the weather."}],
                                }
                            }
                        },
                    ]
                }
            ]
        },
    }
    return str(rest_call(server, "POST", f"/v1beta/{app}/evaluations", evaluation)["name"])


def _played(server: RunningServer, app: str, evaluation: str) -> tuple[Any, Any]:
    """Run ``evaluation`` once: the run and its one result."""
    run, [result] = run_evaluations(server, app, [evaluation], runCount=1)
    return run, result


@pytest.mark.parametrize(
    ("path", "settings", "reason"),
    [
        ("/slow", {"timeout": 0.5}, "did not answer within 0.5 seconds"),
        ("/fail", {}, "answered HTTP 500: 'the agent broke'"),
        ("/huge", {"max_response_bytes": 100_000}, "answered more than 100000 bytes"),
        ("/malformed", {}, "answered something that is not JSON"),
        ("/shape", {}, "is not a RunSessionResponse"),
        ("/redirect", {}, "answered HTTP 302 (a redirect to '/agent'); redirects are not"),
    ],
)
def test_every_failure_of_the_agent_ends_its_result_error(
    server: RunningServer, agent: Agent, path: str, settings: dict[str, Any], reason: str
) -> None:
    app = f"{PROJECT}/failing-{path.strip('/')}"
    evaluation = _golden(server, app)
    Emulator(server.http_base).set_agent(app, agent.url + path, **settings)
    run, result = _played(server, app, evaluation)
    assert run["state"] == "COMPLETED"
    assert run["progress"]["errorCount"] == 1
    assert result["executionState"] == "ERROR"
    assert result["errorInfo"]["errorType"] == "RUNTIME_FAILURE"
    assert reason in result["errorInfo"]["errorMessage"]


@pytest.mark.parametrize(
    ("label", "query", "calls", "reason"),
    [
        ("pushed-429", "status=429&times=1&retry-after=0", 2, None),
        ("pushed-reset", "status=reset&times=1", 2, None),
        (
            "pushed-503",
            "status=503&retry-after=0",
            5,
            "The agent answered HTTP 503 5 times (5 attempts in all); last: HTTP 503: 'busy",
        ),
    ],
    ids=["429-then-200", "reset-then-200", "always-503"],
)
def test_a_pushed_back_call_is_tried_again(
    server: RunningServer, agent: Agent, label: str, query: str, calls: int, reason: str | None
) -> None:
    """docs/agents.md, "Back-pressure": a 429 or a reset connection, then an answer, completes;
    a call always answered 503 is made 5 times in all and ends its result ERROR saying so.
    (Retry-After 0, or one reset: the server's back-offs wait at most half a second here.)"""
    app = f"{PROJECT}/{label}"
    path = f"/push-back?key={label}&{query}"
    evaluation = _golden(server, app)
    Emulator(server.http_base).set_agent(app, agent.url + path)
    run, result = _played(server, app, evaluation)
    assert run["state"] == "COMPLETED"
    assert agent.count(path) == calls
    if reason is None:
        assert result["executionState"] == "COMPLETED", result
        assert result["evaluationStatus"] == "PASS"
    else:
        assert result["executionState"] == "ERROR"
        assert result["errorInfo"]["errorType"] == "RUNTIME_FAILURE"
        assert result["errorInfo"]["errorMessage"].startswith(reason)


def test_a_scenario_needs_a_simulator(server: RunningServer, agent: Agent) -> None:
    app = f"{PROJECT}/scenarios"
    Emulator(server.http_base).set_agent(app, agent.url + "/agent")
    scenario = {
        "displayName": "Asks",
        "scenario": {
            "task": "Ask about the weather.",
            "rubrics": ["The agent answers."],
            "scenarioExpectations": [
                {"agentResponse": {"role": "agent", "chunks": [{"text": "It is sunny."}]}}
            ],
        },
    }
    evaluation = rest_call(server, "POST", f"/v1beta/{app}/evaluations", scenario)["name"]
    _, result = _played(server, app, evaluation)
    assert result["executionState"] == "ERROR"
    assert "needs a user simulator" in result["errorInfo"]["errorMessage"]


def test_without_an_agent_the_outcomes_are_scripted_again(
    server: RunningServer, agent: Agent
) -> None:
    app = f"{PROJECT}/back"
    emulator = Emulator(server.http_base)
    evaluation = _golden(server, app)
    emulator.set_agent(app, agent.url + "/fail")
    assert _played(server, app, evaluation)[1]["executionState"] == "ERROR"
    emulator.set_agent(app, "")
    _, result = _played(server, app, evaluation)
    assert result["executionState"] == "COMPLETED" and result["evaluationStatus"] == "PASS"


@pytest.mark.parametrize(
    ("endpoint", "field"),
    [
        ({"uri": "http://example.com/agent"}, "agent_endpoint.uri"),
        (
            {"uri": "http://127.0.0.1:1/a", "judgeUri": "https://10.0.0.8/j"},
            "agent_endpoint.judge_uri",
        ),
        ({"uri": "ftp://127.0.0.1/agent"}, "agent_endpoint.uri"),
        ({"uri": "http://user:pw@127.0.0.1/agent"}, "agent_endpoint.uri"),
        ({"uri": "http://127.0.0.1/a", "timeout": "0s"}, "agent_endpoint.timeout"),
        (
            {"uri": "http://127.0.0.1/a", "headers": {"Bad Name": "x"}},
            "agent_endpoint.headers['Bad Name']",
        ),
    ],
)
def test_an_endpoint_that_cannot_be_called_is_refused_when_set(
    server: RunningServer, endpoint: dict[str, Any], field: str
) -> None:
    app = f"{PROJECT}/refused"
    assert violation_fields(refusal(server, app, endpoint)) == [field]


def test_an_allowed_host_may_be_named(tmp_path: Path) -> None:
    running = start_server(tmp_path / "db.sqlite", "--agent-allow-hosts", "agents.internal")
    try:
        app = f"{PROJECT}/allowed"
        answered = Emulator(running.http_base).set_agent(app, "https://agents.internal/run")
        assert answered["uri"] == "https://agents.internal/run"
    finally:
        running.stop()


def test_an_https_agent_is_verified_against_the_given_authorities(tmp_path: Path) -> None:
    """``--agent-ca-file``: a run against an https agent (and its judge) whose certificate
    the given authority signed passes, through the real server."""
    certificates = make_certificates(tmp_path / "tls")
    running = start_server(tmp_path / "db.sqlite", "--agent-ca-file", str(certificates.authority))
    try:
        with running_agent(certificates, keep_alive=True) as agent:
            app = f"{PROJECT}/https"
            Emulator(running.http_base).set_agent(
                app, agent.url + "/agent", judge_uri=agent.url + "/judge"
            )
            evaluation = _weather_golden(running, app, "Oslo", 4)
            run, results = run_evaluations(running, app, [evaluation], runCount=2)
            assert agent.url.startswith("https://")
            assert run["progress"]["passedCount"] == 2, results
            assert len(agent.requests) >= 4  # two sessions, two turns each, and the judge
    finally:
        running.stop()


def _weather_golden(server: RunningServer, app: str, city: str, degrees: int) -> str:
    evaluation = weather_golden(app, city, degrees)
    return str(rest_call(server, "POST", f"/v1beta/{app}/evaluations", evaluation)["name"])


def test_a_judge_scores_turns_and_the_trace_gives_tool_latencies(
    server: RunningServer, agent: Agent
) -> None:
    app = f"{PROJECT}/judged"
    emulator = Emulator(server.http_base)
    emulator.set_agent(app, agent.url + "/agent", judge_uri=agent.url + "/judge")
    evaluation = _weather_golden(server, app, "Paris", 21)
    run, [result, _] = run_evaluations(
        server, app, [evaluation], runCount=2, generateLatencyReport=True
    )
    assert run["progress"]["passedCount"] == 2
    [turn] = result["goldenResult"]["turnReplayResults"]
    assert turn["semanticSimilarityResult"] == {"score": 4, "outcome": "PASS"}
    assert turn["hallucinationResult"] == {
        "score": 1,
        "label": "Justified",
        "explanation": "Compared word for word.",
    }
    [latency] = turn["toolCallLatencies"]
    assert latency["tool"] == f"{app}/tools/get_weather"
    assert latency["executionLatency"] == "0.025s"
    [tool] = run["latencyReport"]["toolLatencies"]
    assert tool["tool"] == f"{app}/tools/get_weather"
    assert tool["latencyMetrics"]["callCount"] == 2
    assert tool["latencyMetrics"]["p50Latency"] == "0.025s"
    assert run["latencyReport"]["sessionCount"] == 2


def test_a_judge_answering_out_of_range_ends_the_result_error(
    server: RunningServer, agent: Agent
) -> None:
    app = f"{PROJECT}/misjudged"
    Emulator(server.http_base).set_agent(
        app, agent.url + "/agent", judge_uri=agent.url + "/judge-wrong"
    )
    _, result = _played(server, app, _weather_golden(server, app, "Paris", 21))
    assert result["executionState"] == "ERROR"
    assert '"semanticSimilarity": 9' in result["errorInfo"]["errorMessage"]


def _scenario(server: RunningServer, app: str) -> str:
    tool = f"{app}/tools/get_weather"
    scenario = {
        "displayName": "Asks about Rome",
        "scenario": {
            "task": "Find out the weather in Rome.",
            "rubrics": ["The agent gives a temperature."],
            "scenarioExpectations": [
                {
                    "toolExpectation": {
                        "expectedToolCall": {"tool": tool, "args": {"city": "Rome"}},
                        "mockToolResponse": {
                            "tool": tool,
                            "response": {"city": "Rome", "temperature": 30},
                        },
                    }
                },
                {
                    "agentResponse": {
                        "role": "agent",
                        "chunks": [{"text": "It is 30 degrees in Rome."}],
                    }
                },
            ],
        },
    }
    return str(rest_call(server, "POST", f"/v1beta/{app}/evaluations", scenario)["name"])


def test_a_simulator_plays_the_user_of_a_scenario(server: RunningServer, agent: Agent) -> None:
    app = f"{PROJECT}/simulated"
    Emulator(server.http_base).set_agent(
        app,
        agent.url + "/agent",
        judge_uri=agent.url + "/judge",
        simulator_uri=agent.url + "/simulator",
    )
    _, result = _played(server, app, _scenario(server, app))
    assert result["executionState"] == "COMPLETED" and result["evaluationStatus"] == "PASS"
    scenario = result["scenarioResult"]
    tool, answer = scenario["expectationOutcomes"]
    assert tool["outcome"] == answer["outcome"] == "PASS"
    assert tool["observedToolCall"]["toolCall"]["args"] == {"city": "Rome"}
    assert tool["observedToolCall"]["toolResponse"]["response"]["temperature"] == 30
    assert answer["observedAgentResponse"]["chunks"] == [{"text": "It is 30 degrees in Rome."}]
    assert scenario["userGoalSatisfactionResult"]["score"] == 1
    assert scenario["taskCompleted"] is True
    assert scenario["rubricOutcomes"] == [
        {
            "rubric": "The agent gives a temperature.",
            "score": 1.0,
            "scoreExplanation": "A temperature was given.",
        }
    ]
    conversation = rest_call(server, "GET", f"/emulator/v1/{scenario['conversation']}")
    texts = [
        (message["role"], chunk.get("text"))
        for turn in conversation["turns"]
        for message in turn["messages"]
        for chunk in message["chunks"]
        if "text" in chunk
    ]
    assert texts == [
        ("user", "What is the weather in Rome?"),
        ("agent", "It is 30 degrees in Rome."),
    ]
    # The recorded conversation is a conversation like any other: a golden is made of it.
    generated = rest_call(
        server, "POST", f"/v1beta/{scenario['conversation']}:generateEvaluation", {}
    )
    made = Emulator(server.http_base).wait(generated)
    assert made["response"]["golden"]["turns"], made


def test_the_agent_starts_a_scenario_and_the_simulator_is_told_the_mode(
    server: RunningServer, agent: Agent
) -> None:
    """The app's scenario_conversation_initiator AGENT: the agent's session opens with the
    "welcome" event, its greeting is the conversation's first turn and the simulator sees it;
    the execution mode (the app's SPEED_OPTIMIZED, unless the scenario sets its own) is sent
    to the simulator and to the judge's rubric calls."""
    app = f"{PROJECT}/initiated"
    Emulator(server.http_base).set_agent(
        app,
        agent.url + "/agent",
        judge_uri=agent.url + "/judge",
        simulator_uri=agent.url + "/simulator",
    )
    evaluation = _scenario(server, app)
    settings = {
        "scenarioConversationInitiator": "AGENT",
        "scenarioExecutionMode": "SPEED_OPTIMIZED",
    }
    body = {"name": app, "displayName": "Initiated", "evaluationSettings": settings}
    rest_call(server, "PATCH", f"/v1beta/{app}?updateMask=evaluationSettings", body)
    before = len(agent.requests)
    _, result = _played(server, app, evaluation)
    assert result["executionState"] == "COMPLETED" and result["evaluationStatus"] == "PASS"
    sent = agent.requests[before:]
    assert [r["path"] for r in sent][:2] == ["/agent", "/simulator"]
    assert sent[0]["inputs"] == [{"event": {"event": "welcome"}}]
    [greeting] = sent[1]["conversation"]  # what the simulator is first sent
    assert greeting["role"] == "agent"
    assert greeting["chunks"] == [{"text": "Hello! Ask me about the weather."}]
    modes = {r["path"]: r["executionMode"] for r in sent if r["path"] != "/agent"}
    assert modes == {"/simulator": "SPEED_OPTIMIZED", "/judge": "SPEED_OPTIMIZED"}
    conversation = rest_call(server, "GET", f"/v1beta/{result['scenarioResult']['conversation']}")
    first, second = conversation["turns"][:2]
    assert [m["role"] for m in first["messages"]] == ["agent"]
    assert [m["role"] for m in second["messages"]] == ["user", "agent"]
    # The scenario's own mode wins over the app's.
    rest_call(
        server,
        "PATCH",
        f"/v1beta/{evaluation}?updateMask=scenario.scenarioExecutionMode",
        {"name": evaluation, "scenario": {"scenarioExecutionMode": "QUALITY_OPTIMIZED"}},
    )
    before = len(agent.requests)
    _played(server, app, evaluation)
    assert {r["executionMode"] for r in agent.requests[before:] if r["path"] != "/agent"} == {
        "QUALITY_OPTIMIZED"
    }


def test_a_failing_simulator_ends_the_result_error(server: RunningServer, agent: Agent) -> None:
    app = f"{PROJECT}/unsimulated"
    Emulator(server.http_base).set_agent(
        app, agent.url + "/agent", simulator_uri=agent.url + "/fail"
    )
    _, result = _played(server, app, _scenario(server, app))
    assert result["executionState"] == "ERROR"
    assert result["errorInfo"]["errorType"] == "USER_SIMULATION_FAILURE"
    assert "The simulator answered HTTP 500" in result["errorInfo"]["errorMessage"]


def test_the_readme_example_agent_passes_the_workflow_goldens(
    server: RunningServer, tmp_path: Path
) -> None:
    """README's agent (examples/agent/agent.py, run as the README says) against the README
    workflow's two goldens: it asks for lookup-order with the order the user gave."""
    app = f"{PROJECT}/readme"
    names = []
    for order in (42, 7):
        step_in = {"userInput": {"text": f"Order {order}?"}}
        call = {"toolCall": {"tool": f"{app}/tools/lookup-order", "args": {"order": order}}}
        golden = {"turns": [{"steps": [step_in, {"expectation": call}]}]}
        evaluation = {"displayName": f"Order {order}", "golden": golden}
        names.append(rest_call(server, "POST", f"/v1beta/{app}/evaluations", evaluation)["name"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    example = contract.ROOT / "examples" / "agent" / "agent.py"
    process = subprocess.Popen([sys.executable, str(example), str(port)], cwd=tmp_path)
    try:
        emulator = Emulator(server.http_base)
        emulator.set_agent(app, f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:  # until the agent listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        run, _ = run_evaluations(server, app, names)
        assert run["state"] == "COMPLETED"
        assert run["progress"]["passedCount"] == 2, run["progress"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_an_update_mask_sets_only_the_fields_it_names(server: RunningServer, agent: Agent) -> None:
    app = f"{PROJECT}/masked"
    emulator = Emulator(server.http_base)
    emulator.set_agent(app, agent.url + "/agent", headers={"Authorization": TOKEN}, timeout=5)
    path = f"/emulator/v1/{app}/agentEndpoint"
    changed = emulator._call(
        "PATCH", path, {"name": f"{app}/agentEndpoint", "timeout": "7s"}, {"updateMask": "timeout"}
    )
    assert changed["timeout"] == "7s" and changed["uri"] == agent.url + "/agent"
    assert changed["headerNames"] == ["Authorization"]  # kept, and still not answered
    with pytest.raises(EmulatorError) as refused:
        emulator._call(
            "PATCH", path, {"name": f"{app}/agentEndpoint"}, {"updateMask": "headerNames"}
        )
    assert refused.value.http_status == 400
    [detail] = [d for d in refused.value.details if "fieldViolations" in d]
    assert [v["field"] for v in detail["fieldViolations"]] == ["update_mask"]
    with pytest.raises(EmulatorError) as large:
        emulator.set_agent(app, "http://127.0.0.1/" + "a" * 3_000_000)
    [detail] = [d for d in large.value.details if "fieldViolations" in d]
    assert [(v["field"], v["reason"]) for v in detail["fieldViolations"]] == [
        ("agent_endpoint.uri", "TOO_LONG")  # the descriptors' limits, as for every resource
    ]
    assert emulator.agent(app)["timeout"] == "7s"  # nothing stored by the refusals
