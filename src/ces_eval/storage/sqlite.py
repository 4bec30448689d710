"""SQLite storage: one database file in WAL mode, the embedded default.

What each call reads and writes is a transaction script of :mod:`._scripts`, shared with
PostgreSQL; this module runs them (writes in the group-committing writer thread, lists on
reader threads, point reads on the event loop's thread), owns the file and maps ``sqlite3``'s
exceptions onto :mod:`.errors`.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from ces_eval.storage import _dialect, _scripts
from ces_eval.storage._group_commit import GroupCommitWriter
from ces_eval.storage._scripted import Make, ScriptedStorage
from ces_eval.storage._scripts import Rows, Statement, Taken
from ces_eval.storage._sqlite_files import DatabaseFiles
from ces_eval.storage.errors import Unavailable

__all__ = ["SqliteStorage"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
_READERS = 4
_READ_CHECK_SECONDS = 0.005  # how stale the files check before a read may be


def _execute(connection: sqlite3.Connection, statement: Statement) -> Rows:
    """Run one statement of a script; a unique index refusing a ``unique`` statement is
    Taken (SQLite names the index's columns in its message)."""
    try:
        cursor = connection.execute(statement.sql, statement.params)
    except sqlite3.IntegrityError as error:
        if statement.unique is None:
            raise
        name, display_name = statement.unique
        raise Taken(name, display_name, on_display_name="display_name" in str(error)) from error
    # A write without RETURNING has no rows to fetch (fetching would step it once more).
    return Rows(cursor.fetchall() if cursor.description is not None else (), cursor.rowcount)


def _run(make: Make[T], connection: sqlite3.Connection) -> T:
    return _scripts.drive(make(), partial(_execute, connection))


def _version_of(rows: Rows) -> int:
    return int(rows.rows[0][0])


def _hold(connections: list[sqlite3.Connection]) -> None:
    """Keep ``connections`` referenced from this thread's frame until the process ends (the
    interpreter's shutdown leaves a daemon thread's frame alone; the kernel closes the files)."""
    threading.Event().wait()


class SqliteStorage(ScriptedStorage):
    """The :class:`~ces_eval.storage.base.Storage` contract over one SQLite file: the
    scripts of :class:`ScriptedStorage` run in the group-committing writer thread (writes), a
    small pool of reader threads (lists and scans), or on the event loop's thread (point
    reads)."""

    _sql = _dialect.SQLITE

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
        # The index header when the database's version was last queried, and that version
        # (see version).
        self._versioned_header: bytes | None = None
        self._version = 0
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
            # A savepoint's statement journal (every job of a group commit has one) in memory,
            # not in a temporary file written page by page.
            connection.execute("PRAGMA temp_store=MEMORY")
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

    async def _transaction(self, make: Make[T]) -> T:
        return await self._transact(partial(_run, make))

    async def _query(self, make: Make[T]) -> T:
        return await self._read(partial(_run, make))

    async def _point_query(self, statement: Statement, decode: Callable[[Rows], T]) -> T:
        """Run a point read (one row by primary key) on the calling thread, the event loop's.

        A WAL reader never waits for the writer, and a point read takes microseconds, far less
        than handing it to a thread and back; lists and scans go through :meth:`_read`.
        """
        try:
            self._check(_READ_CHECK_SECONDS)
            connection = self._point_reader
            if connection is None:
                connection = self._point_reader = self._connect()
            return decode(_execute(connection, statement))
        except sqlite3.OperationalError as error:
            raise Unavailable(str(error)) from error

    async def _transact(self, work: Callable[[sqlite3.Connection], T]) -> T:
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
            secret = _run(
                partial(_scripts.migrate, self._sql, "sqlite", self._path, os.urandom(32)),
                connection,
            )
            # The database's identity in its file header, by which DatabaseFiles tells another
            # database copied over this one in place: random, set once, never 0.
            identity = int(connection.execute("PRAGMA user_version").fetchone()[0])
            if not identity:
                identity = 1 + secrets.randbelow(2**31 - 1)
                connection.execute(f"PRAGMA user_version = {identity}")
            return secret, identity

        try:
            self._secret, identity = await self._transact(migrate)
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

    async def version(self) -> int | None:
        """SQLite's ``data_version`` of the point reader's connection, which moves with every
        commit of another connection (this server's writer, another worker's, any program's);
        a point read, so the files are checked as for any read.

        While the log's index header reads as it did when the version was last queried,
        nothing was committed since (every commit rewrites it), and that version is still
        the database's: a hot read costs one ``pread`` instead of the PRAGMA, whose read
        transaction takes and drops a lock (a tenth of a REST Get's time). The header is read
        before the query, so a commit between the two makes it differ next time."""
        header = self._files.index_header() if self._files is not None else None
        if header is not None and header == self._versioned_header:
            try:
                self._check(_READ_CHECK_SECONDS)
            except sqlite3.OperationalError as error:
                raise Unavailable(str(error)) from error
            return self._version
        version = await self._point_query(Statement("PRAGMA data_version", ()), _version_of)
        # Two different copies: a commit was writing it; the next call queries again.
        whole = header is not None and header[:48] == header[48:]
        self._versioned_header = header if whole else None
        self._version = version
        return version

    async def ping(self) -> None:
        def work(connection: sqlite3.Connection) -> None:
            self._check()  # in full, whatever the reads' last check
            _run(partial(_scripts.ping, self._sql), connection)

        await self._read(work)
