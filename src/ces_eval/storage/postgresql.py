"""PostgreSQL storage: one database shared by any number of ``ces-eval serve`` replicas.

Nothing about correctness lives in process memory. Every conditional write is one transaction
that the database serializes: etag checks are ``UPDATE … WHERE etag = …`` (or run under the
evaluation's row lock), display-name uniqueness is a unique index, a result write locks its
evaluation's row (``SELECT … FOR UPDATE``) so derived metrics are recomputed from every committed
result, and operation leases are read against the database's clock. Migrations run under an
advisory lock, so replicas starting together apply each exactly once. Durability is the server's
commit: with PostgreSQL's default ``synchronous_commit=on`` a write returns only once its WAL
record is flushed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from google.longrunning import operations_pb2
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ces_eval import filtering
from ces_eval.core.derived import Tally, add_tally, contribution
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import _tables
from ces_eval.storage._migrations import pending
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    EtagMismatch,
    ListQuery,
    Missing,
    ResetCounts,
    Unavailable,
)

if TYPE_CHECKING:
    from google.rpc import status_pb2


__all__ = ["PostgresStorage"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
_Connection = psycopg.AsyncConnection[TupleRow]
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_SQL = _tables.Sql(filtering.POSTGRESQL, json_param="%s::jsonb")
# Any constant shared by every replica: the advisory lock that serializes migrations.
_MIGRATION_LOCK = 0x6365735F6576616C  # "ces_eval"
# Transactions the database aborted to keep concurrent writers serializable are retried.
_RETRIES = 5
_POOL_OPTIONS = {"pool_min_size": 1, "pool_max_size": 16}
_CONNECTION_WAIT = 10.0
_INSERT_EVALUATION = _SQL.insert(
    "evaluations",
    _tables.EVALUATION_COLUMNS,
    {"derived": "''::bytea", "metrics_tally": "'{}'"},
).encode()
_UPDATE_EVALUATION = _SQL.update(
    "evaluations", _tables.EVALUATION_COLUMNS[2:], "name = %s AND etag = %s"
).encode()
_RUNS = _SQL.runs_of()
_LAST_COMPLETED = _SQL.last_completed_of()
_COMPLETED = int(_Result.ExecutionState.COMPLETED)
_INSERT_RESULT = _SQL.insert("evaluation_results", _tables.RESULT_COLUMNS, {}).encode()
_UPDATE_RESULT = _SQL.update("evaluation_results", _tables.RESULT_COLUMNS[3:], "name = %s").encode()


def _split_url(url: str) -> tuple[str, dict[str, int]]:
    """The libpq URL without our own ``pool_min_size``/``pool_max_size`` query parameters."""
    parts = urlsplit(url)
    ours = dict(_POOL_OPTIONS)
    kept = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            ours[key] = int(value)
        else:
            kept.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(kept))), ours


class PostgresStorage:
    """The :class:`~ces_eval.storage.base.Storage` contract over one PostgreSQL database.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/database?sslmode=…``) that
    may also carry ``pool_min_size`` and ``pool_max_size`` (connections per process, default
    1 and 16).
    """

    def __init__(self, url: str) -> None:
        conninfo, options = _split_url(url)
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=options["pool_min_size"],
            max_size=options["pool_max_size"],
            kwargs={"autocommit": True},
            open=False,
            name="ces-eval",
            # How long a call waits for a connection before it answers UNAVAILABLE.
            timeout=_CONNECTION_WAIT,
            reconnect_timeout=_CONNECTION_WAIT,
        )
        self._secret = b""

    # -- plumbing ----------------------------------------------------------------------------

    async def _read(self, work: Callable[[_Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; once more on a fresh one if the first was
        broken (pooled connections die with a database restart or failover)."""
        for attempt in range(2):
            try:
                async with self._pool.connection() as connection:
                    try:
                        return await work(connection)
                    except psycopg.OperationalError:
                        if attempt == 0 and connection.broken:
                            continue
                        raise
            except (psycopg.OperationalError, PoolTimeout) as error:
                raise Unavailable(str(error)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, work: Callable[[_Connection], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction, again if the database aborted it to resolve a
        deadlock or a serialization conflict (nothing of it was committed)."""
        for attempt in range(_RETRIES):
            try:
                async with self._pool.connection() as connection, connection.transaction():
                    return await work(connection)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                if attempt == _RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * 2**attempt)
            except (psycopg.OperationalError, PoolTimeout) as error:
                raise Unavailable(str(error)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def open(self) -> None:
        try:
            await self._pool.open(wait=True, timeout=30)
        except PoolTimeout as error:
            raise Unavailable(f"cannot connect to PostgreSQL: {error}") from error

        async def migrate(connection: _Connection) -> bytes:
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            cursor = await connection.execute("SELECT version FROM schema_migrations")
            applied = {int(row[0]) for row in await cursor.fetchall()}
            for migration in pending("postgresql", applied, "the database"):
                for statement in migration.statements():
                    await connection.execute(statement.encode())
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                _log.info("applied migration %s", migration.name)
            await connection.execute(
                "INSERT INTO meta (key, value) VALUES ('page_token_secret', %s) "
                "ON CONFLICT (key) DO NOTHING",
                (os.urandom(32),),
            )
            cursor = await connection.execute(
                "SELECT value FROM meta WHERE key = 'page_token_secret'"
            )
            row = await cursor.fetchone()
            if row is None:
                raise RuntimeError("meta.page_token_secret vanished during start-up")
            return bytes(row[0])

        try:
            self._secret = await self._write(migrate)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self._pool.close()

    async def secret(self) -> bytes:
        return self._secret

    @property
    def shared(self) -> bool:
        return True

    async def ping(self) -> None:
        async def work(connection: _Connection) -> None:
            await connection.execute("SELECT 1")

        await self._read(work)

    @staticmethod
    async def _one(
        connection: _Connection, statement: str, params: Sequence[object]
    ) -> TupleRow | None:
        cursor = await connection.execute(statement.encode(), params)
        return await cursor.fetchone()

    @staticmethod
    async def _all(
        connection: _Connection, statement: str, params: Sequence[object]
    ) -> list[TupleRow]:
        cursor = await connection.execute(statement.encode(), params)
        return await cursor.fetchall()

    async def _conflict(
        self, error: pg_errors.UniqueViolation, name: str, display_name: str
    ) -> Conflict:
        """Which uniqueness rule ``error`` broke (read after its transaction rolled back)."""
        if "display_name" not in (error.diag.constraint_name or ""):
            return Conflict("name", name)
        statement, params = _SQL.display_name_owner(name, display_name)

        async def work(connection: _Connection) -> TupleRow | None:
            return await self._one(connection, statement, params)

        row = await self._read(work)
        return Conflict("display_name", str(row[0]) if row else "")

    # -- evaluations -----------------------------------------------------------------------------

    async def insert_evaluation(self, evaluation: _Evaluation) -> None:
        row = _tables.evaluation_row(evaluation)

        async def work(connection: _Connection) -> None:
            await connection.execute(_INSERT_EVALUATION, row)

        try:
            await self._write(work)
        except pg_errors.UniqueViolation as error:
            raise await self._conflict(error, evaluation.name, evaluation.display_name) from error

    async def get_evaluation(self, name: str) -> _Evaluation | None:
        async def work(connection: _Connection) -> TupleRow | None:
            return await self._one(
                connection, "SELECT data, derived, etag FROM evaluations WHERE name = %s", (name,)
            )

        row = await self._read(work)
        return None if row is None else _tables.evaluation_from_row(*row)

    async def list_evaluations(self, query: ListQuery) -> list[tuple[_Evaluation, Cursor]]:
        statement, params = _SQL.list_evaluations(query)

        async def work(connection: _Connection) -> list[TupleRow]:
            return await self._all(connection, statement, params)

        return [
            (_tables.evaluation_from_row(data, derived, etag), Cursor(value, name))
            for data, derived, etag, name, value in await self._read(work)
        ]

    async def replace_evaluation(self, evaluation: _Evaluation, expected_etag: str) -> None:
        row = _tables.evaluation_row(evaluation)

        async def work(connection: _Connection) -> None:
            cursor = await connection.execute(
                _UPDATE_EVALUATION, (*row[2:], evaluation.name, expected_etag)
            )
            if cursor.rowcount == 1:
                return
            if await self._one(
                connection, "SELECT 1 FROM evaluations WHERE name = %s", (evaluation.name,)
            ):
                raise EtagMismatch(evaluation.name)
            raise Missing(evaluation.name)

        try:
            await self._write(work)
        except pg_errors.UniqueViolation as error:
            raise await self._conflict(error, evaluation.name, evaluation.display_name) from error

    async def delete_evaluation(self, name: str, expected_etag: str | None) -> None:
        async def work(connection: _Connection) -> None:
            row = await self._one(
                connection, "SELECT etag FROM evaluations WHERE name = %s FOR UPDATE", (name,)
            )
            if row is None:
                raise Missing(name)
            if expected_etag and row[0] != expected_etag:
                raise EtagMismatch(name)
            await connection.execute("DELETE FROM evaluations WHERE name = %s", (name,))

        await self._write(work)

    # -- results -------------------------------------------------------------------------------

    async def recent_results(
        self, evaluations: Sequence[str], count: int, max_bytes: int | None = None
    ) -> dict[str, list[_Result]]:
        if not evaluations:
            return {}
        newest = (
            "SELECT e.name AS evaluation, e.n, r.name, r.create_time, length(r.data) AS size "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS e(name, n) "
            "CROSS JOIN LATERAL (SELECT name, create_time, data FROM evaluation_results "
            "WHERE evaluation = e.name ORDER BY create_time DESC, name DESC LIMIT %s) r"
        )
        order = "n, create_time DESC, name DESC"
        # Within max_bytes: as Sql.within_bytes, from the stored lengths (no blob is read
        # past the budget's last result).
        statement = (
            "SELECT page.evaluation, r.data FROM ("  # noqa: S608 - fixed clauses
            "SELECT evaluation, n, name, create_time, sum(size) OVER "
            f"(ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before "
            f"FROM ({newest}) AS newest) AS page "
            "JOIN evaluation_results r ON r.name = page.name "
            "WHERE page.before IS NULL OR %s::bigint IS NULL OR page.before <= %s::bigint "
            "ORDER BY page.n, page.create_time DESC, page.name DESC"
        )

        async def work(connection: _Connection) -> list[TupleRow]:
            return await self._all(
                connection, statement, (list(evaluations), count, max_bytes, max_bytes)
            )

        found: dict[str, list[_Result]] = {name: [] for name in evaluations}
        for name, data in await self._read(work):
            found[str(name)].append(_Result.FromString(data))
        return found

    async def _lock_evaluation(self, connection: _Connection, evaluation: str) -> str:
        """Lock the evaluation's row for this transaction (result writes of one evaluation run
        one at a time) and return its etag; Missing if there is none."""
        row = await self._one(
            connection, "SELECT etag FROM evaluations WHERE name = %s FOR UPDATE", (evaluation,)
        )
        if row is None:
            raise Missing(evaluation)
        return str(row[0])

    async def _refresh_derived(
        self,
        connection: _Connection,
        evaluation: str,
        etag: str,
        change: Tally,
        max_bytes: int | None = None,
    ) -> None:
        """Apply a result write's ``change`` to the evaluation's metrics tally and store its
        derived fields with ``etag`` (the caller holds the evaluation's row lock). TooLarge
        (see Storage.insert_result) before anything is stored."""
        row = await self._one(
            connection,
            "SELECT metrics_tally, length(data), length(derived), etag FROM evaluations "
            "WHERE name = %s",
            (evaluation,),
        )
        if row is None:
            raise Missing(evaluation)
        stored = row[0]
        if stored is None:  # from before incremental upkeep: sum every result once
            rows = await self._all(
                connection,
                "SELECT data FROM evaluation_results WHERE evaluation = %s",
                (evaluation,),
            )
            tally = _tables.tally_of(data for (data,) in rows)
        else:
            tally = _tables.updated_tally(stored, change, list)
        runs = [str(run) for (run,) in await self._all(connection, _RUNS, (evaluation,))]
        last = await self._one(connection, _LAST_COMPLETED, (evaluation, _COMPLETED))
        derived = _tables.derived_blob(tally, runs, last[0] if last else None)
        _tables.refuse_growth(
            evaluation, (int(row[1]), int(row[2]), str(row[3])), derived, etag, max_bytes
        )
        await connection.execute(
            "UPDATE evaluations SET derived = %s, etag = %s, metrics_tally = %s WHERE name = %s",
            (derived, etag, _tables.tally_json(tally), evaluation),
        )

    async def _insert_result(self, connection: _Connection, result: _Result) -> str:
        row = _tables.result_row(result)
        evaluation = str(row[1])
        await connection.execute(_INSERT_RESULT, row)
        return evaluation

    async def insert_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        evaluation = result.name.rsplit("/results/", 1)[0]

        async def work(connection: _Connection) -> None:
            await self._lock_evaluation(connection, evaluation)
            await self._insert_result(connection, result)
            change = _tables.tally_change(result, None)
            await self._refresh_derived(
                connection, evaluation, parent_etag, change, max_evaluation_bytes
            )

        try:
            await self._write(work)
        except pg_errors.UniqueViolation as error:
            raise await self._conflict(error, result.name, result.display_name) from error

    async def replace_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        row = _tables.result_row(result)
        evaluation = str(row[1])

        async def work(connection: _Connection) -> None:
            await self._lock_evaluation(connection, evaluation)
            before = await self._one(
                connection, "SELECT data FROM evaluation_results WHERE name = %s", (result.name,)
            )
            if before is None:
                raise Missing(result.name)
            await connection.execute(_UPDATE_RESULT, (*row[3:], result.name))
            change = _tables.tally_change(result, _Result.FromString(before[0]))
            await self._refresh_derived(
                connection, evaluation, parent_etag, change, max_evaluation_bytes
            )

        try:
            await self._write(work)
        except Missing as missing:
            raise Missing(result.name) from missing

    async def import_bundle(
        self,
        evaluations: Sequence[_Evaluation],
        results: Sequence[_Result],
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        etags = {e.name: e.etag for e in evaluations}
        # Evaluations that receive results, in order, each once; locked in name order so that
        # concurrent imports never wait on each other in a cycle.
        touched = list(dict.fromkeys(r.name.rsplit("/results/", 1)[0] for r in results))
        current = {"name": "", "display_name": ""}

        async def work(connection: _Connection) -> None:
            for evaluation in evaluations:
                current.update(name=evaluation.name, display_name=evaluation.display_name)
                await connection.execute(_INSERT_EVALUATION, _tables.evaluation_row(evaluation))
            stored = {
                name: await self._lock_evaluation(connection, name) for name in sorted(touched)
            }
            changes: dict[str, Tally] = {name: {} for name in touched}
            for result in results:
                current.update(name=result.name, display_name=result.display_name)
                name = await self._insert_result(connection, result)
                add_tally(changes[name], contribution(result))
            for name in touched:
                await self._refresh_derived(
                    connection,
                    name,
                    etags.get(name, stored[name]),
                    changes[name],
                    max_evaluation_bytes,
                )

        try:
            await self._write(work)
        except pg_errors.UniqueViolation as error:
            raise await self._conflict(error, current["name"], current["display_name"]) from error

    async def get_result(self, name: str) -> _Result | None:
        async def work(connection: _Connection) -> TupleRow | None:
            return await self._one(
                connection, "SELECT data FROM evaluation_results WHERE name = %s", (name,)
            )

        row = await self._read(work)
        return None if row is None else _Result.FromString(row[0])

    async def list_results(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        statement, params = _SQL.list_results(query)

        async def work(connection: _Connection) -> list[TupleRow]:
            return await self._all(connection, statement, params)

        return [(bytes(data), Cursor(value, name)) for data, name, value in await self._read(work)]

    async def delete_result(self, name: str, parent_etag: str) -> None:
        evaluation = name.rsplit("/results/", 1)[0]

        async def work(connection: _Connection) -> None:
            try:
                await self._lock_evaluation(connection, evaluation)
            except Missing as missing:
                raise Missing(name) from missing
            gone = await self._one(
                connection, "DELETE FROM evaluation_results WHERE name = %s RETURNING data", (name,)
            )
            if gone is None:
                raise Missing(name)
            change = _tables.tally_change(None, _Result.FromString(gone[0]))
            await self._refresh_derived(connection, evaluation, parent_etag, change)

        await self._write(work)

    # -- operations ----------------------------------------------------------------------------

    async def insert_operation(
        self, operation: operations_pb2.Operation, method: str, owner: str, lease: float
    ) -> None:
        parent = operation.name.rsplit("/operations/", 1)[0]
        now = _tables.now_micros()

        async def work(connection: _Connection) -> None:
            await connection.execute(
                "INSERT INTO operations (name, parent, method, done, create_time, update_time, "
                "owner, lease_until, data) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s), %s)",
                (
                    operation.name,
                    parent,
                    method,
                    operation.done,
                    now,
                    now,
                    owner,
                    lease,
                    operation.SerializeToString(deterministic=True),
                ),
            )

        await self._write(work)

    async def get_operation(self, name: str) -> operations_pb2.Operation | None:
        async def work(connection: _Connection) -> TupleRow | None:
            return await self._one(
                connection, "SELECT data FROM operations WHERE name = %s", (name,)
            )

        row = await self._read(work)
        return None if row is None else operations_pb2.Operation.FromString(row[0])

    async def list_operations(
        self,
        parent: str,
        limit: int,
        after: str | None,
        done: bool | None,
        max_bytes: int | None = None,
    ) -> list[operations_pb2.Operation]:
        statement, params = _SQL.list_operations(parent, limit, after, done, max_bytes)

        async def work(connection: _Connection) -> list[TupleRow]:
            return await self._all(connection, statement, params)

        return [operations_pb2.Operation.FromString(row[0]) for row in await self._read(work)]

    async def _replace_running(self, operation: operations_pb2.Operation) -> bool:
        async def work(connection: _Connection) -> bool:
            cursor = await connection.execute(
                "UPDATE operations SET data = %s, done = %s, update_time = %s "
                "WHERE name = %s AND NOT done",
                (
                    operation.SerializeToString(deterministic=True),
                    operation.done,
                    _tables.now_micros(),
                    operation.name,
                ),
            )
            return cursor.rowcount == 1

        return await self._write(work)

    async def finish_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._replace_running(operation)

    async def update_running_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._replace_running(operation)

    async def request_cancel(self, name: str) -> operations_pb2.Operation | None:
        async def work(connection: _Connection) -> TupleRow | None:
            await connection.execute(
                "UPDATE operations SET cancel_requested = TRUE WHERE name = %s AND NOT done",
                (name,),
            )
            return await self._one(
                connection, "SELECT data FROM operations WHERE name = %s", (name,)
            )

        row = await self._write(work)
        return None if row is None else operations_pb2.Operation.FromString(row[0])

    async def cancel_requested(self, name: str) -> bool:
        async def work(connection: _Connection) -> TupleRow | None:
            return await self._one(
                connection, "SELECT cancel_requested FROM operations WHERE name = %s", (name,)
            )

        row = await self._read(work)
        return bool(row and row[0])

    async def delete_operation(self, name: str) -> bool:
        async def work(connection: _Connection) -> bool:
            cursor = await connection.execute("DELETE FROM operations WHERE name = %s", (name,))
            return cursor.rowcount == 1

        return await self._write(work)

    async def renew_leases(self, owner: str, lease: float) -> list[str]:
        async def work(connection: _Connection) -> list[TupleRow]:
            return await self._all(
                connection,
                "UPDATE operations SET lease_until = now() + make_interval(secs => %s) "
                "WHERE NOT done AND owner = %s RETURNING name, cancel_requested",
                (lease, owner),
            )

        return [str(name) for name, cancel in await self._write(work) if cancel]

    async def _fail(
        self, condition: str, params: Sequence[object], error: status_pb2.Status
    ) -> int:
        """Finish every running operation matching ``condition`` with ``error``; rows another
        process is finishing at the same moment are skipped, not waited for."""

        async def work(connection: _Connection) -> int:
            rows = await self._all(
                connection,
                f"SELECT data FROM operations WHERE NOT done AND {condition} "  # noqa: S608 - fixed conditions
                "FOR UPDATE SKIP LOCKED",
                params,
            )
            for (data,) in rows:
                operation = operations_pb2.Operation.FromString(data)
                operation.done = True
                operation.error.CopyFrom(error)
                await connection.execute(
                    "UPDATE operations SET done = TRUE, data = %s, update_time = %s "
                    "WHERE name = %s",
                    (
                        operation.SerializeToString(deterministic=True),
                        _tables.now_micros(),
                        operation.name,
                    ),
                )
            return len(rows)

        return await self._write(work)

    async def fail_expired(self, error: status_pb2.Status) -> int:
        return await self._fail("lease_until < now()", (), error)

    async def fail_unfinished(self, error: status_pb2.Status, owner: str | None = None) -> int:
        if owner is None:
            return await self._fail("TRUE", (), error)
        return await self._fail("owner = %s", (owner,), error)

    async def reset_project(self, project: str) -> ResetCounts:
        prefix = f"projects/{project}/"
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        async def work(connection: _Connection) -> ResetCounts:
            results = await self._one(
                connection,
                "SELECT count(*) FROM evaluation_results WHERE name LIKE %s ESCAPE '\\'",
                (pattern,),
            )
            evaluations = await connection.execute(
                "DELETE FROM evaluations WHERE name LIKE %s ESCAPE '\\'", (pattern,)
            )
            operations = await connection.execute(
                "DELETE FROM operations WHERE name LIKE %s ESCAPE '\\'", (pattern,)
            )
            return ResetCounts(
                evaluations=evaluations.rowcount,
                evaluation_results=int(results[0]) if results else 0,
                operations=operations.rowcount,
            )

        return await self._write(work)
