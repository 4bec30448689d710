"""Where one transaction script meets two engines: the outcomes that once differed by backend.

The scripts (src/ces_eval/storage/_scripts.py) exist once; what still differs is the SQL text
of each dialect (_dialect.py), the backends' error mapping and their clocks. These tests pin
the outcomes that depend on those seams, over both backends: which holder a display-name
conflict names, which name a Missing carries, etag checks against uniqueness, the operation
lease lifecycle in one process, and that every fixed statement of each dialect is valid SQL
for its engine.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from google.longrunning import operations_pb2
from google.rpc import code_pb2, status_pb2

from ces_eval.storage import _dialect, tables
from ces_eval.storage.base import Conflict, EtagMismatch, Missing, Storage
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from tests.contract.test_storage import APP, evaluation, make_storage, result

__all__ = ["make_storage"]  # the fixture, parametrized over both backends

PARENT = "projects/p1/locations/l"
FAILED = status_pb2.Status(code=code_pb2.ABORTED, message="gone")


def _run(storage: Storage, body: Callable[[Storage], object]) -> None:
    async def scenario() -> None:
        await storage.open()
        try:
            await body(storage)  # type: ignore[misc]
        finally:
            await storage.close()

    asyncio.run(scenario())


def test_a_display_name_conflict_names_its_holder(
    make_storage: Callable[[], Storage],
) -> None:
    """A clash with a stored row names it (read after the failed transaction rolled back);
    a clash between two rows of one import names the earlier one, though neither is stored."""

    async def body(storage: Storage) -> None:
        twins = [evaluation(APP, "e1", "Same", 1), evaluation(APP, "e2", "Same", 2)]
        with pytest.raises(Conflict) as within:
            await storage.import_bundle(twins, [])
        assert (within.value.field, within.value.existing) == ("display_name", twins[0].name)
        assert await storage.get_evaluation(twins[0].name) is None
        with pytest.raises(Conflict) as twice:
            await storage.import_bundle([twins[0], twins[0]], [])
        assert (twice.value.field, twice.value.existing) == ("name", twins[0].name)
        results = [result(twins[0].name, "r1", 1), result(twins[0].name, "r2", 2)]
        results[1].display_name = results[0].display_name
        with pytest.raises(Conflict) as sibling:
            await storage.import_bundle([twins[0]], results)
        assert (sibling.value.field, sibling.value.existing) == ("display_name", results[0].name)
        await storage.insert_evaluation(twins[0])
        with pytest.raises(Conflict) as stored:
            await storage.import_bundle([evaluation(APP, "e3", "Same", 3)], [])
        assert (stored.value.field, stored.value.existing) == ("display_name", twins[0].name)
        with pytest.raises(Conflict) as by_name:
            await storage.import_bundle([evaluation(APP, "e1", "Other", 4)], [])
        assert (by_name.value.field, by_name.value.existing) == ("name", twins[0].name)

    _run(make_storage(), body)


def test_an_import_names_the_first_missing_evaluation_in_result_order(
    make_storage: Callable[[], Storage],
) -> None:
    """Evaluations are locked in name order (PostgreSQL), but the Missing one reported is the
    first the results name, on either backend."""

    async def body(storage: Storage) -> None:
        later, earlier = f"{APP}/evaluations/zz", f"{APP}/evaluations/aa"
        with pytest.raises(Missing) as missing:
            await storage.import_bundle([], [result(later, "r1", 1), result(earlier, "r2", 2)])
        assert missing.value.name == later

    _run(make_storage(), body)


def test_result_writes_under_a_missing_evaluation_name_the_result(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        orphan = result(f"{APP}/evaluations/none", "r1", 1)
        with pytest.raises(Missing) as replaced:
            await storage.replace_result(orphan, "p1")
        assert replaced.value.name == orphan.name
        with pytest.raises(Missing) as deleted:
            await storage.delete_result(orphan.name, "p1")
        assert deleted.value.name == orphan.name
        with pytest.raises(Missing) as inserted:
            await storage.insert_result(orphan, "p1")
        assert inserted.value.name == f"{APP}/evaluations/none"

    _run(make_storage(), body)


def test_a_stale_etag_is_a_mismatch_even_when_the_display_name_is_taken(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        await storage.insert_evaluation(evaluation(APP, "e1", "One", 1))
        await storage.insert_evaluation(evaluation(APP, "e2", "Two", 2))
        clash = evaluation(APP, "e2", "One", 2, etag="e9")
        with pytest.raises(EtagMismatch):
            await storage.replace_evaluation(clash, expected_etag="stale")
        with pytest.raises(Conflict) as conflict:
            await storage.replace_evaluation(clash, expected_etag="e0")
        assert (conflict.value.field, conflict.value.existing) == (
            "display_name",
            f"{APP}/evaluations/e1",
        )
        stored = await storage.get_evaluation(clash.name)
        assert stored is not None and (stored.display_name, stored.etag) == ("Two", "e0")

    _run(make_storage(), body)


def _operation(name: str) -> operations_pb2.Operation:
    return operations_pb2.Operation(name=f"{PARENT}/operations/{name}", done=False)


def test_the_operation_lifecycle_in_one_process(make_storage: Callable[[], Storage]) -> None:
    """Leases (this process's clock on SQLite, the database's on PostgreSQL), cancellation,
    expiry and recovery, through one storage."""

    async def body(storage: Storage) -> None:
        await storage.insert_operation(_operation("long"), "M", owner="A", lease=60)
        await storage.insert_operation(_operation("short"), "M", owner="B", lease=0.2)
        await storage.insert_operation(_operation("other"), "M", owner="C", lease=60)
        long_name, short_name = (f"{PARENT}/operations/{n}" for n in ("long", "short"))
        assert not await storage.cancel_requested(long_name)
        requested = await storage.request_cancel(long_name)
        assert requested is not None and requested.name == long_name
        assert await storage.request_cancel(f"{PARENT}/operations/none") is None
        assert await storage.cancel_requested(long_name)
        assert await storage.renew_leases("B", 0.2) == []
        assert await storage.renew_leases("A", 60) == [long_name]

        await asyncio.sleep(0.5)
        assert await storage.fail_expired(FAILED) == 1
        expired = await storage.get_operation(short_name)
        assert expired is not None and expired.done and expired.error.code == code_pb2.ABORTED
        assert await storage.fail_expired(FAILED) == 0
        late = _operation("short")
        late.done = True
        assert not await storage.finish_operation(late)

        progress = _operation("long")
        progress.metadata.Pack(status_pb2.Status(message="half way"))
        assert await storage.update_running_operation(progress)
        running = await storage.list_operations(PARENT, 10, None, done=False)
        assert [o.name for o in running] == [f"{PARENT}/operations/{n}" for n in ("long", "other")]
        assert running[0].metadata == progress.metadata
        assert await storage.fail_unfinished(FAILED, owner="A") == 1
        assert await storage.fail_unfinished(FAILED) == 1
        assert await storage.list_operations(PARENT, 10, None, done=False) == []
        assert len(await storage.list_operations(PARENT, 10, None, done=True)) == 3
        assert await storage.delete_operation(short_name)
        assert not await storage.delete_operation(short_name)
        assert await storage.get_operation(short_name) is None

    _run(make_storage(), body)


def _fixed_statements(sql: _dialect.Sql) -> dict[str, str]:
    """Every query and write the dialect builds once (its string attributes that are SQL,
    those built at their first use included)."""
    words = ("SELECT", "INSERT", "UPDATE", "DELETE")  # the DDL runs at every open
    lazy = [n for n, v in vars(type(sql)).items() if isinstance(v, functools.cached_property)]
    values = {name: getattr(sql, name) for name in (*vars(sql), *lazy)}
    return {
        name: value
        for name, value in values.items()
        if isinstance(value, str) and value.startswith(words)
    }


def test_every_fixed_sqlite_statement_is_valid_sql(tmp_path: Path) -> None:
    """Each statement compiles against the migrated schema (EXPLAIN prepares it without
    running it); a statement only some rare path uses cannot hide a typo."""
    _run(SqliteStorage(tmp_path / "db.sqlite"), lambda storage: asyncio.sleep(0))
    statements = _fixed_statements(_dialect.SQLITE)
    assert {"evaluation_insert", "operations_expired", "run_results_delete"} <= set(statements)
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        for name, statement in statements.items():
            params = [None] * statement.count("?")
            assert connection.execute("EXPLAIN " + statement, params).fetchall(), name
    connection.close()


def test_every_fixed_postgresql_statement_is_valid_sql(postgres_url: str) -> None:
    """The same on PostgreSQL: each statement is prepared (parsed, type-checked, planned)."""
    _run(PostgresStorage(postgres_url), lambda storage: asyncio.sleep(0))
    statements = _fixed_statements(_dialect.POSTGRESQL)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for index, (name, statement) in enumerate(statements.items()):
            pieces = statement.split("%s")
            text = pieces[0] + "".join(f"${n}{piece}" for n, piece in enumerate(pieces[1:], 1))
            try:
                connection.execute(f"PREPARE s{index} AS {text}".encode())
            except psycopg.Error as error:
                pytest.fail(f"{name}: {error}")
            connection.execute(f"DEALLOCATE s{index}".encode())


def test_an_import_replaces_evaluations_in_its_transaction(
    make_storage: Callable[[], Storage],
) -> None:
    """``replacing``: the stored evaluation and its results go, the imported one (same name,
    new content) comes, all or nothing; a gone evaluation to replace is Missing."""

    async def body(storage: Storage) -> None:
        old = evaluation(APP, "e1", "Old", 1)
        await storage.insert_evaluation(old)
        await storage.insert_result(result(old.name, "r1", 2), "x")
        await storage.insert_evaluation(evaluation(APP, "e2", "Taken", 1))
        new = evaluation(APP, "e1", "New", 3, etag="n1")
        # Nothing happens when the imported evaluation clashes with another one.
        clash = evaluation(APP, "e1", "Taken", 3)
        with pytest.raises(Conflict):
            await storage.import_bundle([clash], [], replacing=[old.name])
        assert await storage.get_result(f"{old.name}/results/r1") is not None
        await storage.import_bundle([new], [result(old.name, "r9", 4)], replacing=[old.name])
        stored = await storage.get_evaluation(old.name)
        assert stored is not None and stored.display_name == "New" and stored.etag == "n1"
        assert await storage.get_result(f"{old.name}/results/r1") is None
        assert await storage.get_result(f"{old.name}/results/r9") is not None
        with pytest.raises(Missing) as gone:
            await storage.import_bundle([], [], replacing=[f"{APP}/evaluations/nope"])
        assert gone.value.name == f"{APP}/evaluations/nope"

    _run(make_storage(), body)


def test_locations_are_those_a_projects_names_use(make_storage: Callable[[], Storage]) -> None:
    """Evaluations, operations and the generic tables' rows count; other projects do not, nor
    does a project whose name merely starts alike (LIKE's wildcards are escaped)."""

    async def body(storage: Storage) -> None:
        assert await storage.locations("p1") == []
        await storage.insert_evaluation(evaluation(APP, "e1", "One", 1))
        await storage.insert_evaluation(
            evaluation("projects/p1/locations/europe-west1/apps/a", "e1", "One", 1)
        )
        await storage.insert_evaluation(
            evaluation("projects/p1x/locations/asia/apps/a", "e", "E", 1)
        )
        await storage.insert_evaluation(evaluation("projects/p_/locations/x_y/apps/a", "e", "E", 1))
        operation = operations_pb2.Operation(name="projects/p1/locations/us-east1/operations/o1")
        await storage.insert_operation(operation, "ExportEvaluations", "me", 30.0)
        expectation = tables.EXPECTATIONS.message(
            name="projects/p1/locations/zz/apps/a/evaluationExpectations/x", display_name="x"
        )
        await storage.insert_row(tables.EXPECTATIONS, expectation)
        assert await storage.locations("p1") == ["europe-west1", "l", "us-east1", "zz"]
        assert await storage.locations("p_") == ["x_y"]
        assert await storage.locations("p") == []

    _run(make_storage(), body)
