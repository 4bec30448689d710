"""SQLite storage and the operation runner on a database that is full.

SQLite's ``max_page_count`` makes a real database refuse to grow, answering SQLITE_FULL
("database or disk is full") exactly as on a full disk, without privileges or a small file
system; raising it is space coming back. The subprocess tests with a file size limit and a full
tmpfs are in tests/integration/test_faults.py.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest
from google.rpc import code_pb2

from ces_eval.core.io.operations import OperationRunner
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import ListQuery, OrderBy, SortKey, Unavailable
from ces_eval.storage.sqlite import SqliteStorage

APP = "projects/p/locations/l/apps/a"
_NO_CAP = (1 << 30) - 1  # SQLite's default max_page_count on every supported version


def _evaluation(eid: str) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(
        name=f"{APP}/evaluations/{eid}", display_name=eid, etag=f"etag-{eid}"
    )
    message.create_time.FromSeconds(1_700_000_000)
    message.update_time.FromSeconds(1_700_000_000)
    message.golden.turns.add().steps.add().user_input.text = "x" * 2000
    return message


async def _cap(storage: SqliteStorage, extra_pages: int | None) -> None:
    """Let the file grow by ``extra_pages`` more pages from now (None: without limit). The cap
    belongs to a connection: it is set on the writer's, through the writer."""

    def work(connection: sqlite3.Connection) -> None:
        pages = _NO_CAP
        if extra_pages is not None:
            pages = connection.execute("PRAGMA page_count").fetchone()[0] + extra_pages
        connection.execute(f"PRAGMA max_page_count = {pages}")

    await storage._transact(work)


async def _fill(storage: SqliteStorage, prefix: str) -> list[str]:
    """Insert evaluations until the database is full; the names stored."""
    stored: list[str] = []
    for index in range(1000):
        evaluation = _evaluation(f"{prefix}{index}")
        try:
            await storage.insert_evaluation(evaluation)
        except Unavailable:
            return stored
        stored.append(evaluation.name)
    raise AssertionError("the database never filled up")


def _integrity(path: Path) -> list[tuple[str]]:
    with sqlite3.connect(path) as check:
        rows = check.execute("PRAGMA integrity_check").fetchall()
    check.close()
    return rows


def test_writes_to_a_full_database_are_unavailable_reads_go_on_and_writes_recover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ces_eval.storage.sqlite")

    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        await _cap(storage, 4)
        stored = await _fill(storage, "a")
        assert stored, "some writes fit before the database filled up"
        refused = _evaluation("refused")
        for _ in range(3):
            with pytest.raises(Unavailable, match="database or disk is full"):
                await storage.insert_evaluation(refused)
        # Reads are served as before.
        assert await storage.get_evaluation(stored[0]) is not None
        listed = await storage.list_evaluations(
            ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 1000)
        )
        assert sorted(e.name for e, _ in listed) == sorted(stored)

        await _cap(storage, None)  # space returns: no reopening needed
        await storage.insert_evaluation(refused)
        assert await storage.get_evaluation(refused.name) == refused
        await storage.close()

    asyncio.run(scenario())
    assert _integrity(tmp_path / "db.sqlite") == [("ok",)]
    # The log says once that writes fail and why, and once that they succeed again.
    messages = [record.getMessage() for record in caplog.records]
    failing = [m for m in messages if "cannot store writes" in m]
    assert len(failing) == 1
    assert "database or disk is full" in failing[0]
    assert sum("stores writes" in m and "again" in m for m in messages) == 1


def test_an_operation_whose_end_cannot_be_stored_ends_once_the_database_takes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ces_eval.core.io.operations")

    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        runner = OperationRunner(storage)

        async def work() -> service_pb2.ExportEvaluationsResponse:
            await _cap(storage, 2)
            await _fill(storage, "f")
            # A response larger than the room left: its operation cannot be finished now.
            return service_pb2.ExportEvaluationsResponse(evaluations_content=bytes(64_000))

        operation = await runner.start(
            "projects/p/locations/l", "Export", service_pb2.OperationMetadata(), work
        )
        for _ in range(3000):  # until the runner has tried and failed to record the end
            if any("cannot record the end" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the runner never tried to record the end")
        still = await storage.get_operation(operation.name)
        assert still is not None
        assert not still.done

        await _cap(storage, None)
        finished = await runner.wait(operation.name, timeout=60)
        assert finished is not None
        assert finished.done
        assert finished.error.code == code_pb2.OK
        response = service_pb2.ExportEvaluationsResponse()
        assert finished.response.Unpack(response)
        assert len(response.evaluations_content) == 64_000
        await runner.shutdown()
        await storage.close()

    asyncio.run(scenario())
    assert _integrity(tmp_path / "db.sqlite") == [("ok",)]
