"""Playing evaluations against the team's own agent (docs/agents.md): the app's
:class:`~ces_eval.core.agent_endpoints.Endpoint` is called over HTTP with CES's session JSON
(a ``RunSessionRequest`` in, a ``RunSessionResponse`` out, as SessionService.RunSession), and
what it answers is recorded and scored here, an approximation of the hosted judge:

* Golden turns are played by the run's ``golden_run_method``: NAIVE, one session for the whole
  golden; STABLE (the default), each turn in a fresh session given the golden's earlier turns,
  as expected, in ``config.historical_contexts``. A turn sends its ``user_input`` steps as the
  session's inputs. When the agent asks for tool calls, the golden's tool responses for those
  tools (``tool_response`` or ``mock_tool_response`` expectations of the turn, the call's id
  given back) are sent in the same session, up to :data:`_TOOL_ROUNDS` times a turn.
* Tool calls: each ``tool_call`` expectation takes the first observed call of the same tool
  (``tool``, or ``toolset_tool``) not taken yet. Its ``parameter_correctness_score`` is the
  share of the arguments (expected and observed, by name) whose values are equal: 1.0 when the
  arguments are equal, 0 when the tool was not called. The turn's
  ``overall_tool_invocation_result`` is the lowest of them. Calls no expectation took are
  recorded as extra tool calls (an outcome with only ``observed_tool_call``).
* Agent responses: the agent's texts of the turn against the expected text, by RapidFuzz's
  ``token_sort_ratio`` (0 to 100, on case-folded text) mapped onto the 0 to 4 scale of
  semantic similarity (:func:`similarity`); the turn's score is the lowest of its responses'.
* Transfers: met when the agent reported a transfer to the expected agent (an
  ``agent_transfer`` chunk of ``diagnostic_info.messages``).
* Tool responses are the golden's own inputs and are recorded as given; updated variables are
  not observed and are recorded as met. Hallucination is left unset.

The outcomes then follow from the scores and the evaluation's thresholds
(:func:`ces_eval.core.rerun.rerun`), as for every other result. Each turn's latency is the time
its calls took. A scenario evaluation needs a user simulator, which is not played yet: it ends
ERROR saying so. Any failure of a call (refused host, no answer within the timeout, an HTTP
error or redirect, an answer too large, not JSON, not a RunSessionResponse) ends that result
ERROR with the reason; the run goes on. The endpoint's headers (tokens) are sent and never
written anywhere else: not to a result, a conversation, an error or a log line.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
from google.protobuf import json_format, struct_pb2
from rapidfuzz import fuzz, utils

from ces_eval.core import names, outcomes, rerun
from ces_eval.core.agent_endpoints import host_refusal
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    content_pb2,
    conversation_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
    session_service_pb2,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ces_eval.core.agent_endpoints import Endpoint

__all__ = ["Agent", "AgentFailure", "host_refusal", "similarity"]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Conversation = conversation_pb2.Conversation
_ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
_Method = common_pb2.GoldenRunMethod
_TOOL_ROUNDS = 8  # tool-response round trips at most in one turn
_SHOWN_BYTES = 200  # of an error answer's body, in the result's error message
_AGENT, _USER = "agent", "user"


class AgentFailure(Exception):
    """A call to the agent (or its simulator) that gave nothing to record; the message says why
    and names no header."""


def similarity(expected: str, observed: str) -> int:
    """Semantic similarity on CES's 0 to 4 scale, approximated by word overlap: RapidFuzz's
    ``token_sort_ratio`` of the case-folded texts (0 to 100), a fifth of the range per step
    above 20 (20 or less: 0; above 80: 4)."""
    ratio = fuzz.token_sort_ratio(expected, observed, processor=utils.default_process)
    return max(0, min(4, math.ceil(ratio / 20) - 1))


@dataclass
class _Observed:
    """What the agent did in one turn."""

    chunks: list[content_pb2.Chunk] = field(default_factory=list)
    calls: list[content_pb2.ToolCall] = field(default_factory=list)
    transfers: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    millis: int = 0


class Agent:
    """An app's agent for one run: one HTTP client (no proxies from the environment, no
    redirects followed), the endpoint's headers, timeout and answer size limit."""

    def __init__(self, endpoint: Endpoint, allowed: Sequence[str]) -> None:
        self._endpoint = endpoint
        self._allowed = tuple(allowed)
        self._client = httpx.AsyncClient(
            follow_redirects=False, trust_env=False, timeout=httpx.Timeout(endpoint.timeout)
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def play(self, given: outcomes.Play, method: int) -> outcomes.Played:
        """Play ``given`` against the agent: its result (judged, named, timed) and the
        conversation it recorded; ERROR with the reason when the agent failed."""
        result = _Result(name=given.result_name)
        result.create_time.CopyFrom(given.started)
        conversation = _Conversation(
            name=given.conversation_name,
            source=_Conversation.EVAL,
            channel_type=_Conversation.TEXT,
            input_types=[_Conversation.INPUT_TYPE_TEXT],
        )
        conversation.start_time.CopyFrom(given.started)
        evaluation = given.evaluation
        try:
            if evaluation.WhichOneof("inputs") == "scenario":
                raise AgentFailure(
                    "A scenario evaluation played against an agent needs a user simulator; "
                    "this server has none yet (docs/agents.md)."
                )
            clock = outcomes.Clock(given.started)
            golden = await self._golden(given, method, conversation, clock)
        except AgentFailure as failure:
            result.execution_state = _Result.ERROR
            result.error_info.CopyFrom(
                _ErrorInfo(error_type=_ErrorInfo.RUNTIME_FAILURE, error_message=str(failure))
            )
            getattr(result, outcomes.kind(evaluation)).SetInParent()
            conversation.end_time.CopyFrom(given.started)
            return outcomes.Played(result, conversation)
        result.golden_result.CopyFrom(golden)
        result.execution_state = _Result.COMPLETED
        conversation.end_time.CopyFrom(clock.at)
        return outcomes.Played(rerun.rerun(result, evaluation), conversation)

    async def _golden(
        self,
        given: outcomes.Play,
        method: int,
        conversation: _Conversation,
        clock: outcomes.Clock,
    ) -> _Result.GoldenResult:
        app = given.conversation_name.rsplit("/conversations/", 1)[0]
        session = f"{app}/sessions/{names.new_id()}"
        naive = method == _Method.NAIVE
        history: list[content_pb2.Message] = []
        golden = _Result.GoldenResult()
        for turn in given.evaluation.golden.turns:
            if not naive:
                session = f"{app}/sessions/{names.new_id()}"
            user = outcomes.user_message(turn)
            observed = await self._turn(session, [] if naive else history, turn)
            latency = outcomes.duration(observed.millis)
            start, _ = clock.advance(latency)
            replay = golden.turn_replay_results.add(conversation=given.conversation_name)
            replay.turn_latency.CopyFrom(latency)
            _score(turn, observed, replay)
            messages = []
            if user is not None:
                user.event_time.CopyFrom(start)
                messages.append(user)
                history.append(user)
            if observed.chunks:
                agent = content_pb2.Message(role=_AGENT, chunks=observed.chunks)
                agent.event_time.CopyFrom(clock.at)
                messages.append(agent)
            expected = _expected_message(turn)
            if expected is not None:
                history.append(expected)
            conversation.turns.add(messages=messages)
        return golden

    async def _turn(
        self, session: str, history: Sequence[content_pb2.Message], turn: _Evaluation.GoldenTurn
    ) -> _Observed:
        """One golden turn: its inputs, then the golden's tool responses for the tools the
        agent asks for, in ``session``."""
        config = session_service_pb2.SessionConfig(session=session)
        config.historical_contexts.extend(history)
        inputs = [step.user_input for step in turn.steps if step.WhichOneof("step") == "user_input"]
        responses = _tool_responses(turn)
        observed = _Observed()
        started = time.monotonic()
        for _ in range(_TOOL_ROUNDS + 1):
            request = session_service_pb2.RunSessionRequest(config=config, inputs=inputs)
            asked = _record(await self._session(request), observed)
            replies = [reply for call in asked if (reply := _reply(call, responses)) is not None]
            if not replies:
                break
            config = session_service_pb2.SessionConfig(session=session)
            inputs = [
                content_pb2.SessionInput(
                    tool_responses=content_pb2.ToolResponses(tool_responses=replies)
                )
            ]
        observed.millis = max(1, round((time.monotonic() - started) * 1000))
        return observed

    async def _session(
        self, request: session_service_pb2.RunSessionRequest
    ) -> session_service_pb2.RunSessionResponse:
        document = await self._post(
            self._endpoint.uri, json_format.MessageToDict(request), "The agent"
        )
        answer = session_service_pb2.RunSessionResponse()
        if not isinstance(document, dict):
            raise AgentFailure("The agent's answer is not a RunSessionResponse: not an object.")
        try:
            json_format.ParseDict(document, answer, ignore_unknown_fields=True)
        except json_format.ParseError as error:
            raise AgentFailure(f"The agent's answer is not a RunSessionResponse: {error}") from None
        return answer

    async def _post(self, uri: str, document: object, who: str) -> object:
        """POST ``document`` as JSON to ``uri`` and return the JSON answered."""
        endpoint = self._endpoint
        refusal = host_refusal(uri, self._allowed)
        if refusal is not None:
            raise AgentFailure(f"{who} at {uri} was not called: {refusal}")
        headers = {**endpoint.headers, "content-type": "application/json"}
        body = json.dumps(document).encode()
        try:
            async with asyncio.timeout(endpoint.timeout):
                request = self._client.build_request("POST", uri, content=body, headers=headers)
                response = await self._client.send(request, stream=True)
                try:
                    data = await _read(response, endpoint.max_response_bytes, who)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise AgentFailure(
                f"{who} did not answer within {endpoint.timeout:g} seconds."
            ) from None
        except httpx.HTTPError as error:
            reason = type(error).__name__
            raise AgentFailure(f"{who} at {uri} could not be called ({reason}).") from None
        try:
            return json.loads(data)
        except ValueError as error:
            raise AgentFailure(f"{who} answered something that is not JSON ({error}).") from None


async def _read(response: httpx.Response, limit: int, who: str) -> bytes:
    """The body of a 2xx answer of at most ``limit`` bytes; AgentFailure for anything else."""
    status = response.status_code
    if 300 <= status < 400:
        location = response.headers.get("location", "")
        raise AgentFailure(
            f"{who} answered HTTP {status} (a redirect to {location!r}); redirects are not "
            "followed."
        )
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise AgentFailure(f"{who} answered more than {limit} bytes.")
        parts.append(chunk)
        if status >= 300 and size >= _SHOWN_BYTES:
            break
    data = b"".join(parts)
    if status >= 300:
        shown = data[:_SHOWN_BYTES].decode("utf-8", "replace").strip()
        raise AgentFailure(f"{who} answered HTTP {status}: {shown!r}")
    return data


def _record(
    answer: session_service_pb2.RunSessionResponse, observed: _Observed
) -> list[content_pb2.ToolCall]:
    """Add what ``answer`` shows to ``observed``; the tool calls the agent asks the client for."""
    asked: list[content_pb2.ToolCall] = []
    seen = {call.id for call in observed.calls if call.id}
    for output in answer.outputs:
        kind = output.WhichOneof("output_type")
        if kind == "text":
            observed.texts.append(output.text)
            observed.chunks.append(content_pb2.Chunk(text=output.text))
        elif kind == "tool_calls":
            for call in output.tool_calls.tool_calls:
                asked.append(call)
                if not call.id or call.id not in seen:
                    seen.add(call.id)
                    observed.calls.append(call)
                    observed.chunks.append(content_pb2.Chunk(tool_call=call))
        elif kind == "payload":
            observed.chunks.append(content_pb2.Chunk(payload=output.payload))
        for message in output.diagnostic_info.messages:
            if message.role == _USER:
                continue
            for chunk in message.chunks:
                data = chunk.WhichOneof("data")
                if data == "agent_transfer":
                    observed.transfers.append(chunk.agent_transfer.target_agent)
                    observed.chunks.append(chunk)
                elif data == "tool_call" and (
                    not chunk.tool_call.id or chunk.tool_call.id not in seen
                ):
                    seen.add(chunk.tool_call.id)
                    observed.calls.append(chunk.tool_call)
                    observed.chunks.append(chunk)
    return asked


def _identity(call: content_pb2.ToolCall | content_pb2.ToolResponse) -> object:
    kind = call.WhichOneof("tool_identifier")
    if kind == "toolset_tool":
        return (call.toolset_tool.toolset, call.toolset_tool.tool_id)
    return call.tool if kind == "tool" else call.display_name


def _tool_responses(turn: _Evaluation.GoldenTurn) -> list[content_pb2.ToolResponse]:
    found = []
    for expectation in outcomes.expectations(turn):
        condition = expectation.WhichOneof("condition")
        if condition in ("tool_response", "mock_tool_response"):
            found.append(getattr(expectation, condition))
    return found


def _reply(
    call: content_pb2.ToolCall, responses: list[content_pb2.ToolResponse]
) -> content_pb2.ToolResponse | None:
    """The golden's response to ``call`` (taken from ``responses``), with the call's id."""
    for index, response in enumerate(responses):
        if _identity(response) == _identity(call):
            reply = content_pb2.ToolResponse()
            reply.CopyFrom(responses.pop(index))
            reply.id = call.id
            return reply
    return None


def _expected_message(turn: _Evaluation.GoldenTurn) -> content_pb2.Message | None:
    """The agent's part of ``turn`` as the golden expects it (STABLE's context)."""
    chunks: list[content_pb2.Chunk] = []
    for expectation in outcomes.expectations(turn):
        condition = expectation.WhichOneof("condition")
        if condition == "tool_call":
            chunks.append(content_pb2.Chunk(tool_call=expectation.tool_call))
        elif condition in ("tool_response", "mock_tool_response"):
            chunks.append(content_pb2.Chunk(tool_response=getattr(expectation, condition)))
        elif condition == "agent_response":
            chunks += expectation.agent_response.chunks
        elif condition == "agent_transfer":
            chunks.append(content_pb2.Chunk(agent_transfer=expectation.agent_transfer))
    return content_pb2.Message(role=_AGENT, chunks=chunks) if chunks else None


def _argument_score(expected: struct_pb2.Struct, observed: struct_pb2.Struct) -> float:
    """The share of the arguments named by either call whose values are equal (1.0 for two
    calls without arguments)."""
    wanted = json_format.MessageToDict(expected)
    given = json_format.MessageToDict(observed)
    keys = set(wanted) | set(given)
    if not keys:
        return 1.0
    equal = sum(1 for key in keys if key in wanted and key in given and wanted[key] == given[key])
    return equal / len(keys)


def _text(message: content_pb2.Message) -> str:
    return " ".join(chunk.text for chunk in message.chunks if chunk.WhichOneof("data") == "text")


@dataclass
class _Scores:
    """A turn's scores as its expectations are judged, and the calls not taken yet."""

    calls: list[content_pb2.ToolCall]
    said: str
    tools: list[float] = field(default_factory=list)
    similarities: list[int] = field(default_factory=list)


def _score(
    turn: _Evaluation.GoldenTurn,
    observed: _Observed,
    replay: _Result.GoldenResult.TurnReplayResult,
) -> None:
    """Record the turn's expectation outcomes and scores from what the agent did."""
    scores = _Scores(list(observed.calls), " ".join(observed.texts))
    for expectation in outcomes.expectations(turn):
        outcome = replay.expectation_outcome.add()
        outcome.expectation.CopyFrom(expectation)
        _judge(outcome, observed, scores)
    for extra in scores.calls:  # called, but expected by no expectation of the turn
        replay.expectation_outcome.add(observed_tool_call=extra)
    if scores.similarities:
        replay.semantic_similarity_result.score = min(scores.similarities)
    if scores.tools:
        replay.overall_tool_invocation_result.tool_invocation_score = min(scores.tools)


def _judge(outcome: _Result.GoldenExpectationOutcome, observed: _Observed, scores: _Scores) -> None:
    """Judge one expectation (``outcome.expectation``) against what the agent did."""
    expectation = outcome.expectation
    condition = expectation.WhichOneof("condition")
    if condition == "tool_call":
        expected = expectation.tool_call
        match = next((c for c in scores.calls if _identity(c) == _identity(expected)), None)
        score = 0.0
        if match is None:
            outcome.tool_invocation_result.explanation = "The expected tool was not called."
            outcome.outcome = _Result.FAIL
        else:
            scores.calls.remove(match)
            outcome.observed_tool_call.CopyFrom(match)
            score = _argument_score(expected.args, match.args)
            if score < 1.0:
                outcome.tool_invocation_result.explanation = (
                    "The tool was called with other arguments."
                )
        outcome.tool_invocation_result.parameter_correctness_score = score
        scores.tools.append(score)
    elif condition == "agent_response":
        scores.similarities.append(similarity(_text(expectation.agent_response), scores.said))
        outcome.observed_agent_response.CopyFrom(
            content_pb2.Message(role=_AGENT, chunks=[content_pb2.Chunk(text=scores.said)])
        )
    elif condition in ("tool_response", "mock_tool_response"):
        outcome.observed_tool_response.CopyFrom(getattr(expectation, condition))
        outcome.outcome = _Result.PASS
    elif condition == "agent_transfer":
        met = expectation.agent_transfer.target_agent in observed.transfers
        if met:
            outcome.observed_agent_transfer.CopyFrom(expectation.agent_transfer)
        outcome.outcome = _Result.PASS if met else _Result.FAIL
    else:  # updated variables: not observed here
        outcome.outcome = _Result.PASS
