"""The schema a generic table's declaration needs (:class:`~ces_eval.storage.tables.Table`), as
the SQL of a migration, and the migrations still to write.

A declared table's migration creates its fixed columns (:data:`~ces_eval.storage.tables.FIXED`),
then one column per filter field of its declaration, in declaration order, and the indexes its
lists and display names use: ``(parent, display_name)`` unique where the declaration says so,
``(parent, name)``, ``(parent, create_time, name)`` and ``(parent, update_time, name)`` (the
keyset orders of AIP-132 lists). :func:`create_table` writes them in each dialect's types, as
``migrations/<dialect>/`` spells them: SQLite's ``INTEGER``/``TEXT``/``BLOB``; PostgreSQL's
``BIGINT`` times, ``JSONB`` string lists and ``"C"``-collated text (code point order, as on
SQLite: the order page tokens rely on).

Committed migrations are frozen once released: :func:`pending` only ever adds a file, one per
declared table that no migration creates yet (``tools/migrations.py`` writes them, ``make
migrations``). A changed declaration of an existing table needs a migration written by hand
(an ``ALTER TABLE``); the test of the migrations (tests/contract/test_migrations.py) builds a
database from them and fails until it matches the declarations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ces_eval import filtering
from ces_eval.storage import tables
from ces_eval.storage._migrations import migrations

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ces_eval.storage.tables import Column, Table

__all__ = ["DIALECTS", "NewMigration", "create_table", "indexes", "pending"]

DIALECTS = ("sqlite", "postgresql")
_K = filtering.FieldKind


@dataclass(frozen=True)
class _Types:
    """One dialect's column types: text sorted by code point, plain text, times, blobs, and
    the type of each filter column's kind."""

    key: str
    text: str
    time: str
    blob: str
    kinds: Mapping[filtering.FieldKind, str]


_TYPES = {
    "sqlite": _Types(
        key="TEXT",
        text="TEXT",
        time="INTEGER",
        blob="BLOB",
        kinds={
            _K.STRING: "TEXT",
            _K.STRING_LIST: "TEXT",
            _K.ENUM: "INTEGER",
            _K.BOOL: "INTEGER",
            _K.INTEGER: "INTEGER",
            _K.TIMESTAMP: "INTEGER",
        },
    ),
    "postgresql": _Types(
        key='TEXT COLLATE "C"',
        text="TEXT",
        time="BIGINT",
        blob="BYTEA",
        kinds={
            _K.STRING: 'TEXT COLLATE "C"',
            _K.STRING_LIST: "JSONB",
            _K.ENUM: "INTEGER",
            _K.BOOL: "BOOLEAN",
            _K.INTEGER: "BIGINT",
            _K.TIMESTAMP: "BIGINT",
        },
    ),
}


def _column(column: Column, types: _Types) -> str:
    # A timestamp left unset is NULL (Column.value), the only column that may be.
    null = "" if column.kind is _K.TIMESTAMP else " NOT NULL"
    return f"  {column.name} {types.kinds[column.kind]}{null}"


def indexes(table: Table[Any]) -> list[tuple[str, tuple[str, ...], bool]]:
    """The indexes ``table``'s declaration needs: (name, columns, unique)."""
    name = table.name
    found: list[tuple[str, tuple[str, ...], bool]] = []
    if table.unique_display_name:
        found.append((f"{name}_parent_display_name", ("parent", "display_name"), True))
    found += [
        (f"{name}_parent_name", ("parent", "name"), False),
        (f"{name}_parent_create_time", ("parent", "create_time", "name"), False),
        (f"{name}_parent_update_time", ("parent", "update_time", "name"), False),
    ]
    return found


def create_table(table: Table[Any], dialect: str) -> str:
    """The statements creating ``table`` and its indexes in ``dialect``."""
    types = _TYPES[dialect]
    fixed = [
        f"  name {types.key} PRIMARY KEY",
        f"  parent {types.key} NOT NULL",
        f"  display_name {types.key} NOT NULL",
        f"  create_time {types.time} NOT NULL",
        f"  update_time {types.time} NOT NULL",
        f"  etag {types.text} NOT NULL",
        f"  data {types.blob} NOT NULL",
    ]
    columns = ",\n".join([*fixed, *(_column(column, types) for column in table.columns)])
    lines = [f"CREATE TABLE {table.name} (\n{columns}\n);"]
    for index, on, unique in indexes(table):
        kind = "UNIQUE INDEX" if unique else "INDEX"
        lines.append(f"CREATE {kind} {index} ON {table.name} ({', '.join(on)});")
    return "\n".join(lines) + "\n"


_CREATED = re.compile(r"^\s*CREATE TABLE (\w+)", re.MULTILINE)


@dataclass(frozen=True)
class NewMigration:
    """A migration to write: ``migrations/<dialect>/<file>`` holding ``sql``."""

    dialect: str
    file: str
    sql: str


def _header(table: Table[Any]) -> str:
    message = table.message.DESCRIPTOR.name
    return (
        f"-- {message}, a generic table (ces_eval.storage.tables): its fixed columns, then one\n"
        "-- per filter field of its declaration. Times are microseconds since the Unix epoch "
        "(UTC).\n"
        "-- Written by tools/migrations.py from the declaration; frozen once released.\n\n"
    )


def pending(dialect: str, declared: Iterable[Table[Any]] = ()) -> list[NewMigration]:
    """The migrations of ``dialect`` to add: one per declared table (every one of
    :data:`~ces_eval.storage.tables.TABLES` unless ``declared`` names them) that no committed
    migration creates, numbered after the last."""
    committed = migrations(dialect)
    created = {name for m in committed for name in _CREATED.findall(m.sql)}
    found = []
    version = len(committed)
    for table in declared or tables.TABLES:
        if table.name in created:
            continue
        version += 1
        sql = _header(table) + create_table(table, dialect)
        found.append(NewMigration(dialect, f"{version:04d}_{table.name}.sql", sql))
    return found
