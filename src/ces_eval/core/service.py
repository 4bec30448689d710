"""The service core's facade: every implemented RPC by name, bound to one :class:`Context`.

Each RPC is a function ``(Context, request, Caller) -> response`` of the module of its resource or
service (:mod:`~ces_eval.core.resources.evaluations`, :mod:`~ces_eval.core.resources.results`,
:mod:`~ces_eval.core.resources.datasets`, :mod:`~ces_eval.core.exchange.exports`,
:mod:`~ces_eval.core.resources.longrunning`, :mod:`~ces_eval.core.emulator`), which lists it in its
``RPCS`` by RPC name; here each module's RPCs are filed under their service, so that two services'
RPCs of one name (EvaluationService's and EmulatorService's ImportEvaluations) stay apart. Nothing
here knows about transports: the surfaces find the implementations through the service descriptors
(:func:`handlers`), so an RPC no module lists is UNIMPLEMENTED everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ces_eval.contract import schema
from ces_eval.contract.encoded import message_of
from ces_eval.core import emulator
from ces_eval.core.aip import standard
from ces_eval.core.aip.context import BidiStreaming, Context, Rpc, ServerStreaming, Settings
from ces_eval.core.aip.names import snake_case
from ces_eval.core.engine import metrics, running, scheduled_runs, session_service, tools
from ces_eval.core.exchange import app_archive, exports, imports, media
from ces_eval.core.io.agent_http import HttpxAgents
from ces_eval.core.io.mcp_servers import McpClients
from ces_eval.core.io.objects import ExportFolder
from ces_eval.core.io.operations import OperationRunner
from ces_eval.core.io.tool_sandbox import Sandbox
from ces_eval.core.resources import (
    app_resources,
    apps,
    changelogs,
    conversations,
    datasets,
    evaluations,
    expectations,
    locations,
    longrunning,
    model_methods,
    results,
    runs,
    security_settings,
    versions,
    widgets,
)
from ces_eval.errors import Code, ServiceError
from ces_eval.storage.base import Unavailable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import BidiHandler, Caller, Handler, StreamHandler
    from ces_eval.contract.encoded import Response
    from ces_eval.core.aip import pages
    from ces_eval.storage.base import Storage

    MessageHandler = Callable[[Message, Caller], Awaitable[Message]]

__all__ = [
    "RESOURCES",
    "RPCS",
    "Core",
    "bidi_handlers",
    "handlers",
    "implements",
    "needs_model",
    "snake_case",
    "stream_handlers",
]

# An RPC as a module lists it: unary, or one of the streaming kinds (core/aip/context.py).
AnyRpc = Rpc | ServerStreaming | BidiStreaming

# Service (full name, as in the descriptors) → the modules' RPCs it holds.
_SERVICES: dict[str, Mapping[str, AnyRpc]] = {
    "google.cloud.ces.v1beta.EvaluationService": {
        **evaluations.RPCS,
        **results.RPCS,
        **metrics.RPCS,
        **exports.RPCS,
        **expectations.RPCS,
        **scheduled_runs.RPCS,
        **datasets.RPCS,
        **runs.RPCS,
        **running.RPCS,
        **imports.RPCS,
        **media.RPCS,
        **conversations.RPCS,
    },
    "google.cloud.ces.v1beta.AgentService": {
        **apps.RPCS,
        **app_resources.RPCS,
        **versions.RPCS,
        **changelogs.RPCS,
        **app_archive.RPCS,
        **conversations.AGENT_RPCS,
        **security_settings.RPCS,
        **model_methods.RPCS,
    },
    "google.cloud.ces.v1beta.ToolService": tools.RPCS,
    "google.cloud.ces.v1beta.SessionService": session_service.RPCS,
    "google.cloud.ces.v1beta.WidgetService": widgets.RPCS,
    "google.longrunning.Operations": longrunning.RPCS,
    "google.cloud.location.Locations": locations.RPCS,
    "ces_eval.emulator.v1.EmulatorService": emulator.RPCS,
}
# gRPC path (``/package.Service/Method``, :func:`ces_eval.contract.schema.method_path`) →
# implementation.
RPCS: dict[str, AnyRpc] = {
    f"/{service}/{name}": rpc for service, rpcs in _SERVICES.items() for name, rpc in rpcs.items()
}


def _resources(rpcs: Iterable[AnyRpc]) -> tuple[standard.Resource[Any], ...]:
    """Every resource whose standard methods ``rpcs`` hold (:class:`standard.StandardMethod`),
    each once, in the order the RPCs first name them, a parent before its children."""
    found: list[standard.Resource[Any]] = []

    def add(resource: standard.Resource[Any]) -> None:
        if resource.parent_resource is not None:
            add(resource.parent_resource)
        if resource not in found:
            found.append(resource)

    for rpc in rpcs:
        if isinstance(rpc, standard.StandardMethod):
            add(rpc.resource)
    return tuple(found)


# Every declared resource, parents before children.
RESOURCES = _resources(RPCS.values())
# ``core.create_evaluation``: each implemented RPC by its snake_case name. Where two services
# share a name (ImportEvaluations), the first service of _SERVICES keeps it (the official one);
# the other is reached by its path (``core.handler(path)``).
_BY_METHOD_NAME: dict[str, str] = {}
for _path in RPCS:
    _BY_METHOD_NAME.setdefault(snake_case(_path.rsplit("/", 1)[1]), _path)


class Core:
    """EvaluationService, Operations and EmulatorService semantics over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        tokens: pages.PageTokens,
        runner: OperationRunner | None = None,
        settings: Settings | None = None,
    ) -> None:
        settings = settings or Settings()
        runner = runner or OperationRunner(storage)
        objects = ExportFolder(settings.export_dir)
        self.context = Context(
            storage,
            tokens,
            runner,
            objects,
            HttpxAgents(settings.agent_ca_file),
            settings,
            code=Sandbox() if settings.run_tool_fakes else None,
            mcp=McpClients(settings.agent_ca_file),
        )

    def handler(self, path: str) -> Handler:
        """The implementation of the RPC at gRPC path ``path``
        (``/google.cloud.ces.v1beta.EvaluationService/CreateEvaluation``) over this core's
        context, as the surfaces call it: its response may be held as wire bytes
        (:class:`~ces_eval.contract.encoded.Encoded`)."""
        # Every call naming something inside an app passes the apps' rule first.
        rpc = RPCS[path]
        if isinstance(rpc, ServerStreaming | BidiStreaming):
            raise TypeError(f"{path} streams: see stream_handler and bidi_handler")
        implementation = apps.gate(schema.methods()[path], rpc)
        context = self.context

        async def call(request: Message, caller: Caller) -> Response:
            return await implementation(context, request, caller)

        return call

    def stream_handler(self, path: str) -> StreamHandler:
        """The implementation of the server-streaming RPC at ``path``, behind the apps' rule
        (before its first response)."""
        rpc = RPCS[path]
        if not isinstance(rpc, ServerStreaming):
            raise TypeError(f"{path} is no server-streaming RPC")
        method = schema.methods()[path]
        context = self.context

        async def call(request: Message, caller: Caller) -> AsyncIterator[Response]:
            await apps.admit(context, method, request)
            async for response in rpc.run(context, request, caller):
                yield response

        return call

    def bidi_handler(self, path: str) -> BidiHandler:
        """The implementation of the bidirectional RPC at ``path`` (which applies the apps'
        rule itself, once it has read what names the app)."""
        rpc = RPCS[path]
        if not isinstance(rpc, BidiStreaming):
            raise TypeError(f"{path} is no bidirectional RPC")
        context = self.context

        def call(requests: AsyncIterator[Message], caller: Caller) -> AsyncIterator[Response]:
            return rpc.run(context, requests, caller)

        return call

    def __getattr__(self, name: str) -> MessageHandler:
        """An RPC by its snake_case name (``core.create_evaluation``), as tests call it: its
        response is always a message."""
        path = _BY_METHOD_NAME.get(name)
        if path is None:
            raise AttributeError(name)
        implementation = self.handler(path)

        async def call(request: Message, caller: Caller) -> Message:
            return message_of(await implementation(request, caller))

        return call


def implements(method: descriptor.MethodDescriptor) -> bool:
    """Whether the core serves ``method`` (surfaces answer UNIMPLEMENTED otherwise)."""
    return schema.method_path(method) in RPCS


def needs_model(method: descriptor.MethodDescriptor) -> bool:
    """Whether the core answers ``method`` FAILED_PRECONDITION for want of a model
    (:mod:`~ces_eval.core.resources.model_methods`): README's methods table says so."""
    return isinstance(RPCS.get(schema.method_path(method)), model_methods.NeedsModel)


def _guarded(implementation: Handler) -> Handler:
    """``implementation`` answering UNAVAILABLE (retryable) while the database is away."""

    async def call(request: Message, caller: Caller) -> Response:
        try:
            return await implementation(request, caller)
        except Unavailable as error:
            raise ServiceError(
                Code.UNAVAILABLE,
                "The database is unavailable; retry later.",
                "DATABASE_UNAVAILABLE",
            ) from error

    return call


def _unavailable(error: Unavailable) -> ServiceError:
    return ServiceError(
        Code.UNAVAILABLE, "The database is unavailable; retry later.", "DATABASE_UNAVAILABLE"
    )


def _guarded_stream(implementation: StreamHandler) -> StreamHandler:
    """:func:`_guarded` for a server stream."""

    async def call(request: Message, caller: Caller) -> AsyncIterator[Response]:
        try:
            async for response in implementation(request, caller):
                yield response
        except Unavailable as error:
            raise _unavailable(error) from error

    return call


def _guarded_bidi(implementation: BidiHandler) -> BidiHandler:
    """:func:`_guarded` for a bidirectional stream."""

    async def call(requests: AsyncIterator[Message], caller: Caller) -> AsyncIterator[Response]:
        try:
            async for response in implementation(requests, caller):
                yield response
        except Unavailable as error:
            raise _unavailable(error) from error

    return call


def _unary(method: descriptor.MethodDescriptor) -> bool:
    return not (method.client_streaming or method.server_streaming)


def handlers(core: Core) -> dict[str, Handler]:
    """``/package.Service/Method`` → the core's implementation, for every unary method the
    descriptors declare that the core implements (with ``--auth-tokens`` the server wraps them
    in :func:`ces_eval.access.authorized`). The streaming ones: :func:`stream_handlers`,
    :func:`bidi_handlers`."""
    return {
        path: _guarded(core.handler(path))
        for path, method in schema.methods().items()
        if implements(method) and _unary(method)
    }


def stream_handlers(core: Core) -> dict[str, StreamHandler]:
    """:func:`handlers` of the server-streaming methods (gRPC and REST serve them)."""
    return {
        path: _guarded_stream(core.stream_handler(path))
        for path, method in schema.methods().items()
        if implements(method) and method.server_streaming and not method.client_streaming
    }


def bidi_handlers(core: Core) -> dict[str, BidiHandler]:
    """:func:`handlers` of the bidirectional methods (gRPC alone serves them)."""
    return {
        path: _guarded_bidi(core.bidi_handler(path))
        for path, method in schema.methods().items()
        if implements(method) and method.client_streaming and method.server_streaming
    }
