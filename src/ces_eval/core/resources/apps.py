"""Apps: the resource's declaration, its RPCs (AgentService's GetApp, ListApps, UpdateApp, and
CreateApp and DeleteApp, long-running as the official client declares them) and the rule every
call naming something inside an app goes through (:func:`gate`).

Apps before use (docs/semantics.md, "Apps"). Hosted CES requires an app to exist before
anything is created in it; ces-eval has always let evaluations be created in an app nobody
created. Both hold, by the server's ``--require-apps`` option:

- off (the default): an app that a call creates something in (a POST under it: CreateEvaluation,
  RunEvaluation, CreateTool, an emulator seed, ...) and that is not stored is stored first, with
  the defaults of :func:`implicit` (its ID as display name, no thresholds, no personas, the
  metadata entry :data:`IMPLICIT`), so it is listed and read like any other. CreateApp of such
  an app's ID adopts it: the new app replaces the implicit one and keeps its children.
- on: every call naming something inside an app that is not stored is NOT_FOUND naming the app.

A ``locked`` app refuses what would change its resources (creates, updates, deletes and imports
under it: FAILED_PRECONDITION, reason APP_LOCKED); runs, exports and reads go on, and the app
itself can still be unlocked (an UpdateApp whose mask is ``locked`` alone). Deleting an app
deletes everything stored under it, in one transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from functools import cache
from typing import TYPE_CHECKING, Any

from ces_eval.contract import schema
from ces_eval.core.aip import names, standard
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import changelogs
from ces_eval.core.resources.locations import LOCATION
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_pb2,
    agent_service_pb2,
    app_pb2,
    deployment_pb2,
    guardrail_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import Conflict, Cursor, EtagMismatch, ListQuery, Missing

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from google.longrunning import operations_pb2
    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = [
    "APPS",
    "IMPLICIT",
    "RPCS",
    "TABLE",
    "App",
    "admit",
    "forget",
    "gate",
    "implicit",
    "locked",
    "stored_form",
]

App = app_pb2.App
# The metadata entry of an app stored because it was used before anyone created it.
IMPLICIT = "ces-eval/implicit"
_APP_SEGMENTS = len(names.APP.pattern.split("/"))

TABLE = tables.declare(
    tables.Table(
        "apps",
        App,
        ("description", "pinned", "locked", "root_agent"),
        # An app used before it is created is named after its ID, which another app's display
        # name may already be: display names of apps are not unique here.
        unique_display_name=False,
    )
)


def _delete(storage: Storage, name: str, etag: str) -> Awaitable[None]:
    return storage.delete_tree(TABLE, name, etag)


# -- deployment_count: derived when read ---------------------------------------------------------
# Counted when apps are read, never stored: one grouped COUNT over the deployments' index on
# parent per Get or List page, so no write of a deployment touches its app (its etag, the
# app's writers' conflicts) and nothing that puts an app back (restore, import) can carry a
# stale count. The stored bytes stay what is served: the count is appended to them as its
# field's encoding (a field repeated later in the bytes wins, and the stored row never holds
# it), so ListApps keeps answering stored bytes without a parse.


def _deployments() -> tables.Table[Any]:
    # By message: the deployments' declaration imports this module.
    table = tables.of_message(deployment_pb2.Deployment)
    if table is None:  # a declaration fault
        raise AssertionError("Deployment is kept in no declared table")
    return table


def _with_count(data: bytes, count: int) -> bytes:
    """A stored app's bytes as served: with its ``deployment_count`` (absent when 0)."""
    return data + App(deployment_count=count).SerializeToString() if count else data


async def _read(storage: Storage, name: str) -> bytes | None:
    data = await storage.read_row(TABLE, name)
    if data is None:
        return None
    counts = await storage.count_rows(_deployments(), [name])
    return _with_count(data, counts[name])


async def _get(storage: Storage, name: str) -> App | None:
    data = await _read(storage, name)
    return None if data is None else App.FromString(data)


async def _list(storage: Storage, query: ListQuery) -> list[tuple[bytes, Cursor]]:
    rows = await storage.list_rows(TABLE, query)
    counts = await storage.count_rows(_deployments(), [cursor.name for _, cursor in rows])
    return [(_with_count(data, counts[cursor.name]), cursor) for data, cursor in rows]


def stored_form(app: App) -> App:
    """A copy of ``app`` as its row holds it: without the fields derived when it is read."""
    stored = App()
    stored.CopyFrom(app)
    stored.ClearField("deployment_count")
    return stored


async def _verify(context: Context, app: App) -> list[FieldViolation]:
    """An app's ``root_agent`` names a stored agent of the app, and each of its ``guardrails``
    a stored guardrail of it (the targets given by their messages: their declarations'
    module imports this one)."""
    found = []
    if app.root_agent:
        found += await standard.references(
            context, agent_pb2.Agent, [app.root_agent], "app.root_agent", app.name, repeated=False
        )
    found += await standard.references(
        context, guardrail_pb2.Guardrail, app.guardrails, "app.guardrails", app.name
    )
    return found


APPS = standard.Resource(
    message=App,
    parent=LOCATION,
    store=dataclasses.replace(
        standard.Store.of(TABLE),
        get=_get,
        read=_read,
        list=_list,
        insert=lambda storage, app: storage.insert_row(TABLE, stored_form(app)),
        replace=lambda storage, app, etag: storage.replace_row(TABLE, stored_form(app), etag),
        delete=_delete,
        delete_after=None,  # an app's delete takes its tree; no guard writes before it
    ),
    journal=changelogs.record,
    verify=_verify,
)


def implicit(name: str) -> App:
    """The app ``name`` as it is stored when first used without being created: its ID as its
    display name, nothing else set (so the engine's documented defaults apply), marked
    :data:`IMPLICIT`."""
    created = now()
    return App(
        name=name,
        display_name=name.rsplit("/", 1)[-1],
        create_time=created,
        update_time=created,
        etag=new_etag(),
        metadata={IMPLICIT: "true"},
    )


def locked(app: str) -> ServiceError:
    """FAILED_PRECONDITION: ``app`` is locked."""
    return ServiceError(
        Code.FAILED_PRECONDITION,
        f"{app} is locked: its resources cannot be changed until it is unlocked "
        "(UpdateApp with update_mask 'locked').",
        "APP_LOCKED",
        {"app": app},
        resource=(APPS.pattern.type, app),
    )


async def _adopt(context: Context, request: agent_service_pb2.CreateAppRequest) -> bool:
    """Delete the implicit app the request's ID names, if that is what takes it."""
    name = f"{request.parent}/apps/{request.app_id}"
    current = await context.storage.get_row(TABLE, name)
    if current is None or IMPLICIT not in current.metadata:
        return False
    with contextlib.suppress(Missing, EtagMismatch):  # adopted or changed meanwhile
        await context.storage.delete_row(TABLE, name, current.etag)
    return True


async def create_app(
    context: Context, request: agent_service_pb2.CreateAppRequest, caller: Caller
) -> operations_pb2.Operation:
    """AIP-133 Create, long-running: the app is stored (or refused) before the call answers; the
    operation it answers is done with the app. An implicit app of the requested ID is adopted."""
    try:
        app = await standard.create(context, APPS, request, caller)
    except ServiceError as error:
        # Taken: by an implicit app, which the new one replaces (what it holds stays), once
        # the request proved valid; by a created one, ALREADY_EXISTS.
        if error.code is not Code.ALREADY_EXISTS or not await _adopt(context, request):
            raise
        app = await standard.create(context, APPS, request, caller)
        # What the implicit app held stays: its deployments count.
        counts = await context.storage.count_rows(_deployments(), [app.name])
        app.deployment_count = counts[app.name]
    forget(context, app.name)

    async def work() -> App:
        return app

    return await context.operation(request.parent, "CreateApp", work)


async def update_app(
    context: Context, request: agent_service_pb2.UpdateAppRequest, caller: Caller
) -> App:
    """AIP-134 Update; a locked app only lets ``locked`` change."""
    current = await context.storage.get_row(TABLE, request.app.name)
    if current is not None and current.locked and list(request.update_mask.paths) != ["locked"]:
        raise locked(current.name)
    try:
        return await standard.update(context, APPS, request, caller)
    finally:
        forget(context, request.app.name)


async def delete_app(
    context: Context, request: agent_service_pb2.DeleteAppRequest, caller: Caller
) -> operations_pb2.Operation:
    """AIP-135 Delete, long-running: a missing app, a stale etag or a locked app is refused
    before the call answers; the operation deletes the app and everything under it."""
    current = await standard.get(context, APPS, request.name)
    if request.etag and request.etag != current.etag:
        raise ServiceError.aborted_etag(APPS.pattern.type, request.name)
    if current.locked:
        raise locked(current.name)

    async def work() -> Message:
        try:
            return await standard.delete(context, APPS, request)
        finally:
            forget(context, request.name)

    return await context.operation(request.name, "DeleteApp", work)


RPCS: dict[str, Rpc] = {
    **standard.methods(APPS, "Get", "List"),
    "CreateApp": create_app,
    "UpdateApp": update_app,
    "DeleteApp": delete_app,
}

# -- the gate ------------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\{([a-z_.]+)=([^}]*)\}")
# What the gate learns of an app (in Context.recent): whether it is locked.
_KNOWN = "app-locked"
# The CES services whose writes a locked app refuses (the emulator's seeds are the tests' own).
_LOCKABLE = ("google.cloud.ces.v1beta.EvaluationService", "google.cloud.ces.v1beta.AgentService")
# POST methods that change an app's resources (the others run, export, test or read).
_CHANGING = ("Create", "Import", "Restore", "BatchDelete", "Upload", "Generate")


@dataclasses.dataclass(frozen=True)
class _Scope:
    """Where a method's request names something inside an app, and what the method does."""

    field: tuple[str, ...]  # the request field (path) whose value is under the app
    creates: bool  # a POST: it may store something in the app
    changes: bool  # it changes the app's resources (a locked app refuses it)


@cache
def _scope(method: descriptor.MethodDescriptor) -> _Scope | None:
    """The scope of ``method``, read from its HTTP rule: None unless its path variable lies
    inside an app (the app itself, as GetApp names it, is not inside)."""
    rule = schema.http_rule(method)
    if rule is None:
        return None
    verb = rule.WhichOneof("pattern")
    template = str(getattr(rule, verb or "get"))
    found = _VARIABLE.search(template)
    if found is None:
        return None
    path, segments = found.group(1), found.group(2).split("/")
    if segments[: _APP_SEGMENTS - 1] != ["projects", "*", "locations", "*", "apps"]:
        return None
    if len(segments) == _APP_SEGMENTS and path.rsplit(".", 1)[-1] == "name":
        return None
    service = method.containing_service.full_name
    changes = service in _LOCKABLE and (
        verb in ("patch", "delete") or (verb == "post" and method.name.startswith(_CHANGING))
    )
    return _Scope(tuple(path.split(".")), creates=verb == "post", changes=changes)


def _app_of(request: Message, field: tuple[str, ...]) -> str:
    value: Any = request
    for part in field:
        value = getattr(value, part)
    # A malformed name gives "": the method's own checks say what is wrong.
    return names.app_of(str(value))


async def _admit(context: Context, scope: _Scope, request: Message) -> None:
    app = _app_of(request, scope.field)
    if not app or names.APP.violation(app, "app", owned=0) is not None:
        return
    if not (scope.creates or scope.changes or context.settings.require_apps):
        return  # a read in an app that need not exist: nothing to look up
    key = (_KNOWN, app)
    known = context.recent.get(key)  # whether it is locked, learnt within the last second
    if known is None:
        stored = await context.storage.get_row(TABLE, app)
        if stored is None:
            if context.settings.require_apps:
                raise ServiceError.not_found(APPS.pattern.type, app)
            if not scope.creates:
                return
            await store_implicit(context, app)
            known = False
        else:
            known = stored.locked
        context.recent.put(key, known)
    if scope.changes and known:
        raise locked(app)


async def store_implicit(context: Context, app: str) -> None:
    """Store ``app`` as :func:`implicit` makes it, unless it is stored already (or meanwhile,
    by another call)."""
    with contextlib.suppress(Conflict):
        await context.storage.insert_row(TABLE, implicit(app))


def forget(context: Context, app: str) -> None:
    """Drop what the core learnt of ``app`` (its lock changed, it was deleted, adopted or put
    back): the gate's facts and every other one keyed by the app (Context.recent)."""
    context.recent.forget(app)


async def admit(context: Context, method: descriptor.MethodDescriptor, request: Message) -> None:
    """The rule of the module's docstring for one call of ``method`` (what :func:`gate` does
    before a unary call): for a streaming call, before its first response."""
    scope = _scope(method)
    if scope is not None:
        await _admit(context, scope, request)


def gate(method: descriptor.MethodDescriptor, implementation: Rpc) -> Rpc:
    """``implementation`` behind the rule of the module's docstring, when ``method`` names
    something inside an app; ``implementation`` itself otherwise."""
    scope = _scope(method)
    if scope is None:
        return implementation

    async def call(context: Context, request: Any, caller: Caller) -> Any:  # noqa: ANN401
        await _admit(context, scope, request)
        return await implementation(context, request, caller)

    return call
