"""Graceful behaviour under load (docs/security.md, "Load"): per-surface in-flight limits, REST
deadlines and client disconnects.

**Admission.** Each surface (gRPC, REST, MCP) counts the calls it is serving. A call beyond the
surface's limit (``serve --max-concurrent-requests``) is refused at once with
RESOURCE_EXHAUSTED (HTTP 429 and ``Retry-After`` on HTTP), ErrorInfo reason
``TOO_MANY_REQUESTS`` naming the surface and the limit. Nothing queues: a queue only turns
overload into latency and memory, while a refused client can back off and retry. Every surface
runs on the event loop thread, so the count is a plain integer and the check one comparison; the
refusal itself is built once. Health checks, reflection, ``/healthz`` and ``/openapi.json`` are
not counted: a saturated server must still answer its probes.

**Deadlines.** grpc.aio enforces a gRPC client's deadline itself: when it passes, the handler's
task is cancelled and the client sees DEADLINE_EXCEEDED, so the gRPC surface adds no timer of
its own. REST has no deadline on the wire; Google's ``X-Server-Timeout`` system parameter
(seconds, decimal: ``"2.500"``, as google-cloud-cpp's ServerTimeoutOption and the GenAI SDKs
send it) bounds the call here, and one past it answers 504 DEADLINE_EXCEEDED.

**Cancellation.** A cancelled call stops where it awaits. Writes are transactional, so a call
cut short either committed or left nothing behind (a write already handed to SQLite's group
commit writer commits; its answer is dropped). A REST client that disconnects cancels the calls
that can take long (:data:`WATCHED_METHODS`); quick calls finish in less time than watching the
connection would cost them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, TypeVar

from ces_eval.errors import Code, FieldViolation, ServiceError

if TYPE_CHECKING:
    from starlette.types import Receive

__all__ = [
    "DEFAULT_LIMIT",
    "RETRY_AFTER_SECONDS",
    "SERVER_TIMEOUT_HEADER",
    "WATCHED_METHODS",
    "Admission",
    "deadline_exceeded",
    "server_timeout",
    "until_disconnected",
    "within",
]

T = TypeVar("T")

# Per surface and process. ``make bench`` keeps 32 calls in flight (8 connections x 4 streams),
# official clients far fewer: the default only stops runaway load.
DEFAULT_LIMIT = 1024
RETRY_AFTER_SECONDS = 1
SERVER_TIMEOUT_HEADER = b"x-server-timeout"
# Seconds with an optional fraction; digits are bounded so the value stays an exact float.
_SECONDS = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
# Calls worth watching the connection for: both ImportEvaluations parse a whole document before
# they answer (EvaluationService's before its operation starts); WaitOperation
# waits by design (up to 10 minutes) should it ever get an HTTP binding (operations.proto gives it
# none).
WATCHED_METHODS = frozenset(
    {
        "/google.longrunning.Operations/WaitOperation",
        "/ces_eval.emulator.v1.EmulatorService/ImportEvaluations",
        "/google.cloud.ces.v1beta.EvaluationService/ImportEvaluations",
    }
)
_SURFACE_NAMES = {"grpc": "gRPC", "rest": "REST", "mcp": "MCP"}


class Admission:
    """The in-flight count and limit of one surface, with its refusal built once
    (:attr:`refused`); the surfaces' boundary (:mod:`ces_eval.surfaces.boundary`) takes and
    gives back the slots."""

    __slots__ = ("in_flight", "limit", "refused", "surface")

    def __init__(self, surface: str, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError("the in-flight limit must be at least 1")
        self.surface = surface
        self.limit = limit
        self.in_flight = 0
        self.refused = self.refusal()

    def refusal(self) -> ServiceError:
        """RESOURCE_EXHAUSTED for a call beyond the limit."""
        name = _SURFACE_NAMES.get(self.surface, self.surface)
        return ServiceError(
            Code.RESOURCE_EXHAUSTED,
            f"ces-eval is already serving {self.limit} {name} call(s), its limit "
            f"(--max-concurrent-requests); retry in {RETRY_AFTER_SECONDS} s.",
            "TOO_MANY_REQUESTS",
            {"surface": self.surface, "limit": str(self.limit)},
        )

    def enter(self) -> bool:
        """Take a slot; False (and nothing taken) when every slot is taken."""
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        """Give back the slot :meth:`enter` took."""
        self.in_flight -= 1


def server_timeout(headers: Iterable[tuple[bytes, bytes]]) -> float | None:
    """The ``X-Server-Timeout`` header's seconds; None without one. A value that is not a
    non-negative decimal number of seconds is INVALID_ARGUMENT."""
    for key, value in headers:
        if key == SERVER_TIMEOUT_HEADER:
            text = value.decode("latin-1").strip()
            if not _SECONDS.fullmatch(text):
                description = (
                    f"X-Server-Timeout must be a number of seconds such as 2.5; got {text!r}."
                )
                raise ServiceError.invalid_argument(
                    description, [FieldViolation("X-Server-Timeout", description)]
                )
            return float(text)
    return None


def deadline_exceeded(seconds: float) -> ServiceError:
    """DEADLINE_EXCEEDED for a call past its ``X-Server-Timeout`` of ``seconds``."""
    return ServiceError(
        Code.DEADLINE_EXCEEDED,
        f"The call did not finish within its X-Server-Timeout of {seconds:g} s.",
        "DEADLINE_EXCEEDED",
        {"timeout": f"{seconds:g}s"},
    )


async def within(seconds: float, work: Awaitable[T]) -> T:
    """``work``'s result, or DEADLINE_EXCEEDED once ``seconds`` have passed (``work`` is then
    cancelled)."""
    bound = asyncio.timeout(seconds)
    try:
        async with bound:
            return await work
    except TimeoutError:
        if bound.expired():  # ours; a TimeoutError of the work itself passes through
            raise deadline_exceeded(seconds) from None
        raise


async def _disconnect(receive: Receive) -> None:
    """Return once the client has gone. Called after the request body was read, so the server
    has nothing but ``http.disconnect`` left to deliver."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(work: Awaitable[T], receive: Receive) -> T:
    """``work``'s result; cancelled, with CANCELLED (HTTP 499, which nobody receives), when
    the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            # Let the work unwind before the slot is given back.
            await asyncio.wait((task,))
    gone = watcher.done() and not watcher.cancelled() and watcher.exception() is None
    if gone and task.cancelled():
        raise ServiceError(
            Code.CANCELLED, "The client closed the connection.", "CLIENT_DISCONNECTED"
        )
    return task.result()
