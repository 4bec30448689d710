"""No operation is stored larger than every client reads (limits.MAX_RESOURCE_BYTES), whatever
its work answers: the runner's last resort (limits.bound_operation) behind each work's own bounds,
over a real SQLite file. Before it, a response of 5 MB was stored whole, and GetOperation over
gRPC answered RESOURCE_EXHAUSTED (the client's 4 MiB receive limit)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.longrunning import operations_pb2
from google.rpc import code_pb2, error_details_pb2

from ces_eval.contract import limits
from ces_eval.core.io.operations import OperationRunner
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage

PARENT = "projects/p/locations/l"
HUGE = "x" * (limits.MAX_RESOURCE_BYTES + 1)


def _finished(
    tmp_path: Path, response: service_pb2.ImportEvaluationsResponse, status: str = ""
) -> operations_pb2.Operation:
    async def scenario() -> operations_pb2.Operation:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        runner = OperationRunner(storage)
        metadata = service_pb2.ImportEvaluationsOperationMetadata()

        async def work() -> service_pb2.ImportEvaluationsResponse:
            metadata.status_message = status
            return response

        started = await runner.start(PARENT, "ImportEvaluations", metadata, work)
        done = await runner.wait(started.name, timeout=30)
        await runner.shutdown()
        await storage.close()
        assert done is not None and done.done
        return done

    return asyncio.run(scenario())


def test_a_response_over_the_bound_is_stored_as_an_error_that_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    done = _finished(tmp_path, service_pb2.ImportEvaluationsResponse(error_messages=[HUGE]))
    assert done.ByteSize() <= limits.MAX_RESOURCE_BYTES
    assert not done.HasField("response")
    assert done.error.code == code_pb2.RESOURCE_EXHAUSTED
    info = error_details_pb2.ErrorInfo()
    assert done.error.details[0].Unpack(info)
    assert info.reason == "RESPONSE_TOO_LARGE"
    assert int(info.metadata["size"]) > limits.MAX_RESOURCE_BYTES
    assert info.metadata["limit"] == str(limits.MAX_RESOURCE_BYTES)
    metadata = service_pb2.ImportEvaluationsOperationMetadata()
    assert done.metadata.Unpack(metadata) and metadata.HasField("end_time")  # kept
    assert "Traceback" not in caplog.text


def test_metadata_over_the_bound_is_emptied(tmp_path: Path) -> None:
    done = _finished(tmp_path, service_pb2.ImportEvaluationsResponse(), status=HUGE)
    assert done.ByteSize() <= limits.MAX_RESOURCE_BYTES
    assert done.error.code == code_pb2.RESOURCE_EXHAUSTED
    metadata = service_pb2.ImportEvaluationsOperationMetadata()
    assert done.metadata.Unpack(metadata) and metadata.status_message == ""


def test_an_operation_within_the_bound_is_kept_as_it_is(tmp_path: Path) -> None:
    near = "x" * (limits.MAX_RESOURCE_BYTES - 4096)
    done = _finished(tmp_path, service_pb2.ImportEvaluationsResponse(error_messages=[near]))
    response = service_pb2.ImportEvaluationsResponse()
    assert done.response.Unpack(response) and response.error_messages == [near]
