"""The storage contract of evaluation datasets' side effects, against every backend (a real
SQLite file, a fresh database on a real PostgreSQL server): the evaluations a dataset lists
hold its name in ``evaluation_datasets`` (new etag on each change, the filter column kept),
exactly, through creates, updates and deletes of datasets and deletes of evaluations, each in
one transaction; a dataset is served with its evaluations' summed metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest

from ces_eval import filtering
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage.base import (
    Conflict,
    EtagMismatch,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
    Storage,
)
from tests.contract.test_storage import (
    APP,
    BACKENDS,
    _with,
    evaluation,
    make_storage,
    result,
    run,
    storage_factory,
    ts,
)

__all__ = ["make_storage"]

Dataset = evaluation_pb2.EvaluationDataset


def dataset(did: str, display: str, *evaluations: str, etag: str = "d0") -> Dataset:
    message = Dataset(
        name=f"{APP}/evaluationDatasets/{did}",
        display_name=display,
        evaluations=[f"{APP}/evaluations/{e}" for e in evaluations],
        etag=etag,
    )
    message.create_time.CopyFrom(ts(1))
    message.update_time.CopyFrom(ts(1))
    return message


async def _evaluations(storage: Storage, *ids: str) -> None:
    for index, eid in enumerate(ids):
        await storage.insert_evaluation(evaluation(APP, eid, eid.upper(), index + 1))


async def _memberships(storage: Storage, eid: str) -> tuple[list[str], str]:
    stored = await storage.get_evaluation(f"{APP}/evaluations/{eid}")
    assert stored is not None
    return [d.rsplit("/", 1)[1] for d in stored.evaluation_datasets], stored.etag


async def _holding(storage: Storage, did: str) -> list[str]:
    """The evaluations whose evaluation_datasets filter column names dataset ``did``."""
    expr = filtering.parse(f'evaluation_datasets:"{APP}/evaluationDatasets/{did}"')
    query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 100, filter=expr)
    return [e.name.rsplit("/", 1)[1] for e, _ in await storage.list_evaluations(query)]


def test_a_dataset_write_moves_its_evaluations_memberships(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        await _evaluations(storage, "e1", "e2", "e3")
        await storage.insert_dataset(dataset("d1", "D1", "e1", "e2"), "x1")
        await storage.insert_dataset(dataset("d2", "D2", "e2"), "x2")
        assert await _memberships(storage, "e1") == (["d1"], "x1")
        assert await _memberships(storage, "e2") == (["d1", "d2"], "x2")
        assert await _memberships(storage, "e3") == ([], "e0")  # untouched: its etag kept
        assert await _holding(storage, "d1") == ["e1", "e2"]

        moved = dataset("d1", "D1", "e2", "e3", etag="d1")
        with pytest.raises(EtagMismatch):
            await storage.replace_dataset(moved, "stale", "x3")
        await storage.replace_dataset(moved, "d0", "x3")
        assert await _memberships(storage, "e1") == ([], "x3")  # removed
        assert await _memberships(storage, "e2") == (["d1", "d2"], "x2")  # kept: unchanged
        assert await _memberships(storage, "e3") == (["d1"], "x3")  # added
        assert await _holding(storage, "d1") == ["e2", "e3"]
        assert await storage.get_dataset(moved.name) == _served(moved)

        with pytest.raises(EtagMismatch):
            await storage.delete_dataset(moved.name, "d0", "x4")
        await storage.delete_dataset(moved.name, "d1", "x4")
        assert await storage.get_dataset(moved.name) is None
        assert await _memberships(storage, "e2") == (["d2"], "x4")
        assert await _memberships(storage, "e3") == ([], "x4")
        with pytest.raises(Missing):
            await storage.delete_dataset(moved.name, None, "x5")

    run(_with(make_storage(), body))


def _served(message: Dataset) -> Dataset:
    served = Dataset()
    served.CopyFrom(message)
    served.aggregated_metrics.SetInParent()
    return served


def test_a_failed_dataset_write_changes_no_evaluation(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        await _evaluations(storage, "e1", "e2")
        await storage.insert_dataset(dataset("d1", "D1", "e1"), "x1")
        with pytest.raises(Missing) as missing:
            await storage.insert_dataset(dataset("d2", "D2", "e2", "none"), "x2")
        assert missing.value.name == f"{APP}/evaluations/none"
        with pytest.raises(Conflict):  # the display name is taken: nothing of it stays
            await storage.insert_dataset(dataset("d3", "D1", "e2"), "x3")
        with pytest.raises(Missing):
            await storage.replace_dataset(dataset("d1", "D1", "e2", "none"), "d0", "x4")
        with pytest.raises(Missing):
            await storage.replace_dataset(dataset("nope", "N", "e2"), "d0", "x5")
        assert await _memberships(storage, "e1") == (["d1"], "x1")
        assert await _memberships(storage, "e2") == ([], "e0")
        assert await storage.get_dataset(f"{APP}/evaluationDatasets/d2") is None
        stored = await storage.get_dataset(f"{APP}/evaluationDatasets/d1")
        assert stored is not None and list(stored.evaluations) == [f"{APP}/evaluations/e1"]

    run(_with(make_storage(), body))


def test_deleting_an_evaluation_takes_it_out_of_its_datasets(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        await _evaluations(storage, "e1", "e2")
        await storage.insert_dataset(dataset("d1", "D1", "e1", "e2"), "x1")
        await storage.insert_dataset(dataset("d2", "D2", "e2"), "x2")
        await storage.insert_dataset(dataset("d3", "D3", "e1"), "x3")
        await storage.delete_evaluation(f"{APP}/evaluations/e2", None, dataset_etag="y1")
        d1 = await storage.get_dataset(f"{APP}/evaluationDatasets/d1")
        d2 = await storage.get_dataset(f"{APP}/evaluationDatasets/d2")
        d3 = await storage.get_dataset(f"{APP}/evaluationDatasets/d3")
        assert d1 is not None and d2 is not None and d3 is not None
        assert (list(d1.evaluations), d1.etag) == ([f"{APP}/evaluations/e1"], "y1")
        assert (list(d2.evaluations), d2.etag) == ([], "y1")
        assert (list(d3.evaluations), d3.etag) == ([f"{APP}/evaluations/e1"], "d0")
        expr = filtering.parse(f'evaluations:"{APP}/evaluations/e2"')
        query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 10, filter=expr)
        assert await storage.list_datasets(query) == []

    run(_with(make_storage(), body))


def test_an_evaluation_an_import_replaces_stays_in_its_datasets(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        await _evaluations(storage, "e1")
        await storage.insert_dataset(dataset("d1", "D1", "e1"), "x1")
        name = f"{APP}/evaluations/e1"
        await storage.insert_result(result(name, "r1", 5), parent_etag="p1")
        successor = evaluation(APP, "e1", "Imported", 9, etag="i1")
        await storage.import_bundle([successor], [], replacing=[name])
        stored = await storage.get_evaluation(name)
        assert stored is not None and stored.display_name == "Imported"
        assert list(stored.evaluation_datasets) == [f"{APP}/evaluationDatasets/d1"]
        assert await storage.get_result(f"{name}/results/r1") is None
        d1 = await storage.get_dataset(f"{APP}/evaluationDatasets/d1")
        assert d1 is not None and list(d1.evaluations) == [name]
        expr = filtering.parse(f'evaluation_datasets:"{APP}/evaluationDatasets/d1"')
        query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 10, filter=expr)
        assert [e.name for e, _ in await storage.list_evaluations(query)] == [name]

    run(_with(make_storage(), body))


def test_a_dataset_is_served_with_its_evaluations_summed_metrics(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        await _evaluations(storage, "e1", "e2", "e3")
        e1, e2, e3 = (f"{APP}/evaluations/{e}" for e in ("e1", "e2", "e3"))
        await storage.insert_result(result(e1, "r1", 10), parent_etag="p1")
        await storage.insert_result(result(e1, "r2", 20), parent_etag="p2")
        failed = result(e2, "r1", 30)
        failed.evaluation_status = evaluation_pb2.EvaluationResult.Outcome.FAIL
        await storage.insert_result(failed, parent_etag="p3")
        await storage.insert_result(result(e3, "r1", 40), parent_etag="p4")
        metrics = await storage.insert_dataset(dataset("d1", "D1", "e1", "e2"), "x1")
        await storage.insert_dataset(dataset("d2", "D2"), "x2")
        counts = [(m.pass_count, m.fail_count) for m in metrics.metrics_by_app_version]
        assert counts == [(2, 1)]
        stored = await storage.get_dataset(f"{APP}/evaluationDatasets/d1")
        assert stored is not None and stored.aggregated_metrics == metrics
        await storage.delete_result(f"{e1}/results/r2", parent_etag="p5")
        query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 10)
        page = [Dataset.FromString(data) for data, _ in await storage.list_datasets(query)]
        assert [d.display_name for d in page] == ["D1", "D2"]
        first = page[0].aggregated_metrics.metrics_by_app_version
        assert [(m.pass_count, m.fail_count) for m in first] == [(1, 1)]
        assert page[1].aggregated_metrics == evaluation_pb2.AggregatedMetrics()
        assert page[1].HasField("aggregated_metrics")
        moved = dataset("d1", "D1", "e3", etag="d1")
        metrics = await storage.replace_dataset(moved, "d0", "x3")
        assert [m.pass_count for m in metrics.metrics_by_app_version] == [1]

    run(_with(make_storage(), body))


@pytest.fixture(params=[backend for backend in BACKENDS if backend != "sqlite"])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    """Storage objects over one PostgreSQL database, as replicas open it."""
    return storage_factory(request, tmp_path)


def test_concurrent_writes_of_replicas_keep_the_memberships_exact(
    replicas: Callable[[], Storage],
) -> None:
    """Two replicas create datasets listing e1 and e2 and move them while a third deletes e1:
    whatever the interleaving, no dataset is left listing e1 and each evaluation lists exactly
    the datasets that list it."""

    async def main() -> None:
        one, two, three = replicas(), replicas(), replicas()
        for storage in (one, two, three):
            await storage.open()
        try:
            await _evaluations(one, "e1", "e2", "e3")

            async def make(storage: Storage, index: int) -> None:
                order = ("e1", "e2") if index % 2 else ("e2", "e1")
                try:
                    await storage.insert_dataset(dataset(f"d{index}", f"D{index}", *order), "x")
                except Missing:
                    return  # e1 was deleted first
                moved = dataset(f"d{index}", f"D{index}", "e2", "e3", etag="d1")
                if index % 3 == 0:
                    # EtagMismatch: the delete of e1 changed it first.
                    with contextlib.suppress(EtagMismatch):
                        await storage.replace_dataset(moved, "d0", "y")

            await make(one, 0)  # the delete has a dataset to change, whenever it runs
            await asyncio.gather(
                *(make(one if i % 2 else two, i) for i in range(1, 13)),
                three.delete_evaluation(f"{APP}/evaluations/e1", None, dataset_etag="z"),
            )
            query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 100)
            stored = [Dataset.FromString(d) for d, _ in await one.list_datasets(query)]
            assert stored[0].name.endswith("/d0")
            holding: dict[str, set[str]] = {"e2": set(), "e3": set()}
            for found in stored:
                listed = {e.rsplit("/", 1)[1] for e in found.evaluations}
                assert "e1" not in listed, found
                for eid in listed:
                    holding[eid].add(found.name.rsplit("/", 1)[1])
            for eid, expected in holding.items():
                assert set((await _memberships(one, eid))[0]) == expected, eid
            assert await one.get_evaluation(f"{APP}/evaluations/e1") is None
        finally:
            for storage in (one, two, three):
                await storage.close()

    asyncio.run(main())
