"""Record and replay (docs/agents.md, "Record and replay"; core/engine/recording.py,
core/resources/agent_recordings.py, core/exchange/recording_files.py) through the core over a
real SQLite file, against the shared test agent (tests/support/agent.py) in a thread: the key,
a recorded run replayed with the agent stopped giving equal results, a replay missing a
recording, REPLAY_OR_RECORD calling only for what is missing, header values never recorded,
and the management methods (pages, filters, purge, delete, export, import, reset)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from google.protobuf import json_format

from ces_eval.contract import limits
from ces_eval.contract.encoded import message_of
from ces_eval.core.resources import agent_recordings
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.support.agent import compared_results, running_agent, weather_golden
from tests.unit.test_core import APP, Harness, core, violations
from tests.unit.test_runs import finished

if TYPE_CHECKING:
    from tests.support.agent import Agent

__all__ = ["core"]  # the fixture, used by name

E = emulator_pb2
Mode = E.AgentEndpoint.RecordingMode
Recording = E.AgentRecording
TOKEN = "Bearer rec-s3cret-91c2"  # noqa: S105 - made up
OTHER_APP = "projects/p/locations/l/apps/other"


def _weather(
    core: Harness, city: str, degrees: int, app: str = APP, evaluation_id: str = ""
) -> str:
    document = weather_golden(app, city, degrees, greeting=True)
    return _create(core, document, app, evaluation_id)


def _scenario(core: Harness, app: str = APP) -> str:
    tool = f"{app}/tools/get_weather"
    document = {
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
            ],
        },
    }
    return _create(core, document, app)


def _create(core: Harness, document: dict[str, Any], app: str, evaluation_id: str = "") -> str:
    evaluation = json_format.ParseDict(document, evaluation_pb2.Evaluation())
    request = service_pb2.CreateEvaluationRequest(
        parent=app, evaluation=evaluation, evaluation_id=evaluation_id
    )
    return str(core.call("create_evaluation", request).name)


def _endpoint(
    core: Harness, url: str, mode: int, app: str = APP, path: str = "/agent", **fields: Any
) -> None:
    endpoint = E.AgentEndpoint(
        **fields,
        name=f"{app}/agentEndpoint",
        uri=url + path,
        judge_uri=url + "/judge",
        simulator_uri=url + "/simulator",
        headers={"Authorization": TOKEN},
        recording_mode=mode,
    )
    core.call("update_agent_endpoint", E.UpdateAgentEndpointRequest(agent_endpoint=endpoint))


def _run(
    core: Harness, evaluations: list[str], app: str = APP, runs: int = 2
) -> list[evaluation_pb2.EvaluationResult]:
    """Run ``evaluations`` ``runs`` times each to the end: the run's results."""
    request = evaluation_pb2.RunEvaluationRequest(app=app, evaluations=evaluations, run_count=runs)
    done = finished(core, core.call("run_evaluation", request))
    response = service_pb2.RunEvaluationResponse()
    done.response.Unpack(response)
    run = core.call(
        "get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=response.evaluation_run)
    )
    run = message_of(run)
    return [
        message_of(
            core.call("get_evaluation_result", service_pb2.GetEvaluationResultRequest(name=name))
        )
        for name in run.evaluation_results
    ]


# What differs between two runs of the same evaluations: names, times, and the turns' latencies
# (a replayed call takes no time).
def _compared(results: list[evaluation_pb2.EvaluationResult]) -> list[str]:
    return compared_results([json_format.MessageToDict(result) for result in results])


def _recordings(core: Harness, app: str = APP, **fields: Any) -> list[Recording]:
    found: list[Recording] = []
    token = ""
    while True:
        request = E.ListAgentRecordingsRequest(parent=app, page_token=token, **fields)
        page = message_of(core.call("list_agent_recordings", request))
        found += page.agent_recordings
        token = page.next_page_token
        if not token:
            return found


def test_the_key_leaves_out_what_differs_from_run_to_run() -> None:
    def request(session: str, time: str, text: str) -> object:
        return {
            "config": {
                "session": f"{APP}/sessions/{session}",
                "historicalContexts": [{"role": "user", "eventTime": time}],
            },
            "inputs": [{"text": text, "tool": f"{APP}/tools/get_weather"}],
        }

    first = agent_recordings.keyed(request("a1", "2026-01-01T00:00:00Z", "Hi"), APP)
    second = agent_recordings.keyed(request("b2", "2027-05-05T10:00:00Z", "Hi"), APP)
    assert first == second
    assert '"session":"~/sessions/-"' in first and "eventTime" not in first
    assert '"tool":"~/tools/get_weather"' in first
    # The same request in another app is keyed alike; another text is not.
    moved = request("c3", "2026-01-01T00:00:00Z", "Hi")
    assert (
        agent_recordings.keyed(json.loads(json.dumps(moved).replace(APP, OTHER_APP)), OTHER_APP)
        == first
    )
    assert agent_recordings.keyed(request("a1", "2026-01-01T00:00:00Z", "Hello"), APP) != first
    key = (Recording.AGENT, f"{APP}/evaluations/e", 0, 0, first)
    same = agent_recordings.recording_id(*key)
    assert same == agent_recordings.recording_id(
        Recording.AGENT, f"{OTHER_APP}/evaluations/e", 0, 0, first
    )
    for changed in (
        (Recording.JUDGE, *key[1:]),
        (Recording.AGENT, f"{APP}/evaluations/f", *key[2:]),
        (*key[:2], 1, *key[3:]),
        (*key[:3], 1, first),
    ):
        assert agent_recordings.recording_id(*changed) != same


def test_a_recorded_run_replays_with_the_agent_stopped(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        berlin = _weather(core, "Berlin", 15)
        rome = _scenario(core)
        _endpoint(core, agent.url, Mode.RECORD)
        recorded = _run(core, [paris, berlin, rome])
        called = len(agent.requests)
    statuses = sorted(
        evaluation_pb2.EvaluationResult.Outcome.Name(r.evaluation_status) for r in recorded
    )
    assert statuses == ["FAIL", "FAIL", "PASS", "PASS", "PASS", "PASS"]
    assert all(r.execution_state == r.COMPLETED for r in recorded)
    stored = _recordings(core)
    assert len(stored) == called  # every exchange, once
    assert {r.callee for r in stored} == {Recording.AGENT, Recording.JUDGE, Recording.SIMULATOR}
    assert {r.repetition for r in stored} == {0, 1}
    for recording in stored:
        assert TOKEN.encode() not in recording.answer and TOKEN not in recording.request
        assert "/sessions/-" in recording.request or recording.callee != Recording.AGENT
    # The agent is gone: a replay calls nothing and gives the same results.
    _endpoint(core, agent.url, Mode.REPLAY)
    replayed = _run(core, [paris, berlin, rome])
    assert _compared(replayed) == _compared(recorded)
    assert len(_recordings(core)) == len(stored)  # a replay records nothing


def test_a_replay_without_a_recording_ends_that_result_error(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        _endpoint(core, agent.url, Mode.REPLAY)
        [result] = _run(core, [paris], runs=1)
        assert agent.requests == []  # nothing was called
    assert result.execution_state == result.ERROR
    message = result.error_info.error_message
    assert "The agent was not called" in message
    assert f"call 0 (0 is the first) of repetition 1 of {paris}" in message
    assert f"{APP}/agentRecordings/r" in message


def test_a_replayed_answer_is_held_to_the_answer_size_limit(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        _endpoint(core, agent.url, Mode.RECORD)
        _run(core, [paris], runs=1)
    _endpoint(core, agent.url, Mode.REPLAY, max_response_bytes=20)
    [result] = _run(core, [paris], runs=1)
    assert result.execution_state == result.ERROR
    assert "The agent answered more than 20 bytes (its recorded answer" in (
        result.error_info.error_message
    )


def test_a_scenario_replayed_without_recordings_ends_in_a_simulation_failure(
    core: Harness,
) -> None:
    rome = _scenario(core)
    _endpoint(core, "http://127.0.0.1:9", Mode.REPLAY)
    [result] = _run(core, [rome], runs=1)
    assert result.execution_state == result.ERROR
    info = result.error_info
    assert info.error_type == info.USER_SIMULATION_FAILURE
    assert info.error_message.startswith("The simulator was not called")


def test_replay_or_record_calls_only_for_what_is_missing(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        berlin = _weather(core, "Berlin", 15)
        _endpoint(core, agent.url, Mode.RECORD)
        _run(core, [paris], runs=1)
        first = len(agent.requests)
        _endpoint(core, agent.url, Mode.REPLAY_OR_RECORD)
        _run(core, [paris, berlin], runs=1)
        sent = agent.requests[first:]
    # Paris answered from its recordings; Berlin called (2 turns, a tool round, a judge call).
    assert sent and all("Paris" not in json.dumps(request) for request in sent)
    berlins = _recordings(core, filter=f'evaluation = "{berlin}"')
    assert len(berlins) == len(sent)
    assert len(_recordings(core)) == first + len(sent)


def test_an_exchange_holding_a_header_value_is_not_recorded(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        _endpoint(core, agent.url, Mode.RECORD, path="/echo-ok")
        [result] = _run(core, [paris], runs=1)
    assert result.execution_state == result.ERROR
    message = result.error_info.error_message
    assert "was not recorded: the exchange holds a value of the endpoint's headers" in message
    assert TOKEN not in message
    assert _recordings(core) == []


def test_an_exchange_larger_than_a_resource_is_not_recorded(core: Harness) -> None:
    with running_agent() as agent:
        paris = _weather(core, "Paris", 21)
        # /spans answers 11 MB: within this answer limit, past what one recording may take.
        _endpoint(core, agent.url, Mode.RECORD, path="/spans", max_response_bytes=16 * 2**20)
        [result] = _run(core, [paris], runs=1)
    assert result.execution_state == result.ERROR
    message = result.error_info.error_message
    assert "The agent's answer to call 0 was not recorded: the exchange takes about" in message
    assert f"more than the {limits.MAX_RESOURCE_BYTES} a recording may" in message
    assert _recordings(core) == []


def _recorded(core: Harness, agent: Agent) -> list[Recording]:
    paris = _weather(core, "Paris", 21, evaluation_id="paris")
    _endpoint(core, agent.url, Mode.RECORD)
    _run(core, [paris], runs=2)
    return _recordings(core)


def test_recordings_are_listed_in_pages_filtered_and_deleted(core: Harness) -> None:
    with running_agent() as agent:
        stored = _recorded(core, agent)
    assert len(stored) > 3
    first = message_of(
        core.call("list_agent_recordings", E.ListAgentRecordingsRequest(parent=APP, page_size=2))
    )
    assert len(first.agent_recordings) == 2 and first.next_page_token
    rest = _recordings(core, page_size=2)
    assert sorted(r.name for r in rest) == sorted(r.name for r in stored)
    judged = _recordings(core, filter="callee = JUDGE")
    assert judged and {r.callee for r in judged} == {Recording.JUDGE}
    bad = core.error(
        "list_agent_recordings", E.ListAgentRecordingsRequest(parent=APP, filter="nothing = 1")
    )
    assert (bad.code, violations(bad)) == (Code.INVALID_ARGUMENT, ["filter"])
    one = stored[0]
    got = message_of(core.call("get_agent_recording", E.GetAgentRecordingRequest(name=one.name)))
    assert got == one
    core.call("delete_agent_recording", E.DeleteAgentRecordingRequest(name=one.name))
    gone = core.error("get_agent_recording", E.GetAgentRecordingRequest(name=one.name))
    assert gone.code == Code.NOT_FOUND
    counted = core.call(
        "purge_agent_recordings", E.PurgeAgentRecordingsRequest(parent=APP, filter="repetition = 1")
    )
    assert counted.purge_count == len([r for r in stored[1:] if r.repetition == 1])
    assert len(_recordings(core)) == len(stored) - 1  # counted, not deleted
    purged = core.call(
        "purge_agent_recordings",
        E.PurgeAgentRecordingsRequest(parent=APP, filter="repetition = 1", force=True),
    )
    assert purged.purge_count == counted.purge_count
    assert {r.repetition for r in _recordings(core)} == {0}
    everything = core.call(
        "purge_agent_recordings", E.PurgeAgentRecordingsRequest(parent=APP, force=True)
    )
    assert everything.purge_count > 0 and _recordings(core) == []


def test_recordings_are_exported_imported_and_replayed_after_a_reset(core: Harness) -> None:
    with running_agent() as agent:
        stored = _recorded(core, agent)
        # Recorded again: each exchange replaces its own recording, nothing is added.
        recorded = _run(core, [stored[0].evaluation], runs=2)
    assert len(_recordings(core)) == len(stored)
    exported = core.call("export_agent_recordings", E.ExportAgentRecordingsRequest(parent=APP))
    assert exported.exported_count == len(stored)
    lines = exported.content.splitlines()
    assert len(lines) == len(stored)
    assert TOKEN.encode() not in exported.content
    assert {json.loads(line)["callee"] for line in lines} == {"AGENT", "JUDGE"}
    # Into another app: renamed there, evaluations by their IDs, the same recording IDs.
    imported = core.call(
        "import_agent_recordings",
        E.ImportAgentRecordingsRequest(parent=OTHER_APP, content=exported.content),
    )
    assert imported.imported_count == len(stored)
    moved = _recordings(core, OTHER_APP)
    assert sorted(r.name.rsplit("/", 1)[-1] for r in moved) == sorted(
        r.name.rsplit("/", 1)[-1] for r in stored
    )
    assert {r.evaluation for r in moved} == {f"{OTHER_APP}/evaluations/paris"}
    # Its answers name the other app's tool, as the agent would answer there: a replay there
    # gives the results of the recorded run, but for the app's name.
    assert all(APP.encode() not in r.answer for r in moved)
    assert any(f"{OTHER_APP}/tools/get_weather".encode() in r.answer for r in moved)
    elsewhere = _weather(core, "Paris", 21, app=OTHER_APP, evaluation_id="paris")
    _endpoint(core, "http://127.0.0.1:9", Mode.REPLAY, app=OTHER_APP)
    replayed_there = _run(core, [elsewhere], app=OTHER_APP, runs=2)
    assert [text.replace(OTHER_APP, APP) for text in _compared(replayed_there)] == _compared(
        recorded
    )
    # A project reset clears them; the file brings them back, and a replay answers from them.
    core.call("reset_project", E.ResetProjectRequest(name="projects/p"))
    assert _recordings(core) == [] and _recordings(core, OTHER_APP) == []
    paris = _weather(core, "Paris", 21, evaluation_id="paris")
    core.call(
        "import_agent_recordings",
        E.ImportAgentRecordingsRequest(parent=APP, content=exported.content),
    )
    _endpoint(core, "http://127.0.0.1:9", Mode.REPLAY)
    replayed = _run(core, [paris], runs=2)
    assert _compared(replayed) == _compared(recorded)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"not json\n", "Line 2: not an AgentRecording"),
        (b'{"callee": "AGENT", "evaluation": "x/evaluations/e"}\n', "Line 2: request is required"),
        (b'\n{"evaluation": "x/evaluations/e", "request": "{}"}\n', "Line 3: callee must be"),
        (b'{"callee": "JUDGE", "evaluation": "e", "request": "{}"}\n', "Line 2: evaluation must"),
        (b'{"callee": "JUDGE", "surprise": 1}\n', "Line 2: not an AgentRecording"),
    ],
)
def test_an_import_with_a_bad_line_imports_nothing(
    core: Harness, content: bytes, problem: str
) -> None:
    good = Recording(
        callee=Recording.AGENT, evaluation=f"{APP}/evaluations/e", request="{}", answer=b"{}"
    )
    document = json_format.MessageToJson(good, indent=None).encode() + b"\n" + content
    refused = core.error(
        "import_agent_recordings", E.ImportAgentRecordingsRequest(parent=APP, content=document)
    )
    assert refused.code == Code.INVALID_ARGUMENT
    [violation] = refused.violations
    assert violation.field == "content" and problem in violation.description
    assert _recordings(core) == []
