"""SQLite storage: one database file in WAL mode, the embedded default.

Durability: ``synchronous=FULL`` in WAL mode, so a write returns only after its commit reached
the disk; a crash (even power loss) never loses an acknowledged write. All writes run on one
dedicated thread and connection (SQLite has one writer at a time anyway); reads run on a small
pool of threads with their own connections and see the last committed state.

Out of space: a write SQLite cannot store (``database or disk is full``, ``disk I/O error``, the
file size limit) raises :class:`~ces_eval.storage.base.Unavailable` with nothing of it kept, so
callers get a retryable UNAVAILABLE; reads go on, and writes succeed again as soon as there is
room, without a restart. The log says when writes start failing (and why) and when they recover.

Its files: the server owns the database file (an exclusive lock on the file itself, which deleting
a lock file cannot defeat) and refuses every call, the health check included, while the path no
longer names the files it opened or their shared-memory index cannot be written in place; a write
is acknowledged only if, after its commit, they still were (:mod:`._sqlite_files`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import sqlite3
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from google.longrunning import operations_pb2

from ces_eval import filtering
from ces_eval.core.derived import Tally, add_tally, contribution
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import _tables
from ces_eval.storage._group_commit import GroupCommitWriter
from ces_eval.storage._migrations import pending
from ces_eval.storage._sqlite_files import DatabaseFiles
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


__all__ = ["SqliteStorage"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_READERS = 4
_READ_CHECK_SECONDS = 0.005  # how stale the files check before a read may be
_SQL = _tables.Sql(filtering.SQLITE, json_param="?")
_INSERT_EVALUATION = _SQL.insert(
    "evaluations", _tables.EVALUATION_COLUMNS, {"derived": "x''", "metrics_tally": "'{}'"}
)
_RUNS = _SQL.runs_of()
_LAST_COMPLETED = _SQL.last_completed_of()
_COMPLETED = int(_Result.ExecutionState.COMPLETED)
_UPDATE_EVALUATION = _SQL.update("evaluations", _tables.EVALUATION_COLUMNS[2:], "name = ?")
_INSERT_RESULT = _SQL.insert("evaluation_results", _tables.RESULT_COLUMNS, {})
_UPDATE_RESULT = _SQL.update("evaluation_results", _tables.RESULT_COLUMNS[3:], "name = ?")
_now = _tables.now_micros


def _hold(connections: list[sqlite3.Connection]) -> None:
    """Keep ``connections`` referenced from this thread's frame until the process ends (the
    interpreter's shutdown leaves a daemon thread's frame alone; the kernel closes the files)."""
    threading.Event().wait()


class SqliteStorage:
    """The :class:`~ces_eval.storage.base.Storage` contract over one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        shared: bool = False,
    ) -> None:
        """``shared``: one of several worker processes of one ``ces-eval serve --workers``
        group, whose supervisor holds the file's lock; operations then use leases."""
        self._path = str(path)
        self._shared = shared
        # ``:memory:``: each SQLite connection would get a database of its own (the writer's
        # creates would be invisible to the readers), so a throw-away file in a private
        # folder, in RAM where /dev/shm exists, stands in for it; close removes the folder.
        self._scratch: Path | None = None
        self._durable = True
        if self._path == ":memory:":
            shm = Path("/dev/shm")  # noqa: S108 - a private folder made by mkdtemp below
            self._scratch = Path(
                tempfile.mkdtemp(
                    prefix="ces-eval-memory-",
                    dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None,
                )
            )
            self._path = str(self._scratch / "memory.db")
            self._durable = False  # nothing outlives the process: no fsync per commit
        self._files: DatabaseFiles | None = DatabaseFiles(self._path)
        self._writer = GroupCommitWriter(self._open, verify=self._check, release=self._release)
        self._readers = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="sqlite-reader")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._secret = b""
        self._point_reader: sqlite3.Connection | None = None
        self._writes_failing = False
        self._abandoned: list[sqlite3.Connection] | None = None  # see close

    # -- plumbing ----------------------------------------------------------------------------

    def _check(self, within: float = 0.0) -> None:
        """Raise (an OperationalError) unless the files are still the ones opened."""
        if self._files is not None:
            self._files.check(within=within)

    def _open(self) -> sqlite3.Connection:
        """A new connection with the durability settings; the writer's (which the writer
        closes itself, and replaces when its file failed under it). SQLite never creates the
        file (``mode=rw``: :meth:`open` did), so a connection opened after the file was removed
        fails instead of starting an empty database; one opened after it was replaced fails
        its check."""
        self._check()
        target, uri = self._path, False
        if self._files is not None:
            path = urllib.parse.quote(os.path.abspath(self._path))
            target, uri = f"file://{path}?mode=rw", True
        connection = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, timeout=30, uri=uri
        )
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'OFF'}")
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute("PRAGMA busy_timeout=30000")
            self._check()
        except BaseException:
            connection.close()
            raise
        return connection

    def _connect(self) -> sqlite3.Connection:
        """A reader's connection, closed with the storage."""
        connection = self._open()
        with self._lock:
            self._connections.append(connection)
        return connection

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
        return connection

    def _checked_read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        self._check(_READ_CHECK_SECONDS)
        return work(self._connection())

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._readers, self._checked_read, work)
        except sqlite3.OperationalError as error:
            raise Unavailable(str(error)) from error

    def _read_now(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run a point read (one row by primary key) on the calling thread, the event loop's.

        A WAL reader never waits for the writer, and a point read takes microseconds, far less
        than handing it to a thread and back; lists and scans go through :meth:`_read`.
        """
        try:
            self._check(_READ_CHECK_SECONDS)
            connection = self._point_reader
            if connection is None:
                connection = self._point_reader = self._connect()
            return work(connection)
        except sqlite3.OperationalError as error:
            raise Unavailable(str(error)) from error

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in a write transaction (grouped with concurrent writes into one commit);
        returns once it is on disk."""
        try:
            result = await self._writer.submit(work)
        except sqlite3.OperationalError as error:
            # Locked by another program, disk full, I/O error: nothing was committed.
            raise self._write_failed(error) from error
        if self._writes_failing:
            self._writes_failing = False
            _log.warning("SQLite stores writes to %s again", self._path)
        return result

    def _write_failed(self, error: sqlite3.OperationalError) -> Unavailable:
        """The storage error for a write SQLite refused; logged once when writes start failing,
        so the server log says why callers get UNAVAILABLE (the API answer does not)."""
        if not self._writes_failing:
            self._writes_failing = True
            _log.error(
                "SQLite cannot store writes to %s (%s); writes answer UNAVAILABLE until it can",
                self._path,
                error,
            )
        return Unavailable(str(error))

    async def open(self) -> None:
        """Open the file as its single owner (a SQLite file serves one process: its operations
        and recovery assume so, and a second owner is refused with InUse), or, ``shared``, as
        a worker of the group whose supervisor owns it."""
        if self._files is not None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            self._files.claim(owner=not self._shared)
        self._writer.start()

        def migrate(connection: sqlite3.Connection) -> tuple[bytes, int]:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
            )
            applied = {
                row[0] for row in connection.execute("SELECT version FROM schema_migrations")
            }
            for migration in pending("sqlite", applied, self._path):
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
            # The database's identity in its file header, by which DatabaseFiles tells another
            # database copied over this one in place: random, set once, never 0.
            identity = int(connection.execute("PRAGMA user_version").fetchone()[0])
            if not identity:
                identity = 1 + secrets.randbelow(2**31 - 1)
                connection.execute(f"PRAGMA user_version = {identity}")
            return bytes(row[0]), identity

        try:
            self._secret, identity = await self._write(migrate)
            # Held open until close, as the writer's connection is: the log and index stay
            # the ones recorded, even when the writer replaces a failed connection.
            self._point_reader = self._connect()
            if self._files is not None:
                mode = self._point_reader.execute("PRAGMA journal_mode").fetchone()[0]
                if not self._shared:  # the header in the file gets the identity now
                    self._point_reader.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                self._files.opened(wal=mode == "wal", identity=identity)
        except BaseException as error:
            await self.close()  # releases the file for whoever fixes the cause
            if isinstance(error, sqlite3.OperationalError):
                raise Unavailable(str(error)) from error
            raise

    async def close(self) -> None:
        """Close every connection, then release the file. When they must not close, they are
        left open until the process ends, held by a thread that never ends so that not even the
        interpreter's shutdown closes them: when the shared-memory index was made immutable or
        cut short while mapped (closing would end the process with SIGBUS, and every
        acknowledged write is already in the log, which the next start recovers), and when the
        file was overwritten in place with another database (the last close would checkpoint
        this one's log into it)."""
        if self._files is not None and not self._files.closable():
            _log.error(
                "leaving the connections to %s open: its index cannot be written", self._path
            )
            self._abandoned = []
        elif self._files is not None and self._files.overwritten():
            # Closing the last connection checkpoints: it would write this database's pages
            # into the other one now in the file. Its log is removed instead (DatabaseFiles).
            _log.error(
                "leaving the connections to %s open: the file holds another database now",
                self._path,
            )
            self._abandoned = []
        self._writer.stop()
        self._readers.shutdown(wait=True)
        settled = self._abandoned is None and self._settle_moved()
        with self._lock:
            for connection in self._connections:
                self._release(connection)
            self._connections.clear()
        self._point_reader = None
        if self._abandoned:
            threading.Thread(
                target=_hold, args=(self._abandoned,), name="sqlite-abandoned", daemon=True
            ).start()
        if self._files is not None:
            # Releases the lock, now that no connection uses the file.
            self._files.close(settled=settled)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _release(self, connection: sqlite3.Connection) -> None:
        if self._abandoned is None:
            connection.close()
        else:
            self._abandoned.append(connection)

    def _settle_moved(self) -> bool:
        """Checkpoint a database file moved away while open into where it now is (SQLite
        skips its final checkpoint then, and the log at the path must not stay behind);
        False when that failed, so the log is kept."""
        connection = self._point_reader
        if self._files is None or connection is None or not self._files.moved():
            return True
        try:
            if not connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                return True
            problem = "another connection holds it"
        except sqlite3.Error as error:
            problem = str(error)
        _log.error("cannot checkpoint %s (moved while open) into its file: %s", self._path, problem)
        return False

    async def secret(self) -> bytes:
        return self._secret

    @property
    def shared(self) -> bool:
        """One process owns a SQLite file (nothing else runs its operations), unless it is one
        of the worker processes of a group (``shared``)."""
        return self._shared

    async def ping(self) -> None:
        def work(connection: sqlite3.Connection) -> None:
            self._check()  # in full, whatever the reads' last check
            connection.execute("SELECT 1").fetchone()

        await self._read(work)

    # -- evaluations -----------------------------------------------------------------------------

    @staticmethod
    def _conflict(
        connection: sqlite3.Connection, error: sqlite3.IntegrityError, name: str, display_name: str
    ) -> Conflict:
        """Which uniqueness rule ``error`` broke: the name, or the display name in its scope."""
        if "display_name" not in str(error):
            return Conflict("name", name)
        statement, params = _SQL.display_name_owner(name, display_name)
        row = connection.execute(statement, params).fetchone()
        return Conflict("display_name", row[0] if row else "")

    def _insert_evaluation(self, connection: sqlite3.Connection, evaluation: _Evaluation) -> None:
        """Insert one evaluation (no derived fields yet) inside the caller's transaction."""
        try:
            connection.execute(_INSERT_EVALUATION, _tables.evaluation_row(evaluation))
        except sqlite3.IntegrityError as error:
            raise self._conflict(
                connection, error, evaluation.name, evaluation.display_name
            ) from error

    async def insert_evaluation(self, evaluation: _Evaluation) -> None:
        await self._write(lambda connection: self._insert_evaluation(connection, evaluation))

    async def get_evaluation(self, name: str) -> _Evaluation | None:
        def work(connection: sqlite3.Connection) -> _Evaluation | None:
            row = connection.execute(
                "SELECT data, derived, etag FROM evaluations WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else _tables.evaluation_from_row(*row)

        return self._read_now(work)

    async def list_evaluations(self, query: ListQuery) -> list[tuple[_Evaluation, Cursor]]:
        statement, params = _SQL.list_evaluations(query)

        def work(connection: sqlite3.Connection) -> list[tuple[_Evaluation, Cursor]]:
            return [
                (_tables.evaluation_from_row(data, derived, etag), Cursor(value, name))
                for data, derived, etag, name, value in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def replace_evaluation(self, evaluation: _Evaluation, expected_etag: str) -> None:
        row = _tables.evaluation_row(evaluation)

        def work(connection: sqlite3.Connection) -> None:
            current = connection.execute(
                "SELECT etag FROM evaluations WHERE name = ?", (evaluation.name,)
            ).fetchone()
            if current is None:
                raise Missing(evaluation.name)
            if current[0] != expected_etag:
                raise EtagMismatch(evaluation.name)
            try:
                connection.execute(_UPDATE_EVALUATION, (*row[2:], evaluation.name))
            except sqlite3.IntegrityError as error:
                raise self._conflict(
                    connection, error, evaluation.name, evaluation.display_name
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
        self, evaluations: Sequence[str], count: int, max_bytes: int | None = None
    ) -> dict[str, list[_Result]]:
        def work(connection: sqlite3.Connection) -> dict[str, list[_Result]]:
            found: dict[str, list[_Result]] = {name: [] for name in evaluations}
            read = 0
            for name in evaluations:
                # Rows are read one at a time as iterated: none after the budget's last.
                for (data,) in connection.execute(
                    "SELECT data FROM evaluation_results WHERE evaluation = ? "
                    "ORDER BY create_time DESC, name DESC LIMIT ?",
                    (name, count),
                ):
                    found[name].append(_Result.FromString(data))
                    read += len(data)
                    if max_bytes is not None and read > max_bytes:
                        return found
            return found

        return await self._read(work)

    @staticmethod
    def _refresh_derived(
        connection: sqlite3.Connection,
        evaluation: str,
        etag: str,
        change: Tally,
        max_bytes: int | None = None,
    ) -> None:
        """Apply a result write's ``change`` to the evaluation's metrics tally and store its
        derived fields with ``etag``: a few indexed reads, whatever the number of results.
        TooLarge (see Storage.insert_result) before anything is stored."""
        row = connection.execute(
            "SELECT metrics_tally, length(data), length(derived), etag FROM evaluations "
            "WHERE name = ?",
            (evaluation,),
        ).fetchone()
        tally = _tables.updated_tally(
            row[0],
            change,
            lambda: (
                data
                for (data,) in connection.execute(
                    "SELECT data FROM evaluation_results WHERE evaluation = ?", (evaluation,)
                )
            ),
        )
        runs = [run for (run,) in connection.execute(_RUNS, (evaluation,))]
        last = connection.execute(_LAST_COMPLETED, (evaluation, _COMPLETED)).fetchone()
        derived = _tables.derived_blob(tally, runs, last[0] if last else None)
        _tables.refuse_growth(evaluation, row[1:], derived, etag, max_bytes)
        connection.execute(
            "UPDATE evaluations SET derived = ?, etag = ?, metrics_tally = ? WHERE name = ?",
            (derived, etag, _tables.tally_json(tally), evaluation),
        )

    def _insert_result(self, connection: sqlite3.Connection, result: _Result) -> str:
        row = _tables.result_row(result)
        evaluation = str(row[1])
        if (
            connection.execute("SELECT 1 FROM evaluations WHERE name = ?", (evaluation,)).fetchone()
            is None
        ):
            raise Missing(evaluation)
        try:
            connection.execute(_INSERT_RESULT, row)
        except sqlite3.IntegrityError as error:
            raise self._conflict(connection, error, result.name, result.display_name) from error
        return evaluation

    async def insert_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        def work(connection: sqlite3.Connection) -> None:
            evaluation = self._insert_result(connection, result)
            change = _tables.tally_change(result, None)
            self._refresh_derived(connection, evaluation, parent_etag, change, max_evaluation_bytes)

        await self._write(work)

    async def replace_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        row = _tables.result_row(result)

        def work(connection: sqlite3.Connection) -> None:
            before = connection.execute(
                "SELECT data FROM evaluation_results WHERE name = ?", (result.name,)
            ).fetchone()
            if before is None:
                raise Missing(result.name)
            connection.execute(_UPDATE_RESULT, (*row[3:], result.name))
            change = _tables.tally_change(result, _Result.FromString(before[0]))
            self._refresh_derived(
                connection, str(row[1]), parent_etag, change, max_evaluation_bytes
            )

        await self._write(work)

    async def import_bundle(
        self,
        evaluations: Sequence[_Evaluation],
        results: Sequence[_Result],
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        def work(connection: sqlite3.Connection) -> None:
            for evaluation in evaluations:
                self._insert_evaluation(connection, evaluation)
            # The tally change of each evaluation that received results, in order.
            changes: dict[str, Tally] = {}
            for result in results:
                evaluation_name = self._insert_result(connection, result)
                add_tally(changes.setdefault(evaluation_name, {}), contribution(result))
            etags = {e.name: e.etag for e in evaluations}
            for evaluation_name, change in changes.items():
                current = connection.execute(
                    "SELECT etag FROM evaluations WHERE name = ?", (evaluation_name,)
                ).fetchone()[0]
                self._refresh_derived(
                    connection,
                    evaluation_name,
                    etags.get(evaluation_name, current),
                    change,
                    max_evaluation_bytes,
                )

        await self._write(work)

    async def get_result(self, name: str) -> _Result | None:
        def work(connection: sqlite3.Connection) -> _Result | None:
            row = connection.execute(
                "SELECT data FROM evaluation_results WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else _Result.FromString(row[0])

        return self._read_now(work)

    async def list_results(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        statement, params = _SQL.list_results(query)

        def work(connection: sqlite3.Connection) -> list[tuple[bytes, Cursor]]:
            return [
                (data, Cursor(value, name))
                for data, name, value in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def delete_result(self, name: str, parent_etag: str) -> None:
        def work(connection: sqlite3.Connection) -> None:
            row = connection.execute(
                "SELECT evaluation, data FROM evaluation_results WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise Missing(name)
            connection.execute("DELETE FROM evaluation_results WHERE name = ?", (name,))
            change = _tables.tally_change(None, _Result.FromString(row[1]))
            self._refresh_derived(connection, row[0], parent_etag, change)

        await self._write(work)

    # -- operations ----------------------------------------------------------------------------

    async def insert_operation(
        self, operation: operations_pb2.Operation, method: str, owner: str, lease: float
    ) -> None:
        parent = operation.name.rsplit("/operations/", 1)[0]
        now = _now()
        data = operation.SerializeToString(deterministic=True)

        def work(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO operations (name, parent, method, done, create_time, update_time, "
                "data, owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    operation.name,
                    parent,
                    method,
                    int(operation.done),
                    now,
                    now,
                    data,
                    owner,
                    now + int(lease * 1_000_000),
                ),
            )

        await self._write(work)

    async def get_operation(self, name: str) -> operations_pb2.Operation | None:
        def work(connection: sqlite3.Connection) -> operations_pb2.Operation | None:
            row = connection.execute(
                "SELECT data FROM operations WHERE name = ?", (name,)
            ).fetchone()
            return None if row is None else operations_pb2.Operation.FromString(row[0])

        return self._read_now(work)

    async def list_operations(
        self,
        parent: str,
        limit: int,
        after: str | None,
        done: bool | None,
        max_bytes: int | None = None,
    ) -> list[operations_pb2.Operation]:
        statement, params = _SQL.list_operations(parent, limit, after, done, max_bytes)

        def work(connection: sqlite3.Connection) -> list[operations_pb2.Operation]:
            return [
                operations_pb2.Operation.FromString(row[0])
                for row in connection.execute(statement, params)
            ]

        return await self._read(work)

    async def _replace_running(self, operation: operations_pb2.Operation) -> bool:
        data = operation.SerializeToString(deterministic=True)
        now = _now()

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

        return self._read_now(work)

    async def delete_operation(self, name: str) -> bool:
        def work(connection: sqlite3.Connection) -> bool:
            return (
                connection.execute("DELETE FROM operations WHERE name = ?", (name,)).rowcount == 1
            )

        return await self._write(work)

    async def renew_leases(self, owner: str, lease: float) -> list[str]:
        def work(connection: sqlite3.Connection) -> list[str]:
            connection.execute(
                "UPDATE operations SET lease_until = ? WHERE done = 0 AND owner = ?",
                (_now() + int(lease * 1_000_000), owner),
            )
            return [
                row[0]
                for row in connection.execute(
                    "SELECT name FROM operations WHERE done = 0 AND owner = ? "
                    "AND cancel_requested = 1",
                    (owner,),
                )
            ]

        return await self._write(work)

    @staticmethod
    def _fail(
        connection: sqlite3.Connection,
        condition: str,
        params: tuple[object, ...],
        error: status_pb2.Status,
    ) -> int:
        rows = connection.execute(
            f"SELECT data FROM operations WHERE done = 0 AND {condition}",  # noqa: S608 - fixed conditions
            params,
        ).fetchall()
        for (data,) in rows:
            operation = operations_pb2.Operation.FromString(data)
            operation.done = True
            operation.error.CopyFrom(error)
            connection.execute(
                "UPDATE operations SET done = 1, data = ?, update_time = ? WHERE name = ?",
                (operation.SerializeToString(deterministic=True), _now(), operation.name),
            )
        return len(rows)

    async def fail_expired(self, error: status_pb2.Status) -> int:
        return await self._write(
            lambda connection: self._fail(connection, "lease_until < ?", (_now(),), error)
        )

    async def fail_unfinished(self, error: status_pb2.Status, owner: str | None = None) -> int:
        if owner is None:
            return await self._write(lambda connection: self._fail(connection, "1", (), error))
        return await self._write(
            lambda connection: self._fail(connection, "owner = ?", (owner,), error)
        )

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
