"""What every core function works over: the storage, the page-token signer, the ports to the
world outside (:mod:`ces_eval.core.aip.ports`: the operation runner, the object store, the agent's
HTTP) and the server's settings. Passed explicitly (no mixins, no instance state per service), so
a resource module is a set of plain functions of ``(Context, request, Caller)``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ces_eval.core.aip.names import location_of
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2
from ces_eval.storage.base import Unavailable

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.contract.encoded import Response
    from ces_eval.core.aip.pages import PageTokens
    from ces_eval.core.aip.ports import (
        AgentHttp,
        CodeRunner,
        McpServers,
        ObjectLocation,
        ObjectStore,
        Operations,
    )
    from ces_eval.storage.base import Storage

__all__ = [
    "DEFAULT_EXPORT_ROOT",
    "AnswerKeeper",
    "BidiStreaming",
    "Context",
    "Draining",
    "HotReads",
    "Kept",
    "Recent",
    "Rpc",
    "ServerStreaming",
    "Settings",
]

DEFAULT_EXPORT_ROOT = Path("./data/exports")

A = TypeVar("A")


class Kept(Protocol):
    """What :class:`HotReads` keeps: an answer, whose ``size`` (about its bytes) counts against
    the budget."""

    @property
    def size(self) -> int: ...


K = TypeVar("K", bound=Kept)


class HotReads:
    """Reads answered lately from stored bytes (a Get by its resource's name, a List page by
    its request; a surface's renderings of them, :class:`AnswerKeeper`), as they were answered;
    all valid at one version of the database
    (:meth:`~ces_eval.storage.base.Storage.version`) and dropped when it moves, so nothing here
    is ever older than the database. A read repeated while nothing was written costs one
    version query: no rows read, no parse, and the same bytes objects, whose hashes and
    renderings are remembered. At most ``max_bytes`` of answers, each at most a 16th of it;
    the least recently read go first."""

    def __init__(self, max_bytes: int = 48 * 2**20) -> None:
        self._max_bytes = max_bytes
        self._version: int | None = None
        self._entries: OrderedDict[Hashable, Kept] = OrderedDict()
        self._used = 0

    def _at(self, version: int) -> None:
        if version != self._version:
            self._entries.clear()
            self._used = 0
            self._version = version

    def get(self, version: int, key: Hashable) -> Kept | None:
        """The answer kept for ``key`` if it was read at ``version``."""
        self._at(version)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    async def answer(
        self,
        version: Callable[[], Awaitable[int | None]],
        key: Hashable,
        kind: type[K],
        compute: Callable[[], Awaitable[A]],
    ) -> K | A:
        """The answer to ``key``: the one kept at the database's ``version()`` if it is a
        ``kind``, else what ``compute()`` answers, kept when it is a ``kind``. The version is
        read first: a write committed during ``compute()`` moves it and drops what is kept
        (None: nothing is kept, the database cannot tell its version). The one way every
        cached read goes: the core's Gets and List pages, the surfaces' renderings
        (:class:`AnswerKeeper`)."""
        at = await version()
        if at is not None:
            found = self.get(at, key)
            if isinstance(found, kind):
                return found
        result = await compute()
        if at is not None and isinstance(result, kind):
            self.put(at, key, result)
        return result

    def put(self, version: int, key: Hashable, answer: Kept) -> None:
        """Keep ``answer``, read at ``version`` (or later: a newer read is as good)."""
        self._at(version)
        size = answer.size
        if size > self._max_bytes // 16:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._used -= old.size
        self._entries[key] = answer
        self._used += size
        while self._used > self._max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._used -= dropped.size


class AnswerKeeper:
    """A surface's own answers to reads, kept by the request as it arrived on the wire (a REST
    path and query, a gRPC method and request bytes) in the core's :class:`HotReads`, under
    the same budget and version: a request seen before is answered again, while nothing was
    written, without routing, decoding or calling the core. For open servers only: with
    ``--auth-tokens`` every call is authorized on its decoded request, so nothing is kept.
    Keys are the surface's own (prefixed with its name here), never the core's."""

    __slots__ = ("_hot", "_storage", "_surface")

    def __init__(self, context: Context, surface: str) -> None:
        self._storage = context.storage
        self._hot = context.hot
        self._surface = surface

    async def version(self) -> int | None:
        """The database's version now (read before the answer it keeps), None when nothing can
        be kept: a database that cannot tell (PostgreSQL), or one away (the core answers the
        call, UNAVAILABLE)."""
        try:
            return await self._storage.version()
        except Unavailable:
            return None

    def answer(
        self, key: Hashable, kind: type[K], compute: Callable[[], Awaitable[A]]
    ) -> Awaitable[K | A]:
        """:meth:`HotReads.answer` of the surface's ``key``, at :meth:`version`."""
        return self._hot.answer(self.version, (self._surface, key), kind, compute)


class Recent:
    """Facts this process learnt lately from the database, each trusted for ``ttl`` seconds
    and at most ``size`` of them (the oldest forgotten first): what a check that runs before
    many calls (an app's existence and lock, :mod:`ces_eval.core.resources.apps`) reads once a
    second instead of on every call. A writer in this process drops what it changes; another
    replica's change is seen within ``ttl``."""

    def __init__(self, ttl: float = 1.0, size: int = 10_000) -> None:
        self._ttl = ttl
        self._size = size
        self._entries: OrderedDict[Hashable, tuple[float, object]] = OrderedDict()

    def get(self, key: Hashable) -> object | None:
        """What was learnt of ``key`` less than ``ttl`` seconds ago, else None."""
        found = self._entries.get(key)
        if found is None:
            return None
        if time.monotonic() - found[0] >= self._ttl:
            del self._entries[key]
            return None
        return found[1]

    def put(self, key: Hashable, value: object) -> None:
        self._entries.pop(key, None)
        self._entries[key] = (time.monotonic(), value)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def forget(self, subject: str) -> None:
        """Drop every fact learnt of ``subject``: each one keyed by a tuple ending with it
        (``(kind, app)``). Costs a pass over the facts: for rare changes (an app created,
        deleted, updated or put back)."""
        for key in [k for k in self._entries if isinstance(k, tuple) and k and k[-1] == subject]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()


@dataclass(frozen=True)
class Settings:
    """What the server's options tell the core. Each field but the last two is named after the
    ``ces-eval serve`` option that sets it (:class:`ces_eval.config.ServerConfig` fills them
    by name); the defaults here are those options' defaults."""

    # ``--export-dir``: where ``gs://`` objects live (the object store service.py assembles).
    export_dir: Path = DEFAULT_EXPORT_ROOT
    # ``--locations``: location IDs every project has, besides those its resources use.
    locations: tuple[str, ...] = ()
    # ``--scheduler``: whether this server fires scheduled evaluation runs (and AdvanceClock
    # fires what became due).
    scheduler: bool = True
    # ``--agent-allow-hosts``: the hosts besides loopback that agent endpoints may name
    # (ces_eval.core.resources.agent_endpoints).
    agent_allow_hosts: tuple[str, ...] = ()
    # ``--agent-ca-file``: the certificate authorities (PEM) https agents, judges and
    # simulators are verified against, instead of the default set (ces_eval.core.io.agent_http).
    agent_ca_file: Path | None = None
    # ``--agent-sessions``: sessions this process plays against agents at once, all runs
    # together (ces_eval.core.engine.sessions).
    agent_sessions: int = 64
    # With ``--auth-tokens`` every project has a bucket namespace of its own (docs/security.md):
    # gs://b/p of project P is <export root>/P/b/p, so no token reaches another project's files.
    export_per_project: bool = False
    # ``--require-apps``: whether a call naming something inside an app nobody created is
    # NOT_FOUND (as hosted CES) instead of the app existing from its first use
    # (ces_eval.core.resources.apps).
    require_apps: bool = False
    # The server's own listening ports (gRPC, HTTP), which no agent, judge or simulator may be
    # called at (ces_eval.core.resources.agent_endpoints.reaches_server).
    own_ports: tuple[int, ...] = ()
    # ``--run-tool-fakes``: whether ExecuteTool runs the team's Python code (tool fakes and
    # Python function tools) in a bounded child process (ces_eval.core.engine.tools).
    run_tool_fakes: bool = False


@dataclass(frozen=True)
class Context:
    """The server-wide state a call may use: where resources are kept, who signs page tokens,
    who runs operations, where ``gs://`` objects live, how agents are called, and what the
    server's options say (:class:`Settings`)."""

    storage: Storage
    page_tokens: PageTokens
    runner: Operations
    objects: ObjectStore
    agents: AgentHttp
    settings: Settings = Settings()
    # Reads answered lately, kept while the database's version lasts (standard._get_rpc,
    # standard.list_page).
    hot: HotReads = field(default_factory=HotReads, compare=False, repr=False)
    # Facts learnt lately, trusted for a second (the apps' gate).
    recent: Recent = field(default_factory=Recent, compare=False, repr=False)
    # Where the team's Python code runs (ExecuteTool); None unless ``--run-tool-fakes``.
    code: CodeRunner | None = None
    # Where RetrieveTools asks an MCP toolset's server for its tools; None: nowhere.
    mcp: McpServers | None = None

    def locate(self, gcs_uri: str, resource: str) -> ObjectLocation:
        """Where ``gcs_uri`` is for ``resource``'s project; raises ObjectError."""
        namespace = resource.split("/", 2)[1] if self.settings.export_per_project else ""
        return self.objects.locate(gcs_uri, namespace)

    async def operation(
        self, resource: str, method: str, work: Callable[[], Awaitable[Message]]
    ) -> operations_pb2.Operation:
        """Start the long-running ``method`` about ``resource`` (a name; the operation lives
        in its location) with the services' generic ``OperationMetadata``: the one metadata
        of every operation whose method declares no metadata type of its own (AgentService's
        CreateApp ... ImportApp, ExportEvaluations, BatchDeleteConversations). ``work``'s
        answer becomes the operation's response (:meth:`Operations.start`)."""
        metadata = evaluation_service_pb2.OperationMetadata()
        return await self.runner.start(location_of(resource), method, metadata, work)


# One RPC's implementation: its request is the RPC's own message type, hence Any here (a
# Callable's parameters are contravariant: no narrower type admits every RPC's function).
Rpc = Callable[[Context, Any, "Caller"], Awaitable["Response"]]


# A server-streaming RPC's implementation: the request in, its responses out as they come.
StreamRpc = Callable[[Context, Any, "Caller"], AsyncIterator["Response"]]
# A bidirectional RPC's implementation: the client's messages in as they come, the responses out.
BidiRpc = Callable[[Context, AsyncIterator[Any], "Caller"], AsyncIterator["Response"]]


@dataclass(frozen=True)
class ServerStreaming:
    """A server-streaming RPC (``returns (stream …)``) as a module's ``RPCS`` lists it: what
    tells it from a unary :data:`Rpc` (the surfaces serve it by its descriptor's kind)."""

    run: StreamRpc


@dataclass(frozen=True)
class BidiStreaming:
    """A bidirectional-streaming RPC (``(stream …) returns (stream …)``) as a module's
    ``RPCS`` lists it."""

    run: BidiRpc


class Draining(Exception):
    """What a bidirectional RPC's request iterator raises when the server starts to drain
    (SIGTERM): the RPC says goodbye in its own way (BidiRunSession's ``go_away``) and ends;
    the surface closes the stream once it has."""
