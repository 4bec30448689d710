"""What the server runs on: uvloop's event loop and httptools' HTTP parser, uvicorn's standard
extras, where the platform has them (a dependency of the package on Linux and macOS with
CPython); asyncio's own loop and h11 otherwise, said once in the log at start.

Both are what a user's own uvicorn server would run on (``uvicorn[standard]``), and the floors
``make bench`` measures against (bench/floor.py) run on them too. uvicorn picks httptools by
itself when it can import it (:class:`uvicorn.protocols.http.auto.AutoHTTPProtocol`, under
:func:`ces_eval.connections.http_protocol`); the loop is this module's :func:`run`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, TypeVar

from uvicorn.protocols.http.auto import AutoHTTPProtocol

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

__all__ = ["LOOPS", "fallbacks", "loop_factory", "run"]

T = TypeVar("T")
_log = logging.getLogger("ces_eval")
# ``serve --loop``: auto is uvloop where it can be imported, else asyncio's own.
LOOPS = ("auto", "uvloop", "asyncio")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` when uvloop can be imported, else None (asyncio's own)."""
    try:
        import uvloop  # noqa: PLC0415 - optional: only where the platform has it
    except ImportError:
        return None
    return uvloop.new_event_loop


def fallbacks(loop: str = "auto") -> list[str]:
    """One sentence per speed-up this process runs without, not having it installed (empty
    when it has both); ``loop``: the ``--loop`` choice (asyncio chosen is no fallback)."""
    missing = []
    if loop != "asyncio" and loop_factory() is None:
        missing.append("uvloop is not installed: serving on asyncio's own event loop")
    if AutoHTTPProtocol.__name__ != "HttpToolsProtocol":  # uvicorn's pick: h11's without it
        missing.append("httptools is not installed: HTTP requests are parsed by h11")
    return missing


def run(main: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """``asyncio.run(main)`` on the ``loop`` of :data:`LOOPS`: uvloop's where there is one
    (auto, uvloop), else asyncio's; each fallback is a warning (the server works the same,
    slower). ``main`` is closed however this ends: a start-up interrupted before the loop ran
    it (cli.StartupInterrupted) leaves no "never awaited" warning behind."""
    try:
        for sentence in fallbacks(loop):
            _log.warning("%s (slower; install uvicorn's standard extras to speed it up)", sentence)
        factory = None if loop == "asyncio" else loop_factory()
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    finally:
        main.close()
