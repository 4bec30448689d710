"""Group commit for SQLite: one writer thread commits every waiting write in one transaction.

With ``synchronous=FULL`` each commit waits for the disk, and a disk syncs a few hundred times a
second at best: committing writes one by one caps writes per second at that rate, however fast
the rest is. The writer thread instead takes every write waiting in its queue (up to
``max_batch``), runs each inside its own SAVEPOINT of one transaction, commits once, and only
then answers each caller. A write that fails rolls back to its savepoint alone; the others
commit. Every answered write is therefore on disk, and a batch of N writes costs one sync.

A commit costs as much as several writes (its sync, the transaction, the checks around it), so
under concurrent writes a batch is worth waiting for. The writer cannot see the calls still on
their way to it, but it sees when writes queued up while it was committing: then others are
writing at the same time, and for a while (``busy``) each batch waits for more, until none has
come for ``gap`` seconds or the batch has waited ``gather`` seconds. A caller writing alone,
one write after the other, never finds writes queued, so it is never held.

A batch the database cannot store (disk full, I/O error) fails as a whole: every waiter of it
gets the error, nothing of it stays, and the thread goes on with the next batch, on a fresh
connection if the old one could not even roll back. The thread never dies with callers waiting:
a connection that cannot be opened fails the batch and is tried again for the next one.

``verify``, when given, runs before each transaction, before its commit and after it: an
``sqlite3.Error`` it raises fails the whole batch, even after the commit (the storage uses it to
refuse writes into database files that were removed or replaced, which would be lost).
``release`` receives the connection when the thread ends (default: closes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Gathering", "GroupCommitWriter"]

T = TypeVar("T")


@dataclass
class _Job:
    work: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    outcome: tuple[bool, Any] = (False, None)


def _settle(jobs: list[_Job]) -> None:
    """Answer the callers of ``jobs`` (on their event loop's thread)."""
    for job in jobs:
        if job.future.done():  # cancelled by its caller
            continue
        ok, value = job.outcome
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)


@dataclass(frozen=True)
class Gathering:
    """How long a batch waits for more writes once concurrent writers were seen (seconds):
    at most ``gather`` in all, ``gap`` without a new write, for ``busy`` after writes were
    last found queued."""

    gather: float = 0.003
    gap: float = 0.001
    busy: float = 0.1


class GroupCommitWriter:
    """Runs write transactions on one dedicated thread and connection, batching commits."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        max_batch: int = 256,
        verify: Callable[[], None] = lambda: None,
        release: Callable[[sqlite3.Connection], None] = sqlite3.Connection.close,
        gathering: Gathering | None = None,
    ) -> None:
        self._connect = connect
        self._max_batch = max_batch
        self._gathering = gathering or Gathering()
        self._busy_until = 0.0  # when concurrent writers were last seen, plus gathering.busy
        self._verify = verify
        self._release = release
        # None asks the thread to stop once the jobs before it are done.
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sqlite-writer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Finish the writes already submitted, then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    async def submit(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in a transaction; return its result once the transaction committed.
        An exception from ``work`` (or from the commit) is raised here; nothing of it stays."""
        if self._thread is None:
            raise RuntimeError("the SQLite writer is not running")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(work, future, loop))
        return await future

    def _take(self, first: _Job) -> tuple[list[_Job], bool]:
        """``first`` and every job already waiting (up to the batch size), then, while
        concurrent writers are about, those that come soon after (:class:`Gathering`); True
        when the stop marker was among them."""
        batch = [first]
        now = time.monotonic()
        rules = self._gathering
        gather_until = now + rules.gather if now < self._busy_until else 0.0
        while len(batch) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                wait = min(gather_until - time.monotonic(), rules.gap)
                if wait <= 0:
                    break
                try:
                    item = self._queue.get(timeout=wait)
                except queue.Empty:
                    break
            if item is None:
                return batch, True
            batch.append(item)
            if len(batch) == 2 and not gather_until:  # queued while the last commit ran
                self._busy_until = now + rules.busy
                gather_until = now + rules.gather
        return batch, False

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            batch, stopping = self._take(item)
            try:
                if connection is None:
                    connection = self._connect()
                self._commit(connection, batch)
            except Exception as error:  # noqa: BLE001 - the thread must outlive any failure
                for job in batch:
                    job.outcome = (False, error)
            if connection is not None and not self._usable(connection):
                connection = None
            # One wake-up per event loop, not per job.
            by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
            for job in batch:
                by_loop.setdefault(job.loop, []).append(job)
            for loop, jobs in by_loop.items():
                with contextlib.suppress(RuntimeError):  # the caller's loop is closed: no one waits
                    loop.call_soon_threadsafe(_settle, jobs)
        if connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._release(connection)

    @staticmethod
    def _usable(connection: sqlite3.Connection) -> bool:
        """Whether ``connection`` is outside any transaction, as the next batch needs it; one
        that cannot roll back (its file failing, or closed) is closed so the next batch opens
        another."""
        try:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
            return False
        return True

    def _commit(self, connection: sqlite3.Connection, batch: list[_Job]) -> None:
        """Run the batch in one transaction; every job's outcome is final once this returns."""
        try:
            self._verify()
            connection.execute("BEGIN IMMEDIATE")
            for job in batch:
                connection.execute("SAVEPOINT job")
                try:
                    job.outcome = (True, job.work(connection))
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    job.outcome = (False, error)
                    if connection.in_transaction:
                        connection.execute("ROLLBACK TO job")
                if not connection.in_transaction:
                    # SQLite rolled the whole transaction back (disk full, I/O error):
                    # the jobs before this one are undone too.
                    failure = job.outcome[1]
                    raise (
                        failure
                        if isinstance(failure, sqlite3.Error)
                        else sqlite3.OperationalError(str(failure))
                    )
                connection.execute("RELEASE job")
            self._verify()
            connection.execute("COMMIT")
            self._verify()
        except sqlite3.Error as error:
            # Every job fails with the error that broke the transaction; the rollback is left
            # to _usable, so a failing rollback cannot hide that error.
            for job in batch:
                job.outcome = (False, error)
