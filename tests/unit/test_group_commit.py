"""Group commit on a real SQLite file: batching, isolation of a failing write, durability of
every answered write, and the writer thread surviving a broken transaction."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from ces_eval.storage._group_commit import GroupCommitWriter


def _opener(path: Path, statements: list[str]) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.set_trace_callback(statements.append)
    return connection


def test_concurrent_writes_share_commits_and_a_failure_stays_alone(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    statements: list[str] = []
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    setup.close()
    writer = GroupCommitWriter(lambda: _opener(path, statements))
    writer.start()

    def insert(key: int) -> Callable[[sqlite3.Connection], int]:
        def work(connection: sqlite3.Connection) -> int:
            connection.execute("INSERT INTO t VALUES (?, ?)", (key, f"v{key}"))
            if key == 13:
                raise ValueError("unlucky")
            return key

        return work

    async def scenario() -> list[object]:
        return await asyncio.gather(
            *(writer.submit(insert(k)) for k in range(200)),
            return_exceptions=True,
        )

    outcomes = asyncio.run(scenario())
    writer.stop()
    assert sum(isinstance(o, BaseException) for o in outcomes) == 1
    assert isinstance(outcomes[13], ValueError)
    assert [o for o in outcomes if not isinstance(o, BaseException)] == [
        k for k in range(200) if k != 13
    ]
    commits = statements.count("COMMIT")
    assert 1 <= commits < 100, commits  # grouped: far fewer syncs than writes
    with sqlite3.connect(path) as check:
        keys = [row[0] for row in check.execute("SELECT k FROM t ORDER BY k")]
    check.close()
    assert keys == [k for k in range(200) if k != 13]


def test_an_answered_write_is_committed_and_the_writer_survives_errors(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    setup.close()
    writer = GroupCommitWriter(lambda: _opener(path, []))
    writer.start()

    def visible(key: int) -> bool:
        with sqlite3.connect(path) as other:
            found = other.execute("SELECT 1 FROM t WHERE k = ?", (key,)).fetchone()
        other.close()
        return found is not None

    async def scenario() -> None:
        await writer.submit(lambda c: c.execute("INSERT INTO t VALUES (1)"))
        assert visible(1)  # another connection sees it: committed before the answer
        with pytest.raises(sqlite3.IntegrityError):
            await writer.submit(lambda c: c.execute("INSERT INTO t VALUES (1)"))
        # A job that ends the transaction itself breaks the batch, not the thread.
        with pytest.raises(sqlite3.Error):
            await writer.submit(lambda c: c.execute("ROLLBACK"))
        await writer.submit(lambda c: c.execute("INSERT INTO t VALUES (2)"))
        assert visible(2)

    asyncio.run(scenario())
    writer.stop()
