"""The storage contract, run against every backend.

Backends are real: a SQLite file in a temporary folder, and a fresh database on a throw-away
PostgreSQL server (tests/conftest.py). Tests speak only the Storage protocol, except the last
ones, which look at each backend's query plans and schema guards.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from google.protobuf import timestamp_pb2

from ces_eval.core.derived import derive
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    EtagMismatch,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
    Storage,
)
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from tests.support import samples

APP = "projects/p1/locations/l/apps/a"
OTHER_APP = "projects/p2/locations/l/apps/a"
Result = evaluation_pb2.EvaluationResult

BACKENDS = ("sqlite", "postgresql")


def storage_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    """New Storage objects (one per call) over one database of the backend ``request.param``."""
    if request.param == "sqlite":
        return lambda: SqliteStorage(tmp_path / "db.sqlite", derive=derive)
    url = request.getfixturevalue("postgres_url")
    return lambda: PostgresStorage(url, derive=derive)


@pytest.fixture(params=BACKENDS)
def make_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    return storage_factory(request, tmp_path)


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def ts(micros: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=micros // 1_000_000, nanos=micros % 1_000_000 * 1000)


def evaluation(
    app: str, eid: str, display: str, t: int, etag: str = "e0"
) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(
        name=f"{app}/evaluations/{eid}", display_name=display, etag=etag, tags=["t1", "t2"]
    )
    message.create_time.CopyFrom(ts(t))
    message.update_time.CopyFrom(ts(t))
    message.golden.turns.add().steps.add().user_input.text = "hi"
    return message


def result(evaluation_name: str, rid: str, t: int, run_id: str = "run-1") -> Result:
    message = Result(
        name=f"{evaluation_name}/results/{rid}",
        display_name=f"result {rid}",
        evaluation_run=f"{APP}/evaluationRuns/{run_id}",
        execution_state=Result.ExecutionState.COMPLETED,
        evaluation_status=Result.Outcome.PASS,
    )
    message.create_time.CopyFrom(ts(t))
    return message


async def _with(storage: Storage, body: Callable[[Storage], object]) -> object:
    await storage.open()
    try:
        return await body(storage)  # type: ignore[misc]
    finally:
        await storage.close()


def test_insert_get_and_missing(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        stored = evaluation(APP, "e1", "One", 1_000_000)
        await storage.insert_evaluation(stored)
        assert await storage.get_evaluation(stored.name) == stored
        assert await storage.get_evaluation(f"{APP}/evaluations/none") is None

    run(_with(make_storage(), body))


def test_uniqueness_of_names_and_display_names(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        await storage.insert_evaluation(evaluation(APP, "e1", "One", 1))
        with pytest.raises(Conflict) as by_name:
            await storage.insert_evaluation(evaluation(APP, "e1", "Other", 2))
        assert by_name.value.field == "name"
        with pytest.raises(Conflict) as by_display:
            await storage.insert_evaluation(evaluation(APP, "e2", "One", 3))
        assert (by_display.value.field, by_display.value.existing) == (
            "display_name",
            f"{APP}/evaluations/e1",
        )
        await storage.insert_evaluation(evaluation(OTHER_APP, "e2", "One", 4))  # other app: fine

    run(_with(make_storage(), body))


def test_conditional_replace_and_delete(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        stored = evaluation(APP, "e1", "One", 1)
        await storage.insert_evaluation(stored)
        changed = evaluation(APP, "e1", "Renamed", 1, etag="e1")
        with pytest.raises(EtagMismatch):
            await storage.replace_evaluation(changed, expected_etag="stale")
        await storage.replace_evaluation(changed, expected_etag="e0")
        assert (await storage.get_evaluation(stored.name)) == changed
        with pytest.raises(Missing):
            await storage.replace_evaluation(evaluation(APP, "nope", "x", 1), expected_etag="e0")
        with pytest.raises(EtagMismatch):
            await storage.delete_evaluation(stored.name, "e0")
        await storage.delete_evaluation(stored.name, "e1")
        with pytest.raises(Missing):
            await storage.delete_evaluation(stored.name, None)

    run(_with(make_storage(), body))


def test_results_update_derived_fields_and_cascade(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        parent = evaluation(APP, "e1", "One", 1)
        await storage.insert_evaluation(parent)
        await storage.insert_result(result(parent.name, "r1", 10, "run-a"), parent_etag="p1")
        await storage.insert_result(result(parent.name, "r2", 20, "run-b"), parent_etag="p2")
        with pytest.raises(Conflict):
            await storage.insert_result(result(parent.name, "r2", 30), parent_etag="p3")
        with pytest.raises(Missing):
            await storage.insert_result(result(f"{APP}/evaluations/none", "r", 1), parent_etag="x")
        stored = await storage.get_evaluation(parent.name)
        assert stored is not None
        assert stored.etag == "p2"
        assert list(stored.evaluation_runs) == [
            f"{APP}/evaluationRuns/run-b",
            f"{APP}/evaluationRuns/run-a",
        ]
        assert stored.last_completed_result.name == f"{parent.name}/results/r2"
        assert stored.aggregated_metrics.metrics_by_app_version[0].pass_count == 2
        recent = await storage.recent_results([parent.name], 1)
        assert [r.name for r in recent[parent.name]] == [f"{parent.name}/results/r2"]
        await storage.delete_result(f"{parent.name}/results/r2", parent_etag="p4")
        stored = await storage.get_evaluation(parent.name)
        assert stored is not None and stored.etag == "p4"
        assert stored.aggregated_metrics.metrics_by_app_version[0].pass_count == 1
        with pytest.raises(Missing):
            await storage.delete_result(f"{parent.name}/results/r2", parent_etag="p5")
        await storage.delete_evaluation(parent.name, None)
        assert await storage.get_result(f"{parent.name}/results/r1") is None

    run(_with(make_storage(), body))


@pytest.mark.parametrize(
    "order",
    [OrderBy(k, d) for k in SortKey for d in (False, True)],
    ids=lambda o: f"{o.key.value}-{'desc' if o.descending else 'asc'}",
)
def test_keyset_pages_visit_every_row_once_in_order(
    make_storage: Callable[[], Storage], order: OrderBy
) -> None:
    async def body(storage: Storage) -> None:
        # Equal times for some rows: the name breaks ties, in the same direction.
        times = [5, 3, 3, 9, 1, 3, 7]
        for index, t in enumerate(times):
            await storage.insert_evaluation(evaluation(APP, f"e{index}", f"E{index}", t))
        await storage.insert_evaluation(evaluation(OTHER_APP, "x", "X", 4))
        seen: list[str] = []
        after: Cursor | None = None
        while True:
            page = await storage.list_evaluations(
                ListQuery(parent=APP, order=order, limit=3, after=after)
            )
            seen += [e.name for e, _ in page]
            if len(page) < 3:
                break
            after = page[-1][1]
        if order.key is SortKey.NAME:
            expected = sorted(
                (f"{APP}/evaluations/e{i}" for i in range(7)), reverse=order.descending
            )
        else:
            expected = [
                f"{APP}/evaluations/e{i}"
                for i in sorted(
                    range(7), key=lambda i: (times[i], f"e{i}"), reverse=order.descending
                )
            ]
        assert seen == expected

    run(_with(make_storage(), body))


def test_results_listed_per_evaluation_or_across_the_app(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        for eid in ("e1", "e2"):
            await storage.insert_evaluation(evaluation(APP, eid, eid, 1))
            for rid in ("r1", "r2"):
                await storage.insert_result(result(f"{APP}/evaluations/{eid}", rid, 2), "x")
        order = OrderBy(SortKey.NAME, descending=False)
        one = await storage.list_results(ListQuery(f"{APP}/evaluations/e1", order, 10))
        every = await storage.list_results(ListQuery(APP, order, 10, across_evaluations=True))
        assert [Result.FromString(r).name.rsplit("/evaluations/", 1)[1] for r, _ in one] == [
            "e1/results/r1",
            "e1/results/r2",
        ]
        assert len(every) == 4

    run(_with(make_storage(), body))


def test_reset_project_removes_only_that_project(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        await storage.insert_evaluation(evaluation(APP, "e1", "One", 1))
        await storage.insert_result(result(f"{APP}/evaluations/e1", "r1", 2), "x")
        await storage.insert_evaluation(evaluation(OTHER_APP, "e1", "One", 1))
        counts = await storage.reset_project("p1")
        assert (counts.evaluations, counts.evaluation_results) == (1, 1)
        assert await storage.get_evaluation(f"{APP}/evaluations/e1") is None
        assert await storage.get_evaluation(f"{OTHER_APP}/evaluations/e1") is not None

    run(_with(make_storage(), body))


def test_data_survives_reopening(make_storage: Callable[[], Storage]) -> None:
    stored = evaluation(APP, "e1", "One", 1)

    async def write(storage: Storage) -> bytes:
        await storage.insert_evaluation(stored)
        return await storage.secret()

    async def read(storage: Storage) -> tuple[object, bytes]:
        return await storage.get_evaluation(stored.name), await storage.secret()

    secret = run(_with(make_storage(), write))
    again, secret_again = run(_with(make_storage(), read))  # type: ignore[misc]
    assert again == stored
    assert secret == secret_again and len(secret) == 32  # type: ignore[arg-type]


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "db.sqlite", derive=derive)
    run(_with(storage, lambda s: asyncio.sleep(0)))
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        connection.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    with pytest.raises(RuntimeError, match="999"):
        run(_with(SqliteStorage(tmp_path / "db.sqlite", derive=derive), lambda s: asyncio.sleep(0)))


def test_sqlite_list_queries_use_indexes(tmp_path: Path) -> None:
    """Filtering and ordering run in SQLite on indexes: no full scan, no temporary sort."""
    storage = SqliteStorage(tmp_path / "db.sqlite", derive=derive)
    run(_with(storage, lambda s: asyncio.sleep(0)))
    statements = [
        "SELECT data FROM evaluation_results WHERE evaluation_results.app = ? AND "
        "evaluation_results.evaluation_run = ? AND (evaluation_results.update_time < ? OR "
        "(evaluation_results.update_time = ? AND evaluation_results.name < ?)) "
        "ORDER BY evaluation_results.update_time DESC, evaluation_results.name DESC LIMIT 101",
        "SELECT data FROM evaluation_results WHERE evaluation_results.evaluation = ? "
        "ORDER BY evaluation_results.create_time DESC, evaluation_results.name DESC LIMIT 51",
        "SELECT data FROM evaluations WHERE evaluations.app = ? AND evaluations.name > ? "
        "ORDER BY evaluations.name ASC LIMIT 51",
    ]
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        for statement in statements:
            plan = " | ".join(
                row[3]
                for row in connection.execute(
                    "EXPLAIN QUERY PLAN " + statement, [1] * statement.count("?")
                )
            )
            assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
            assert "TEMP B-TREE" not in plan, plan


def test_postgresql_refuses_a_newer_schema(postgres_url: str) -> None:
    run(_with(PostgresStorage(postgres_url, derive=derive), lambda s: asyncio.sleep(0)))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(RuntimeError, match="999"):
        run(_with(PostgresStorage(postgres_url, derive=derive), lambda s: asyncio.sleep(0)))


def test_postgresql_list_queries_use_indexes_without_sorting(postgres_url: str) -> None:
    """The same page statements as on SQLite: an index scan in the page's order, no Sort node
    (sequential scans are disabled so the tiny test tables do not hide the plan)."""
    run(_with(PostgresStorage(postgres_url, derive=derive), lambda s: asyncio.sleep(0)))
    statements = [
        "SELECT data FROM evaluation_results WHERE evaluation_results.app = %s AND "
        "evaluation_results.evaluation_run = %s AND (evaluation_results.update_time < %s OR "
        "(evaluation_results.update_time = %s AND evaluation_results.name < %s)) "
        "ORDER BY evaluation_results.update_time DESC, evaluation_results.name DESC LIMIT 101",
        "SELECT data FROM evaluation_results WHERE evaluation_results.evaluation = %s "
        "ORDER BY evaluation_results.create_time DESC, evaluation_results.name DESC LIMIT 51",
        "SELECT data FROM evaluations WHERE evaluations.app = %s AND evaluations.name > %s "
        "ORDER BY evaluations.name ASC LIMIT 51",
    ]
    params = {
        0: ("a", "r", 1, 1, "n"),
        1: ("e",),
        2: ("a", "n"),
    }
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")
        for index, statement in enumerate(statements):
            rows = connection.execute(("EXPLAIN " + statement).encode(), params[index]).fetchall()
            plan = " | ".join(str(row[0]) for row in rows)
            assert "Index Scan" in plan, plan
            assert "Sort" not in plan, plan


def _varied_result(evaluation_name: str, index: int) -> Result:
    """A fully populated result (golden or scenario by ``index``) with varied state, outcome,
    app version, run and a distinct create_time."""
    message = samples.populate(Result(), index)
    assert isinstance(message, Result)
    message.name = f"{evaluation_name}/results/r{index:02d}"
    message.display_name = f"result {index}"
    message.execution_state = (
        Result.ExecutionState.COMPLETED if index % 4 else Result.ExecutionState.RUNNING
    )
    message.evaluation_status = Result.Outcome.PASS if index % 3 else Result.Outcome.FAIL
    message.app_version = f"{APP}/versions/v{index % 2}"
    message.evaluation_run = f"{APP}/evaluationRuns/run-{index % 5}" if index % 7 else ""
    message.create_time.CopyFrom(ts(1_000_000 + index * 7_919 % 50 * 1_000))
    return message


def _assert_derived(stored: evaluation_pb2.Evaluation | None, results: list[Result]) -> None:
    expected = derive(results)
    assert stored is not None
    assert stored.aggregated_metrics == expected.aggregated_metrics
    assert list(stored.evaluation_runs) == expected.evaluation_runs
    if expected.last_completed_result is None:
        assert not stored.HasField("last_completed_result")
    else:
        assert stored.last_completed_result == expected.last_completed_result


def test_derived_fields_follow_every_result_write(make_storage: Callable[[], Storage]) -> None:
    """Inserts, replacements (new outcome and state) and deletions update the evaluation's
    derived fields incrementally; after each the stored fields equal ``derive`` of every
    result left, as if recomputed from scratch."""

    async def body(storage: Storage) -> None:
        parent = evaluation(APP, "e1", "One", 1)
        await storage.insert_evaluation(parent)
        current = {}
        for index in range(16):
            written = _varied_result(parent.name, index)
            await storage.insert_result(written, parent_etag=f"i{index}")
            current[written.name] = written
        _assert_derived(await storage.get_evaluation(parent.name), list(current.values()))
        for index in (1, 4, 9):
            changed = Result()
            changed.CopyFrom(current[f"{parent.name}/results/r{index:02d}"])
            changed.evaluation_status = Result.Outcome.FAIL
            changed.execution_state = Result.ExecutionState.COMPLETED
            await storage.replace_result(changed, parent_etag=f"u{index}")
            current[changed.name] = changed
            _assert_derived(await storage.get_evaluation(parent.name), list(current.values()))
        for index in (2, 3, 5, 11, 15):
            name = f"{parent.name}/results/r{index:02d}"
            await storage.delete_result(name, parent_etag=f"d{index}")
            del current[name]
            _assert_derived(await storage.get_evaluation(parent.name), list(current.values()))
        for name in list(current):
            await storage.delete_result(name, parent_etag="empty")
        emptied = await storage.get_evaluation(parent.name)
        assert emptied is not None
        assert emptied.etag == "empty"
        _assert_derived(emptied, [])

    run(_with(make_storage(), body))


def test_evaluations_from_before_incremental_upkeep_are_summed_once(
    request: pytest.FixtureRequest, make_storage: Callable[[], Storage], tmp_path: Path
) -> None:
    """A NULL tally (rows written before migration 0004/0002) is rebuilt from every result at
    the next write, then kept up to date as usual."""
    parent = evaluation(APP, "e1", "One", 1)
    first = [_varied_result(parent.name, index) for index in range(1, 6)]

    async def seed(storage: Storage) -> None:
        await storage.insert_evaluation(parent)
        for result_message in first:
            await storage.insert_result(result_message, parent_etag="x")

    run(_with(make_storage(), seed))
    backend = request.node.callspec.params["make_storage"]
    if backend == "sqlite":
        with sqlite3.connect(tmp_path / "db.sqlite") as connection:
            connection.execute("UPDATE evaluations SET metrics_tally = NULL")
        connection.close()
    else:
        url = request.getfixturevalue("postgres_url")
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("UPDATE evaluations SET metrics_tally = NULL")
    later = _varied_result(parent.name, 6)

    async def write(storage: Storage) -> None:
        await storage.insert_result(later, parent_etag="y")
        _assert_derived(await storage.get_evaluation(parent.name), [*first, later])
        await storage.delete_result(first[0].name, parent_etag="z")
        _assert_derived(await storage.get_evaluation(parent.name), [*first[1:], later])

    run(_with(make_storage(), write))
