"""Sessions in process (docs/sessions.md): the stream plumbing (the boundary's streams, REST's
streamed JSON array, gRPC's server and bidirectional streams and the drain's ``Draining``),
the stand-in of an app's goldens, the core's session turns over a real SQLite file (recorded,
continued, bounded), chat tokens and the authorization of streams."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from ces_eval.access import Caller, Principal, Tokens, authorize, method_access
from ces_eval.access.chat_tokens import ChatTokens
from ces_eval.admission import Admission
from ces_eval.contract import limits, schema
from ces_eval.core.aip import pages
from ces_eval.core.aip.context import BidiStreaming, Draining
from ces_eval.core.engine import session_service
from ces_eval.core.engine.session_service import FALLBACK_ANSWER, StandIn
from ces_eval.core.service import Core, bidi_handlers, handlers, stream_handlers
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    content_pb2,
    conversation_pb2,
    evaluation_pb2,
    session_service_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import EtagMismatch
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.surfaces.boundary import Boundary, Inputs
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import BodyLimit
from ces_eval.surfaces.rest import Transcoder
from ces_eval.transcoding.router import Router
from tests.support.tokens import BOB

APP = "projects/p/locations/l/apps/a"
SESSION = f"{APP}/sessions/s1"
STREAM = "/google.cloud.ces.v1beta.SessionService/StreamRunSession"
BIDI = "/google.cloud.ces.v1beta.SessionService/BidiRunSession"
RUN = "/google.cloud.ces.v1beta.SessionService/RunSession"
Request = session_service_pb2.RunSessionRequest
Response = session_service_pb2.RunSessionResponse
ClientMessage = session_service_pb2.BidiSessionClientMessage
ServerMessage = session_service_pb2.BidiSessionServerMessage
ME = Caller("me@example.com")


def _run(awaitable: Awaitable[Any]) -> Any:
    return asyncio.run(awaitable)  # type: ignore[arg-type]


# -- the boundary's streams ------------------------------------------------------------------------


async def _drained(boundary: Boundary, work: Any, inputs: Inputs | None = None) -> list[Any]:
    line = boundary.start("x")
    got: list[Any] = []
    try:
        async for item in boundary.stream("x", lambda: inputs or Inputs(), work, line=line):
            got.append(item)
    except ServiceError as error:
        got.append(error)
    got.append(line.code if line is not None else None)
    return got


def _boundary() -> Boundary:
    return Boundary("grpc", admission=Admission("grpc", 1))


async def _two(caller: Caller) -> AsyncIterator[str]:
    yield "a"
    yield caller.user


async def _fails_after_one(caller: Caller) -> AsyncIterator[str]:
    yield "a"
    raise ServiceError(Code.FAILED_PRECONDITION, "no more", "TOO_LARGE")


async def _breaks(caller: Caller) -> AsyncIterator[str]:
    yield "a"
    raise RuntimeError("secret detail")


async def _waits(caller: Caller) -> AsyncIterator[str]:
    yield "a"
    await asyncio.Event().wait()
    yield "never"


def test_a_stream_yields_its_responses_and_gives_its_slot_back() -> None:
    boundary = _boundary()
    got = _run(_drained(boundary, _two, Inputs(user="u@example.com")))
    assert got[:2] == ["a", "u@example.com"]
    assert boundary.admission is not None and boundary.admission.in_flight == 0


def test_a_stream_error_ends_it_with_its_status_and_frees_the_slot() -> None:
    boundary = _boundary()
    got = _run(_drained(boundary, _fails_after_one))
    assert got[0] == "a"
    assert isinstance(got[1], ServiceError) and got[1].reason == "TOO_LARGE"
    assert boundary.admission is not None and boundary.admission.in_flight == 0


def test_a_bug_in_a_stream_is_internal_and_logged_never_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    boundary = _boundary()
    with caplog.at_level(logging.ERROR, logger="ces_eval.surfaces.boundary"):
        got = _run(_drained(boundary, _breaks))
    assert isinstance(got[1], ServiceError) and got[1].code is Code.INTERNAL
    assert "secret detail" not in got[1].message and "secret detail" in caplog.text
    assert boundary.admission is not None and boundary.admission.in_flight == 0


def test_a_stream_past_its_deadline_is_deadline_exceeded() -> None:
    boundary = _boundary()
    got = _run(_drained(boundary, _waits, Inputs(deadline=0.05)))
    assert got[0] == "a"
    assert isinstance(got[1], ServiceError) and got[1].code is Code.DEADLINE_EXCEEDED
    assert boundary.admission is not None and boundary.admission.in_flight == 0


def test_a_stream_its_consumer_leaves_gives_its_slot_back() -> None:
    boundary = _boundary()

    async def scenario() -> tuple[int, int]:
        responses = boundary.stream("x", Inputs, _waits)
        assert await anext(responses) == "a"
        assert boundary.admission is not None
        held = boundary.admission.in_flight
        await responses.aclose()  # as a cancelled call's surface does
        return held, boundary.admission.in_flight

    assert _run(scenario()) == (1, 0)


def test_a_stream_beyond_the_limit_is_refused_at_once() -> None:
    boundary = _boundary()

    async def scenario() -> ServiceError:
        held = boundary.stream("x", Inputs, _waits)
        await anext(held)
        with pytest.raises(ServiceError) as raised:
            await anext(boundary.stream("y", Inputs, _two))
        await held.aclose()
        return raised.value

    assert _run(scenario()).code is Code.RESOURCE_EXHAUSTED
    assert boundary.admission is not None and boundary.admission.in_flight == 0


# -- REST's streamed array -------------------------------------------------------------------------


def _outputs(*texts: str) -> list[Response]:
    return [Response(outputs=[session_service_pb2.SessionOutput(text=t)]) for t in texts]


def _rest_stream(implementation: Any) -> httpx.Response:
    async def scenario() -> httpx.Response:
        app = BodyLimit(
            Transcoder(Router(schema.http_bindings()), {}, streams={STREAM: implementation})
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(
                f"/v1beta/{SESSION}:streamRunSession",
                json={"config": {"session": SESSION}, "inputs": [{"text": "hi"}]},
            )

    result: httpx.Response = _run(scenario())
    return result


def test_rest_streams_a_json_array_element_by_element() -> None:
    async def two(request: Any, caller: Caller) -> AsyncIterator[Response]:
        assert request.inputs[0].text == "hi"
        for response in _outputs("one", "two"):
            yield response

    answer = _rest_stream(two)
    assert answer.status_code == 200
    assert answer.text.startswith("[{") and answer.text.endswith("}]")
    assert [r["outputs"][0]["text"] for r in answer.json()] == ["one", "two"]


def test_rest_writes_an_error_after_the_first_response_as_the_last_element() -> None:
    async def fails(request: Any, caller: Caller) -> AsyncIterator[Response]:
        yield _outputs("one")[0]
        raise ServiceError(Code.UNAVAILABLE, "the agent broke", "AGENT_FAILED")

    answer = _rest_stream(fails)
    assert answer.status_code == 200
    first, last = answer.json()
    assert first["outputs"][0]["text"] == "one"
    assert (last["error"]["code"], last["error"]["status"]) == (503, "UNAVAILABLE")
    assert last["error"]["details"][0]["reason"] == "AGENT_FAILED"


def test_rest_answers_an_error_before_the_first_response_as_usual() -> None:
    async def refuses(request: Any, caller: Caller) -> AsyncIterator[Response]:
        raise ServiceError.invalid_argument("inputs: no")
        yield  # an async generator

    answer = _rest_stream(refuses)
    assert answer.status_code == 400
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_rest_answers_an_empty_stream_with_an_empty_array() -> None:
    async def empty(request: Any, caller: Caller) -> AsyncIterator[Response]:
        return
        yield  # an async generator

    answer = _rest_stream(empty)
    assert (answer.status_code, answer.json()) == (200, [])


def test_rest_refuses_a_wrong_verb_on_a_foreign_stream_as_a_foreign_resource() -> None:
    """A stream's route on another project's session, even with a wrong verb, is 403 (as for
    every other route), never 405 that would tell the route exists."""

    async def never(request: Any, caller: Caller) -> AsyncIterator[Response]:
        raise AssertionError("not called")
        yield  # an async generator

    tokens = Tokens.parse({"tokens": [{"name": "bob", "token": BOB, "projects": ["q"]}]})

    async def scenario() -> httpx.Response:
        transcoder = Transcoder(
            Router(schema.http_bindings()),
            {},
            Boundary("rest", tokens=tokens),
            streams={STREAM: never},
        )
        transport = httpx.ASGITransport(app=BodyLimit(transcoder))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(
                "PUT",
                f"/v1beta/{SESSION}:streamRunSession",
                headers={"Authorization": f"Bearer {BOB}"},
            )

    answer: httpx.Response = _run(scenario())
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["details"][0]["reason"] == "IAM_PERMISSION_DENIED"


# -- gRPC's streams --------------------------------------------------------------------------------


def test_grpc_serves_server_and_bidirectional_streams_and_the_drain_says_goodbye() -> None:
    async def streamed(request: Any, caller: Caller) -> AsyncIterator[Response]:
        for response in _outputs("one", "two"):
            yield response

    async def echoed(requests: AsyncIterator[Any], caller: Caller) -> AsyncIterator[ServerMessage]:
        try:
            async for message in requests:
                text = message.realtime_input.text
                yield ServerMessage(session_output={"text": text})
        except Draining:
            yield ServerMessage(go_away={})

    async def scenario() -> tuple[list[str], list[str], str]:
        draining = asyncio.Event()
        dispatcher = Dispatcher(
            {}, streams={STREAM: streamed}, bidi={BIDI: echoed}, draining=draining
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((dispatcher,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stream = channel.unary_stream(
                    STREAM,
                    request_serializer=Request.SerializeToString,
                    response_deserializer=Response.FromString,
                )
                texts = [r.outputs[0].text async for r in stream(Request())]
                bidi = channel.stream_stream(
                    BIDI,
                    request_serializer=ClientMessage.SerializeToString,
                    response_deserializer=ServerMessage.FromString,
                )
                call = bidi()
                await call.write(ClientMessage(realtime_input={"text": "hello"}))
                echoed_texts = [(await call.read()).session_output.text]
                dispatcher.drain()
                last = await call.read()
                kinds = [last.WhichOneof("message_type")]
                code = await call.code()
        finally:
            await server.stop(None)
        return texts, echoed_texts + kinds, str(code)

    texts, bidi, code = _run(scenario())
    assert texts == ["one", "two"]
    assert bidi == ["hello", "go_away"]
    assert code == "StatusCode.OK"


def test_an_idle_bidirectional_stream_is_told_go_away_and_closed() -> None:
    """A client that sends nothing for the stream's idle bound frees its slot: the RPC is told
    (Draining) as on a drain, says goodbye, and the stream ends."""

    async def waits(requests: AsyncIterator[Any], caller: Caller) -> AsyncIterator[ServerMessage]:
        try:
            async for _ in requests:
                yield ServerMessage(session_output={"text": "heard"})
        except Draining:
            yield ServerMessage(go_away={})

    async def scenario() -> tuple[list[str], str, int]:
        boundary = Boundary("grpc", admission=Admission("grpc", 1))
        dispatcher = Dispatcher({}, boundary=boundary, bidi={BIDI: waits}, stream_idle=0.05)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((dispatcher,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                bidi = channel.stream_stream(
                    BIDI,
                    request_serializer=ClientMessage.SerializeToString,
                    response_deserializer=ServerMessage.FromString,
                )
                call = bidi()
                await call.write(ClientMessage(realtime_input={"text": "hello"}))
                kinds = [str((await call.read()).WhichOneof("message_type"))]
                kinds.append(str((await call.read()).WhichOneof("message_type")))
                code = str(await call.code())
        finally:
            await server.stop(None)
        assert boundary.admission is not None
        return kinds, code, boundary.admission.in_flight

    assert _run(scenario()) == (["session_output", "go_away"], "StatusCode.OK", 0)


# -- the stand-in ----------------------------------------------------------------------------------


def _golden(user: str, *, tool: str = "", answer: str = "") -> evaluation_pb2.Evaluation:
    steps: list[dict[str, Any]] = [{"user_input": {"text": user}}]
    if tool:
        steps.append({"expectation": {"tool_call": {"id": "c", "tool": tool, "args": {"n": 1}}}})
    if answer:
        steps.append(
            {"expectation": {"agent_response": {"role": "agent", "chunks": [{"text": answer}]}}}
        )
    evaluation = evaluation_pb2.Evaluation(display_name=user)
    json_format.ParseDict({"golden": {"turns": [{"steps": steps}]}}, evaluation)
    return evaluation


def _asked(stand_in: StandIn, *inputs: dict[str, Any]) -> list[dict[str, Any]]:
    request = json_format.ParseDict({"inputs": list(inputs)}, Request())
    return [json_format.MessageToDict(o) for o in stand_in.answer(request).outputs]


def test_the_stand_in_answers_a_golden_turn_its_calls_and_answer() -> None:
    stand_in = StandIn.of(
        [
            _golden("Where is my order?", tool=f"{APP}/tools/status", answer="It has shipped."),
            _golden("where is my order?", answer="Not this one: the first golden wins."),
            _golden("Hello", answer="Hi!"),
        ]
    )
    calls, text = _asked(stand_in, {"text": "  WHERE is my\norder? "})
    assert calls["toolCalls"]["toolCalls"][0]["tool"] == f"{APP}/tools/status"
    assert text == {"text": "It has shipped."}
    assert _asked(stand_in, {"text": "hello"}) == [{"text": "Hi!"}]
    assert _asked(stand_in, {"text": "something else"}) == [{"text": FALLBACK_ANSWER}]
    # A turn without text (a tool's response) ends the turn without output.
    assert _asked(stand_in, {"toolResponses": {"toolResponses": [{"id": "c"}]}}) == [{}]


def test_a_scenario_evaluation_teaches_the_stand_in_nothing() -> None:
    scenario = evaluation_pb2.Evaluation(display_name="s", scenario={"task": "Hello"})
    assert _asked(StandIn.of([scenario]), {"text": "Hello"}) == [{"text": FALLBACK_ANSWER}]


# -- the core's turns ------------------------------------------------------------------------------


class _Core:
    def __init__(self, path: Path, *, shared: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.path = path
        self.storage = SqliteStorage(path, shared=shared)
        self.run(self.storage.open())
        self.core = Core(self.storage, pages.PageTokens(self.run(self.storage.secret())))

    def run(self, awaitable: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(awaitable)

    def turn(self, text: str = "hi", **config: Any) -> Response:
        request = json_format.ParseDict(
            {"config": {"session": SESSION, **config}, "inputs": [{"text": text}]}, Request()
        )
        return self.run(self.core.handler(RUN)(request, ME))

    def refusal(self, **config: Any) -> ServiceError:
        with pytest.raises(ServiceError) as raised:
            self.turn(**config)
        return raised.value

    def close(self) -> None:
        self.run(self.core.context.runner.shutdown())
        self.run(self.storage.close())
        self.loop.close()


@pytest.fixture
def core(tmp_path: Path) -> Iterator[_Core]:
    harness = _Core(tmp_path / "sessions.db")
    try:
        yield harness
    finally:
        harness.close()


def test_turns_are_recorded_and_continued_in_one_live_conversation(core: _Core) -> None:
    first = core.turn("hello", time_zone="America/New_York")
    assert first.outputs[0].text == FALLBACK_ANSWER
    assert (first.outputs[-1].turn_index, first.outputs[-1].turn_completed) == (1, True)
    assert core.turn("again").outputs[0].turn_index == 2
    stored = core.run(core.storage.get_row(tables.CONVERSATIONS, f"{APP}/conversations/s1"))
    assert stored.source == conversation_pb2.Conversation.LIVE
    assert stored.turn_count == 2
    assert [t.messages[0].chunks[0].text for t in stored.turns] == ["hello", "again"]
    assert [m.role for m in stored.turns[0].messages] == ["user", "agent"]
    assert stored.turns[1].messages[0].event_time.ToNanoseconds() >= (
        stored.turns[0].messages[1].event_time.ToNanoseconds()
    )


def test_a_full_conversation_refuses_the_next_turn_and_keeps_what_it_holds(core: _Core) -> None:
    conversation = conversation_pb2.Conversation(name=f"{APP}/conversations/s1")
    for _ in range(limits.MAX_REPEATED):
        conversation.turns.add().messages.add(role="user", chunks=[content_pb2.Chunk(text="x")])
    core.run(core.storage.insert_row(tables.CONVERSATIONS, conversation))
    refused = core.refusal()
    assert (refused.code, refused.reason) == (Code.FAILED_PRECONDITION, "TOO_LARGE")
    stored = core.run(core.storage.get_row(tables.CONVERSATIONS, conversation.name))
    assert len(stored.turns) == limits.MAX_REPEATED


def test_a_conversations_write_is_conditional_on_the_version_it_read(core: _Core) -> None:
    """A Conversation has no etag: its row's version is a digest of what is stored, so a
    write over a stale read is refused (the session's append then reads and appends again)."""
    core.turn("first")
    name = f"{APP}/conversations/s1"
    stale = core.run(core.storage.get_row(tables.CONVERSATIONS, name))
    core.turn("second")  # meanwhile, another turn of the session
    stale.turns.add().messages.add(role="user", chunks=[content_pb2.Chunk(text="lost?")])
    with pytest.raises(EtagMismatch):
        core.run(
            core.storage.replace_row(
                tables.CONVERSATIONS, stale, tables.CONVERSATIONS.version(stale)
            )
        )
    fresh = core.run(core.storage.get_row(tables.CONVERSATIONS, name))
    assert [t.messages[0].chunks[0].text for t in fresh.turns] == ["first", "second"]


def test_turns_played_at_once_by_two_processes_are_all_recorded(tmp_path: Path) -> None:
    """Two cores on one database (as --workers or replicas): every turn of the session they
    play at once is in its conversation, none written over."""
    # As the workers of one --workers group: the first holds the file (as their supervisor).
    cores = [_Core(tmp_path / "shared.db"), _Core(tmp_path / "shared.db", shared=True)]
    each = 15
    try:

        def play(core: _Core, label: str) -> None:
            for index in range(each):
                core.turn(f"{label} {index}")

        threads = [
            threading.Thread(target=play, args=(core, label))
            for core, label in zip(cores, "ab", strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        stored = cores[0].run(
            cores[0].storage.get_row(tables.CONVERSATIONS, f"{APP}/conversations/s1")
        )
        said = sorted(t.messages[0].chunks[0].text for t in stored.turns)
        assert said == sorted(f"{label} {index}" for label in "ab" for index in range(each))
        assert stored.turn_count == 2 * each
    finally:
        for core in cores:
            core.close()


def test_a_conversation_stored_before_versions_is_continued(core: _Core) -> None:
    """A row written before conversations were versioned holds "" as its version."""
    core.turn("before")
    name = f"{APP}/conversations/s1"
    with sqlite3.connect(core.path) as database:
        database.execute("UPDATE conversations SET etag = '' WHERE name = ?", (name,))
    core.turn("after")
    stored = core.run(core.storage.get_row(tables.CONVERSATIONS, name))
    assert [t.messages[0].chunks[0].text for t in stored.turns] == ["before", "after"]


@pytest.mark.parametrize(
    ("config", "code", "field"),
    [
        ({"timeZone": "Not/A_Zone"}, Code.INVALID_ARGUMENT, "config.time_zone"),
        ({"timeZone": "../../etc/passwd"}, Code.INVALID_ARGUMENT, "config.time_zone"),
        ({"entryAgent": f"{APP}/agents/none"}, Code.NOT_FOUND, ""),
        (
            {"entryAgent": "projects/p/locations/l/apps/b/agents/x"},
            Code.INVALID_ARGUMENT,
            "config.entry_agent",
        ),
        ({"deployment": f"{APP}/deployments/none"}, Code.NOT_FOUND, ""),
        ({"inputAudioConfig": {}}, Code.INVALID_ARGUMENT, "config.input_audio_config"),
    ],
)
def test_the_session_config_is_checked(
    core: _Core, config: dict[str, Any], code: Code, field: str
) -> None:
    refused = core.refusal(**config)
    assert refused.code is code
    assert [v.field for v in refused.violations] == ([field] if field else [])


def test_streaming_handlers_are_kept_apart_from_the_unary_ones(core: _Core) -> None:
    assert RUN in handlers(core.core)
    assert STREAM not in handlers(core.core) and BIDI not in handlers(core.core)
    assert set(stream_handlers(core.core)) == {STREAM}
    assert set(bidi_handlers(core.core)) == {BIDI}


def test_a_bidirectional_session_needs_its_config_first(core: _Core) -> None:
    async def messages() -> AsyncIterator[ClientMessage]:
        yield ClientMessage(realtime_input={"text": "hello"})

    async def scenario() -> ServiceError:
        with pytest.raises(ServiceError) as raised:
            async for _ in core.core.bidi_handler(BIDI)(messages(), ME):
                pass
        return raised.value

    refused = core.run(scenario())
    assert [v.field for v in refused.violations] == ["config"]


def test_a_bidirectional_session_plays_a_turn_once_its_input_is_complete(core: _Core) -> None:
    async def messages() -> AsyncIterator[ClientMessage]:
        yield ClientMessage(config={"session": SESSION})
        yield ClientMessage(realtime_input={"text": "one", "will_continue": True})
        yield ClientMessage(realtime_input={"text": "two"})
        raise Draining

    async def scenario() -> list[str]:
        return [
            m.WhichOneof("message_type") async for m in core.core.bidi_handler(BIDI)(messages(), ME)
        ]

    assert core.run(scenario()) == ["session_output", "go_away"]
    stored = core.run(core.storage.get_row(tables.CONVERSATIONS, f"{APP}/conversations/s1"))
    assert [c.text for c in stored.turns[0].messages[0].chunks] == ["one", "two"]


# -- chat tokens and the streams' authorization ----------------------------------------------------


def test_a_chat_token_names_its_session_until_it_expires() -> None:
    tokens = ChatTokens(b"secret of the database")
    issued = tokens.issue(SESSION, f"{APP}/deployments/web")
    principal = tokens.principal(issued.token)
    assert principal is not None and principal.session == SESSION
    assert principal.deployment == f"{APP}/deployments/web"
    assert principal.projects == frozenset({"p"}) and issued.expires > time.time()
    assert ChatTokens(b"another database").principal(issued.token) is None
    head, _, signature = issued.token.split(".")
    forged = json.dumps({"s": f"{APP}/sessions/other", "e": issued.expires}).encode()
    forged_text = base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    assert tokens.principal(f"{head}.{forged_text}.{signature}") is None
    assert tokens.principal(tokens.issue(SESSION, "", seconds=-1).token) is None
    assert tokens.principal("not a token") is None


def test_a_chat_tokens_principal_reaches_its_sessions_methods_alone() -> None:
    methods = schema.methods()
    principal = Principal("chat", frozenset({"p"}), writable=True, session=SESSION)
    mine = Request(config={"session": SESSION})
    authorize(principal, methods[RUN], mine)
    authorize(principal, methods[BIDI], ClientMessage(config={"session": SESSION}))
    other = Request(config={"session": f"{APP}/sessions/other"})
    get = methods["/google.cloud.ces.v1beta.AgentService/GetConversation"]
    read = agent_service_pb2.GetConversationRequest(name=f"{APP}/conversations/s1")
    for method, request in ((methods[RUN], other), (get, read)):
        with pytest.raises(ServiceError) as raised:
            authorize(principal, method, request)
        assert raised.value.reason == "IAM_PERMISSION_DENIED"


def test_bidi_run_session_is_authorized_on_its_configs_session_and_writes() -> None:
    access = method_access(schema.methods()[BIDI])
    assert access == type(access)(fields=(("config", "session"),), write=True)
    assert isinstance(session_service.RPCS["BidiRunSession"], BidiStreaming)
