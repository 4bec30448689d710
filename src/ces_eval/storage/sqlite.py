"""SQLite storage: one database file in WAL mode, the embedded default.

Durability: ``synchronous=FULL`` in WAL mode, so a write returns only after its commit reached
the disk; a crash (even power loss) never loses an acknowledged write. All writes run on one
dedicated thread and connection (SQLite has one writer at a time anyway); reads run on a small
pool of threads with their own connections and see the last committed state.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from google.longrunning import operations_pb2

from ces_eval import filtering
from ces_eval.generated.google.cloud.ces.v1beta import common_pb2, evaluation_pb2
from ces_eval.storage._migrations import migrations
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    EtagMismatch,
    InvalidFilter,
    ListQuery,
    Missing,
    ResetCounts,
    SortKey,
)

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2
    from google.protobuf.descriptor import EnumDescriptor
    from google.rpc import status_pb2

    from ces_eval.core.derived import Derived

__all__ = ["SqliteStorage"]

T = TypeVar("T")
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_READERS = 4


def micros(timestamp: timestamp_pb2.Timestamp) -> int:
    return int(timestamp.seconds) * 1_000_000 + int(timestamp.nanos) // 1000


def _enum_values(enum: EnumDescriptor) -> dict[str, int]:
    return {value.name: value.number for value in enum.values}


def _specs(
    table: str, specs: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]]
) -> dict[str, filtering.FieldSpec]:
    """Filter fields by proto name and by JSON name, with columns qualified by ``table``."""
    out: dict[str, filtering.FieldSpec] = {}
    for name, (column, kind, values) in specs.items():
        spec = filtering.FieldSpec(column=f"{table}.{column}", kind=kind, enum_values=values)
        out[name] = spec
        head, *rest = name.split("_")
        out[head + "".join(part.title() for part in rest)] = spec
    return out


_K = filtering.FieldKind
EVALUATION_FILTER_FIELDS = _specs(
    "evaluations",
    {
        "name": ("name", _K.STRING, {}),
        "display_name": ("display_name", _K.STRING, {}),
        "description": ("description", _K.STRING, {}),
        "create_time": ("create_time", _K.TIMESTAMP, {}),
        "update_time": ("update_time", _K.TIMESTAMP, {}),
        "created_by": ("created_by", _K.STRING, {}),
        "last_updated_by": ("last_updated_by", _K.STRING, {}),
        "tags": ("tags", _K.STRING_LIST, {}),
        "evaluation_datasets": ("evaluation_datasets", _K.STRING_LIST, {}),
    },
)
_RESULT_SPECS: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]] = {
    "name": ("name", _K.STRING, {}),
    "evaluation": ("evaluation", _K.STRING, {}),
    "display_name": ("display_name", _K.STRING, {}),
    "create_time": ("create_time", _K.TIMESTAMP, {}),
    "evaluation_run": ("evaluation_run", _K.STRING, {}),
    "execution_state": (
        "execution_state",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["ExecutionState"]),
    ),
    "evaluation_status": (
        "evaluation_status",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["Outcome"]),
    ),
    "app_version": ("app_version", _K.STRING, {}),
    "initiated_by": ("initiated_by", _K.STRING, {}),
    "golden_run_method": (
        "golden_run_method",
        _K.ENUM,
        _enum_values(common_pb2.DESCRIPTOR.enum_types_by_name["GoldenRunMethod"]),
    ),
}
RESULT_FILTER_FIELDS = _specs("evaluation_results", _RESULT_SPECS)
# evaluation_run_filter: the same result fields, over the results of the evaluation in the row.
RUN_FILTER_FIELDS = _specs("r", _RESULT_SPECS)

_SORT_COLUMNS = {
    SortKey.NAME: "name",
    SortKey.CREATE_TIME: "create_time",
    SortKey.UPDATE_TIME: "update_time",
}


def _page_sql(table: str, query: ListQuery) -> tuple[str, list[object], str]:
    """ORDER BY and keyset condition: (sort column, name) strictly after the cursor.

    The name breaks ties in the same direction as the sort column, so one index scan in one
    direction serves the page with no sort step, however deep the page is.
    """
    column = f"{table}.{_SORT_COLUMNS[query.order.key]}"
    direction = "DESC" if query.order.descending else "ASC"
    compare = "<" if query.order.descending else ">"
    params: list[object] = []
    condition = ""
    after = query.after
    if query.order.key is SortKey.NAME:
        order = f"ORDER BY {table}.name {direction}"
        if after is not None:
            condition, params = f"{table}.name {compare} ?", [after.name]
    else:
        order = f"ORDER BY {column} {direction}, {table}.name {direction}"
        if after is not None:
            condition = f"({column} {compare} ? OR ({column} = ? AND {table}.name {compare} ?))"
            params = [after.value, after.value, after.name]
    return condition, params, order


def _page_statement(
    table: str, columns: str, where: list[str], params: list[object], query: ListQuery
) -> str:
    """``SELECT <columns>, name, <sort column>`` of one keyset page; appends the page's
    parameters (cursor, limit) to ``params``."""
    condition, cursor_params, order = _page_sql(table, query)
    if condition:
        where.append(condition)
        params += cursor_params
    params.append(query.limit)
    sort = _SORT_COLUMNS[query.order.key]
    return (
        f"SELECT {columns}, name, {sort} FROM {table} "  # noqa: S608 - fixed identifiers, compiled clauses; values are parameters
        f"WHERE {' AND '.join(where)} {order} LIMIT ?"
    )


def _compile(
    expr: filtering.Expr | None, fields: dict[str, filtering.FieldSpec], which: str
) -> tuple[str, list[object]]:
    try:
        return filtering.compile_filter(expr, fields, filtering.SQLITE)
    except filtering.FilterError as error:
        raise InvalidFilter(which, error) from error


def _display_name_owner(name: str, display_name: str) -> tuple[str, tuple[str, str]]:
    """SQL finding the resource that holds ``display_name`` in the scope of ``name``: the app
    for evaluations, the evaluation for results."""
    if "/results/" in name:
        return (
            "SELECT name FROM evaluation_results WHERE evaluation = ? AND display_name = ?",
            (name.rsplit("/results/", 1)[0], display_name),
        )
    return (
        "SELECT name FROM evaluations WHERE app = ? AND display_name = ?",
        (name.rsplit("/evaluations/", 1)[0], display_name),
    )


class SqliteStorage:
    """The :class:`~ces_eval.storage.base.Storage` contract over one SQLite file."""

    def __init__(self, path: str | Path, derive: Callable[[Iterable[_Result]], Derived]) -> None:
        self._path = str(path)
        self._derive = derive
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._readers = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._secret = b""

    # -- plumbing ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self._path, isolation_level=None, check_same_thread=False, timeout=30
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._connections.append(connection)
        return connection

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
        return connection

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, lambda: work(self._connection()))

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            connection = self._connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, run)

    async def open(self) -> None:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)

        def migrate(connection: sqlite3.Connection) -> bytes:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
            )
            applied = {
                row[0] for row in connection.execute("SELECT version FROM schema_migrations")
            }
            known = migrations("sqlite")
            unknown = applied - {m.version for m in known}
            if unknown:
                raise RuntimeError(
                    f"{self._path} has schema versions {sorted(unknown)} that this ces-eval does "
                    "not know; upgrade ces-eval"
                )
            for migration in known:
                if migration.version in applied:
                    continue
                for statement in migration.statements():
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, strftime('%s','now'))",
                    (migration.version, migration.name),
                )
            connection.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('page_token_secret', ?)",
                (os.urandom(32),),
            )
            row = connection.execute(
                "SELECT value FROM meta WHERE key = 'page_token_secret'"
            ).fetchone()
            return bytes(row[0])

        self._secret = await self._write(migrate)

    async def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()

    async def secret(self) -> bytes:
        return self._secret

    # -- evaluations -----------------------------------------------------------------------------

    @staticmethod
    def _evaluation_row(evaluation: _Evaluation) -> tuple[object, ...]:
        base = _Evaluation()
        base.CopyFrom(evaluation)
        for derived in (
            "aggregated_metrics",
            "evaluation_runs",
            "last_completed_result",
            "last_ten_results",
            "etag",
        ):
            base.ClearField(derived)
        app = evaluation.name.rsplit("/evaluations/", 1)[0]
        return (
            evaluation.name,
            app,
            evaluation.display_name,
            evaluation.description,
            micros(evaluation.create_time),
            micros(evaluation.update_time),
            evaluation.created_by,
            evaluation.last_updated_by,
            json.dumps(list(evaluation.tags)),
            json.dumps(list(evaluation.evaluation_datasets)),
            evaluation.etag,
            base.SerializeToString(deterministic=True),
        )

    @staticmethod
    def _evaluation(data: bytes, derived: bytes, etag: str) -> _Evaluation:
        # Serialized protobuf messages merge when concatenated.
        return _Evaluation.FromString(data + derived + _Evaluation(etag=etag).SerializeToString())

    @staticmethod
    def _conflict(
        connection: sqlite3.Connection,
        error: sqlite3.IntegrityError,
        name: str,
        display_name_owner: tuple[str, tuple[str, str]],
    ) -> Conflict:
        """Which uniqueness rule ``error`` broke: the name, or the display name within its
        scope (``display_name_owner`` is the SQL that finds the resource holding it)."""
        if "display_name" not in str(error):
            return Conflict("name", name)
        row = connection.execute(display_name_owner[0], display_name_owner[1]).fetchone()
        return Conflict("display_name", row[0] if row else "")

    def _insert_evaluation(self, connection: sqlite3.Connection, evaluation: _Evaluation) -> None:
        """Insert one evaluation (no derived fields yet) inside the caller's transaction."""
        try:
            connection.execute(
                "INSERT INTO evaluations (name, app, display_name, description, create_time, "
                "update_time, created_by, last_updated_by, tags, evaluation_datasets, etag, "
                "data, derived) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, x'')",
                self._evaluation_row(evaluation),
            )
        except sqlite3.IntegrityError as error:
            raise self._conflict(
                connection,
                error,
                evaluation.name,
                _display_name_owner(evaluation.name, evaluation.display_name),
            ) from error

    async def insert_evaluation(self, evaluation: _Evaluation) -> None:
        await self._write(lambda connection: self._insert_evaluation(connection, evaluation))

    async def get_evaluation(self, name: str) -> _Evaluation | None:
        def work(connection: sqlite3.Connection) -> _Evaluation | None:
            row = connection.execute(
                "SELECT data, derived, etag FROM evaluations WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else self._evaluation(row[0], row[1], row[2])

        return await self._read(work)

    async def list_evaluations(self, query: ListQuery) -> list[tuple[_Evaluation, Cursor]]:
        where = ["evaluations.app = ?"]
        params: list[object] = [query.parent]
        sql, values = _compile(query.filter, EVALUATION_FILTER_FIELDS, "filter")
        where.append(f"({sql})")
        params += values
        if query.run_filter is not None:
            sql, values = _compile(query.run_filter, RUN_FILTER_FIELDS, "run_filter")
            where.append(
                "EXISTS (SELECT 1 FROM evaluation_results r "  # noqa: S608 - compiled clause, values are parameters
                f"WHERE r.evaluation = evaluations.name AND ({sql}))"
            )
            params += values
        statement = _page_statement("evaluations", "data, derived, etag", where, params, query)

        def work(connection: sqlite3.Connection) -> list[tuple[_Evaluation, Cursor]]:
            return [
                (self._evaluation(data, derived, etag), Cursor(value, name))
                for data, derived, etag, name, value in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def replace_evaluation(self, evaluation: _Evaluation, expected_etag: str) -> None:
        row = self._evaluation_row(evaluation)

        def work(connection: sqlite3.Connection) -> None:
            current = connection.execute(
                "SELECT etag FROM evaluations WHERE name = ?", (evaluation.name,)
            ).fetchone()
            if current is None:
                raise Missing(evaluation.name)
            if current[0] != expected_etag:
                raise EtagMismatch(evaluation.name)
            try:
                connection.execute(
                    "UPDATE evaluations SET display_name = ?, description = ?, create_time = ?, "
                    "update_time = ?, created_by = ?, last_updated_by = ?, tags = ?, "
                    "evaluation_datasets = ?, etag = ?, data = ? WHERE name = ?",
                    (*row[2:], evaluation.name),
                )
            except sqlite3.IntegrityError as error:
                raise self._conflict(
                    connection,
                    error,
                    evaluation.name,
                    _display_name_owner(evaluation.name, evaluation.display_name),
                ) from error

        await self._write(work)

    async def delete_evaluation(self, name: str, expected_etag: str | None) -> None:
        def work(connection: sqlite3.Connection) -> None:
            current = connection.execute(
                "SELECT etag FROM evaluations WHERE name = ?", (name,)
            ).fetchone()
            if current is None:
                raise Missing(name)
            if expected_etag and current[0] != expected_etag:
                raise EtagMismatch(name)
            connection.execute("DELETE FROM evaluations WHERE name = ?", (name,))

        await self._write(work)

    # -- results -------------------------------------------------------------------------------

    async def recent_results(
        self, evaluations: Sequence[str], count: int
    ) -> dict[str, list[_Result]]:
        def work(connection: sqlite3.Connection) -> dict[str, list[_Result]]:
            return {
                name: [
                    _Result.FromString(row[0])
                    for row in connection.execute(
                        "SELECT data FROM evaluation_results WHERE evaluation = ? "
                        "ORDER BY create_time DESC, name DESC LIMIT ?",
                        (name, count),
                    )
                ]
                for name in evaluations
            }

        return await self._read(work)

    def _refresh_derived(self, connection: sqlite3.Connection, evaluation: str, etag: str) -> None:
        results = [
            _Result.FromString(row[0])
            for row in connection.execute(
                "SELECT data FROM evaluation_results WHERE evaluation = ?", (evaluation,)
            )
        ]
        derived = self._derive(results)
        message = _Evaluation(
            aggregated_metrics=derived.aggregated_metrics,
            evaluation_runs=derived.evaluation_runs,
        )
        if derived.last_completed_result is not None:
            message.last_completed_result.CopyFrom(derived.last_completed_result)
        connection.execute(
            "UPDATE evaluations SET derived = ?, etag = ? WHERE name = ?",
            (message.SerializeToString(deterministic=True), etag, evaluation),
        )

    @staticmethod
    def _result_row(result: _Result) -> tuple[object, ...]:
        evaluation = result.name.rsplit("/results/", 1)[0]
        return (
            result.name,
            evaluation,
            evaluation.rsplit("/evaluations/", 1)[0],
            result.display_name,
            micros(result.create_time),
            time.time_ns() // 1000,
            result.evaluation_run,
            int(result.execution_state),
            int(result.evaluation_status),
            result.app_version,
            result.initiated_by,
            int(result.golden_run_method),
            result.SerializeToString(deterministic=True),
        )

    def _insert_result(self, connection: sqlite3.Connection, result: _Result) -> str:
        row = self._result_row(result)
        evaluation = str(row[1])
        if (
            connection.execute("SELECT 1 FROM evaluations WHERE name = ?", (evaluation,)).fetchone()
            is None
        ):
            raise Missing(evaluation)
        try:
            connection.execute(
                "INSERT INTO evaluation_results (name, evaluation, app, display_name, "
                "create_time, update_time, evaluation_run, execution_state, evaluation_status, "
                "app_version, initiated_by, golden_run_method, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        except sqlite3.IntegrityError as error:
            raise self._conflict(
                connection,
                error,
                result.name,
                _display_name_owner(result.name, result.display_name),
            ) from error
        return evaluation

    async def insert_result(self, result: _Result, parent_etag: str) -> None:
        def work(connection: sqlite3.Connection) -> None:
            evaluation = self._insert_result(connection, result)
            self._refresh_derived(connection, evaluation, parent_etag)

        await self._write(work)

    async def replace_result(self, result: _Result, parent_etag: str) -> None:
        row = self._result_row(result)

        def work(connection: sqlite3.Connection) -> None:
            cursor = connection.execute(
                "UPDATE evaluation_results SET display_name = ?, update_time = ?, "
                "evaluation_run = ?, execution_state = ?, evaluation_status = ?, app_version = ?, "
                "initiated_by = ?, golden_run_method = ?, data = ? WHERE name = ?",
                (row[3], *row[5:], result.name),
            )
            if cursor.rowcount != 1:
                raise Missing(result.name)
            self._refresh_derived(connection, str(row[1]), parent_etag)

        await self._write(work)

    async def import_bundle(
        self, evaluations: Sequence[_Evaluation], results: Sequence[_Result]
    ) -> None:
        def work(connection: sqlite3.Connection) -> None:
            for evaluation in evaluations:
                self._insert_evaluation(connection, evaluation)
            # Evaluations that received results, in order, each once.
            touched = dict.fromkeys(self._insert_result(connection, r) for r in results)
            etags = {e.name: e.etag for e in evaluations}
            for evaluation_name in touched:
                current = connection.execute(
                    "SELECT etag FROM evaluations WHERE name = ?", (evaluation_name,)
                ).fetchone()[0]
                self._refresh_derived(
                    connection, evaluation_name, etags.get(evaluation_name, current)
                )

        await self._write(work)

    async def get_result(self, name: str) -> _Result | None:
        def work(connection: sqlite3.Connection) -> _Result | None:
            row = connection.execute(
                "SELECT data FROM evaluation_results WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else _Result.FromString(row[0])

        return await self._read(work)

    async def list_results(self, query: ListQuery) -> list[tuple[_Result, Cursor]]:
        scope = "app" if query.across_evaluations else "evaluation"
        where = [f"evaluation_results.{scope} = ?"]
        params: list[object] = [query.parent]
        sql, values = _compile(query.filter, RESULT_FILTER_FIELDS, "filter")
        where.append(f"({sql})")
        params += values
        statement = _page_statement("evaluation_results", "data", where, params, query)

        def work(connection: sqlite3.Connection) -> list[tuple[_Result, Cursor]]:
            return [
                (_Result.FromString(data), Cursor(value, name))
                for data, name, value in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def delete_result(self, name: str, parent_etag: str) -> None:
        def work(connection: sqlite3.Connection) -> None:
            row = connection.execute(
                "SELECT evaluation FROM evaluation_results WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise Missing(name)
            connection.execute("DELETE FROM evaluation_results WHERE name = ?", (name,))
            self._refresh_derived(connection, row[0], parent_etag)

        await self._write(work)

    # -- operations ----------------------------------------------------------------------------

    async def insert_operation(self, operation: operations_pb2.Operation, method: str) -> None:
        parent = operation.name.rsplit("/operations/", 1)[0]
        now = time.time_ns() // 1000
        data = operation.SerializeToString(deterministic=True)

        def work(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO operations (name, parent, method, done, create_time, update_time, "
                "data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (operation.name, parent, method, int(operation.done), now, now, data),
            )

        await self._write(work)

    async def get_operation(self, name: str) -> operations_pb2.Operation | None:
        def work(connection: sqlite3.Connection) -> operations_pb2.Operation | None:
            row = connection.execute(
                "SELECT data FROM operations WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else operations_pb2.Operation.FromString(row[0])

        return await self._read(work)

    async def list_operations(
        self, parent: str, limit: int, after: str | None, done: bool | None
    ) -> list[operations_pb2.Operation]:
        where = ["parent = ?"]
        params: list[object] = [parent]
        if after is not None:
            where.append("name > ?")
            params.append(after)
        if done is not None:
            where.append("done = ?")
            params.append(int(done))
        params.append(limit)
        statement = f"SELECT data FROM operations WHERE {' AND '.join(where)} ORDER BY name LIMIT ?"  # noqa: S608 - fixed clauses

        def work(connection: sqlite3.Connection) -> list[operations_pb2.Operation]:
            return [
                operations_pb2.Operation.FromString(row[0])
                for row in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def _replace_running(self, operation: operations_pb2.Operation) -> bool:
        data = operation.SerializeToString(deterministic=True)
        now = time.time_ns() // 1000

        def work(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE operations SET data = ?, done = ?, update_time = ? "
                "WHERE name = ? AND done = 0",
                (data, int(operation.done), now, operation.name),
            )
            return cursor.rowcount == 1

        return await self._write(work)

    async def finish_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._replace_running(operation)

    async def update_running_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._replace_running(operation)

    async def request_cancel(self, name: str) -> operations_pb2.Operation | None:
        def work(connection: sqlite3.Connection) -> operations_pb2.Operation | None:
            connection.execute(
                "UPDATE operations SET cancel_requested = 1 WHERE name = ? AND done = 0", (name,)
            )
            row = connection.execute(
                "SELECT data FROM operations WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else operations_pb2.Operation.FromString(row[0])

        return await self._write(work)

    async def cancel_requested(self, name: str) -> bool:
        def work(connection: sqlite3.Connection) -> bool:
            row = connection.execute(
                "SELECT cancel_requested FROM operations WHERE name = ?", (name,)
            ).fetchone()
            return bool(row and row[0])

        return await self._read(work)

    async def delete_operation(self, name: str) -> bool:
        def work(connection: sqlite3.Connection) -> bool:
            return (
                connection.execute("DELETE FROM operations WHERE name = ?", (name,)).rowcount == 1
            )

        return await self._write(work)

    async def fail_unfinished(self, error: status_pb2.Status) -> int:
        def work(connection: sqlite3.Connection) -> int:
            rows = connection.execute("SELECT data FROM operations WHERE done = 0").fetchall()
            for (data,) in rows:
                operation = operations_pb2.Operation.FromString(data)
                operation.done = True
                operation.error.CopyFrom(error)
                connection.execute(
                    "UPDATE operations SET done = 1, data = ? WHERE name = ?",
                    (operation.SerializeToString(deterministic=True), operation.name),
                )
            return len(rows)

        return await self._write(work)

    async def reset_project(self, project: str) -> ResetCounts:
        prefix = f"projects/{project}/"

        def work(connection: sqlite3.Connection) -> ResetCounts:
            pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            results = connection.execute(
                "SELECT COUNT(*) FROM evaluation_results WHERE name LIKE ? ESCAPE '\\'", (pattern,)
            ).fetchone()[0]
            evaluations = connection.execute(
                "DELETE FROM evaluations WHERE name LIKE ? ESCAPE '\\'", (pattern,)
            ).rowcount
            operations = connection.execute(
                "DELETE FROM operations WHERE name LIKE ? ESCAPE '\\'", (pattern,)
            ).rowcount
            return ResetCounts(
                evaluations=evaluations, evaluation_results=int(results), operations=operations
            )

        return await self._write(work)
