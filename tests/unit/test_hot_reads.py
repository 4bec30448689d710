"""Gets and List pages answered again from what was read (core/aip/context.py HotReads, standard's
_get_rpc and list_page), over a real SQLite file: never older than the database, whoever wrote
to it (this server's own writes, another program's), and bounded."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from ces_eval.contract.encoded import Encoded, message_of
from ces_eval.core.aip import standard
from ces_eval.core.aip.context import HotReads
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.core.resources.results import RESULTS
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.support.elsewhere import rename_evaluation
from tests.unit.test_core import ME, Harness

APP = "projects/p/locations/l/apps/a"
NAME = f"{APP}/evaluations/kept"


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    evaluation = evaluation_pb2.Evaluation(display_name="First")
    evaluation.golden.turns.add().steps.add().user_input.text = "hi"
    request = service_pb2.CreateEvaluationRequest(
        parent=APP, evaluation_id="kept", evaluation=evaluation
    )
    harness.call("create_evaluation", request)
    yield harness
    harness.close()


def _get(core: Harness) -> Encoded:
    call = standard.methods(EVALUATIONS, "Get")["GetEvaluation"]
    answer = core.run(call(core.core.context, service_pb2.GetEvaluationRequest(name=NAME), ME))
    assert isinstance(answer, Encoded)
    return answer


def _display_name(core: Harness) -> str:
    evaluation = message_of(_get(core))
    assert isinstance(evaluation, evaluation_pb2.Evaluation)
    return evaluation.display_name


def test_a_get_again_with_nothing_written_is_the_same_answer(core: Harness) -> None:
    first = _get(core)
    assert _get(core) is first  # kept: no row read, no parse


def test_a_write_of_this_server_is_seen_by_the_next_get(core: Harness) -> None:
    assert _display_name(core) == "First"
    update = service_pb2.UpdateEvaluationRequest(
        evaluation=evaluation_pb2.Evaluation(name=NAME, display_name="Second")
    )
    update.update_mask.paths.append("display_name")
    core.call("update_evaluation", update)
    assert _display_name(core) == "Second"
    core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=NAME, force=True))
    with pytest.raises(ServiceError) as raised:
        _get(core)
    assert raised.value.code is Code.NOT_FOUND


def test_a_write_of_another_program_is_seen_by_the_next_get(core: Harness, tmp_path: Path) -> None:
    assert _display_name(core) == "First"
    rename_evaluation(tmp_path / "db.sqlite", NAME, "Elsewhere")
    assert _display_name(core) == "Elsewhere"


def _answer(size: int) -> Encoded:
    return Encoded(evaluation_pb2.Evaluation, b"\x0a" + bytes([size - 2]) + b"x" * (size - 2))


def test_kept_answers_are_bounded_and_belong_to_one_version() -> None:
    hot = HotReads(max_bytes=16 * 100)
    hot.put(1, "big", _answer(101))  # over a 16th of the bound: not kept
    assert hot.get(1, "big") is None
    for index in range(20):
        hot.put(1, f"n{index}", _answer(100))
    assert hot.get(1, "n0") is None  # the least recently read went first
    assert hot.get(1, "n19") is not None
    assert hot.get(2, "n19") is None  # another version: nothing read before it holds
    assert hot.get(1, "n19") is None


def test_every_cached_read_is_computed_once_per_version_and_only_when_kept(
    core: Harness,
) -> None:
    """HotReads.answer, the one way the core's reads and the surfaces' renderings are kept."""
    hot = HotReads()
    computed: list[object] = []

    def compute(answer: object) -> Callable[[], Awaitable[object]]:
        async def call() -> object:
            computed.append(answer)
            return answer

        return call

    def at(version: int | None) -> Callable[[], Awaitable[int | None]]:
        async def read() -> int | None:
            return version

        return read

    def answer(version: int | None, key: str, given: object) -> object:
        return core.run(hot.answer(at(version), key, Encoded, compute(given)))

    first, second = _answer(10), _answer(10)
    assert answer(1, "k", first) is first
    assert answer(1, "k", second) is first  # kept
    assert answer(2, "k", second) is second  # written since
    assert answer(None, "n", first) is first
    assert answer(None, "n", second) is second  # no version: nothing kept
    assert answer(2, "s", "other") == "other"  # not an answer to keep
    assert answer(2, "s", first) is first  # so nothing was kept
    assert computed == [first, second, first, second, "other", first]


def _result(core: Harness, result_id: str) -> None:
    request = emulator_pb2.CreateEvaluationResultRequest(
        parent=NAME,
        evaluation_result_id=result_id,
        evaluation_result=evaluation_pb2.EvaluationResult(display_name=result_id),
    )
    core.run(standard.create(core.core.context, RESULTS, request, ME))


def _page(core: Harness) -> Encoded:
    request = service_pb2.ListEvaluationResultsRequest(parent=NAME, page_size=10)
    response = service_pb2.ListEvaluationResultsResponse()
    answer = core.run(standard.list_page(core.core.context, RESULTS, request, response))
    assert isinstance(answer, Encoded)
    return answer


def _listed(core: Harness) -> list[str]:
    page = message_of(_page(core))
    assert isinstance(page, service_pb2.ListEvaluationResultsResponse)
    return sorted(result.display_name for result in page.evaluation_results)


def test_a_list_page_is_kept_until_anyone_writes(core: Harness, tmp_path: Path) -> None:
    _result(core, "r1")
    first = _page(core)
    assert _page(core) is first  # the same request, nothing written: kept
    _result(core, "r2")  # this server writes
    assert _listed(core) == ["r1", "r2"]
    with contextlib.closing(sqlite3.connect(tmp_path / "db.sqlite")) as other:
        other.execute("DELETE FROM evaluation_results WHERE name = ?", (f"{NAME}/results/r1",))
        other.commit()  # another program writes
    assert _listed(core) == ["r2"]


def test_every_commit_elsewhere_moves_the_version_across_checkpoints(
    core: Harness, tmp_path: Path
) -> None:
    # The version is queried again only when the log's index header changed: every commit
    # changes it, a checkpoint restarting the log included.
    database = tmp_path / "db.sqlite"
    before = core.run(core.storage.version())
    for index in range(24):
        rename_evaluation(database, NAME, f"n{index}")
        if index % 5 == 2:
            with contextlib.closing(sqlite3.connect(database)) as other:
                other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        now = core.run(core.storage.version())
        assert now != before
        before = now
        assert _display_name(core) == f"n{index}"
        assert core.run(core.storage.version()) == now  # read only: the same version


def test_a_version_with_nothing_committed_runs_no_statement(core: Harness, tmp_path: Path) -> None:
    first = core.run(core.storage.version())
    _get(core)  # read once: kept
    statements: list[str] = []
    reader = core.storage._point_reader  # what the point reader executes
    assert reader is not None
    reader.set_trace_callback(statements.append)
    try:
        assert [core.run(core.storage.version()) for _ in range(3)] == [first] * 3
        assert statements == []
        _get(core)
        assert statements == []  # answered again from what was kept
        rename_evaluation(tmp_path / "db.sqlite", NAME, "Moved")
        assert core.run(core.storage.version()) != first
        assert statements == ["PRAGMA data_version"]
    finally:
        reader.set_trace_callback(None)
