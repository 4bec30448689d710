"""Singleton resources (AIP-156), written once: a resource of which its parent has exactly one
(an app's agent endpoint, a location's security settings), kept in a generic table
(:mod:`ces_eval.storage.tables`).

Get answers the stored one, or its defaults (the name alone) when it was never written: a
singleton always exists. Update (AIP-134) applies the request's ``update_mask`` (absent or
``*``: every field a caller may write) to the stored one or the defaults, checks the result by
the descriptors' rules and the resource's own, and stores it with new stamps (``create_time`` on
its first write, ``update_time``, a new etag); with an etag (AIP-154), only onto that version (the
defaults have none), else the last write wins, read again when another write came between.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, TypeVar, cast

from ces_eval.contract import checks, fields
from ces_eval.core.aip import names, validation
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.storage.base import Conflict, EtagMismatch, Missing

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from google.protobuf.message import Message

    from ces_eval.core.aip.context import Context
    from ces_eval.storage.tables import Table

__all__ = ["get", "update"]

M = TypeVar("M", bound="Message")


async def get(context: Context, table: Table[M], name: str) -> M:
    """The singleton ``name`` (the request's ``name`` field): stored, or its defaults."""
    names.of(table.message).parse(name, "name", owned=0)
    stored = await context.storage.get_row(table, name)
    return stored if stored is not None else _defaults(table, name)


def _defaults(table: Table[M], name: str) -> M:
    """The singleton ``name`` never written: its name alone."""
    message = table.message()
    setattr(message, "name", name)  # noqa: B010 - every singleton has a name
    return message


async def update(
    context: Context,
    table: Table[M],
    request: Message,
    field: str,
    check: Callable[[M], Awaitable[list[FieldViolation]]] | None = None,
) -> M:
    """AIP-134 Update of the singleton in the request's ``field`` (named by its ``name``);
    ``check`` adds the resource's own violations of what would be stored."""
    pattern = names.of(table.message)
    if not request.HasField(field):
        validation.raise_if_invalid([FieldViolation(field, "Required.", "REQUIRED")], "request")
    given = cast("M", getattr(request, field))
    name = str(getattr(given, "name"))  # noqa: B009 - every singleton has a name
    etag = str(getattr(given, "etag", ""))
    pattern.parse(name, f"{field}.name", owned=0)
    incoming = table.message()
    incoming.CopyFrom(given)
    checks.clear_output_only(incoming)
    paths = list(getattr(request, "update_mask").paths)  # noqa: B009 - every update has one
    have = table.fields

    async def round_() -> M:
        stored = await context.storage.get_row(table, name)
        current = str(getattr(stored, "etag", "")) if stored is not None else ""
        if etag and etag != current:
            raise ServiceError.aborted_etag(pattern.type, name)
        updated = stored if stored is not None else _defaults(table, name)
        fields.apply_update_mask(updated, incoming, paths, "update_mask")
        checked = table.message()
        checked.CopyFrom(updated)  # the descriptors' rules and limits clear OUTPUT_ONLY fields
        violations = validation.resource_violations(checked, field)
        if check is not None:
            violations += await check(updated)
        validation.raise_if_invalid(violations, "request")
        moment = now()
        stamps = ("update_time", "create_time") if stored is None else ("update_time",)
        for stamp in stamps:
            if stamp in have:
                getattr(updated, stamp).CopyFrom(moment)
        setattr(updated, "etag", new_etag())  # noqa: B010 - every singleton has an etag
        try:
            if stored is None:
                await context.storage.insert_row(table, updated)
            else:
                await context.storage.replace_row(table, updated, current)
        except (Conflict, EtagMismatch, Missing) as changed:
            if etag:
                raise ServiceError.aborted_etag(pattern.type, name) from None
            raise Changed from changed  # set or reset meanwhile: read it again
        return updated

    return await rewrite(round_, partial(ServiceError.aborted_etag, pattern.type, name))
