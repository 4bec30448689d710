"""The storage contract, run against every backend.

Backends are real: a SQLite file in a temporary folder, and a fresh database on a throw-away
PostgreSQL server (tests/conftest.py). Tests speak only the Storage protocol, except the last
ones, which look at each backend's query plans and schema guards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, timestamp_pb2

from ces_eval import filtering
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import _dialect, _tables
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    EtagMismatch,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
    Storage,
    TooLarge,
)
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage

APP = "projects/p1/locations/l/apps/a"
OTHER_APP = "projects/p2/locations/l/apps/a"
Result = evaluation_pb2.EvaluationResult

BACKENDS = ("sqlite", "postgresql")


def storage_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    """New Storage objects (one per call) over one database of the backend ``request.param``."""
    if request.param == "sqlite":
        return lambda: SqliteStorage(tmp_path / "db.sqlite")
    url = request.getfixturevalue("postgres_url")
    return lambda: PostgresStorage(url)


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
            await storage.delete_evaluation(stored.name, "e0", dataset_etag="d")
        await storage.delete_evaluation(stored.name, "e1", dataset_etag="d")
        with pytest.raises(Missing):
            await storage.delete_evaluation(stored.name, None, dataset_etag="d")

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
        await storage.delete_evaluation(parent.name, None, dataset_etag="d")
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


def _within(sizes: list[int], limit: int, max_bytes: int) -> int:
    """How many rows ListQuery.max_bytes says a page of rows of ``sizes`` stored bytes reads:
    each while the rows before it hold at most ``max_bytes``, the first two always."""
    count = 0
    for index in range(min(limit, len(sizes))):
        if index >= 2 and sum(sizes[:index]) > max_bytes:
            break
        count += 1
    return count


def _stored_bytes(message: evaluation_pb2.Evaluation | Result) -> int:
    if isinstance(message, evaluation_pb2.Evaluation):
        return len(_tables.evaluation_row(message)[-1])  # data; derived is empty here
    return len(message.SerializeToString(deterministic=True))


def test_pages_end_at_the_first_row_past_the_byte_budget(
    make_storage: Callable[[], Storage],
) -> None:
    """ListQuery.max_bytes, on evaluations and results, from the first page and from a
    cursor, with a filter (its parameters appear twice in the statement): a page reads rows
    while those before hold at most the budget, the first two always, never past the limit."""

    async def body(storage: Storage) -> None:
        lengths = [3000, 1000, 5000, 1000, 1000, 2000, 4000]
        evaluations = []
        for index, length in enumerate(lengths):
            stored = evaluation(APP, f"e{index}", f"E{index}", index + 1)
            stored.description = "d" * length
            evaluations.append(stored)
            await storage.insert_evaluation(stored)
            if index == 0:  # results too, and a derived blob that counts as stored bytes
                for rid, length_ in enumerate(lengths):
                    made = result(stored.name, f"r{rid}", rid + 1)
                    made.display_name = f"{rid}" + "r" * length_
                    await storage.insert_result(made, "x")
        order = OrderBy(SortKey.NAME, descending=False)
        first = await storage.get_evaluation(evaluations[0].name)
        assert first is not None
        sizes = [first.ByteSize() - len(_Etag(first.etag))] + [
            _stored_bytes(e) for e in evaluations[1:]
        ]
        parent = evaluations[0].name
        results = [r for r, _ in await storage.list_results(ListQuery(parent, order, 100))]
        result_sizes = [len(r) for r in results]
        for budget in (0, 1, sizes[0], sizes[0] + sizes[1], sum(sizes[:4]) - 1, 10**9):
            for limit in (1, 2, 5, 100):
                page = await storage.list_evaluations(
                    ListQuery(APP, order, limit, max_bytes=budget)
                )
                expected = evaluations[: _within(sizes, limit, budget)]
                assert [e.name for e, _ in page] == [e.name for e in expected], (budget, limit)
                page_results = await storage.list_results(
                    ListQuery(parent, order, limit, max_bytes=budget)
                )
                assert [r for r, _ in page_results] == results[
                    : _within(result_sizes, limit, budget)
                ]
            # From a cursor, through a filter whose parameters the statement repeats.
            after = Cursor(evaluations[1].name, evaluations[1].name)
            page = await storage.list_evaluations(
                ListQuery(
                    APP,
                    order,
                    100,
                    filter=filtering.parse('display_name != "E4"'),
                    after=after,
                    max_bytes=budget,
                )
            )
            rest = [2, 3, 5, 6]
            count = _within([sizes[i] for i in rest], 100, budget)
            assert [e.name for e, _ in page] == [evaluations[i].name for i in rest[:count]]

    run(_with(make_storage(), body))


def _Etag(etag: str) -> bytes:  # noqa: N802 - reads as the field it encodes
    return evaluation_pb2.Evaluation(etag=etag).SerializeToString()


def test_newest_results_and_operations_stop_at_the_byte_budget(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        names = []
        for eid in ("e1", "e2", "e3"):
            stored = evaluation(APP, eid, eid, 1)
            names.append(stored.name)
            await storage.insert_evaluation(stored)
            for index in range(3):
                made = result(stored.name, f"r{index}", 10 - index)
                made.display_name = f"{index}" + "r" * 1000
                await storage.insert_result(made, "x")
        everything = await storage.recent_results(names, 10)
        flat = [r for name in names for r in everything[name]]
        size = len(flat[0].SerializeToString())
        assert all(len(r.SerializeToString()) == size for r in flat)
        for budget, kept in ((0, 1), (size - 1, 1), (size, 2), (4 * size, 5), (10**9, 9)):
            recent = await storage.recent_results(names, 10, max_bytes=budget)
            assert [r.name for name in names for r in recent.get(name, [])] == [
                r.name for r in flat[:kept]
            ], budget
        operations = [
            operations_pb2.Operation(
                name=f"projects/p1/locations/l/operations/o{index}",
                metadata=any_pb2.Any(value=b"m" * 1000 * (index + 1)),
            )
            for index in range(5)
        ]
        for operation in operations:
            await storage.insert_operation(operation, "M", owner="A", lease=60)
        sizes = [o.ByteSize() for o in operations]
        for budget in (0, sizes[0] + sizes[1], sum(sizes[:3]), 10**9):
            listed = await storage.list_operations(
                "projects/p1/locations/l", 4, None, None, max_bytes=budget
            )
            assert [o.name for o in listed] == [
                o.name for o in operations[: _within(sizes, 4, budget)]
            ], budget

    run(_with(make_storage(), body))


def test_result_writes_never_make_their_evaluation_too_large_to_serve(
    make_storage: Callable[[], Storage],
) -> None:
    """max_evaluation_bytes: a result write that would make its evaluation, served with the
    fields derived from its results (last_completed_result copies a whole result), larger than
    the bound and larger than before raises TooLarge with that size, and stores nothing."""

    async def body(storage: Storage) -> None:
        parent = evaluation(APP, "e1", "One", 1)
        await storage.insert_evaluation(parent)
        small = result(parent.name, "small", 10)
        await storage.insert_result(small, "p1", max_evaluation_bytes=10_000)
        served = await storage.get_evaluation(parent.name)
        assert served is not None
        big = result(parent.name, "big", 20)
        big.display_name = "b" * 5000
        would_be = served.ByteSize() - small.ByteSize() + big.ByteSize()
        with pytest.raises(TooLarge) as refused:
            await storage.insert_result(big, "p2", max_evaluation_bytes=would_be - 1)
        assert (refused.value.name, refused.value.size) == (parent.name, would_be)
        assert await storage.get_result(big.name) is None
        assert await storage.get_evaluation(parent.name) == served  # etag and derived kept
        await storage.insert_result(big, "p2", max_evaluation_bytes=would_be)
        after = await storage.get_evaluation(parent.name)
        assert after is not None and after.ByteSize() == would_be
        # Over the bound already: a write that does not make it larger passes; one that does
        # is refused, whatever the bound.
        bigger = Result()
        bigger.CopyFrom(big)
        bigger.display_name += "b"
        with pytest.raises(TooLarge):
            await storage.replace_result(bigger, "p3", max_evaluation_bytes=100)
        await storage.replace_result(big, "p3", max_evaluation_bytes=100)
        # An import stores nothing when one evaluation would be too large.
        imported = evaluation(APP, "e2", "Two", 1, etag="i1")
        heavy = result(imported.name, "r", 5)
        heavy.display_name = "h" * 5000
        with pytest.raises(TooLarge) as refused:
            await storage.import_bundle([imported], [heavy], max_evaluation_bytes=4000)
        assert refused.value.name == imported.name
        assert await storage.get_evaluation(imported.name) is None
        assert await storage.get_result(heavy.name) is None

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
    storage = SqliteStorage(tmp_path / "db.sqlite")
    run(_with(storage, lambda s: asyncio.sleep(0)))
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        connection.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    with pytest.raises(RuntimeError, match="999"):
        run(_with(SqliteStorage(tmp_path / "db.sqlite"), lambda s: asyncio.sleep(0)))


def _page_statements(
    sql: _dialect.Sql, max_bytes: int | None = None
) -> list[tuple[str, list[object]]]:
    """The backends' own page statements (``Sql.page``) for three list shapes, each resuming
    after a cursor: results of an app filtered by run, newest first; results of one evaluation
    by create time; evaluations of an app by name. With ``max_bytes``: within that budget."""
    shapes = [
        (
            "evaluation_results",
            "app",
            ListQuery(
                APP,
                OrderBy(SortKey.UPDATE_TIME, descending=True),
                101,
                filter=filtering.parse('evaluation_run = "r"'),
                after=Cursor(5, "n"),
                across_evaluations=True,
            ),
            _tables.RESULT_FILTER_FIELDS,
        ),
        (
            "evaluation_results",
            "evaluation",
            ListQuery(APP, OrderBy(SortKey.CREATE_TIME, descending=True), 51, after=Cursor(5, "n")),
            _tables.RESULT_FILTER_FIELDS,
        ),
        (
            "evaluations",
            "app",
            ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 51, after=Cursor("n", "n")),
            _tables.EVALUATION_FILTER_FIELDS,
        ),
    ]
    statements = []
    for table, scope, query, fields in shapes:
        query = dataclasses.replace(query, max_bytes=max_bytes)  # noqa: PLW2901 - the same shape
        where = [f"{table}.{scope} = {sql.p}"]
        params: list[object] = [APP]
        condition, values = sql.compile(query.filter, fields, "filter")
        where.append(f"({condition})")
        params += values
        statements.append((sql.page(table, "data", where, params, query), params))
    return statements


def test_sqlite_list_queries_use_indexes(tmp_path: Path) -> None:
    """Filtering, ordering and the page cursor run in SQLite as one index range: no full scan,
    no temporary sort, and a deep page starts at its cursor instead of walking up to it."""
    storage = SqliteStorage(tmp_path / "db.sqlite")
    run(_with(storage, lambda s: asyncio.sleep(0)))
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        for statement, params in _page_statements(_dialect.SQLITE):
            plan = " | ".join(
                row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + statement, params)
            )
            assert "SEARCH" in plan and "USING" in plan and "INDEX" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
            cursor = "name>?" if "evaluations.name >" in statement else ",name)<(?,?)"
            assert cursor in plan, plan  # the cursor bounds the index range
    connection.close()


def test_sqlite_pages_within_a_byte_budget_read_one_index_range(tmp_path: Path) -> None:
    """With ListQuery.max_bytes the page is still one index range from its cursor with no sort
    of the rows it returns; the budget's row count comes from the same range read a second
    time for the stored lengths (its window sorts those small rows, never a blob)."""
    storage = SqliteStorage(tmp_path / "db.sqlite")
    run(_with(storage, lambda s: asyncio.sleep(0)))
    sql = _dialect.SQLITE
    statements = [
        *_page_statements(sql, max_bytes=4_000_000),
        sql.list_operations("projects/p/locations/l", 51, "x", done=None, max_bytes=4_000_000),
    ]
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        for statement, params in statements:
            rows = list(connection.execute("EXPLAIN QUERY PLAN " + statement, params))
            top = [row[3] for row in rows if row[1] == 0]
            searches = [row[3] for row in rows if row[3].startswith("SEARCH")]
            assert not any("TEMP B-TREE" in step for step in top), top
            assert len(searches) == 2, searches
            assert all(
                "INDEX" in step and ("name>?" in step or ",name)<(?,?)" in step)
                for step in searches
            ), searches
    connection.close()


def test_postgresql_pages_within_a_byte_budget_read_one_index_range(postgres_url: str) -> None:
    """The same statements on PostgreSQL: two index scans bounded by the cursor (the page, and
    the stored lengths in its InitPlan), no Sort node anywhere."""
    run(_with(PostgresStorage(postgres_url), lambda s: asyncio.sleep(0)))
    sql = _dialect.POSTGRESQL
    statements = [
        *_page_statements(sql, max_bytes=4_000_000),
        sql.list_operations("projects/p/locations/l", 51, "x", done=None, max_bytes=4_000_000),
    ]
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")
        for statement, params in statements:
            rows = connection.execute(("EXPLAIN " + statement).encode(), params).fetchall()
            plan = " | ".join(str(row[0]) for row in rows)
            assert plan.count("Index Scan") == 2, plan
            assert "Sort" not in plan, plan
            assert plan.count("Index Cond") == 2, plan


def test_postgresql_refuses_a_newer_schema(postgres_url: str) -> None:
    run(_with(PostgresStorage(postgres_url), lambda s: asyncio.sleep(0)))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(RuntimeError, match="999"):
        run(_with(PostgresStorage(postgres_url), lambda s: asyncio.sleep(0)))


def test_postgresql_list_queries_use_indexes_without_sorting(postgres_url: str) -> None:
    """The same page statements as on SQLite: an index scan in the page's order whose index
    condition includes the cursor, no Sort node (sequential scans are disabled so the tiny test
    tables do not hide the plan)."""
    run(_with(PostgresStorage(postgres_url), lambda s: asyncio.sleep(0)))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")
        for statement, params in _page_statements(_dialect.POSTGRESQL):
            rows = connection.execute(("EXPLAIN " + statement).encode(), params).fetchall()
            plan = " | ".join(str(row[0]) for row in rows)
            assert "Index Scan" in plan, plan
            assert "Sort" not in plan, plan
            assert "Index Cond" in plan and "name" in plan.split("Index Cond", 1)[1], plan
