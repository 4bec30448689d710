"""``ces-eval serve --workers N``: a supervisor and N worker processes sharing both ports.

Which worker serves a connection is read from /proc (the supervisor's children and the sockets
each holds on the server's ports), not from anything on the API surfaces. Linux only, as
SO_REUSEPORT's load balancing is.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import code_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, run_serve, start_server
from ces_eval.workers import RESTART_LIMIT
from tests.integration.test_official_client import check_steps, run_scenario
from tests.support.datasets import seed_large
from tests.support.load import FRESH_CONNECTION, CreateLoad, golden_evaluation, list_names
from tests.support.processes import kill_group, worker_pids

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SO_REUSEPORT balancing and /proc are Linux's"
)

APP = "projects/workers/locations/l/apps/a"
BIG = "projects/big/locations/l/apps/a"
LEASE = "1.5"  # seconds: how long an operation outlives a worker that stopped renewing it


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "db.sqlite", "--workers", "2")
    try:
        yield running
    finally:
        _stop(running)


def _stop(running: RunningServer) -> None:
    workers = worker_pids(running)
    try:
        running.stop(signal.SIGTERM, timeout=60)
    except subprocess.TimeoutExpired:
        running.kill()
    for pid in workers:  # never leave a worker behind, whatever the test did
        _wait_gone(pid, 30)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"worker {pid} still running {timeout} s after its supervisor stopped")
        time.sleep(0.05)


def _connections(pids: set[int], port: int) -> dict[int, int]:
    """For each pid, how many ESTABLISHED connections it accepted on ``port``."""
    accepted: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                accepted.add(f"socket:[{inode}]")
    counts: dict[int, int] = {}
    for pid in pids:
        count = 0
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) in accepted:
                    count += 1
            except OSError:
                continue
        counts[pid] = count
    return counts


def _port(target: str) -> int:
    return int(target.rsplit(":", 1)[1])


def test_connections_spread_over_workers_and_every_write_is_seen_by_every_worker(
    group: RunningServer,
) -> None:
    workers = worker_pids(group)
    assert len(workers) == 2
    assert "2 worker processes" in group.output()

    # Writes over 16 connections of their own: the kernel spreads them over both workers.
    channels = [
        grpc.insecure_channel(group.grpc_target, options=FRESH_CONNECTION) for _ in range(16)
    ]
    try:
        names: list[str] = []
        for index, channel in enumerate(channels):
            stub = service_grpc.EvaluationServiceStub(channel)
            for turn in range(3):
                request = service_pb2.CreateEvaluationRequest(
                    parent=APP, evaluation=golden_evaluation(f"E{index}-{turn}")
                )
                names.append(stub.CreateEvaluation(request, timeout=10).name)
        writers = _connections(workers, _port(group.grpc_target))
    finally:
        for channel in channels:
            channel.close()
    assert sum(writers.values()) == 16
    assert all(writers.values()), writers  # both workers accepted writes

    # Every write, read back over new connections (again on both workers): by name, in
    # pages whose tokens cross workers, and over REST.
    channels = [
        grpc.insecure_channel(group.grpc_target, options=FRESH_CONNECTION) for _ in range(16)
    ]
    try:
        for channel in channels:
            stub = service_grpc.EvaluationServiceStub(channel)
            for name in names:
                stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=name), timeout=10)
        readers = _connections(workers, _port(group.grpc_target))
        stubs = [service_grpc.EvaluationServiceStub(c) for c in channels]
        listed: list[str] = []
        token = ""
        turn = 0
        while True:
            page = stubs[turn % len(stubs)].ListEvaluations(
                service_pb2.ListEvaluationsRequest(
                    parent=APP, page_size=5, page_token=token, order_by="name"
                ),
                timeout=10,
            )
            listed += [e.name for e in page.evaluations]
            token = page.next_page_token
            turn += 1
            if not token:
                break
    finally:
        for channel in channels:
            channel.close()
    assert all(readers.values()), readers
    assert listed == sorted(names)

    address = urlsplit(group.http_base)
    connections = [
        http.client.HTTPConnection(address.hostname or "", address.port, timeout=10)
        for _ in range(16)
    ]
    try:
        for index, connection in enumerate(connections):
            connection.request("GET", "/healthz")
            health = connection.getresponse()
            assert json.loads(health.read()) == {"status": "SERVING"}
            name = names[index]
            connection.request("GET", f"/v1beta/{name}")
            got = connection.getresponse()
            assert got.status == 200
            assert json.loads(got.read())["name"] == name
        http_serving = _connections(workers, address.port or 0)
    finally:
        for connection in connections:
            connection.close()
    assert sum(http_serving.values()) == 16
    assert all(http_serving.values()), http_serving


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_official_client_scenario_on_twoworkers(group: RunningServer, transport: str) -> None:
    check_steps(run_scenario([group], transport), transport, group.export_dir)


def test_sigterm_drains_every_worker_and_exits_zero(tmp_path: Path) -> None:
    running = start_server(tmp_path / "db.sqlite", "--workers", "2")
    workers = worker_pids(running)
    targets = [running.grpc_target] * 4
    load = CreateLoad(targets, APP, tolerate=targets, options=FRESH_CONNECTION)
    load.wait_for(40)
    assert running.stop(signal.SIGTERM, timeout=60) == 0
    acknowledged = load.stop()
    output = running.output()
    assert output.count("stopped") >= 3  # each worker, then the supervisor
    assert output.rstrip().endswith("ces-eval stopped")
    assert "Traceback" not in output
    assert not [pid for pid in workers if _alive(pid)]

    again = start_server(tmp_path / "db.sqlite")  # the file is free again
    try:
        with grpc.insecure_channel(again.grpc_target) as channel:
            listed = list_names(service_grpc.EvaluationServiceStub(channel), APP)
    finally:
        again.kill()
    assert set(acknowledged) <= set(listed)


def test_a_second_server_on_the_same_sqlite_file_is_refused(group: RunningServer) -> None:
    for extra in ([], ["--workers", "2"]):
        second = run_serve(f"sqlite:///{group.database}", *extra)
        assert second.returncode == 1
        assert "in use by another ces-eval server" in second.stderr
        assert "Traceback" not in second.stderr
    with grpc.insecure_channel(group.grpc_target) as channel:  # the group is unharmed
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert len(worker_pids(group)) == 2


def _start_export(target: str, names: list[str]) -> tuple[grpc.Channel, str]:
    """An export of ``names`` started over a connection of its own (left open)."""
    channel = grpc.insecure_channel(target, options=FRESH_CONNECTION)
    operation = service_grpc.EvaluationServiceStub(channel).ExportEvaluations(
        service_pb2.ExportEvaluationsRequest(
            parent=BIG,
            names=names,
            include_evaluations=True,
            include_evaluation_results=True,
            export_options=service_pb2.ExportOptions(gcs_uri="gs://bucket/big"),
        ),
        timeout=30,
    )
    assert not operation.done
    return channel, operation.name


def _operation(target: str, name: str) -> operations_pb2.Operation:
    with grpc.insecure_channel(target, options=FRESH_CONNECTION) as channel:
        stored: operations_pb2.Operation = operations_pb2_grpc.OperationsStub(channel).GetOperation(
            operations_pb2.GetOperationRequest(name=name), timeout=30
        )
    return stored


def test_a_killed_worker_is_replaced_and_its_operation_fails_when_its_lease_runs_out(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite"
    names = seed_large(SqliteStorage(database), BIG, 30, 100)
    running = start_server(database, "--workers", "2", "--operation-lease", LEASE)
    try:
        workers = worker_pids(running)
        channel, operation = _start_export(running.grpc_target, names)
        with channel:
            serving = [
                pid
                for pid, count in _connections(workers, _port(running.grpc_target)).items()
                if count
            ]
            assert len(serving) == 1
            victim = serving[0]
            os.kill(victim, signal.SIGKILL)

        deadline = time.monotonic() + 60
        while victim in (current := worker_pids(running)) or len(current) < 2:
            assert time.monotonic() < deadline, running.output()
            time.sleep(0.05)
        assert victim not in current
        assert len(current) == 2
        assert running.process.poll() is None
        assert f"worker {victim} was killed by SIGKILL" in running.output()

        # The survivor fails the victim's operation once its lease ran out.
        deadline = time.monotonic() + 30
        while not (stored := _operation(running.grpc_target, operation)).done:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert stored.error.code == code_pb2.ABORTED
        assert "stopped while this operation was running" in stored.error.message

        # The group serves on, over both workers (the replacement included), once it is up.
        deadline = time.monotonic() + 60
        while "starting a worker to replace" not in running.output() or not any(
            f"worker {pid} serving" in running.output() for pid in current - workers
        ):
            assert time.monotonic() < deadline, running.output()
            time.sleep(0.05)
        channels = [
            grpc.insecure_channel(running.grpc_target, options=FRESH_CONNECTION) for _ in range(16)
        ]
        try:
            for index, each in enumerate(channels):
                service_grpc.EvaluationServiceStub(each).CreateEvaluation(
                    service_pb2.CreateEvaluationRequest(
                        parent=APP, evaluation=golden_evaluation(f"after{index}")
                    ),
                    timeout=10,
                )
            spread = _connections(current, _port(running.grpc_target))
        finally:
            for each in channels:
                each.close()
        assert all(spread.values()), spread
    finally:
        _stop(running)
    assert running.process.returncode == 0


def test_a_group_killed_outright_has_its_operations_failed_at_the_next_start(
    tmp_path: Path,
) -> None:
    database = tmp_path / "db.sqlite"
    names = seed_large(SqliteStorage(database), BIG, 30, 100)
    running = start_server(database, "--workers", "2")
    channel, operation = _start_export(running.grpc_target, names)
    with channel:
        time.sleep(0.3)
        kill_group(running)

    again = start_server(database, "--workers", "2")
    try:
        stored = _operation(again.grpc_target, operation)
    finally:
        _stop(again)
    assert stored.done
    assert stored.error.code == code_pb2.ABORTED
    assert "stopped while this operation was running" in stored.error.message
    # Neither the export nor a temporary file of it is left behind (the supervisor swept).
    assert [p for p in running.export_dir.rglob("*") if p.is_file()] == []


def test_workers_dying_again_and_again_stop_the_group_with_failure(tmp_path: Path) -> None:
    running = start_server(tmp_path / "db.sqlite", "--workers", "2")
    workers = worker_pids(running)
    killed: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while running.process.poll() is None:
            assert time.monotonic() < deadline, running.output()
            for pid in worker_pids(running) - killed:
                with contextlib.suppress(ProcessLookupError):  # gone since it was listed
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.01)
    finally:
        _stop(running)
    assert running.process.returncode == 1
    assert f"more than {RESTART_LIMIT} worker restarts" in running.output()
    assert len(killed) == RESTART_LIMIT + 1 or len(killed) == RESTART_LIMIT + 2
    assert workers <= killed
    assert not [pid for pid in killed if _alive(pid)]


def test_a_port_taken_by_another_program_is_reported(tmp_path: Path) -> None:
    with socket.socket() as taken:  # no SO_REUSEPORT: the port cannot be shared
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        completed = run_serve(
            f"sqlite:///{tmp_path / 'db.sqlite'}",
            "--grpc-port",
            str(taken.getsockname()[1]),
            "--workers",
            "2",
        )
    assert completed.returncode == 3
    assert f"--grpc-port: cannot serve gRPC on 127.0.0.1:{port}" in completed.stderr
    assert "Traceback" not in completed.stderr
    # The database was released: a server starts on it.
    start_server(tmp_path / "db.sqlite").kill()


def test_workers_need_a_database_file() -> None:
    completed = run_serve("sqlite:///:memory:", "--workers", "2")
    assert completed.returncode == 2
    assert "--workers: " in completed.stderr
    assert ":memory:" in completed.stderr


def test_workers_on_postgresql_share_the_database(tmp_path: Path, postgres_url: str) -> None:
    running = start_server(tmp_path / "unused.db", "--workers", "2", database_url=postgres_url)
    try:
        workers = worker_pids(running)
        assert len(workers) == 2
        channels = [
            grpc.insecure_channel(running.grpc_target, options=FRESH_CONNECTION) for _ in range(16)
        ]
        try:
            names = [
                service_grpc.EvaluationServiceStub(channel)
                .CreateEvaluation(
                    service_pb2.CreateEvaluationRequest(
                        parent=APP, evaluation=golden_evaluation(f"P{index}")
                    ),
                    timeout=10,
                )
                .name
                for index, channel in enumerate(channels)
            ]
            spread = _connections(workers, _port(running.grpc_target))
            for channel in channels:  # each connection reads what all the others wrote
                assert list_names(service_grpc.EvaluationServiceStub(channel), APP) == sorted(names)
        finally:
            for channel in channels:
                channel.close()
        assert all(spread.values()), spread
    finally:
        _stop(running)
    assert running.process.returncode == 0
    assert not (tmp_path / "unused.db").exists()
