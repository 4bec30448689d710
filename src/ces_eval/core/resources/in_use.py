"""Delete guards of an app's resources: what another resource of the app names is not deleted
while named (docs/semantics.md, "Agents, tools and the app's other resources").

A guard (:func:`guard`) is declared by its referrers (:class:`Referrer`): the resources that
may name the one deleted, the field they name it in, how to read the names one holds and how
one stops naming a name. Without ``force`` (or when the delete request has none) a named
resource is FAILED_PRECONDITION, reason ``RESOURCE_IN_USE``, listing (up to ten of) its
referrers and their fields. With ``force`` each referrer is rewritten without the name (a new
etag) in the delete's transaction (a :class:`~ces_eval.core.aip.standard.Prelude`), and each
rewrite is recorded in the changelog as an update by the caller once it is stored.

Referrers are given by their message class, their table found when a delete needs it
(:func:`ces_eval.storage.tables.of_message`): versions are guarded by deployments, whose
module imports theirs, as agents are by the app, whose module they import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ces_eval.core.aip import names, standard
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import changelogs
from ces_eval.errors import Code, ServiceError
from ces_eval.storage import tables
from ces_eval.storage.base import Change, ListQuery, OrderBy, Replace, SortKey

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context

__all__ = ["Referrer", "guard", "listed_in", "without"]

# How many of the resources naming one a refused delete lists.
_LISTED = 10
_PAGE = 500
_BY_NAME = OrderBy(SortKey.NAME, descending=False)

Guard = Callable[["Context", Any, "Message", "Caller | None"], Any]


@dataclass(frozen=True)
class Referrer:
    """Resources of ``message`` that name another in ``field``: the names one holds
    (``named``) and how one stops naming a given name (``drop``; None: it cannot, so no
    ``force`` deletes what it names). ``app``: the referrer is the app itself (the app of the
    deleted resource), not the resources of ``message`` in it."""

    message: type[Message]
    field: str
    named: Callable[[Any], Sequence[str]]
    drop: Callable[[Any, str], None] | None
    app: bool = False

    @property
    def table(self) -> tables.Table[Any]:
        table = tables.of_message(self.message)
        if table is None:  # a declaration fault
            raise AssertionError(f"{self.message.DESCRIPTOR.name} is kept in no declared table")
        return table

    async def rows(self, context: Context, app: str) -> list[Any]:
        """The referrers of ``app``: the app itself, or every resource of the table in it."""
        if self.app:
            found = await context.storage.get_row(self.table, app)
            return [] if found is None else [found]
        rows: list[Any] = []
        after = None
        while True:
            query = ListQuery(parent=app, order=_BY_NAME, limit=_PAGE, after=after)
            page = await context.storage.list_rows(self.table, query)
            rows += [
                self.table.parse(data) if isinstance(data, bytes) else data for data, _ in page
            ]
            if len(page) < _PAGE:
                return rows
            after = page[-1][1]


def without(field: str) -> Callable[[Any, str], None]:
    """Drop a name from the repeated string ``field``."""

    def drop(message: Any, name: str) -> None:  # noqa: ANN401 - any referring message
        kept = [value for value in getattr(message, field) if value != name]
        message.ClearField(field)
        getattr(message, field).extend(kept)

    return drop


def listed_in(message: type[Message], field: str, *, app: bool = False) -> Referrer:
    """The referrer naming resources in the repeated string ``field`` of ``message``."""
    return Referrer(message, field, lambda found: getattr(found, field), without(field), app)


def guard(*referrers: Referrer) -> Guard:
    """A delete guard: a resource that ``referrers`` name is not deleted without ``force``
    (FAILED_PRECONDITION naming them); with it, they stop naming it first."""

    async def check(
        context: Context,
        current: Any,  # noqa: ANN401 - the resource deleted
        request: Message,
        caller: Caller | None,
    ) -> standard.Prelude | None:
        name = current.name
        app = names.app_of(name)
        naming: list[tuple[Referrer, Any]] = []
        for referrer in referrers:
            naming += [
                (referrer, message)
                for message in await referrer.rows(context, app)
                if name in referrer.named(message)
            ]
        if not naming:
            return None
        forced = getattr(request, "force", False)
        if forced and all(referrer.drop is not None for referrer, _ in naming):
            return _forgetting(context, naming, name, caller)
        listed = [f"{message.name} ({referrer.field})" for referrer, message in naming]
        more = ", ..." if len(listed) > _LISTED else ""
        how = (
            " or delete with force"
            if "force" in request.DESCRIPTOR.fields_by_name
            and all(referrer.drop is not None for referrer, _ in naming)
            else ""
        )
        kind = names.of(type(current)).type
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"{name} is named by {', '.join(listed[:_LISTED])}{more}; remove it from them "
            f"first{how}.",
            "RESOURCE_IN_USE",
            {"resource": name},
            resource=(kind, name),
        )

    return check


def _forgetting(
    context: Context, naming: list[tuple[Referrer, Any]], name: str, caller: Caller | None
) -> standard.Prelude:
    """The prelude of a forced delete of ``name``: each of ``naming`` (stored referrers)
    rewritten without it, in the etag read (a concurrent change reruns the delete's round),
    then recorded in the changelog."""
    changes: list[Change] = []
    rewritten: list[tuple[Any, Any]] = []
    for referrer, message in naming:
        if referrer.drop is None:
            raise AssertionError("only a referrer that can drop a name is forced")
        after = type(message)()
        after.CopyFrom(message)
        referrer.drop(after, name)
        after.update_time.CopyFrom(now())
        after.etag = new_etag()
        changes.append(Replace(referrer.table, after, message.etag))
        rewritten.append((message, after))

    async def recorded() -> None:
        if caller is not None:
            for before, after in rewritten:
                await changelogs.record(context, "Update", before, after, caller)

    return standard.Prelude(changes, recorded)
