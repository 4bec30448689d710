"""What the core asks of the world outside it, as small Protocols on the :class:`Context`: the
object store behind ``gs://`` URIs, the runner of long-running operations (AIP-151), and the
HTTP calls the run engine makes to the team's agent, judge and simulator.

The core calls these and nothing else of them; their implementations live apart
(:mod:`ces_eval.core.io`: the export folder, the operation runner over the database, an HTTP
client), and only
the service's assembly (:mod:`ces_eval.core.service`) names them. A second implementation (a
real bucket, say) is a new module that satisfies the Protocol, and the core can be tested with
any object that does. The object store's refusals are defined here, with the port, so that a
caller catches what every store raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

__all__ = [
    "AgentHttp",
    "AgentUnreachable",
    "AgentUnreadable",
    "Guard",
    "HttpAnswer",
    "HttpSession",
    "ObjectError",
    "ObjectLocation",
    "ObjectMissing",
    "ObjectStore",
    "ObjectTooLarge",
    "Operations",
    "PathRefused",
]


class ObjectError(ValueError):
    """A ``gs://`` URI the store cannot use (not a URI, no bucket, a name too long), or a
    refusal of one of the kinds below. ``message`` names the URI only, never a local path."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PathRefused(ObjectError):
    """A path the store serves only by leaving it or by reading what is no object: a link on
    the way (``link``: PERMISSION_DENIED, whatever is behind it), a file where a folder belongs,
    or a folder or special file where an object belongs."""

    def __init__(self, message: str, *, link: bool) -> None:
        super().__init__(message)
        self.link = link


class ObjectMissing(ObjectError):
    """No object (or folder) at a URI."""


class ObjectTooLarge(ObjectError):
    """An object larger than a reader takes (``limit`` bytes); nothing of it was kept."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class ObjectLocation(Protocol):
    """Where an object is, as the store that located it knows it; ``uri`` is what errors and
    answers name."""

    @property
    def uri(self) -> str: ...

    def child(self, name: str) -> ObjectLocation:
        """The object ``name`` inside this folder."""
        ...


class ObjectStore(Protocol):
    """The ``gs://`` objects imports read, exports and audio uploads write. Blocking calls:
    the core makes them off the event loop (``asyncio.to_thread``)."""

    def locate(self, gcs_uri: str, namespace: str) -> ObjectLocation:
        """Where ``gcs_uri`` is within ``namespace`` (a project's own folder; "" for one
        shared by all); :class:`ObjectError` for a URI it cannot use."""
        ...

    def probe(self, location: ObjectLocation) -> None:
        """Check that a folder can be written at ``location`` (:class:`PathRefused`)."""
        ...

    def read(self, location: ObjectLocation, limit: int) -> bytes:
        """The object's bytes, at most ``limit`` (:class:`ObjectTooLarge`,
        :class:`ObjectMissing`, :class:`PathRefused`, OSError)."""
        ...

    def write(self, location: ObjectLocation, data: bytes, owner: str) -> None:
        """Write ``data`` whole or not at all; ``owner`` names who writes, so that what an
        interrupted writer left can be told apart (:class:`PathRefused`, OSError)."""
        ...

    def remove(self, location: ObjectLocation) -> bool:
        """Delete the object; False when there was none (:class:`PathRefused`)."""
        ...


# The work's own guard (Operations.start): awaits a step, ending the work as its failure
# (a cancellation, a shutdown) says, and raises it again.
Guard = Callable[[Coroutine[Any, Any, None]], Awaitable[None]]


class Operations(Protocol):
    """Runs long-running operations (AIP-151): stored before their work starts, finished
    with the work's response or error, cancellable, owned under a lease by one process."""

    @property
    def owner(self) -> str:
        """This process's name as an operation's owner."""
        ...

    @property
    def lease(self) -> float:
        """How long (seconds) this process's lease on an operation lasts unless renewed."""
        ...

    @property
    def stopping(self) -> bool:
        """Whether the server is shutting down (work cancelled now is stopped by it)."""
        ...

    def new_name(self, parent: str) -> str:
        """A fresh operation name under ``parent`` (``projects/p/locations/l``)."""
        ...

    def new_operation(
        self, parent: str, metadata: Message, name: str = ""
    ) -> operations_pb2.Operation:
        """A new operation (not stored yet) under ``parent``, named ``name`` or afresh."""
        ...

    async def start(
        self,
        parent: str,
        method: str,
        metadata: Message,
        work: Callable[[], Awaitable[Message]],
        *,
        name: str = "",
        ready: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
    ) -> operations_pb2.Operation:
        """Store a new operation and run ``work`` in the background (after ``ready``, through
        ``guard``); its result becomes the operation's response."""
        ...

    def adopt(
        self,
        operation: operations_pb2.Operation,
        metadata: Message,
        work: Callable[[], Awaitable[Message]],
        ready: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
    ) -> None:
        """Run ``work`` for ``operation``, which the caller stored with this process as its
        owner."""
        ...

    def export_owner(self) -> str:
        """The owner to give the object store for a write by the work running now."""
        ...

    async def cancel(self, name: str) -> operations_pb2.Operation | None:
        """Request cancellation; None when there is no such operation."""
        ...

    async def wait(self, name: str, timeout: float) -> operations_pb2.Operation | None:
        """The operation once done, or as it is when ``timeout`` seconds have passed."""
        ...


class AgentUnreachable(Exception):
    """A call that got no HTTP answer: the address refused (or was refused: see
    :meth:`AgentHttp.session`), the port closed, what answered spoke no HTTP, or the URL could
    not be used. One kind for all, so that an error says nothing of which."""


class AgentUntrusted(AgentUnreachable):
    """A call whose TLS handshake failed the certificate's verification: an address the
    engine may call answered, with a certificate no trusted authority signed (or for another
    name). Not a passing state: never tried again."""


class AgentUnreadable(Exception):
    """An HTTP answer that could not be read as one."""


class HttpAnswer(Protocol):
    """An answer whose body is not read yet."""

    @property
    def status(self) -> int: ...

    def header(self, name: str) -> str:
        """The value of header ``name`` (any case); "" when absent."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as sent (no content coding undone), chunk by chunk, as it arrives; raises
        :class:`AgentUnreachable`, :class:`AgentUnreadable` or TimeoutError."""
        ...


class HttpSession(Protocol):
    """The connections of one run: reused between its calls, closed with :meth:`close`."""

    def post(
        self, uri: str, body: bytes, headers: Mapping[str, str]
    ) -> AbstractAsyncContextManager[HttpAnswer]:
        """POST ``body`` to ``uri``; the answer while the block lasts (redirects are answers, not
        followed). Entering raises :class:`AgentUnreachable`, :class:`AgentUnreadable` or
        TimeoutError (the session's timeout per step)."""
        ...

    async def close(self) -> None: ...


class AgentHttp(Protocol):
    """Where the run engine's HTTP calls go out: no proxy, no redirect, no credentials of the
    environment."""

    def session(
        self,
        uris: Sequence[str],
        timeout: float,
        refused: Callable[[str, int], bool],
    ) -> HttpSession:
        """A session for calls to ``uris`` (their schemes say whether TLS is needed), each
        step bounded by ``timeout`` seconds. Each connection resolves its host itself and
        connects to none of the addresses ``refused(address, port)`` names, so that no second
        resolution between the check and the connection can name another."""
        ...
