"""Playing evaluations against the team's own agent (docs/agents.md): the app's
:class:`~ces_eval.core.agent_endpoints.Endpoint` is called over HTTP with CES's session JSON
(a ``RunSessionRequest`` in, a ``RunSessionResponse`` out, as SessionService.RunSession); what
it answers is recorded and scored (:mod:`ces_eval.core.agent_scoring`).

* Golden turns are played by the run's ``golden_run_method``: NAIVE, one session for the whole
  golden; STABLE (the default), each turn in a fresh session given the golden's earlier turns,
  as expected, in ``config.historical_contexts``. A turn sends its ``user_input`` steps as the
  session's inputs. When the agent asks for tool calls, the golden's tool responses for those
  tools (``tool_response`` or ``mock_tool_response`` expectations of the turn, the call's id
  given back) are sent in the same session, up to :data:`_TOOL_ROUNDS` times a turn.
* With a judge (``judge_uri``), each golden turn with an agent response expectation is also
  sent to it; its semantic similarity replaces the local one and its hallucination score is
  recorded (left unset without a judge). A scenario's rubrics are scored by the judge too.
* A scenario is played with the user simulator (``simulator_uri``): it is sent the scenario
  and the conversation so far and answers the user's next input, or that the conversation is
  over (with whether the user's goal was met). The agent's tool calls are answered with the
  scenario's mock tool responses. Without a simulator, a scenario ends ERROR saying so.
* Each golden turn's latency is the time its calls took; tool latencies come from the agent's
  own trace (``diagnostic_info.root_span``: a span whose ``attributes.tool`` names a tool).

Any failure of a call (a refused host, no answer within the timeout, an HTTP error or redirect,
an answer too large, not JSON, not the expected shape) ends that result ERROR with the reason;
the run goes on. The endpoint's headers (tokens) are sent with every call and written nowhere
else: not to a result, a conversation, an error or a log line.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import httpx
from google.protobuf import json_format

from ces_eval.core import agent_scoring, names, outcomes, rerun
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

    from google.protobuf.message import Message

    from ces_eval.core.agent_endpoints import Endpoint

__all__ = ["Agent", "AgentFailure"]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Conversation = conversation_pb2.Conversation
_ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
_Method = common_pb2.GoldenRunMethod
_Observed = agent_scoring.Observed
_TOOL_ROUNDS = 8  # tool-response round trips at most in one turn
_SHOWN_BYTES = 200  # of an error answer's body, in the result's error message
_SCENARIO_TURNS, _MAX_SCENARIO_TURNS = 10, 50  # user turns: when max_turns is 0, at most
_AGENT, _USER = "agent", "user"
_HALLUCINATION_LABELS = {1: "Justified", 0: "Not Justified", -1: "No Claim To Assess"}


class AgentFailure(Exception):
    """A call to the agent, its judge or its simulator that gave nothing to record; the message
    says why (with the kind of the endpoint that failed, ``ErrorType``) and names no header."""

    def __init__(
        self, message: str, error_type: _ErrorInfo.ErrorType.ValueType = _ErrorInfo.RUNTIME_FAILURE
    ) -> None:
        super().__init__(message)
        self.error_type = error_type


def _dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message)


class Agent:
    """An app's agent for one run: one HTTP client (no proxies from the environment, no
    redirects followed) and the endpoint's headers, timeout and answer size limit."""

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
        conversation it recorded; ERROR with the reason when a call failed."""
        result = _Result(name=given.result_name)
        result.create_time.CopyFrom(given.started)
        conversation = _Conversation(
            name=given.conversation_name,
            source=_Conversation.EVAL,
            channel_type=_Conversation.TEXT,
            input_types=[_Conversation.INPUT_TYPE_TEXT],
        )
        conversation.start_time.CopyFrom(given.started)
        clock = outcomes.Clock(given.started)
        evaluation = given.evaluation
        try:
            if evaluation.WhichOneof("inputs") == "scenario":
                result.scenario_result.CopyFrom(await self._scenario(given, conversation, clock))
                if given.persona is not None:
                    result.persona.CopyFrom(given.persona)
            else:
                result.golden_result.CopyFrom(
                    await self._golden(given, method, conversation, clock)
                )
        except AgentFailure as failure:
            result.ClearField("result")
            result.execution_state = _Result.ERROR
            result.error_info.CopyFrom(
                _ErrorInfo(error_type=failure.error_type, error_message=str(failure))
            )
            getattr(result, outcomes.kind(evaluation)).SetInParent()
            conversation.end_time.CopyFrom(clock.at)
            return outcomes.Played(result, conversation)
        result.execution_state = _Result.COMPLETED
        conversation.end_time.CopyFrom(clock.at)
        return outcomes.Played(rerun.rerun(result, evaluation), conversation)

    # -- goldens -------------------------------------------------------------------------------

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
        for index, turn in enumerate(given.evaluation.golden.turns):
            if not naive:
                session = f"{app}/sessions/{names.new_id()}"
            inputs = [s.user_input for s in turn.steps if s.WhichOneof("step") == "user_input"]
            observed, spans = await self._exchange(
                session, [] if naive else history, inputs, _golden_responses(turn)
            )
            latency = outcomes.duration(observed.millis)
            start, _ = clock.advance(latency)
            user = outcomes.user_message(turn)
            messages = []
            if user is not None:
                user.event_time.CopyFrom(start)
                messages.append(user)
            if observed.chunks:
                agent = content_pb2.Message(role=_AGENT, chunks=observed.chunks)
                agent.event_time.CopyFrom(clock.at)
                messages.append(agent)
            conversation.turns.add(messages=messages)
            replay = golden.turn_replay_results.add(conversation=given.conversation_name)
            replay.turn_latency.CopyFrom(latency)
            replay.tool_call_latencies.extend(_tool_latencies(spans))
            judged = await self._judge_turn(given.evaluation, index, turn, observed, messages)
            agent_scoring.score_golden_turn(
                turn, observed, replay, judged.get("semanticSimilarity")
            )
            if "hallucination" in judged:
                score = judged["hallucination"]
                replay.hallucination_result.score = score
                replay.hallucination_result.label = _HALLUCINATION_LABELS[score]
                replay.hallucination_result.explanation = str(judged.get("explanation", ""))
            history += [m for m in (user, _expected_message(turn)) if m is not None]
        return golden

    async def _judge_turn(
        self,
        evaluation: _Evaluation,
        index: int,
        turn: _Evaluation.GoldenTurn,
        observed: _Observed,
        messages: list[content_pb2.Message],
    ) -> dict[str, Any]:
        """The judge's answer for a turn with an agent response expectation ({} without a
        judge or such an expectation), checked."""
        expected = [
            agent_scoring.text_of(e.agent_response)
            for e in outcomes.expectations(turn)
            if e.WhichOneof("condition") == "agent_response"
        ]
        uri = self._endpoint.judge_uri
        if not uri or not expected:
            return {}
        answer = await self._object(
            uri,
            {
                "kind": "TURN",
                "evaluation": evaluation.name,
                "turn": index,
                "expected": " ".join(expected),
                "observed": observed.said,
                "conversation": [_dict(m) for m in messages],
            },
            "The judge",
        )
        judged: dict[str, Any] = {}
        similarity = answer.get("semanticSimilarity")
        if similarity is not None:
            judged["semanticSimilarity"] = _integer(similarity, range(5), "semanticSimilarity")
        hallucination = answer.get("hallucination")
        if hallucination is not None:
            judged["hallucination"] = _integer(hallucination, range(-1, 2), "hallucination")
        judged["explanation"] = answer.get("explanation", "")
        return judged

    # -- scenarios -----------------------------------------------------------------------------

    async def _scenario(
        self, given: outcomes.Play, conversation: _Conversation, clock: outcomes.Clock
    ) -> _Result.ScenarioResult:
        scenario = given.evaluation.scenario
        uri = self._endpoint.simulator_uri
        if not uri:
            raise AgentFailure(
                "A scenario evaluation played against an agent needs a user simulator: set "
                "simulator_uri of the app's agent endpoint (docs/agents.md).",
                _ErrorInfo.USER_SIMULATION_FAILURE,
            )
        app = given.conversation_name.rsplit("/conversations/", 1)[0]
        session = f"{app}/sessions/{names.new_id()}"
        result = _Result.ScenarioResult(
            conversation=given.conversation_name, task=scenario.task, user_facts=scenario.user_facts
        )
        mocks = [
            e.tool_expectation.mock_tool_response
            for e in scenario.scenario_expectations
            if e.WhichOneof("expectation") == "tool_expectation"
            and e.tool_expectation.HasField("mock_tool_response")
        ]
        everything = _Observed()
        answers: list[content_pb2.Message] = []
        sent: list[content_pb2.ToolResponse] = []
        limit = min(scenario.max_turns or _SCENARIO_TURNS, _MAX_SCENARIO_TURNS)
        ending: dict[str, Any] = {}
        for _ in range(limit):
            ending = await self._simulated(given, conversation)
            if ending.get("done"):
                break
            user_input = content_pb2.SessionInput()
            _parse(ending.get("userInput"), user_input, "The simulator", "userInput")
            observed, spans = await self._exchange(session, [], [user_input], list(mocks), sent)
            start, _ = clock.advance(outcomes.duration(observed.millis))
            user = content_pb2.Message(role=_USER, chunks=outcomes.input_chunks(user_input))
            user.event_time.CopyFrom(start)
            turn = conversation.turns.add(messages=[user])
            if observed.chunks:
                agent = turn.messages.add(role=_AGENT, chunks=observed.chunks)
                agent.event_time.CopyFrom(clock.at)
                answers.append(agent)
            result.tool_call_latencies.extend(_tool_latencies(spans))
            _merge(everything, observed)
        agent_scoring.score_scenario(scenario, everything, answers, sent, result)
        await self._rubrics(given.evaluation, conversation, result)
        if ending.get("done") and "userGoalSatisfied" in ending:
            met = ending["userGoalSatisfied"] is True
            result.user_goal_satisfaction_result.score = 1 if met else 0
            result.user_goal_satisfaction_result.label = "Satisfied" if met else "Not satisfied"
            result.user_goal_satisfaction_result.explanation = str(ending.get("explanation", ""))
        if ending.get("done") and "taskCompleted" in ending:
            result.task_completed = ending["taskCompleted"] is True
        return result

    async def _simulated(self, given: outcomes.Play, conversation: _Conversation) -> dict[str, Any]:
        """The simulator's next move: ``{"userInput": SessionInput}`` or ``{"done": true,
        ...}``."""
        document: dict[str, Any] = {
            "evaluation": given.evaluation.name,
            "scenario": _dict(given.evaluation.scenario),
            "conversation": [_dict(m) for turn in conversation.turns for m in turn.messages],
        }
        if given.persona is not None:
            document["persona"] = _dict(given.persona)
        try:
            answer = await self._object(self._endpoint.simulator_uri, document, "The simulator")
        except AgentFailure as failure:
            raise AgentFailure(str(failure), _ErrorInfo.USER_SIMULATION_FAILURE) from None
        if not answer.get("done") and "userInput" not in answer:
            raise AgentFailure(
                'The simulator answered neither "userInput" nor "done": true.',
                _ErrorInfo.USER_SIMULATION_FAILURE,
            )
        return answer

    async def _rubrics(
        self, evaluation: _Evaluation, conversation: _Conversation, result: _Result.ScenarioResult
    ) -> None:
        """Score each rubric with the judge (none without one)."""
        uri = self._endpoint.judge_uri
        if not uri:
            return
        messages = [_dict(m) for turn in conversation.turns for m in turn.messages]
        for rubric in evaluation.scenario.rubrics:
            answer = await self._object(
                uri,
                {
                    "kind": "RUBRIC",
                    "evaluation": evaluation.name,
                    "rubric": rubric,
                    "conversation": messages,
                },
                "The judge",
            )
            score = answer.get("score")
            if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
                raise AgentFailure('The judge answered no "score" between 0 and 1 for a rubric.')
            result.rubric_outcomes.add(
                rubric=rubric, score=score, score_explanation=str(answer.get("explanation", ""))
            )

    # -- calls ---------------------------------------------------------------------------------

    async def _exchange(
        self,
        session: str,
        history: Sequence[content_pb2.Message],
        inputs: Sequence[content_pb2.SessionInput],
        responses: list[content_pb2.ToolResponse],
        sent: list[content_pb2.ToolResponse] | None = None,
    ) -> tuple[_Observed, list[Any]]:
        """One turn in ``session``: its inputs, then ``responses`` (taken as used, ``sent``
        gathers them) to the tools the agent asks for; what the agent did and its trace's
        spans."""
        config = session_service_pb2.SessionConfig(session=session)
        config.historical_contexts.extend(history)
        observed = _Observed()
        spans: list[Any] = []
        started = time.monotonic()
        given = list(inputs)
        for _ in range(_TOOL_ROUNDS + 1):
            request = session_service_pb2.RunSessionRequest(config=config, inputs=given)
            asked = _record(await self._session(request), observed, spans)
            replies = [reply for call in asked if (reply := _reply(call, responses)) is not None]
            if not replies:
                break
            if sent is not None:
                sent += replies
            config = session_service_pb2.SessionConfig(session=session)
            given = [
                content_pb2.SessionInput(
                    tool_responses=content_pb2.ToolResponses(tool_responses=replies)
                )
            ]
        observed.millis = max(1, round((time.monotonic() - started) * 1000))
        return observed, spans

    async def _session(
        self, request: session_service_pb2.RunSessionRequest
    ) -> session_service_pb2.RunSessionResponse:
        document = await self._object(self._endpoint.uri, _dict(request), "The agent")
        answer = session_service_pb2.RunSessionResponse()
        _parse(document, answer, "The agent", "RunSessionResponse")
        return answer

    async def _object(self, uri: str, document: object, who: str) -> dict[str, Any]:
        """POST ``document`` as JSON to ``uri``; the JSON object answered."""
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
            answer = json.loads(data)
        except ValueError as error:
            raise AgentFailure(f"{who} answered something that is not JSON ({error}).") from None
        if not isinstance(answer, dict):
            raise AgentFailure(f"{who} answered JSON that is not an object.")
        return answer


def _parse(document: object, message: Message, who: str, what: str) -> None:
    if not isinstance(document, dict):
        raise AgentFailure(f"{who}'s answer has no {what} object.")
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise AgentFailure(f"{who}'s answer is not a {what}: {error}") from None


def _integer(value: object, allowed: range, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise AgentFailure(
            f'The judge answered "{field}": {value!r}; expected an integer from '
            f"{allowed.start} to {allowed.stop - 1}."
        )
    return value


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
    answer: session_service_pb2.RunSessionResponse, observed: _Observed, spans: list[Any]
) -> list[content_pb2.ToolCall]:
    """Add what ``answer`` shows to ``observed`` (and its trace to ``spans``); the tool calls
    the agent asks the client for."""
    asked: list[content_pb2.ToolCall] = []
    seen = {call.id for call in observed.calls if call.id}

    def called(call: content_pb2.ToolCall) -> None:
        if call.id and call.id in seen:
            return
        seen.add(call.id)
        observed.calls.append(call)
        observed.chunks.append(content_pb2.Chunk(tool_call=call))

    for output in answer.outputs:
        kind = output.WhichOneof("output_type")
        if kind == "text":
            observed.texts.append(output.text)
            observed.chunks.append(content_pb2.Chunk(text=output.text))
        elif kind == "tool_calls":
            asked += output.tool_calls.tool_calls
            for call in output.tool_calls.tool_calls:
                called(call)
        elif kind == "payload":
            observed.chunks.append(content_pb2.Chunk(payload=output.payload))
        info = output.diagnostic_info
        for message in info.messages:
            if message.role == _USER:
                continue
            for chunk in message.chunks:
                data = chunk.WhichOneof("data")
                if data == "agent_transfer":
                    observed.transfers.append(chunk.agent_transfer.target_agent)
                    observed.chunks.append(chunk)
                elif data == "tool_call":
                    called(chunk.tool_call)
        if info.HasField("root_span"):
            spans.append(info.root_span)
    return asked


def _merge(into: _Observed, observed: _Observed) -> None:
    into.chunks += observed.chunks
    into.calls += observed.calls
    into.transfers += observed.transfers
    into.texts += observed.texts
    into.millis += observed.millis


def _golden_responses(turn: _Evaluation.GoldenTurn) -> list[content_pb2.ToolResponse]:
    found = []
    for expectation in outcomes.expectations(turn):
        condition = expectation.WhichOneof("condition")
        if condition in ("tool_response", "mock_tool_response"):
            found.append(getattr(expectation, condition))
    return found


def _reply(
    call: content_pb2.ToolCall, responses: list[content_pb2.ToolResponse]
) -> content_pb2.ToolResponse | None:
    """The response to ``call`` (taken from ``responses``), with the call's id."""
    for index, response in enumerate(responses):
        if agent_scoring.identity(response) == agent_scoring.identity(call):
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


def _tool_latencies(spans: Sequence[Any]) -> list[_Result.ToolCallLatency]:
    """One latency per span of the agent's traces (at any depth) whose ``attributes.tool``
    names a tool: its start, end and duration (end minus start when it gives none)."""
    found: list[_Result.ToolCallLatency] = []
    pending = list(spans)
    while pending:
        span = pending.pop(0)
        pending[:0] = list(span.child_spans)
        tool = span.attributes.fields.get("tool")
        if tool is None or tool.WhichOneof("kind") != "string_value" or not tool.string_value:
            continue
        latency = _Result.ToolCallLatency(
            tool=tool.string_value,
            display_name=span.name or tool.string_value.rsplit("/", 1)[-1],
            start_time=span.start_time,
            end_time=span.end_time,
        )
        if span.HasField("duration"):
            latency.execution_latency.CopyFrom(span.duration)
        else:
            latency.execution_latency.FromNanoseconds(
                max(0, span.end_time.ToNanoseconds() - span.start_time.ToNanoseconds())
            )
        found.append(latency)
    return found
