"""SessionService (docs/sessions.md): RunSession, StreamRunSession and BidiRunSession play a
client's session against the app's agent endpoint when it has one (the run engine's player,
:meth:`ces_eval.core.engine.agents.Agent.converse`: the client's ``RunSessionRequest`` goes to
the agent as it is and its answer comes back, with every bound, host rule, push back and header
secrecy of a run's calls), otherwise against a local stand-in built from the app's goldens
(:class:`StandIn`).

Each turn (one request: its inputs and what the agent answered) is recorded as a turn of the
Conversation ``…/apps/{app}/conversations/{session}`` (source LIVE, AgentService's
conversations), created by the session's first turn and appended to by each later one under the
same session name, up to the bounds of a stored resource (past them the turn is refused, before
the agent is called, and nothing is written).

``SessionConfig`` is honoured: ``session`` names the session (its ID an AIP-122 ID, since it
names the conversation too); ``entry_agent`` must be an agent of the app and ``deployment`` a
deployment of it (NOT_FOUND otherwise; another app's: INVALID_ARGUMENT), both recorded on the
conversation with the deployment's app version; ``time_zone`` must be an IANA time zone name;
``historical_contexts`` and ``use_tool_fakes`` go to the agent as given. Audio is refused
(INVALID_ARGUMENT naming the field): sessions are text.
"""

from __future__ import annotations

import asyncio
import re
import time
import weakref
import zoneinfo
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any, cast

from ces_eval.contract import limits, schema
from ces_eval.core.aip import names, standard
from ces_eval.core.aip.context import BidiStreaming, Draining, Rpc, ServerStreaming
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import now
from ces_eval.core.engine import agent_scoring, outcomes, sessions
from ces_eval.core.engine.agents import Agent, AgentFailure, agent_chunks
from ces_eval.core.resources import agent_endpoints, app_resources, apps
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    content_pb2,
    conversation_pb2,
    evaluation_pb2,
    session_service_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import Conflict, EtagMismatch, ListQuery, Missing, OrderBy, SortKey

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from google.protobuf import descriptor, timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context

__all__ = ["FALLBACK_ANSWER", "RPCS", "StandIn", "play_turn"]

_Request = session_service_pb2.RunSessionRequest
_Response = session_service_pb2.RunSessionResponse
_Config = session_service_pb2.SessionConfig
_Server = session_service_pb2.BidiSessionServerMessage
_Conversation = conversation_pb2.Conversation
# What the stand-in answers a text no golden turn of the app has (docs/sessions.md).
FALLBACK_ANSWER = (
    "ces-eval's stand-in agent has no answer for this: no golden turn of this app has that user "
    "input. Set the app's agent endpoint to talk to your agent."
)
# The goldens the stand-in reads at most (by evaluation name).
_STAND_IN_EVALUATIONS = 1000
_PAGE = 100
# Of a conversation's bound, kept for its own fields (name, times, agent, deployment).
_RESERVE_BYTES = 64 * 1024
_RUN_SESSION = "/google.cloud.ces.v1beta.SessionService/RunSession"
_SPACES = re.compile(r"\s+")


def _invalid(field: str, description: str) -> ServiceError:
    return standard.invalid(field, description)


@cache
def _time_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


@dataclass(frozen=True)
class _Session:
    """A checked session config: its names and what its conversation records."""

    name: str
    app: str
    conversation: str
    entry_agent: str
    deployment: str
    app_version: str


async def _checked(context: Context, config: _Config, at: str) -> _Session:
    """``config`` checked (module docstring); ``at`` is the config's field path."""
    if not config.session:
        raise _invalid(f"{at}.session", "The session's name is required.")
    parts = names.SESSION.parse(config.session, f"{at}.session", owned=1)
    app = names.APP.format(project=parts["project"], location=parts["location"], app=parts["app"])
    if config.time_zone and config.time_zone not in _time_zones():
        raise _invalid(
            f"{at}.time_zone",
            f"{config.time_zone!r} is not an IANA time zone name (such as 'Europe/Berlin').",
        )
    for field in ("input_audio_config", "output_audio_config"):
        if config.HasField(field):
            raise _invalid(f"{at}.{field}", "Audio is not supported: sessions are text only.")
    entry_agent = config.entry_agent
    if entry_agent:
        await _in_app(context, app_resources.AGENTS, entry_agent, app, f"{at}.entry_agent")
    app_version = ""
    if config.deployment:
        deployment = await _in_app(
            context, app_resources.DEPLOYMENTS, config.deployment, app, f"{at}.deployment"
        )
        app_version = str(getattr(deployment, "app_version", ""))
    return _Session(
        config.session,
        app,
        f"{app}/conversations/{parts['session']}",
        entry_agent,
        config.deployment,
        app_version,
    )


async def _in_app(
    context: Context, resource: standard.Resource[Any], name: str, app: str, field: str
) -> Any:  # noqa: ANN401 - the resource's message
    """The resource ``name`` of ``app``: INVALID_ARGUMENT when malformed or of another app,
    NOT_FOUND when it does not exist."""
    resource.pattern.parse(name, field, owned=resource.owned)
    if names.app_of(name) != app:
        raise _invalid(field, f"{name!r} is not in the session's app {app}.")
    return await standard.existing(context, resource, name)


def _bound_deployment(config: _Config, caller: Caller) -> None:
    """``config`` in the deployment of the caller's chat token, if it has one: set when
    absent, PERMISSION_DENIED when it names another."""
    principal = caller.principal
    if principal is None or not principal.deployment:
        return
    if not config.deployment:
        config.deployment = principal.deployment
    elif config.deployment != principal.deployment:
        raise ServiceError(
            Code.PERMISSION_DENIED,
            f"The chat token was issued for deployment {principal.deployment!r}, not "
            f"{config.deployment[:512]!r}.",
            "IAM_PERMISSION_DENIED",
            {"permission": "ces.SessionService", "resource": config.deployment[:512]},
        )


def _checked_input(given: content_pb2.SessionInput, field: str) -> None:
    if given.WhichOneof("input_type") == "audio":
        raise _invalid(f"{field}.audio", "Audio input is not supported: send text.")


def _checked_inputs(request: _Request) -> None:
    if not request.inputs:
        raise _invalid("inputs", "At least one input is required.")
    for index, given in enumerate(request.inputs):
        _checked_input(given, f"inputs[{index}]")


# -- the stand-in -----------------------------------------------------------------------------


def _key(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


@dataclass(frozen=True)
class _Answer:
    calls: tuple[content_pb2.ToolCall, ...]
    texts: tuple[str, ...]


class StandIn:
    """The agent of an app without an agent endpoint (docs/sessions.md, "The stand-in"): the
    app's goldens, by their turns' user texts. A turn whose user text equals a golden turn's
    (case and spaces aside; the first golden by evaluation name, its first such turn, wins) is
    answered that turn's expected tool calls (asked of the client) and expected agent
    responses' texts; any other text :data:`FALLBACK_ANSWER`; a turn without text (tool
    responses, variables, an event) no output but its turn's end."""

    def __init__(self, answers: dict[str, _Answer]) -> None:
        self._answers = answers

    @classmethod
    def of(cls, evaluations: Iterable[evaluation_pb2.Evaluation]) -> StandIn:
        """The stand-in of ``evaluations`` (in the order given: the first answer wins)."""
        answers: dict[str, _Answer] = {}
        for evaluation in evaluations:
            _learn(evaluation, answers)
        return cls(answers)

    @classmethod
    async def of_app(cls, context: Context, app: str) -> StandIn:
        """The stand-in of ``app``: its first :data:`_STAND_IN_EVALUATIONS` evaluations by
        name (read on each turn: an evaluation changed is answered at once)."""
        found: list[evaluation_pb2.Evaluation] = []
        after = None
        while len(found) < _STAND_IN_EVALUATIONS:
            query = ListQuery(
                parent=app, order=OrderBy(SortKey.NAME, descending=False), limit=_PAGE, after=after
            )
            rows = await context.storage.list_evaluations(query)
            found += [evaluation for evaluation, _ in rows]
            if len(rows) < _PAGE:
                break
            after = rows[-1][1]
        return cls.of(found)

    def answer(self, request: _Request) -> _Response:
        texts = [given.text for given in request.inputs if given.WhichOneof("input_type") == "text"]
        response = _Response()
        if texts:
            found = self._answers.get(_key(" ".join(texts)))
            if found is None:
                response.outputs.add(text=FALLBACK_ANSWER)
            else:
                if found.calls:
                    response.outputs.add().tool_calls.tool_calls.extend(found.calls)
                for text in found.texts:
                    response.outputs.add(text=text)
        if not response.outputs:
            response.outputs.add()
        return response


def _learn(evaluation: evaluation_pb2.Evaluation, answers: dict[str, _Answer]) -> None:
    if evaluation.WhichOneof("inputs") != "golden":
        return
    for turn in evaluation.golden.turns:
        said: list[str] = []
        calls: list[content_pb2.ToolCall] = []
        texts: list[str] = []
        for step in turn.steps:
            kind = step.WhichOneof("step")
            if kind == "user_input" and step.user_input.WhichOneof("input_type") == "text":
                said.append(step.user_input.text)
            elif kind == "expectation":
                expected = step.expectation
                condition = expected.WhichOneof("condition")
                if condition == "tool_call":
                    calls.append(expected.tool_call)
                elif condition == "agent_response":
                    text = " ".join(c.text for c in expected.agent_response.chunks if c.text)
                    if text:
                        texts.append(text)
        if said:
            answers.setdefault(_key(" ".join(said)), _Answer(tuple(calls), tuple(texts)))


# -- playing and recording ----------------------------------------------------------------------


class _Locks:
    """One lock per session name being played in this process: the turns of one session are
    recorded one after another (a replica's own turns; docs/sessions.md)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def of(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock


_LOCKS: weakref.WeakKeyDictionary[object, _Locks] = weakref.WeakKeyDictionary()


def _locks(context: Context) -> _Locks:
    found = _LOCKS.get(context.storage)
    if found is None:
        found = _LOCKS[context.storage] = _Locks()
    return found


async def _agent_answer(context: Context, session: _Session, request: _Request) -> _Response:
    endpoint = await agent_endpoints.of_app(context, session.app)
    if endpoint is None:
        return (await StandIn.of_app(context, session.app)).answer(request)
    settings = context.settings
    # The process's bound on sessions played against agents at once (--agent-sessions), runs'
    # and clients' together (docs/agents.md, "Concurrency").
    slots = sessions.server_slots(context.agents, settings.agent_sessions)
    await slots.take()
    agent = Agent(endpoint, settings.agent_allow_hosts, context.agents)
    try:
        return await agent.converse(request)
    except AgentFailure as failure:
        raise ServiceError(
            Code.UNAVAILABLE, str(failure), "AGENT_FAILED", {"session": session.name}
        ) from None
    finally:
        await agent.close()
        slots.give()


def _full(conversation: _Conversation) -> ServiceError:
    return ServiceError(
        Code.FAILED_PRECONDITION,
        f"The session's conversation {conversation.name} is full (at most "
        f"{limits.MAX_REPEATED} turns and {limits.MAX_RESOURCE_BYTES - _RESERVE_BYTES} bytes); "
        "start a new session.",
        "TOO_LARGE",
        {"conversation": conversation.name},
    )


async def play_turn(context: Context, request: _Request, caller: Caller) -> _Response:
    """One turn of a session: ``request`` checked, answered (the agent, else the stand-in)
    and recorded in the session's conversation (module docstring). A chat token's session is
    played in the deployment the token was issued for (docs/sessions.md, "Chat tokens")."""
    _bound_deployment(request.config, caller)
    session = await _checked(context, request.config, "config")
    _checked_inputs(request)
    async with _locks(context).of(session.conversation):
        stored = await context.storage.get_row(tables.CONVERSATIONS, session.conversation)
        if stored is not None and len(stored.turns) >= limits.MAX_REPEATED:
            raise _full(stored)
        started = now()
        clock = time.monotonic()
        answer = await _agent_answer(context, session, request)
        millis = max(1, round((time.monotonic() - clock) * 1000))
        turn = await _append(
            context, session, request=request, answer=answer, started=started, millis=millis
        )
    for output in answer.outputs:
        output.turn_index = turn
    if answer.outputs:
        answer.outputs[-1].turn_completed = True
    return answer


async def _append(
    context: Context,
    session: _Session,
    *,
    request: _Request,
    answer: _Response,
    started: timestamp_pb2.Timestamp,
    millis: int,
) -> int:
    """The turn recorded at the end of the session's conversation as stored now: its number.
    Each write is conditional on the conversation read (its version, tables.CONVERSATIONS), and
    read and appended again when another turn of the session was recorded meanwhile (by another
    process: --workers, replicas), so that no turn is lost; the agent is not called again."""

    async def round_() -> int:
        stored = await context.storage.get_row(tables.CONVERSATIONS, session.conversation)
        if stored is not None and len(stored.turns) >= limits.MAX_REPEATED:
            raise _full(stored)
        conversation = _with_turn(
            session, stored=stored, request=request, answer=answer, started=started, millis=millis
        )
        try:
            if stored is None:
                await context.storage.insert_row(tables.CONVERSATIONS, conversation)
            else:
                await _replace(context, conversation, stored)
        except (Conflict, EtagMismatch, Missing) as changed:
            raise Changed from changed
        return len(conversation.turns)

    given_up = partial(ServiceError.aborted_etag, names.CONVERSATION.type, session.conversation)
    return await rewrite(round_, given_up)


async def _replace(context: Context, conversation: _Conversation, stored: _Conversation) -> None:
    """``conversation`` in place of ``stored``, if that is still what is stored. A row stored
    before conversations were versioned holds no version: when the version does not match but
    the row is ``stored`` still, it is one of those, replaced on that condition."""
    table = tables.CONVERSATIONS
    try:
        await context.storage.replace_row(table, conversation, table.version(stored))
    except EtagMismatch:
        if await context.storage.get_row(table, stored.name) != stored:
            raise
        await context.storage.replace_row(table, conversation, "")


def _with_turn(
    session: _Session,
    *,
    stored: _Conversation | None,
    request: _Request,
    answer: _Response,
    started: timestamp_pb2.Timestamp,
    millis: int,
) -> _Conversation:
    """``stored`` (a new conversation when None) with the turn of ``request`` and ``answer``
    appended, its fields and turn_count set; FAILED_PRECONDITION when it would pass its
    bound."""
    conversation = _Conversation()
    if stored is not None:
        conversation.CopyFrom(stored)
    else:
        conversation.name = session.conversation
        conversation.source = _Conversation.LIVE
        conversation.channel_type = _Conversation.TEXT
        conversation.input_types.append(_Conversation.INPUT_TYPE_TEXT)
        conversation.start_time.CopyFrom(started)
    conversation.entry_agent = session.entry_agent or conversation.entry_agent
    conversation.deployment = session.deployment or conversation.deployment
    conversation.app_version = session.app_version or conversation.app_version
    budget = agent_scoring.Budget(
        "conversation", limits.MAX_RESOURCE_BYTES - _RESERVE_BYTES - conversation.ByteSize()
    )
    clock = outcomes.Clock(started)
    user = content_pb2.Message(
        role="user", chunks=[c for given in request.inputs for c in outcomes.input_chunks(given)]
    )
    user.event_time.CopyFrom(clock.at)
    turn = conversation.turns.add()
    try:
        budget.spend(user, 8)
        turn.messages.append(user)
        chunks = agent_chunks(answer, budget)
    except (agent_scoring.Overflow, AgentFailure):
        raise _full(conversation) from None
    clock.advance(outcomes.duration(millis))
    if chunks:
        agent = turn.messages.add(role="agent", chunks=chunks)
        agent.event_time.CopyFrom(clock.at)
    conversation.end_time.CopyFrom(clock.at)
    conversation.turn_count = len(conversation.turns)
    return conversation


# -- the RPCs -------------------------------------------------------------------------------------


async def run_session(context: Context, request: _Request, caller: Caller) -> _Response:
    """RunSession: one turn (:func:`play_turn`)."""
    return await play_turn(context, request, caller)


async def stream_run_session(
    context: Context, request: _Request, caller: Caller
) -> AsyncIterator[_Response]:
    """StreamRunSession: the turn's outputs, each as a response of its own as the turn
    yields them (the agent answers a whole turn at once: they come together, in order)."""
    answer = await play_turn(context, request, caller)
    for output in answer.outputs:
        yield _Response(outputs=[output])


async def bidi_run_session(
    context: Context, requests: AsyncIterator[Message], caller: Caller
) -> AsyncIterator[_Server]:
    """BidiRunSession: ``config`` first, then ``realtime_input`` messages; the inputs gathered
    are played as one turn when an input has ``will_continue`` false (each output sent as a
    ``session_output``); an ``end_session`` output is also sent as ``end_session`` and ends the
    stream; the server's drain sends ``go_away`` and ends it (docs/sessions.md)."""
    config: _Config | None = None
    pending: list[content_pb2.SessionInput] = []
    try:
        async for received in requests:
            message = cast("session_service_pb2.BidiSessionClientMessage", received)
            kind = message.WhichOneof("message_type")
            if config is None:
                if kind != "config":
                    raise _invalid(
                        "config", "The stream's first message must be the session's config."
                    )
                config = _Config()
                config.CopyFrom(message.config)
                await _checked(context, config, "config")
                await apps.admit(context, _run_session_method(), _Request(config=config))
                continue
            if kind != "realtime_input":
                raise _invalid(
                    "config", "The session's config is sent once, as the stream's first message."
                )
            given = message.realtime_input
            _checked_input(given, "realtime_input")
            pending.append(given)
            if len(pending) > limits.MAX_REPEATED:
                raise _invalid("realtime_input", f"At most {limits.MAX_REPEATED} inputs a turn.")
            if given.will_continue:
                continue
            request = _Request(config=config, inputs=pending)
            pending = []
            answer = await play_turn(context, request, caller)
            for output in answer.outputs:
                yield _Server(session_output=output)
                if output.WhichOneof("output_type") == "end_session":
                    yield _Server(end_session=output.end_session)
                    return
    except Draining:
        yield _Server(go_away=session_service_pb2.GoAway())


@cache
def _run_session_method() -> descriptor.MethodDescriptor:
    """RunSession's descriptor: the apps' rule of a bidirectional session is RunSession's
    (BidiRunSession has no HTTP binding that would name the field)."""
    return schema.methods()[_RUN_SESSION]


RPCS: dict[str, Rpc | ServerStreaming | BidiStreaming] = {
    "RunSession": run_session,
    "StreamRunSession": ServerStreaming(stream_run_session),
    "BidiRunSession": BidiStreaming(bidi_run_session),
}
