"""The operation runner over a real SQLite file: completion, failure, cancellation, recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ces_eval.core.derived import derive
from ces_eval.core.operations import OperationRunner
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage

PARENT = "projects/p/locations/l"


def test_lifecycle(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite", derive=derive)
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
        assert await OperationRunner(storage).recover() == 1
        recovered = await storage.get_operation(orphan.name)
        assert recovered is not None
        assert recovered.error.code == code_pb2.ABORTED
        await runner.shutdown()
        listed = await storage.list_operations(PARENT, 10, None, done=False)
        assert listed == []
        await storage.close()

    asyncio.run(scenario())
