"""Two ``ces-eval serve`` replicas on one PostgreSQL database (issue: stateless replicas).

Nothing about correctness may depend on which replica serves a request: the official client's
scenario alternates between them, conditional writes race across them, page tokens and
operations cross them, and a replica killed with SIGKILL loses no acknowledged write and leaves
no operation running.
"""

from __future__ import annotations

import concurrent.futures
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import httpx
import psycopg
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import field_mask_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from psycopg import sql

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.testing.server import RunningServer, start_server
from tests.integration import test_scheduler as scheduling
from tests.integration.test_official_client import check_steps, run_scenario
from tests.integration.test_official_engine import run_engine_scenario
from tests.integration.test_official_runs import check_runs_steps, run_runs_scenario
from tests.support.datasets import seed_large
from tests.support.load import CreateLoad, golden_evaluation, start_export
from tests.support.postgres import PostgresCluster

APP = "projects/replicas/locations/l/apps/a"
LEASE = "1.5"  # seconds: how long an operation outlives a replica that stopped renewing it


def _start(tmp_path: Path, url: str, label: str) -> RunningServer:
    return start_server(
        tmp_path / label / "unused.db",
        "--operation-lease",
        LEASE,
        database_url=url,
        export_dir=tmp_path / "exports",  # shared, as a bucket would be
    )


@pytest.fixture
def replicas(tmp_path: Path, postgres_url: str) -> Iterator[tuple[RunningServer, RunningServer]]:
    """Two replicas started at the same moment (their migrations race)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda label: _start(tmp_path, postgres_url, label), "ab")
    try:
        yield first, second
    finally:
        first.kill()
        second.kill()


def _reason(error: grpc.RpcError) -> str:
    status = status_pb2.Status()
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_official_client_scenario_alternating_between_replicas(
    replicas: tuple[RunningServer, RunningServer], transport: str
) -> None:
    first, second = replicas
    check_steps(run_scenario([first, second], transport), transport, first.export_dir)


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_evaluation_runs_alternating_between_replicas(
    replicas: tuple[RunningServer, RunningServer], transport: str
) -> None:
    """Runs seeded on one replica are read, exported and deleted through the other."""
    first, second = replicas
    check_runs_steps(run_runs_scenario([first, second], transport), first)


def test_evaluations_run_with_calls_alternating_between_replicas(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    """The run workflow (scripted outcomes, holds, cancellation) with every call going to the
    other replica than the one before: a run one replica plays is polled, released and
    cancelled through the other."""
    run_engine_scenario(list(replicas), "grpc")


def test_writes_page_tokens_and_etags_cross_replicas(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    with (
        grpc.insecure_channel(replicas[0].grpc_target) as a,
        grpc.insecure_channel(replicas[1].grpc_target) as b,
    ):
        stubs = [service_grpc.EvaluationServiceStub(a), service_grpc.EvaluationServiceStub(b)]
        created = [
            stubs[i % 2].CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation(f"E{i}")
                ),
                timeout=10,
            )
            for i in range(7)
        ]
        # Each page from the other replica, resuming from the previous one's token.
        listed: list[str] = []
        token = ""
        turn = 0
        while True:
            page = stubs[turn % 2].ListEvaluations(
                service_pb2.ListEvaluationsRequest(
                    parent=APP, page_size=2, page_token=token, order_by="name"
                ),
                timeout=10,
            )
            listed += [e.name for e in page.evaluations]
            token, turn = page.next_page_token, turn + 1
            if not token:
                break
        assert listed == sorted(e.name for e in created)
        assert turn == 4

        # An etag read on one replica is honoured, and then stale, on the other.
        read = stubs[0].GetEvaluation(
            service_pb2.GetEvaluationRequest(name=created[0].name), timeout=10
        )
        change = evaluation_pb2.Evaluation(name=read.name, etag=read.etag, description="new")
        mask = field_mask_pb2.FieldMask(paths=["description"])
        stubs[1].UpdateEvaluation(
            service_pb2.UpdateEvaluationRequest(evaluation=change, update_mask=mask), timeout=10
        )
        with pytest.raises(grpc.RpcError) as stale:
            stubs[0].UpdateEvaluation(
                service_pb2.UpdateEvaluationRequest(evaluation=change, update_mask=mask),
                timeout=10,
            )
        assert stale.value.code() == grpc.StatusCode.ABORTED
        assert _reason(stale.value) == "ETAG_MISMATCH"


def test_dataset_references_cross_replicas(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    """A dataset written through one replica is what the other serves: the evaluations it
    lists name it, deleting one of them needs force there, and force takes it out."""
    with (
        grpc.insecure_channel(replicas[0].grpc_target) as a,
        grpc.insecure_channel(replicas[1].grpc_target) as b,
    ):
        first, second = service_grpc.EvaluationServiceStub(a), service_grpc.EvaluationServiceStub(b)
        evaluations = [
            first.CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation(f"Listed {i}")
                ),
                timeout=10,
            ).name
            for i in range(2)
        ]
        dataset = first.CreateEvaluationDataset(
            service_pb2.CreateEvaluationDatasetRequest(
                parent=APP,
                evaluation_dataset=evaluation_pb2.EvaluationDataset(
                    display_name="Shared", evaluations=evaluations
                ),
            ),
            timeout=10,
        )
        read = second.GetEvaluation(
            service_pb2.GetEvaluationRequest(name=evaluations[0]), timeout=10
        )
        assert list(read.evaluation_datasets) == [dataset.name]
        with pytest.raises(grpc.RpcError) as in_use:
            second.DeleteEvaluation(
                service_pb2.DeleteEvaluationRequest(name=evaluations[0]), timeout=10
            )
        assert in_use.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert _reason(in_use.value) == "EVALUATION_IN_USE"
        second.DeleteEvaluation(
            service_pb2.DeleteEvaluationRequest(name=evaluations[0], force=True), timeout=10
        )
        after = first.GetEvaluationDataset(
            service_pb2.GetEvaluationDatasetRequest(name=dataset.name), timeout=10
        )
        assert list(after.evaluations) == evaluations[1:]
        assert after.etag != dataset.etag


def test_concurrent_updates_one_winner_per_etag_and_no_lost_update(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    rounds, writers = 5, 8
    with (
        grpc.insecure_channel(replicas[0].grpc_target) as a,
        grpc.insecure_channel(replicas[1].grpc_target) as b,
        concurrent.futures.ThreadPoolExecutor(writers) as pool,
    ):
        stubs = [service_grpc.EvaluationServiceStub(a), service_grpc.EvaluationServiceStub(b)]
        name = (
            stubs[0]
            .CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation("Race")
                ),
                timeout=10,
            )
            .name
        )
        winners: list[str] = []
        for round_index in range(rounds):
            etag = stubs[1].GetEvaluation(service_pb2.GetEvaluationRequest(name=name)).etag
            start = threading.Barrier(writers)

            def update(
                writer: int,
                etag: str = etag,
                round_index: int = round_index,
                start: threading.Barrier = start,
            ) -> str:
                description = f"round {round_index} writer {writer}"
                change = evaluation_pb2.Evaluation(name=name, etag=etag, description=description)
                start.wait(10)
                try:
                    stubs[writer % 2].UpdateEvaluation(
                        service_pb2.UpdateEvaluationRequest(
                            evaluation=change,
                            update_mask=field_mask_pb2.FieldMask(paths=["description"]),
                        ),
                        timeout=10,
                    )
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.ABORTED, error
                    assert _reason(error) == "ETAG_MISMATCH"
                    return ""
                return description

            outcomes = [o for o in pool.map(update, range(writers)) if o]
            assert len(outcomes) == 1, outcomes
            winners += outcomes
            for stub in stubs:  # the winner's write is what both replicas read
                stored = stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name))
                assert stored.description == outcomes[0]
                assert stored.etag != etag
        assert len(winners) == rounds

        # Without an etag the last write wins: every writer succeeds, none is ABORTED.
        blind_start = threading.Barrier(writers)

        def blind(writer: int) -> None:
            change = evaluation_pb2.Evaluation(name=name, description=f"blind {writer}")
            blind_start.wait(10)
            stubs[writer % 2].UpdateEvaluation(
                service_pb2.UpdateEvaluationRequest(
                    evaluation=change, update_mask=field_mask_pb2.FieldMask(paths=["description"])
                ),
                timeout=10,
            )

        list(pool.map(blind, range(writers)))
        final = stubs[0].GetEvaluation(service_pb2.GetEvaluationRequest(name=name))
        assert final.description in {f"blind {writer}" for writer in range(writers)}


def test_parallel_creates_with_one_display_name_one_succeeds(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    count = 20
    with (
        grpc.insecure_channel(replicas[0].grpc_target) as a,
        grpc.insecure_channel(replicas[1].grpc_target) as b,
        concurrent.futures.ThreadPoolExecutor(count) as pool,
    ):
        stubs = [service_grpc.EvaluationServiceStub(a), service_grpc.EvaluationServiceStub(b)]
        start = threading.Barrier(count)

        def create(index: int) -> str:
            start.wait(10)
            try:
                return (
                    stubs[index % 2]
                    .CreateEvaluation(
                        service_pb2.CreateEvaluationRequest(
                            parent=APP,
                            evaluation=golden_evaluation("Same name"),
                            evaluation_id=f"e{index}",
                        ),
                        timeout=10,
                    )
                    .name
                )
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.ALREADY_EXISTS, error
                return ""

        created = [name for name in pool.map(create, range(count)) if name]
        assert len(created) == 1
        listed = stubs[1].ListEvaluations(service_pb2.ListEvaluationsRequest(parent=APP))
        assert [e.name for e in listed.evaluations] == created


def test_sigkill_of_a_replica_during_writes_loses_no_acknowledged_write(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    doomed, survivor = replicas
    # Two writers on the replica that dies (their errors after the kill are expected), one on
    # the survivor (any error fails the test).
    load = CreateLoad(
        [doomed.grpc_target, doomed.grpc_target, survivor.grpc_target],
        APP,
        tolerate=[doomed.grpc_target],
    )
    load.wait_for(60)
    doomed.process.send_signal(signal.SIGKILL)
    time.sleep(0.3)  # the survivor keeps writing after the kill
    acknowledged = load.stop()
    doomed.kill()

    with grpc.insecure_channel(survivor.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        for name in acknowledged:
            stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name), timeout=10)


def _get_operation(server: RunningServer, name: str) -> operations_pb2.Operation:
    with grpc.insecure_channel(server.grpc_target) as channel:
        return operations_pb2_grpc.OperationsStub(channel).GetOperation(
            operations_pb2.GetOperationRequest(name=name), timeout=10
        )


def _start_export(server: RunningServer, names: list[str]) -> operations_pb2.Operation:
    operation = start_export(server.grpc_target, APP, names)
    assert not operation.done
    return operation


def _wait_done(server: RunningServer, name: str, seconds: float) -> operations_pb2.Operation:
    deadline = time.monotonic() + seconds
    while True:
        operation = _get_operation(server, name)
        if operation.done or time.monotonic() > deadline:
            return operation
        time.sleep(0.1)


def test_export_of_a_killed_replica_ends_and_cancel_crosses_replicas(
    tmp_path: Path, postgres_url: str
) -> None:
    names = seed_large(PostgresStorage(postgres_url), APP, 30, 100)
    doomed, survivor = _start(tmp_path, postgres_url, "a"), _start(tmp_path, postgres_url, "b")
    try:
        # Cancelling through the other replica reaches the owner at its next lease renewal.
        cancelled = _start_export(doomed, names)
        with grpc.insecure_channel(survivor.grpc_target) as channel:
            operations_pb2_grpc.OperationsStub(channel).CancelOperation(
                operations_pb2.CancelOperationRequest(name=cancelled.name), timeout=10
            )
        ended = _wait_done(survivor, cancelled.name, 30)
        assert ended.done
        assert ended.error.code == code_pb2.CANCELLED

        # The owner dies mid-export: the survivor fails the operation once the lease runs out.
        orphan = _start_export(doomed, names)
        time.sleep(0.3)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.kill()
        killed_at = time.monotonic()
        failed = _wait_done(survivor, orphan.name, 30)
        assert failed.done, "the export of the killed replica was left running"
        assert failed.error.code == code_pb2.ABORTED
        assert time.monotonic() - killed_at < 10

        # The survivor's own export still works, and the load balancer sees it healthy.
        fresh = _start_export(survivor, names[:2])
        assert _wait_done(survivor, fresh.name, 60).response.value
        with urllib.request.urlopen(survivor.http_base + "/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        doomed.kill()
        survivor.kill()


def test_schedules_and_runs_across_replicas(tmp_path: Path, postgres_url: str) -> None:
    """A schedule made due on one replica fires once though both replicas' schedulers look;
    a run is played by the replica that started it and seen from the other; when that replica
    is killed mid-run, the other ends its operation (ABORTED, once the lease ran out) and the
    run (ERROR), never leaving it RUNNING."""
    first, second = _start(tmp_path, postgres_url, "a"), _start(tmp_path, postgres_url, "b")
    try:
        with (
            httpx.Client(base_url=first.http_base, timeout=30) as one,
            httpx.Client(base_url=second.http_base, timeout=30) as other,
        ):
            schedule = scheduling.seed(other, datetime.now(UTC) + timedelta(hours=1))
            scheduling.as_json(
                one.post(
                    f"/emulator/v1/projects/{scheduling.PROJECT}/clock:advance",
                    json={"by": "7200s"},
                )
            )
            time.sleep(scheduling.LOOKS)  # both replicas' schedulers see the moved clock
            [run] = scheduling.runs(other)
            assert run["scheduledEvaluationRun"] == schedule["name"]
            scheduling.until(
                lambda: (
                    scheduling.as_json(other.get(f"/v1beta/{run['name']}"))["state"] == "COMPLETED"
                )
            )
            assert (
                scheduling.as_json(other.get(f"/v1beta/{schedule['name']}"))["totalExecutions"] == 1
            )

            evaluation = schedule["request"]["evaluations"][0]
            scheduling.as_json(
                other.post(
                    f"/emulator/v1/{scheduling.APP}/outcomeRules",
                    json={"evaluation": evaluation, "hold": "RUNNING"},
                )
            )
            operation = scheduling.as_json(
                one.post(
                    f"/v1beta/{scheduling.APP}:runEvaluation", json={"evaluations": [evaluation]}
                )
            )
            held = operation["metadata"]["evaluationRun"]
            scheduling.until(
                lambda: scheduling.as_json(other.get(f"/v1beta/{held}"))["state"] == "RUNNING"
            )
            first.kill()
            ended = scheduling.until(
                lambda: (
                    scheduling.as_json(other.get(f"/v1beta/{operation['name']}")).get("done")
                    and scheduling.as_json(other.get(f"/v1beta/{operation['name']}"))
                )
            )
            assert ended["error"]["code"] == code_pb2.ABORTED
            found = scheduling.as_json(other.get(f"/v1beta/{held}"))
            assert found["state"] == "ERROR" and found["errorInfo"]["errorMessage"], found
    finally:
        first.kill()
        second.kill()


def _health(server: RunningServer) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(server.http_base + "/healthz", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_database_outage_answers_unavailable_then_recovers(
    tmp_path: Path, postgres_url: str, postgres_cluster: PostgresCluster
) -> None:
    server = _start(tmp_path, postgres_url, "a")
    database = urlsplit(postgres_url).path.lstrip("/")
    admin = psycopg.connect(postgres_cluster.admin_url, autocommit=True)
    try:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = service_grpc.EvaluationServiceStub(channel)
            created = stub.CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation("Kept")
                ),
                timeout=10,
            )
            # The database goes away: no new connections, existing ones cut.
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(
                    sql.Identifier(database)
                )
            )
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database,),
            )
            assert _health(server) == (
                503,
                {"status": "NOT_SERVING", "reason": "database unavailable"},
            )
            with pytest.raises(grpc.RpcError) as outage:
                stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=created.name), timeout=30)
            assert outage.value.code() == grpc.StatusCode.UNAVAILABLE
            assert _reason(outage.value) == "DATABASE_UNAVAILABLE"

            # It comes back: the replica serves again without a restart, data intact.
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(database))
            )
            deadline = time.monotonic() + 30
            while _health(server)[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _health(server) == (200, {"status": "SERVING"})
            again = stub.GetEvaluation(
                service_pb2.GetEvaluationRequest(name=created.name), timeout=30
            )
            assert again == created
    finally:
        admin.close()
        server.kill()
