"""Connections on the HTTP port (docs/security.md, "Connections"): how long a client may take, how
many connections may be open, and what happens when the process runs out of file descriptors.

uvicorn bounds none of this by itself: it arms its keep-alive timer only once a response is
sent (a connection that never sends a request stays open forever), any byte received disarms
it (a request head sent a byte at a time never ends), and ``limit_concurrency`` answers 503 but
keeps every connection open. :func:`http_protocol` subclasses the HTTP protocol uvicorn would
choose (httptools when installed, else h11) with these rules, for the sockets of one port:

* **Idle.** A connection with no request in progress is closed after :attr:`Timeouts.idle`
  seconds (uvicorn's ``timeout_keep_alive``), before its first request too.
* **Header.** A request head must be complete within :attr:`Timeouts.header` seconds of the
  connection opening or of the previous response, else the connection is closed. This also
  bounds what is left of a body the app answered without reading: uvicorn reads and drops it,
  and no next request can begin before it ends.
* **Cap.** Beyond ``max_connections`` open connections a new one is closed at once, before a
  byte of it is read: nothing sent on it reaches the app. Closing costs the server nothing and
  every HTTP client reports it at once as a connection error, which retry policies treat as
  retryable; answering 503 would mean reading a request head from a connection the server has
  no room for, and waiting for it (a slow-header client would hold it exactly as before).

**Writes.** uvicorn writes each answer's head and body as two writes, and on uvloop each is a
``send()`` at once: two system calls and two loopback deliveries per answer, the largest single
cost of a small REST answer in a profile. :class:`_Joined` stands between uvicorn and the socket:
a small write is held until the next one, which takes it along in one vectored write, or until
the current turn of the event loop ends (a head whose body comes later is never held longer).

Bodies are bounded where they are read, before an admission slot is taken
(:class:`ces_eval.surfaces.http_app.BodyLimit`, by :meth:`Timeouts.body_deadline`).

**File descriptors.** :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard
limit at start, as servers do (a login shell's soft limit is often 1,024). Should the process still
run out on uvloop (:mod:`ces_eval.loops`), libuv accepts and closes each connection it has no
descriptor for, and says nothing. On asyncio's own loop, asyncio stops accepting on that socket and
retries a second later, but in CPython 3.11 (the project's Python) its accept loop carries on after
the failure and reports every further ``accept()`` too, a backlog's worth (2,048) per second, each
an ERROR with a traceback (61 MB of log in 20 s). :class:`AcceptErrors`, the loop's exception
handler, turns them into one warning per :data:`LOG_INTERVAL` with their count, and passes
everything else on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

from uvicorn.protocols.http.auto import AutoHTTPProtocol

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]
    # What the mixin below is written against: the interface h11_impl.H11Protocol and
    # httptools_impl.HttpToolsProtocol share (transport, loop, cycle, the keep-alive timer).
    from uvicorn.protocols.http.h11_impl import H11Protocol as _UvicornProtocol
else:
    _UvicornProtocol = asyncio.Protocol

__all__ = [
    "LOG_INTERVAL",
    "RESERVED_DESCRIPTORS",
    "AcceptErrors",
    "Listener",
    "Timeouts",
    "descriptor_problem",
    "http_protocol",
    "raise_open_file_limit",
]

_log = logging.getLogger("ces_eval")
LOG_INTERVAL = 10.0  # seconds between two warnings about the same repeated event
# Descriptors besides client connections: the database (a file, its WAL and shared memory per
# SQLite connection), exports, gRPC's and asyncio's own (epoll, eventfds, pipes), the log.
RESERVED_DESCRIPTORS = 256
# The soft limit asked for when the hard one is unlimited (Linux's default fs.nr_open).
_UNLIMITED_TARGET = 1_048_576
# accept() failures asyncio reports and retries a second later (selector_events.py).
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True)
class Timeouts:
    """How long the HTTP port waits for a client (docs/security.md, "Connections"). The idle
    and header clocks start together, so ``idle`` is meant to be the shorter."""

    header: float = 10.0  # for a complete request head, from connect or the previous response
    idle: int = 5  # with no request in progress (uvicorn's timeout_keep_alive, whole seconds)
    body: float = 10.0  # for a request body, plus one second per body_rate bytes received
    body_rate: int = 16 * 1024  # bytes per second: the slowest a large body may arrive

    def body_deadline(self, start: float, received: int) -> float:
        """When a body whose reading began at ``start`` (event loop time), and of which
        ``received`` bytes have arrived, must be complete: a slow client may take its time
        (10 MiB at 16 KiB/s is 650 s) but a trickle is cut after about :attr:`body` seconds."""
        return start + self.body + received / self.body_rate


class _Throttled:
    """One warning about an event that repeats: the first occurrence at once, then at most one
    line per :data:`LOG_INTERVAL` saying how many more there were."""

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._count = 0
        self._message = ""

    def event(self, message: str) -> None:
        self._message = message
        if self._timer is not None:
            self._count += 1
            return
        _log.warning("%s", message)
        self._timer = asyncio.get_running_loop().call_later(LOG_INTERVAL, self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self._count:
            _log.warning(
                "%s (%d more times in the last %g s)", self._message, self._count, LOG_INTERVAL
            )
            self._count = 0
            self._timer = asyncio.get_running_loop().call_later(LOG_INTERVAL, self._flush)


class Listener:
    """The open connections of one port (all its sockets) in this process, their cap
    (``serve --max-connections``) and the port's :class:`Timeouts`. Used on the event loop
    thread only, so the count is a plain integer."""

    def __init__(self, name: str, max_connections: int, timeouts: Timeouts | None = None) -> None:
        if max_connections < 1:
            raise ValueError("the connection limit must be at least 1")
        self.name = name
        self.limit = max_connections
        self.timeouts = timeouts or Timeouts()
        self.open = 0
        self._refusals = _Throttled()

    def admit(self) -> bool:
        """Count a new connection; False (and a throttled warning) when the cap is reached."""
        if self.open >= self.limit:
            self._refusals.event(
                f"{self.name} port: closed a new connection at once: {self.open} are open, "
                "the limit (--max-connections)"
            )
            return False
        self.open += 1
        return True

    def release(self) -> None:
        """Forget a connection :meth:`admit` counted."""
        self.open -= 1


# The largest write held back to go out with the next one: a response head (a few hundred
# bytes), a short body, a chunk's size line; never a body worth copying.
_HELD_BYTES = 4096


class _Joined(asyncio.Transport):
    """The transport uvicorn's protocol sees: the socket's, with a small write held until the
    next write (both go out as one ``writelines``, a single ``writev`` on uvloop) or the end of
    the loop's turn (``call_soon``), whichever comes first; ``close`` sends it first. Order is
    kept: at most one write is held, and every later one goes out behind it."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif len(data) <= _HELD_BYTES and type(data) is bytes:
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self._flush()
        self._transport.writelines(list_of_data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:  # noqa: ANN401 - asyncio's
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)


class _Guarded(_UvicornProtocol):
    """uvicorn's HTTP protocol under a :class:`Listener`'s cap and timeouts (see the module
    docstring); :func:`http_protocol` puts it in front of the class uvicorn would use."""

    listener: ClassVar[Listener]
    _counted = False  # admitted: counted in the listener until connection_lost
    # When the awaited head must be complete (event loop time), None while none is awaited;
    # and the one timer that checks it. A request sets and clears the deadline only: the timer
    # is armed again when it fires (at most once per header timeout), not made and cancelled
    # per request, which cost a twentieth of a REST Get.
    _head_deadline: float | None = None
    _head_timer: asyncio.TimerHandle | None = None
    _awaited: object = None  # the cycle (request) current when the awaited head was not begun

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.listener.admit():
            transport.close()  # before uvicorn sees it: no byte of it is read
            return
        self._counted = True
        # A stream's transport, as ever, behind the joining of small writes.
        super().connection_made(_Joined(cast("asyncio.Transport", transport), self.loop))
        # uvicorn arms its idle timer only after a response; a new connection idles as well.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._counted = False
        self.listener.release()
        self._head_deadline = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._awaited:  # uvicorn made a new request of a complete head
            self._head_deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Unless uvicorn closes, or started a pipelined request: wait for the next head.
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._await_head()

    def _await_head(self) -> None:
        self._awaited = self.cycle
        deadline = self._head_deadline = self.loop.time() + self.listener.timeouts.header
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(deadline, self._head_check)

    def _head_check(self) -> None:
        self._head_timer = None
        deadline = self._head_deadline
        if deadline is None or self.transport.is_closing():
            return  # the head came: the next response arms the timer again
        if self.loop.time() < deadline:  # a later response moved the deadline
            self._head_timer = self.loop.call_at(deadline, self._head_check)
            return
        self.transport.close()


def http_protocol(listener: Listener) -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)``: uvicorn's own (``auto``), under
    ``listener``'s cap and timeouts. Pass ``timeout_keep_alive=listener.timeouts.idle`` and
    ``ws="none"`` too: a WebSocket upgrade would hand the connection to a protocol that does
    not give it back to the count."""
    bases = (_Guarded, AutoHTTPProtocol)
    return cast("type[asyncio.Protocol]", type("HttpProtocol", bases, {"listener": listener}))


class AcceptErrors:
    """An event loop exception handler quieting ``accept()`` failures for want of descriptors
    or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): one warning per listening address and
    :data:`LOG_INTERVAL` with their count, instead of an ERROR and a traceback for each. asyncio
    itself stops accepting on that socket and retries a second later; connections meanwhile
    wait in the kernel's backlog. Every other report goes to the handler installed before,
    else to the loop's default one."""

    def __init__(self, previous: ExceptionHandler | None) -> None:
        self._previous = previous
        self._by_address: dict[str, _Throttled] = {}

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop) -> AcceptErrors:
        """Make this the handler of ``loop``, before the one it had."""
        handler = cls(loop.get_exception_handler())
        loop.set_exception_handler(handler)
        return handler

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        sock = context.get("socket")
        if isinstance(error, OSError) and error.errno in _EXHAUSTED and sock is not None:
            address = _address(sock)
            throttled = self._by_address.setdefault(address, _Throttled())
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            throttled.event(
                f"cannot accept connections on {address}: {os.strerror(error.errno)} (open "
                f"file limit {soft}); new connections wait, accepting is retried each second"
            )
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


def _address(sock: Any) -> str:  # noqa: ANN401 - asyncio's TransportSocket, untyped in context
    try:
        host, port = sock.getsockname()[:2]
    except (OSError, TypeError, ValueError):
        return "a listening socket"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def raise_open_file_limit() -> int:
    """Lift this process's soft ``RLIMIT_NOFILE`` to its hard limit (servers need a descriptor
    per connection; a shell's soft limit is often 1,024); the soft limit after. A limit that
    cannot be raised is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError):  # e.g. macOS refuses more than kern.maxfilesperproc
            return soft
        return wanted
    return soft


def descriptor_problem(open_files: int, max_connections: int) -> str | None:
    """Why ``open_files`` descriptors may not be enough for ``max_connections`` connections on
    each of the two ports plus :data:`RESERVED_DESCRIPTORS`; None when they are."""
    needed = 2 * max_connections + RESERVED_DESCRIPTORS
    if open_files == resource.RLIM_INFINITY or open_files >= needed:
        return None
    return (
        f"the open file limit ({open_files}) is below the {needed} descriptors that "
        f"--max-connections {max_connections} may need (two ports x {max_connections} + "
        f"{RESERVED_DESCRIPTORS}): new connections would wait once it is reached; lower "
        "--max-connections or raise the limit (ulimit -Hn)"
    )
