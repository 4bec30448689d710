"""The service core's facade: every implemented RPC by name, bound to one :class:`Context`.

Each RPC is a function ``(Context, request, Caller) -> response`` of the module of its resource
or service (:mod:`~ces_eval.core.evaluations`, :mod:`~ces_eval.core.results`,
:mod:`~ces_eval.core.exports`, :mod:`~ces_eval.core.longrunning`,
:mod:`~ces_eval.core.emulator`), which lists it in its ``RPCS``. Nothing here knows about
transports: the surfaces find the implementations through the service descriptors
(:func:`handlers`), so an RPC no module lists is UNIMPLEMENTED everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ces_eval.contract import schema
from ces_eval.core import emulator, evaluations, exports, longrunning, results
from ces_eval.core.context import DEFAULT_EXPORT_ROOT, Context, Rpc
from ces_eval.core.names import snake_case
from ces_eval.core.operations import OperationRunner
from ces_eval.errors import Code, ServiceError
from ces_eval.storage.base import Unavailable

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import Caller, Handler
    from ces_eval.core import pages
    from ces_eval.storage.base import Storage

__all__ = [
    "DEFAULT_EXPORT_ROOT",
    "RESOURCES",
    "RPCS",
    "Core",
    "handlers",
    "implements",
    "snake_case",
]

# RPC name (as in the service descriptors) → implementation.
RPCS: dict[str, Rpc] = {
    **evaluations.RPCS,
    **results.RPCS,
    **exports.RPCS,
    **longrunning.RPCS,
    **emulator.RPCS,
}
# Every declared resource, parents before children.
RESOURCES = (evaluations.EVALUATIONS, results.RESULTS)
_BY_METHOD_NAME = {snake_case(rpc): rpc for rpc in RPCS}


class Core:
    """EvaluationService, Operations and EmulatorService semantics over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        tokens: pages.PageTokens,
        runner: OperationRunner | None = None,
        export_root: Path = DEFAULT_EXPORT_ROOT,
        *,
        export_per_project: bool = False,
    ) -> None:
        self.context = Context(
            storage, tokens, runner or OperationRunner(storage), export_root, export_per_project
        )

    def handler(self, rpc: str) -> Handler:
        """The implementation of RPC ``rpc`` (``CreateEvaluation``) over this core's context."""
        implementation = RPCS[rpc]
        context = self.context

        async def call(request: Message, caller: Caller) -> Message:
            return await implementation(context, request, caller)

        return call

    def __getattr__(self, name: str) -> Handler:
        """An RPC by its snake_case name (``core.create_evaluation``), as tests call it."""
        rpc = _BY_METHOD_NAME.get(name)
        if rpc is None:
            raise AttributeError(name)
        return self.handler(rpc)


def implements(method: descriptor.MethodDescriptor) -> bool:
    """Whether the core serves ``method`` (surfaces answer UNIMPLEMENTED otherwise)."""
    return method.name in RPCS


def _guarded(implementation: Handler) -> Handler:
    """``implementation`` answering UNAVAILABLE (retryable) while the database is away."""

    async def call(request: Message, caller: Caller) -> Message:
        try:
            return await implementation(request, caller)
        except Unavailable as error:
            raise ServiceError(
                Code.UNAVAILABLE,
                "The database is unavailable; retry later.",
                "DATABASE_UNAVAILABLE",
            ) from error

    return call


def handlers(core: Core) -> dict[str, Handler]:
    """``/package.Service/Method`` → the core's implementation, for every method the
    descriptors declare that the core implements (with ``--auth-tokens`` the server wraps them
    in :func:`ces_eval.access.authorized`)."""
    return {
        path: _guarded(core.handler(method.name))
        for path, method in schema.methods().items()
        if implements(method)
    }
