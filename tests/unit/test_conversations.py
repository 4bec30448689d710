"""The conversion of a conversation into an evaluation (ces_eval.core.resources.conversations):
every chunk kind of a user and of an agent message, turns, the deprecated flat messages, the
scenario read off the golden, display names, and what a conversation without content gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.longrunning import operations_pb2
from google.protobuf import struct_pb2

from ces_eval.core.aip.validation import evaluation_violations
from ces_eval.core.resources import conversations
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    content_pb2,
    conversation_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import Harness

APP = "projects/p/locations/l/apps/a"
NAME = f"{APP}/conversations/c1"
Conversation = conversation_pb2.Conversation
Chunk = content_pb2.Chunk
Message = content_pb2.Message
SCENARIO = service_pb2.GenerateEvaluationRequest.EvaluationType.SCENARIO


def _struct(**values: object) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _call(call_id: str = "k1", tool: str = "status", **args: object) -> content_pb2.ToolCall:
    return content_pb2.ToolCall(id=call_id, tool=f"{APP}/tools/{tool}", args=_struct(**args))


def _response(
    call_id: str = "k1", tool: str = "status", **values: object
) -> content_pb2.ToolResponse:
    return content_pb2.ToolResponse(
        id=call_id, tool=f"{APP}/tools/{tool}", response=_struct(**values)
    )


def _of(*messages: Message) -> Conversation:
    return Conversation(name=NAME, turns=[Conversation.Turn(messages=messages)])


def _steps(conversation: Conversation) -> list[tuple[str, str]]:
    """Each step of the golden as (step kind, its user input kind or expectation condition)."""
    found = []
    for turn in conversations.golden_of(conversation).turns:
        for step in turn.steps:
            kind = step.WhichOneof("step")
            inner = step.user_input.WhichOneof("input_type") if kind == "user_input" else ""
            if kind == "expectation":
                inner = step.expectation.WhichOneof("condition")
            found.append((kind, inner))
    return found


def test_user_chunks_become_user_inputs() -> None:
    image = content_pb2.Image(mime_type="image/png", data=b"\x89PNG")
    blob = content_pb2.Blob(mime_type="application/pdf", data=b"%PDF")
    user = Message(
        role="USER",
        chunks=[
            Chunk(text="hello"),
            Chunk(transcript="spoken"),
            Chunk(blob=blob),
            Chunk(image=image),
            Chunk(tool_response=_response(status="ok")),
            Chunk(updated_variables=_struct(x=1)),
            Chunk(default_variables=_struct(y=2)),
            Chunk(payload=_struct(ignored=True)),  # no session input holds a payload
        ],
    )
    golden = conversations.golden_of(_of(user))
    steps = golden.turns[0].steps
    assert [s.user_input.WhichOneof("input_type") for s in steps] == [
        "text",
        "text",
        "blob",
        "image",
        "tool_responses",
        "variables",
        "variables",
    ]
    assert steps[1].user_input.text == "spoken"
    assert steps[2].user_input.blob == blob and steps[3].user_input.image == image
    assert steps[4].user_input.tool_responses.tool_responses[0].response["status"] == "ok"
    assert steps[6].user_input.variables["y"] == 2


def test_agent_chunks_become_expectations_in_order() -> None:
    transfer = content_pb2.AgentTransfer(target_agent=f"{APP}/agents/billing")
    agent = Message(
        role="agent",
        chunks=[
            Chunk(text="Let me look."),
            Chunk(transcript="One moment."),
            Chunk(tool_call=_call(order=42)),
            Chunk(tool_response=_response(status="shipped")),
            Chunk(payload=_struct(card="shipped")),
            Chunk(text="It shipped."),
            Chunk(updated_variables=_struct(order=42)),
            Chunk(default_variables=_struct(lang="en")),
            Chunk(agent_transfer=transfer),
        ],
    )
    conversation = _of(Message(role="user", chunks=[Chunk(text="Where is 42?")]), agent)
    assert _steps(conversation) == [
        ("user_input", "text"),
        ("expectation", "agent_response"),
        ("expectation", "tool_call"),
        ("expectation", "tool_response"),
        ("expectation", "agent_response"),
        ("expectation", "updated_variables"),
        ("user_input", "variables"),
        ("expectation", "agent_transfer"),
    ]
    steps = conversations.golden_of(conversation).turns[0].steps
    first = steps[1].expectation.agent_response
    assert first.role == "agent"
    assert [c.text for c in first.chunks] == ["Let me look.", "One moment."]  # transcript: text
    assert steps[2].expectation.tool_call.args["order"] == 42
    second = steps[4].expectation.agent_response
    assert second.chunks[0].payload["card"] == "shipped" and second.chunks[1].text == "It shipped."
    assert steps[7].expectation.agent_transfer == transfer


def test_turns_root_spans_and_flat_messages() -> None:
    span = common_pb2.Span(name="turn")
    conversation = Conversation(
        name=NAME,
        turns=[
            Conversation.Turn(messages=[Message(role="user", chunks=[Chunk(text="a")])]),
            Conversation.Turn(messages=[Message(role="agent", chunks=[])]),  # nothing: dropped
            Conversation.Turn(
                messages=[Message(role="agent", chunks=[Chunk(text="b")])], root_span=span
            ),
        ],
    )
    golden = conversations.golden_of(conversation)
    assert len(golden.turns) == 2 and golden.turns[1].root_span == span
    flat = Conversation(name=NAME, messages=[Message(role="user", chunks=[Chunk(text="a")])])
    assert len(conversations.golden_of(flat).turns) == 1


def test_the_evaluation_is_valid_and_named_after_the_conversation() -> None:
    conversation = _of(
        Message(role="user", chunks=[Chunk(text="hi")]),
        Message(role="agent", chunks=[Chunk(text="hello"), Chunk(tool_call=_call(a=1))]),
    )
    golden = conversations.evaluation_of(conversation)
    assert golden.display_name == "Generated from c1"
    assert golden.WhichOneof("inputs") == "golden"
    assert evaluation_violations(golden, "evaluation") == []
    scenario = conversations.evaluation_of(conversation, SCENARIO)
    assert scenario.WhichOneof("inputs") == "scenario"
    assert evaluation_violations(scenario, "evaluation") == []
    assert conversations.display_name_of(NAME, 3) == "Generated from c1 (3)"


def test_the_scenario_is_read_off_the_golden() -> None:
    conversation = Conversation(
        name=NAME,
        turns=[
            Conversation.Turn(
                messages=[
                    Message(role="user", chunks=[Chunk(text="Refund order 7")]),
                    Message(
                        role="agent",
                        chunks=[
                            Chunk(tool_call=_call("k1", "refund", order=7.0, note="x")),
                            Chunk(tool_call=_call("k2", "lookup")),
                            Chunk(tool_response=_response("k1", "refund", done=True)),
                            Chunk(text="Refunded."),
                        ],
                    ),
                ]
            ),
            Conversation.Turn(
                messages=[
                    Message(role="user", chunks=[Chunk(text="thanks")]),
                    Message(
                        role="agent",
                        chunks=[
                            Chunk(
                                agent_transfer=content_pb2.AgentTransfer(
                                    target_agent=f"{APP}/agents/closer"
                                )
                            )
                        ],
                    ),
                ]
            ),
        ],
    )
    scenario = conversations.scenario_of(conversation)
    assert scenario.task == "Refund order 7"
    assert scenario.max_turns == 2
    assert list(scenario.rubrics) == [
        f'The agent calls {APP}/tools/refund with {{"note": "x", "order": 7}}',
        f"The agent calls {APP}/tools/lookup with {{}}",
        "The agent responds as it did: Refunded.",
        f"The agent transfers the conversation to {APP}/agents/closer",
    ]
    refund, lookup, said = scenario.scenario_expectations
    assert refund.tool_expectation.mock_tool_response.response["done"] is True
    # No recorded response: an empty one of the same tool and id.
    mock = lookup.tool_expectation.mock_tool_response
    assert mock.id == "k2" and mock.tool == f"{APP}/tools/lookup" and mock.HasField("response")
    assert said.agent_response.chunks[0].text == "Refunded."


def test_a_scenario_without_a_user_text_has_a_task_all_the_same() -> None:
    conversation = _of(Message(role="agent", chunks=[Chunk(text="Welcome.")]))
    assert conversations.scenario_of(conversation).task == "Hold conversation c1 again."


@pytest.mark.parametrize("evaluation_type", [0, SCENARIO])
def test_nothing_to_convert_is_a_failed_precondition(evaluation_type: int) -> None:
    empty = _of(Message(role="user", chunks=[Chunk(payload=_struct(a=1))]))
    with pytest.raises(ServiceError) as raised:
        conversations.evaluation_of(empty, evaluation_type)
    assert raised.value.code is Code.FAILED_PRECONDITION
    assert raised.value.reason == "CONVERSATION_EMPTY"


# -- in a core over a temporary database -------------------------------------------------------


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def test_store_records_a_played_conversation_under_its_name(core: Harness) -> None:
    """The run engine's call: the name is the caller's, turn_count counts the turns, a taken
    name is ALREADY_EXISTS; the emulator reads it back."""
    played = _of(Message(role="user", chunks=[Chunk(text="hi")]))
    played.source = Conversation.Source.EVAL
    core.run(conversations.store(core.core.context, played))
    got = core.call("get_conversation", emulator_pb2.GetConversationRequest(name=NAME))
    assert got.source == Conversation.Source.EVAL and got.turn_count == 1
    with pytest.raises(ServiceError) as raised:
        core.run(conversations.store(core.core.context, played))
    assert raised.value.code is Code.ALREADY_EXISTS
    listed = core.call("list_conversations", emulator_pb2.ListConversationsRequest(parent=APP))
    assert [c.name for c in listed.conversations] == [NAME]


def test_a_seed_needs_turns(core: Harness) -> None:
    request = emulator_pb2.CreateConversationRequest(parent=APP, conversation=Conversation())
    error = core.error("create_conversation", request)
    assert error.code is Code.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == ["conversation.turns"]


def test_generate_refuses_before_the_operation(core: Harness) -> None:
    """Unknown, of another source, of nothing convertible, or a bad request: refused at once,
    no operation started."""
    seeded = core.call(
        "create_conversation",
        emulator_pb2.CreateConversationRequest(
            parent=APP,
            conversation_id="c1",
            conversation=Conversation(
                source=Conversation.Source.LIVE,
                turns=[
                    Conversation.Turn(
                        messages=[
                            # Nothing a golden holds: a user's payload.
                            Message(role="user", chunks=[Chunk(payload=_struct(a=1))]),
                        ]
                    )
                ],
            ),
        ),
    )
    request = service_pb2.GenerateEvaluationRequest
    cases = [
        (request(conversation=f"{APP}/conversations/none"), Code.NOT_FOUND),
        (request(conversation=seeded.name, source=Conversation.Source.EVAL), Code.NOT_FOUND),
        (request(conversation=seeded.name), Code.FAILED_PRECONDITION),
        (request(conversation="apps/a"), Code.INVALID_ARGUMENT),
        (request(conversation=seeded.name, evaluation_type=7), Code.INVALID_ARGUMENT),  # type: ignore[arg-type]
    ]
    for message, code in cases:
        assert core.error("generate_evaluation", message).code is code, message
    operations = core.call(
        "list_operations", operations_pb2.ListOperationsRequest(name="projects/p/locations/l")
    )
    assert not operations.operations
