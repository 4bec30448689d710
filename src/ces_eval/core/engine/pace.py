"""How a run's calls to a team's agent, judge and simulator keep pace with what they can take
(docs/agents.md): the seam between the player, which sees each call's answer, and the run,
which decides how many sessions play at once.

The player (:class:`ces_eval.core.engine.agents.Agent`) tells its :class:`Pace` of every call
that was answered and of every push back (an HTTP 429 or 503, a connection reset), and waits
out a back-off through it, so that the run can give the session's slot to another session
meanwhile and play fewer at once while the agent pushes back. :data:`UNPACED` is the pace of a
player that plays one session at a time: it only sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["UNPACED", "Pace"]


class Pace(Protocol):
    """What a player reports to its run, and how it waits (see the module)."""

    def answered(self) -> None:
        """A call was answered (whatever its status, but a push back)."""

    def pushed_back(self) -> None:
        """A call was pushed back: HTTP 429 or 503, or its connection was reset."""

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds`` (a back-off) without holding the calling session's slot: it is
        given back meanwhile and taken again before this returns. Cancellable."""


class _Unpaced:
    def answered(self) -> None:
        return None

    def pushed_back(self) -> None:
        return None

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


UNPACED: Pace = _Unpaced()
