"""Conversations in AgentService through the core, over a real SQLite file: Get and List with
their sources (the emulator's Get and List answer the same), DeleteConversation, and
BatchDeleteConversations' operation."""

from __future__ import annotations

from typing import Any

from ces_eval.contract.encoded import message_of
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    content_pb2,
    conversation_pb2,
    evaluation_service_pb2,
)
from tests.unit.test_core import APP, Harness, core, violations
from tests.unit.test_runs import finished

__all__ = ["core"]  # the fixture, used by name

Conversation = conversation_pb2.Conversation
S = agent_service_pb2
EMULATOR = "/ces_eval.emulator.v1.EmulatorService/"


def seed(core: Harness, conversation_id: str, source: int, start: int) -> Any:
    conversation = Conversation(
        source=source,
        turns=[Conversation.Turn(messages=[content_pb2.Message(role="user")])],
    )
    conversation.start_time.FromSeconds(start)
    return core.call(
        f"{EMULATOR}CreateConversation",
        emulator_pb2.CreateConversationRequest(
            parent=APP, conversation_id=conversation_id, conversation=conversation
        ),
    )


def listed(core: Harness, **fields: Any) -> list[str]:
    page = core.call("list_conversations", S.ListConversationsRequest(parent=APP, **fields))
    return [c.name.rsplit("/", 1)[1] for c in page.conversations]


def test_get_and_list_by_source_newest_first(core: Harness) -> None:
    live = seed(core, "live", Conversation.Source.LIVE, 100)
    seed(core, "eval", Conversation.Source.EVAL, 200)
    seed(core, "sim", Conversation.Source.SIMULATOR, 300)
    assert core.call("get_conversation", S.GetConversationRequest(name=live.name)) == live
    other = core.error(
        "get_conversation",
        S.GetConversationRequest(name=live.name, source=Conversation.Source.EVAL),
    )
    assert (other.code, other.resource) == (
        Code.NOT_FOUND,
        ("ces.googleapis.com/Conversation", live.name),
    )
    assert listed(core) == ["sim", "eval", "live"]
    assert listed(core, source=Conversation.Source.EVAL) == ["eval"]
    both = [Conversation.Source.LIVE, Conversation.Source.SIMULATOR]
    assert listed(core, source=Conversation.Source.EVAL, sources=both) == ["sim", "live"]
    assert listed(core, sources=both, filter='name:"live" OR name:"eval"') == ["live"]
    assert listed(core, filter='start_time < "1970-01-01T00:04:00Z"') == ["eval", "live"]
    bad = core.error("list_conversations", S.ListConversationsRequest(parent=APP, sources=[1, 42]))
    assert (bad.code, violations(bad)) == (Code.INVALID_ARGUMENT, ["sources[1]"])


def test_pages_are_bound_to_their_sources(core: Harness) -> None:
    for index in range(3):
        seed(core, f"c{index}", Conversation.Source.EVAL, index)
    first = core.call(
        "list_conversations",
        S.ListConversationsRequest(parent=APP, page_size=2, source=Conversation.Source.EVAL),
    )
    assert len(first.conversations) == 2
    rest = core.call(
        "list_conversations",
        S.ListConversationsRequest(
            parent=APP,
            page_size=2,
            page_token=first.next_page_token,
            source=Conversation.Source.EVAL,
        ),
    )
    assert [c.name.rsplit("/", 1)[1] for c in rest.conversations] == ["c0"]
    changed = core.error(
        "list_conversations",
        S.ListConversationsRequest(parent=APP, page_size=2, page_token=first.next_page_token),
    )
    assert violations(changed) == ["page_token"]


def test_the_emulator_get_and_list_answer_the_same(core: Harness) -> None:
    made = seed(core, "one", Conversation.Source.EVAL, 1)
    request = emulator_pb2.GetConversationRequest(name=made.name)
    assert message_of(core.call(f"{EMULATOR}GetConversation", request)) == made
    listing = emulator_pb2.ListConversationsRequest(parent=APP, order_by="name")
    page = message_of(core.call(f"{EMULATOR}ListConversations", listing))
    assert isinstance(page, emulator_pb2.ListConversationsResponse)
    assert list(page.conversations) == [made]


def test_delete_then_not_found(core: Harness) -> None:
    made = seed(core, "one", Conversation.Source.EVAL, 1)
    wrong = core.error(
        "delete_conversation",
        S.DeleteConversationRequest(name=made.name, source=Conversation.Source.LIVE),
    )
    assert wrong.code == Code.NOT_FOUND
    core.call("delete_conversation", S.DeleteConversationRequest(name=made.name))
    for method, request in (
        ("get_conversation", S.GetConversationRequest(name=made.name)),
        ("delete_conversation", S.DeleteConversationRequest(name=made.name)),
    ):
        assert core.error(method, request).code == Code.NOT_FOUND


def test_batch_delete_reports_deleted_and_missing(core: Harness) -> None:
    kept = seed(core, "kept", Conversation.Source.EVAL, 1)
    gone = [seed(core, f"g{i}", Conversation.Source.LIVE, 2).name for i in range(2)]
    absent = f"{APP}/conversations/absent"
    refused = core.error(
        "batch_delete_conversations",
        S.BatchDeleteConversationsRequest(
            parent=APP,
            conversations=[gone[0], "projects/p/locations/l/apps/b/conversations/x", "nope"],
        ),
    )
    assert violations(refused) == ["conversations[1]", "conversations[2]"]
    assert len(listed(core)) == 3  # nothing deleted
    operation = core.call(
        "batch_delete_conversations",
        S.BatchDeleteConversationsRequest(parent=APP, conversations=[*gone, absent, gone[0]]),
    )
    done = finished(core, operation)
    response = S.BatchDeleteConversationsResponse()
    assert done.response.Unpack(response)
    assert list(response.deleted_conversations) == gone
    assert list(response.failed_conversations) == [absent]
    assert absent in response.error_messages[0]
    metadata = evaluation_service_pb2.OperationMetadata()
    assert done.metadata.Unpack(metadata)
    assert listed(core) == [kept.name.rsplit("/", 1)[1]]
