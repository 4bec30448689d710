"""App versions: snapshots of an app (CreateAppVersion, GetAppVersion, ListAppVersions,
DeleteAppVersion) and RestoreAppVersion, which puts a snapshot back (long-running).

A version is created with its ``snapshot`` (output only) taken from what is stored when it is
created: the app and its agents, tools, toolsets, examples and guardrails, as an
:class:`AppSnapshot` holds them. Restoring it makes the app's resources of those kinds what
the snapshot holds: the app's settings (its name, stamps and lock kept), each snapshot resource
written back (created again when deleted since), and each resource of those kinds created since
deleted; evaluations, results, runs and the rest are untouched. A restore is recorded in the
changelog (action ``Restore``, the app before and after). Runs record the version they ran
(docs/semantics.md, "Apps").
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ces_eval.core.aip import names, standard
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import apps, changelogs, in_use
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    app_version_pb2,
    deployment_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    EtagMismatch,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
)

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = ["KINDS", "RPCS", "VERSIONS", "AppVersion", "put_app_back", "put_back", "snapshot"]

M = TypeVar("M", bound="Message")

AppVersion = app_version_pb2.AppVersion
AppSnapshot = app_version_pb2.AppSnapshot

TABLE = tables.declare(
    tables.Table("app_versions", AppVersion, ("description", "creator"), unique_display_name=False)
)
# The repeated fields of a snapshot (all but ``app``): each holds one kind of the app's resources.
KINDS = tuple(f for f in AppSnapshot.DESCRIPTOR.fields if f.name != "app")
_PAGE = 500
_BY_NAME = OrderBy(SortKey.NAME, descending=False)


async def _rows(storage: Storage, table: tables.Table[M], app: str) -> list[M]:
    """Every resource of ``table`` under ``app``, by name."""
    found: list[M] = []
    after: Cursor | None = None
    while True:
        query = ListQuery(parent=app, order=_BY_NAME, limit=_PAGE, after=after)
        rows = await storage.list_rows(table, query)
        found += [table.parse(data) for data, _ in rows]
        if len(rows) < _PAGE:
            return found
        after = rows[-1][1]


async def snapshot(storage: Storage, app: str) -> AppSnapshot:
    """What a version of ``app`` holds, as stored now."""
    taken = AppSnapshot()
    stored = await storage.get_row(apps.TABLE, app)
    if stored is not None:
        taken.app.CopyFrom(stored)
    for field in KINDS:
        table = tables.of_message(field.message_type)
        if table is not None:
            getattr(taken, field.name).extend(await _rows(storage, table, app))
    return taken


async def _insert(storage: Storage, version: AppVersion) -> None:
    version.snapshot.CopyFrom(await snapshot(storage, tables.parent_of(version.name)))
    await storage.insert_row(TABLE, version)


def _deployed(deployment: deployment_pb2.Deployment) -> list[str]:
    """The versions a deployment serves: its own and those its experiment sends traffic to."""
    release = deployment.experiment_config.version_release
    return [deployment.app_version, *(a.app_version for a in release.traffic_allocations)]


# A version a deployment serves is not deleted (DeleteAppVersionRequest has no force).
_DEPLOYMENTS = in_use.Referrer(deployment_pb2.Deployment, "app_version", _deployed, None)

VERSIONS = standard.Resource(
    message=AppVersion,
    parent=names.APP,
    store=dataclasses.replace(standard.Store.of(TABLE, updatable=False), insert=_insert),
    journal=changelogs.record,
    guard=in_use.guard(_DEPLOYMENTS),
)


class _Kept(Protocol):
    name: str
    etag: str


async def put_back(
    storage: Storage,
    table: tables.Table[Any],
    app: str,
    kept: list[Any],
    *,
    keep_others: bool = False,
) -> list[str]:
    """Make the resources of ``table`` under ``app`` those of ``kept`` (copies of stored
    ones, named under ``app``), each written over the one of its name; with ``keep_others``
    the others stay, else they are deleted. Answers a warning for each resource not written:
    one whose display name another resource kept here holds."""
    current: dict[str, _Kept] = {r.name: r for r in await _rows(storage, table, app)}
    wanted: dict[str, _Kept] = {r.name: r for r in kept}
    for name in set() if keep_others else current.keys() - wanted.keys():
        with contextlib.suppress(Missing):  # deleted meanwhile
            await storage.delete_row(table, name, None)
    warnings: list[str] = []
    for name, resource in wanted.items():
        restored = table.message()
        restored.CopyFrom(resource)
        restored.etag = new_etag()
        stamped = now()
        if "update_time" in table.fields:
            restored.update_time.CopyFrom(stamped)
        if "create_time" in table.fields and not restored.HasField("create_time"):
            restored.create_time.CopyFrom(stamped)
        try:
            await _write(storage, table, restored, current.get(name))
        except Conflict as conflict:
            if conflict.field == "name":  # created meanwhile: the snapshot's version wins
                with contextlib.suppress(Missing):
                    await storage.delete_row(table, name, None)
                await storage.insert_row(table, restored)
            else:
                warnings.append(f"{name}: its display name is {conflict.existing}'s; left out.")
    return warnings


async def _write(
    storage: Storage,
    table: tables.Table[Any],
    restored: Any,  # noqa: ANN401 - a message of ``table``
    current: _Kept | None,
) -> None:
    """Write ``restored`` over ``current`` (the version read), or as new when there was none
    or it changed or went meanwhile (the snapshot's version wins)."""
    if current is None:
        await storage.insert_row(table, restored)
        return
    try:
        await storage.replace_row(table, restored, current.etag)
    except (Missing, EtagMismatch):
        with contextlib.suppress(Missing):
            await storage.delete_row(table, restored.name, None)
        await storage.insert_row(table, restored)


async def put_app_back(
    storage: Storage, settings: apps.App, app: str, before: apps.App | None
) -> apps.App:
    """Store a copy of ``settings`` (a snapshot's or an archive's) as the app ``app`` over
    ``before`` (the app as stored, None when there is none) and answer it: named ``app``,
    newly stamped and tagged; its creation time and lock are ``before``'s unless ``before``
    is an implicit app (docs/semantics.md, "Apps") or none, which the settings replace (a new
    app is created now)."""
    stamped = now()
    stored = apps.App()
    stored.CopyFrom(settings)
    stored.name = app
    stored.etag = new_etag()
    stored.update_time.CopyFrom(stamped)
    stored.create_time.CopyFrom(before.create_time if before is not None else stamped)
    if before is not None and apps.IMPLICIT not in before.metadata:
        stored.locked = before.locked
    stored = apps.stored_form(stored)
    if before is None:
        await storage.insert_row(apps.TABLE, stored)
    else:
        await storage.replace_row(apps.TABLE, stored, before.etag)
    return stored


async def restore_app_version(
    context: Context, request: agent_service_pb2.RestoreAppVersionRequest, caller: Caller
) -> operations_pb2.Operation:
    """RestoreAppVersion (long-running): a missing version is NOT_FOUND at once, a locked app
    FAILED_PRECONDITION; the operation puts the snapshot back (the module's docstring)."""
    version = await standard.get(context, VERSIONS, request.name)
    app = tables.parent_of(version.name)
    storage = context.storage
    current = await storage.get_row(apps.TABLE, app)
    if current is not None and current.locked:
        raise apps.locked(app)

    async def work() -> agent_service_pb2.RestoreAppVersionResponse:
        before = await storage.get_row(apps.TABLE, app)
        settings = await put_app_back(storage, version.snapshot.app, app, before)
        for field in KINDS:
            table = tables.of_message(field.message_type)
            if table is not None:
                # Nothing else is kept: no other resource can hold a display name it needs.
                await put_back(storage, table, app, list(getattr(version.snapshot, field.name)))
        await changelogs.record(context, "Restore", before, settings, caller)
        return agent_service_pb2.RestoreAppVersionResponse()

    return await context.operation(app, "RestoreAppVersion", work)


RPCS: dict[str, Rpc] = {
    **standard.methods(VERSIONS, "Create", "Get", "List", "Delete"),
    "RestoreAppVersion": restore_app_version,
}
