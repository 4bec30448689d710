"""Conversations: the resource's declaration, its emulator methods (Create, Get, List), what
the run engine calls to record a conversation it played, and GenerateEvaluation.

The hosted service records conversations in another CES service; this server keeps them in a
generic table (:data:`ces_eval.storage.tables.CONVERSATIONS`): the emulator seeds them
(every field as given: they are what the app recorded; ``turn_count`` counts the turns) and the
run engine records the ones it plays (:func:`store`). They have no display name and no etag;
a list orders by ``start_time``, newest first.

One conversion (:func:`evaluation_of`) makes an evaluation of a conversation, for
GenerateEvaluation and for ImportEvaluations' ``conversation_list``
(:mod:`ces_eval.core.exchange.imports`). docs/semantics.md ("Conversations and GenerateEvaluation")
states its rules for users:

* GOLDEN: one golden turn per conversation turn (the deprecated flat ``messages`` as one turn
  when there are none), its ``root_span`` kept, turns yielding no step left out. A message
  whose role is ``user`` (any case) gives user inputs: text and transcripts as text, blobs,
  images, tool responses (as ``tool_responses``), updated or default variables (as
  ``variables``); its payloads have no session input and are left out. Any other message
  gives expectations, in order: its consecutive text, transcript (as text), payload, blob and
  image chunks one ``agent_response`` (the role kept); a tool call a ``tool_call``
  expectation (arguments and all); a tool response a ``tool_response``; a transfer an
  ``agent_transfer``; updated variables ``updated_variables``; default variables, which set
  the session up, a user input of ``variables``.
* SCENARIO: the task is the text of the first user message (else "Hold conversation <id>
  again."); one rubric per agent response ("The agent responds as it did: <text>"), tool call
  ("The agent calls <tool> with <arguments>") and transfer ("The agent transfers the
  conversation to <agent>"), in order; a scenario expectation per agent response and per
  tool call (its mock response: the tool response of the same id, else the next one of the
  same tool, else an empty one); ``max_turns`` the number of user turns.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

from google.protobuf import json_format

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.names import location_of
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    content_pb2,
    conversation_pb2,
    evaluation_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import Conflict, Missing

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf import empty_pb2, timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.contract.encoded import Response
    from ces_eval.core.aip.context import Context, Rpc

__all__ = [
    "AGENT_RPCS",
    "CONVERSATIONS",
    "EMULATOR_RPCS",
    "RPCS",
    "checked",
    "display_name_of",
    "evaluation_of",
    "found",
    "generate_evaluation",
    "golden_of",
    "scenario_of",
    "store",
]

Conversation = conversation_pb2.Conversation
_Evaluation = evaluation_pb2.Evaluation
_Type = service_pb2.GenerateEvaluationRequest.EvaluationType
# Tries of a generated evaluation's display name: "Generated from c", "... (2)", ...
_NAME_TRIES = 100
# The chunks an agent response gathers (text, transcript, payload, blob, image).
_RESPONSE_CHUNKS = frozenset({"text", "transcript", "payload", "blob", "image"})


def _rules(conversation: Conversation, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """A seed's rules (output-only fields as given: they are what the app recorded)."""
    return validation.seeded_violations(conversation, path)


def _count_turns(
    conversation: Conversation, previous: Conversation | None, moment: timestamp_pb2.Timestamp
) -> None:
    conversation.turn_count = len(conversation.turns)


CONVERSATIONS = standard.Resource(
    message=Conversation,
    parent=names.APP,
    store=standard.Store.of(tables.CONVERSATIONS, updatable=False),
    rules=_rules,
    derive=_count_turns,
)


async def store(context: Context, conversation: Conversation) -> None:
    """Record ``conversation`` as played (the run engine's call): named by the caller
    (``…/apps/{app}/conversations/{id}``), every field as given but ``turn_count``, which
    counts its turns. ALREADY_EXISTS when the name is taken."""
    names.CONVERSATION.parse(conversation.name, "conversation.name", owned=0)
    conversation.turn_count = len(conversation.turns)
    try:
        await context.storage.insert_row(tables.CONVERSATIONS, conversation)
    except Conflict as error:
        raise ServiceError.already_exists(names.CONVERSATION.type, conversation.name) from error


# -- the conversion ------------------------------------------------------------------------------


def _is_user(message: content_pb2.Message) -> bool:
    return message.role.lower() == "user"


def _user_input(chunk: content_pb2.Chunk, kind: str) -> content_pb2.SessionInput | None:
    """The session input of a user chunk; None for a payload (no session input holds one)."""
    if kind in ("text", "transcript"):
        return content_pb2.SessionInput(text=getattr(chunk, kind))
    if kind == "blob":
        return content_pb2.SessionInput(blob=chunk.blob)
    if kind == "image":
        return content_pb2.SessionInput(image=chunk.image)
    if kind == "tool_response":
        return content_pb2.SessionInput(
            tool_responses=content_pb2.ToolResponses(tool_responses=[chunk.tool_response])
        )
    if kind in ("updated_variables", "default_variables"):
        return content_pb2.SessionInput(variables=getattr(chunk, kind))
    return None


def _response_chunk(chunk: content_pb2.Chunk, kind: str) -> content_pb2.Chunk:
    """An agent response's chunk: a transcript as text, the rest as recorded."""
    return content_pb2.Chunk(text=chunk.transcript) if kind == "transcript" else chunk


def _expect(condition: str, value: Message) -> _Evaluation.Step:
    """A step expecting ``value`` as the expectation's ``condition`` (agent_response, ...)."""
    expectation = _Evaluation.GoldenExpectation()
    getattr(expectation, condition).CopyFrom(value)
    return _Evaluation.Step(expectation=expectation)


def _message_steps(message: content_pb2.Message) -> list[_Evaluation.Step]:
    """The golden steps of one message, in its chunks' order."""
    steps: list[_Evaluation.Step] = []
    user = _is_user(message)
    gathered: list[content_pb2.Chunk] = []  # the agent response being gathered
    for chunk in message.chunks:
        kind = chunk.WhichOneof("data")
        if kind is None:
            continue
        if user:
            found = _user_input(chunk, kind)
            steps += [_Evaluation.Step(user_input=found)] if found is not None else []
            continue
        if kind in _RESPONSE_CHUNKS:
            gathered.append(_response_chunk(chunk, kind))
            continue
        if gathered:
            steps.append(
                _expect("agent_response", content_pb2.Message(role=message.role, chunks=gathered))
            )
            gathered = []
        if kind == "default_variables":  # they set the session up: an input
            input_ = content_pb2.SessionInput(variables=chunk.default_variables)
            steps.append(_Evaluation.Step(user_input=input_))
        else:
            steps.append(_expect(kind, getattr(chunk, kind)))
    if gathered:
        steps.append(
            _expect("agent_response", content_pb2.Message(role=message.role, chunks=gathered))
        )
    return steps


def _steps(turn: Conversation.Turn) -> list[_Evaluation.Step]:
    """The golden steps of one conversation turn, in conversation order."""
    return [step for message in turn.messages for step in _message_steps(message)]


def _turns(conversation: Conversation) -> list[Conversation.Turn]:
    if conversation.turns:
        return list(conversation.turns)
    return [Conversation.Turn(messages=conversation.messages)] if conversation.messages else []


def golden_of(conversation: Conversation) -> _Evaluation.Golden:
    """The golden of ``conversation`` (the module's rules)."""
    golden = _Evaluation.Golden()
    for turn in _turns(conversation):
        steps = _steps(turn)
        if steps:
            golden_turn = golden.turns.add(steps=steps)
            if turn.HasField("root_span"):
                golden_turn.root_span.CopyFrom(turn.root_span)
    return golden


def _text(message: content_pb2.Message) -> str:
    return " ".join(
        getattr(c, kind)
        for c in message.chunks
        if (kind := c.WhichOneof("data")) in ("text", "transcript")
    ).strip()


def _tool(called: content_pb2.ToolCall | content_pb2.ToolResponse) -> str:
    """The tool of a call or response as a rubric names it (its display name without one)."""
    which = called.WhichOneof("tool_identifier")
    if which == "toolset_tool":
        return f"{called.toolset_tool.toolset} {called.toolset_tool.tool_id}".strip()
    return called.tool if which == "tool" else called.display_name


def _mock_response(
    call: content_pb2.ToolCall, responses: list[content_pb2.ToolResponse]
) -> content_pb2.ToolResponse:
    """The recorded response of ``call``: the one of the same id, else the first of the same
    tool, else an empty response of its tool."""
    same_id = [r for r in responses if call.id and r.id == call.id]
    same_tool = [r for r in responses if _tool(r) == _tool(call)]
    if same_id or same_tool:
        return (same_id or same_tool)[0]
    mock = content_pb2.ToolResponse(id=call.id)
    mock.response.SetInParent()
    if call.WhichOneof("tool_identifier") == "toolset_tool":
        mock.toolset_tool.CopyFrom(call.toolset_tool)
    elif call.WhichOneof("tool_identifier") == "tool":
        mock.tool = call.tool
    return mock


def _plain(value: object) -> object:
    """``value`` (a Struct as a dict) with its whole numbers as integers: ``42``, not ``42.0``
    (a Struct holds every number as a double)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def scenario_of(conversation: Conversation) -> _Evaluation.Scenario:
    """The scenario of ``conversation``, read off its golden (the module's rules)."""
    golden = golden_of(conversation)
    steps = [step for turn in golden.turns for step in turn.steps]
    expectations = [s.expectation for s in steps if s.HasField("expectation")]
    responses = [e.tool_response for e in expectations if e.HasField("tool_response")]
    first = next((s.user_input.text for s in steps if s.user_input.text), "")
    conversation_id = conversation.name.rsplit("/", 1)[-1]
    scenario = _Evaluation.Scenario(
        task=first or f"Hold conversation {conversation_id} again.",
        max_turns=sum(1 for t in golden.turns if any(s.HasField("user_input") for s in t.steps)),
    )
    for expectation in expectations:
        kind = expectation.WhichOneof("condition")
        if kind == "agent_response":
            said = expectation.agent_response
            scenario.rubrics.append(f"The agent responds as it did: {_text(said) or '(no text)'}")
            scenario.scenario_expectations.add(agent_response=said)
        elif kind == "tool_call":
            call = expectation.tool_call
            arguments = json.dumps(_plain(json_format.MessageToDict(call.args)), sort_keys=True)
            scenario.rubrics.append(f"The agent calls {_tool(call)} with {arguments}")
            scenario.scenario_expectations.add(
                tool_expectation=_Evaluation.ScenarioExpectation.ToolExpectation(
                    expected_tool_call=call, mock_tool_response=_mock_response(call, responses)
                )
            )
        elif kind == "agent_transfer":
            target = expectation.agent_transfer.target_agent
            scenario.rubrics.append(f"The agent transfers the conversation to {target}")
    return scenario


def display_name_of(conversation: str, attempt: int = 1) -> str:
    """The display name of the evaluation made of ``conversation``, at the ``attempt``-th
    try: ``Generated from <id>``, then ``... (2)``, ``... (3)``."""
    base = f"Generated from {conversation.rsplit('/', 1)[-1]}"
    return base if attempt == 1 else f"{base} ({attempt})"


def evaluation_of(conversation: Conversation, evaluation_type: int = _Type.GOLDEN) -> _Evaluation:
    """The evaluation made of ``conversation``: a golden (the default) or a scenario, with its
    first display name; FAILED_PRECONDITION when the conversation has nothing to make one of."""
    evaluation = _Evaluation(
        display_name=display_name_of(conversation.name),
        description=f"Made from conversation {conversation.name}.",
    )
    if evaluation_type == _Type.SCENARIO:
        evaluation.scenario.CopyFrom(scenario_of(conversation))
        empty = not evaluation.scenario.rubrics
    else:
        evaluation.golden.CopyFrom(golden_of(conversation))
        empty = not evaluation.golden.turns
    if empty:
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"{conversation.name} holds nothing an evaluation could be made of.",
            "CONVERSATION_EMPTY",
            {"resource": conversation.name},
            resource=(names.CONVERSATION.type, conversation.name),
        )
    return evaluation


# -- GenerateEvaluation --------------------------------------------------------------------------


def checked(evaluation: _Evaluation) -> ServiceError | None:
    """Why the evaluation made of a conversation cannot be created (CreateEvaluation's field
    rules and size, without storage), if it cannot: FAILED_PRECONDITION, since the request is
    fine and the conversation is what holds it (a tool of another app, say)."""
    found = validation.evaluation_violations(evaluation, "evaluation")
    violations = validation.with_size(found, evaluation, "evaluation")
    if not violations:
        return None
    described = "; ".join(f"{v.field}: {v.description}" for v in violations[:3])
    more = f" (and {len(violations) - 3} more)" if len(violations) > 3 else ""
    return ServiceError(
        Code.FAILED_PRECONDITION,
        f"The evaluation made of the conversation would be invalid: {described}{more}",
        "CONVERSATION_NOT_CONVERTIBLE",
    )


async def found(context: Context, name: str, source: int = 0) -> Conversation:
    """The stored conversation ``name`` of ``source`` (any source when unspecified): NOT_FOUND
    when there is none, or when its source is another (the client searches only that source)."""
    conversation = await standard.existing(context, CONVERSATIONS, name)
    if source and conversation.source != source:
        wanted = Conversation.Source.Name(Conversation.Source.ValueType(source))
        raise ServiceError(
            Code.NOT_FOUND,
            f"Conversation {name} not found among {wanted} "
            f"conversations (it is {Conversation.Source.Name(conversation.source)}).",
            "RESOURCE_NOT_FOUND",
            {"resource": name},
            resource=(names.CONVERSATION.type, name),
        )
    return conversation


async def create_from(
    context: Context, evaluation: _Evaluation, app: str, caller: Caller
) -> _Evaluation:
    """Create ``evaluation`` in ``app`` as CreateEvaluation does (rules, references, stamps),
    its display name suffixed `` (2)``, `` (3)``... while taken."""
    base = evaluation.display_name
    for attempt in range(1, _NAME_TRIES + 1):
        if attempt > 1:
            evaluation.display_name = f"{base} ({attempt})"
        request = service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation)
        try:
            return await standard.create(context, EVALUATIONS, request, caller)
        except ServiceError as error:
            if error.code is not Code.ALREADY_EXISTS:
                raise
    raise ServiceError(
        Code.ABORTED,
        f"No free display name for {base!r} after {_NAME_TRIES} tries.",
        "DISPLAY_NAME_TAKEN",
        {"display_name": base},
    )


async def generate_evaluation(
    context: Context, request: service_pb2.GenerateEvaluationRequest, caller: Caller
) -> operations_pb2.Operation:
    """GenerateEvaluation: the conversation is found (and its evaluation made) before the
    operation starts; the operation creates the evaluation and answers it."""
    names.CONVERSATION.parse(request.conversation, "conversation", owned=0)
    if request.source not in Conversation.Source.values():
        raise standard.invalid("source", "Use LIVE, SIMULATOR, EVAL or AGENT_TOOL.")
    if request.evaluation_type not in _Type.values():
        raise standard.invalid("evaluation_type", "Use GOLDEN or SCENARIO.")
    conversation = await found(context, request.conversation, request.source)
    evaluation = evaluation_of(conversation, request.evaluation_type or _Type.GOLDEN)
    app = tables.parent_of(conversation.name)
    refused = checked(evaluation)
    if refused is not None:
        raise refused

    async def work() -> Message:
        return await create_from(context, evaluation, app, caller)

    return await context.runner.start(
        location_of(app),
        "GenerateEvaluation",
        service_pb2.GenerateEvaluationOperationMetadata(),
        work,
    )


# -- AgentService's methods (the emulator's Get and List are the same) ---------------------------


def _sources(request: Message) -> str:
    """The AIP-160 clause of a list's ``sources`` (else its ``source``; the emulator's list has
    neither): "" for every source."""
    given = request.DESCRIPTOR.fields_by_name
    # The fields are read by name: the emulator's request has neither.
    chosen = list(getattr(request, "sources")) if "sources" in given else []  # noqa: B009
    field = "sources"
    if not chosen and "source" in given and getattr(request, "source"):  # noqa: B009
        chosen, field = [getattr(request, "source")], "source"  # noqa: B009
    clauses = []
    for index, source in enumerate(chosen):
        if source not in Conversation.Source.values():
            at = f"sources[{index}]" if field == "sources" else field
            raise standard.invalid(at, "Use LIVE, SIMULATOR, EVAL or AGENT_TOOL.")
        clauses.append(f"source = {Conversation.Source.Name(source)}")
    return " OR ".join(clauses)


async def get_conversation(context: Context, request: Message, caller: Caller) -> Conversation:
    """GetConversation (AgentService's and the emulator's): of the request's ``source`` when
    set, else of any."""
    name = str(getattr(request, "name"))  # noqa: B009 - two request types
    CONVERSATIONS.pattern.parse(name, "name", owned=CONVERSATIONS.owned)
    return await found(context, name, int(getattr(request, "source", 0)))


async def list_conversations(context: Context, request: Message, caller: Caller) -> Response:
    """ListConversations (AgentService's and the emulator's): the generic list, its AIP-160
    ``filter`` and the request's ``sources`` (else ``source``) both applying; newest first.
    The response is of the request's service."""
    given = cast("emulator_pb2.ListConversationsRequest", request)
    clause = _sources(request)
    text = given.filter
    if clause:
        text = f"{text} AND ({clause})" if text.strip() else clause
    query = emulator_pb2.ListConversationsRequest(
        parent=given.parent,
        page_size=given.page_size,
        page_token=given.page_token,
        filter=text,
        order_by=getattr(request, "order_by", ""),
    )
    response = (
        emulator_pb2.ListConversationsResponse()
        if isinstance(request, emulator_pb2.ListConversationsRequest)
        else agent_service_pb2.ListConversationsResponse()
    )
    return await standard.list_page(context, CONVERSATIONS, query, response)


async def delete_conversation(
    context: Context, request: agent_service_pb2.DeleteConversationRequest, caller: Caller
) -> empty_pb2.Empty:
    """DeleteConversation: NOT_FOUND when missing, or when a ``source`` is given and it is
    another."""
    await get_conversation(context, request, caller)
    return await standard.delete(context, CONVERSATIONS, request)


async def batch_delete_conversations(
    context: Context, request: agent_service_pb2.BatchDeleteConversationsRequest, caller: Caller
) -> operations_pb2.Operation:
    """BatchDeleteConversations (long-running): the names are checked first (each a
    conversation of ``parent``: INVALID_ARGUMENT otherwise), then the operation deletes each
    and answers which it deleted and which were missing, with why."""
    parent = request.parent
    names.APP.parse(parent, "parent", owned=0)
    if not request.conversations:
        raise standard.invalid("conversations", "Required.")
    violations = []
    for index, name in enumerate(request.conversations):
        field = f"conversations[{index}]"
        malformed = CONVERSATIONS.pattern.violation(name, field, owned=CONVERSATIONS.owned)
        if malformed is None and tables.parent_of(name) != parent:
            malformed = FieldViolation(field, f"{name!r} is not a conversation of {parent}.")
        if malformed is not None:
            violations.append(malformed)
    validation.raise_if_invalid(violations, "conversations")
    storage = context.storage

    async def work() -> Message:
        response = agent_service_pb2.BatchDeleteConversationsResponse()
        for name in dict.fromkeys(request.conversations):
            try:
                await storage.delete_row(tables.CONVERSATIONS, name, "")
            except Missing:
                response.failed_conversations.append(name)
                response.error_messages.append(f"Conversation {name} not found.")
            else:
                response.deleted_conversations.append(name)
        return response

    return await context.operation(parent, "BatchDeleteConversations", work)


RPCS: dict[str, Rpc] = {"GenerateEvaluation": generate_evaluation}
AGENT_RPCS: dict[str, Rpc] = {
    "GetConversation": get_conversation,
    "ListConversations": list_conversations,
    "DeleteConversation": delete_conversation,
    "BatchDeleteConversations": batch_delete_conversations,
}
EMULATOR_RPCS: dict[str, Rpc] = {
    **standard.methods(CONVERSATIONS, "Create"),
    "GetConversation": get_conversation,
    "ListConversations": list_conversations,
}
