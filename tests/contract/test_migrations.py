"""The committed migrations against the declarations of the generic tables
(ces_eval.storage.tables, ces_eval.storage.schema), on a real SQLite file and a real PostgreSQL
database.

A database built by the migrations (as the server opens it) must hold, for every declared table,
exactly the columns its declaration needs (their types as each dialect's family: PostgreSQL's
INTEGER and BIGINT are one) and its indexes; one built from the declarations alone
(:func:`schema.create_table`) is the reference, read back the same way. ``tools/migrations.py
--check`` finds nothing to write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ces_eval.core.service  # noqa: F401 - every resource module, so every declared table
from ces_eval.storage import schema, tables
from ces_eval.storage._migrations import migrations
from ces_eval.storage.base import Storage
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.storage.tables import Table
from tests.support.postgres import PostgresCluster

ROOT = Path(__file__).parents[2]
# A table's columns (name, type family, NOT NULL, in order) and indexes (name, columns, unique).
Columns = list[tuple[str, str, bool]]
Indexes = set[tuple[str, tuple[str, ...], bool]]
Shape = dict[str, tuple[Columns, Indexes]]


def _sqlite_shape(path: Path, names: Iterable[str]) -> Shape:
    shape: Shape = {}
    with sqlite3.connect(path) as connection:
        for table in names:
            info = connection.execute(f"PRAGMA table_info({table})").fetchall()
            columns = [(name, kind, bool(notnull or pk)) for _, name, kind, notnull, _, pk in info]
            found: Indexes = set()
            for _, index, unique, origin, _ in connection.execute(f"PRAGMA index_list({table})"):
                if origin == "pk":
                    continue
                on = tuple(row[2] for row in connection.execute(f"PRAGMA index_info({index})"))
                found.add((index, on, bool(unique)))
            shape[table] = (columns, found)
    return shape


_PG_INDEX = re.compile(r"CREATE (UNIQUE )?INDEX (\w+) ON \S+ USING btree \(([^)]*)\)")
# Type families: what the declarations need of a column, not how wide an integer is.
_PG_FAMILY = {"bigint": "integer", "integer": "integer"}


def _postgres_shape(url: str, names: Iterable[str]) -> Shape:
    shape: Shape = {}
    with psycopg.connect(url) as connection:
        for table in names:
            rows = connection.execute(
                "SELECT column_name, data_type, collation_name, is_nullable "
                "FROM information_schema.columns WHERE table_schema = 'public' "
                "AND table_name = %s ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            columns = [
                (name, f"{_PG_FAMILY.get(kind, kind)} {collation or ''}".strip(), null == "NO")
                for name, kind, collation, null in rows
            ]
            found: Indexes = set()
            for (definition,) in connection.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s "
                "AND indexname <> %s",
                (table, f"{table}_pkey"),
            ):
                match = _PG_INDEX.fullmatch(definition)
                assert match is not None, definition
                unique, index, on = match.groups()
                found.add((index, tuple(on.split(", ")), bool(unique)))
            shape[table] = (columns, found)
    return shape


def differences(migrated: Shape, declared: Iterable[Table[Any]], reference: Shape) -> list[str]:
    """How the database the migrations built (``migrated``) fails ``declared`` tables, whose
    ``reference`` shape a database built from the declarations alone has; empty if it does
    not. Indexes the migrations add beyond a declaration's are allowed (a run's state, a
    schedule's due time), but not one in its name space (``<table>_parent_*``) it lacks."""
    found = []
    for table in declared:
        columns, indexes = migrated[table.name]
        want_columns, want_indexes = reference[table.name]
        if columns != want_columns:
            found.append(f"{table.name}: columns {columns}, declared {want_columns}")
        own = {index for index in indexes if index[0].startswith(f"{table.name}_parent_")}
        if not want_indexes <= indexes or own - want_indexes:
            declared_indexes = sorted(want_indexes)
            found.append(f"{table.name}: indexes {sorted(indexes)}, declared {declared_indexes}")
    return found


def _migrate(storage: Storage) -> None:
    async def body() -> None:
        await storage.open()
        await storage.close()

    asyncio.run(body())


@dataclasses.dataclass
class Backend:
    """One dialect's databases: ``migrated`` (built by the server's migrations) and
    ``shape(declared)``: a fresh database built from ``declared`` tables' SQL, read back."""

    dialect: str
    migrated: Callable[[Iterable[str]], Shape]
    built: Callable[[str], Callable[[Iterable[str]], Shape]]

    def reference(self, declared: Iterable[Table[Any]]) -> Shape:
        declared = list(declared)
        sql = "\n".join(schema.create_table(table, self.dialect) for table in declared)
        return self.built(sql)(table.name for table in declared)


@pytest.fixture(params=schema.DIALECTS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        path = tmp_path / "migrated.sqlite"
        _migrate(SqliteStorage(path))

        def built(sql: str) -> Callable[[Iterable[str]], Shape]:
            reference = tmp_path / "declared.sqlite"
            reference.unlink(missing_ok=True)
            with sqlite3.connect(reference) as connection:
                connection.executescript(sql)
            return lambda names: _sqlite_shape(reference, names)

        return Backend("sqlite", lambda names: _sqlite_shape(path, names), built)
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    url = request.getfixturevalue("postgres_url")
    _migrate(PostgresStorage(url))

    def built_pg(sql: str) -> Callable[[Iterable[str]], Shape]:
        reference = cluster.create_database()
        request.addfinalizer(lambda: cluster.drop_database(reference))
        with psycopg.connect(reference, autocommit=True) as connection:
            connection.execute(sql.encode())
        return lambda names: _postgres_shape(reference, names)

    return Backend("postgresql", lambda names: _postgres_shape(url, names), built_pg)


def test_the_migrations_build_what_the_declarations_need(backend: Backend) -> None:
    declared = list(tables.TABLES)
    migrated = backend.migrated(table.name for table in declared)
    assert differences(migrated, declared, backend.reference(declared)) == []


def test_a_declaration_the_migrations_do_not_build_is_found(backend: Backend) -> None:
    """A declaration with a filter column fewer, one whose display names are not unique: both
    disagree with the committed migrations."""
    fewer = dataclasses.replace(tables.DATASETS, filterable=tables.DATASETS.filterable[:-1])
    shared = dataclasses.replace(tables.EXPECTATIONS, unique_display_name=False)
    spoiled = [fewer, shared]
    migrated = backend.migrated(table.name for table in spoiled)
    found = differences(migrated, spoiled, backend.reference(spoiled))
    assert [line.split(":", 1)[0] for line in found] == [fewer.name, shared.name]
    assert "columns" in found[0] and "last_updated_by" in found[0]
    assert "indexes" in found[1]


def test_a_new_declaration_gets_a_migration_after_the_last(backend: Backend) -> None:
    """The generator writes a new table's migration, numbered after the committed ones, whose
    SQL builds what the declaration needs; a table a migration creates gets none."""
    new = dataclasses.replace(tables.OUTCOME_RULES, name="scratch_rules")
    committed = migrations(backend.dialect)
    (written,) = schema.pending(backend.dialect, [new])
    assert written.file == f"{len(committed) + 1:04d}_scratch_rules.sql"
    migrated = backend.built(written.sql)([new.name])
    assert differences(migrated, [new], backend.reference([new])) == []
    assert schema.pending(backend.dialect, [tables.OUTCOME_RULES]) == []  # committed: frozen


def test_the_generator_has_nothing_to_write() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "migrations.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
