"""Runs that play several sessions at once against the app's agent (core/engine/running.py,
core/engine/sessions.py; docs/agents.md, "Concurrency"), over a real SQLite file and the test
agent (tests/support/agent.py) on a real HTTP port: the endpoint's number and its bounds, the
server's bound across runs, counts equal to a serial run's, progress stored while sessions
still play, and a cancel or a shutdown that stops the sessions in flight at once."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import json_format
from google.rpc import code_pb2

from ces_eval.core.aip.context import Settings
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.support.agent import running_agent
from tests.unit.test_core import APP, Harness
from tests.unit.test_running import _get, _results, _run_of, _start, _wait

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.agent import Agent

Run = evaluation_pb2.EvaluationRun
Result = evaluation_pb2.EvaluationResult
Rule = emulator_pb2.OutcomeRule
CANCEL_BOUND = 5.0  # seconds; the agent would take 60 (docs/agents.md: "at once")


@pytest.fixture
def agent() -> Iterator[Agent]:
    with running_agent() as running:
        yield running


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _endpoint(core: Harness, agent: Agent, sessions: int, app: str = APP) -> None:
    endpoint = emulator_pb2.AgentEndpoint(
        name=f"{app}/agentEndpoint", uri=agent.url + "/agent", max_concurrent_sessions=sessions
    )
    core.call(
        "update_agent_endpoint", emulator_pb2.UpdateAgentEndpointRequest(agent_endpoint=endpoint)
    )


def _golden(
    core: Harness, display_name: str, text: str, app: str = APP, expected: str = "Hello!"
) -> str:
    evaluation = evaluation_pb2.Evaluation(display_name=display_name)
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.text = text
    turn.steps.add().expectation.agent_response.chunks.add().text = expected
    request = service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation)
    return str(core.call("create_evaluation", request).name)


def _until(core: Harness, check: Any) -> None:
    """Let the engine and the agent work until ``check()`` holds (a bounded number of looks)."""
    for _ in range(1000):
        if check():
            return
        core.run(asyncio.sleep(0.01))
    raise AssertionError("never got there")


def _counts(run: Run) -> tuple[Any, Any, Any]:
    summaries = {
        name: json_format.MessageToDict(s) for name, s in run.evaluation_run_summaries.items()
    }
    return json_format.MessageToDict(run.progress), summaries, run.latency_report.session_count


def test_sessions_play_at_once_and_count_as_one_after_another(core: Harness, agent: Agent) -> None:
    agent.delay = 0.05
    names = [_golden(core, f"G{index}", "Hello there") for index in range(4)]
    names.append(_golden(core, "Other", "Hello there", expected="Your parcel left Lyon today."))
    counted = []
    for sessions in (1, 3):
        _endpoint(core, agent, sessions)
        agent.most_at_once = 0
        done = _wait(
            core, _start(core, evaluations=names, run_count=3, generate_latency_report=True)
        )
        assert not done.HasField("error"), done.error
        run = _get(core, _run_of(done))
        assert run.state == Run.COMPLETED
        results = _results(core, run.name)
        assert len({result.name for result in results}) == len(results) == 15
        assert sorted(run.evaluation_results) == sorted(result.name for result in results)
        counted.append(_counts(run))
        if sessions == 1:
            assert agent.most_at_once == 1
        else:
            assert 1 < agent.most_at_once <= sessions
    serial, concurrent = counted
    assert serial == concurrent
    progress, summaries, sessions_counted = concurrent
    assert progress["totalCount"] == progress["completedCount"] == 15
    assert len(summaries) == 5 and sessions_counted == 15


def test_the_endpoints_number_is_bounded(core: Harness, agent: Agent) -> None:
    for sessions in (-1, 65):
        error = core.error(
            "update_agent_endpoint",
            emulator_pb2.UpdateAgentEndpointRequest(
                agent_endpoint=emulator_pb2.AgentEndpoint(
                    name=f"{APP}/agentEndpoint",
                    uri=agent.url + "/agent",
                    max_concurrent_sessions=sessions,
                )
            ),
        )
        assert error.code is Code.INVALID_ARGUMENT
        assert [(v.field, v.reason) for v in error.violations] == [
            ("agent_endpoint.max_concurrent_sessions", "OUT_OF_RANGE")
        ]
    for sessions in (0, 64):
        _endpoint(core, agent, sessions)
        stored = core.call(
            "get_agent_endpoint",
            emulator_pb2.GetAgentEndpointRequest(name=f"{APP}/agentEndpoint"),
        )
        assert stored.max_concurrent_sessions == sessions


def test_the_server_bounds_the_sessions_of_all_runs(core: Harness, agent: Agent) -> None:
    old = core.core
    core.core = Core(core.storage, old.context.page_tokens, settings=Settings(agent_sessions=2))
    core.run(old.context.runner.shutdown())
    agent.delay = 0.05
    first_app, second_app = f"{APP}-one", f"{APP}-two"
    operations = []
    for app in (first_app, second_app):
        _endpoint(core, agent, 4, app)
        names = [_golden(core, f"G{index}", "Hello there", app) for index in range(4)]
        request = evaluation_pb2.RunEvaluationRequest(app=app, evaluations=names, run_count=2)
        operations.append(core.call("run_evaluation", request))
    for operation in operations:
        assert not _wait(core, operation).HasField("error")
    assert agent.most_at_once == 2


def test_results_are_stored_while_other_sessions_play(core: Harness, agent: Agent) -> None:
    """A session still playing keeps nobody's result from being stored; a cancel then stores
    the rest CANCELLED, and only the rest: the stored results are not the plan's first."""
    agent.slow = 60
    waiting = _golden(core, "Waiting", "Please wait")
    quick = [_golden(core, f"Quick {index}", "Hello there") for index in range(3)]
    _endpoint(core, agent, 2)
    operation = _start(core, evaluations=[waiting, *quick])
    name = _run_of(operation)
    _until(core, lambda: _get(core, name).progress.completed_count == 3)
    assert _get(core, name).state == Run.RUNNING
    core.call("cancel_operation", operations_pb2.CancelOperationRequest(name=operation.name))
    done = _wait(core, operation)
    assert done.error.code == code_pb2.CANCELLED
    run = _get(core, name)
    assert run.state == Run.CANCELLED
    assert (run.progress.completed_count, run.progress.cancelled_count) == (3, 1)
    results = _results(core, name)
    states = {r.name.rsplit("/results/", 1)[0]: r.execution_state for r in results}
    assert len(results) == 4
    assert states == {waiting: Result.CANCELLED, **dict.fromkeys(quick, Result.COMPLETED)}


@pytest.mark.parametrize("how", ["cancel", "shutdown"])
def test_sessions_in_flight_stop_at_once(core: Harness, agent: Agent, how: str) -> None:
    agent.slow = 60  # each call would take a minute
    names = [_golden(core, f"W{index}", "Please wait") for index in range(6)]
    _endpoint(core, agent, 4)
    operation = _start(core, evaluations=names)
    _until(core, lambda: agent.at_once == 4)
    started = time.monotonic()
    if how == "cancel":
        core.call("cancel_operation", operations_pb2.CancelOperationRequest(name=operation.name))
        done = _wait(core, operation)
    else:
        core.run(core.core.context.runner.shutdown())
        done = core.call("get_operation", operations_pb2.GetOperationRequest(name=operation.name))
    assert time.monotonic() - started < CANCEL_BOUND
    run = _get(core, _run_of(operation))
    if how == "cancel":
        assert done.error.code == code_pb2.CANCELLED
        assert run.state == Run.CANCELLED and run.progress.cancelled_count == 6
        results = _results(core, run.name)
        assert len(results) == 6
        assert {result.execution_state for result in results} == {Result.CANCELLED}
    else:
        assert done.done and done.error.code == code_pb2.UNAVAILABLE
        assert run.state == Run.ERROR and "shut down" in run.error_info.error_message
        assert not _results(core, run.name)


def test_rules_hold_and_decide_their_own_repetitions_only(core: Harness, agent: Agent) -> None:
    """Beside sessions played at once, a RUNNING hold waits for its own evaluation only and a
    rule's outcome scripts its own repetition (docs/semantics.md, "Evaluation runs")."""
    greeting = "Hello! Ask me about the weather."  # what the agent answers: PASS
    held = _golden(core, "Held", "Hello there", expected=greeting)
    scripted = _golden(core, "Scripted", "Hello there", expected=greeting)
    played = _golden(core, "Played", "Hello there", expected=greeting)
    hold = core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(
            parent=APP, outcome_rule=Rule(evaluation=held, hold=Rule.RUNNING)
        ),
    )
    core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(
            parent=APP, outcome_rule=Rule(evaluation=scripted, outcome=Rule.FAIL)
        ),
    )
    _endpoint(core, agent, 2)
    operation = _start(core, evaluations=[held, scripted, played])
    name = _run_of(operation)
    _until(core, lambda: _get(core, name).progress.completed_count == 2)
    assert agent.requests and len(agent.requests) == 1  # the played one only, so far
    core.call("release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=hold.name))
    assert not _wait(core, operation).HasField("error")
    run = _get(core, name)
    assert run.state == Run.COMPLETED and run.progress.completed_count == 3
    statuses = {r.name.rsplit("/results/", 1)[0]: r.evaluation_status for r in _results(core, name)}
    assert statuses[scripted] == Result.FAIL
    assert statuses[held] == statuses[played] == Result.PASS
    assert len(agent.requests) == 2  # the held one, once released


def test_a_failure_stops_the_other_sessions_at_once(core: Harness, agent: Agent) -> None:
    """An evaluation deleted while the run plays it ends the run ERROR when its result is
    stored, and the sessions still in flight are stopped then, not awaited."""
    agent.slow = 60
    doomed = _golden(core, "Doomed", "Hello there")
    waiting = _golden(core, "Waiting", "Please wait")
    quick = _golden(core, "Quick", "Hello there")
    hold = core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(
            parent=APP, outcome_rule=Rule(evaluation=doomed, hold=Rule.RUNNING)
        ),
    )
    _endpoint(core, agent, 3)
    operation = _start(core, evaluations=[doomed, waiting, quick])
    name = _run_of(operation)
    _until(core, lambda: _get(core, name).progress.completed_count == 1 and agent.at_once == 1)
    core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=doomed))
    started = time.monotonic()
    core.call("release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=hold.name))
    done = _wait(core, operation)
    assert time.monotonic() - started < CANCEL_BOUND
    assert done.error.code == code_pb2.FAILED_PRECONDITION, done.error
    run = _get(core, name)
    assert run.state == Run.ERROR and doomed in run.error_info.error_message
    assert run.progress.completed_count == 1  # what was stored before stays
