"""The storage contract of evaluation runs beyond their generic table, on SQLite and
PostgreSQL: the delete that takes a run's results with it and brings their evaluations'
derived fields up to date in one transaction, and ListEvaluations' ``run_filter`` over the runs'
fields."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ces_eval import filtering
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import ListQuery, Missing, OrderBy, SortKey, Storage
from tests.contract.test_storage import APP, _with, evaluation, make_storage, result, run, ts

__all__ = ["make_storage"]  # the fixture, parametrized over both backends

Run = evaluation_pb2.EvaluationRun


def stored_run(rid: str, t: int, **fields: object) -> Run:
    message = Run(name=f"{APP}/evaluationRuns/{rid}", display_name=rid, **fields)  # type: ignore[arg-type]
    message.create_time.CopyFrom(ts(t))
    return message


def test_deleting_a_run_takes_its_results_and_refreshes_their_evaluations(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        one, two, untouched = (evaluation(APP, e, e.upper(), 1) for e in ("e1", "e2", "e3"))
        for e in (one, two, untouched):
            await storage.insert_evaluation(e)
        doomed, kept = stored_run("doomed", 1), stored_run("kept", 2)
        await storage.insert_row(tables.RUNS, doomed)
        await storage.insert_row(tables.RUNS, kept)
        await storage.insert_result(result(one.name, "r1", 10, "doomed"), "t1")
        await storage.insert_result(result(one.name, "r2", 5, "kept"), "t2")
        await storage.insert_result(result(two.name, "r3", 20, "doomed"), "t3")
        await storage.insert_result(result(two.name, "r4", 30, "doomed"), "t4")

        assert await storage.delete_evaluation_run(doomed.name, "after") == 3

        assert await storage.get_row(tables.RUNS, doomed.name) is None
        assert await storage.get_row(tables.RUNS, kept.name) == kept
        assert await storage.get_result(f"{one.name}/results/r1") is None
        for gone in ("r3", "r4"):
            assert await storage.get_result(f"{two.name}/results/{gone}") is None
        assert await storage.get_result(f"{one.name}/results/r2") is not None
        first = await storage.get_evaluation(one.name)
        assert first is not None
        assert list(first.evaluation_runs) == [kept.name] and first.etag == "after"
        assert first.last_completed_result.name == f"{one.name}/results/r2"
        [group] = first.aggregated_metrics.metrics_by_app_version
        assert group.pass_count == 1
        second = await storage.get_evaluation(two.name)
        assert second is not None and second.etag == "after"
        assert not second.evaluation_runs and not second.HasField("last_completed_result")
        assert not second.aggregated_metrics.metrics_by_app_version
        third = await storage.get_evaluation(untouched.name)
        assert third is not None and third.etag == untouched.etag
        with pytest.raises(Missing) as missing:
            await storage.delete_evaluation_run(doomed.name, "again")
        assert missing.value.name == doomed.name
        # The last run goes with its one result; its evaluation keeps no run.
        assert await storage.delete_evaluation_run(kept.name, "last") == 1
        assert await storage.get_row(tables.RUNS, kept.name) is None
        emptied = await storage.get_evaluation(one.name)
        assert emptied is not None and not emptied.evaluation_runs

    run(_with(make_storage(), body))


def test_the_run_filter_selects_evaluations_by_the_fields_of_their_results_runs(
    make_storage: Callable[[], Storage],
) -> None:
    async def body(storage: Storage) -> None:
        one, two, three = (evaluation(APP, e, e.upper(), 1) for e in ("e1", "e2", "e3"))
        for e in (one, two, three):
            await storage.insert_evaluation(e)
        ci = stored_run("ci", 1_000_000, initiated_by="ci@x", app_version_display_name="v1")
        me = stored_run("me", 3_000_000, initiated_by="me@x", evaluations=[three.name])
        await storage.insert_row(tables.RUNS, ci)
        await storage.insert_row(tables.RUNS, me)
        await storage.insert_result(result(one.name, "r1", 1, "ci"), "t")
        await storage.insert_result(result(two.name, "r2", 1, "me"), "t")
        await storage.insert_result(result(two.name, "r3", 1, "unstored"), "t")

        async def matching(text: str) -> list[str]:
            query = ListQuery(
                parent=APP,
                order=OrderBy(SortKey.NAME, descending=False),
                limit=10,
                run_filter=filtering.parse(text),
            )
            return [e.name.rsplit("/", 1)[1] for e, _ in await storage.list_evaluations(query)]

        assert await matching('initiated_by = "ci@x"') == ["e1"]
        assert await matching('appVersionDisplayName = "v1"') == ["e1"]
        assert await matching(f'create_time > "{ts(2_000_000).ToJsonString()}"') == ["e2"]
        assert await matching('initiated_by:"@x"') == ["e1", "e2"]
        # A run's own list of evaluations is not how it selects them: its results are.
        assert await matching(f'evaluations:"{three.name}"') == ["e2"]

    run(_with(make_storage(), body))
