"""Work off the event loop: a large request's decode, validation and rendering run in a worker
thread, so that the loop, which answers every caller and the health checks, is held by no
request for more than a few milliseconds (:data:`ces_eval.contract.limits.LOOP_BYTES` says which
are large), with the cyclic garbage collector waiting meanwhile (docs/security.md, "Limits").
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from ces_eval.contract.limits import LOOP_BYTES

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["collector_paused", "is_heavy", "off_loop"]

_T = TypeVar("_T")

# Set in a request's context once part of its work left the loop: the rest of it is as large.
_heavy_request: ContextVar[bool] = ContextVar("ces_eval_heavy_request", default=False)


def is_heavy(*messages: Message) -> bool:
    """Whether work on ``messages`` belongs off the loop: the request they are part of was
    found large already (:func:`off_loop` remembers it), or one of them serializes to more
    than LOOP_BYTES. Sizing a message walks all of it, holding the interpreter (~17 ms for
    the largest evaluation the limits allow), so a request known large is not sized again."""
    return _heavy_request.get() or any(m.ByteSize() > LOOP_BYTES for m in messages)


async def off_loop(heavy: bool, work: Callable[..., _T], *args: Any) -> _T:  # noqa: ANN401
    """``work(*args)``, in a worker thread when ``heavy``: Python switches threads every 5 ms,
    so the event loop keeps answering while it runs. The cyclic garbage collector waits while
    it does: the trees a large request builds (JSON documents, messages) hold no cycles, and a
    full collection over their million objects would stop every thread, the loop's included,
    for a tenth of a second or more at a time."""
    if not heavy:
        return work(*args)
    _heavy_request.set(True)
    return await asyncio.to_thread(_collector_waiting, work, *args)


_collector = threading.Lock()
_collector_held = [0, False]  # pauses in force; whether the collector was enabled before


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector waits while this holds (see :func:`off_loop`). Held by a
    request for as long as a large document of it stays alive between two heavy works (MCP's
    arguments, read in one and parsed in the next): a collection in between would walk all
    of it, holding the interpreter for tens of milliseconds."""
    with _collector:
        if _collector_held[0] == 0:
            _collector_held[1] = gc.isenabled()
            gc.disable()
        _collector_held[0] += 1
    try:
        yield
    finally:
        with _collector:
            _collector_held[0] -= 1
            if _collector_held[0] == 0 and _collector_held[1]:
                gc.enable()


def _collector_waiting(work: Callable[..., _T], *args: Any) -> _T:  # noqa: ANN401
    with collector_paused():
        return work(*args)
