"""How many sessions a run plays against its agent at once (docs/agents.md, "Concurrency").

A run against the app's agent plays its repetitions in a fixed pool of workers; each session
(one repetition's calls to the agent, its judge and its simulator) holds a slot of its run's
:class:`RunPace` and one of the server's :class:`Slots` (``--agent-sessions``, shared by every
run of the process: :func:`server_slots`) while it plays. The run's limit starts at the
endpoint's ``max_concurrent_sessions`` and adapts to the agent's push backs, which the player
reports through the :class:`~ces_eval.core.engine.pace.Pace` seam:

* a push back halves the limit (never below 1), at most once per :data:`DROP_WINDOW` seconds,
  so that one burst of push backs from the sessions in flight counts once;
* every ``limit`` answered calls in a row without a push back raise it by one, up to the
  endpoint's number.

A lower limit stops no session in flight: new sessions wait until fewer than the limit play.
A session waiting out a back-off (:meth:`RunPace.pause`) gives both slots back meanwhile and
takes them again (after the sessions already waiting) before it calls again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["DROP_WINDOW", "RunPace", "Slots", "server_slots"]

DROP_WINDOW = 1.0  # seconds: the run's limit halves at most once in this long


class Slots:
    """A counting gate whose limit may change: :meth:`take` waits, first come first served,
    until fewer than ``limit`` slots are taken. Lowering the limit takes no slot back."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._taken = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def taken(self) -> int:
        return self._taken

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def set_limit(self, limit: int) -> None:
        self._limit = limit
        self._wake()

    async def take(self) -> None:
        """Take a slot, waiting for one (cancellable: a cancelled wait holds none)."""
        if self._taken < self._limit and not self._waiting:
            self._taken += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.cancelled():
                with contextlib.suppress(ValueError):  # unless _wake dropped it already
                    self._waiting.remove(future)
            else:
                self.give()  # given a slot as the wait was cancelled: not kept
            raise

    def give(self) -> None:
        """Give back a slot :meth:`take` took."""
        self._taken -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._taken < self._limit:
            future = self._waiting.popleft()
            if future.done():  # its wait was cancelled
                continue
            self._taken += 1
            future.set_result(None)


_SERVERS: weakref.WeakKeyDictionary[object, Slots] = weakref.WeakKeyDictionary()


def server_slots(owner: object, limit: int) -> Slots:
    """The server's bound on sessions played at once across its runs: one :class:`Slots` of
    ``limit`` per ``owner`` (the context's agent HTTP port, one per server process)."""
    found = _SERVERS.get(owner)
    if found is None:
        found = _SERVERS[owner] = Slots(limit)
    return found


@dataclass
class _Held:
    """What the calling task's session holds: whose slots, and whether it holds them now
    (not while it waits out a back-off)."""

    pace: RunPace
    holding: bool = True


_held: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("session", default=None)


class RunPace:
    """A run's :class:`~ces_eval.core.engine.pace.Pace`: a slot per session, ``most`` at
    most, fewer while the agent pushes back (see the module); every session also holds one
    of ``server``'s. ``clock`` measures :data:`DROP_WINDOW`."""

    def __init__(
        self, most: int, server: Slots, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._most = most
        self._slots = Slots(most)
        self._server = server
        self._clock = clock
        self._playing = 0  # sessions holding both slots
        self._streak = 0  # calls answered since the last push back or change of the limit
        self._dropped = -math.inf  # when the limit last dropped

    @property
    def limit(self) -> int:
        """How many sessions may play at once now."""
        return self._slots.limit

    @property
    def playing(self) -> int:
        """How many sessions hold their slots now (the run's and the server's)."""
        return self._playing

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Hold a slot (and the server's) while the block plays one session; the calling
        task's :meth:`pause` gives them back meanwhile."""
        await self._take()
        held = _Held(self)
        token = _held.set(held)
        try:
            yield
        finally:
            _held.reset(token)
            if held.holding:
                self._give()

    async def _take(self) -> None:
        await self._slots.take()
        try:
            await self._server.take()
        except BaseException:
            self._slots.give()
            raise
        self._playing += 1

    def _give(self) -> None:
        self._playing -= 1
        self._server.give()
        self._slots.give()

    def answered(self) -> None:
        self._streak += 1
        limit = self._slots.limit
        if limit < self._most and self._streak >= limit:
            self._streak = 0
            self._slots.set_limit(limit + 1)

    def pushed_back(self) -> None:
        self._streak = 0
        now = self._clock()
        if now - self._dropped >= DROP_WINDOW:
            self._dropped = now
            self._slots.set_limit(max(1, self._slots.limit // 2))

    async def pause(self, seconds: float) -> None:
        held = _held.get()
        if held is None or held.pace is not self or not held.holding:
            await asyncio.sleep(seconds)  # outside a session of this run: nothing to give
            return
        held.holding = False
        self._give()
        await asyncio.sleep(seconds)
        await self._take()
        held.holding = True
