"""The one read-modify-write round (core/aip/retry.py) over a real SQLite file whose row another
program changes between every read and write: an update or delete without an etag rides out
``ATTEMPTS - 1`` lost rounds and gives up with ABORTED on the next; with an etag it never
retries."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ces_eval.core.aip import standard
from ces_eval.core.aip.context import Context
from ces_eval.core.aip.retry import ATTEMPTS, Changed, rewrite
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import EtagMismatch
from tests.support.elsewhere import retag_evaluation
from tests.unit.test_core import ME, Harness

APP = "projects/p/locations/l/apps/a"
NAME = f"{APP}/evaluations/contended"


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    harness.create("Contended", "contended")
    yield harness
    harness.close()


def _contended(tmp_path: Path, changes: int) -> tuple[Any, list[int]]:
    """EVALUATIONS whose update and delete see the stored evaluation change under them (a new
    etag, written by another connection) in their first ``changes`` rounds, each between the
    read and the conditional write; and the list of rounds seen."""
    rounds: list[int] = []

    def change() -> None:
        rounds.append(len(rounds))
        if len(rounds) <= changes:
            retag_evaluation(tmp_path / "db.sqlite", NAME, f"elsewhere-{len(rounds)}")

    async def verify(context: Context, message: Any) -> list[Any]:
        change()
        return []

    async def guard(context: Context, current: Any, request: Any, caller: Any) -> None:
        change()

    return dataclasses.replace(EVALUATIONS, verify=verify, guard=guard), rounds


def _update(core: Harness, resource: Any, etag: str = "") -> Any:
    request = service_pb2.UpdateEvaluationRequest(
        evaluation=evaluation_pb2.Evaluation(name=NAME, display_name="Mine", etag=etag)
    )
    request.update_mask.paths.append("display_name")
    return core.run(standard.update(core.core.context, resource, request, ME))


def _delete(core: Harness, resource: Any, etag: str = "") -> Any:
    request = service_pb2.DeleteEvaluationRequest(name=NAME, etag=etag, force=True)
    return core.run(standard.delete(core.core.context, resource, request))


@pytest.mark.parametrize("method", [_update, _delete])
def test_a_write_without_etag_gives_up_aborted_after_every_round_lost(
    core: Harness, tmp_path: Path, method: Any
) -> None:
    resource, rounds = _contended(tmp_path, changes=ATTEMPTS)
    with pytest.raises(ServiceError) as raised:
        method(core, resource)
    assert raised.value.code is Code.ABORTED
    assert raised.value.reason == "ETAG_MISMATCH"
    assert isinstance(raised.value.__cause__, EtagMismatch)
    assert len(rounds) == ATTEMPTS
    stored = core.run(core.storage.get_evaluation(NAME))
    assert stored.display_name == "Contended"  # nothing of the lost rounds was written
    assert stored.etag == f"elsewhere-{ATTEMPTS}"


@pytest.mark.parametrize("method", [_update, _delete])
def test_a_write_without_etag_rides_out_every_round_but_the_last(
    core: Harness, tmp_path: Path, method: Any
) -> None:
    resource, rounds = _contended(tmp_path, changes=ATTEMPTS - 1)
    method(core, resource)
    assert len(rounds) == ATTEMPTS
    stored = core.run(core.storage.get_evaluation(NAME))
    assert stored is None if method is _delete else stored.display_name == "Mine"


@pytest.mark.parametrize("method", [_update, _delete])
def test_a_write_with_an_etag_is_not_retried(core: Harness, tmp_path: Path, method: Any) -> None:
    resource, rounds = _contended(tmp_path, changes=1)
    etag = core.run(core.storage.get_evaluation(NAME)).etag
    with pytest.raises(ServiceError) as raised:
        method(core, resource, etag)
    assert raised.value.code is Code.ABORTED
    assert len(rounds) == 1


def test_rewrite_answers_the_first_round_not_lost_and_gives_up_after_attempts(
    core: Harness,
) -> None:
    rounds: list[int] = []

    async def round_() -> int:
        rounds.append(len(rounds))
        if len(rounds) < 3:
            raise Changed
        return len(rounds)

    assert core.run(rewrite(round_, lambda: AssertionError("gave up"))) == 3
    rounds.clear()
    with pytest.raises(LookupError):
        core.run(rewrite(round_, lambda: LookupError("gave up"), attempts=2))
    assert len(rounds) == 2
