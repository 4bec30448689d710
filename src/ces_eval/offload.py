"""Work off the event loop: a large request's decode, validation and rendering run in a worker
thread, so that the loop, which answers every caller and the health checks, is held by no
request for more than a few milliseconds (:data:`ces_eval.contract.limits.LOOP_BYTES` says which
are large), with the cyclic garbage collector waiting and threads switching more often meanwhile
(docs/security.md, "Limits").
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from ces_eval.contract.limits import LOOP_BYTES

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["HEAVY_SWITCH_SECONDS", "heavy_held", "is_heavy", "off_loop"]

_T = TypeVar("_T")

# The interpreter's switch interval while heavy work runs (Python's default: 5 ms). A thread
# waiting for the interpreter gets it after at most this long, and a health check's answer
# needs it several times (its read, the database's ping in a thread, its write): at 5 ms each,
# a probe took 20-90 ms beside the largest allowed create; at 0.5 ms, 20 at most here.
HEAVY_SWITCH_SECONDS = 0.0005

# Set in a request's context once part of its work left the loop: the rest of it is as large.
_heavy_request: ContextVar[bool] = ContextVar("ces_eval_heavy_request", default=False)


def is_heavy(*messages: Message) -> bool:
    """Whether work on ``messages`` belongs off the loop: the request they are part of was
    found large already (:func:`off_loop` remembers it), or one of them serializes to more
    than LOOP_BYTES. Sizing a message walks all of it, holding the interpreter (~17 ms for
    the largest evaluation the limits allow), so a request known large is not sized again."""
    return _heavy_request.get() or any(m.ByteSize() > LOOP_BYTES for m in messages)


async def off_loop(heavy: bool, work: Callable[..., _T], *args: Any) -> _T:  # noqa: ANN401
    """``work(*args)``, in a worker thread when ``heavy``, held as :func:`heavy_held` says,
    so the event loop keeps answering while it runs."""
    if not heavy:
        return work(*args)
    _heavy_request.set(True)
    return await asyncio.to_thread(_held_for, work, *args)


class _Held:
    """The heavy holds in force, and the interpreter's settings from before the first."""

    lock = threading.Lock()
    count = 0
    collecting = False  # whether the collector was enabled
    interval = 0.0  # the switch interval


@contextmanager
def heavy_held() -> Iterator[None]:
    """The interpreter set for heavy work while this holds, back as it was once no hold
    remains: threads switch every :data:`HEAVY_SWITCH_SECONDS`, so the loop gets the
    interpreter back soon after each of its waits, and the cyclic garbage collector waits.
    The trees a large request builds (JSON documents, messages) hold no cycles, and a full
    collection over their million objects would stop every thread, the loop's included, for
    a tenth of a second or more. Held around each heavy work (:func:`off_loop`), and by a
    request for as long as a large document of it stays alive between two of them (MCP's
    arguments, read in one and parsed in the next)."""
    with _Held.lock:
        if _Held.count == 0:
            _Held.collecting = gc.isenabled()
            _Held.interval = sys.getswitchinterval()
            gc.disable()
            sys.setswitchinterval(HEAVY_SWITCH_SECONDS)
        _Held.count += 1
    try:
        yield
    finally:
        with _Held.lock:
            _Held.count -= 1
            if _Held.count == 0:
                sys.setswitchinterval(_Held.interval)
                if _Held.collecting:
                    gc.enable()


def _held_for(work: Callable[..., _T], *args: Any) -> _T:  # noqa: ANN401
    with heavy_held():
        return work(*args)
