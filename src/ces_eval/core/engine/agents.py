"""Playing evaluations against the team's own agent (docs/agents.md): the app's
:class:`~ces_eval.core.resources.agent_endpoints.Endpoint` is called over HTTP with CES's session
JSON (a ``RunSessionRequest`` in, a ``RunSessionResponse`` out, as SessionService.RunSession);
what it answers is recorded and scored (:mod:`ces_eval.core.engine.agent_scoring`).

* Golden turns are played by the run's ``golden_run_method``: NAIVE, one session for the whole
  golden; STABLE (the default), each turn in a fresh session given the golden's earlier turns,
  as expected, in ``config.historical_contexts``. A turn sends its ``user_input`` steps as the
  session's inputs. When the agent asks for tool calls, the golden's tool responses for those
  tools (``tool_response`` or ``mock_tool_response`` expectations of the turn, the call's id
  given back) are sent in the same session, up to :data:`_TOOL_ROUNDS` times a turn.
* With a judge (``judge_uri``), each golden turn with an agent response expectation is also
  sent to it; its semantic similarity replaces the local one and its hallucination score is
  recorded (left unset without a judge). A scenario's rubrics are scored by the judge too.
* A scenario is played with the user simulator (``simulator_uri``): it is sent the scenario,
  the conversation so far and the scenario's execution mode, and answers the user's next
  input, or that the conversation is over (with whether the user's goal was met). When the
  app's ``scenario_conversation_initiator`` is AGENT, the agent speaks first: its session
  opens with the event :data:`WELCOME_EVENT` and its answer is the conversation's first turn.
  The agent's tool calls are answered with the scenario's mock tool responses. Without a
  simulator, a scenario ends ERROR saying so.
* Metrics the metrics config in force switches off are not computed
  (:mod:`ces_eval.core.engine.metrics_config`): a turn's judge call is skipped when neither
  its semantic similarity nor its hallucination is, and an agent response expectation whose
  similarity is off takes no part in the turn's.
* Each golden turn's latency is the time its calls took; tool latencies come from the agent's
  own trace (``diagnostic_info.root_span``: a span whose ``attributes.tool`` names a tool).

Any failure of a call (a refused host, no answer within the timeout, an HTTP error or redirect,
an answer too large, not JSON, nested too deeply, not the expected shape) ends that result ERROR
with the reason; the run goes on. So does any unexpected failure while one result is played
(the last resort in :meth:`Agent.play`: logged by its kind and place, never its text). A call
pushed back (HTTP 429 or 503, or no HTTP answer) is first made again, a bounded number of
times, after back-offs waited out through the run's :class:`~ces_eval.core.engine.pace.Pace`
(:mod:`ces_eval.core.engine.backoff`; docs/agents.md, "Back-pressure"); what still fails says
how often it was tried and how it was pushed back.

Bounds (docs/agents.md, "Bounds"): what a result and its conversation record is spent from a
:class:`~ces_eval.core.engine.agent_scoring.Budget` as it is recorded, so that neither is ever built
past what the write path stores (MAX_RESOURCE_BYTES; for a result, less what its evaluation
takes, since the evaluation serves its last completed result), nor past its count limits; a
text past MAX_STRING_CHARS is refused as it arrives; what is left is checked by the write
path's own limits once played. An answer's JSON is read, parsed and recorded off the event loop
when large (:func:`ces_eval.offload.off_loop`), with the reader that lets other threads run
(:func:`ces_eval.transcoding.body.load_json`), and at most MAX_DECODED_ENTRIES values of it.

Secrets and reach (docs/agents.md, "Safety"): the endpoint's headers (tokens) are sent with
every call and written nowhere else: every piece of an answer quoted in an error, and every
error message, goes through :meth:`Agent._shown` (scrubbed of each header value sent, then cut).
Connections are made by :class:`_Connector`, which resolves the host at each connection and
refuses any address that reaches the server's own listeners; such a refusal and every failure
below HTTP read alike ("could not be reached"), so errors tell no closed port from an open one.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import functools
import json
import json.scanner
import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from ces_eval.contract import limits
from ces_eval.core.aip import names
from ces_eval.core.aip.ports import AgentUnreachable, AgentUnreadable, AgentUntrusted
from ces_eval.core.engine import agent_scoring, outcomes, recording
from ces_eval.core.engine.backoff import BACKOFF, PUSH_BACK_STATUSES, Backoff
from ces_eval.core.engine.pace import UNPACED
from ces_eval.core.resources.agent_endpoints import header_refusal, host_refusal, reaches_server
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    content_pb2,
    conversation_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
    session_service_pb2,
)
from ces_eval.offload import is_heavy, off_loop
from ces_eval.transcoding.body import Overflow, load_json, not_json

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from google.protobuf.message import Message

    from ces_eval.core.aip.ports import AgentHttp, HttpAnswer
    from ces_eval.core.engine.pace import Pace
    from ces_eval.core.resources.agent_endpoints import Endpoint

__all__ = [
    "MESSAGE_CHARS",
    "SHOWN_CHARS",
    "WELCOME_EVENT",
    "Agent",
    "AgentFailure",
    "agent_chunks",
]

_log = logging.getLogger(__name__)
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Conversation = conversation_pb2.Conversation
_ErrorInfo = evaluation_config_pb2.EvaluationErrorInfo
_Latency = _Result.ToolCallLatency
_Method = common_pb2.GoldenRunMethod
_Settings = evaluation_config_pb2.EvaluationSettings
_Observed = agent_scoring.Observed
_Budget = agent_scoring.Budget
_TOOL_ROUNDS = 8  # tool-response round trips at most in one turn
_SCENARIO_TURNS, _MAX_SCENARIO_TURNS = 10, 50  # user turns: when max_turns is 0, at most
_AGENT, _USER = "agent", "user"
_HALLUCINATION_LABELS = {1: "Justified", 0: "Not Justified", -1: "No Claim To Assess"}
# Characters of an answer (its body, a value of it, a parser's complaint about it) quoted in an
# error message, and of a whole error message the player writes (docs/agents.md, "Bounds").
SHOWN_CHARS = 200
MESSAGE_CHARS = 1_000
_MAX_VALUES = limits.MAX_DECODED_ENTRIES  # JSON values of one answer parsed at most
# Of a result's bound, kept for what the engine adds to it (its name, display name, run, config)
# and for its evaluation's derived fields that grow with it.
_RESERVE_BYTES = 64 * 1024
_RECORD_OVERHEAD = 8  # bytes of a list entry's tag and length, spent with each
_PARSED_CHARS = 4096  # characters of an output's text json_format reads (see Agent._taken)
# The event that wakes the agent when it starts a scenario's conversation
# (scenario_conversation_initiator AGENT; docs/agents.md, "Simulator").
WELCOME_EVENT = "welcome"
_INTERNAL = "The result could not be played: an unexpected failure (see the server log)."


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


def _encoded(document: Callable[[], object]) -> bytes:
    return json.dumps(document()).encode()


def _secret_forms(values: Iterable[str]) -> tuple[str, ...]:
    """Every header value as an error message could hold it: as sent, and escaped as Python's
    repr and JSON quote it; longest first, so a longer form is replaced whole."""
    forms = {
        form
        for value in values
        if value
        for form in (value, repr(value)[1:-1], json.dumps(value)[1:-1])
    }
    return tuple(sorted(forms, key=len, reverse=True))


def _where(error: BaseException) -> str:
    """Where ``error`` was raised: its innermost frame's file and line (never its text)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "unknown"
    return f"{PurePath(frames[-1].filename).name}:{frames[-1].lineno}"


class Agent:
    """An app's agent for one run: one HTTP session of the context's
    (:class:`~ces_eval.core.aip.ports.AgentHttp`, which connects to no address of the server's
    own ports: :func:`~ces_eval.core.resources.agent_endpoints.reaches_server`) and the
    endpoint's headers, timeout and answer size limit. Each call's answer and push back is
    told to the run's ``pace``, through which it waits out its back-offs, as ``backoff``
    says (:mod:`ces_eval.core.engine.backoff`; the server's :data:`BACKOFF` unless a test
    gives another); with a ``recorder``, its calls are recorded or replayed
    (:mod:`ces_eval.core.engine.recording`)."""

    def __init__(
        self,
        endpoint: Endpoint,
        allowed: Sequence[str],
        http: AgentHttp,
        *,
        pace: Pace = UNPACED,
        backoff: Backoff = BACKOFF,
        recorder: recording.Recorder | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._pace = pace  # the run's (docs/agents.md, "Concurrency")
        self._backoff = backoff
        self._recorder = recorder
        self._allowed = tuple(allowed)
        own_ports = endpoint.server_ports
        self._session = http.session(
            (endpoint.uri, endpoint.judge_uri, endpoint.simulator_uri),
            endpoint.timeout,
            lambda address, port: reaches_server(address, port, own_ports),
        )
        self._secrets = _secret_forms(endpoint.headers.values())
        self._window = SHOWN_CHARS + max((len(secret) for secret in self._secrets), default=0)
        # A header stored before its value was refused (docs/agents.md, "Safety").
        self._unsendable = next(
            (
                f"The endpoint's header {self._shown(name)!r} cannot be sent: {refusal} "
                "Set the endpoint's headers again."
                for name, value in endpoint.headers.items()
                if (refusal := header_refusal(value)) is not None
            ),
            None,
        )
        self._rooms: dict[str, int] = {}
        # The run's URLs that answered a call (an HTTP status, whatever it is), and for the
        # others, how many calls found no HTTP answer on any attempt (docs/agents.md,
        # "Back-pressure": a URL that never answered is called :attr:`Backoff.unanswered`
        # times, then no more in this run).
        self._heard: set[str] = set()
        self._unanswered: dict[str, int] = {}

    async def close(self) -> None:
        await self._session.close()

    # -- secrets ------------------------------------------------------------------------------

    def _shown(self, text: str, chars: int = SHOWN_CHARS) -> str:
        """``text`` as an error message may hold it: scrubbed of every header value sent, then
        cut to ``chars`` characters (marked "…"). The one place every quoted piece and every
        message goes through; scrubbed before it is cut, so no secret is left cut in two."""
        text = text[: chars + self._window]
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text if len(text) <= chars else text[:chars] + "…"

    def _described(self, value: object) -> str:
        """A JSON value of an answer as an error quotes it (a container by its kind: never
        walked nor repeated)."""
        if isinstance(value, dict):
            return "a JSON object"
        if isinstance(value, list):
            return "a JSON array"
        return repr(self._shown(value)) if isinstance(value, str) else self._shown(repr(value))

    def _integer(self, value: object, allowed: range, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise AgentFailure(
                f'The judge answered "{field}": {self._described(value)}; expected an integer '
                f"from {allowed.start} to {allowed.stop - 1}."
            )
        return value

    def _explanation(self, answer: dict[str, Any], who: recording.Who) -> str:
        value = answer.get("explanation", "")
        if not isinstance(value, str):
            raise AgentFailure(f'{who} answered an "explanation" that is {self._described(value)}.')
        return value

    # -- playing ------------------------------------------------------------------------------

    async def play(self, given: outcomes.Play, method: int) -> outcomes.Played:
        """Play ``given`` against the agent: its result (judged, named, timed) and the
        conversation it recorded; ERROR with the reason when a call failed, what was recorded
        would pass its bound, or anything else went wrong playing it."""
        recording.begin(given.evaluation.name, given.repetition)
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
        failure: AgentFailure | None = None
        try:
            result = await self._played(given, method, result, conversation, clock)
        except AgentFailure as failed:
            failure = failed
        except agent_scoring.Overflow as overflow:
            failure = AgentFailure(str(overflow))
        except Exception as error:  # noqa: BLE001 - the last resort: that result ends ERROR
            # No traceback: the texts of its exceptions could hold a header value.
            _log.error(
                "The result %s could not be played: %s at %s; it ends ERROR, the run goes on.",
                given.result_name,
                type(error).__name__,
                _where(error),
            )
            failure = AgentFailure(_INTERNAL)
        conversation.end_time.CopyFrom(clock.at)
        # The conversation is kept whatever happened, the result only when it was played.
        played = result if failure is None else None
        heavy = is_heavy(result, conversation)
        problem = await off_loop(heavy, self._unstorable, played, conversation)
        if failure is None and problem is not None:
            failure = AgentFailure(problem)
        if failure is not None:  # a result of its own: nothing played is kept in it
            result = _Result(name=given.result_name, execution_state=_Result.ERROR)
            result.create_time.CopyFrom(given.started)
            message = self._shown(str(failure), MESSAGE_CHARS)
            result.error_info.CopyFrom(
                _ErrorInfo(error_type=failure.error_type, error_message=message)
            )
            getattr(result, outcomes.kind(evaluation)).SetInParent()
        return outcomes.Played(result, conversation)

    async def _played(
        self,
        given: outcomes.Play,
        method: int,
        result: _Result,
        conversation: _Conversation,
        clock: outcomes.Clock,
    ) -> _Result:
        """The result of ``given``, COMPLETED and judged (see :meth:`play`)."""
        if self._unsendable is not None:
            raise AgentFailure(self._unsendable)
        evaluation = given.evaluation
        budgets = _Budgets(
            _Budget("result", await self._room(evaluation)),
            _Budget("conversation", limits.MAX_RESOURCE_BYTES - _RESERVE_BYTES),
        )
        if evaluation.WhichOneof("inputs") == "scenario":
            played = await self._scenario(given, conversation, clock, budgets)
            result.scenario_result.CopyFrom(played)
            if given.persona is not None:
                result.persona.CopyFrom(given.persona)
        else:
            golden = await self._golden(given, method, conversation, clock, budgets)
            result.golden_result.CopyFrom(golden)
        result.execution_state = _Result.COMPLETED
        return await off_loop(is_heavy(result), outcomes.judged, result, given)

    async def _room(self, evaluation: _Evaluation) -> int:
        """The bytes a result of ``evaluation`` may take: the bound of a stored resource less
        what the evaluation takes besides its last completed result, which this result may
        become, and :data:`_RESERVE_BYTES` (measured once per evaluation and run)."""
        room = self._rooms.get(evaluation.name)
        if room is None:
            taken = await off_loop(is_heavy(evaluation), _own_bytes, evaluation)
            room = max(0, limits.MAX_RESOURCE_BYTES - _RESERVE_BYTES - taken)
            self._rooms[evaluation.name] = room
        return room

    @staticmethod
    def _unstorable(result: _Result | None, conversation: _Conversation) -> str | None:
        """Why the played result (None: none) or its conversation would not be stored: the
        write path's limits (lengths, counts, Struct sizes and depths), the first one broken;
        a conversation that breaks one is kept without its turns."""
        problem = None
        records: list[tuple[Message, str]] = [(conversation, "conversation")]
        if result is not None:
            records.insert(0, (result, "result"))
        for record, what in records:
            violations = limits.check(record, what) or limits.size_violations(record, what)
            if violations:
                if record is conversation:
                    del conversation.turns[:]
                first = violations[0]
                problem = (
                    problem or f"The {what} would not be stored: {first.field}: {first.description}"
                )
        return problem

    # -- goldens -------------------------------------------------------------------------------

    async def _golden(
        self,
        given: outcomes.Play,
        method: int,
        conversation: _Conversation,
        clock: outcomes.Clock,
        budgets: _Budgets,
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
            observed, latencies = await self._exchange(
                session,
                [] if naive else history,
                inputs,
                _golden_responses(turn),
                budget=budgets.conversation,
            )
            latency = outcomes.duration(observed.millis)
            start, _ = clock.advance(latency)
            user = outcomes.user_message(turn)
            messages = []
            if user is not None:
                user.event_time.CopyFrom(start)
                budgets.conversation.spend(user, _RECORD_OVERHEAD)
                messages.append(user)
            if observed.chunks:
                agent = content_pb2.Message(role=_AGENT, chunks=observed.chunks)
                agent.event_time.CopyFrom(clock.at)
                messages.append(agent)
            conversation.turns.add(messages=messages)
            replay = golden.turn_replay_results.add(conversation=given.conversation_name)
            replay.turn_latency.CopyFrom(latency)
            replay.tool_call_latencies.extend(latencies)
            budgets.result.spend(replay, _RECORD_OVERHEAD)
            judged = await self._judge_turn(given, index, turn, observed, messages)
            await off_loop(
                is_heavy(turn),
                functools.partial(
                    agent_scoring.score_golden_turn,
                    turn,
                    observed,
                    replay,
                    judged.get("semanticSimilarity"),
                    budget=budgets.result,
                    switches=given.switches,
                ),
            )
            if "hallucination" in judged:
                score = judged["hallucination"]
                replay.hallucination_result.score = score
                replay.hallucination_result.label = _HALLUCINATION_LABELS[score]
                replay.hallucination_result.explanation = judged["explanation"]
                budgets.result.spend(replay.hallucination_result, _RECORD_OVERHEAD)
            history += [m for m in (user, _expected_message(turn)) if m is not None]
        return golden

    async def _judge_turn(
        self,
        given: outcomes.Play,
        index: int,
        turn: _Evaluation.GoldenTurn,
        observed: _Observed,
        messages: list[content_pb2.Message],
    ) -> dict[str, Any]:
        """The judge's answer for a turn with an agent response expectation ({} without a
        judge or such an expectation, or when the metrics config switches off both semantic
        similarity and hallucination for the turn), checked. The expected text is that of the
        expectations whose similarity is computed (of all, when none is)."""
        evaluation = given.evaluation
        switches = given.switches
        answers = [
            e for e in outcomes.expectations(turn) if e.WhichOneof("condition") == "agent_response"
        ]
        uri = self._endpoint.judge_uri
        wanted = switches.turn_similarity(answers) or switches.turn_hallucination(answers)
        if not uri or not answers or not wanted:
            return {}
        compared = [answer for answer in answers if switches.similarity(answer)] or answers
        expected = [agent_scoring.text_of(answer.agent_response) for answer in compared]

        def document() -> object:
            return {
                "kind": "TURN",
                "evaluation": evaluation.name,
                "turn": index,
                "expected": " ".join(expected),
                "observed": observed.said,
                "conversation": [_dict(m) for m in messages],
            }

        answer = await self._object(uri, document, recording.JUDGE, heavy=is_heavy(*messages))
        judged: dict[str, Any] = {}
        similarity = answer.get("semanticSimilarity")
        if similarity is not None:
            judged["semanticSimilarity"] = self._integer(similarity, range(5), "semanticSimilarity")
        hallucination = answer.get("hallucination")
        if hallucination is not None:
            judged["hallucination"] = self._integer(hallucination, range(-1, 2), "hallucination")
        judged["explanation"] = self._explanation(answer, recording.JUDGE)
        return judged

    # -- scenarios -----------------------------------------------------------------------------

    async def _scenario(
        self,
        given: outcomes.Play,
        conversation: _Conversation,
        clock: outcomes.Clock,
        budgets: _Budgets,
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
        budgets.result.spend(result, _RECORD_OVERHEAD)
        mocks = [
            e.tool_expectation.mock_tool_response
            for e in scenario.scenario_expectations
            if e.WhichOneof("expectation") == "tool_expectation"
            and e.tool_expectation.HasField("mock_tool_response")
        ]
        scene = _Scene(session, mocks, conversation, clock, budgets, result)
        if given.agent_starts:  # the agent speaks first, woken by an event (docs/agents.md)
            welcome = content_pb2.SessionInput(event=content_pb2.Event(event=WELCOME_EVENT))
            await self._exchanged(scene, welcome, by_user=False)
        limit = min(scenario.max_turns or _SCENARIO_TURNS, _MAX_SCENARIO_TURNS)
        ending: dict[str, Any] = {}
        for _ in range(limit):
            ending = await self._simulated(given, conversation)
            if ending.get("done"):
                break
            user_input = content_pb2.SessionInput()
            self._parse(ending.get("userInput"), user_input, recording.SIMULATOR, "userInput")
            await self._exchanged(scene, user_input, by_user=True)
        await off_loop(
            is_heavy(scenario) or is_heavy(*scene.answers),
            functools.partial(
                agent_scoring.score_scenario,
                scenario,
                scene.everything,
                scene.answers,
                scene.sent,
                result,
                budget=budgets.result,
            ),
        )
        await self._rubrics(given, conversation, result, budgets.result)
        if ending.get("done") and "userGoalSatisfied" in ending:
            met = ending["userGoalSatisfied"] is True
            satisfaction = result.user_goal_satisfaction_result
            satisfaction.score = 1 if met else 0
            satisfaction.label = "Satisfied" if met else "Not satisfied"
            satisfaction.explanation = self._explanation(ending, recording.SIMULATOR)
            budgets.result.spend(satisfaction, _RECORD_OVERHEAD)
        if ending.get("done") and "taskCompleted" in ending:
            result.task_completed = ending["taskCompleted"] is True
        return result

    async def _exchanged(
        self, scene: _Scene, sent_input: content_pb2.SessionInput, *, by_user: bool
    ) -> None:
        """One exchange of ``scene`` with the agent, recorded as a turn of its conversation:
        the user's input (``by_user``; an event is no message) and the agent's answer."""
        budgets = scene.budgets
        observed, latencies = await self._exchange(
            scene.session,
            [],
            [sent_input],
            list(scene.mocks),
            budget=budgets.conversation,
            sent=scene.sent,
        )
        start, _ = scene.clock.advance(outcomes.duration(observed.millis))
        messages = []
        if by_user:
            user = content_pb2.Message(role=_USER, chunks=outcomes.input_chunks(sent_input))
            user.event_time.CopyFrom(start)
            budgets.conversation.spend(user, _RECORD_OVERHEAD)
            messages.append(user)
        if observed.chunks:
            agent = content_pb2.Message(role=_AGENT, chunks=observed.chunks)
            agent.event_time.CopyFrom(scene.clock.at)
            messages.append(agent)
            scene.answers.append(agent)
        if messages:
            scene.conversation.turns.add(messages=messages)
        result = scene.result
        result.tool_call_latencies.extend(latencies)
        budgets.result.count(len(result.tool_call_latencies), "tool call latencies")
        for latency in latencies:
            budgets.result.spend(latency, _RECORD_OVERHEAD)
        _merge(scene.everything, observed)

    async def _simulated(self, given: outcomes.Play, conversation: _Conversation) -> dict[str, Any]:
        """The simulator's next move: ``{"userInput": SessionInput}`` or ``{"done": true,
        ...}``."""

        def document() -> object:
            found: dict[str, Any] = {
                "evaluation": given.evaluation.name,
                "scenario": _dict(given.evaluation.scenario),
                "conversation": [_dict(m) for turn in conversation.turns for m in turn.messages],
                "executionMode": _mode(given),
            }
            if given.persona is not None:
                found["persona"] = _dict(given.persona)
            return found

        heavy = is_heavy(given.evaluation, conversation)
        try:
            answer = await self._object(
                self._endpoint.simulator_uri, document, recording.SIMULATOR, heavy=heavy
            )
            if not answer.get("done") and "userInput" not in answer:
                raise AgentFailure('The simulator answered neither "userInput" nor "done": true.')
        except AgentFailure as failure:
            raise AgentFailure(str(failure), _ErrorInfo.USER_SIMULATION_FAILURE) from None
        return answer

    async def _rubrics(
        self,
        given: outcomes.Play,
        conversation: _Conversation,
        result: _Result.ScenarioResult,
        budget: _Budget,
    ) -> None:
        """Score each rubric with the judge (none without one)."""
        evaluation = given.evaluation
        uri = self._endpoint.judge_uri
        if not uri:
            return
        heavy = is_heavy(conversation)
        messages = await off_loop(
            heavy, lambda: [_dict(m) for turn in conversation.turns for m in turn.messages]
        )
        for rubric in evaluation.scenario.rubrics:
            document = functools.partial(_rubric, evaluation.name, rubric, messages, _mode(given))
            answer = await self._object(uri, document, recording.JUDGE, heavy=heavy)
            score = answer.get("score")
            if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
                raise AgentFailure('The judge answered no "score" between 0 and 1 for a rubric.')
            explanation = self._explanation(answer, recording.JUDGE)
            outcome = result.rubric_outcomes.add(
                rubric=rubric, score=score, score_explanation=explanation
            )
            budget.spend(outcome, _RECORD_OVERHEAD)

    # -- calls ---------------------------------------------------------------------------------

    async def _exchange(
        self,
        session: str,
        history: Sequence[content_pb2.Message],
        inputs: Sequence[content_pb2.SessionInput],
        responses: list[content_pb2.ToolResponse],
        *,
        budget: _Budget,
        sent: list[content_pb2.ToolResponse] | None = None,
    ) -> tuple[_Observed, list[_Latency]]:
        """One turn in ``session``: its inputs, then ``responses`` (taken as used, ``sent``
        gathers them) to the tools the agent asks for; what the agent did (its chunks spent
        from ``budget``, the conversation's) and the tool latencies of its traces."""
        config = session_service_pb2.SessionConfig(session=session)
        config.historical_contexts.extend(history)
        observed = _Observed()
        latencies: list[_Latency] = []
        waiting = agent_scoring.ByTool(responses)
        started = time.monotonic()
        given = list(inputs)
        heavy = is_heavy(config)
        for _ in range(_TOOL_ROUNDS + 1):
            request = session_service_pb2.RunSessionRequest(config=config, inputs=given)
            body = await self._answered(
                self._endpoint.uri, functools.partial(_dict, request), recording.AGENT, heavy=heavy
            )
            heavy = is_heavy() or body.size > limits.LOOP_BYTES
            asked = await off_loop(heavy, self._taken, body, observed, latencies, budget)
            replies = [reply for call in asked if (reply := _reply(call, waiting)) is not None]
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
            heavy = is_heavy(*replies)
        observed.millis = max(1, round((time.monotonic() - started) * 1000))
        return observed, latencies

    def _taken(
        self, body: _Body, observed: _Observed, latencies: list[_Latency], budget: _Budget
    ) -> list[content_pb2.ToolCall]:
        """The agent's answer ``body`` read, parsed and recorded (see :func:`_record`): the
        tool calls it asks the client for."""
        return _record(self._response(body), observed, latencies, budget)

    def _response(self, body: _Body) -> session_service_pb2.RunSessionResponse:
        """The agent's answer ``body`` read and parsed as a RunSessionResponse."""
        document = self._loaded(body, recording.AGENT)
        # json_format checks each string with a regular expression, in one call that holds the
        # interpreter (11 ms for 262,144 characters): the outputs' texts, where an answer's
        # bulk is, are set on the message instead (its setter refuses what is not Unicode).
        texts: list[tuple[int, str]] = []
        outputs = document.get("outputs")
        if isinstance(outputs, list):
            outputs = list(outputs)
            for index, output in enumerate(outputs):
                text = output.get("text") if isinstance(output, dict) else None
                if isinstance(text, str) and len(text) > _PARSED_CHARS:
                    texts.append((index, text))
                    outputs[index] = {**output, "text": ""}
            document = {**document, "outputs": outputs}
        answer = session_service_pb2.RunSessionResponse()
        self._parse(document, answer, recording.AGENT, "RunSessionResponse")
        for index, text in texts:
            try:
                answer.outputs[index].text = text
            except (ValueError, UnicodeError):
                raise AgentFailure(
                    f"The agent's answer is not a RunSessionResponse: outputs[{index}].text is "
                    "not valid Unicode."
                ) from None
        return answer

    async def converse(
        self, request: session_service_pb2.RunSessionRequest
    ) -> session_service_pb2.RunSessionResponse:
        """One call of a client's session (SessionService, docs/sessions.md): ``request`` sent
        to the agent as it is, its answer read and parsed with every bound, host rule, push
        back and header secrecy of a run's calls; AgentFailure (its message scrubbed) when
        the call fails."""
        if self._unsendable is not None:
            raise AgentFailure(self._unsendable)
        heavy = is_heavy(request)
        body = await self._answered(
            self._endpoint.uri, functools.partial(_dict, request), recording.AGENT, heavy=heavy
        )
        try:
            return await off_loop(heavy or body.size > limits.LOOP_BYTES, self._response, body)
        except AgentFailure as failure:
            raise AgentFailure(self._shown(str(failure), MESSAGE_CHARS)) from None

    async def _object(
        self, uri: str, document: Callable[[], object], who: recording.Who, *, heavy: bool
    ) -> dict[str, Any]:
        """POST ``document()`` as JSON to ``uri``; the JSON object answered."""
        body = await self._answered(uri, document, who, heavy=heavy)
        return await off_loop(
            heavy or is_heavy() or body.size > limits.LOOP_BYTES, self._loaded, body, who
        )

    async def _answered(
        self, uri: str, document: Callable[[], object], who: recording.Who, *, heavy: bool
    ) -> _Body:
        """:meth:`_call`, or its recording: recorded, or replayed without calling, as the
        endpoint's recording mode says (:mod:`ces_eval.core.engine.recording`)."""
        recorder = self._recorder
        if recorder is None:
            return await self._call(uri, document, who, heavy=heavy)

        async def call(built: Callable[[], object]) -> bytes:
            body = await self._call(uri, built, who, heavy=heavy)
            return await off_loop(body.size > limits.LOOP_BYTES, b"".join, body.parts)

        try:
            answer = await recorder.answer(who, document, call, heavy=heavy)
        except recording.Unrecorded as unrecorded:
            raise AgentFailure(str(unrecorded)) from None
        return _Body([answer], len(answer))

    async def _call(
        self, uri: str, document: Callable[[], object], who: recording.Who, *, heavy: bool
    ) -> _Body:
        """POST ``document()`` as JSON to ``uri`` (encoded once, off the loop when ``heavy``);
        the body answered (see :meth:`_read`). A call pushed back is made again, the same
        bytes, as the agent's :class:`~ces_eval.core.engine.backoff.Backoff` says, each
        back-off waited out in the run's pace (docs/agents.md, "Back-pressure"); what still
        fails says how often it was tried."""
        refusal = host_refusal(uri, self._allowed)
        if refusal is not None:
            raise AgentFailure(f"{who} at {self._shown(uri)!r} was not called: {refusal}")
        backoff = self._backoff
        unanswered = self._unanswered.get(uri, 0)
        if unanswered >= backoff.unanswered and uri not in self._heard:
            raise AgentFailure(
                f"{who} at {self._shown(uri)!r} was not called: {unanswered} of this run's "
                f"calls to it got no HTTP answer in {backoff.attempts} attempts each, and none "
                "was ever answered."
            )
        body = await off_loop(heavy, _encoded, document)
        pushes: list[_PushedBack] = []
        while True:
            try:
                return await self._attempt(uri, body, who)
            except _PushedBack as pushed:
                pushes.append(pushed)
            except AgentFailure as failure:
                if not pushes:
                    raise
                raise AgentFailure(f"{str(failure).rstrip('.')} {self._after(pushes)}") from None
            if len(pushes) >= backoff.attempts:
                if all(push.status is None for push in pushes):
                    self._unanswered[uri] = self._unanswered.get(uri, 0) + 1
                raise AgentFailure(self._exhausted(uri, who, pushes))
            # Cancellable: a run cancelled meanwhile ends here (docs/agents.md).
            await self._pace.pause(backoff.delay(len(pushes), pushes[-1].retry_after))

    async def _attempt(self, uri: str, body: bytes, who: recording.Who) -> _Body:
        """One POST of ``body`` to ``uri``, told to the run's pace (an answer, or a push
        back): the body answered; :class:`_PushedBack` when pushed back, AgentFailure for
        every other failure."""
        endpoint = self._endpoint
        # Compressed answers are not read (a small one can inflate past any bound in one step).
        headers = {
            **endpoint.headers,
            "content-type": "application/json",
            "accept-encoding": "identity",
        }
        try:
            async with (
                asyncio.timeout(endpoint.timeout),
                self._session.post(uri, body, headers) as answer,
            ):
                self._heard.add(uri)
                if answer.status not in PUSH_BACK_STATUSES:
                    self._pace.answered()
                return await self._read(answer, endpoint.max_response_bytes, who)
        except TimeoutError:
            # Not tried again: it waited its timeout already (ces_eval.core.engine.backoff).
            raise AgentFailure(
                f"{who} did not answer within {endpoint.timeout:g} seconds."
            ) from None
        except _PushedBack:
            self._pace.pushed_back()
            raise
        except AgentUntrusted:
            raise AgentFailure(
                f"{who}'s TLS certificate could not be verified: the server verifies https "
                "against --agent-ca-file's authorities, or the default set without it."
            ) from None
        except AgentUnreachable:
            # One kind for a refused address, a closed port, a reset and an open port that
            # spoke no HTTP: tried alike, said alike (docs/agents.md, "Safety").
            self._pace.pushed_back()
            raise _PushedBack(None) from None
        except AgentUnreadable:
            raise AgentFailure(f"{who} answered something that could not be read.") from None

    def _exhausted(self, uri: str, who: recording.Who, pushes: Sequence[_PushedBack]) -> str:
        """Why a call pushed back on every attempt failed: how often each way, and the last
        answer's excerpt."""
        last = pushes[-1]
        at = f" at {self._shown(uri)!r}" if any(p.status is None for p in pushes) else ""
        kinds = _kinds(pushes)
        if last.status is not None:
            tail = f"; last: HTTP {last.status}: {last.excerpt!r}"
        else:
            tail = "; last: no HTTP answer." if len(kinds) > 1 else "."
        return f"{who}{at} {', '.join(kinds)} ({len(pushes)} attempts in all){tail}"

    def _after(self, pushes: Sequence[_PushedBack]) -> str:
        """What a failure after push backs adds: which attempt failed, and how the earlier
        ones were pushed back."""
        attempt = len(pushes) + 1
        told = ", ".join(_kinds(pushes))
        return f"(on attempt {attempt} of {self._backoff.attempts}; the earlier ones {told})."

    async def _read(self, response: HttpAnswer, limit: int, who: recording.Who) -> _Body:
        """The body of a 2xx answer of at most ``limit`` bytes; :class:`_PushedBack` for a
        push back (HTTP 429 or 503, compressed or not), AgentFailure for anything else (an
        error's body quoted at most :data:`SHOWN_CHARS` long, scrubbed)."""
        status = response.status
        if 300 <= status < 400:
            location = self._shown(response.header("location"))
            raise AgentFailure(
                f"{who} answered HTTP {status} (a redirect to {location!r}); redirects are not "
                "followed."
            )
        encoding = response.header("content-encoding").strip().lower()
        if encoding not in ("", "identity") and status not in PUSH_BACK_STATUSES:
            raise AgentFailure(
                f"{who} answered a compressed body ({self._shown(encoding)!r}); only "
                "uncompressed ones are read."
            )
        parts: list[bytes] = []
        size = 0
        async for chunk in response.chunks():
            size += len(chunk)
            if size > limit:
                raise AgentFailure(f"{who} answered more than {limit} bytes.")
            parts.append(chunk)
            if status >= 300 and size >= self._window:
                break
        if status >= 300:
            data = b"".join(parts)[: self._window]
            shown = self._shown(data.decode("utf-8", "replace").strip())
            if status in PUSH_BACK_STATUSES:
                raise _PushedBack(status, shown, response.header("retry-after"))
            raise AgentFailure(f"{who} answered HTTP {status}: {shown!r}")
        return _Body(parts, size)

    def _loaded(self, body: _Body, who: recording.Who) -> dict[str, Any]:
        """The JSON object ``body`` holds (at most :data:`_MAX_VALUES` values, nested no
        deeper than Python recurses); AgentFailure otherwise."""
        try:
            answer = _json(b"".join(body.parts))
        except _LongString:
            raise AgentFailure(
                f"{who} answered a string of more than {limits.MAX_STRING_CHARS} characters; "
                f"at most {limits.MAX_STRING_CHARS} are read."
            ) from None
        except Overflow:
            raise AgentFailure(
                f"{who} answered a JSON array or object of more than "
                f"{limits.MAX_DECODED_ENTRIES} entries."
            ) from None
        except RecursionError:
            raise AgentFailure(f"{who} answered JSON nested too deeply.") from None
        except ValueError as error:
            raise AgentFailure(
                f"{who} answered something that is not JSON ({self._shown(str(error))})."
            ) from None
        if not isinstance(answer, dict):
            raise AgentFailure(f"{who} answered JSON that is not an object.")
        problem = _oversized(answer)
        if problem is not None:
            raise AgentFailure(f"{who} answered {problem}.")
        return answer

    def _parse(self, document: object, message: Message, who: recording.Who, what: str) -> None:
        if not isinstance(document, dict):
            raise AgentFailure(f"{who}'s answer has no {what} object.")
        try:
            json_format.ParseDict(document, message, ignore_unknown_fields=True)
        except json_format.ParseError as error:
            raise AgentFailure(
                f"{who}'s answer is not a {what}: {self._shown(str(error))}"
            ) from None


class _PushedBack(Exception):
    """An attempt that was pushed back (:mod:`ces_eval.core.engine.backoff`): the status
    answered and the excerpt of its body (as :meth:`Agent._shown` cut it) and its
    ``Retry-After`` ("" when absent); status None when no HTTP answer came."""

    def __init__(self, status: int | None, excerpt: str = "", retry_after: str = "") -> None:
        super().__init__(status)
        self.status = status
        self.excerpt = excerpt
        self.retry_after = retry_after

    @property
    def kind(self) -> str:
        """How it was pushed back, as a message says it."""
        if self.status is None:
            return "could not be reached (no HTTP answer)"
        return f"answered HTTP {self.status}"


def _kinds(pushes: Iterable[_PushedBack]) -> list[str]:
    """Each way of ``pushes`` and how often, in the order they came ("answered HTTP 503
    twice")."""
    counted = collections.Counter(pushed.kind for pushed in pushes)
    return [f"{kind} {_times(count)}" for kind, count in counted.items()]


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


@dataclass(frozen=True)
class _Body:
    """An answer's body as read: its chunks (joined where it is parsed, off the event loop
    when large: 60 MB take ~15 ms to copy) and its size."""

    parts: list[bytes]
    size: int


class _LongString(Exception):
    """A JSON string of an answer is longer than any write accepts (see :func:`_json`)."""


# Bytes of an answer json.loads (C) reads in one call: it holds the interpreter for all of it,
# 2 to 5 ms a megabyte (64 MiB, the largest answer an endpoint may allow: 0.1 to 0.3 s).
_PARSED_AT_ONCE = 4 * 2**20
# A JSON string's rest after its opening quote: to its closing quote.
_STRING_REST = re.compile(rb'(?:[^"\\]++|\\.)*+"')
# Bytes that hold more than MAX_STRING_CHARS characters whatever they are (\uXXXX: 6 a
# character).
_LONG_STRING_BYTES = 6 * limits.MAX_STRING_CHARS + 1


def _json(data: bytes) -> object:
    """The JSON document ``data``, read so that no one call holds the interpreter for long:
    :func:`~ces_eval.transcoding.body.load_json` up to :data:`_PARSED_AT_ONCE` bytes; a
    larger one has each string found first, each look bounded (:class:`_LongString` for one
    that no write would accept), and is then read by json's Python scanner, which hands each
    string, now bounded, to the C one."""
    if len(data) <= _PARSED_AT_ONCE:
        return load_json(data)
    at = data.find(b'"')
    while at >= 0:
        string = _STRING_REST.match(data, at + 1, at + 1 + _LONG_STRING_BYTES)
        if string is None:
            raise _LongString
        at = data.find(b'"', string.end())
    decoder = codecs.getincrementaldecoder(json.detect_encoding(data))("surrogatepass")
    text = "".join(
        decoder.decode(data[start : start + _PARSED_AT_ONCE], final=False)
        for start in range(0, len(data), _PARSED_AT_ONCE)
    ) + decoder.decode(b"", final=True)
    reader = json.JSONDecoder(parse_constant=not_json)
    # json's Python scanner, which hands each (bounded) string to the C one.
    # Neither scan_once nor py_make_scanner is in typeshed.
    reader.scan_once = json.scanner.py_make_scanner(reader)  # type: ignore[attr-defined]  # untyped
    return reader.decode(text)


class _Budgets:
    """The budgets of one played result and its conversation."""

    def __init__(self, result: _Budget, conversation: _Budget) -> None:
        self.result = result
        self.conversation = conversation


@dataclass
class _Scene:
    """A scenario being played against the agent: its session, the mock tool responses, what
    it records (its conversation, on its clock, within its budgets, and its result), and what
    the agent did so far (everything observed, its answers, the responses it was sent)."""

    session: str
    mocks: list[content_pb2.ToolResponse]
    conversation: _Conversation
    clock: outcomes.Clock
    budgets: _Budgets
    result: _Result.ScenarioResult
    everything: _Observed = field(default_factory=_Observed)
    answers: list[content_pb2.Message] = field(default_factory=list)
    sent: list[content_pb2.ToolResponse] = field(default_factory=list)


def _rubric(evaluation: str, rubric: str, messages: list[dict[str, Any]], mode: str) -> object:
    """What the judge is sent for one rubric (docs/agents.md, "Judge")."""
    return {
        "kind": "RUBRIC",
        "evaluation": evaluation,
        "rubric": rubric,
        "conversation": messages,
        "executionMode": mode,
    }


def _mode(given: outcomes.Play) -> str:
    """The scenario's execution mode by name, as the simulator and the judge are sent it."""
    return _Settings.ScenarioExecutionMode.Name(given.execution_mode)


def _own_bytes(evaluation: _Evaluation) -> int:
    """What ``evaluation`` takes as served, but for its last completed result."""
    return evaluation.ByteSize() - evaluation.last_completed_result.ByteSize()


def _oversized(document: dict[str, Any]) -> str | None:
    """What in ``document`` is past what the player reads (None: nothing): more than
    :data:`_MAX_VALUES` values, or a string (or key) longer than MAX_STRING_CHARS, which the
    write path would refuse anyway and whose parse holds the interpreter (json_format scans
    each string in one call: 0.18 s for 4.1 million characters)."""
    left = _MAX_VALUES
    pending: list[object] = [document]
    while pending:
        item = pending.pop()
        children: Iterable[object] = ()
        if isinstance(item, dict):
            children = item.values()
            keys: Iterable[str] = item
        elif isinstance(item, list):
            children, keys = item, ()
        else:
            continue
        left -= len(item)
        if left < 0:
            return f"more than {_MAX_VALUES} JSON values"
        for text in keys:
            if len(text) > limits.MAX_STRING_CHARS:
                return (
                    f"a key of {len(text)} characters; at most {limits.MAX_STRING_CHARS} are read"
                )
        for child in children:
            if isinstance(child, str):
                if len(child) > limits.MAX_STRING_CHARS:
                    return (
                        f"a string of {len(child)} characters; at most "
                        f"{limits.MAX_STRING_CHARS} are read"
                    )
            elif isinstance(child, dict | list):
                pending.append(child)
    return None


def _record(
    answer: session_service_pb2.RunSessionResponse,
    observed: _Observed,
    latencies: list[_Latency],
    budget: _Budget,
) -> list[content_pb2.ToolCall]:
    """Add what ``answer`` shows to ``observed`` (see :class:`_Recorder`) and its traces' tool
    latencies to ``latencies``; the tool calls the agent asks the client for."""
    recorder = _Recorder(observed, budget)
    asked: list[content_pb2.ToolCall] = []
    for output in answer.outputs:
        kind = output.WhichOneof("output_type")
        if kind == "text":
            recorder.text(output.text)
        elif kind == "tool_calls":
            calls = output.tool_calls.tool_calls
            if len(asked) + len(calls) > limits.MAX_REPEATED:
                raise AgentFailure(_TOO_MANY_CALLS)
            asked += calls
            for call in calls:
                recorder.called(call)
        elif kind == "payload":
            recorder.recorded(content_pb2.Chunk(payload=output.payload))
        info = output.diagnostic_info
        for message in info.messages:
            if message.role != _USER:
                recorder.reported(message)
        if info.HasField("root_span"):
            _tool_latencies(info.root_span, latencies)
    return asked


def agent_chunks(
    answer: session_service_pb2.RunSessionResponse, budget: agent_scoring.Budget
) -> list[content_pb2.Chunk]:
    """What a conversation records of ``answer`` as the agent's message (its texts, tool calls,
    payloads and reported transfers, as a run records them), spent from ``budget``."""
    observed = _Observed()
    _record(answer, observed, [], budget)
    return observed.chunks


_TOO_MANY_CALLS = f"The agent asked for more than {limits.MAX_REPEATED} tool calls in one turn."


class _Recorder:
    """Records into what the agent did in a turn (``observed``), each chunk spent from
    ``budget``: no text longer than MAX_STRING_CHARS, at most MAX_REPEATED calls and chunks."""

    def __init__(self, observed: _Observed, budget: _Budget) -> None:
        self.observed = observed
        self.budget = budget
        self.seen = {call.id for call in observed.calls if call.id}

    def recorded(self, chunk: content_pb2.Chunk) -> None:
        self.budget.spend(chunk, _RECORD_OVERHEAD)
        self.observed.chunks.append(chunk)
        self.budget.count(len(self.observed.chunks), "chunks in one message of the agent")

    def text(self, text: str) -> None:
        if len(text) > limits.MAX_STRING_CHARS:
            raise AgentFailure(
                f"The agent answered a text of {len(text)} characters; at most "
                f"{limits.MAX_STRING_CHARS} are recorded."
            )
        self.observed.texts.append(text)
        self.recorded(content_pb2.Chunk(text=text))

    def called(self, call: content_pb2.ToolCall) -> None:
        """A tool call, once per id."""
        if call.id and call.id in self.seen:
            return
        self.seen.add(call.id)
        self.observed.calls.append(call)
        if len(self.observed.calls) > limits.MAX_REPEATED:
            raise AgentFailure(_TOO_MANY_CALLS)
        self.recorded(content_pb2.Chunk(tool_call=call))

    def reported(self, message: content_pb2.Message) -> None:
        """A message of the agent's diagnostic info: its transfers and tool calls."""
        for chunk in message.chunks:
            data = chunk.WhichOneof("data")
            if data == "agent_transfer":
                self.observed.transfers.append(chunk.agent_transfer.target_agent)
                self.recorded(chunk)
            elif data == "tool_call":
                self.called(chunk.tool_call)


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
    call: content_pb2.ToolCall, waiting: agent_scoring.ByTool[content_pb2.ToolResponse]
) -> content_pb2.ToolResponse | None:
    """The response to ``call`` (taken from ``waiting``), with the call's id."""
    response = waiting.take(agent_scoring.identity(call))
    if response is None:
        return None
    reply = content_pb2.ToolResponse()
    reply.CopyFrom(response)
    reply.id = call.id
    return reply


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


def _tool_latencies(root: Any, into: list[_Latency]) -> None:  # noqa: ANN401 - a trace Span
    """Add to ``into`` one latency per span of ``root``'s trace (at any depth, in pre-order)
    whose ``attributes.tool`` names a tool: its start, end and duration (end minus start when
    it gives none). A stack walk, linear in the spans (each span's children were prepended to a
    list it popped from the front: 400,000 spans took 30 s); at most MAX_REPEATED latencies in
    a turn."""
    pending = [root]
    while pending:
        span = pending.pop()
        pending.extend(reversed(span.child_spans))
        tool = span.attributes.fields.get("tool")
        if tool is None or tool.WhichOneof("kind") != "string_value" or not tool.string_value:
            continue
        if len(into) >= limits.MAX_REPEATED:
            raise AgentFailure(
                f"The agent's traces name more than {limits.MAX_REPEATED} tool executions in "
                "one turn."
            )
        latency = _Latency(
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
        into.append(latency)
