"""Restore and import write an app back in one transaction (versions.put_back over
Storage.write_rows), on both backends: a write the database refuses part-way leaves the app as
it was, and writing back again completes it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import ces_eval.core.service  # noqa: F401 - every resource module, so every declared table
from ces_eval.core.resources import apps, versions
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import agent_pb2, guardrail_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import Storage
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from tests.contract.test_storage import ts
from tests.contract.test_tables import run

APP = "projects/p/locations/l/apps/a"
AGENTS = tables.of_message(agent_pb2.Agent)
GUARDRAILS = tables.of_message(guardrail_pb2.Guardrail)

# The database refusing every new guardrail row, in each engine's own words.
_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse BEFORE INSERT ON guardrails "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON guardrails FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}
_ACCEPT = {
    "sqlite": ["DROP TRIGGER refuse"],
    "postgresql": ["DROP TRIGGER refuse ON guardrails", "DROP FUNCTION refuse()"],
}

Backend = tuple[Callable[[], Storage], Callable[[list[str]], None], str]


@pytest.fixture(params=("sqlite", "postgresql"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """New storages over one database, and a way to run SQL on it from another connection."""
    if request.param == "sqlite":
        path = tmp_path / "db.sqlite"

        def run_sqlite(statements: list[str]) -> None:
            with sqlite3.connect(path) as connection:
                for statement in statements:
                    connection.execute(statement)
            connection.close()

        return (lambda: SqliteStorage(path)), run_sqlite, "sqlite"
    url = request.getfixturevalue("postgres_url")

    def run_postgresql(statements: list[str]) -> None:
        with psycopg.connect(url, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement)

    return (lambda: PostgresStorage(url)), run_postgresql, "postgresql"


def _stamped(message: object, name: str, display_name: str) -> object:
    for field, value in (("name", name), ("display_name", display_name), ("etag", "e0")):
        setattr(message, field, value)
    for stamp in ("create_time", "update_time"):
        getattr(message, stamp).CopyFrom(ts(1))
    return message


def test_a_write_back_refused_part_way_leaves_the_app_as_it_was(backend: Backend) -> None:
    make_storage, execute, dialect = backend
    assert AGENTS is not None and GUARDRAILS is not None

    async def body(storage: Storage) -> None:
        app = _stamped(apps.App(), APP, "Original")
        agent = _stamped(agent_pb2.Agent(), f"{APP}/agents/root", "Root")
        guardrail = _stamped(guardrail_pb2.Guardrail(), f"{APP}/guardrails/safe", "Safe")
        for table, row in ((apps.TABLE, app), (AGENTS, agent), (GUARDRAILS, guardrail)):
            await storage.insert_row(table, row)
        taken = await versions.snapshot(storage, APP)
        changed = apps.App()
        changed.CopyFrom(app)
        changed.display_name = "Changed"
        await storage.replace_row(apps.TABLE, changed, "e0")
        await storage.delete_row(AGENTS, agent.name, None)
        await storage.delete_row(GUARDRAILS, guardrail.name, None)

        async def state() -> tuple[str, bool, bool]:
            stored = await storage.get_row(apps.TABLE, APP)
            assert stored is not None
            return (
                stored.display_name,
                await storage.get_row(AGENTS, agent.name) is not None,
                await storage.get_row(GUARDRAILS, guardrail.name) is not None,
            )

        assert await state() == ("Changed", False, False)
        execute(_REFUSE[dialect])
        # SQLite's backend takes the refusal for a uniqueness conflict (an IntegrityError on
        # a write that may conflict), so it reads again and gives up with ABORTED; PostgreSQL's
        # raises the trigger's own exception.
        with pytest.raises((ServiceError, psycopg.errors.RaiseException)):
            await versions.put_back(storage, APP, taken)
        assert await state() == ("Changed", False, False)  # the app and its agent too
        execute(_ACCEPT[dialect])
        before, after, warnings = await versions.put_back(storage, APP, taken)
        assert (before, after.display_name, warnings) == (changed, "Original", [])
        assert await state() == ("Original", True, True)

    run(make_storage, body)
