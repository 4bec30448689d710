"""What every core function works over: the storage, the page-token signer, the operation
runner and the export root. Passed explicitly (no mixins, no instance state per service), so a
resource module is a set of plain functions of ``(Context, request, Caller)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ces_eval.core.exchange import objects

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.contract.encoded import Response
    from ces_eval.core.operations import OperationRunner
    from ces_eval.core.pages import PageTokens
    from ces_eval.storage.base import Storage

__all__ = ["DEFAULT_EXPORT_ROOT", "Context", "Rpc"]

DEFAULT_EXPORT_ROOT = Path("./data/exports")


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

    def locate(self, gcs_uri: str, resource: str) -> objects.ObjectPath:
        """Where ``gcs_uri`` is for ``resource``'s project; raises ExchangeError."""
        namespace = resource.split("/", 2)[1] if self.export_per_project else ""
        return objects.locate(gcs_uri, self.export_root, namespace)


# One RPC's implementation: its request is the RPC's own message type, hence Any here (a
# Callable's parameters are contravariant: no narrower type admits every RPC's function).
Rpc = Callable[[Context, Any, "Caller"], Awaitable["Response"]]
