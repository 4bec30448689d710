"""The standard methods, written once: AIP-131 Get, AIP-132 List, AIP-133 Create, AIP-134
Update and AIP-135 Delete over a :class:`Resource` declaration.

A resource is its message (whose ``google.api.resource`` option gives its name pattern and
type, :func:`ces_eval.core.aip.names.of`), its parent, its storage calls (:class:`Store`) and a
small policy: the field rules of what a caller writes (the validation modules), which request fields
filter a list, whether a create needs its parent stored, defaults, a delete precondition, what a
list adds to each item. Everything else follows from the descriptors: the request field holding
the resource (``evaluation``), its ID field (``evaluation_id``), how many trailing IDs of its
name this service assigns, whether it carries an etag (AIP-154) and server stamps
(``create_time``, ``update_time``, ``created_by``, ``last_updated_by``, AIP-148).

The resource modules (:mod:`~ces_eval.core.resources.evaluations`,
:mod:`~ces_eval.core.resources.results`) declare their resource and call these functions from their
RPCs; what is truly theirs (recent results on a list of evaluations, a result's metric rerun) is
written beside.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from google.protobuf import empty_pb2, message_factory

from ces_eval import filtering
from ces_eval.contract import checks, fields, limits, schema
from ces_eval.contract.encoded import Encoded
from ces_eval.core.aip import names, pages, validation
from ces_eval.core.aip.retry import ATTEMPTS, Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.offload import is_heavy, off_loop
from ces_eval.storage import tables
from ces_eval.storage.base import (
    Change,
    Conflict,
    Cursor,
    Delete,
    EtagMismatch,
    InvalidFilter,
    ListQuery,
    Missing,
    TooLarge,
)

if TYPE_CHECKING:
    from google.protobuf import descriptor, field_mask_pb2, timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.contract.encoded import Response
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = [
    "UNCONDITIONAL_ATTEMPTS",
    "Prelude",
    "Resource",
    "StandardMethod",
    "Store",
    "create",
    "delete",
    "descriptor_rules",
    "existing",
    "filter_error",
    "get",
    "invalid",
    "list_page",
    "methods",
    "parse_filter",
    "references",
    "update",
]

M = TypeVar("M", bound="Message")
R = TypeVar("R", bound="Message")

# Read-modify-write rounds of an update or delete without an etag before it gives up
# (ABORTED): the one bound of every such round (ces_eval.core.aip.retry).
UNCONDITIONAL_ATTEMPTS = ATTEMPTS


@dataclass(frozen=True)
class Store(Generic[M]):
    """The storage calls of one resource (the :class:`~ces_eval.storage.base.Storage` methods
    it is kept by). ``list`` gives each row's message, or its serialized bytes when the storage
    has them (parsed straight into the response: no intermediate message to copy), with its
    cursor. ``delete`` receives the etag the deleted version had (for a resource
    without an etag: nothing to compare); ``replace`` only exists for an updatable resource.
    ``orders``: the list orders of its own (``order_by`` field → descending by default) the
    storage sorts by, besides name, create_time and update_time. ``read``: ``get``'s answer as
    its wire bytes, unparsed, for a resource the storage holds exactly as it is served (the Get
    RPC then answers those bytes: :class:`~ces_eval.contract.encoded.Encoded`).
    ``delete_after``: ``delete`` after other changes, all in one transaction (what a guard
    lets a forced delete change first: :class:`Prelude`)."""

    get: Callable[[Storage, str], Awaitable[M | None]]
    insert: Callable[[Storage, M], Awaitable[None]]
    list: Callable[[Storage, ListQuery], Awaitable[Sequence[tuple[M | bytes, Cursor]]]]
    delete: Callable[[Storage, str, str], Awaitable[None]]
    replace: Callable[[Storage, M, str], Awaitable[None]] | None = None
    orders: Mapping[str, bool] = field(default_factory=dict)
    read: Callable[[Storage, str], Awaitable[bytes | None]] | None = None
    delete_after: Callable[[Storage, str, str, Sequence[Change]], Awaitable[None]] | None = None

    @classmethod
    def of(cls, table: tables.Table[M], *, updatable: bool = True) -> Store[M]:
        """The calls of a resource kept in a generic table (:mod:`ces_eval.storage.tables`);
        ``replace`` only for an ``updatable`` one."""

        def replace(storage: Storage, message: M, etag: str) -> Awaitable[None]:
            return storage.replace_row(table, message, etag)

        def delete_after(
            storage: Storage, name: str, etag: str, first: Sequence[Change]
        ) -> Awaitable[None]:
            return storage.write_rows([*first, Delete(table, name, etag)])

        return cls(
            get=lambda storage, name: storage.get_row(table, name),
            insert=lambda storage, message: storage.insert_row(table, message),
            list=lambda storage, query: storage.list_rows(table, query),
            delete=lambda storage, name, etag: storage.delete_row(table, name, etag),
            replace=replace if updatable else None,
            orders={order.field: order.descending for order in table.orders},
            read=lambda storage, name: storage.read_row(table, name),
            delete_after=delete_after,
        )


# The field rules of a resource as a caller writes it: (message, its path in the request, the
# variables of its name) → violations. The evaluation's rules also clear its OUTPUT_ONLY fields.
Rules = Callable[[M, str, dict[str, str]], list[FieldViolation]]


# What records a stored change: (context, action, before, after, caller).
Journal = Callable[["Context", str, M | None, M | None, "Caller"], Awaitable[None]]


@dataclass(frozen=True)
class Prelude:
    """What a delete guard lets a forced delete do: ``changes`` written first, in the delete's
    transaction (the references to the deleted resource removed from who holds them), and
    ``after`` awaited once it is stored (their changelog)."""

    changes: Sequence[Change]
    after: Callable[[], Awaitable[None]]


def descriptor_rules(message: Message, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """The rules of a resource without rules of its own: its descriptors' field behaviours
    and the request limits (:func:`ces_eval.core.validation.resource_violations`)."""
    return validation.resource_violations(message, path)


@dataclass(frozen=True)
class Resource(Generic[M]):
    """One resource's declaration (see the module's docstring).

    ``rules`` are the field rules of what a caller writes (the descriptors' alone unless it
    has rules of its own: :func:`descriptor_rules`).
    ``parent`` is the pattern of its parent's name; ``parent_resource`` the parent's
    declaration when the parent is stored here, so that a create or a list of a missing parent
    is NOT_FOUND (an App is not stored: its evaluations need no App). ``list_across`` admits the
    AIP-159 wildcard ``-`` as the parent's ID. ``filters`` are the list request fields whose
    AIP-160 filters all apply (the last one set names a filter the storage rejects);
    ``run_filter`` the field filtering by the resource's runs. ``require_body``: a create
    without the resource is INVALID_ARGUMENT (results' create, an emulator seed, makes an empty
    one instead). ``defaults(message, parent, created)`` fills what a create leaves empty;
    ``guard(context, current, request, caller)`` refuses a delete, or answers the
    :class:`Prelude` a forced one writes with it (the caller's changes);
    ``enrich(context, request, page, sizes)`` adds to a list's page and says how many items of
    it still fit.
    ``verify(context, message)`` checks what a create or update is about to store against
    other stored resources (names it refers to that must exist) once its own fields are valid:
    violations with paths under the resource's field. ``derive(message, previous, now)`` fills
    the output-only fields the server computes from what a create (``previous`` None) or an
    update (``previous``: the stored version it replaces) is about to store, once its field
    rules hold. ``journal(context, action, before, after, caller)`` records a change once it
    is stored (``action`` ``Create``, ``Update`` or ``Delete``; ``before`` None for a create,
    ``after`` None for a delete): an app's changelog."""

    message: type[M]
    parent: names.ResourcePattern
    store: Store[M]
    rules: Rules[M] = descriptor_rules
    parent_resource: Resource[Any] | None = None
    list_across: bool = False
    filters: tuple[str, ...] = ("filter",)
    run_filter: str = ""
    require_body: bool = True
    defaults: Callable[[M, Message | None, timestamp_pb2.Timestamp], None] | None = None
    guard: Callable[[Context, M, Message, Caller | None], Awaitable[Prelude | None]] | None = None
    enrich: Callable[[Context, Message, list[M | bytes], list[int]], Awaitable[int]] | None = None
    verify: Callable[[Context, M], Awaitable[list[FieldViolation]]] | None = None
    derive: Callable[[M, M | None, timestamp_pb2.Timestamp], None] | None = None
    journal: Journal[M] | None = None

    @cached_property
    def pattern(self) -> names.ResourcePattern:
        return names.of(self.message)

    @cached_property
    def field(self) -> str:
        """The request field holding the resource (AIP-133, AIP-134): ``evaluation``."""
        return names.snake_case(self.message.DESCRIPTOR.name)

    @property
    def id_field(self) -> str:
        """The create request's ID field (AIP-133): ``evaluation_id``."""
        return f"{self.field}_id"

    @cached_property
    def owned(self) -> int:
        return names.owned(self.pattern)

    @cached_property
    def collection(self) -> str:
        """The collection ID in the name pattern: ``evaluations``."""
        return self.pattern.pattern.split("/")[-2]

    @cached_property
    def fields(self) -> frozenset[str]:
        return frozenset(self.message.DESCRIPTOR.fields_by_name)


class _Tagged(Protocol):
    etag: str


class _Paged(Protocol):
    next_page_token: str


class _Stamped(Protocol):
    update_time: timestamp_pb2.Timestamp
    last_updated_by: str


class _Named(Protocol):
    name: str
    display_name: str


class ListRequest(Protocol):
    """What every AIP-132 List request has."""

    @property
    def parent(self) -> str: ...
    @property
    def page_size(self) -> int: ...
    @property
    def page_token(self) -> str: ...
    @property
    def order_by(self) -> str: ...
    def SerializeToString(self, *, deterministic: bool = ...) -> bytes: ...  # noqa: N802 - protobuf's


class CreateRequest(Protocol):
    """What every AIP-133 Create request has (the ID and resource fields are the resource's)."""

    @property
    def parent(self) -> str: ...


class UpdateRequest(Protocol):
    """What every AIP-134 Update request has (the resource field is the resource's)."""

    @property
    def update_mask(self) -> field_mask_pb2.FieldMask: ...


class DeleteRequest(Protocol):
    """What every AIP-135 Delete request has (``etag`` where the resource carries one)."""

    @property
    def name(self) -> str: ...


def _etag(message: Message) -> str:
    return cast("_Tagged", message).etag


def invalid(field: str, description: str) -> ServiceError:
    """INVALID_ARGUMENT with one violation of ``field``."""
    return ServiceError.invalid_argument(
        f"{field}: {description}", [FieldViolation(field, description)]
    )


def parse_filter(text: str, field: str) -> filtering.Expr | None:
    """The AIP-160 filter of request field ``field``; None when empty."""
    try:
        return filtering.parse(text)
    except filtering.FilterError as error:
        raise filter_error(error, field) from error


def filter_error(error: filtering.FilterError, field: str) -> ServiceError:
    description = f"{error.message} (at position {error.position})."
    return ServiceError.invalid_argument(
        f"{field} is invalid: {description}", [FieldViolation(field, description)]
    )


def conflict(error: Conflict, resource: Resource[M], message: Message) -> ServiceError:
    """ALREADY_EXISTS for a name, or a display name unique within the parent, already taken."""
    named = cast("_Named", message)
    if error.field == "name":
        return ServiceError.already_exists(resource.pattern.type, named.name)
    return ServiceError.already_exists(
        resource.pattern.type,
        error.existing,
        f"display_name {named.display_name!r} is already used by {error.existing}; "
        f"display names are unique within the {resource.parent.kind.lower()}.",
    )


def _found_by(
    context: Context, target: Resource[Any] | type[Message]
) -> tuple[names.ResourcePattern, int, Callable[[str], Awaitable[object | None]]]:
    """The name pattern of ``target``'s resources, the IDs of it this service assigns, and
    how one is read."""
    if isinstance(target, Resource):
        return target.pattern, target.owned, partial(target.store.get, context.storage)
    pattern = names.of(target)
    table = tables.of_message(target)
    if table is None:
        raise AssertionError(f"{pattern.type} is kept in no declared table")  # a declaration fault
    return pattern, names.owned(pattern), partial(context.storage.get_row, table)


async def references(
    context: Context,
    target: Resource[Any] | type[Message],
    values: Sequence[str],
    path: str,
    parent: str,
    *,
    repeated: bool = True,
) -> list[FieldViolation]:
    """Violations of ``values``, names of ``target`` resources that must exist under
    ``parent`` (the referring resource's own parent, or the referring app: references never
    leave the app): the field ``path[i]`` (``path`` for a singular field) of each malformed,
    foreign or missing one (reason NOT_FOUND). ``target`` is the referenced resource's
    declaration or, where the referring module cannot import the one declaring it (an app
    names its agents and guardrails, whose module imports the apps'), its message class: its
    resources are then read from the generic table holding that message."""
    violations = []
    pattern, owned, read = _found_by(context, target)
    kind = pattern.type.rsplit("/", 1)[-1]
    for index, value in enumerate(values):
        field = f"{path}[{index}]" if repeated else path
        malformed = pattern.violation(value, field, owned=owned)
        if malformed is not None:
            violations.append(malformed)
        elif tables.parent_of(value) != parent:
            violations.append(FieldViolation(field, f"{value!r} is not a {kind} of {parent}."))
        elif await read(value) is None:
            description = f"{kind} {value} does not exist."
            violations.append(FieldViolation(field, description, "NOT_FOUND"))
    return violations


# -- AIP-131 -------------------------------------------------------------------------------------


async def existing(context: Context, resource: Resource[M], name: str) -> M:
    """The stored resource ``name`` (already parsed), or NOT_FOUND."""
    found = await resource.store.get(context.storage, name)
    if found is None:
        raise ServiceError.not_found(resource.pattern.type, name)
    return found


async def get(context: Context, resource: Resource[M], name: str) -> M:
    """AIP-131 Get of the resource named by the request's ``name``."""
    resource.pattern.parse(name, "name", owned=resource.owned)
    return await existing(context, resource, name)


async def _get_rpc(context: Context, resource: Resource[M], name: str) -> Response:
    """The Get RPC: :func:`get`, answered as the stored bytes where the storage holds the
    resource as it is served (checked to parse, never serialized again), kept while nothing
    is written (:meth:`~ces_eval.core.context.HotReads.answer`)."""
    read = resource.store.read
    if read is None:
        return await get(context, resource, name)
    resource.pattern.parse(name, "name", owned=resource.owned)
    stored = partial(_stored, context, resource, read, name)
    return await context.hot.answer(context.storage.version, name, Encoded, stored)


async def _stored(
    context: Context,
    resource: Resource[M],
    read: Callable[[Storage, str], Awaitable[bytes | None]],
    name: str,
) -> Encoded:
    data = await read(context.storage, name)
    if data is None:
        raise ServiceError.not_found(resource.pattern.type, name)
    # Parsed, not used: a row damaged on disk is INTERNAL here (DecodeError, the last-resort
    # catch), as for every other read, never bytes no client can read. A large row is parsed off
    # the loop: a result of a million outcomes held it ~0.5 s.
    await off_loop(len(data) > limits.LOOP_BYTES, resource.message.FromString, data)
    return Encoded(resource.message, data)


# -- AIP-132 -------------------------------------------------------------------------------------


@cache
def _items_field(
    response: descriptor.Descriptor, item: descriptor.Descriptor
) -> descriptor.FieldDescriptor:
    """The repeated field of a List response holding the items."""
    return next(f for f in response.fields if f.message_type is item and f.is_repeated)


async def list_page(
    context: Context, resource: Resource[M], request: ListRequest, response: R
) -> R | Encoded:
    """AIP-132 List into ``response``: AIP-158 pages bounded in items and bytes, AIP-160
    filters, AIP-132 order_by; page tokens bound to the query that issued them. A page of
    items the storage gave as bytes is answered as those bytes (:class:`Encoded`: ``response``
    holds the rest), never parsed; such a page is kept while nothing is written (the same
    request answered again from memory: :class:`~ces_eval.core.aip.context.HotReads`)."""
    key = (type(request), request.SerializeToString(deterministic=True))
    page = partial(_list_page, context, resource, request, response)
    return await context.hot.answer(context.storage.version, key, Encoded, page)


async def _list_page(
    context: Context, resource: Resource[M], request: ListRequest, response: R
) -> R | Encoded:
    parent_pattern = resource.parent
    across_variable = parent_pattern.variables[-1] if resource.list_across else ""
    parts = parent_pattern.parse(
        request.parent,
        "parent",
        owned=names.owned(parent_pattern),
        allow_wildcard=across_variable,
    )
    across = bool(across_variable) and parts[across_variable] == names.WILDCARD
    if resource.parent_resource is not None and not across:
        await existing(context, resource.parent_resource, request.parent)
    size = pages.page_size(request.page_size)
    order = pages.order_by(request.order_by, more=resource.store.orders)
    texts = [str(getattr(request, f)) for f in resource.filters]
    clauses = [
        e for e in (parse_filter(t, f) for t, f in zip(texts, resource.filters, strict=True)) if e
    ]
    run_text = [str(getattr(request, resource.run_filter))] if resource.run_filter else []
    run_filter = parse_filter(run_text[0], resource.run_filter) if run_text else None
    query_key = "\x1f".join(
        (
            resource.collection,
            request.parent,
            *texts,
            *run_text,
            f"{order.field}:{order.descending}",
        )
    )
    tokens = context.page_tokens
    after = tokens.decode(request.page_token, query_key) if request.page_token else None
    grandparent = resource.parent_resource.parent if resource.parent_resource else None
    query = ListQuery(
        parent=grandparent.format(**parts) if across and grandparent else request.parent,
        order=order,
        limit=size + 1,
        filter=clauses[0]
        if len(clauses) == 1
        else (filtering.And(tuple(clauses)) if clauses else None),
        run_filter=run_filter,
        after=after,
        across_evaluations=across,
        max_bytes=limits.MAX_PAGE_BYTES,
    )
    try:
        rows = await resource.store.list(context.storage, query)
    except InvalidFilter as error:
        field = (
            resource.run_filter
            if error.which == "run_filter"
            else next((f for f in reversed(resource.filters) if getattr(request, f)), "filter")
        )
        raise filter_error(error.error, field) from error
    sizes = [len(item) if isinstance(item, bytes) else item.ByteSize() for item, _ in rows]
    taken = pages.fill(sizes, size)
    page = [item for item, _ in rows[:taken]]
    if resource.enrich is not None and page:
        taken = await resource.enrich(context, cast("Message", request), page, sizes)
    if taken < len(rows):
        cast("_Paged", response).next_page_token = tokens.encode(query_key, rows[taken - 1][1])
    items_field = _items_field(response.DESCRIPTOR, resource.message.DESCRIPTOR)
    kept = page[:taken]
    if all(isinstance(item, bytes) for item in kept):
        encoded = cast("list[bytes]", kept)
        return Encoded.of_page(type(response), items_field, encoded, response)
    items = getattr(response, items_field.name)
    for item in kept:
        if isinstance(item, bytes):
            items.add().MergeFromString(item)
        else:
            items.append(item)
    return response


# -- AIP-133 -------------------------------------------------------------------------------------

# Who created a resource, by the name of its field (an AppVersion has a ``creator``).
_AUTHORS = ("created_by", "last_updated_by", "creator")
# The fields of a resource the server writes (AIP-122 name, AIP-148 stamps, AIP-154 etag).
_STAMPS = ("name", "create_time", "update_time", *_AUTHORS, "etag")


def _new(
    resource: Resource[M],
    body: M | None,
    *,
    name: str,
    parts: dict[str, str],
    user: str,
    parent: Message | None,
) -> tuple[M, list[FieldViolation]]:
    """The resource a create stores (the caller's name and stamps and, by the rules,
    OUTPUT_ONLY fields dropped; defaults filled; named ``name``, stamped as created by ``user``
    now) and what is wrong with it: the field rules, then its size as it will be served."""
    message = resource.message()
    if body is None:
        return message, [FieldViolation(resource.field, "Required.", "REQUIRED")]
    message.CopyFrom(body)
    have = resource.fields
    for stamp in _STAMPS:  # the server's to write, whatever the caller sent
        if stamp in have:
            message.ClearField(stamp)
    created = now()
    if resource.defaults is not None:
        resource.defaults(message, parent, created)
    violations = resource.rules(message, resource.field, parts)
    if resource.derive is not None and not violations:
        resource.derive(message, None, created)
    cast("_Named", message).name = name
    for stamp in ("create_time", "update_time"):
        if stamp in have:
            getattr(message, stamp).CopyFrom(created)
    for author in _AUTHORS:
        if author in have:
            setattr(message, author, user)
    if "etag" in have:
        cast("_Tagged", message).etag = new_etag()
    return message, validation.with_size(violations, message, resource.field)


async def create(
    context: Context, resource: Resource[M], request: CreateRequest, caller: Caller
) -> M:
    """AIP-133 Create under the request's ``parent``, with the caller's AIP-122 ID or a new
    one; ALREADY_EXISTS for a taken name or display name."""
    parts = resource.parent.parse(request.parent, "parent", owned=names.owned(resource.parent))
    resource_id = str(getattr(request, resource.id_field))
    if resource_id:
        names.validate_id(resource_id, resource.id_field)
    own = resource.pattern.variables[-1]
    name = resource.pattern.format(**parts, **{own: resource_id or names.new_id()})
    parent = None
    if resource.parent_resource is not None:
        parent = await existing(context, resource.parent_resource, request.parent)
    present = cast("Message", request).HasField(resource.field) or not resource.require_body
    body: M | None = getattr(request, resource.field) if present else None
    # Validated in a worker thread when large: the event loop serves everyone else meanwhile.
    large = body is not None and is_heavy(body)
    draft = partial(_new, resource, body, name=name, parts=parts, user=caller.user, parent=parent)
    message, violations = await off_loop(large, draft)
    validation.raise_if_invalid(violations, resource.field)
    if resource.verify is not None:
        validation.raise_if_invalid(await resource.verify(context, message), resource.field)
    try:
        await resource.store.insert(context.storage, message)
    except Missing as missing:
        raise ServiceError.not_found(resource.parent.type, request.parent) from missing
    except TooLarge as too_large:
        violation = limits.too_large(resource.field, too_large.size, too_large.name)
        validation.raise_if_invalid([violation], resource.field)
    except Conflict as error:
        raise conflict(error, resource, message) from error
    if resource.journal is not None:
        await resource.journal(context, "Create", None, message, caller)
    return message


# -- AIP-134 -------------------------------------------------------------------------------------


def _updated(
    resource: Resource[M],
    current: M,
    body: M,
    *,
    paths: list[str],
    user: str,
    parts: dict[str, str],
) -> M:
    """``current`` with the request's masked fields applied, validated, its derived fields
    recomputed (``derive``), newly stamped."""
    incoming = resource.message()
    incoming.CopyFrom(body)
    checks.clear_output_only(incoming)
    updated = resource.message()
    updated.CopyFrom(current)
    fields.apply_update_mask(updated, incoming, paths, "update_mask")
    editable = resource.message()
    editable.CopyFrom(updated)
    violations = resource.rules(editable, resource.field, parts)
    changed = now()
    if resource.derive is not None and not violations:
        resource.derive(updated, current, changed)
    have = resource.fields
    if "update_time" in have:
        cast("_Stamped", updated).update_time.CopyFrom(changed)
    if "last_updated_by" in have:
        cast("_Stamped", updated).last_updated_by = user
    if "etag" in have:
        cast("_Tagged", updated).etag = new_etag()
    # What the update stores, served with the derived fields it keeps, is what is bounded.
    validation.raise_if_invalid(
        validation.with_size(violations, updated, resource.field), resource.field
    )
    return updated


async def update(
    context: Context, resource: Resource[M], request: UpdateRequest, caller: Caller
) -> M:
    """AIP-134 Update of the resource the request's resource field names, with its
    ``update_mask``; with an etag (AIP-154), only of that version."""
    field = resource.field
    replace = resource.store.replace
    if replace is None:
        raise AssertionError(f"{resource.pattern.type} has no update")  # a declaration fault
    if not cast("Message", request).HasField(field):
        raise ServiceError.invalid_argument(
            f"{field} is required.", [FieldViolation(field, "Required.", "REQUIRED")]
        )
    body: M = getattr(request, field)
    name = cast("_Named", body).name
    parts = resource.pattern.parse(name, f"{field}.name", owned=resource.owned)
    etag = _etag(body)
    paths = list(request.update_mask.paths)

    # Without an etag the caller asked for the last write to win: a concurrent writer
    # (another call, another replica) between our read and our write is no conflict, so
    # read again and reapply. With an etag, a concurrent write is the caller's conflict.
    async def round_() -> M:
        current = await existing(context, resource, name)
        if etag and etag != _etag(current):
            raise ServiceError.aborted_etag(resource.pattern.type, name)
        large = is_heavy(body, current)
        apply = partial(
            _updated, resource, current, body, paths=paths, user=caller.user, parts=parts
        )
        updated = await off_loop(large, apply)
        if resource.verify is not None:
            validation.raise_if_invalid(await resource.verify(context, updated), field)
        try:
            await replace(context.storage, updated, _etag(current))
        except Missing as missing:
            raise ServiceError.not_found(resource.pattern.type, name) from missing
        except EtagMismatch as mismatch:
            if etag:
                raise ServiceError.aborted_etag(resource.pattern.type, name) from mismatch
            raise Changed from mismatch
        except Conflict as error:
            raise conflict(error, resource, updated) from error
        if resource.journal is not None:
            await resource.journal(context, "Update", current, updated, caller)
        return updated

    return await rewrite(round_, partial(ServiceError.aborted_etag, resource.pattern.type, name))


# -- AIP-135 -------------------------------------------------------------------------------------


async def delete(
    context: Context, resource: Resource[M], request: DeleteRequest, caller: Caller | None = None
) -> empty_pb2.Empty:
    """AIP-135 Delete of the request's ``name`` (its children with it: the storage deletes a
    resource's subtree in the same transaction). A resource with an etag is deleted in the
    version its ``guard`` checked, and only in the request's ``etag`` when given."""
    name = request.name
    resource.pattern.parse(name, "name", owned=resource.owned)
    kind = resource.pattern.type
    if "etag" not in resource.fields:
        try:
            await resource.store.delete(context.storage, name, "")
        except Missing as missing:
            raise ServiceError.not_found(kind, name) from missing
        return empty_pb2.Empty()
    etag = _etag(cast("Message", request))

    # As in update: without an etag, a concurrent change is re-read, not a conflict; the
    # delete applies to the version the guard checked.
    async def round_() -> empty_pb2.Empty:
        current = await existing(context, resource, name)
        if etag and etag != _etag(current):
            raise ServiceError.aborted_etag(kind, name)
        prelude = None
        if resource.guard is not None:
            prelude = await resource.guard(context, current, cast("Message", request), caller)
        try:
            if prelude is None or not prelude.changes:
                await resource.store.delete(context.storage, name, _etag(current))
            else:
                await _delete_after(context, resource, current, prelude.changes)
        except Missing as missing:
            raise ServiceError.not_found(kind, name) from missing
        except EtagMismatch as mismatch:
            if etag:
                raise ServiceError.aborted_etag(kind, name) from mismatch
            raise Changed from mismatch
        if prelude is not None:
            await prelude.after()
        if resource.journal is not None and caller is not None:
            await resource.journal(context, "Delete", current, None, caller)
        return empty_pb2.Empty()

    return await rewrite(round_, partial(ServiceError.aborted_etag, kind, name))


async def _delete_after(
    context: Context, resource: Resource[M], current: M, first: Sequence[Change]
) -> None:
    """Delete ``current`` after ``first`` (a guard's :class:`Prelude`), in one transaction. A
    change of ``first`` that found its resource changed or gone is :class:`Changed`: the
    delete's round reads again (Missing and EtagMismatch stay the deleted resource's own)."""
    delete_after = resource.store.delete_after
    if delete_after is None:  # a declaration fault
        raise AssertionError(f"{resource.pattern.type} has no delete after other changes")
    name = cast("_Named", current).name
    try:
        await delete_after(context.storage, name, _etag(current), first)
    except (Missing, EtagMismatch) as changed:
        if changed.name != name:
            raise Changed from changed
        raise


# -- the RPCs ------------------------------------------------------------------------------------


@cache
def _output(rpc: str) -> type[Message]:
    """The response class of RPC ``rpc``, from the service descriptors."""
    method = next(m for s in schema.services() for m in s.methods if m.name == rpc)
    return message_factory.GetMessageClass(method.output_type)


@dataclass(frozen=True)
class StandardMethod:
    """The standard method ``verb`` of ``resource`` as the implementation of RPC ``rpc``: an
    ``Rpc`` that names the resource it serves (the core's service lists its resources so)."""

    resource: Resource[Any]
    verb: str
    rpc: str

    async def __call__(self, context: Context, request: Any, caller: Caller) -> Response:  # noqa: ANN401 - the RPC's own request type
        resource, verb = self.resource, self.verb
        if verb == "Get":
            return await _get_rpc(context, resource, request.name)
        if verb == "List":
            return await list_page(context, resource, request, _output(self.rpc)())
        if verb == "Create":
            return cast("Message", await create(context, resource, request, caller))
        if verb == "Update":
            return cast("Message", await update(context, resource, request, caller))
        return await delete(context, resource, request, caller)


def methods(resource: Resource[Any], *verbs: str) -> dict[str, Rpc]:
    """RPC name → implementation of the standard methods ``verbs`` (``Get``, ``List``,
    ``Create``, ``Update``, ``Delete``) of ``resource``, named as AIP-131..135 name them:
    ``GetEvaluation``, ``ListEvaluations`` (the plural), ``CreateEvaluation``, ..."""
    kind = resource.message.DESCRIPTOR.name
    found: dict[str, Rpc] = {}
    for verb in verbs:
        if verb not in {"Get", "List", "Create", "Update", "Delete"}:
            raise ValueError(f"{verb!r} is not a standard method")
        rpc = f"{verb}{kind}s" if verb == "List" else f"{verb}{kind}"
        found[rpc] = StandardMethod(resource, verb, rpc)
    return found
