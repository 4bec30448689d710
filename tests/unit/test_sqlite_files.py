"""SQLite storage whose files change while it has them open (issue 15, items 5 and 6).

Real files in ``tmp_path``: the database removed, moved or replaced, its write-ahead log or
index removed, the index cut short or made immutable; a second owner without any lock file; a
worker whose owner is gone; a log left without its database. The same attacks on the real server
(restarts included) are in tests/integration/test_database_file.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage._group_commit import GroupCommitWriter
from ces_eval.storage.base import InUse, ListQuery, OrderBy, SortKey, Unavailable
from ces_eval.storage.sqlite import SqliteStorage

APP = "projects/p/locations/l/apps/a"


def evaluation(eid: str) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(
        name=f"{APP}/evaluations/{eid}", display_name=eid, etag=f"etag-{eid}"
    )
    message.create_time.FromSeconds(1_700_000_000)
    message.update_time.FromSeconds(1_700_000_000)
    message.golden.turns.add().steps.add().user_input.text = f"hello {eid}"
    return message


def sibling(database: Path, suffix: str) -> Path:
    return database.with_name(database.name + suffix)


def other_database(path: Path) -> Path:
    """A SQLite file that is not the server's: one table ``x`` holding 42."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE x (a INTEGER)")
        connection.execute("INSERT INTO x VALUES (42)")
        connection.commit()
    return path


# Each attack changes the files of ``database`` while a storage has them open, and returns
# where the database's acknowledged content is to be found afterwards (None: nowhere).
def _removed(database: Path) -> Path | None:
    database.unlink()
    return None


def _moved(database: Path) -> Path | None:
    return database.rename(database.with_name("moved.sqlite"))


def _replaced(database: Path) -> Path | None:
    other_database(database.with_name("other.sqlite")).rename(database)
    return None


def _removed_with_log_and_index(database: Path) -> Path | None:
    for suffix in ("", "-wal", "-shm"):
        sibling(database, suffix).unlink()
    return None


def _log_removed(database: Path) -> Path | None:
    sibling(database, "-wal").unlink()
    return database  # the last connection's checkpoint reads the removed log


def _index_removed(database: Path) -> Path | None:
    sibling(database, "-shm").unlink()
    return database


ATTACKS: dict[str, Callable[[Path], Path | None]] = {
    "removed": _removed,
    "moved": _moved,
    "replaced": _replaced,
    "removed-with-log-and-index": _removed_with_log_and_index,
    "log-removed": _log_removed,
    "index-removed": _index_removed,
}


def stored_names(path: Path) -> list[str]:
    """The evaluations in the SQLite file ``path`` (whose integrity is checked), read without
    ces-eval."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return [row[0] for row in connection.execute("SELECT name FROM evaluations ORDER BY 1")]


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` made immutable (``chattr +i``) for the block. Skips the test where that cannot
    be done: no chattr, no CAP_LINUX_IMMUTABLE (not root), or a file system without the flag
    (tmpfs before Linux 6.0, overlayfs)."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("no chattr command (e2fsprogs)")
    made = subprocess.run(
        [chattr, "+i", str(path)], capture_output=True, text=True, check=False, timeout=30
    )
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not possible here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True, timeout=30)


def _refuses_everything(storage: SqliteStorage, eid: str) -> None:
    async def calls() -> None:
        with pytest.raises(Unavailable):
            await storage.insert_evaluation(evaluation(eid))
        with pytest.raises(Unavailable):
            await storage.get_evaluation(f"{APP}/evaluations/e0")
        with pytest.raises(Unavailable):
            await storage.list_evaluations(ListQuery(APP, OrderBy(SortKey.NAME, False), 10))
        with pytest.raises(Unavailable):
            await storage.ping()

    asyncio.run(calls())


def _opened(path: Path, count: int = 3, *, shared: bool = False) -> SqliteStorage:
    storage = SqliteStorage(path, shared=shared)

    async def fill() -> None:
        await storage.open()
        for index in range(count):
            await storage.insert_evaluation(evaluation(f"e{index}"))

    asyncio.run(fill())
    return storage


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_after_its_files_changed_the_storage_refuses_every_call_and_leaves_no_stale_log(
    tmp_path: Path, attack: Callable[[Path], Path | None], caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "db.sqlite"
    storage = _opened(database)
    kept_in = attack(database)
    _refuses_everything(storage, "late")
    asyncio.run(storage.close())
    assert "every call answers UNAVAILABLE" in caplog.text
    acknowledged = [f"{APP}/evaluations/e{index}" for index in range(3)]
    if kept_in is not None:
        assert stored_names(kept_in) == acknowledged  # and not the refused one
    # Nothing of the old database is left at the path for the next one to replay as its own.
    if not database.exists():
        assert not sibling(database, "-wal").exists()
        assert not sibling(database, "-shm").exists()
    elif kept_in is None:  # replaced: the other file is intact
        with contextlib.closing(sqlite3.connect(database)) as connection:
            assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]
    reopened = SqliteStorage(database)
    asyncio.run(reopened.open())
    asyncio.run(reopened.close())


def overwrite(database: Path, other: Path) -> None:
    """``other`` copied over ``database`` in place (``cp``): the same file, other content."""
    before = database.stat().st_ino
    shutil.copyfile(other, database)
    assert database.stat().st_ino == before


def test_a_database_overwritten_in_place_is_refused_and_the_new_content_left_intact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The storage's connections stay open after close (the last close would checkpoint into
    the new content), so the file is read here with sqlite3 alone; the real server, whose
    process ends, serves it at its next start (tests/integration/test_database_file.py)."""
    database = tmp_path / "db.sqlite"
    storage = _opened(database)
    overwrite(database, other_database(tmp_path / "other.sqlite"))
    _refuses_everything(storage, "late")
    assert "every call answers UNAVAILABLE" in caplog.text
    asyncio.run(storage.close())
    assert not sibling(database, "-wal").exists()
    assert not sibling(database, "-shm").exists()
    with contextlib.closing(sqlite3.connect(database)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]


_LIST = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1])
print(connection.execute("PRAGMA integrity_check").fetchone()[0])
for (name,) in connection.execute("SELECT name FROM evaluations ORDER BY 1"):
    print(name)
"""


def _header_identity(path: Path) -> int:
    """The user_version in the file's header itself (not through SQLite and its log)."""
    return int.from_bytes(path.read_bytes()[60:64], "big")


def test_another_ces_eval_database_copied_over_in_place_is_refused_and_left_intact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the storage served a mix of both databases (a read of e1 answered the other's
    row), acknowledged writes, and its checkpoints left the file malformed. Both databases
    were written by this storage, so only their identities in the header differ."""
    other = tmp_path / "other" / "db.sqlite"
    other.parent.mkdir()
    theirs = _opened(other, 5)
    asyncio.run(theirs.close())
    database = tmp_path / "db.sqlite"
    asyncio.run(_opened(database).close())  # checkpointed: the file holds most pages
    storage = _opened(database, 0)
    asyncio.run(storage.insert_evaluation(evaluation("in-the-log")))
    assert _header_identity(database) != _header_identity(other) != 0
    overwrite(database, other)
    _refuses_everything(storage, "late")
    assert "was overwritten while the server had it open" in caplog.text
    asyncio.run(storage.close())
    assert "the file holds another database now" in caplog.text
    # Neither checkpointed into the other's pages nor left to be replayed into them.
    assert not sibling(database, "-wal").exists()
    assert not sibling(database, "-shm").exists()
    # Read by another process: this one's connections to the file are still open.
    assert database.read_bytes() == other.read_bytes()
    listed = subprocess.run(
        [sys.executable, "-c", _LIST, str(database)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert listed.stdout.split() == ["ok", *(f"{APP}/evaluations/e{index}" for index in range(5))]


def test_the_identity_survives_checkpoints_and_is_given_to_an_older_database(
    tmp_path: Path,
) -> None:
    """No false alarm: writes far past the autocheckpoint (page 1 copied to the file again and
    again) are acknowledged, and a database from before the identity (user_version 0) gets one
    at open, in its header at once."""
    database = tmp_path / "db.sqlite"
    storage = _opened(database, 0)
    identity = _header_identity(database)
    assert identity != 0

    async def many() -> None:
        for index in range(400):
            message = evaluation(f"big{index}")
            message.description = "x" * 20_000  # ~5 pages each: several autocheckpoints
            await storage.insert_evaluation(message)
        await storage.ping()
        await storage.close()

    asyncio.run(many())
    assert _header_identity(database) == identity
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.execute("PRAGMA user_version = 0")
    assert _header_identity(database) == 0
    older = _opened(database, 1)
    assert _header_identity(database) not in (0, identity)
    asyncio.run(older.close())


def test_a_worker_refuses_a_database_overwritten_under_its_group(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    owner = _opened(database, 1)
    worker = _opened(database, 0, shared=True)
    overwrite(database, other_database(tmp_path / "other.sqlite"))
    _refuses_everything(worker, "late")
    asyncio.run(worker.close())
    asyncio.run(owner.close())
    with contextlib.closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]
    assert not sibling(database, "-wal").exists()


def test_files_put_back_in_place_are_served_again(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    storage = _opened(database)
    away = database.rename(tmp_path / "away.sqlite")
    _refuses_everything(storage, "late")
    away.rename(database)

    async def again() -> None:
        await storage.insert_evaluation(evaluation("back"))
        assert await storage.get_evaluation(f"{APP}/evaluations/back") is not None
        await storage.close()

    asyncio.run(again())
    assert f"{APP}/evaluations/back" in stored_names(database)


def test_a_write_whose_files_change_during_its_commit_is_not_acknowledged(tmp_path: Path) -> None:
    """The check after the commit: the batch reached files that are no longer the database's,
    so its callers are refused, as if it had failed."""
    path = tmp_path / "db.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    checks: list[str] = []

    def verify() -> None:
        checks.append("check")
        if len(checks) == 3:  # after COMMIT
            raise sqlite3.OperationalError("the database file was replaced")

    writer = GroupCommitWriter(
        lambda: sqlite3.connect(path, isolation_level=None, check_same_thread=False),
        verify=verify,
    )
    writer.start()

    def insert(connection: sqlite3.Connection) -> int:
        connection.execute("INSERT INTO t VALUES (1)")
        return 1

    async def scenario() -> None:
        with pytest.raises(sqlite3.OperationalError, match="replaced"):
            await writer.submit(insert)

    asyncio.run(scenario())
    writer.stop()
    assert checks == ["check"] * 3


def test_a_refused_batch_never_begins_a_transaction(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    statements: list[str] = []

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.set_trace_callback(statements.append)
        return connection

    def verify() -> None:
        raise sqlite3.OperationalError("the database file was removed")

    writer = GroupCommitWriter(connect, verify=verify)
    writer.start()

    async def scenario() -> None:
        with pytest.raises(sqlite3.OperationalError, match="removed"):
            await writer.submit(lambda connection: connection.execute("SELECT 1"))

    asyncio.run(scenario())
    writer.stop()
    assert statements == []


def test_a_second_owner_is_refused_by_the_database_file_itself(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    first = _opened(database)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "db.sqlite",
        "db.sqlite-shm",
        "db.sqlite-wal",
    ]  # no lock file to remove
    second = SqliteStorage(database)
    with pytest.raises(InUse, match="in use by another ces-eval server"):
        asyncio.run(second.open())
    asyncio.run(first.close())
    asyncio.run(second.open())  # released on close
    asyncio.run(second.close())


def test_a_worker_opens_only_a_file_its_owner_holds(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    asyncio.run(_opened(database).close())
    alone = SqliteStorage(database, shared=True)
    with pytest.raises(Unavailable, match="not held by a ces-eval server"):
        asyncio.run(alone.open())
    missing = SqliteStorage(tmp_path / "missing.sqlite", shared=True)
    with pytest.raises(Unavailable, match="does not exist"):
        asyncio.run(missing.open())
    assert not (tmp_path / "missing.sqlite").exists()

    owner = SqliteStorage(database)
    asyncio.run(owner.open())
    worker = SqliteStorage(database, shared=True)

    async def work() -> None:
        await worker.open()
        assert await worker.get_evaluation(f"{APP}/evaluations/e0") is not None
        await worker.insert_evaluation(evaluation("by-worker"))
        await worker.close()

    asyncio.run(work())
    asyncio.run(owner.close())
    assert f"{APP}/evaluations/by-worker" in stored_names(database)


def test_no_database_is_started_beside_a_log_left_without_its_own(tmp_path: Path) -> None:
    """A log whose database is gone (its server crashed after the file was removed) would be
    replayed into a new file at the path: the storage refuses to start there."""
    running = _opened(tmp_path / "db.sqlite")
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    shutil.copy(tmp_path / "db.sqlite-wal", orphan / "db.sqlite-wal")
    asyncio.run(running.close())
    storage = SqliteStorage(orphan / "db.sqlite")
    with pytest.raises(Unavailable, match=r"write-ahead log .* does"):
        asyncio.run(storage.open())
    assert not (orphan / "db.sqlite").exists()


@pytest.mark.external  # chattr (e2fsprogs)
def test_an_immutable_index_is_refused_until_it_can_be_written_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``chattr +i`` on the index: SQLite's next write through its mapping would end the
    process with SIGBUS (os.sync writes the mapped pages back, so that the next write
    faults); the storage refuses instead, and serves again once the flag is gone."""
    caplog.set_level(logging.WARNING)
    database = tmp_path / "db.sqlite"
    storage = _opened(database)
    os.sync()
    with immutable(sibling(database, "-shm")):
        _refuses_everything(storage, "late")
        assert "made immutable or append-only (chattr)" in caplog.text

    async def again() -> None:
        await storage.insert_evaluation(evaluation("after"))
        await storage.ping()
        await storage.close()

    asyncio.run(again())
    assert "are again the ones the server opened" in caplog.text
    assert f"{APP}/evaluations/after" in stored_names(database)


def test_a_truncated_index_is_refused_and_never_touched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index cut short under its mapping: any access past its end is SIGBUS, closing the
    connections included (the last one checkpoints). The storage refuses every call and
    leaves its connections open (this test's process survives it); the log keeps every
    write, and a new process recovers them (tests/integration/test_database_file.py)."""
    database = tmp_path / "db.sqlite"
    storage = _opened(database)
    os.truncate(sibling(database, "-shm"), 0)
    _refuses_everything(storage, "late")
    asyncio.run(storage.close())
    assert "leaving the connections to" in caplog.text
