"""The operation runner over a real SQLite file: completion, failure, cancellation, recovery,
and the leases through which runners of several processes see each other's operations."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ces_eval.core.io.operations import OperationRunner
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage

PARENT = "projects/p/locations/l"


def test_lifecycle(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        runner = OperationRunner(storage, concurrency=1)
        release = asyncio.Event()

        async def slow() -> service_pb2.RunEvaluationResultMetricsResponse:
            await release.wait()
            return service_pb2.RunEvaluationResultMetricsResponse(status=1)

        async def failing() -> empty_pb2.Empty:
            raise ServiceError.not_found("ces.googleapis.com/Evaluation", "x")

        metadata = service_pb2.OperationMetadata()
        finished = await runner.start(PARENT, "M", metadata, slow)
        cancelled = await runner.start(PARENT, "M", service_pb2.OperationMetadata(), slow)
        failed = await runner.start(PARENT, "M", service_pb2.OperationMetadata(), failing)
        assert finished.name.startswith(PARENT + "/operations/")
        assert not (await storage.get_operation(finished.name)).done  # type: ignore[union-attr]

        await runner.cancel(cancelled.name)
        release.set()
        done = await runner.wait(finished.name, timeout=10)
        assert done is not None
        assert done.done
        response = service_pb2.RunEvaluationResultMetricsResponse()
        assert done.response.Unpack(response)
        assert response.status == 1
        meta = service_pb2.OperationMetadata()
        assert done.metadata.Unpack(meta)
        assert meta.create_time.seconds > 0
        assert meta.end_time.ToNanoseconds() >= meta.create_time.ToNanoseconds()

        stopped = await runner.wait(cancelled.name, timeout=10)
        assert stopped is not None
        assert stopped.error.code == code_pb2.CANCELLED
        assert stopped.metadata.Unpack(meta)
        assert meta.requested_cancellation

        broken = await runner.wait(failed.name, timeout=10)
        assert broken is not None
        assert broken.error.code == code_pb2.NOT_FOUND

        # A process that died left an operation running: the next start fails it.
        orphan = await runner.start(
            PARENT, "M", service_pb2.OperationMetadata(), asyncio.Event().wait
        )
        await asyncio.sleep(0)
        restarted = OperationRunner(storage)
        assert await restarted.recover() == 1
        recovered = await storage.get_operation(orphan.name)
        assert recovered is not None
        assert recovered.error.code == code_pb2.ABORTED
        await runner.shutdown()
        await restarted.shutdown()
        listed = await storage.list_operations(PARENT, 10, None, done=False)
        assert listed == []
        await storage.close()

    asyncio.run(scenario())


def test_leases_carry_cancellation_and_expiry_between_runners(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        owner = OperationRunner(storage, lease=60)
        other = OperationRunner(storage, lease=60)
        running = await owner.start(
            PARENT, "M", service_pb2.OperationMetadata(), asyncio.Event().wait
        )
        # Cancelling through a runner that does not run it only records the request ...
        await other.cancel(running.name)
        pending = await storage.get_operation(running.name)
        assert pending is not None
        assert not pending.done
        # ... which the owner acts on at its next heartbeat.
        await owner.tend()
        cancelled = await owner.wait(running.name, timeout=10)
        assert cancelled is not None
        assert cancelled.error.code == code_pb2.CANCELLED

        # An operation whose owner stopped renewing is failed by whichever runner looks next.
        orphan = await owner.start(
            PARENT, "M", service_pb2.OperationMetadata(), asyncio.Event().wait
        )
        await storage.insert_operation(
            operations_pb2.Operation(name=f"{PARENT}/operations/ghost"),
            "M",
            owner="gone",
            lease=0.05,
        )
        await asyncio.sleep(0.1)
        await other.tend()
        ghost = await storage.get_operation(f"{PARENT}/operations/ghost")
        assert ghost is not None
        assert ghost.done
        assert ghost.error.code == code_pb2.ABORTED
        alive = await storage.get_operation(orphan.name)  # renewed by its owner: untouched
        assert alive is not None
        assert not alive.done
        await owner.shutdown()
        await other.shutdown()
        stopped = await storage.get_operation(orphan.name)
        assert stopped is not None
        assert stopped.error.code == code_pb2.UNAVAILABLE
        await storage.close()

    asyncio.run(scenario())


def test_a_caller_cancelled_while_cancel_waits_is_cancelled_at_once(tmp_path: Path) -> None:
    """CancelOperation waits (up to 30 s) for the work to stop; when the caller itself is
    cancelled meanwhile (its deadline passed, its client went away) that must reach it."""

    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        runner = OperationRunner(storage, concurrency=1)
        stop = asyncio.Event()

        async def stubborn() -> empty_pb2.Empty:
            while not stop.is_set():  # ignores cancellation until told to stop
                try:
                    await stop.wait()
                except asyncio.CancelledError:
                    continue
            return empty_pb2.Empty()

        started = await runner.start(PARENT, "M", service_pb2.OperationMetadata(), stubborn)
        try:
            await asyncio.sleep(0.05)
            caller = asyncio.create_task(runner.cancel(started.name))
            await asyncio.sleep(0.05)
            caller.cancel()
            done, _ = await asyncio.wait([caller], timeout=5)
            assert caller in done  # not held for the 30 s the cancel would wait
            assert caller.cancelled()
        finally:
            stop.set()  # else the stubborn work outlives a failing test
        await runner.wait(started.name, timeout=10)
        await runner.shutdown()
        await storage.close()

    asyncio.run(scenario())


def test_shutdown_ends_when_the_database_cannot_record_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database file removed under running work, then shutdown (SIGTERM): the end of the
    cancelled work cannot be stored, and shutdown neither retries it for its 30 s wait nor
    raises Unavailable (which stopped the server with exit status 1); one line says what was
    left unrecorded."""

    async def scenario() -> None:
        database = tmp_path / "db.sqlite"
        storage = SqliteStorage(database)
        await storage.open()
        runner = OperationRunner(storage)
        await runner.recover()
        await runner.start(PARENT, "M", service_pb2.OperationMetadata(), asyncio.Event().wait)
        await asyncio.sleep(0.05)
        database.unlink()
        stopping = asyncio.create_task(runner.shutdown())
        done, _ = await asyncio.wait([stopping], timeout=10)
        assert stopping in done
        stopping.result()  # raises nothing
        await storage.close()

    with caplog.at_level(logging.WARNING, logger="ces_eval.core.io.operations"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.name == "ces_eval.core.io.operations"]
    assert len(lines) == 1, lines
    assert "could not record at stop" in lines[0]
    assert "(1 were running)" in lines[0]
    assert "the next start marks them failed" in lines[0]
