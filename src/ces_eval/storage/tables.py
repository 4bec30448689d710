"""Resources kept the generic way: one :class:`Table` declaration per resource, no scripts of
their own.

A generic table holds one row per resource: its ``name`` (primary key), its ``parent`` (the name
without the last collection and ID), ``display_name`` (unique within the parent when the
declaration says so; empty for a message without one), ``create_time`` and ``update_time``
(microseconds since the epoch, 0 when unset; a message without ``update_time``, such as
EvaluationRun, orders by its ``create_time`` there too; a message without ``create_time`` names
the field that stands for it, a Conversation its ``start_time``: :attr:`Table.created`),
``etag`` (empty without one) and ``data`` (the whole message, serialized), plus one column per
filterable field, named after it (strings, enums as their numbers, timestamps as microseconds,
repeated strings as JSON arrays; a nested field's column is its path with ``_`` for ``.``). Its
migration creates exactly those columns; the statements (:meth:`._dialect.Sql.table`) and the
scripts (``insert_row`` ... ``delete_row`` of :mod:`._scripts`) are derived from the
declaration. Evaluations and results, whose rows also hold derived fields and metrics tallies,
keep scripts of their own.

:data:`TABLES` lists every declaration (:func:`declare` adds one): a project reset empties each,
a display-name conflict is traced back to its owner through it, and the migrations are written
and checked from it (:mod:`.schema`). The tables the storage's own scripts use are declared
here; a resource of the core that only the standard methods keep declares its table beside its
resource (``store=Store.of(tables.declare(Table(...)))``), its one declaration, added when its
module is imported, as the core's service imports every resource module before any storage is
used.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from google.api import resource_pb2
from google.protobuf import descriptor, timestamp_pb2

from ces_eval import filtering
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import conversation_pb2, evaluation_pb2

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "AGENT_ENDPOINTS",
    "CLOCKS",
    "CONVERSATIONS",
    "DATASETS",
    "EXPECTATIONS",
    "OUTCOME_RULES",
    "RUNS",
    "SCHEDULED_RUNS",
    "TABLES",
    "Column",
    "Order",
    "Table",
    "by_collection",
    "declare",
    "of_message",
    "parent_of",
]

M = TypeVar("M", bound="Message")
_K = filtering.FieldKind
_F = descriptor.FieldDescriptor
# The columns every generic table has, in this order, before its filter columns.
FIXED = ("name", "parent", "display_name", "create_time", "update_time", "etag", "data")


@dataclass(frozen=True)
class Column:
    """A filterable field of the resource (``path``: a field name, or a dotted path into
    singular message fields: ``request.evaluations``), how its column holds it and the
    column's name (the path with ``_`` for ``.``). ``reference``: it holds resource names
    (``google.api.resource_reference``), which filters match by name or ID."""

    path: str
    kind: filtering.FieldKind
    enum_values: Mapping[str, int]
    json_path: str
    reference: bool = False

    @property
    def name(self) -> str:
        return self.path.replace(".", "_")

    def value(self, message: Message) -> object:
        *outer, last = self.path.split(".")
        for step in outer:
            message = getattr(message, step)
        value = getattr(message, last)
        if self.kind is _K.STRING_LIST:
            return json.dumps(list(value))
        if self.kind is _K.TIMESTAMP:
            return _micros(value) if message.HasField(last) else None
        if self.kind is _K.ENUM:
            return int(value)
        return value


def _micros(timestamp: timestamp_pb2.Timestamp) -> int:
    return int(timestamp.seconds) * 1_000_000 + int(timestamp.nanos) // 1000


def _column(message: descriptor.Descriptor, path: str) -> Column:
    """The column of the field at ``path`` in ``message``; only the kinds AIP-160 filters
    compare."""
    *outer, last = path.split(".")
    json_steps = []
    for step in outer:
        json_steps.append(message.fields_by_name[step].json_name)
        inner = message.fields_by_name[step].message_type
        if inner is None:
            raise ValueError(f"{path}: {step} is not a message field")
        message = inner
    field = message.fields_by_name[last]
    json_path = ".".join([*json_steps, field.json_name])
    repeated = field.is_repeated
    if field.type == _F.TYPE_STRING:
        kind = _K.STRING_LIST if repeated else _K.STRING
        reference = field.GetOptions().HasExtension(resource_pb2.resource_reference)
        return Column(path, kind, {}, json_path, reference)
    if repeated:
        raise ValueError(f"{field.full_name}: only repeated strings can be filter columns")
    if field.enum_type is not None:
        values = {value.name: value.number for value in field.enum_type.values}
        return Column(path, _K.ENUM, values, json_path)
    if field.type == _F.TYPE_BOOL:
        return Column(path, _K.BOOL, {}, json_path)
    if field.type in (_F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_UINT32, _F.TYPE_SINT32):
        return Column(path, _K.INTEGER, {}, json_path)
    if field.message_type is timestamp_pb2.Timestamp.DESCRIPTOR:
        return Column(path, _K.TIMESTAMP, {}, json_path)
    raise ValueError(f"{field.full_name}: a {field.type} field cannot be a filter column")


@dataclass(frozen=True)
class Order:
    """A list order of a table besides name, create_time and update_time (AIP-132): the
    ``order_by`` field naming it, whether it sorts descending by default, and the SQL of its
    sort value, an integer never NULL, over the table's columns (``{table}``: its name)."""

    field: str
    descending: bool
    sql: str


@dataclass(frozen=True)
class Table(Generic[M]):
    """The table of ``message``: its SQL ``name``, the fields AIP-160 filters of a list may
    name (``filterable``, paths as :class:`Column` takes them; ``name``, ``display_name``,
    ``create_time`` and ``update_time`` are always among them when the message has them),
    whether display names are unique within the parent, the list orders of its own and the
    field its create_time column holds (``created``). ``aliases``: other names a filter may
    give a filterable field, (alias, field path) pairs, as a list request documents them (a
    Changelog's ``resource`` is filtered as ``resource_name``); ``fold_case``: ``:`` on its
    string fields ignores ASCII case, as a list request documents it (``=`` stays exact)."""

    name: str
    message: type[M]
    filterable: tuple[str, ...] = ()
    unique_display_name: bool = True
    orders: tuple[Order, ...] = ()
    # The timestamp field filling the create_time column (and update_time's, for a message
    # without update_time): a Conversation, stamped by whoever recorded it, has a start_time.
    created: str = "create_time"
    aliases: tuple[tuple[str, str], ...] = ()
    fold_case: bool = False
    # For a message without an etag field: its etag column holds a digest of the stored bytes
    # (:meth:`version`), so that a write may be conditional on what it read (replace_row's
    # expected etag) as for a resource with one. Rows stored before hold "" there.
    versioned: bool = False

    def version(self, message: M) -> str:
        """The etag column of ``message`` as stored: its own etag, else (``versioned``) the
        digest of its bytes, else ""."""
        if "etag" in self.fields:
            return str(getattr(message, "etag"))  # noqa: B009 - not every message has one
        if not self.versioned:
            return ""
        data = message.SerializeToString(deterministic=True)
        return hashlib.blake2b(data, digest_size=12).hexdigest()

    @cached_property
    def _descriptor(self) -> descriptor.Descriptor:
        # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
        return cast("descriptor.Descriptor", self.message.DESCRIPTOR)

    @cached_property
    def collection(self) -> str:
        """The collection ID of its names, as its ``google.api.resource`` pattern spells it:
        ``evaluationRuns``, ``versions`` (an AppVersion's); for a singleton, whose pattern ends
        with no ID (``projects/{project}/clock``), the plural: ``projectClocks``."""
        resource = self.message.DESCRIPTOR.GetOptions().Extensions[resource_pb2.resource]
        *_, collection, last = str(resource.pattern[0]).split("/")
        return collection if last.startswith("{") else str(resource.plural)

    @cached_property
    def fields(self) -> frozenset[str]:
        return frozenset(self.message.DESCRIPTOR.fields_by_name)

    @cached_property
    def columns(self) -> tuple[Column, ...]:
        """The filter columns after the fixed ones, in declaration order."""
        message = self._descriptor
        return tuple(_column(message, path) for path in self.filterable if path not in FIXED)

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        """Every column, in the order of :meth:`row`."""
        return (*FIXED, *(column.name for column in self.columns))

    @cached_property
    def json_columns(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns if c.kind is _K.STRING_LIST)

    @cached_property
    def filter_fields(self) -> dict[str, filtering.FieldSpec]:
        """The filterable fields by proto name and by JSON name, columns qualified."""
        by_name = self.message.DESCRIPTOR.fields_by_name
        fixed = [
            _column(self._descriptor, field)
            for field in ("name", "display_name", "create_time", "update_time")
            if field in by_name
        ]
        specs: dict[str, filtering.FieldSpec] = {}
        for column in (*fixed, *self.columns):
            spec = filtering.FieldSpec(
                column=f"{self.name}.{column.name}",
                kind=column.kind,
                enum_values=column.enum_values,
                reference=column.reference,
                fold_case=self.fold_case and column.kind is _K.STRING,
            )
            specs[column.path] = spec
            specs[column.json_path] = spec
        for alias, path in self.aliases:
            spec = specs[path]  # a KeyError here is a declaration fault: no such filter field
            specs[alias] = spec
            head, *rest = alias.split("_")
            specs[head + "".join(word.title() for word in rest)] = spec
        return specs

    def row(self, message: M) -> tuple[object, ...]:
        """The values of :attr:`column_names` for ``message`` (its etag and times set)."""
        name = str(getattr(message, "name"))  # noqa: B009 - every resource has a name
        have = self.fields
        sources = (self.created, "update_time")
        stamps = [_micros(getattr(message, stamp)) if stamp in have else 0 for stamp in sources]
        if "update_time" not in have:  # none to order by (the lists' default): creation
            stamps[1] = stamps[0]
        return (
            name,
            parent_of(name),
            str(getattr(message, "display_name", "")),
            *stamps,
            self.version(message),
            message.SerializeToString(deterministic=True),
            *(column.value(message) for column in self.columns),
        )

    def parse(self, data: bytes) -> M:
        return self.message.FromString(bytes(data))


def parent_of(name: str) -> str:
    """``name`` without its last collection and ID."""
    return name.rsplit("/", 2)[0]


_E = evaluation_pb2
EXPECTATIONS = Table("evaluation_expectations", _E.EvaluationExpectation, ("tags",))
DATASETS = Table(
    "evaluation_datasets",
    _E.EvaluationDataset,
    ("evaluations", "created_by", "last_updated_by"),
)
RUNS = Table(
    "evaluation_runs",
    _E.EvaluationRun,
    (
        "initiated_by",
        "app_version",
        "app_version_display_name",
        "evaluations",
        "evaluation_dataset",
        "evaluation_type",
        "state",
        "scheduled_evaluation_run",
        "golden_run_method",
        "run_count",
    ),
    unique_display_name=False,
)
# The newest microsecond a column holds: where ascending orders put rows without a value.
_LAST = 2**63 - 1
SCHEDULED_RUNS = Table(
    "scheduled_evaluation_runs",
    _E.ScheduledEvaluationRun,
    (
        "description",
        "active",
        "created_by",
        "last_updated_by",
        "total_executions",
        "last_completed_run",
        "next_scheduled_execution_time",
        "request.evaluations",
        "request.evaluation_dataset",
    ),
    unique_display_name=False,
    orders=(
        # Soonest first; schedules that will not fire last.
        Order(
            "next_scheduled_execution",
            descending=False,
            sql=f"COALESCE({{table}}.next_scheduled_execution_time, {_LAST})",
        ),
        # Newest first; schedules without a completed run (or whose run is gone) last.
        Order(
            "last_completed_run.create_time",
            descending=True,
            sql=(
                # Only declared table names, never request text.
                f"COALESCE((SELECT completed.create_time FROM {RUNS.name} AS completed "  # noqa: S608
                "WHERE completed.name = {table}.last_completed_run), 0)"
            ),
        ),
    ),
)
CONVERSATIONS = Table(
    "conversations",
    conversation_pb2.Conversation,
    (
        "source",
        "channel_type",
        "entry_agent",
        "deployment",
        "app_version",
        "language_code",
        "start_time",
        "end_time",
        "turn_count",
    ),
    unique_display_name=False,  # a conversation has no display name
    versioned=True,  # a session's turns are appended to it (core/engine/session_service.py)
    orders=(
        Order("start_time", descending=True, sql="COALESCE({table}.start_time, 0)"),
        Order("end_time", descending=True, sql="COALESCE({table}.end_time, 0)"),
    ),
    created="start_time",
)
# The emulator's scripted outcomes of the run engine (ces_eval.core.resources.outcome_rules).
OUTCOME_RULES = Table(
    "outcome_rules",
    emulator_service_pb2.OutcomeRule,
    ("evaluation", "evaluation_display_name", "tag", "outcome", "hold", "released"),
    unique_display_name=False,
)
# The projects' scheduler clocks (ces_eval.core.engine.scheduler): a row per project that moved it.
CLOCKS = Table(
    "project_clocks",
    emulator_service_pb2.ProjectClock,
    unique_display_name=False,
    created="update_time",
)
# The apps' agent endpoints (ces_eval.core.resources.agent_endpoints): one row per app that set one.
AGENT_ENDPOINTS = Table(
    "agent_endpoints",
    emulator_service_pb2.AgentEndpoint,
    unique_display_name=False,
    created="update_time",
)
# Every declared table, in the order of declaration (declare).
TABLES: list[Table[Any]] = []
_BY_COLLECTION: dict[str, Table[Any]] = {}


def declare(table: Table[M]) -> Table[M]:
    """Add ``table`` to :data:`TABLES` and answer it; a second table of its SQL name or its
    collection is a ValueError (each resource has one table, each table one declaration)."""
    for other in TABLES:
        if table.name == other.name or table.collection == other.collection:
            raise ValueError(f"{table.name} ({table.collection}) is declared twice")
    TABLES.append(table)
    _BY_COLLECTION[table.collection] = table
    return table


# The tables declared here (those the storage's own scripts use, and those declared before a
# resource could declare its own beside it).
_OWN: tuple[Table[Any], ...] = (
    EXPECTATIONS,
    DATASETS,
    SCHEDULED_RUNS,
    RUNS,
    CONVERSATIONS,
    OUTCOME_RULES,
    CLOCKS,
    AGENT_ENDPOINTS,
)
for _table in _OWN:
    declare(_table)


def by_collection(name: str) -> Table[Any] | None:
    """The generic table holding the resource ``name`` (by the collection it names), if any."""
    collection = name.rsplit("/", 2)[-2] if name.count("/") >= 2 else ""
    return _BY_COLLECTION.get(collection)


def of_message(message: descriptor.Descriptor | type[Message] | None) -> Table[Any] | None:
    """The generic table holding the resources of ``message`` (a message class or its
    descriptor, as a field's ``message_type`` gives it), if one is declared."""
    if message is None:
        return None
    wanted = message if isinstance(message, descriptor.Descriptor) else message.DESCRIPTOR
    return next((t for t in TABLES if t.message.DESCRIPTOR is wanted), None)
