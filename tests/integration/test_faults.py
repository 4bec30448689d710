"""Faults against the real server (issue 9): SIGKILL at random moments of a concurrent write
load, and a disk that fills up.

SIGKILL cycles: writer threads create, update (with etags) and delete evaluations and create and
delete results over gRPC and REST, each owning its own evaluations, so every writer knows the
state each acknowledged call left and, for the one call the kill cut, the state it would have
left. The server is killed at a moment drawn from a seeded generator; on the same SQLite file,
the checks after every kill are: ``PRAGMA integrity_check`` and ``foreign_key_check`` on the file,
then, through a restarted server, every evaluation and result in exactly an allowed state (the
acknowledged one, or the cut call's), etags as acknowledged, derived fields equal to
:func:`ces_eval.storage.derived.derive` of the stored results, nothing that no writer wrote. One
cycle kills during an export operation, one kills a ``--workers 2`` group outright.

Disk full: a file size limit (RLIMIT_FSIZE with SIGXFSZ ignored, so writes fail with EFBIG; no
privileges needed) set on the running server and lifted later, and, where the test may mount
one, a small tmpfs filled up and emptied again (ENOSPC).

Seeds: ``CES_EVAL_FAULT_SEED=<n>`` replays the kill moments, operation mix and surfaces of a run;
every failure names its seed.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import empty_pb2, json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from ces_eval.core import exchange
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.storage.derived import derive
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing.server import RunningServer, start_server
from tests.support.datasets import seed_large
from tests.support.load import start_export

APP = "projects/faults/locations/l/apps/a"
BIG = "projects/big/locations/l/apps/a"
Evaluation = evaluation_pb2.Evaluation
Result = evaluation_pb2.EvaluationResult
M = TypeVar("M", bound=Message)

# One entry per kill: "single" (one process), "export" (one process, an export running),
# "workers" (a --workers 2 group, every process killed at once).
PLAN = ("single", "single", "export", "single", "workers", "single", "single")
WRITERS = 4
_DERIVED = ("aggregated_metrics", "evaluation_runs", "last_completed_result", "last_ten_results")


# -- seeds ---------------------------------------------------------------------------------------


def _seed() -> int:
    text = os.environ.get("CES_EVAL_FAULT_SEED", "")
    return int(text) if text else random.SystemRandom().randrange(1 << 32)


@contextlib.contextmanager
def _reported(seed: int) -> Iterator[None]:
    """Any failure inside names the seed that replays it."""
    try:
        yield
    except Exception as error:
        raise AssertionError(
            f"{error}\n(fault seed {seed}: rerun with CES_EVAL_FAULT_SEED={seed})"
        ) from error


# -- the file ------------------------------------------------------------------------------------


def _check_file(database: Path) -> None:
    """The file as a stopped (or killed) server left it is sound: every page, index and
    foreign key (results → evaluations) consistent."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []


# -- the two surfaces ----------------------------------------------------------------------------


_CUT_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN)


class Cut(Exception):
    """A call the kill cut: whether the server applied it is unknown."""


class Refused(Exception):
    """An error the server answered: ``code`` (canonical name) and the ErrorInfo ``reason``."""

    def __init__(self, code: str, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason


def _grpc_refusal(error: grpc.RpcError) -> Refused | None:
    """The server's own error in ``error`` (its google.rpc.Status details); None for errors
    of the connection."""
    trailers = dict(error.trailing_metadata() or ())
    if "grpc-status-details-bin" not in trailers:
        return None
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info), status
    return Refused(error.code().name, info.reason, status.message)


class Api:
    """One client's connections: a gRPC channel and an HTTP client. Every write exists on both
    surfaces; ``rest`` picks one. The server's errors raise :class:`Refused`, connections cut
    once ``killed`` is set :class:`Cut`; anything else propagates."""

    def __init__(self, server: RunningServer, killed: threading.Event) -> None:
        self._channel = grpc.insecure_channel(server.grpc_target)
        self._service = service_grpc.EvaluationServiceStub(self._channel)
        self._emulator = emulator_grpc.EmulatorServiceStub(self._channel)
        self._http = httpx.Client(base_url=server.http_base, timeout=30)
        self._killed = killed

    def close(self) -> None:
        self._channel.close()
        self._http.close()

    def _grpc(self, call: Callable[..., M], request: Message) -> M:
        try:
            return call(request, timeout=30)
        except grpc.RpcError as error:
            refusal = _grpc_refusal(error)
            if refusal is not None:
                raise refusal from error
            # A connection lost mid-call ends UNAVAILABLE, or UNKNOWN ("Stream removed").
            if self._killed.is_set() and error.code() in _CUT_CODES:
                raise Cut from error
            raise

    def _rest(self, method: str, path: str, into: M, **kwargs: Any) -> M:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            if self._killed.is_set():
                raise Cut from error
            raise
        if response.status_code != 200:
            try:
                error = response.json()["error"]
                refusal = Refused(error["status"], error["details"][0]["reason"], error["message"])
            except (ValueError, LookupError, TypeError):
                raise AssertionError(
                    f"{method} {path}: {response.status_code} outside Google's error envelope: "
                    f"{response.text[:500]}"
                ) from None
            raise refusal
        json_format.ParseDict(response.json(), into)
        return into

    def create_evaluation(self, rest: bool, eid: str, evaluation: Evaluation) -> Evaluation:
        if rest:
            return self._rest(
                "POST",
                f"/v1beta/{APP}/evaluations",
                Evaluation(),
                params={"evaluationId": eid},
                json=json_format.MessageToDict(evaluation),
            )
        return self._grpc(
            self._service.CreateEvaluation,
            service_pb2.CreateEvaluationRequest(
                parent=APP, evaluation_id=eid, evaluation=evaluation
            ),
        )

    def get_evaluation(self, rest: bool, name: str) -> Evaluation:
        if rest:
            return self._rest("GET", f"/v1beta/{name}", Evaluation())
        return self._grpc(self._service.GetEvaluation, service_pb2.GetEvaluationRequest(name=name))

    def update_description(self, rest: bool, name: str, etag: str, description: str) -> Evaluation:
        if rest:
            return self._rest(
                "PATCH",
                f"/v1beta/{name}",
                Evaluation(),
                params={"updateMask": "description"},
                json={"description": description, "etag": etag},
            )
        return self._grpc(
            self._service.UpdateEvaluation,
            service_pb2.UpdateEvaluationRequest(
                evaluation=Evaluation(name=name, etag=etag, description=description),
                update_mask={"paths": ["description"]},
            ),
        )

    def delete_evaluation(self, rest: bool, name: str, etag: str) -> None:
        if rest:
            self._rest("DELETE", f"/v1beta/{name}", empty_pb2.Empty(), params={"etag": etag})
        else:
            self._grpc(
                self._service.DeleteEvaluation,
                service_pb2.DeleteEvaluationRequest(name=name, etag=etag),
            )

    def create_result(self, rest: bool, parent: str, rid: str, result: Result) -> Result:
        if rest:
            return self._rest(
                "POST",
                f"/emulator/v1/{parent}/results",
                Result(),
                params={"evaluationResultId": rid},
                json=json_format.MessageToDict(result),
            )
        return self._grpc(
            self._emulator.CreateEvaluationResult,
            emulator_pb2.CreateEvaluationResultRequest(
                parent=parent, evaluation_result_id=rid, evaluation_result=result
            ),
        )

    def delete_result(self, rest: bool, name: str) -> None:
        if rest:
            self._rest("DELETE", f"/v1beta/{name}", empty_pb2.Empty())
        else:
            self._grpc(
                self._service.DeleteEvaluationResult,
                service_pb2.DeleteEvaluationResultRequest(name=name),
            )


# -- what the writers know -----------------------------------------------------------------------


@dataclass
class Pending:
    """The call the kill cut: ``kind`` is create, update, delete, add_result or delete_result;
    ``value`` the new description (update) or the result's name (results); ``request`` what a
    create or add_result sent."""

    kind: str
    value: str = ""
    request: Message | None = None


@dataclass
class Tracked:
    """One evaluation as its writer knows it. ``evaluation`` is the acknowledged resource
    (None: never acknowledged, or acknowledged deleted when ``deleted``); ``etag`` None when a
    result write changed it without the writer reading the new one."""

    name: str
    evaluation: Evaluation | None = None
    etag: str | None = None
    results: dict[str, Result] = field(default_factory=dict)
    deleted: bool = False
    pending: Pending | None = None


@dataclass
class Tally:
    """Across cycles: writes acknowledged (each checked at the next restart) and calls cut."""

    acknowledged: int = 0
    cut: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self) -> None:
        with self.lock:
            self.acknowledged += 1


def _golden(display_name: str) -> Evaluation:
    message = Evaluation(display_name=display_name, description="d0", tags=["faults"])
    message.golden.turns.add().steps.add().user_input.text = f"hello {display_name}"
    return message


def _result(rng: random.Random, display_name: str) -> Result:
    """A result varied enough that every derived field has something to add up."""
    state = rng.choice(
        [
            Result.ExecutionState.COMPLETED,
            Result.ExecutionState.COMPLETED,
            Result.ExecutionState.ERROR,
        ]
    )
    message = Result(
        display_name=display_name,
        execution_state=state,
        evaluation_run=f"{APP}/evaluationRuns/run-{rng.randrange(3)}",
        app_version=f"{APP}/versions/v{rng.randrange(2)}",
    )
    if state == Result.ExecutionState.COMPLETED:
        message.evaluation_status = rng.choice([Result.Outcome.PASS, Result.Outcome.FAIL])
    turn = message.golden_result.turn_replay_results.add()
    turn.semantic_similarity_result.score = rng.randrange(5)
    turn.turn_latency.FromMilliseconds(rng.randrange(1, 5000))
    return message


class Writer:
    """A thread writing to its own evaluations until a call is cut (the kill) or fails (the test
    does)."""

    def __init__(
        self,
        server: RunningServer,
        prefix: str,
        owned: list[Tracked],
        seed: int,
        killed: threading.Event,
        tally: Tally,
    ) -> None:
        self.thread = threading.Thread(target=self._run, name=prefix)
        self.owned = owned
        self.error: BaseException | None = None
        self._api = Api(server, killed)
        self._prefix = prefix
        self._rng = random.Random(seed)  # noqa: S311 - a replayable simulation, not secrets
        self._tally = tally
        self._count = 0

    def _run(self) -> None:
        try:
            for _ in range(100_000):
                self._step()
        except Cut:
            with self._tally.lock:
                self._tally.cut += 1
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            self.error = error
        finally:
            self._api.close()

    def _new_id(self) -> str:
        self._count += 1
        return f"{self._prefix}{self._count}"

    def _step(self) -> None:
        rng = self._rng
        rest = rng.random() < 0.5
        alive = [t for t in self.owned if not t.deleted]
        choice = rng.random()
        if not alive or choice < 0.25:
            self._create(rest)
            return
        tracked = rng.choice(alive)
        if choice < 0.5:
            self._update(rest, tracked)
        elif choice < 0.8:
            self._add_result(rest, tracked)
        elif choice < 0.9 and tracked.results:
            self._delete_result(rest, tracked, rng.choice(sorted(tracked.results)))
        else:
            self._delete(rest, tracked)

    def _create(self, rest: bool) -> None:
        eid = self._new_id()
        request = _golden(eid)
        tracked = Tracked(f"{APP}/evaluations/{eid}", pending=Pending("create", request=request))
        self.owned.append(tracked)
        created = self._api.create_evaluation(rest, eid, request)
        tracked.evaluation, tracked.etag, tracked.pending = created, created.etag, None
        self._tally.add()

    def _etag(self, rest: bool, tracked: Tracked) -> str:
        if tracked.etag is None:  # a result write changed it: read the current one
            tracked.etag = self._api.get_evaluation(rest, tracked.name).etag
        return tracked.etag

    def _update(self, rest: bool, tracked: Tracked) -> None:
        etag = self._etag(rest, tracked)
        description = f"d{self._new_id()}"
        tracked.pending = Pending("update", description)
        updated = self._api.update_description(rest, tracked.name, etag, description)
        assert updated.description == description
        assert updated.etag != etag, "etag changes on every write"
        tracked.evaluation, tracked.etag, tracked.pending = updated, updated.etag, None
        self._tally.add()

    def _delete(self, rest: bool, tracked: Tracked) -> None:
        etag = self._etag(rest, tracked)
        tracked.pending = Pending("delete")
        self._api.delete_evaluation(rest, tracked.name, etag)
        tracked.deleted, tracked.pending = True, None
        self._tally.add()

    def _add_result(self, rest: bool, tracked: Tracked) -> None:
        rid = self._new_id()
        request = _result(self._rng, rid)
        tracked.pending = Pending("add_result", f"{tracked.name}/results/{rid}", request)
        created = self._api.create_result(rest, tracked.name, rid, request)
        assert created.name == tracked.pending.value
        tracked.results[created.name], tracked.etag, tracked.pending = created, None, None
        self._tally.add()

    def _delete_result(self, rest: bool, tracked: Tracked, name: str) -> None:
        tracked.pending = Pending("delete_result", name)
        self._api.delete_result(rest, name)
        del tracked.results[name]
        tracked.etag, tracked.pending = None, None
        self._tally.add()


# -- checking what survived ----------------------------------------------------------------------


def _listed(
    stub: service_grpc.EvaluationServiceStub,
) -> tuple[dict[str, Evaluation], dict[str, Result]]:
    """Every evaluation of APP and every result of its evaluations, by name."""
    evaluations: dict[str, Evaluation] = {}
    token = ""
    while True:
        page = stub.ListEvaluations(
            service_pb2.ListEvaluationsRequest(
                parent=APP, page_size=1000, page_token=token, order_by="name"
            ),
            timeout=60,
        )
        evaluations.update((e.name, e) for e in page.evaluations)
        token = page.next_page_token
        if not token:
            break
    results: dict[str, Result] = {}
    while True:
        result_page = stub.ListEvaluationResults(
            service_pb2.ListEvaluationResultsRequest(
                parent=f"{APP}/evaluations/-", page_size=1000, page_token=token, order_by="name"
            ),
            timeout=60,
        )
        results.update((r.name, r) for r in result_page.evaluation_results)
        token = result_page.next_page_token
        if not token:
            return evaluations, results


def _content(evaluation: Evaluation, *also: str) -> Evaluation:
    """``evaluation`` without its derived fields, its etag and the fields ``also``."""
    copy = Evaluation()
    copy.CopyFrom(evaluation)
    for name in (*_DERIVED, "etag", *also):
        copy.ClearField(name)
    return copy


def _check_derived(evaluation: Evaluation, results: list[Result]) -> None:
    """The stored derived fields are what the stored results give, computed from scratch."""
    expected = derive(results)
    where = f"derived fields of {evaluation.name}"
    assert evaluation.aggregated_metrics == expected.aggregated_metrics, where
    assert list(evaluation.evaluation_runs) == expected.evaluation_runs, where
    if expected.last_completed_result is None:
        assert not evaluation.HasField("last_completed_result"), where
    else:
        assert evaluation.last_completed_result == expected.last_completed_result, where


def _check_one(tracked: Tracked, stored: Evaluation | None, results: dict[str, Result]) -> None:
    """``stored`` (with ``results``) is a state ``tracked`` allows; then ``tracked`` adopts it,
    as the next cycle's starting point."""
    name, pending = tracked.name, tracked.pending
    kind = pending.kind if pending else ""
    if stored is None:
        assert tracked.deleted or kind in ("create", "delete"), f"{name} was lost"
        assert not results, f"results of the missing {name} remain: {sorted(results)}"
        tracked.deleted, tracked.pending = True, None
        return
    assert not tracked.deleted, f"{name} was deleted (acknowledged) but is back"
    if tracked.evaluation is None:  # a create the kill cut, which reached the disk
        assert pending is not None
        assert kind == "create"
        request = pending.request
        assert isinstance(request, Evaluation)
        assert (stored.display_name, stored.description, stored.golden) == (
            request.display_name,
            request.description,
            request.golden,
        ), f"{name} differs from its create request"
        assert not results, f"{name} was created with results"
    else:
        acknowledged = tracked.evaluation
        if kind == "update" and stored.description == pending.value:  # type: ignore[union-attr]
            assert _content(stored, "description", "update_time", "last_updated_by") == _content(
                acknowledged, "description", "update_time", "last_updated_by"
            ), f"{name}: the cut update changed more than the description"
            assert stored.etag != tracked.etag, f"{name}: an applied update kept the etag"
        else:
            assert _content(stored) == _content(acknowledged), (
                f"{name} is not as acknowledged:\n{stored}\nacknowledged:\n{acknowledged}"
            )
        allowed = {frozenset(tracked.results)}
        if kind == "add_result":
            allowed.add(frozenset({*tracked.results, pending.value}))  # type: ignore[union-attr]
        elif kind == "delete_result":
            allowed.add(frozenset(set(tracked.results) - {pending.value}))  # type: ignore[union-attr]
        assert frozenset(results) in allowed, (
            f"results of {name}: {sorted(results)}, acknowledged {sorted(tracked.results)}, "
            f"cut call {pending}"
        )
        for result_name, result in results.items():
            if result_name in tracked.results:
                assert result == tracked.results[result_name], f"{result_name} changed"
            else:
                request = pending.request  # type: ignore[union-attr]
                assert isinstance(request, Result)
                assert result.display_name == request.display_name
        unchanged = (
            frozenset(results) == frozenset(tracked.results)
            and stored.description == acknowledged.description
        )
        if tracked.etag is not None and unchanged:
            assert stored.etag == tracked.etag, f"{name}: etag is not the acknowledged one"
    _check_derived(stored, list(results.values()))
    tracked.evaluation, tracked.etag, tracked.results = stored, stored.etag, dict(results)
    tracked.deleted, tracked.pending = False, None


def _verify(server: RunningServer, model: dict[str, Tracked]) -> None:
    """Everything the writers were told is stored, as they were told, and nothing else is."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        evaluations, results = _listed(service_grpc.EvaluationServiceStub(channel))
    unknown = sorted(set(evaluations) - set(model))
    assert not unknown, f"evaluations no writer created: {unknown}"
    by_evaluation: dict[str, dict[str, Result]] = {}
    for name, result in results.items():
        by_evaluation.setdefault(name.split("/results/")[0], {})[name] = result
    orphans = sorted(set(by_evaluation) - set(evaluations))
    assert not orphans, f"results of evaluations that do not exist: {orphans}"
    for name, tracked in model.items():
        _check_one(tracked, evaluations.get(name), by_evaluation.get(name, {}))


# -- killing -------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _kill_outright(server: RunningServer) -> None:
    """SIGKILL the server and every process it started, so none of them shuts down in order:
    the supervisor is frozen first, so it neither restarts a worker nor tells one to stop."""
    supervisor = server.process.pid
    os.kill(supervisor, signal.SIGSTOP)
    children = _children(supervisor)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)
    assert len(children) >= 2, f"expected two workers, found {children}"
    server.kill()


def _operation(server: RunningServer, name: str) -> operations_pb2.Operation:
    with grpc.insecure_channel(server.grpc_target) as channel:
        operation: operations_pb2.Operation = operations_pb2_grpc.OperationsStub(
            channel
        ).GetOperation(operations_pb2.GetOperationRequest(name=name), timeout=30)
    return operation


def _files(folder: Path) -> list[Path]:
    """Every file under ``folder`` (exports and temporary files alike)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def _cycle(
    server: RunningServer,
    mode: str,
    cycle: int,
    rng: random.Random,
    model: dict[str, Tracked],
    tally: Tally,
    big: list[str],
) -> str | None:
    """Run the writers on ``server`` and kill it at a random moment; the export operation it
    was running when killed (mode "export")."""
    killed = threading.Event()
    live = [t for t in model.values() if not t.deleted]
    writers = [
        Writer(
            server,
            f"c{cycle}w{index}x",
            live[index::WRITERS],
            rng.randrange(1 << 32),
            killed,
            tally,
        )
        for index in range(WRITERS)
    ]
    for writer in writers:
        writer.thread.start()
    export: str | None = None
    try:
        threshold = tally.acknowledged + rng.randrange(10, 80)
        deadline = time.monotonic() + 120
        while tally.acknowledged < threshold and time.monotonic() < deadline:
            if any(w.error for w in writers):
                break
            time.sleep(0.01)
        if mode == "export":
            export = start_export(server.grpc_target, BIG, big).name
        time.sleep(rng.uniform(0.05, 0.6))
        if export is not None:
            assert not _operation(server, export).done, "the export ended before the kill"
    finally:
        killed.set()
        if mode == "workers":
            _kill_outright(server)
        else:
            server.process.send_signal(signal.SIGKILL)
            server.kill()
        for writer in writers:
            writer.thread.join(60)
    for writer in writers:
        assert not writer.thread.is_alive(), f"{writer.thread.name} hangs"
        if writer.error is not None:
            raise writer.error
        for tracked in writer.owned:
            model.setdefault(tracked.name, tracked)
    return export


def test_sigkill_cycles_lose_no_acknowledged_write(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    seed = _seed()
    record_property("fault_seed", seed)
    rng = random.Random(seed)  # noqa: S311 - a replayable simulation, not secrets
    database = tmp_path / "db.sqlite"
    big = seed_large(SqliteStorage(database), BIG, 8, 12)  # an export of a few seconds
    model: dict[str, Tracked] = {}
    tally = Tally()
    with _reported(seed):
        export: str | None = None
        for cycle, mode in enumerate((*PLAN, "final")):
            server = start_server(database, *(("--workers", "2") if mode == "workers" else ()))
            try:
                _verify(server, model)
                if export is not None:
                    stored = _operation(server, export)
                    assert stored.done, "the interrupted export is still running"
                    assert stored.error.code == code_pb2.ABORTED
                    assert "stopped while this operation was running" in stored.error.message
                    # Neither the export nor a temporary file of it is left (swept at start).
                    assert _files(server.export_dir) == []
                if mode == "final":
                    assert server.stop(signal.SIGTERM) == 0
                else:
                    export = _cycle(server, mode, cycle, rng, model, tally, big)
                    # Whatever the kill left, no file is at an export's final path.
                    assert [p for p in _files(server.export_dir) if p.suffix != ".tmp"] == []
            finally:
                server.kill()
            _check_file(database)
    print(
        f"fault seed {seed}: {len(PLAN)} SIGKILL cycles, {tally.acknowledged} acknowledged "
        f"writes verified, {tally.cut} calls cut by the kills, {len(model)} evaluations"
    )


# -- disk full -----------------------------------------------------------------------------------

_UNAVAILABLE = ("UNAVAILABLE", "DATABASE_UNAVAILABLE")


def _ignores(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores signal ``signum`` (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no SigIgn in /proc/{pid}/status")


def _limit_file_size(server: RunningServer, size: int) -> None:
    """Let the server write no file past ``size`` bytes (RLIM_INFINITY: no limit), as a disk
    that is full beyond that. Python ignores SIGXFSZ, so a write past it fails with EFBIG
    instead of killing the process; the hard limit stays, so the soft one can be raised again
    without privileges."""
    assert _ignores(server.process.pid, signal.SIGXFSZ), "SIGXFSZ would kill the server"
    _, hard = resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, (size, hard))


def _largest_file(folder: Path) -> int:
    """The size of the largest file in ``folder``: the database's, or its write-ahead log's."""
    return max(p.stat().st_size for p in folder.iterdir() if p.is_file())


@dataclass
class FullLoad:
    """What concurrent writers were told while the disk filled up: the writes acknowledged, by
    name, the names of those refused with (code, reason), and the surfaces that refused."""

    acknowledged: dict[str, Message] = field(default_factory=dict)
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    refused_on: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _write_until_refused(
    server: RunningServer, parents: list[str], prefix: str, refusals: int = 4, steps: int = 5000
) -> FullLoad:
    """One thread per parent evaluation creating evaluations and results of its parent (gRPC
    and REST in turn) until the server has refused ``refusals`` of its writes, or ``steps``
    writes were made."""
    load = FullLoad()
    never = threading.Event()
    rng = random.Random(prefix)  # noqa: S311 - test data, not secrets

    def write(index: int, parent: str) -> None:
        api = Api(server, never)
        refused = 0
        try:
            for step in range(steps):
                rest = step % 4 in (1, 2)
                rid = f"{prefix}{index}-{step}"
                try:
                    if step % 2:
                        name = f"{parent}/results/{rid}"
                        answer: Message = api.create_result(rest, parent, rid, _result(rng, rid))
                    else:
                        name = f"{APP}/evaluations/{rid}"
                        answer = api.create_evaluation(rest, rid, _golden(rid))
                except Refused as refusal:
                    with load.lock:
                        load.refused[name] = (refusal.code, refusal.reason)
                        load.refused_on.add("REST" if rest else "gRPC")
                    refused += 1
                    if refused == refusals:
                        return
                else:
                    with load.lock:
                        load.acknowledged[name] = answer
        finally:
            api.close()

    threads = [
        threading.Thread(target=write, args=(index, parent)) for index, parent in enumerate(parents)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a write hangs"
    return load


def _check_stored(
    server: RunningServer, acknowledged: dict[str, Message], absent: set[str]
) -> None:
    """Every acknowledged evaluation and result is stored as acknowledged, none of ``absent``
    is, and every evaluation's derived fields agree with its results."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        evaluations, results = _listed(service_grpc.EvaluationServiceStub(channel))
    stored: dict[str, Message] = {**evaluations, **results}
    for name, answer in acknowledged.items():
        assert name in stored, f"acknowledged {name} was lost"
        if isinstance(answer, Evaluation):
            assert _content(stored[name]) == _content(answer), name  # type: ignore[arg-type]
        else:
            assert stored[name] == answer, name
    assert not absent & set(stored), f"refused writes were stored: {sorted(absent & set(stored))}"
    for evaluation in evaluations.values():
        _check_derived(
            evaluation, [r for n, r in results.items() if n.startswith(evaluation.name + "/")]
        )


def test_writes_past_the_file_size_limit_are_unavailable_and_recover_without_restart(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "db.sqlite")
    never = threading.Event()
    api = Api(server, never)
    try:
        parents = [
            api.create_evaluation(i % 2 == 1, f"parent{i}", _golden(f"parent{i}")) for i in range(4)
        ]
        kept: dict[str, Message] = {e.name: e for e in parents}
        rng = random.Random(0)  # noqa: S311 - test data, not secrets
        for index, parent in enumerate(parents):
            result = api.create_result(index % 2 == 0, parent.name, "first", _result(rng, "first"))
            kept[result.name] = result
        # Room for a few dozen more commits in the write-ahead log, then none.
        _limit_file_size(server, _largest_file(tmp_path) + 1024 * 1024)
        full = _write_until_refused(server, [p.name for p in parents], "full")
        # Refused writes are retryable UNAVAILABLE on both surfaces: no INTERNAL, no hang.
        assert full.refused_on == {"gRPC", "REST"}
        assert set(full.refused.values()) == {_UNAVAILABLE}
        print(
            f"file size limit: {len(full.acknowledged)} acknowledged, {len(full.refused)} refused"
        )
        # Reads go on as before.
        for rest in (False, True):
            assert _content(api.get_evaluation(rest, parents[0].name)) == _content(parents[0])

        # Space returns: the next writes succeed, no restart needed.
        _limit_file_size(server, resource.RLIM_INFINITY)
        later = _write_until_refused(server, [p.name for p in parents], "later", 1, steps=6)
        assert not later.refused
        _check_stored(
            server, {**kept, **full.acknowledged, **later.acknowledged}, set(full.refused)
        )
    finally:
        api.close()
        code = server.stop(signal.SIGTERM)
    assert code == 0
    assert "SQLite cannot store writes" in server.output()
    assert "stores writes to" in server.output()
    _check_file(tmp_path / "db.sqlite")


def _wait_done(server: RunningServer, name: str) -> operations_pb2.Operation:
    """The operation ``name`` once done (WaitOperation, up to a minute)."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = operations_pb2_grpc.OperationsStub(channel)
        for _ in range(6):
            operation: operations_pb2.Operation = stub.WaitOperation(
                operations_pb2.WaitOperationRequest(name=name, timeout={"seconds": 10}),
                timeout=30,
            )
            if operation.done:
                return operation
    raise AssertionError(f"{name} is still running")


def test_an_export_larger_than_the_disk_allows_fails_and_leaves_no_file(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite"
    names = seed_large(SqliteStorage(database), BIG, 4, 12)  # an export of a few megabytes
    server = start_server(database)
    try:
        # Room for the operation's own rows, not for the export document.
        _limit_file_size(server, _largest_file(tmp_path) + 1024 * 1024)
        failed = _wait_done(server, start_export(server.grpc_target, BIG, names).name)
        assert failed.error.code == code_pb2.UNAVAILABLE, failed.error
        assert "Cannot write gs://bucket/big/" in failed.error.message, failed.error
        assert _files(server.export_dir) == []  # no part, no temporary file

        _limit_file_size(server, resource.RLIM_INFINITY)
        done = _wait_done(server, start_export(server.grpc_target, BIG, names).name)
        response = service_pb2.ExportEvaluationsResponse()
        assert done.response.Unpack(response), done.error
        written = _files(server.export_dir)
        assert [p.name for p in written] == [response.evaluations_uri.rsplit("/", 1)[1]]
        bundle = exchange.load(written[0].read_bytes())
        assert (len(bundle.evaluations), len(bundle.results)) == (4, 48)
    finally:
        code = server.stop(signal.SIGTERM)
    assert code == 0
    _check_file(database)


# -- a full file system (tmpfs) ------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount_point`` for the test's duration; skips the test where
    none can be mounted (not root, no CAP_SYS_ADMIN, no mount command)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the file size limit test ran")
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount command")
    mount_point.mkdir()
    mounted = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size},mode=0700", "ces-eval-faults", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run([umount, str(mount_point)], check=True, timeout=60)


def _fill(folder: Path) -> Path:
    """A file taking every free byte of ``folder``'s file system."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as handle:
        for chunk in (1 << 20, 1 << 12):
            block = bytes(chunk)
            with contextlib.suppress(OSError):
                while True:
                    handle.write(block)
    free = os.statvfs(folder)
    assert free.f_bavail * free.f_frsize < 4096, "the file system still has room"
    return filler


@pytest.mark.external  # mount (a tmpfs)
def test_a_full_file_system_refuses_writes_until_space_returns(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "disk", "32m") as disk:
        database = disk / "db.sqlite"
        names = seed_large(SqliteStorage(database), BIG, 4, 12)
        server = start_server(database, export_dir=disk / "exports")
        api = Api(server, threading.Event())
        try:
            kept = api.create_evaluation(False, "kept", _golden("kept"))
            # An export starts (its operation is stored), then the disk fills while it renders:
            # neither its document nor, at first, its end can be written.
            export = start_export(server.grpc_target, BIG, names).name
            filler = _fill(disk)
            full = _write_until_refused(server, [kept.name], "full", refusals=4)
            assert full.refused_on == {"gRPC", "REST"}
            assert set(full.refused.values()) == {_UNAVAILABLE}
            assert _content(api.get_evaluation(True, kept.name)) == _content(kept)
            # The export failed; recording its end is refused (the log is the only sign).
            for _ in range(600):
                if "cannot record the end of " + export in server.output():
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(
                    "the export never tried to record its end:\n" + server.output()
                )
            assert not _operation(server, export).done

            filler.unlink()  # space returns: no restart
            failed = _wait_done(server, export)
            assert failed.error.code == code_pb2.UNAVAILABLE, failed.error
            assert _files(server.export_dir) == []
            later = _write_until_refused(server, [kept.name], "later", 1, steps=6)
            assert not later.refused
            _check_stored(
                server,
                {kept.name: kept, **full.acknowledged, **later.acknowledged},
                set(full.refused),
            )
        finally:
            api.close()
            code = server.stop(signal.SIGTERM)
        assert code == 0
        assert "database or disk is full" in server.output()
        _check_file(database)
