"""Group commit on a real SQLite file: batching, isolation of a failing write, durability of
every answered write, and the writer thread surviving a broken transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ces_eval.storage._group_commit import Gathering, GroupCommitWriter


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


def _table(path: Path) -> None:
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    setup.close()


def _gathering(path: Path, gathering: Gathering) -> tuple[GroupCommitWriter, list[str]]:
    """A started writer over a new table ``t`` with ``gathering``, and the statements it runs."""
    _table(path)
    statements: list[str] = []
    writer = GroupCommitWriter(lambda: _opener(path, statements), gathering=gathering)
    writer.start()
    return writer, statements


def _insert(key: int) -> Callable[[sqlite3.Connection], int]:
    def work(connection: sqlite3.Connection) -> int:
        connection.execute("INSERT INTO t VALUES (?)", (key,))
        return key

    return work


def test_writes_arriving_while_others_commit_are_gathered_into_few_commits(
    tmp_path: Path,
) -> None:
    """Two writes queued together show concurrent writers: the writes that then arrive one
    by one, a millisecond apart, wait for each other (Gathering) instead of a commit each."""
    writer, statements = _gathering(tmp_path / "db.sqlite", Gathering(gather=0.05, gap=0.02))

    async def scenario() -> list[int]:
        tasks = [asyncio.ensure_future(writer.submit(_insert(k))) for k in range(2)]
        for k in range(2, 42):
            await asyncio.sleep(0.001)
            tasks.append(asyncio.ensure_future(writer.submit(_insert(k))))
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(scenario()) == list(range(42))
    writer.stop()
    commits = statements.count("COMMIT")
    assert commits <= 8, commits  # a commit per write without gathering


def test_a_writer_alone_is_never_held_for_others(tmp_path: Path) -> None:
    """One write after the other, each awaited: none finds another queued, so none waits for
    company (with a gathering window of 2 s, a single wait would show)."""
    writer, statements = _gathering(tmp_path / "db.sqlite", Gathering(gather=2.0, gap=2.0))

    async def scenario() -> float:
        started = time.monotonic()
        for k in range(5):
            assert await writer.submit(_insert(k)) == k
        return time.monotonic() - started

    elapsed = asyncio.run(scenario())
    writer.stop()
    assert statements.count("COMMIT") == 5
    assert elapsed < 2.0, elapsed


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


def _capped(path: Path, pages: int) -> sqlite3.Connection:
    """A writer connection whose database may not grow past ``pages`` pages: SQLite answers
    SQLITE_FULL ("database or disk is full") as on a full disk, without needing one."""
    connection = _opener(path, [])
    connection.execute(f"PRAGMA max_page_count = {pages}")
    return connection


def _stored(path: Path) -> set[int]:
    with sqlite3.connect(path) as check:
        keys = {row[0] for row in check.execute("SELECT k FROM t")}
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    check.close()
    return keys


def test_a_full_database_fails_every_write_of_the_batch_and_the_writer_recovers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    setup.close()
    writer = GroupCommitWriter(lambda: _capped(path, 12))
    writer.start()

    def insert(key: int) -> Callable[[sqlite3.Connection], int]:
        def work(connection: sqlite3.Connection) -> int:
            connection.execute("INSERT INTO t VALUES (?, ?)", (key, bytes(3000)))
            return key

        return work

    async def scenario() -> tuple[list[int], list[object], list[object]]:
        answered: list[int] = []
        for key in range(100):  # one at a time until the database is full
            try:
                answered.append(await writer.submit(insert(key)))
            except sqlite3.OperationalError:
                break
        # Concurrent writes share batches; each batch fails as a whole, every waiter hears.
        full = await asyncio.gather(
            *(writer.submit(insert(k)) for k in range(200, 240)), return_exceptions=True
        )
        # Space returns (the cap is per connection: the writer's own is raised).
        await writer.submit(lambda c: c.execute("PRAGMA max_page_count = 100000"))
        later = await asyncio.gather(*(writer.submit(insert(k)) for k in range(300, 310)))
        return answered, full, later

    answered, full, later = asyncio.run(scenario())
    writer.stop()
    assert 0 < len(answered) < 100, "some writes fit, then the database was full"
    for error in full:
        assert isinstance(error, sqlite3.OperationalError)
        assert error.sqlite_errorname == "SQLITE_FULL"
    assert later == list(range(300, 310))
    # Every answered write is stored, no failed one is, and the file is sound.
    assert _stored(path) == {*answered, *later}


def test_a_database_that_cannot_be_opened_fails_the_call_instead_of_hanging(
    tmp_path: Path,
) -> None:
    path = tmp_path / "later" / "db.sqlite"  # its folder does not exist yet
    writer = GroupCommitWriter(lambda: _opener(path, []))
    writer.start()

    async def scenario() -> None:
        with pytest.raises(sqlite3.OperationalError, match="unable to open"):
            await asyncio.wait_for(writer.submit(lambda c: None), 60)
        path.parent.mkdir()
        await asyncio.wait_for(
            writer.submit(lambda c: c.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")), 60
        )
        await writer.submit(lambda c: c.execute("INSERT INTO t VALUES (7)"))

    asyncio.run(scenario())
    writer.stop()
    assert _stored(path) == {7}


def test_a_connection_that_breaks_is_replaced_for_the_next_batch(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    setup.close()
    opened: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        opened.append(_opener(path, []))
        return opened[-1]

    writer = GroupCommitWriter(connect)
    writer.start()

    def insert_then_close(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO t VALUES (1)")
        connection.close()  # as a connection whose file failed under it: unusable

    async def scenario() -> None:
        with pytest.raises(sqlite3.ProgrammingError):
            await writer.submit(insert_then_close)
        await writer.submit(lambda c: c.execute("INSERT INTO t VALUES (2)"))

    asyncio.run(scenario())
    writer.stop()
    assert len(opened) == 2
    assert _stored(path) == {2}
