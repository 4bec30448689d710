"""What every core function works over: the storage, the page-token signer, the operation
runner and the export root. Passed explicitly (no mixins, no instance state per service), so a
resource module is a set of plain functions of ``(Context, request, Caller)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ces_eval.core.exchange import objects

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.contract.encoded import Encoded, Response
    from ces_eval.core.operations import OperationRunner
    from ces_eval.core.pages import PageTokens
    from ces_eval.storage.base import Storage

__all__ = ["DEFAULT_EXPORT_ROOT", "Context", "HotReads", "Rpc"]

DEFAULT_EXPORT_ROOT = Path("./data/exports")


class HotReads:
    """Stored resources answered lately, by name, as their Get answered them; all valid at one
    version of the database (:meth:`~ces_eval.storage.base.Storage.version`) and dropped when
    it moves, so nothing here is ever older than the database. A resource read again while
    nothing was written costs one version query: no row read, no parse, and the same bytes
    object, whose hash and renderings are remembered. At most ``max_bytes`` of answers, each
    at most a 64th of it; the least recently read go first."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self._max_bytes = max_bytes
        self._version: int | None = None
        self._entries: OrderedDict[str, Encoded] = OrderedDict()
        self._used = 0

    def _at(self, version: int) -> None:
        if version != self._version:
            self._entries.clear()
            self._used = 0
            self._version = version

    def get(self, version: int, name: str) -> Encoded | None:
        """The answer kept for ``name`` if it was read at ``version``."""
        self._at(version)
        found = self._entries.get(name)
        if found is not None:
            self._entries.move_to_end(name)
        return found

    def put(self, version: int, name: str, answer: Encoded) -> None:
        """Keep ``answer``, read at ``version`` (or later: a newer read is as good)."""
        self._at(version)
        size = len(answer.data)
        if size > self._max_bytes // 64:
            return
        old = self._entries.pop(name, None)
        if old is not None:
            self._used -= len(old.data)
        self._entries[name] = answer
        self._used += size
        while self._used > self._max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._used -= len(dropped.data)


@dataclass(frozen=True)
class Context:
    """The server-wide state a call may use: where resources are kept, who signs page tokens,
    who runs operations, and where ``gs://`` objects live."""

    storage: Storage
    page_tokens: PageTokens
    runner: OperationRunner
    export_root: Path = DEFAULT_EXPORT_ROOT
    # With ``--auth-tokens`` every project has a bucket namespace of its own (docs/security.md):
    # gs://b/p of project P is <export root>/P/b/p, so no token reaches another project's files.
    export_per_project: bool = False
    # ``--locations``: location IDs every project has, besides those its resources use.
    locations: tuple[str, ...] = ()
    # ``--scheduler``: whether this server fires scheduled evaluation runs (and AdvanceClock
    # fires what became due).
    scheduling: bool = True
    # Gets answered lately, kept while the database's version lasts (standard._get_rpc).
    hot: HotReads = field(default_factory=HotReads, compare=False, repr=False)

    def locate(self, gcs_uri: str, resource: str) -> objects.ObjectPath:
        """Where ``gcs_uri`` is for ``resource``'s project; raises ExchangeError."""
        namespace = resource.split("/", 2)[1] if self.export_per_project else ""
        return objects.locate(gcs_uri, self.export_root, namespace)


# One RPC's implementation: its request is the RPC's own message type, hence Any here (a
# Callable's parameters are contravariant: no narrower type admits every RPC's function).
Rpc = Callable[[Context, Any, "Caller"], Awaitable["Response"]]
