"""Back-pressure (docs/agents.md, "Back-pressure"; core/engine/backoff.py and the agent
player's calls): a call the agent, its judge or its simulator pushes back (HTTP 429 or 503, or
a reset connection) is made again after a back-off waited out through the run's pace, a bounded
number of times; ``Retry-After`` is honoured up to a cap; nothing else is tried again; what
still fails ends that result ERROR saying how often it was tried. Against the real test agent
(tests/support/agent.py), with back-offs shrunk through the player's ``backoff`` so that no
test sleeps the server's seconds."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ces_eval.core.engine import agents, outcomes
from ces_eval.core.engine.backoff import BACKOFF, Backoff, asked_wait
from ces_eval.core.engine.pace import UNPACED
from ces_eval.core.io.agent_http import HttpxAgents
from ces_eval.core.resources.agent_endpoints import Endpoint
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2
from tests.support.agent import Agent, golden_play, running_agent

Result = evaluation_pb2.EvaluationResult
ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
# The server's attempts and ceilings, its waits a thousand times shorter.
QUICK = Backoff(base=BACKOFF.base / 1000, cap=BACKOFF.cap / 1000, longest=0.05)
SLEPT = 10.0
NOW = 1_800_000_000.0  # 2027-01-15, seconds since the epoch


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0", 0.0),
        ("1", 1.0),
        (" 7 ", 7.0),
        ("1000000000", 1e9),
        ("9" * 5_000, float("inf")),  # read as a float: no digit limit, then capped
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # past: at once
        ("Fri, 01 Jan 2100 00:00:00 GMT", 4_102_444_800 - NOW),
        ("", None),
        ("soon", None),
        ("-1", None),
        ("1.5", None),  # delay-seconds are whole
        ("Fri, 99 Foo 2100 00:00:00 GMT", None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(value: str, seconds: float | None) -> None:
    assert asked_wait(value, NOW) == seconds


def test_retry_after_is_honoured_up_to_its_cap() -> None:
    assert BACKOFF.delay(1, "2", NOW) == 2.0
    assert BACKOFF.delay(3, "0", NOW) == 0.0
    assert BACKOFF.delay(1, "1000000000", NOW) == BACKOFF.longest == 60.0
    assert BACKOFF.delay(1, "Fri, 01 Jan 2100 00:00:00 GMT", NOW) == BACKOFF.longest


@pytest.mark.parametrize("retry", [1, 2, 3, 4, 9])
def test_without_retry_after_the_back_off_is_capped_exponential_with_full_jitter(
    retry: int,
) -> None:
    """A uniform draw between 0 and min(cap, base * 2 ** (retry - 1)): never above that
    ceiling, and spread across it (200 draws all on one side of its middle: 2 ** -199)."""
    ceiling = min(BACKOFF.cap, BACKOFF.base * 2 ** (retry - 1))
    draws = [BACKOFF.delay(retry, "garbage") for _ in range(200)]
    assert all(0 <= draw <= ceiling for draw in draws)
    assert min(draws) < ceiling / 2 < max(draws)
    assert (BACKOFF.attempts, BACKOFF.base, BACKOFF.cap) == (5, 0.5, 20.0)  # docs/agents.md


@dataclass
class Watched:
    """A run's pace that keeps count: the answers and push backs told, the back-offs asked
    and whether one is being waited. Each is slept, as the pace of a player alone does, but
    for :data:`SLEPT` seconds at most: a cap that broke fails its test rather than hangs it."""

    answers: int = 0
    pushes: int = 0
    pauses: list[float] = field(default_factory=list)
    pausing: asyncio.Event = field(default_factory=asyncio.Event)

    def answered(self) -> None:
        self.answers += 1

    def pushed_back(self) -> None:
        self.pushes += 1

    async def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.pausing.set()
        await UNPACED.pause(min(seconds, SLEPT))


@pytest.fixture(scope="module")
def running() -> Iterator[Agent]:
    """The test agent, one for the module: each test's URLs are its own (their ``key``)."""
    with running_agent() as agent:
        agent.slow = 0.6
        yield agent


def _endpoint(running: Agent, path: str = "/agent", **changed: Any) -> Endpoint:
    settings: dict[str, Any] = {
        "uri": running.url + path,
        "headers": {},
        "timeout": 5.0,
        "max_response_bytes": 4 * 2**20,
        "judge_uri": "",
        "simulator_uri": "",
        **changed,
    }
    return Endpoint(**settings)


def _play(
    endpoint: Endpoint, given: outcomes.Play | None = None, backoff: Backoff = QUICK
) -> tuple[Result, Watched]:
    """``given`` (a golden saying hello by default) played against ``endpoint``: its result
    and the pace it told."""
    pace = Watched()

    async def play() -> outcomes.Played:
        agent = agents.Agent(endpoint, (), HttpxAgents(), pace=pace, backoff=backoff)
        try:
            return await agent.play(given or golden_play("Hi"), 0)
        finally:
            await agent.close()

    return asyncio.run(play()).result, pace


def _played(endpoint: Endpoint, times: int) -> list[Result]:
    """``times`` goldens played one after another by one player (as a run's sessions share
    one): their results."""

    async def play() -> list[Result]:
        agent = agents.Agent(endpoint, (), HttpxAgents(), pace=Watched(), backoff=QUICK)
        try:
            return [(await agent.play(golden_play("Hi"), 0)).result for _ in range(times)]
        finally:
            await agent.close()

    return asyncio.run(play())


def _push_back(key: str, **query: object) -> str:
    """The test agent's path that pushes back as ``query`` says (tests/support/agent.py)."""
    return f"/push-back?key={key}&" + "&".join(f"{name}={value}" for name, value in query.items())


def _sent(running: Agent, path: str) -> list[dict[str, Any]]:
    return [request for request in running.requests if request["path"] == path]


@pytest.mark.parametrize("retry_after", ["0", "1", None])
def test_a_call_answered_429_then_200_completes(running: Agent, retry_after: str | None) -> None:
    """Retry-After 1 is honoured up to the cap the test gives (0.05 s); without one the wait
    is a back-off draw."""
    asked = {} if retry_after is None else {"retry-after": retry_after}
    path = _push_back(f"429-{retry_after}", status=429, times=1, **asked)
    result, pace = _play(_endpoint(running, path))
    assert running.count(path) == 2
    first, again = _sent(running, path)  # the same request, sent again as it was
    assert first == again and first["inputs"] == [{"text": "Hi"}]
    assert result.execution_state == Result.COMPLETED, result.error_info
    assert (pace.pushes, pace.answers) == (1, 1)
    [waited] = pace.pauses
    if retry_after is None:
        assert 0 <= waited <= QUICK.base
    else:
        assert waited == min(float(retry_after), QUICK.longest)


def test_a_call_always_answered_503_ends_its_result_error_after_every_attempt(
    running: Agent,
) -> None:
    path = _push_back("always", status=503, **{"retry-after": "0"})
    result, pace = _play(_endpoint(running, path))
    assert running.count(path) == QUICK.attempts == 5
    assert result.execution_state == Result.ERROR
    assert result.error_info.error_type == ErrorInfo.RUNTIME_FAILURE
    assert result.error_info.error_message == (
        "The agent answered HTTP 503 5 times (5 attempts in all); last: HTTP 503: "
        "'busy, come back later'"
    )
    assert (pace.pushes, pace.answers, pace.pauses) == (5, 0, [0.0] * 4)


def test_reset_connections_are_tried_again(running: Agent) -> None:
    path = _push_back("reset", status="reset", times=2)
    result, pace = _play(_endpoint(running, path))
    assert running.count(path) == 3
    assert result.execution_state == Result.COMPLETED, result.error_info
    assert (pace.pushes, pace.answers, len(pace.pauses)) == (2, 1, 2)


def test_a_connection_always_reset_reads_as_a_closed_port(running: Agent) -> None:
    """Tried as often and said alike (docs/agents.md, "Safety"): no telling them apart."""
    path = _push_back("reset-always", status="reset")
    reset, _ = _play(_endpoint(running, path))
    assert running.count(path) == QUICK.attempts
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    closed, pace = _play(dataclasses.replace(_endpoint(running), uri=closed_url + path))
    said = [
        result.error_info.error_message.replace(url, "URL")
        for result, url in ((reset, running.url), (closed, closed_url))
    ]
    expected = (
        f"The agent at 'URL{path}' could not be reached (no HTTP answer) 5 times "
        "(5 attempts in all)."
    )
    assert said == [expected, expected]
    assert (pace.pushes, pace.answers) == (5, 0)


@pytest.mark.parametrize(
    ("then", "said", "answers"),
    [
        ("/fail", "The agent answered HTTP 500: 'the agent broke'", 1),
        ("/slow", "The agent did not answer within 0.3 seconds", 0),
    ],
)
def test_a_push_back_then_another_failure_says_both(
    running: Agent, then: str, said: str, answers: int
) -> None:
    """A failure that is no push back, a timeout included, ends the call at once, saying on
    which attempt; a timeout is told to the pace as neither an answer nor a push back."""
    path = _push_back(f"mixed{then.replace('/', '-')}", status=429, times=2, then=then)
    result, pace = _play(_endpoint(running, path, timeout=0.3))
    assert running.count(path) == 3
    assert result.error_info.error_message == (
        f"{said} (on attempt 3 of 5; the earlier ones answered HTTP 429 twice)."
    )
    assert (pace.pushes, pace.answers) == (2, answers)


@pytest.mark.parametrize(
    ("then", "reason"),
    [
        ("/fail", "answered HTTP 500"),
        ("/malformed", "not JSON"),
        ("/huge", "more than 100000 bytes"),
        ("/slow", "did not answer within 0.3 seconds"),
    ],
)
def test_nothing_but_a_push_back_is_tried_again(running: Agent, then: str, reason: str) -> None:
    """Another status, an answer that is no JSON or too large, and a timeout (it waited its
    timeout already) fail on the first attempt."""
    path = _push_back(f"once{then.replace('/', '-')}", times=0, then=then)
    endpoint = _endpoint(running, path, timeout=0.3, max_response_bytes=100_000)
    result, pace = _play(endpoint)
    assert running.count(path) == 1
    assert reason in result.error_info.error_message
    assert "attempt" not in result.error_info.error_message
    assert pace.pauses == [] and pace.pushes == 0


@pytest.mark.parametrize(
    "retry_after", ["1000000000", "Fri, 01 Jan 2100 00:00:00 GMT"], ids=["seconds", "date"]
)
def test_a_hostile_retry_after_is_capped(running: Agent, retry_after: str) -> None:
    path = _push_back(f"hostile-{len(retry_after)}", status=429, times=1)
    path += f"&retry-after={retry_after.replace(' ', '%20')}"
    result, pace = _play(_endpoint(running, path))
    assert result.execution_state == Result.COMPLETED, result.error_info
    assert pace.pauses == [QUICK.longest]


def _scenario() -> outcomes.Play:
    """A scenario asking the weather in Rome, with a rubric (so that the judge is called)."""
    evaluation = evaluation_pb2.Evaluation(name="projects/p/locations/l/apps/a/evaluations/s")
    evaluation.scenario.task = "Find out the weather in Rome."
    evaluation.scenario.rubrics.append("The agent gives a temperature.")
    return dataclasses.replace(golden_play("Hi"), evaluation=evaluation)


def test_the_judge_and_the_simulator_are_tried_again_alike(running: Agent) -> None:
    judge = _push_back("judge", status=429, times=1, then="/judge")
    simulator = _push_back("simulator", status="reset", times=1, then="/simulator")
    endpoint = _endpoint(
        running, judge_uri=running.url + judge, simulator_uri=running.url + simulator
    )
    result, pace = _play(endpoint, _scenario())
    assert result.execution_state == Result.COMPLETED, result.error_info
    [rubric] = result.scenario_result.rubric_outcomes
    assert rubric.score_explanation == "A temperature was given."  # the judge's
    assert running.count(judge) == 2
    assert running.count(simulator) >= 2
    assert pace.pushes == 2 and len(pace.pauses) == 2


def test_a_simulator_always_pushing_back_is_a_user_simulation_failure(running: Agent) -> None:
    simulator = _push_back("simulator-always", status=503, **{"retry-after": "0"})
    result, _ = _play(_endpoint(running, simulator_uri=running.url + simulator), _scenario())
    assert running.count(simulator) == QUICK.attempts
    assert result.error_info.error_type == ErrorInfo.USER_SIMULATION_FAILURE
    assert result.error_info.error_message.startswith(
        "The simulator answered HTTP 503 5 times (5 attempts in all)"
    )


def test_a_cancel_during_a_back_off_ends_the_call_at_once(running: Agent) -> None:
    """With the server's back-off, the agent asking for 60 s (the server's cap): once the
    player waits it out, a cancel ends the play at once. A generous bound, as the issue
    states it (about a second)."""
    path = _push_back("cancelled", status=503, **{"retry-after": "60"})

    async def cancelled() -> float:
        pace = Watched()
        agent = agents.Agent(_endpoint(running, path), (), HttpxAgents(), pace=pace)
        try:
            task = asyncio.create_task(agent.play(golden_play("Hi"), 0))
            await asyncio.wait_for(pace.pausing.wait(), 30)
            assert pace.pauses == [BACKOFF.longest]
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic() - started
        finally:
            await agent.close()

    assert asyncio.run(cancelled()) < 5
    assert running.count(path) == 1


def test_a_url_that_never_answered_is_called_no_more_after_three_calls(running: Agent) -> None:
    path = _push_back("never", status="reset")
    results = _played(_endpoint(running, path), times=5)
    assert running.count(path) == QUICK.unanswered * QUICK.attempts == 15
    assert [result.execution_state for result in results] == [Result.ERROR] * 5
    url = f"{running.url}{path}"
    assert {result.error_info.error_message for result in results[:3]} == {
        f"The agent at '{url}' could not be reached (no HTTP answer) 5 times (5 attempts in all)."
    }
    assert {result.error_info.error_message for result in results[3:]} == {
        f"The agent at '{url}' was not called: 3 of this run's calls to it got no HTTP "
        "answer in 5 attempts each, and none was ever answered."
    }


def test_a_url_that_answered_once_is_tried_for_the_whole_run(running: Agent) -> None:
    """An HTTP answer, even a push back, shows the agent is there: each call gets every
    attempt."""
    path = _push_back("busy", status=503, **{"retry-after": "0"})
    results = _played(_endpoint(running, path), times=5)
    assert running.count(path) == 5 * QUICK.attempts
    assert all("answered HTTP 503 5 times" in r.error_info.error_message for r in results)
