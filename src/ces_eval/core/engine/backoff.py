"""How a call that the team's agent, judge or simulator pushed back is tried again
(docs/agents.md, "Back-pressure"): which failures are push backs, how many attempts a call
gets, and how long it waits before the next one.

* A **push back** is an answer HTTP 429 (Too Many Requests) or 503 (Service Unavailable),
  whatever its body, or no HTTP answer at all: a connection refused or reset, or anything
  else below HTTP, which the player reads alike on purpose (docs/agents.md, "Safety": a
  refused address, a closed port and an open one that speaks no HTTP must not be told apart,
  by their texts nor by how often they are tried). Nothing else is tried again: another
  status is the agent's answer, and an answer that cannot be read or is too large would be
  so again.
* A call that got no answer within its endpoint's timeout is not tried again: it has waited
  that long already, and retrying would multiply the longest time a run waits on one call.
* A call is made at most :attr:`Backoff.attempts` times. Before the n-th new attempt it waits
  what the push back's ``Retry-After`` asked (seconds, or an HTTP date), at most
  :attr:`Backoff.longest` (a hostile agent must not park a run); without one, a capped
  exponential back-off with full jitter: a uniform draw between 0 and
  ``min(cap, base * 2 ** (n - 1))``, which spreads the retries of sessions pushed back at once.

:data:`BACKOFF` holds the server's settings, declared here once. The player takes another
:class:`Backoff` where one is given (:class:`ces_eval.core.engine.agents.Agent`): the tests'
hook, so that no test sleeps the server's seconds.
"""

from __future__ import annotations

import datetime
import email.utils
import re
import time
from dataclasses import dataclass

from ces_eval.core.aip.stamps import random_bits

__all__ = ["BACKOFF", "PUSH_BACK_STATUSES", "Backoff", "asked_wait"]

# HTTP statuses that ask the caller to come back later.
PUSH_BACK_STATUSES = frozenset({429, 503})
_SECONDS = re.compile(r"[0-9]+")
_FRACTION_BITS = 53  # a float's mantissa: random_bits(53) * _STEP is uniform in [0, 1)
_STEP = 2.0**-_FRACTION_BITS


@dataclass(frozen=True)
class Backoff:
    """How a pushed back call is tried again (see the module)."""

    attempts: int = 5  # calls made at most, the first included
    base: float = 0.5  # seconds: the ceiling of the first back-off, doubled for each next one
    cap: float = 20.0  # seconds: the highest ceiling of a back-off
    longest: float = 60.0  # seconds: the longest Retry-After honoured
    # Calls of a run to one URL that got no HTTP answer on any attempt, before the run stops
    # calling that URL, as long as none of its calls to it was ever answered.
    unanswered: int = 3

    def delay(self, retry: int, retry_after: str = "", now: float | None = None) -> float:
        """Seconds to wait before the ``retry``-th new attempt (1: the second call): what
        ``retry_after`` (a ``Retry-After`` header's value; "" when absent) asks, at most
        :attr:`longest`, else a draw of the capped exponential back-off."""
        asked = asked_wait(retry_after, now)
        if asked is not None:
            return min(asked, self.longest)
        ceiling = min(self.cap, self.base * 2.0 ** max(0, retry - 1))
        return ceiling * random_bits(_FRACTION_BITS) * _STEP


BACKOFF = Backoff()


def asked_wait(retry_after: str, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` value asks to wait from ``now`` (the time since the epoch;
    the clock's when None): a count of seconds, or an HTTP date (0 when it is past); None when
    it is absent or neither."""
    value = retry_after.strip()
    if not value:
        return None
    if _SECONDS.fullmatch(value):
        return float(value)  # as large as it is: the caller caps it (never int(): no digit limit)
    try:
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if date.tzinfo is None:  # "-0000": HTTP dates are in GMT
        date = date.replace(tzinfo=datetime.UTC)
    return max(0.0, date.timestamp() - (time.time() if now is None else now))
