"""The run engine's calls to an agent over https (core/io/agent_http.py, docs/agents.md
"Endpoints"): the certificate is verified, against ``--agent-ca-file``'s authorities when given
and otherwise the default set; the connection wrapper serves TLS connections as plain ones
(an idle keep-alive connection is reused, its readability asked through the wrapper). Against
the real test agent behind TLS, with certificates of a throw-away authority."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from ces_eval.core.engine import agents
from ces_eval.core.engine.pace import UNPACED
from ces_eval.core.io.agent_http import HttpxAgents
from ces_eval.core.resources.agent_endpoints import Endpoint
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from tests.support.agent import golden_play, running_agent
from tests.support.tls import Certificates, make_certificates

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.agent import Agent

Result = evaluation_pb2.EvaluationResult


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def agent(certificates: Certificates) -> Iterator[Agent]:
    with running_agent(certificates, keep_alive=True) as running:
        yield running


def _played(agent: Agent, http: HttpxAgents, times: int) -> list[Result]:
    """``times`` goldens played one after another by one player of ``agent``: their results."""
    endpoint = Endpoint(
        uri=agent.url + "/agent",
        headers={},
        timeout=5.0,
        max_response_bytes=4 * 2**20,
        judge_uri="",
        simulator_uri="",
    )

    async def play() -> list[Result]:
        player = agents.Agent(endpoint, (), http, pace=UNPACED)
        try:
            return [(await player.play(golden_play("Hi"), 0)).result for _ in range(times)]
        finally:
            await player.close()

    return asyncio.run(play())


def test_an_https_agent_signed_by_the_given_authority_is_played(
    agent: Agent, certificates: Certificates
) -> None:
    assert agent.url.startswith("https://")
    results = _played(agent, HttpxAgents(certificates.authority), times=3)
    assert [result.execution_state for result in results] == [Result.COMPLETED] * 3
    assert len(agent.requests) == 3
    # One TLS connection for the three calls: the idle one was found open (the wrapper's
    # readability check over a TLS stream) and reused.
    assert agent.connections == 1


def test_an_https_agent_the_default_authorities_do_not_know_is_an_error(agent: Agent) -> None:
    [result] = _played(agent, HttpxAgents(), times=1)
    assert result.execution_state == Result.ERROR
    message = result.error_info.error_message
    assert "TLS certificate could not be verified" in message and "--agent-ca-file" in message
    assert agent.requests == []  # the handshake failed: nothing was sent


def test_a_certificate_for_another_authority_is_refused(agent: Agent, tmp_path: Path) -> None:
    other = make_certificates(tmp_path / "other")
    [result] = _played(agent, HttpxAgents(other.authority), times=1)
    assert result.execution_state == Result.ERROR
    assert "TLS certificate could not be verified" in result.error_info.error_message
    assert agent.requests == []
