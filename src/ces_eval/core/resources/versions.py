"""App versions: snapshots of an app (CreateAppVersion, GetAppVersion, ListAppVersions,
DeleteAppVersion) and RestoreAppVersion, which puts a snapshot back (long-running).

A version is created with its ``snapshot`` (output only) taken from what is stored when it is
created: the app and its agents, tools, toolsets, examples and guardrails, as an
:class:`AppSnapshot` holds them. Restoring it makes the app's resources of those kinds what
the snapshot holds: the app's settings (its name, stamps and lock kept), each snapshot resource
written back (created again when deleted since), and each resource of those kinds created since
deleted, all in one transaction (:func:`put_back`, which ImportApp uses too); evaluations,
results, runs and the rest are untouched. A restore is recorded in the changelog (action
``Restore``, the app before and after). A version a deployment serves is not deleted. Runs
record the version they ran (docs/semantics.md, "Apps").
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ces_eval.core.aip import names, standard
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import apps, changelogs, in_use
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    app_version_pb2,
    deployment_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import (
    Change,
    Conflict,
    Cursor,
    Delete,
    EtagMismatch,
    Insert,
    ListQuery,
    Missing,
    OrderBy,
    Replace,
    SortKey,
)

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = ["KINDS", "RPCS", "VERSIONS", "AppVersion", "put_back", "snapshot"]

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
    display_name: str
    etag: str


def _settings(settings: apps.App, app: str, before: apps.App | None) -> apps.App:
    """A copy of ``settings`` (a snapshot's or an archive's) as the app ``app`` stores it over
    ``before`` (the app as stored, None when there is none): named ``app``, newly stamped and
    tagged; its creation time and lock are ``before``'s unless ``before`` is an implicit app
    (docs/semantics.md, "Apps") or none, which the settings replace (a new app is created
    now)."""
    stamped = now()
    stored = apps.App()
    stored.CopyFrom(settings)
    stored.name = app
    stored.etag = new_etag()
    stored.update_time.CopyFrom(stamped)
    stored.create_time.CopyFrom(before.create_time if before is not None else stamped)
    if before is not None and apps.IMPLICIT not in before.metadata:
        stored.locked = before.locked
    return apps.stored_form(stored)


def _restored(table: tables.Table[Any], resource: Any) -> Any:  # noqa: ANN401 - a message of it
    """A copy of ``resource`` as written back: a new etag, updated now, created now unless it
    says when."""
    restored = table.message()
    restored.CopyFrom(resource)
    restored.etag = new_etag()
    stamped = now()
    if "update_time" in table.fields:
        restored.update_time.CopyFrom(stamped)
    if "create_time" in table.fields and not restored.HasField("create_time"):
        restored.create_time.CopyFrom(stamped)
    return restored


def _left_out(
    table: tables.Table[Any],
    current: dict[str, _Kept],
    wanted: dict[str, _Kept],
    removed: set[str],
) -> dict[str, str]:
    """The wanted resources not written, each with the resource whose display name it would
    take: held by a resource that stays (neither removed nor written over, a left-out one
    included) or by a wanted one before it, by name. Empty where display names need not be
    unique."""
    left: dict[str, str] = {}
    if not table.unique_display_name:
        return left
    while True:
        holders = {
            r.display_name: name
            for name, r in current.items()
            if name not in removed and (name not in wanted or name in left)
        }
        found = dict(left)
        for name in sorted(wanted.keys() - left.keys()):
            shown = wanted[name].display_name
            if shown in holders:
                found[name] = holders[shown]
            else:
                holders[shown] = name
        if found == left:
            return left
        left = found


async def _kind_back(
    storage: Storage,
    table: tables.Table[Any],
    app: str,
    kept: list[Any],
    *,
    keep_others: bool,
) -> tuple[list[Delete], list[Insert], list[str]]:
    """What makes the resources of ``table`` under ``app`` those of ``kept`` (copies of stored
    ones, named under ``app``): each current one written over deleted (in the etag read),
    each kept one inserted; with ``keep_others`` the others stay, else they are deleted. And
    a warning for each kept one left out (:func:`_left_out`)."""
    current: dict[str, _Kept] = {r.name: r for r in await _rows(storage, table, app)}
    wanted: dict[str, _Kept] = {r.name: r for r in kept}
    removed = set() if keep_others else current.keys() - wanted.keys()
    left = _left_out(table, current, wanted, removed)
    written = [name for name in sorted(wanted) if name not in left]
    deleted = sorted(removed | (current.keys() & set(written)))
    deletes = [Delete(table, name, current[name].etag) for name in deleted]
    inserts = [Insert(table, _restored(table, wanted[name])) for name in written]
    warnings = [
        f"{name}: its display name is {holder}'s; left out." for name, holder in left.items()
    ]
    return deletes, inserts, warnings


async def put_back(
    storage: Storage, app: str, taken: AppSnapshot, *, keep_others: bool = False
) -> tuple[apps.App | None, apps.App, list[str]]:
    """Make the app ``app`` what ``taken`` holds, in one transaction (:meth:`Storage.write_rows`):
    its settings (:func:`_settings`) and, for each kind of :data:`KINDS`, its resources; with
    ``keep_others`` the app's other resources of those kinds stay, else they are deleted.
    Answers the app before (None: there was none) and after, and a warning for each resource
    left out because a resource that stays holds its display name. What changed between the
    reads and the write is read again, the written-back version winning (ABORTED past
    :data:`~ces_eval.core.aip.retry.ATTEMPTS` rounds)."""

    async def round_() -> tuple[apps.App | None, apps.App, list[str]]:
        before = await storage.get_row(apps.TABLE, app)
        stored = _settings(taken.app, app, before)
        changes: list[Change] = [
            Insert(apps.TABLE, stored)
            if before is None
            else Replace(apps.TABLE, stored, before.etag)
        ]
        inserts: list[Change] = []
        warnings: list[str] = []
        for field in KINDS:
            table = tables.of_message(field.message_type)
            if table is None:
                continue
            resources = list(getattr(taken, field.name))
            deletes, added, left = await _kind_back(
                storage, table, app, resources, keep_others=keep_others
            )
            changes += deletes
            inserts += added
            warnings += left
        try:
            # Every delete before any insert: a display name passes from one to the other.
            await storage.write_rows([*changes, *inserts])
        except (Conflict, EtagMismatch, Missing) as changed:
            raise Changed from changed
        return before, stored, warnings

    # Given up as an update without an etag gives up (standard.update).
    return await rewrite(round_, partial(ServiceError.aborted_etag, apps.APPS.pattern.type, app))


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
        # Nothing else is kept: no other resource can hold a display name it needs.
        before, settings, _ = await put_back(storage, app, version.snapshot)
        apps.forget(context, app)
        await changelogs.record(context, "Restore", before, settings, caller)
        return agent_service_pb2.RestoreAppVersionResponse()

    return await context.operation(app, "RestoreAppVersion", work)


RPCS: dict[str, Rpc] = {
    **standard.methods(VERSIONS, "Create", "Get", "List", "Delete"),
    "RestoreAppVersion": restore_app_version,
}
