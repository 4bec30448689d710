"""SessionService and WidgetService driven by Google's official Python client (docs/sessions.md):
sessions played against the test agent (tests/support/agent.py) and against the stand-in of an
app's goldens, recorded as conversations read back through AgentService; streamed sessions
(gRPC and REST), a bidirectional session (gRPC), a continued session, and the refusals.

The command line, the wiring and the reports are harness.py's; its arguments: ``play APP``
(APP's agent endpoint is the test agent's ``/agent``; the stand-in's app is ``APP-standin``),
or ``tokens HOST_TOKEN SESSION_APP`` against a server with ``--auth-tokens``.
"""

from __future__ import annotations

import sys
from typing import Any

import grpc
from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.agent_service.transports import AgentServiceGrpcTransport
from google.cloud.ces_v1beta.services.session_service.transports import (
    SessionServiceGrpcTransport,
)
from google.cloud.ces_v1beta.services.widget_service.transports import WidgetServiceGrpcTransport
from google.oauth2.credentials import Credentials
from google.protobuf import struct_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import main, official_client, refused, step  # type: ignore[import-not-found]

Client = ces_v1beta.BidiSessionClientMessage
FALLBACK_START = "ces-eval's stand-in agent has no answer for this"


def _texts(outputs: Any) -> list[str]:
    return [o.text for o in outputs if o.text]


def _run(sessions: Any, session: str, *inputs: dict[str, Any], **config: Any) -> Any:
    return sessions.run_session(
        request={"config": {"session": session, **config}, "inputs": list(inputs)}
    )


def _violation(error: dict[str, Any]) -> list[str]:
    fields: list[str] = error["violations"]
    return fields


def play(wired: Any, app: str) -> None:
    transport, target = wired.transport, sys.argv[2]
    channel = grpc.insecure_channel(target) if transport == "grpc" else None
    sessions = official_client(transport, target, channel, "SessionService")
    agents = wired.agents
    bad_request = exceptions.InvalidArgument if transport == "grpc" else exceptions.BadRequest

    # A session against the agent: a tool call asked, answered, then the agent's text.
    first = f"{app}/sessions/s1"
    earlier = {"role": "user", "chunks": [{"text": "Hi, I am in France."}]}
    asked = _run(
        sessions,
        first,
        {"text": "What is the weather in Paris?"},
        time_zone="Europe/Paris",
        use_tool_fakes=True,
        historical_contexts=[earlier],
    )
    [output] = asked.outputs
    [call] = output.tool_calls.tool_calls
    assert call.tool == f"{app}/tools/get_weather" and call.args["city"] == "Paris", call
    assert (output.turn_index, output.turn_completed) == (1, True), output
    response = struct_pb2.Struct()
    response.update({"city": "Paris", "temperature": 21})
    answered = _run(
        sessions,
        first,
        {
            "tool_responses": {
                "tool_responses": [{"id": call.id, "tool": call.tool, "response": response}]
            }
        },
    )
    assert _texts(answered.outputs) == ["It is 21 degrees in Paris."], answered
    assert answered.outputs[-1].turn_index == 2
    conversation = agents.get_conversation(name=f"{app}/conversations/s1")
    assert conversation.source == ces_v1beta.Conversation.Source.LIVE, conversation.source
    assert conversation.turn_count == 2 and len(conversation.turns) == 2
    user, agent = conversation.turns[0].messages
    assert (user.role, user.chunks[0].text) == ("user", "What is the weather in Paris?")
    assert agent.role == "agent" and agent.chunks[0].tool_call.tool == call.tool
    second_user, second_agent = conversation.turns[1].messages
    assert second_user.chunks[0].tool_response.id == call.id
    assert second_agent.chunks[0].text == "It is 21 degrees in Paris."
    assert conversation.start_time <= user.event_time <= agent.event_time <= conversation.end_time
    step("agent", turns=conversation.turn_count, tool=call.tool, text=second_agent.chunks[0].text)

    # The same session continued: a third turn appended to the same conversation.
    again = _run(sessions, first, {"text": "hello"})
    assert _texts(again.outputs) == ["Hello! Ask me about the weather."]
    assert again.outputs[-1].turn_index == 3
    continued = agents.get_conversation(name=f"{app}/conversations/s1")
    assert continued.turn_count == 3 and continued.start_time == conversation.start_time
    step("continued", turns=continued.turn_count)

    # A streamed session: each output a response of its own.
    streamed = list(
        sessions.stream_run_session(
            request={"config": {"session": f"{app}/sessions/s2"}, "inputs": [{"text": "goodbye"}]}
        )
    )
    kinds = [r.outputs[0]._pb.WhichOneof("output_type") for r in streamed]
    assert kinds == ["text", "end_session"], kinds
    assert [len(r.outputs) for r in streamed] == [1, 1]
    assert streamed[0].outputs[0].text == "Goodbye!" and streamed[-1].outputs[0].turn_completed
    assert agents.get_conversation(name=f"{app}/conversations/s2").turn_count == 1
    step("stream", kinds=kinds)

    # An agent and a deployment of the app are named, checked and recorded.
    agents.create_agent(parent=app, agent_id="root", agent=ces_v1beta.Agent(display_name="Root"))
    deployment = agents.create_deployment(
        parent=app,
        deployment_id="web",
        deployment=ces_v1beta.Deployment(
            display_name="Web", channel_profile=ces_v1beta.ChannelProfile(channel_type=2)
        ),
    )
    _run(
        sessions,
        f"{app}/sessions/s3",
        {"text": "hi"},
        entry_agent=f"{app}/agents/root",
        deployment=deployment.name,
    )
    named = agents.get_conversation(name=f"{app}/conversations/s3")
    assert named.entry_agent == f"{app}/agents/root" and named.deployment == deployment.name
    step("config", entry_agent=named.entry_agent, deployment=named.deployment)

    refusals = {
        "time_zone": refused(
            lambda: _run(sessions, first, {"text": "x"}, time_zone="Mars/Olympus"), bad_request
        ),
        "audio": refused(lambda: _run(sessions, first, {"audio": b"\x00\x01"}), bad_request),
        "streamed_audio": refused(
            lambda: list(
                sessions.stream_run_session(
                    request={"config": {"session": first}, "inputs": [{"audio": b"\x00"}]}
                )
            ),
            bad_request,
        ),
        "no_inputs": refused(lambda: _run(sessions, first), bad_request),
        "session_id": refused(
            lambda: _run(sessions, f"{app}/sessions/Not_An_Id", {"text": "x"}), bad_request
        ),
        "entry_agent": refused(
            lambda: _run(sessions, first, {"text": "x"}, entry_agent=f"{app}/agents/none"),
            exceptions.NotFound,
        ),
        "deployment": refused(
            lambda: _run(sessions, first, {"text": "x"}, deployment=f"{app}/deployments/none"),
            exceptions.NotFound,
        ),
    }
    step(
        "refusals",
        **{name: {"reason": r["reason"], "fields": _violation(r)} for name, r in refusals.items()},
    )

    # The stand-in: an app without an agent endpoint answers from its goldens.
    standin = f"{app}-standin"
    args = struct_pb2.Struct()
    args.update({"order": 42})
    wired.client.create_evaluation(
        parent=standin,
        evaluation=ces_v1beta.Evaluation(
            display_name="Order status",
            golden=ces_v1beta.Evaluation.Golden(
                turns=[
                    ces_v1beta.Evaluation.GoldenTurn(
                        steps=[
                            {"user_input": {"text": "Where is my order?"}},
                            {
                                "expectation": {
                                    "tool_call": {
                                        "id": "c1",
                                        "tool": f"{standin}/tools/status",
                                        "args": args,
                                    }
                                }
                            },
                            {
                                "expectation": {
                                    "agent_response": {
                                        "role": "agent",
                                        "chunks": [{"text": "It has shipped."}],
                                    }
                                }
                            },
                        ]
                    )
                ]
            ),
        ),
    )
    matched = _run(sessions, f"{standin}/sessions/s1", {"text": "  where is my ORDER? "})
    assert matched.outputs[0].tool_calls.tool_calls[0].args["order"] == 42, matched
    assert _texts(matched.outputs) == ["It has shipped."], matched
    other = _run(sessions, f"{standin}/sessions/s1", {"text": "Something else"})
    assert _texts(other.outputs)[0].startswith(FALLBACK_START), other
    assert agents.get_conversation(name=f"{standin}/conversations/s1").turn_count == 2
    step("stand_in", matched=_texts(matched.outputs), fallback=_texts(other.outputs)[0][:40])

    if transport == "grpc":
        bidi(sessions, agents, app)


def bidi(sessions: Any, agents: Any, app: str) -> None:
    session = f"{app}/sessions/b1"

    def messages() -> Any:
        yield Client(config={"session": session})
        yield Client(realtime_input={"text": "hello,", "will_continue": True})
        yield Client(realtime_input={"text": "and goodbye"})

    received = list(sessions.bidi_run_session(requests=messages()))
    kinds = [m._pb.WhichOneof("message_type") for m in received]
    assert kinds == ["session_output", "session_output", "end_session"], kinds
    assert received[0].session_output.text == "Goodbye!"
    recorded = agents.get_conversation(name=f"{app}/conversations/b1")
    [turn] = recorded.turns
    assert [c.text for c in turn.messages[0].chunks] == ["hello,", "and goodbye"]

    def config_last() -> Any:
        yield Client(realtime_input={"text": "hello"})

    first = refused(
        lambda: list(sessions.bidi_run_session(requests=config_last())),
        exceptions.InvalidArgument,
    )

    def audio() -> Any:
        yield Client(config={"session": session})
        yield Client(realtime_input={"audio": b"\x00\x01"})

    spoken = refused(
        lambda: list(sessions.bidi_run_session(requests=audio())), exceptions.InvalidArgument
    )
    step(
        "bidi",
        kinds=kinds,
        turns=len(recorded.turns),
        config_first=_violation(first),
        audio=_violation(spoken),
    )


def tokens(wired: Any, owner: str, stranger: str, app: str) -> None:
    """Chat tokens: GenerateChatToken with the owner's token; the chat token then plays its
    session and nothing else. Over gRPC, BidiRunSession is authorized on its first message's
    ``config.session``: the owner's token plays it, another project's token is refused."""
    transport, target = wired.transport, sys.argv[2]
    agents = _clients(transport, target, owner, "AgentService")
    deployment = agents.create_deployment(
        parent=app,
        deployment_id=f"web-{transport}",
        deployment=ces_v1beta.Deployment(
            display_name=f"Web {transport}",
            channel_profile=ces_v1beta.ChannelProfile(channel_type=2),
        ),
    )
    session = f"{app}/sessions/chat-{transport}"
    widgets = _clients(transport, target, owner, "WidgetService")
    issued = widgets.generate_chat_token(request={"name": session, "deployment": deployment.name})
    assert issued.chat_token and issued.expire_time.timestamp() > 0
    chat = _clients(transport, target, issued.chat_token)
    played = _run(chat, session, {"text": "hello"})
    assert _texts(played.outputs), played
    denied = exceptions.PermissionDenied if transport == "grpc" else exceptions.Forbidden
    other = refused(lambda: _run(chat, f"{app}/sessions/other", {"text": "hello"}), denied)
    recorded = agents.get_conversation(name=f"{app}/conversations/chat-{transport}")
    assert recorded.deployment == deployment.name, recorded.deployment  # the token's
    elsewhere = refused(
        lambda: _run(chat, session, {"text": "hi"}, deployment=f"{app}/deployments/other"),
        denied,
    )
    chat_agents = _clients(transport, target, issued.chat_token, "AgentService")
    read = refused(
        lambda: chat_agents.get_conversation(name=f"{app}/conversations/chat-{transport}"), denied
    )
    bidi_reasons: dict[str, str] = {}
    if transport == "grpc":

        def messages() -> Any:
            yield Client(config={"session": f"{app}/sessions/bidi"})
            yield Client(realtime_input={"text": "hello"})

        owned_bidi = list(_clients(transport, target, owner).bidi_run_session(requests=messages()))
        assert owned_bidi[0].session_output.text, owned_bidi
        foreign = _clients(transport, target, stranger)
        bidi_reasons["stranger"] = refused(
            lambda: list(foreign.bidi_run_session(requests=messages())), denied
        )["reason"]
        bidi_reasons["chat_token"] = refused(
            lambda: list(chat.bidi_run_session(requests=messages())), denied
        )["reason"]
    step(
        "tokens",
        played=_texts(played.outputs),
        other_session=other["reason"],
        other_method=read["reason"],
        other_deployment=elsewhere["reason"],
        bidi=bidi_reasons,
    )


def _clients(transport: str, target: str, token: str, service: str = "SessionService") -> Any:
    """The official client of ``service`` sending ``token`` (docs/security.md's wiring)."""
    client_class = getattr(ces_v1beta, f"{service}Client")
    if transport == "grpc":
        grpc_class = {
            "SessionService": SessionServiceGrpcTransport,
            "WidgetService": WidgetServiceGrpcTransport,
            "AgentService": AgentServiceGrpcTransport,
        }[service]
        return client_class(
            transport=grpc_class(
                host=target,
                credentials=Credentials(token),
                ssl_channel_credentials=grpc.local_channel_credentials(),
            )
        )
    return client_class(
        transport="rest", credentials=Credentials(token), client_options={"api_endpoint": target}
    )


if __name__ == "__main__":
    main(lambda wired, mode, *rest: play(wired, *rest) if mode == "play" else tokens(wired, *rest))
