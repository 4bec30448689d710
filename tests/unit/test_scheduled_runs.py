"""Scheduled evaluation runs (core/engine/scheduled_runs.py) through the core's RPCs over a real
SQLite file: the request and schedule rules, the next execution across changes, list filters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import field_mask_pb2, timestamp_pb2

from ces_eval.core.engine import schedules
from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import tables
from tests.unit.test_core import APP, Harness

Scheduled = evaluation_pb2.ScheduledEvaluationRun
Frequency = Scheduled.SchedulingConfig.Frequency
E1 = f"{APP}/evaluations/e1"
E2 = f"{APP}/evaluations/e2"
DATASET = f"{APP}/evaluationDatasets/ds"
FIELD = "scheduled_evaluation_run"
# A Monday far ahead: every computed firing is after the tests' "now".
FUTURE = datetime(2100, 3, 1, 9, 30, tzinfo=UTC)


def _stamp(moment: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def body(
    display_name: str = "Nightly",
    *,
    evaluations: tuple[str, ...] = (E1,),
    frequency: int = Frequency.DAILY,
    start: datetime = FUTURE,
    days: tuple[int, ...] = (),
    active: bool = True,
) -> Scheduled:
    run = Scheduled(display_name=display_name, active=active)
    run.request.app = APP
    run.request.evaluations.extend(evaluations)
    run.scheduling_config.frequency = frequency  # type: ignore[assignment]
    run.scheduling_config.start_time.CopyFrom(_stamp(start))
    run.scheduling_config.days_of_week.extend(days)
    return run


class Runs(Harness):
    """test_core's harness with two evaluations (e1, e2) and a dataset (ds) of the app."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.create("One", "e1")
        self.create("Two", "e2")
        dataset = evaluation_pb2.EvaluationDataset(name=DATASET, display_name="Set")
        dataset.evaluations.append(E1)
        self.run(self.storage.insert_row(tables.DATASETS, dataset))

    def schedule(self, run: Scheduled, run_id: str = "") -> Scheduled:
        request = service_pb2.CreateScheduledEvaluationRunRequest(
            parent=APP, scheduled_evaluation_run_id=run_id, scheduled_evaluation_run=run
        )
        created: Scheduled = self.call("create_scheduled_evaluation_run", request)
        return created

    def change(self, run: Scheduled, *paths: str) -> Scheduled:
        request = service_pb2.UpdateScheduledEvaluationRunRequest(
            scheduled_evaluation_run=run, update_mask=field_mask_pb2.FieldMask(paths=paths)
        )
        updated: Scheduled = self.call("update_scheduled_evaluation_run", request)
        return updated

    def listed(self, **fields: Any) -> list[str]:
        request = service_pb2.ListScheduledEvaluationRunsRequest(parent=APP, **fields)
        response = self.call("list_scheduled_evaluation_runs", request)
        return [run.name.rsplit("/", 1)[1] for run in response.scheduled_evaluation_runs]


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Runs]:
    harness = Runs(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _refused(core: Runs, run: Scheduled) -> list[str]:
    request = service_pb2.CreateScheduledEvaluationRunRequest(
        parent=APP, scheduled_evaluation_run=run
    )
    error = core.error("create_scheduled_evaluation_run", request)
    assert error.code is Code.INVALID_ARGUMENT, error
    return [v.field.removeprefix(f"{FIELD}.") for v in error.violations]


def _edit(change: Callable[[Scheduled], object]) -> Scheduled:
    run = body()
    change(run)
    return run


def _persona(run: Scheduled, persona: str, task_count: int = 0) -> None:
    run.request.persona_run_configs.add(persona=persona, task_count=task_count)


# -- create: what is stored --------------------------------------------------------------------


def test_create_stores_the_request_and_ignores_output_only_fields(core: Runs) -> None:
    sent = body(days=())
    sent.total_executions = 7
    sent.last_completed_run = f"{APP}/evaluationRuns/r"
    sent.next_scheduled_execution_time.FromDatetime(datetime(2000, 1, 1, tzinfo=UTC))
    sent.request.run_count = 3
    _persona(sent, f"{APP}/evaluationPersonas/shopper", 2)
    created = core.schedule(sent, "nightly")
    assert created.name == f"{APP}/scheduledEvaluationRuns/nightly"
    assert created.total_executions == 0 and not created.last_completed_run
    assert created.request.evaluations == [E1] and created.request.run_count == 3
    assert created.created_by == "me@example.com" and created.etag
    # DAILY from a future start: the first firing is the start itself.
    assert created.next_scheduled_execution_time.ToDatetime(UTC) == FUTURE
    got = core.call(
        "get_scheduled_evaluation_run",
        service_pb2.GetScheduledEvaluationRunRequest(name=created.name),
    )
    assert got == created


def test_a_dataset_may_be_run_instead_of_evaluations(core: Runs) -> None:
    run = body(evaluations=())
    run.request.evaluation_dataset = DATASET
    assert core.schedule(run).request.evaluation_dataset == DATASET


def test_an_inactive_schedule_has_no_next_execution(core: Runs) -> None:
    created = core.schedule(body(active=False))
    assert not created.HasField("next_scheduled_execution_time")


def test_a_past_one_time_schedule_is_still_due(core: Runs) -> None:
    start = datetime(2020, 5, 17, 8, 0, tzinfo=UTC)
    created = core.schedule(body(frequency=Frequency.NONE, start=start))
    assert created.next_scheduled_execution_time.ToDatetime(UTC) == start


def test_a_past_recurring_start_fires_next_after_the_write(core: Runs) -> None:
    start = datetime(2020, 5, 17, 8, 0, tzinfo=UTC)  # a Sunday
    created = core.schedule(body(frequency=Frequency.WEEKLY, start=start, days=(1, 4)))
    written = created.create_time.ToDatetime(UTC)
    expected = schedules.next_execution(
        schedules.Schedule(Frequency.WEEKLY, start, (1, 4)), written, 0
    )
    assert created.next_scheduled_execution_time.ToDatetime(UTC) == expected
    assert expected is not None and written < expected <= written + timedelta(days=7)


# -- create: what is refused -------------------------------------------------------------------


def _clear_config(run: Scheduled) -> None:
    run.ClearField("scheduling_config")


CASES: list[tuple[str, Callable[[Scheduled], object], list[str]]] = [
    ("display name", lambda r: r.ClearField("display_name"), ["display_name"]),
    ("request", lambda r: r.ClearField("request"), ["request"]),
    ("scheduling config", _clear_config, ["scheduling_config"]),
    (
        "frequency unspecified, reported once",
        lambda r: setattr(r.scheduling_config, "frequency", 0),
        ["scheduling_config.frequency"],
    ),
    (
        "unknown frequency",
        lambda r: setattr(r.scheduling_config, "frequency", 9),
        ["scheduling_config.frequency"],
    ),
    (
        "start time",
        lambda r: r.scheduling_config.ClearField("start_time"),
        ["scheduling_config.start_time"],
    ),
    (
        "days on a daily schedule",
        lambda r: r.scheduling_config.days_of_week.append(1),
        ["scheduling_config.days_of_week"],
    ),
    (
        "days out of range and repeated",
        lambda r: r.scheduling_config.MergeFrom(
            Scheduled.SchedulingConfig(frequency=Frequency.BIWEEKLY, days_of_week=[0, 3, 8, 3])
        ),
        [
            "scheduling_config.days_of_week[0]",
            "scheduling_config.days_of_week[2]",
            "scheduling_config.days_of_week[3]",
        ],
    ),
    ("no app", lambda r: r.request.ClearField("app"), ["request.app"]),
    (
        "another app",
        lambda r: setattr(r.request, "app", "projects/p/locations/l/apps/other"),
        ["request.app"],
    ),
    (
        "neither evaluations nor dataset",
        lambda r: r.request.ClearField("evaluations"),
        ["request.evaluations"],
    ),
    (
        "both evaluations and dataset",
        lambda r: setattr(r.request, "evaluation_dataset", DATASET),
        ["request.evaluation_dataset"],
    ),
    (
        "an evaluation of another app",
        lambda r: r.request.evaluations.append("projects/p/locations/l/apps/b/evaluations/e1"),
        ["request.evaluations[1]"],
    ),
    (
        "not an evaluation name",
        lambda r: r.request.evaluations.append(f"{APP}/evaluationDatasets/ds"),
        ["request.evaluations[1]"],
    ),
    (
        "a repeated evaluation",
        lambda r: r.request.evaluations.append(E1),
        ["request.evaluations[1]"],
    ),
    ("run count zero", lambda r: setattr(r.request, "run_count", 0), ["request.run_count"]),
    ("run count negative", lambda r: setattr(r.request, "run_count", -2), ["request.run_count"]),
    (
        "a persona of another app",
        lambda r: _persona(r, "projects/p/locations/l/apps/b/evaluationPersonas/x"),
        ["request.persona_run_configs[0].persona"],
    ),
    (
        "a negative task count",
        lambda r: _persona(r, f"{APP}/evaluationPersonas/x", -1),
        ["request.persona_run_configs[0].task_count"],
    ),
    (
        "an app version of another app",
        lambda r: setattr(r.request, "app_version", "projects/p/locations/l/apps/b/versions/v"),
        ["request.app_version"],
    ),
]


@pytest.mark.parametrize(
    ("change", "fields"), [(c, f) for _, c, f in CASES], ids=[name for name, _, _ in CASES]
)
def test_create_refuses_each_rule(
    core: Runs, change: Callable[[Scheduled], object], fields: list[str]
) -> None:
    assert _refused(core, _edit(change)) == fields


def test_missing_evaluations_are_named_by_index(core: Runs) -> None:
    run = body(evaluations=(E1, f"{APP}/evaluations/absent", E2, f"{APP}/evaluations/gone"))
    assert _refused(core, run) == ["request.evaluations[1]", "request.evaluations[3]"]


def test_a_missing_dataset_is_refused(core: Runs) -> None:
    run = body(evaluations=())
    run.request.evaluation_dataset = f"{APP}/evaluationDatasets/absent"
    assert _refused(core, run) == ["request.evaluation_dataset"]


def test_display_names_may_repeat_and_ids_may_not(core: Runs) -> None:
    core.schedule(body("Same"), "first")
    core.schedule(body("Same"))
    request = service_pb2.CreateScheduledEvaluationRunRequest(
        parent=APP, scheduled_evaluation_run_id="first", scheduled_evaluation_run=body()
    )
    assert core.error("create_scheduled_evaluation_run", request).code is Code.ALREADY_EXISTS


# -- update: the next execution follows the config ---------------------------------------------


def _next(run: Scheduled) -> datetime | None:
    if not run.HasField("next_scheduled_execution_time"):
        return None
    return run.next_scheduled_execution_time.ToDatetime(UTC)


def _expected(run: Scheduled) -> datetime | None:
    """The first firing of the stored config after the write that stored it."""
    config = run.scheduling_config
    schedule = schedules.Schedule(
        config.frequency, config.start_time.ToDatetime(UTC), tuple(config.days_of_week)
    )
    return schedules.next_execution(schedule, run.update_time.ToDatetime(UTC), 0)


def test_the_next_execution_follows_every_change_of_config_or_active(core: Runs) -> None:
    past = datetime(2021, 12, 30, 23, 0, tzinfo=UTC)
    created = core.schedule(body(start=past))
    assert _next(created) == _expected(created)

    described = Scheduled(name=created.name, description="nightly smoke")
    kept = core.change(described, "description")
    assert _next(kept) == _next(created) and kept.etag != created.etag

    weekly = Scheduled(name=created.name)
    weekly.scheduling_config.CopyFrom(created.scheduling_config)
    weekly.scheduling_config.frequency = Frequency.BIWEEKLY
    weekly.scheduling_config.days_of_week.extend([6])
    biweekly = core.change(weekly, "scheduling_config")
    assert _next(biweekly) == _expected(biweekly)
    firing = _next(biweekly)
    assert firing is not None and firing.isoweekday() == 6 and firing.time() == past.time()

    paused = core.change(Scheduled(name=created.name, active=False), "active")
    assert _next(paused) is None
    resumed = core.change(Scheduled(name=created.name, active=True), "active")
    assert _next(resumed) == _expected(resumed)

    future = Scheduled(name=created.name)
    future.scheduling_config.CopyFrom(resumed.scheduling_config)
    future.scheduling_config.start_time.CopyFrom(_stamp(FUTURE))
    moved = core.change(future, "scheduling_config.start_time")
    # BIWEEKLY on Saturdays from Monday 2100-03-01: that week's Saturday.
    assert _next(moved) == datetime(2100, 3, 6, 9, 30, tzinfo=UTC)


def test_output_only_fields_survive_updates(core: Runs) -> None:
    created = core.schedule(body())
    sent = body("Renamed")
    sent.name = created.name
    sent.total_executions = 5
    sent.last_completed_run = "x"
    sent.next_scheduled_execution_time.FromDatetime(datetime(2000, 1, 1, tzinfo=UTC))
    updated = core.change(sent)  # no mask: every field the caller may write
    assert updated.display_name == "Renamed"
    assert updated.total_executions == 0 and not updated.last_completed_run
    assert _next(updated) == _next(created)


def test_update_is_validated_like_create(core: Runs) -> None:
    created = core.schedule(body())
    change = Scheduled(name=created.name)
    change.request.CopyFrom(created.request)
    change.request.evaluations.append(f"{APP}/evaluations/absent")
    request = service_pb2.UpdateScheduledEvaluationRunRequest(
        scheduled_evaluation_run=change, update_mask=field_mask_pb2.FieldMask(paths=["request"])
    )
    error = core.error("update_scheduled_evaluation_run", request)
    assert [v.field for v in error.violations] == [f"{FIELD}.request.evaluations[1]"]
    days = Scheduled(name=created.name)
    days.scheduling_config.days_of_week.append(2)
    request = service_pb2.UpdateScheduledEvaluationRunRequest(
        scheduled_evaluation_run=days,
        update_mask=field_mask_pb2.FieldMask(paths=["scheduling_config.days_of_week"]),
    )
    error = core.error("update_scheduled_evaluation_run", request)
    assert [v.field for v in error.violations] == [f"{FIELD}.scheduling_config.days_of_week"]


def test_stale_etags_abort_updates_and_deletes(core: Runs) -> None:
    created = core.schedule(body())
    core.change(Scheduled(name=created.name, description="x"), "description")
    stale = Scheduled(name=created.name, etag=created.etag, description="y")
    request = service_pb2.UpdateScheduledEvaluationRunRequest(
        scheduled_evaluation_run=stale, update_mask=field_mask_pb2.FieldMask(paths=["description"])
    )
    assert core.error("update_scheduled_evaluation_run", request).code is Code.ABORTED
    delete = service_pb2.DeleteScheduledEvaluationRunRequest(name=created.name, etag=created.etag)
    assert core.error("delete_scheduled_evaluation_run", delete).code is Code.ABORTED
    core.call(
        "delete_scheduled_evaluation_run",
        service_pb2.DeleteScheduledEvaluationRunRequest(name=created.name),
    )
    get = service_pb2.GetScheduledEvaluationRunRequest(name=created.name)
    assert core.error("get_scheduled_evaluation_run", get).code is Code.NOT_FOUND


# -- list --------------------------------------------------------------------------------------


def test_list_filters_by_fields(core: Runs) -> None:
    core.schedule(body("A", evaluations=(E1,)), "a")
    core.schedule(body("B", evaluations=(E1, E2), active=False), "b")
    with_dataset = body("C", evaluations=())
    with_dataset.request.evaluation_dataset = DATASET
    core.schedule(with_dataset, "c")
    assert sorted(core.listed(filter="active = true")) == ["a", "c"]
    assert sorted(core.listed(filter=f'request.evaluations:"{E2}"')) == ["b"]
    # As the client documents them: by the evaluation's and the dataset's IDs.
    assert sorted(core.listed(filter="request.evaluations:e1")) == ["a", "b"]
    assert sorted(core.listed(filter="request.evaluation_dataset:ds")) == ["c"]
    assert core.listed(filter="request.evaluation_dataset:d") == []
    assert sorted(core.listed(filter="request.evaluations:e2 OR active = true")) == ["a", "b", "c"]
    assert sorted(core.listed(filter=f'request.evaluation_dataset = "{DATASET}"')) == ["c"]
    assert sorted(core.listed(filter="next_scheduled_execution_time:*")) == ["a", "c"]
    assert core.listed(order_by="name desc") == ["c", "b", "a"]


def test_list_order_by_names_the_supported_fields(core: Runs) -> None:
    request = service_pb2.ListScheduledEvaluationRunsRequest(parent=APP, order_by="display_name")
    error = core.error("list_scheduled_evaluation_runs", request)
    assert error.code is Code.INVALID_ARGUMENT
    supported = (
        "name, create_time, update_time, next_scheduled_execution, last_completed_run.create_time"
    )
    assert [v.field for v in error.violations] == ["order_by"] and supported in str(error)


def test_list_orders_by_the_next_execution_soonest_first(core: Runs) -> None:
    core.schedule(body(start=FUTURE + timedelta(days=2)), "later")
    core.schedule(body(active=False), "paused")
    core.schedule(body(start=FUTURE), "sooner")
    core.schedule(body(start=FUTURE + timedelta(days=9)), "latest")
    assert core.listed(order_by="next_scheduled_execution") == [
        "sooner",
        "later",
        "latest",
        "paused",
    ]
    newest_first = core.listed(order_by="next_scheduled_execution desc")
    assert newest_first == ["paused", "latest", "later", "sooner"]
    first = core.call(
        "list_scheduled_evaluation_runs",
        service_pb2.ListScheduledEvaluationRunsRequest(
            parent=APP, order_by="next_scheduled_execution", page_size=3
        ),
    )
    rest = core.listed(order_by="next_scheduled_execution", page_token=first.next_page_token)
    assert rest == ["paused"]
    # Without completed runs every schedule ties: by name, in the order's direction.
    by_run = core.listed(order_by="last_completed_run.create_time")
    assert by_run == ["sooner", "paused", "latest", "later"]
