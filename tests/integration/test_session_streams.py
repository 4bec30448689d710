"""Session streams against the real server (docs/sessions.md, "Streams"): a stream holds one
in-flight slot while it lasts and gives it back when its client cancels it (gRPC) or goes away
(REST), and a server that drains (SIGTERM) says ``go_away`` on an open BidiRunSession before it
closes the stream."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from ces_eval.generated.google.cloud.ces.v1beta import session_service_pb2
from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import Agent

APP = "projects/streams/locations/us/apps/a"
STREAM = "/google.cloud.ces.v1beta.SessionService/StreamRunSession"
RUN = "/google.cloud.ces.v1beta.SessionService/RunSession"
BIDI = "/google.cloud.ces.v1beta.SessionService/BidiRunSession"
Request = session_service_pb2.RunSessionRequest
Response = session_service_pb2.RunSessionResponse
ClientMessage = session_service_pb2.BidiSessionClientMessage
ServerMessage = session_service_pb2.BidiSessionServerMessage


@pytest.fixture(scope="module")
def strained(tmp_path_factory: pytest.TempPathFactory, agent: Agent) -> Iterator[RunningServer]:
    """A server admitting one call at a time per surface, whose app talks to the test agent;
    a text saying "wait" keeps the agent thinking far longer than the tests wait for a slot,
    so a slot found free was given back by the cancel, not by the turn's end."""
    folder = tmp_path_factory.mktemp("strained")
    running = start_server(folder / "db.sqlite", "--max-concurrent-requests", "1")
    slow, agent.slow = agent.slow, 600.0
    try:
        Emulator(running.http_base).set_agent(APP, f"{agent.url}/agent")
        yield running
    finally:
        agent.slow = slow
        running.kill()


def _request(session: str, text: str) -> Request:
    return Request(config={"session": f"{APP}/sessions/{session}"}, inputs=[{"text": text}])


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (a state another process reaches), failing after many tries."""
    for _ in range(500):
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


def _sent(agent: Agent, session: str) -> bool:
    return any(r["session"] == f"{APP}/sessions/{session}" for r in agent.requests)


def _grpc_run(channel: grpc.Channel, session: str) -> grpc.StatusCode:
    run = channel.unary_unary(
        RUN, request_serializer=Request.SerializeToString, response_deserializer=Response.FromString
    )
    try:
        run(_request(session, "hello"), timeout=30)
    except grpc.RpcError as error:
        return error.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_a_grpc_stream_holds_its_slot_until_cancelled(
    strained: RunningServer, agent: Agent
) -> None:
    with grpc.insecure_channel(strained.grpc_target) as channel:
        stream = channel.unary_stream(
            STREAM,
            request_serializer=Request.SerializeToString,
            response_deserializer=Response.FromString,
        )
        call = stream(_request("held-grpc", "please wait"), timeout=60)
        _until(lambda: _sent(agent, "held-grpc"), "the agent was called")
        assert _grpc_run(channel, "other-grpc") is grpc.StatusCode.RESOURCE_EXHAUSTED
        call.cancel()
        _until(lambda: _grpc_run(channel, "after-grpc") is grpc.StatusCode.OK, "the slot is free")


def test_a_rest_stream_holds_its_slot_until_its_client_goes(
    strained: RunningServer, agent: Agent
) -> None:
    url = f"{strained.http_base}/v1beta/{APP}/sessions/%s:%s"
    body = json.dumps(
        {"config": {"session": f"{APP}/sessions/held-rest"}, "inputs": [{"text": "wait"}]}
    ).encode()
    host, port = strained.http_base.removeprefix("http://").split(":")
    # A raw connection: the answer's head comes with its first element, after the agent's
    # answer, and the client must go away before that.
    with socket.create_connection((host, int(port)), timeout=30) as held:
        held.sendall(
            f"POST /v1beta/{APP}/sessions/held-rest:streamRunSession HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        _until(lambda: _sent(agent, "held-rest"), "the agent was called")
        with httpx.Client(timeout=60) as http:
            other = {"config": {"session": f"{APP}/sessions/other"}, "inputs": [{"text": "hi"}]}
            refused = http.post(url % ("other", "runSession"), json=other)
            assert refused.status_code == 429, refused.text
    # The connection is closed: the client went away while the agent still thinks.

    def free() -> bool:
        after = {"config": {"session": f"{APP}/sessions/after"}, "inputs": [{"text": "hi"}]}
        with httpx.Client(timeout=60) as http:
            return http.post(url % ("after", "runSession"), json=after).status_code == 200

    _until(free, "the slot is free")


def test_a_draining_server_says_go_away_on_an_open_bidi_stream(
    tmp_path: Path, agent: Agent
) -> None:
    running = start_server(tmp_path / "db.sqlite")
    try:
        Emulator(running.http_base).set_agent(APP, f"{agent.url}/agent")
        received: list[str] = []
        ended: list[grpc.StatusCode] = []
        said = threading.Event()
        done = threading.Event()

        def messages() -> Iterator[ClientMessage]:
            yield ClientMessage(config={"session": f"{APP}/sessions/drained"})
            yield ClientMessage(realtime_input={"text": "hello"})
            done.wait(60)  # the client keeps its side open until the stream ends

        with grpc.insecure_channel(running.grpc_target) as channel:
            bidi = channel.stream_stream(
                BIDI,
                request_serializer=ClientMessage.SerializeToString,
                response_deserializer=ServerMessage.FromString,
            )
            call = bidi(messages(), timeout=60)

            def read() -> None:
                try:
                    for message in call:
                        received.append(str(message.WhichOneof("message_type")))
                        said.set()
                    ended.append(grpc.StatusCode.OK)
                except grpc.RpcError as error:
                    ended.append(error.code())
                finally:
                    done.set()

            reader = threading.Thread(target=read)
            reader.start()
            assert said.wait(30), "the first turn was never answered"
            running.process.send_signal(signal.SIGTERM)
            reader.join(60)
        assert running.process.wait(timeout=60) == 0
        assert received == ["session_output", "go_away"], received
        assert ended == [grpc.StatusCode.OK]
    finally:
        running.kill()
