"""Record and replay (docs/agents.md, "Record and replay"): the player's side of an app's
agent recordings (:mod:`ces_eval.core.resources.agent_recordings`), as its agent endpoint's
``recording_mode`` asks.

The player (:class:`ces_eval.core.engine.agents.Agent`) hands every call to its agent, judge
and simulator to :meth:`Recorder.answer`, with the call itself: RECORD makes the call and
records the exchange; REPLAY answers from the recording of the same exchange and calls nothing
(a call with none ends its result ERROR, naming it); REPLAY_OR_RECORD answers from a recording
when there is one, else calls and records. An exchange's key is who was called, the
evaluation, the repetition, the call's position among its repetition's calls (counted from
:func:`begin`, which the player calls as it starts each repetition) and the request as keyed
(:func:`~ces_eval.core.resources.agent_recordings.keyed`): a repetition replayed makes the same
calls in the same order, since each answer is the recorded one.

What is recorded: the request as keyed and the answer's body as received (a 2xx answer: a call
that fails records nothing). Never a header's value: an exchange whose request or answer holds
one is not recorded, and its result ends ERROR saying so; so does one too large to store, or
one that would make the app hold more than MAX_APP_RECORDINGS. Recordings are written in
batches (:data:`_BATCH`, :data:`_BATCH_BYTES`), each one transaction, and the rest when the
run's player closes (:meth:`Recorder.close`).
"""

from __future__ import annotations

import contextvars
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.contract import limits
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import agent_recordings
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.offload import off_loop

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ces_eval.core.aip.context import Context
    from ces_eval.core.resources.agent_endpoints import Endpoint

__all__ = ["AGENT", "JUDGE", "SIMULATOR", "Recorder", "Unrecorded", "Who", "begin", "of_run"]

_Mode = emulator_pb2.AgentEndpoint.RecordingMode
_Recording = agent_recordings.AgentRecording
_Callee = agent_recordings.Callee
_BATCH = 64  # recordings written in one transaction at most
_BATCH_BYTES = 8 * 2**20  # or as many as hold this many bytes
# A recording's fields besides its request and answer (name, evaluation, run, stamps), at most.
_ENVELOPE = 2048


@dataclass(frozen=True)
class Who:
    """Who a call goes to: the callee its recordings are keyed by, and how messages name it
    (``str(who)``: "The agent")."""

    callee: agent_recordings.Callee.ValueType
    text: str

    def __str__(self) -> str:
        return self.text


AGENT = Who(_Callee.AGENT, "The agent")
JUDGE = Who(_Callee.JUDGE, "The judge")
SIMULATOR = Who(_Callee.SIMULATOR, "The simulator")


class Unrecorded(Exception):
    """A call that was neither answered from a recording nor recorded: the message says why
    (and names no header's value). Its result ends ERROR with it."""


@dataclass
class _Place:
    """The repetition being played and how many calls it made so far."""

    evaluation: str
    repetition: int
    calls: int = 0


# The repetition the current task plays (each repetition is played by one task at a time).
_PLACE: contextvars.ContextVar[_Place | None] = contextvars.ContextVar(
    "recording_place", default=None
)


def begin(evaluation: str, repetition: int) -> None:
    """The current task starts playing ``repetition`` of ``evaluation``: its calls are
    counted from 0."""
    _PLACE.set(_Place(evaluation, repetition))


def _forms(values: Mapping[str, str]) -> tuple[bytes, ...]:
    """Every header value as a request or an answer could hold it: as sent, and as JSON
    escapes it."""
    found = {
        form.encode()
        for value in values.values()
        if value
        for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1])
    }
    return tuple(sorted(found, key=len, reverse=True))


class Recorder:
    """The recordings of one ``run`` played against ``endpoint``, in its recording mode (not
    UNSPECIFIED): looked up, written in batches. Its headers' values are never recorded, and
    a replayed answer is held to its max_response_bytes as a call's is."""

    def __init__(self, context: Context, run: str, endpoint: Endpoint) -> None:
        self._storage = context.storage
        self._context = context
        self._app = run.rsplit("/evaluationRuns/", 1)[0]
        self._run = run
        self._mode = endpoint.recording_mode
        self._secrets = _forms(endpoint.headers)
        self._limit = endpoint.max_response_bytes
        self._pending: list[_Recording] = []
        self._pending_bytes = 0
        self._held: int | None = None  # the app's recordings, once counted
        # Whether what it records is likely new: a miss of REPLAY_OR_RECORD is, and so is
        # everything of an app that held no recordings when the run began to record.
        self._fresh = self._mode == _Mode.REPLAY_OR_RECORD

    @property
    def mode(self) -> _Mode.ValueType:
        return self._mode

    async def answer(
        self,
        who: Who,
        document: Callable[[], object],
        call: Callable[[Callable[[], object]], Awaitable[bytes]],
        *,
        heavy: bool,
    ) -> bytes:
        """The answer to the call of ``who`` with ``document()``: from its recording, or
        ``call(document)``'s, recorded (see the module). Unrecorded when REPLAY finds no
        recording, or when the exchange cannot be recorded."""
        place = _PLACE.get()
        if place is None:  # not within a repetition (no key): called as without recording
            return await call(document)
        position = place.calls
        place.calls += 1
        built = await off_loop(heavy, document)
        request = await off_loop(heavy, agent_recordings.keyed, built, self._app)
        callee = who.callee
        found = agent_recordings.recording_id(
            callee, place.evaluation, place.repetition, position, request
        )
        name = f"{self._app}/agentRecordings/{found}"
        if self._mode in (_Mode.REPLAY, _Mode.REPLAY_OR_RECORD):
            stored = await self._storage.get_row(agent_recordings.TABLE, name)
            if stored is not None:
                if len(stored.answer) > self._limit:  # as the call would be refused now
                    raise Unrecorded(
                        f"{who} answered more than {self._limit} bytes (its recorded answer; "
                        "the endpoint's max_response_bytes)."
                    )
                return stored.answer
            if self._mode == _Mode.REPLAY:
                raise Unrecorded(
                    f"{who} was not called: the agent endpoint replays recordings, and none "
                    f"answers call {position} (0 is the first) of repetition "
                    f"{place.repetition + 1} of {place.evaluation} ({name})."
                )
        answer = await call(lambda: built)
        recording = _Recording(
            name=name,
            callee=callee,
            evaluation=place.evaluation,
            repetition=place.repetition,
            position=position,
            request=request,
            answer=answer,
            evaluation_run=self._run,
            etag=new_etag(),
        )
        recording.create_time.CopyFrom(now())
        problem = await off_loop(heavy or len(answer) > limits.LOOP_BYTES, self._problem, recording)
        if problem is not None:
            raise Unrecorded(f"{who}'s answer to call {position} was not recorded: {problem}")
        await self._add(recording)
        return answer

    def _problem(self, recording: _Recording) -> str | None:
        """Why ``recording`` is not stored (None: it is): it holds a header's value, or it
        is larger than any stored resource."""
        request = recording.request.encode()
        for secret in self._secrets:
            if secret in request or secret in recording.answer:
                return "the exchange holds a value of the endpoint's headers, never recorded."
        size = len(request) + len(recording.answer) + _ENVELOPE
        if size > limits.MAX_RESOURCE_BYTES:
            return (
                f"the exchange takes about {size} bytes, more than the "
                f"{limits.MAX_RESOURCE_BYTES} a recording may (lower the endpoint's "
                "max_response_bytes, or record without this evaluation)."
            )
        return None

    async def _add(self, recording: _Recording) -> None:
        """Keep ``recording`` to write with its batch, within the app's bound."""
        if self._held is None:
            self._held = await agent_recordings.count(self._context, self._app)
            self._fresh = self._fresh or self._held == 0
        if self._held + len(self._pending) >= limits.MAX_APP_RECORDINGS:
            raise Unrecorded(
                f"The app holds {limits.MAX_APP_RECORDINGS} recordings, as many as it may; "
                "this exchange was not recorded. Purge some (PurgeAgentRecordings)."
            )
        self._pending.append(recording)
        self._pending_bytes += recording.ByteSize()
        if len(self._pending) >= _BATCH or self._pending_bytes >= _BATCH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        """Write the recordings kept so far (one transaction)."""
        batch, self._pending, self._pending_bytes = self._pending, [], 0
        added = await agent_recordings.store(self._storage, batch, fresh=self._fresh)
        if self._held is not None:
            self._held += added

    async def close(self) -> None:
        """Write what is left: the run's player is done."""
        await self.flush()


def of_run(context: Context, run: str, endpoint: Endpoint) -> Recorder | None:
    """The recorder of ``run`` played against ``endpoint`` (None: its mode records nothing)."""
    if endpoint.recording_mode == _Mode.RECORDING_MODE_UNSPECIFIED:
        return None
    return Recorder(context, run, endpoint)
