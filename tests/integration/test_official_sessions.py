"""SessionService and WidgetService through Google's official client over gRPC and REST against
the real server (tests/official/sessions_scenario.py; docs/sessions.md): sessions against the
test agent recorded as conversations and read back through AgentService, a continued session, a
streamed session, a bidirectional session (gRPC), the stand-in of an app's goldens, the
refusals, and chat tokens with ``--auth-tokens`` (accepted for their session, refused for
another session and another method)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import Agent
from tests.support.official import run_official
from tests.support.tokens import ALICE, BOB, guarded_server

pytestmark = pytest.mark.external


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("sessions") / "ces-eval.db")
    try:
        yield running
    finally:
        running.kill()


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_sessions_through_the_official_client(
    module_server: RunningServer, agent: Agent, transport: str
) -> None:
    app = f"projects/sessions-project/locations/us-central1/apps/{transport}"
    Emulator(module_server.http_base).set_agent(app, f"{agent.url}/agent")
    steps = run_official("sessions_scenario.py", [module_server], transport, "play", app)
    expected = {"agent", "continued", "stream", "config", "refusals", "stand_in"}
    assert set(steps) == (expected | {"bidi"} if transport == "grpc" else expected)
    assert steps["agent"]["turns"] == 2
    assert steps["agent"]["text"] == "It is 21 degrees in Paris."
    assert steps["continued"]["turns"] == 3
    assert steps["stream"]["kinds"] == ["text", "end_session"]
    refusals = steps["refusals"]
    assert refusals["time_zone"] == {"reason": "INVALID_ARGUMENT", "fields": ["config.time_zone"]}
    assert refusals["audio"]["fields"] == ["inputs[0].audio"]
    assert refusals["streamed_audio"]["fields"] == ["inputs[0].audio"]
    assert refusals["no_inputs"]["fields"] == ["inputs"]
    assert refusals["session_id"]["fields"] == ["config.session"]
    assert refusals["entry_agent"]["reason"] == "RESOURCE_NOT_FOUND"
    assert refusals["deployment"]["reason"] == "RESOURCE_NOT_FOUND"
    assert steps["stand_in"]["matched"] == ["It has shipped."]
    if transport == "grpc":
        assert steps["bidi"]["kinds"] == ["session_output", "session_output", "end_session"]
        assert steps["bidi"]["config_first"] == ["config"]
        assert steps["bidi"]["audio"] == ["realtime_input.audio"]
    # The agent was sent the client's session as it is (the session's name, its inputs).
    sent = [r for r in agent.requests if r["session"] == f"{app}/sessions/s1"]
    assert [len(r["inputs"]) for r in sent] == [1, 1, 1]
    config = sent[0]["config"]
    assert (config["timeZone"], config["useToolFakes"]) == ("Europe/Paris", True)
    assert config["historicalContexts"][0]["chunks"] == [{"text": "Hi, I am in France."}]


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_chat_tokens_play_their_session_alone(tmp_path: Path, transport: str) -> None:
    with guarded_server(tmp_path) as server:
        app = "projects/proj-a/locations/us/apps/chat"
        steps = run_official("sessions_scenario.py", [server], transport, "tokens", ALICE, BOB, app)
    played = steps["tokens"]
    assert played["played"][0].startswith("ces-eval's stand-in agent has no answer")
    assert played["other_session"] == "IAM_PERMISSION_DENIED"
    assert played["other_method"] == "IAM_PERMISSION_DENIED"
    assert played["other_deployment"] == "IAM_PERMISSION_DENIED"
    if transport == "grpc":
        # BidiRunSession (no HTTP binding) is authorized on its first message's config.session.
        assert played["bidi"] == {
            "stranger": "IAM_PERMISSION_DENIED",
            "chat_token": "IAM_PERMISSION_DENIED",
        }


def test_a_failing_agent_is_unavailable_and_its_headers_never_shown(
    module_server: RunningServer, agent: Agent
) -> None:
    """The agent's answer is quoted as a run's error quotes it, scrubbed of the endpoint's
    headers (docs/agents.md, "Safety"): /echo answers HTTP 500 repeating the Authorization
    header it was sent."""
    app = "projects/sessions-project/locations/us-central1/apps/echo"
    secret = "Bearer session-secret-0123456789"  # noqa: S105 - made up
    Emulator(module_server.http_base).set_agent(
        app, f"{agent.url}/echo", headers={"Authorization": secret}
    )
    body = {"config": {"session": f"{app}/sessions/s"}, "inputs": [{"text": "hi"}]}
    with httpx.Client(timeout=60) as http:
        answer = http.post(
            f"{module_server.http_base}/v1beta/{app}/sessions/s:runSession", json=body
        )
        stored = http.get(f"{module_server.http_base}/v1beta/{app}/conversations/s")
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["details"][0]["reason"] == "AGENT_FAILED"
    assert "HTTP 500" in error["message"] and "***" in error["message"]
    assert "session-secret" not in answer.text
    assert "session-secret" not in module_server.output()
    assert stored.status_code == 404  # nothing of the failed turn was recorded
    assert [r["authorization"] for r in agent.requests if r["path"] == "/echo"][-1] == secret
