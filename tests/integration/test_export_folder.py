"""The export folder under attack, on the real server (issue 15, items 3 and 7).

Symbolic links planted in ``--export-dir`` (a bucket that is a link to a folder outside, a link
at the target path, a link in the middle of the path, a link to an absolute path) must neither
let an export write outside the folder nor an import read there; errors name the gs:// URI only,
never a file's content nor whether a path outside exists. Temporary files of exports carry their
owner: a server, replica or worker that starts removes only those provably abandoned (their
operation done, or its lease run out), never the file of an export another process is writing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.rpc import code_pb2

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.base import Storage
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, start_server

APP = "projects/exports/locations/l/apps/a"
KNOWN_LINE = "root:$6$known-first-line-4f1c:19000:0:99999:7:::"
BIG_COUNT, BIG_MEGABYTES = 12, 3  # an export of ~36 MB: written for a tenth of a second or so


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the export folder, with a file whose first line the attacks look for."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "shadow").write_text(KNOWN_LINE + "\nsecond line\n")
    return folder


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "db.sqlite", export_dir=tmp_path / "exports")
    running.export_dir.mkdir(parents=True, exist_ok=True)
    try:
        yield running
    finally:
        running.kill()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _plant(root: Path, name: str, target: Path | str) -> None:
    link = root / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _rest(server: RunningServer, path: str, body: dict[str, object]) -> tuple[int, str]:
    request = urllib.request.Request(
        server.http_base + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _import(server: RunningServer, uri: str) -> tuple[int, str]:
    return _rest(server, f"/emulator/v1/{APP}:importEvaluations", {"gcsUri": uri})


def _export(
    target: str, names: list[str], uri: str, *, results: bool = False
) -> operations_pb2.Operation:
    with grpc.insecure_channel(target) as channel:
        operation: operations_pb2.Operation = service_grpc.EvaluationServiceStub(
            channel
        ).ExportEvaluations(
            service_pb2.ExportEvaluationsRequest(
                parent=APP,
                names=names,
                include_evaluations=True,
                include_evaluation_results=results,
                export_options=service_pb2.ExportOptions(gcs_uri=uri),
            ),
            timeout=30,
        )
    return operation


def _operation(target: str, name: str) -> operations_pb2.Operation:
    with grpc.insecure_channel(target) as channel:
        found: operations_pb2.Operation = operations_pb2_grpc.OperationsStub(channel).GetOperation(
            operations_pb2.GetOperationRequest(name=name), timeout=30
        )
    return found


def _wait_done(target: str, name: str, timeout: float = 120) -> operations_pb2.Operation:
    deadline = time.monotonic() + timeout
    while not (found := _operation(target, name)).done:
        assert time.monotonic() < deadline, f"{name} still running"
        time.sleep(0.05)
    return found


def _create(server: RunningServer) -> str:
    evaluation = evaluation_pb2.Evaluation(display_name="small")
    evaluation.golden.turns.add().steps.add().user_input.text = "hello"
    with grpc.insecure_channel(server.grpc_target) as channel:
        created = service_grpc.EvaluationServiceStub(channel).CreateEvaluation(
            service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation), timeout=30
        )
    return str(created.name)


# -- item 3: planted links -------------------------------------------------------------------------

# (what is planted, relative to the export folder → where it points; the URI exported to)
EXPORT_LINKS = [
    pytest.param("rootlink", "{outside}", "gs://rootlink/x", id="bucket-is-a-link"),
    pytest.param("b/out.json", "{outside}/victim.json", "gs://b/out.json", id="link-at-target"),
    pytest.param("b/mid", "{outside}", "gs://b/mid/deeper", id="link-in-the-middle"),
    pytest.param("b/dangling", "{outside}/made", "gs://b/dangling", id="dangling-link"),
]


@pytest.mark.parametrize(("planted", "points_to", "uri"), EXPORT_LINKS)
def test_exports_through_planted_links_are_refused_and_write_nothing_outside(
    server: RunningServer, outside: Path, planted: str, points_to: str, uri: str
) -> None:
    (outside / "victim.json").write_text("keep me")
    _plant(server.export_dir, planted, points_to.format(outside=outside))
    before = _snapshot(outside)
    name = _create(server)
    with pytest.raises(grpc.RpcError) as caught:
        _export(server.grpc_target, [name], uri)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    details = caught.value.details() or ""
    assert "is a symbolic link in the export folder" in details
    assert str(outside) not in details
    assert str(server.export_dir) not in details
    status, body = _rest(
        server,
        f"/v1beta/{APP}/evaluations:export",
        {"names": [name], "includeEvaluations": True, "exportOptions": {"gcsUri": uri}},
    )
    assert status == 403, body
    assert json.loads(body)["error"]["status"] == "PERMISSION_DENIED"
    assert _snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["shadow", "victim.json"]


def _seed_big(
    storage: Storage, count: int = BIG_COUNT, megabytes: int = BIG_MEGABYTES
) -> list[str]:
    """``count`` evaluations of ``megabytes`` MB each, stored directly (an export of them takes
    a moment to write); their names."""
    evaluations = []
    for index in range(count):
        evaluation = evaluation_pb2.Evaluation(
            name=f"{APP}/evaluations/big{index}",
            display_name=f"Big {index}",
            etag=f"etag{index}",
            description=("x" * 1023 + "\n") * 1024 * megabytes,
        )
        evaluation.golden.turns.add().steps.add().user_input.text = "hello"
        evaluations.append(evaluation)

    async def write() -> None:
        await storage.open()
        try:
            await storage.import_bundle(evaluations, [])
        finally:
            await storage.close()

    asyncio.run(write())
    return [e.name for e in evaluations]


def test_a_link_planted_while_an_export_runs_is_refused_by_the_write(
    tmp_path: Path, outside: Path
) -> None:
    names = _seed_big(SqliteStorage(tmp_path / "db.sqlite"))
    running = start_server(tmp_path / "db.sqlite", export_dir=tmp_path / "exports")
    try:
        (running.export_dir / "b").mkdir(parents=True)
        operation = _export(running.grpc_target, names, "gs://b/later")  # passes the check
        _plant(running.export_dir, "b/later", outside)  # then the folder becomes a link
        done = _wait_done(running.grpc_target, operation.name)
    finally:
        running.kill()
    assert done.error.code == code_pb2.PERMISSION_DENIED, done
    assert "gs://b/later is a symbolic link" in done.error.message
    assert sorted(p.name for p in outside.iterdir()) == ["shadow"]
    assert [p for p in running.export_dir.rglob("*") if p.is_file()] == []


# (what is planted, where it points, the URI imported, one naming nothing behind the link)
IMPORT_LINKS = [
    pytest.param(
        "rootlink", "{outside}", "gs://rootlink/shadow", "gs://rootlink/none", id="bucket-link"
    ),
    pytest.param(
        "b/shadow", "{outside}/shadow", "gs://b/shadow", "gs://b/shadow/none", id="file-link"
    ),
    pytest.param(
        "b/mid", "{outside}", "gs://b/mid/shadow", "gs://b/mid/none", id="link-in-the-middle"
    ),
    pytest.param(
        "abs", "/", "gs://abs/etc/shadow", "gs://abs/etc/none", id="link-to-the-system-root"
    ),
]


@pytest.mark.parametrize(("planted", "points_to", "uri", "absent"), IMPORT_LINKS)
def test_imports_through_planted_links_are_refused_and_quote_nothing(
    server: RunningServer, outside: Path, planted: str, points_to: str, uri: str, absent: str
) -> None:
    _plant(server.export_dir, planted, points_to.format(outside=outside))
    status, body = _import(server, uri)
    assert status == 403, body
    error = json.loads(body)["error"]
    assert error["status"] == "PERMISSION_DENIED"
    named = "gs://" + planted
    assert error["message"] == (
        f"gcs_uri: {named} is a symbolic link in the export folder; ces-eval never follows "
        "links there."
    )
    for secret in (KNOWN_LINE, "known-first-line", "root:", str(outside), "No such file"):
        assert secret not in body
    # Whether something exists behind the link makes no difference.
    absent_status, absent_body = _import(server, absent)
    assert absent_status == status
    assert json.loads(absent_body)["error"]["message"] == error["message"]
    with (
        grpc.insecure_channel(server.grpc_target) as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        emulator_grpc.EmulatorServiceStub(channel).ImportEvaluations(
            emulator_pb2.ImportEvaluationsRequest(parent=APP, gcs_uri=uri), timeout=30
        )
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "known-first-line" not in (caught.value.details() or "")


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(KNOWN_LINE + "\ndaemon:*:19000:0:99999:7:::\n", id="a-password-file"),
        pytest.param("format: known-first-line\n", id="yaml"),
        pytest.param('{"known-first-line": 1}', id="json"),
        pytest.param(
            '{"format": "ces-eval.export/v1", "evaluations": [{"known-first-line": 1}]}',
            id="an-export-with-an-unknown-field",
        ),
        pytest.param(
            '{"format": "ces-eval.export/v1", "evaluations": [{"displayName": "e", '
            '"golden": {"turns": [{"steps": [{"expectation": {"toolCall": {"args": '
            '{"known-first-line": "' + "x" * 300_000 + '"}}}}]}]}}]}',
            id="an-export-over-a-limit",
        ),
        pytest.param("a: !known-first-line x\n", id="broken-yaml"),
    ],
)
def test_an_import_of_a_file_that_is_no_export_quotes_none_of_it(
    server: RunningServer, content: str
) -> None:
    (server.export_dir / "b").mkdir()
    (server.export_dir / "b" / "notes").write_text(content)
    status, body = _import(server, "gs://b/notes")
    assert status == 400, body
    assert json.loads(body)["error"]["status"] == "INVALID_ARGUMENT"
    assert "known-first-line" not in body
    assert "root:" not in body
    # The same bytes given as content are the caller's own: their details may be shown.
    own = _rest(server, f"/emulator/v1/{APP}:importEvaluations", {"content": _b64(content)})
    assert own[0] == 400


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_missing_object_is_not_found_naming_the_uri_only(server: RunningServer) -> None:
    (server.export_dir / "b").mkdir()
    for uri in ("gs://b/none.json", "gs://no-bucket/x", "gs://b/a/b/c"):
        status, body = _import(server, uri)
        assert status == 404, body
        error = json.loads(body)["error"]
        assert error["status"] == "NOT_FOUND"
        assert error["message"] == f"Object {uri} not found."
        assert str(server.export_dir) not in body


def test_exports_and_imports_inside_the_folder_still_work(server: RunningServer) -> None:
    name = _create(server)
    done = _wait_done(server.grpc_target, _export(server.grpc_target, [name], "gs://b/x/").name)
    response = service_pb2.ExportEvaluationsResponse()
    assert done.response.Unpack(response), done
    assert response.evaluations_uri.startswith("gs://b/x/evaluations-")
    copy = APP.removesuffix("/apps/a") + "/apps/copy"
    status, body = _rest(
        server, f"/emulator/v1/{copy}:importEvaluations", {"gcsUri": response.evaluations_uri}
    )
    assert status == 200, body
    assert json.loads(body)["evaluations"] == [f"{copy}/evaluations/{name.rsplit('/', 1)[-1]}"]


# -- item 7: temporary files of live and abandoned exports ---------------------------------------

LIVE = "gs://bucket/live"


def _temporaries(folder: Path) -> list[Path]:
    return list(folder.rglob(".ces-eval-*.tmp"))


def _holder(pids: set[int], path: Path) -> int | None:
    """The process among ``pids`` that has ``path`` open."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == str(path):
                        return pid
    return None


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
                if int(parent) == pid and state != "Z":
                    found.add(int(entry.name))
    return found


def _catch_writing(
    target: str, names: list[str], folder: Path, freeze: Callable[[Path], bool]
) -> tuple[str, Path]:
    """Start exports of ``names`` to :data:`LIVE` until one is caught while its temporary file
    exists: ``freeze(path)`` then stops its writer (SIGSTOP or SIGKILL) and says whether the
    file was still there. The operation's name and the file."""
    folder.mkdir(parents=True, exist_ok=True)
    for _attempt in range(8):
        operation = _export(target, names, LIVE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = [folder / n for n in os.listdir(folder) if n.endswith(".tmp")]
            if found:
                if freeze(found[0]):
                    return operation.name, found[0]
                break
            if any(n.endswith(".json") for n in os.listdir(folder)):
                break  # written before the poll saw it
            time.sleep(0.0005)
        _wait_done(target, operation.name)
        for written in folder.iterdir():
            written.unlink()
    raise AssertionError("never caught an export while it wrote its file")


def _stop_process(pid: int) -> Callable[[Path], bool]:
    def freeze(path: Path) -> bool:
        os.kill(pid, signal.SIGSTOP)
        if path.exists():
            return True
        os.kill(pid, signal.SIGCONT)
        return False

    return freeze


def _replica(tmp_path: Path, url: str, label: str, lease: str) -> RunningServer:
    return start_server(
        tmp_path / label / "unused.db",
        "--operation-lease",
        lease,
        database_url=url,
        export_dir=tmp_path / "exports",  # shared, as a bucket would be
    )


def _finishes_with_its_file(running: RunningServer, operation: str) -> None:
    done = _wait_done(running.grpc_target, operation)
    response = service_pb2.ExportEvaluationsResponse()
    assert done.response.Unpack(response), done.error
    written = running.export_dir / response.evaluations_uri.removeprefix("gs://")
    assert written.stat().st_size > BIG_COUNT * BIG_MEGABYTES * 1024 * 1024
    assert _temporaries(running.export_dir) == []


def _a_start_keeps_the_live_file(
    first: RunningServer, names: list[str], start_second: Callable[[], RunningServer]
) -> None:
    """While ``first`` is stopped in the middle of writing an export file, another server starts
    (``start_second``; its start sweeps the export folder they share) and leaves that file;
    ``first``, resumed, finishes with it."""
    second: RunningServer | None = None
    try:
        operation, temporary = _catch_writing(
            first.grpc_target,
            names,
            first.export_dir / "bucket" / "live",
            _stop_process(first.process.pid),
        )
        try:
            second = start_second()
            assert temporary.exists(), second.output()
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        _finishes_with_its_file(first, operation)
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_a_live_exports_file_survives_another_replicas_start(
    tmp_path: Path, postgres_url: str
) -> None:
    names = _seed_big(PostgresStorage(postgres_url))
    first = _replica(tmp_path, postgres_url, "a", "120")
    _a_start_keeps_the_live_file(first, names, lambda: _replica(tmp_path, postgres_url, "b", "120"))


def test_an_abandoned_file_is_removed_once_its_lease_ran_out(
    tmp_path: Path, postgres_url: str
) -> None:
    names = _seed_big(PostgresStorage(postgres_url))
    doomed = _replica(tmp_path, postgres_url, "a", "2")
    folder = doomed.export_dir / "bucket" / "live"
    try:
        operation, temporary = _catch_writing(
            doomed.grpc_target, names, folder, _stop_process(doomed.process.pid)
        )
    finally:
        doomed.kill()  # SIGKILL: the write is cut, the file stays
    assert temporary.exists()
    survivor = _replica(tmp_path, postgres_url, "b", "2")
    try:
        deadline = time.monotonic() + 60
        while temporary.exists():
            assert time.monotonic() < deadline, survivor.output()
            time.sleep(0.1)
        stored = _wait_done(survivor.grpc_target, operation)
        assert survivor.process.poll() is None
    finally:
        survivor.kill()
    assert stored.error.code == code_pb2.ABORTED
    assert "removed 1 partial export file" in survivor.output()
    assert list(folder.iterdir()) == []


def test_a_start_keeps_the_files_of_another_databases_live_export(tmp_path: Path) -> None:
    names = _seed_big(SqliteStorage(tmp_path / "one.sqlite"))
    exports = tmp_path / "exports"
    first = start_server(tmp_path / "one.sqlite", export_dir=exports)
    _a_start_keeps_the_live_file(
        first, names, lambda: start_server(tmp_path / "two.sqlite", export_dir=exports)
    )


def test_a_killed_workers_file_is_removed_while_the_group_runs(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    names = _seed_big(SqliteStorage(database))
    group = start_server(database, "--workers", "2", "--operation-lease", "2")
    killed: list[int] = []

    def kill_the_writer(path: Path) -> bool:
        workers = _children(group.process.pid)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        try:
            victim = _holder(workers, path)
            if victim is None or not path.exists():
                return False
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
            return True
        finally:
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    try:
        folder = group.export_dir / "bucket" / "live"
        operation, temporary = _catch_writing(group.grpc_target, names, folder, kill_the_writer)
        deadline = time.monotonic() + 60
        while temporary.exists():
            assert time.monotonic() < deadline, group.output()
            time.sleep(0.1)
        assert group.process.poll() is None  # the group never restarted as a whole
        assert f"worker {killed[0]} was killed by SIGKILL" in group.output()
        stored = _wait_done(group.grpc_target, operation)
    finally:
        group.stop(signal.SIGTERM, timeout=60)
    assert stored.error.code == code_pb2.ABORTED
    assert list(folder.iterdir()) == []
