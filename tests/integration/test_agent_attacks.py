"""The agent player under attack (docs/agents.md, "Bounds" and "Safety"): a real server and a
real agent (tests/support/agent.py) answering hostile bodies. Whatever the agent, its judge or
its simulator answers: the health probes keep answering within their bound
(tests/support/stall.py), that result ends ERROR with a short reason and the run COMPLETED,
nothing stored passes the resource bound, no traceback is logged, and the endpoint's token is
written nowhere."""

from __future__ import annotations

import contextlib
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from ces_eval.contract.limits import MAX_REPEATED, MAX_RESOURCE_BYTES
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import (
    Agent,
    finished_run,
    refusal,
    rest_call,
    start_run,
    violation_fields,
)
from tests.support.stall import probing

PROJECT = "projects/attack-project/locations/us-central1/apps"
TOKEN = "Bearer agent-s3cret-7f3a"  # noqa: S105 - the test agent's made-up token
SECRET = TOKEN.split()[1]
EXCERPT = 1_000  # characters an error message may hold (docs/agents.md, "Bounds")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("attacks") / "db.sqlite")
    yield running
    running.stop()


def _evaluation(server: RunningServer, app: str, turns: list[list[dict[str, Any]]]) -> str:
    """A golden of ``turns`` (each a list of steps) in ``app``: its name."""
    golden = {"turns": [{"steps": steps} for steps in turns]}
    body = {"displayName": f"Attack {len(turns)}", "golden": golden}
    return str(rest_call(server, "POST", f"/v1beta/{app}/evaluations", body)["name"])


def _said(text: str) -> dict[str, Any]:
    return {"expectation": {"agentResponse": {"role": "agent", "chunks": [{"text": text}]}}}


def _set_agent(server: RunningServer, app: str, uri: str, **settings: Any) -> None:
    """Point ``app`` at ``uri``, with the token every attack checks is written nowhere."""
    Emulator(server.http_base).set_agent(app, uri, headers={"Authorization": TOKEN}, **settings)


def _holding(server: RunningServer, text: str) -> list[str]:
    """The stored results and conversations whose bytes hold ``text``."""
    query = "SELECT name FROM {} WHERE instr(data, ?) > 0"
    with contextlib.closing(sqlite3.connect(server.database)) as database:
        return [
            str(name)
            for table in ("evaluation_results", "conversations")
            for (name,) in database.execute(query.format(table), (text.encode(),))
        ]


def _stored_bytes(server: RunningServer) -> dict[str, int]:
    """The largest stored result and conversation, in bytes, read from the database file."""
    query = "SELECT max(length(data)) FROM {}"
    with contextlib.closing(sqlite3.connect(server.database)) as database:
        return {
            table: int(database.execute(query.format(table)).fetchone()[0] or 0)
            for table in ("evaluation_results", "conversations")
        }


def _attacked(
    server: RunningServer, app: str, evaluation: str, **request: object
) -> tuple[Any, Any]:
    """Run ``evaluation`` once while probing the server's health: the run and its result,
    after the checks every attack shares (see the module)."""
    [(run, result)] = _attacked_at_once(server, [(app, evaluation)], **request)
    return run, result


def _attacked_at_once(
    server: RunningServer, plays: list[tuple[str, str]], **request: object
) -> list[tuple[Any, Any]]:
    """Run each ``(app, evaluation)`` of ``plays`` once, the runs at the same time, while
    probing the server's health: each run and its result, after the checks every attack
    shares (see the module)."""
    with probing(server) as probes:
        operations = [
            start_run(server, app, [evaluation], runCount=1, **request) for app, evaluation in plays
        ]
        played = [finished_run(server, operation) for operation in operations]
    print(f"\n{probes.line()}")
    assert probes.slow() == []
    found = []
    for (app, _), (run, results) in zip(plays, played, strict=True):
        shown = [
            (r["executionState"], r.get("errorInfo", {}).get("errorMessage", "")[:300])
            for r in results
        ]
        print(f"{app}: run {run['state']} {run.get('errorInfo')}; results {shown}")
        assert run["state"] == "COMPLETED", run
        [result] = results
        assert result["executionState"] == "ERROR", str(result)[:2000]
        assert len(result["errorInfo"]["errorMessage"]) <= EXCERPT
        found.append((run, result))
    print(f"stored {_stored_bytes(server)}; traceback {'Traceback' in server.output()}")
    stored = _stored_bytes(server)
    assert stored["evaluation_results"] <= MAX_RESOURCE_BYTES
    assert stored["conversations"] <= MAX_RESOURCE_BYTES
    output = server.output()
    assert "Traceback" not in output
    assert SECRET not in output
    assert _holding(server, SECRET) == []
    return found


def test_a_long_answer_against_a_long_golden_stalls_nothing(
    server: RunningServer, agent: Agent
) -> None:
    """4.1 MB of text (under the 4 MiB default) against a 262,000-character expected answer:
    the similarity of the two stalled every surface for 20 s."""
    app = f"{PROJECT}/long"
    expected = ("lorem ipsum " * 30_000)[:262_000]
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}, _said(expected)]])
    _set_agent(server, app, agent.url + "/long")
    _, result = _attacked(server, app, evaluation)
    assert "characters" in result["errorInfo"]["errorMessage"]


def test_a_text_of_60_mb_stalls_nothing(server: RunningServer, agent: Agent) -> None:
    """One text of 60 MB under the largest answer limit: json.loads read it in one call and
    json_format scanned it in another, both holding the interpreter."""
    app = f"{PROJECT}/huge-text"
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}, _said("lorem")]])
    _set_agent(server, app, agent.url + "/huge-text", max_response_bytes=64 * 2**20)
    _, result = _attacked(server, app, evaluation)
    assert "at most 262144 are read" in result["errorInfo"]["errorMessage"]


def test_forty_thousand_tool_calls_stall_nothing(server: RunningServer, agent: Agent) -> None:
    """40,000 tool calls in one answer to a turn holding 999 tool responses: each call was
    matched against every response (16-17 s) and recorded as an extra outcome."""
    app = f"{PROJECT}/calls"
    responses = [
        {"expectation": {"toolResponse": {"tool": f"tools/t{index}", "response": {"n": index}}}}
        for index in range(999)
    ]
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}, *responses]])
    _set_agent(server, app, agent.url + "/many-calls")
    _, result = _attacked(server, app, evaluation)
    assert f"more than {MAX_REPEATED} tool calls" in result["errorInfo"]["errorMessage"]


def test_a_trace_of_400000_spans_stalls_nothing(server: RunningServer, agent: Agent) -> None:
    """400,000 spans (11 MB, under a 16 MiB answer limit) were walked in quadratic time: 30 s."""
    app = f"{PROJECT}/spans"
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}]])
    _set_agent(server, app, agent.url + "/spans", max_response_bytes=16 * 2**20)
    _, result = _attacked(server, app, evaluation)
    assert "more than 100000 JSON values" in result["errorInfo"]["errorMessage"]


@pytest.mark.parametrize("record", ["conversation", "result"])
def test_what_is_recorded_holds_to_the_resource_bound(
    server: RunningServer, agent: Agent, record: str
) -> None:
    """Every turn answered 3.9 MB: ten turns were stored as one conversation of 39 MB; three
    agent response expectations quoted the answer three times in the result (11.7 MB), which
    ended the whole run ERROR."""
    app = f"{PROJECT}/bulky-{record}"
    if record == "conversation":
        turns = [[{"userInput": {"text": f"Turn {index}"}}] for index in range(10)]
    else:
        turns = [[{"userInput": {"text": "Hi"}}, _said("a"), _said("b"), _said("c")]]
    evaluation = _evaluation(server, app, turns)
    _set_agent(server, app, agent.url + "/bulky")
    _, result = _attacked(server, app, evaluation)
    assert f"The {record} would pass" in result["errorInfo"]["errorMessage"]


def test_a_judges_malformed_answer_is_not_quoted_whole(server: RunningServer, agent: Agent) -> None:
    """A judge answering a similarity of 4 MB: the result's error message quoted all of it."""
    app = f"{PROJECT}/judge-huge"
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}, _said("Hello!")]])
    _set_agent(server, app, agent.url + "/agent", judge_uri=agent.url + "/judge-huge")
    _, result = _attacked(server, app, evaluation)
    assert '"semanticSimilarity": ' in result["errorInfo"]["errorMessage"]


def test_what_no_write_accepts_is_not_stored(server: RunningServer, agent: Agent) -> None:
    """A tool call whose arguments nest deeper than any write accepts: it was stored in the
    result and the conversation, which the write path would have refused."""
    app = f"{PROJECT}/nested"
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}]])
    _set_agent(server, app, agent.url + "/nested-args")
    _, result = _attacked(server, app, evaluation)
    message = result["errorInfo"]["errorMessage"]
    assert message.startswith("The result would not be stored: result.golden_result"), message
    conversation = rest_call(server, "GET", f"/emulator/v1/{_conversation_of(server, app)}")
    assert "turns" not in conversation


def _conversation_of(server: RunningServer, app: str) -> str:
    [conversation] = rest_call(server, "GET", f"/emulator/v1/{app}/conversations")["conversations"]
    return str(conversation["name"])


@pytest.mark.parametrize("role", ["agent", "judge", "simulator"])
def test_deeply_nested_json_ends_that_result_error(
    server: RunningServer, agent: Agent, role: str
) -> None:
    """JSON nested 100,000 deep raised RecursionError: the whole run ended INTERNAL."""
    app = f"{PROJECT}/deep-{role}"
    deep = agent.url + "/deep"
    if role == "simulator":
        scenario = {
            "task": "Ask about Rome.",
            "rubrics": ["Answers."],
            "scenarioExpectations": [{"agentResponse": {}}],
        }
        body = {"displayName": "Deep", "scenario": scenario}
        evaluation = rest_call(server, "POST", f"/v1beta/{app}/evaluations", body)["name"]
        _set_agent(server, app, agent.url + "/agent", simulator_uri=deep)
    else:
        evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}, _said("Hello!")]])
        uris = (deep, "") if role == "agent" else (agent.url + "/agent", deep)
        _set_agent(server, app, uris[0], judge_uri=uris[1])
    _, result = _attacked(server, app, evaluation)
    assert "nested too deeply" in result["errorInfo"]["errorMessage"]


def _refused_fields(server: RunningServer, app: str, endpoint: dict[str, Any]) -> list[str]:
    """The field violations UpdateAgentEndpoint answers ``endpoint`` with, which never quote
    the secret (nothing stored)."""
    refused = refusal(server, app, endpoint)
    assert SECRET not in str(refused) and "s3cr" not in str(refused.details)
    return violation_fields(refused)


@pytest.mark.parametrize("character", ["\r", "\n", "\t"])
@pytest.mark.parametrize("field", ["uri", "judgeUri", "simulatorUri"])
def test_a_uri_with_a_line_break_or_tab_is_refused(
    server: RunningServer, field: str, character: str
) -> None:
    app = f"{PROJECT}/breaks"
    endpoint = {"uri": "http://127.0.0.1:9/agent", field: f"http://127.0.0.1:9/a{character}b"}
    snake = {"uri": "uri", "judgeUri": "judge_uri", "simulatorUri": "simulator_uri"}[field]
    assert _refused_fields(server, app, endpoint) == [f"agent_endpoint.{snake}"]


def test_a_header_value_outside_visible_ascii_is_refused(server: RunningServer) -> None:
    app = f"{PROJECT}/latin"
    endpoint = {"uri": "http://127.0.0.1:9/agent", "headers": {"Authorization": "s3cr\u00e9t"}}
    assert _refused_fields(server, app, endpoint) == ["agent_endpoint.headers['Authorization']"]


def _own_ports(server: RunningServer) -> tuple[int, int]:
    return int(server.grpc_target.rsplit(":", 1)[1]), int(server.http_base.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "[::1]", "0.0.0.0", "127.0.0.2", socket.gethostname()],  # noqa: S104
)
def test_the_servers_own_ports_are_refused(server: RunningServer, host: str) -> None:
    app = f"{PROJECT}/own-{re.sub('[^a-z0-9]+', '-', host.lower()).strip('-')}"
    grpc_port, http_port = _own_ports(server)
    for port in (grpc_port, http_port):
        uri = f"http://{host}:{port}/v1beta/projects/-:reset"
        fields = _refused_fields(server, app, {"uri": uri})
        assert fields == ["agent_endpoint.uri"], (host, port)


def _stored_endpoint(server: RunningServer, app: str, **changed: Any) -> None:
    """Change ``app``'s stored endpoint in the database file itself, as one stored by an
    earlier version (which accepted it) would be."""
    name = f"{app}/agentEndpoint"
    with contextlib.closing(sqlite3.connect(server.database)) as database, database:
        [(data,)] = database.execute("SELECT data FROM agent_endpoints WHERE name = ?", (name,))
        endpoint = emulator_service_pb2.AgentEndpoint.FromString(data)
        for field, value in changed.items():
            if field == "headers":
                endpoint.headers.update(value)
            else:
                setattr(endpoint, field, value)
        database.execute(
            "UPDATE agent_endpoints SET data = ? WHERE name = ?",
            (endpoint.SerializeToString(), name),
        )


@contextlib.contextmanager
def _closing_port() -> Iterator[int]:
    """An open port that is no HTTP server: it accepts each connection and closes it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_refusals_and_connection_failures_read_alike(server: RunningServer, agent: Agent) -> None:
    """The server's own port (stored before it was refused), a closed port and an open port
    that speaks no HTTP end their results with one text, each tried as often
    (docs/agents.md, "Back-pressure"): no port scan through the errors. The three runs play
    at once, as each waits out its back-offs."""
    _, http_port = _own_ports(server)
    with _closing_port() as open_port:
        ports = {"own": http_port, "closed": _free_port(), "open": open_port}
        plays = []
        for label, port in ports.items():
            app = f"{PROJECT}/scan-{label}"
            evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}]])
            _set_agent(server, app, agent.url + "/agent")
            _stored_endpoint(server, app, uri=f"http://localhost:{port}/v1beta/projects/-:reset")
            plays.append((app, evaluation))
        attacked = _attacked_at_once(server, plays)
    messages = {
        label: result["errorInfo"]["errorMessage"].replace(str(port), "PORT")
        for (label, port), (_, result) in zip(ports.items(), attacked, strict=True)
    }
    assert messages["own"] == messages["closed"] == messages["open"], messages
    assert "(5 attempts in all)" in messages["own"]


def test_stored_hostile_endpoints_end_their_result_error(
    server: RunningServer, agent: Agent
) -> None:
    """A uri with a line break and a header value with é, stored by an earlier version: the
    run ended INTERNAL with a traceback naming the secret's character and its position."""
    for label, changed in (
        ("break", {"uri": agent.url + "/ag\nent"}),
        ("latin", {"headers": {"Authorization": "Bearer s3cr\u00e9t-7f3a"}}),
    ):
        app = f"{PROJECT}/stored-{label}"
        evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}]])
        _set_agent(server, app, agent.url + "/agent")
        _stored_endpoint(server, app, **changed)
        _, result = _attacked(server, app, evaluation)
        assert "s3cr" not in str(result) and "s3cr" not in server.output()


def test_an_echoed_token_is_scrubbed_from_the_error(server: RunningServer, agent: Agent) -> None:
    """An agent answering HTTP 500 with the request's headers: the 200-byte excerpt carried the
    bearer token into the result (and any export of it)."""
    app = f"{PROJECT}/echo"
    evaluation = _evaluation(server, app, [[{"userInput": {"text": "Hi"}}]])
    _set_agent(server, app, agent.url + "/echo")
    _, result = _attacked(server, app, evaluation)
    message = result["errorInfo"]["errorMessage"]
    assert "answered HTTP 500" in message
    for piece in (SECRET, SECRET[:8], "Bearer agent"):
        assert piece not in message, message
