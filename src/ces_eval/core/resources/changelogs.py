"""Changelogs: what changed in an app, one entry per stored change (GetChangelog, ListChangelogs).

Every create, update and delete of an app's AgentService resources (the app itself, its agents,
tools, toolsets, examples, guardrails, deployments and versions: the declarations that name
:func:`record` as their ``journal``) appends a Changelog once the change is stored: its author
(the caller), the action (``Create``, ``Update``, ``Delete``, or ``Restore`` for a version put
back), the resource's name, type and display name, the resource before and after (as JSON
objects), a description naming the fields that changed, and a sequence number that grows by one
per app. A changelog is named after its number (``.../changelogs/change-12``); two changes of
one app recorded at once cannot take the same number (the second takes the next). The app's
own deletion is not recorded: its changelogs go with it. Changelogs are never written by a
caller: the collection has no create, update or delete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.protobuf import json_format, struct_pb2

from ces_eval.core.aip import names, standard
from ces_eval.core.aip.retry import ATTEMPTS
from ces_eval.core.aip.stamps import now
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import changelog_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import Conflict, ListQuery, OrderBy, SortKey

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["CHANGELOGS", "RPCS", "Changelog", "record"]

Changelog = changelog_pb2.Changelog

TABLE = tables.declare(
    tables.Table(
        "changelogs",
        Changelog,
        ("author", "resource", "resource_type", "action", "sequence_number"),
        unique_display_name=False,
        # As ListChangelogsRequest.filter documents them.
        aliases=(("resource_name", "resource"),),
        fold_case=True,
    )
)
CHANGELOGS = standard.Resource(
    message=Changelog,
    parent=names.APP,
    store=standard.Store.of(TABLE, updatable=False),
)
# The fields every write stamps: a change of them alone is no change worth naming.
_STAMPS = frozenset({"update_time", "etag", "last_updated_by", "create_time", "created_by"})
_NEWEST = OrderBy(SortKey.CREATE_TIME, descending=True)


def _json(message: Message) -> struct_pb2.Struct:
    """``message`` as its proto3 JSON object."""
    shown = struct_pb2.Struct()
    json_format.ParseDict(json_format.MessageToDict(message), shown)
    return shown


def _changed(before: Message, after: Message) -> list[str]:
    """The top-level fields whose values differ, stamps aside, in declaration order."""
    return [
        field.name
        for field in after.DESCRIPTOR.fields
        if field.name not in _STAMPS and getattr(before, field.name) != getattr(after, field.name)
    ]


def _entry(action: str, before: Message | None, after: Message | None, author: str) -> Changelog:
    subject = after if after is not None else before
    if subject is None:
        raise AssertionError("a change has a resource before or after it")
    kind = subject.DESCRIPTOR.name
    shown = str(getattr(subject, "display_name", "")) or str(getattr(subject, "name", ""))
    entry = Changelog(
        author=author,
        display_name=shown,
        resource=str(getattr(subject, "name", "")),
        resource_type=kind,
        action=action,
        create_time=now(),
    )
    if before is not None:
        entry.original_resource.CopyFrom(_json(before))
    if after is not None:
        entry.new_resource.CopyFrom(_json(after))
    if before is not None and after is not None:
        fields = _changed(before, after)
        entry.description = f"{action}d {kind} fields: {', '.join(fields) or 'none'}."
    else:
        entry.description = f"{action}d {kind} {shown}."
    return entry


async def record(
    context: Context,
    action: str,
    before: Message | None,
    after: Message | None,
    caller: Caller,
) -> None:
    """Append the change to its app's changelog (the module's docstring)."""
    entry = _entry(action, before, after, caller.user)
    app = names.app_of(entry.resource)
    if action == "Delete" and entry.resource == app:
        return
    storage = context.storage
    for _ in range(ATTEMPTS):
        newest = await storage.list_rows(TABLE, ListQuery(parent=app, order=_NEWEST, limit=1))
        last = TABLE.parse(newest[0][0]).sequence_number if newest else 0
        entry.sequence_number = last + 1
        entry.name = f"{app}/changelogs/change-{entry.sequence_number}"
        try:
            await storage.insert_row(TABLE, entry)
        except Conflict:
            continue  # another change took the number: the next one
        return
    raise ServiceError(
        Code.ABORTED,
        f"The changelog of {app} changed {ATTEMPTS} times while recording a change; retry.",
        "CHANGELOG_CONTENDED",
        {"app": app},
    )


RPCS: dict[str, Rpc] = standard.methods(CHANGELOGS, "Get", "List")
