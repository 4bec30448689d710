"""The real server's SQLite files changed under it (issue 15, items 5 and 6).

Item 5: the database file removed, moved or replaced (another file renamed over it), with or
without its write-ahead log and index, while the server runs: every later call, the health
check included, answers UNAVAILABLE (DATABASE_UNAVAILABLE over gRPC and REST), so no write is
acknowledged into files that are lost, and after a restart nothing acknowledged is missing from
wherever the database is and nothing refused is there. Removing the lock file no longer lets a
second server start on the same file; after every file is removed, a new server owns the new
file alone and the old one's shutdown leaves it alone.

Item 6: the shared-memory index made immutable (``chattr +i``, where the file system and the
privileges allow it) or cut short: the server answers UNAVAILABLE instead of dying with SIGBUS,
stops without it, and loses nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, run_serve, start_server
from tests.support.datasets import seed_large
from tests.support.load import FRESH_CONNECTION, golden_evaluation, start_export
from tests.unit.test_sqlite_files import ATTACKS, immutable, other_database, sibling

APP = "projects/files/locations/l/apps/a"
OK = ("OK", "")
REFUSED = ("UNAVAILABLE", "DATABASE_UNAVAILABLE")


def create(server: RunningServer, rest: bool, eid: str) -> tuple[str, str]:
    """Create evaluation ``eid`` on a connection of its own: ``OK`` when acknowledged, else
    the canonical code and ErrorInfo reason of the server's answer."""
    evaluation = golden_evaluation(eid)
    if rest:
        with httpx.Client(base_url=server.http_base, timeout=30) as http:
            response = http.post(
                f"/v1beta/{APP}/evaluations",
                params={"evaluationId": eid},
                json=json_format.MessageToDict(evaluation),
            )
        if response.status_code == 200:
            return OK
        error = response.json()["error"]
        return error["status"], error["details"][0]["reason"]
    with grpc.insecure_channel(server.grpc_target, options=FRESH_CONNECTION) as channel:
        try:
            service_grpc.EvaluationServiceStub(channel).CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation_id=eid, evaluation=evaluation
                ),
                timeout=30,
            )
        except grpc.RpcError as failure:
            trailers = dict(failure.trailing_metadata() or ())
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info), status
            return failure.code().name, info.reason
    return OK


def acknowledge(server: RunningServer, prefix: str, count: int = 4) -> list[str]:
    """``count`` evaluations created over gRPC and REST in turn, each acknowledged."""
    for index in range(count):
        assert create(server, index % 2 == 1, f"{prefix}{index}") == OK
    return [f"{APP}/evaluations/{prefix}{index}" for index in range(count)]


def assert_refused(server: RunningServer, prefix: str, count: int = 4) -> None:
    """Writes over gRPC and REST, a read and the health check all answer UNAVAILABLE."""
    for index in range(count):
        answer = create(server, index % 2 == 1, f"{prefix}{index}")
        assert answer == REFUSED, f"{prefix}{index} answered {answer}"
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        read = http.get(f"/v1beta/{APP}/evaluations/{prefix}0")
        health = http.get("/healthz")
    assert read.status_code == 503, read.text
    assert health.status_code == 503, health.text
    assert health.json()["reason"] == "database unavailable"


def names(server: RunningServer) -> list[str]:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        page = http.get(f"/v1beta/{APP}/evaluations", params={"orderBy": "name"}).json()
    return [e["name"] for e in page.get("evaluations", [])]


@contextmanager
def serving(database: Path, *extra: str) -> Iterator[RunningServer]:
    server = start_server(database, *extra)
    try:
        yield server
    finally:
        server.kill()


UNRECORDED = "could not record at stop that this process's unfinished operations ended"


def stop_refusing(server: RunningServer, workers: int = 1) -> None:
    """SIGTERM a server whose files changed: it stops cleanly (exit status 0, "ces-eval
    stopped"), never by a signal such as SIGBUS. Before: exit status 1, "stopped by an
    unexpected error: Unavailable", because the shutdown could not record the end of its
    operations either; now one line says so."""
    assert server.stop(signal.SIGTERM) == 0, server.output()
    output = server.output()
    assert "unexpected error" not in output, output
    assert output.count(UNRECORDED) == workers, output
    assert "ces-eval stopped" in output.splitlines(), output


def integrity(path: Path) -> None:
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


# -- item 5: removed, moved, replaced ------------------------------------------------------------


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_after_its_files_changed_the_server_acknowledges_no_write_and_loses_none(
    tmp_path: Path, attack: Callable[[Path], Path | None]
) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledged = acknowledge(server, "before")
        kept_in = attack(database)
        assert_refused(server, "late")
        assert "every call answers UNAVAILABLE" in server.output()
        stop_refusing(server)
    # Where the database's content is now (the moved file, or the file kept with a removed
    # log or index): every acknowledged write, and none refused. Elsewhere the path starts a
    # new database (or serves the file renamed over it) with nothing of the old one replayed.
    with serving(kept_in or database) as server:
        assert names(server) == (acknowledged if kept_in else [])
        assert server.stop(signal.SIGTERM) == 0
    integrity(kept_in or database)


def test_a_server_whose_file_was_removed_during_an_export_stops_cleanly(tmp_path: Path) -> None:
    """An export running when the database file goes: SIGTERM cancels it, its end cannot be
    recorded, and the server still stops at once with exit status 0 and one line naming the
    operation left unrecorded (the next start fails it)."""
    database = tmp_path / "db.sqlite"
    evaluations = seed_large(SqliteStorage(database), APP, 30, 100)
    with serving(database) as server:
        operation = start_export(server.grpc_target, APP, evaluations)
        assert not operation.done
        database.unlink()
        stop_refusing(server)
        assert f"{UNRECORDED} (1 were running)" in server.output()
    assert not list(server.export_dir.rglob("*.tmp"))


@pytest.mark.parametrize("other_kind", ["ces-eval", "plain"])
def test_a_database_overwritten_in_place_is_refused_and_the_new_content_served_intact(
    tmp_path: Path, other_kind: str
) -> None:
    """``cp other.db db.sqlite`` while serving (same inode, other content). Before: reads
    served a mix of both databases (a GET of one evaluation answered another's), writes were
    acknowledged, and the stop checkpointed the old log into the new content, which was left
    malformed (the plain case: 500s and exit status 1). Now every call answers UNAVAILABLE, the
    stop is clean, and the next start serves the new content as it was copied."""
    other = tmp_path / "other" / "db.sqlite"
    other.parent.mkdir()
    if other_kind == "ces-eval":
        with serving(other) as theirs:
            expected = acknowledge(theirs, "theirs", 6)
            assert theirs.stop(signal.SIGTERM) == 0
    else:
        other_database(other)
        expected = []
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledge(server, "mine", 6)
        assert server.stop(signal.SIGTERM) == 0  # checkpointed: the file holds the pages
    with serving(database) as server:
        acknowledge(server, "more", 1)  # only in the log
        inode = database.stat().st_ino
        shutil.copyfile(other, database)
        assert database.stat().st_ino == inode
        assert_refused(server, "late")
        assert "was overwritten while the server had it open" in server.output()
        stop_refusing(server)
    assert not sibling(database, "-wal").exists()
    with serving(database) as server:
        assert names(server) == expected
        assert server.stop(signal.SIGTERM) == 0
    integrity(database)
    if other_kind == "plain":
        with closing(sqlite3.connect(database)) as connection:
            assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]


def test_a_worker_group_refuses_a_database_overwritten_in_place(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database, "--workers", "2") as group:
        acknowledge(group, "before")
        shutil.copyfile(other_database(tmp_path / "other.sqlite"), database)
        assert_refused(group, "late", count=8)  # connections of their own: both workers
        stop_refusing(group, workers=2)
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]


def test_removing_the_lock_file_no_longer_lets_a_second_server_start(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        sibling(database, ".lock").unlink(missing_ok=True)  # where an older server kept one
        for extra in ([], ["--workers", "2"]):
            second = run_serve(f"sqlite:///{database}", *extra)
            assert second.returncode == 1, second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, second.stderr
            assert "in use by another ces-eval server" in lines[0]
        assert create(server, False, "unharmed") == OK
        assert server.stop(signal.SIGTERM) == 0


def test_after_every_file_is_removed_a_new_server_owns_the_new_database_alone(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as first:
        acknowledge(first, "old")
        for suffix in ("", "-wal", "-shm", ".lock"):
            sibling(database, suffix).unlink(missing_ok=True)
        with serving(database) as second:  # a new database at the path
            kept = acknowledge(second, "new", 2)
            assert_refused(first, "late")
            stop_refusing(first)
            # The first server's shutdown left the second one's log and index alone.
            kept += acknowledge(second, "after", 2)
            with httpx.Client(base_url=second.http_base, timeout=30) as http:
                assert http.get("/healthz").status_code == 200
            assert second.stop(signal.SIGTERM) == 0
    with serving(database) as third:
        assert names(third) == sorted(kept)
        assert third.stop(signal.SIGTERM) == 0
    integrity(database)


def test_a_file_renamed_over_a_running_servers_database_is_not_served_twice(
    tmp_path: Path,
) -> None:
    """Another file renamed over the path while the log and index there are still the
    running server's: a second server is refused (it would replay that log into the new
    file); once the first stopped, which removes its log and index, the file is served."""
    database = tmp_path / "db.sqlite"
    with serving(database) as first:
        acknowledge(first, "old")
        other_database(tmp_path / "other.sqlite").rename(database)
        second = run_serve(f"sqlite:///{database}")
        assert second.returncode == 1, second.stderr
        assert "in use by another ces-eval server" in second.stderr
        assert_refused(first, "late")
        stop_refusing(first)
    assert not sibling(database, "-wal").exists()
    with serving(database) as server:
        assert names(server) == []
        assert server.stop(signal.SIGTERM) == 0
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT a FROM x").fetchall() == [(42,)]


def test_a_worker_group_acknowledges_no_write_once_its_file_is_removed(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database, "--workers", "2") as group:
        acknowledge(group, "before")
        database.unlink()
        assert_refused(group, "late", count=8)  # connections of their own: both workers
        stop_refusing(group, workers=2)


# -- item 6: the shared-memory index -------------------------------------------------------------


@pytest.mark.external  # chattr (e2fsprogs)
def test_an_immutable_index_answers_unavailable_instead_of_killing_the_server(
    tmp_path: Path,
) -> None:
    """Before: the next write through the mapping of the immutable ``-shm`` ended the server
    with SIGBUS (``os.sync`` writes the mapped pages back, so that the next write faults)."""
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledged = acknowledge(server, "before")
        os.sync()
        with immutable(sibling(database, "-shm")):
            assert_refused(server, "late")
            assert server.process.poll() is None
        acknowledged += acknowledge(server, "after", 2)  # writable again: no restart needed
        assert server.stop(signal.SIGTERM) == 0
    with serving(database) as server:
        assert names(server) == sorted(acknowledged)
        assert server.stop(signal.SIGTERM) == 0


@pytest.mark.external  # chattr (e2fsprogs)
def test_an_immutable_log_refuses_writes_and_they_recover(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledged = acknowledge(server, "before")
        with immutable(sibling(database, "-wal")):
            for index in range(4):
                assert create(server, index % 2 == 1, f"late{index}") == REFUSED
        acknowledged += acknowledge(server, "after", 2)
        assert server.stop(signal.SIGTERM) == 0
    with serving(database) as server:
        assert names(server) == sorted(acknowledged)
        assert server.stop(signal.SIGTERM) == 0


def test_an_index_cut_short_answers_unavailable_and_the_server_stops_without_sigbus(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledged = acknowledge(server, "before")
        os.truncate(sibling(database, "-shm"), 0)
        assert_refused(server, "late")
        stop_refusing(server)
        assert "leaving the connections to" in server.output()
    with serving(database) as server:  # the log had every acknowledged write
        assert names(server) == acknowledged
        assert server.stop(signal.SIGTERM) == 0
    integrity(database)


@pytest.mark.external  # chattr (e2fsprogs)
def test_a_server_does_not_start_on_an_immutable_index(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    with serving(database) as server:
        acknowledged = acknowledge(server, "before")
        server.process.send_signal(signal.SIGKILL)  # leaves the log and index behind
    with immutable(sibling(database, "-shm")):
        refused = run_serve(f"sqlite:///{database}")
        assert refused.returncode == 1, refused.stderr
        assert "--database: cannot open" in refused.stderr
        assert "Traceback" not in refused.stderr
    with serving(database) as server:
        assert names(server) == acknowledged
        assert server.stop(signal.SIGTERM) == 0
