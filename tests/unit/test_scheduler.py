"""Scheduled evaluation runs fire (ces_eval.core.engine.scheduler; docs/semantics.md, "Scheduled
evaluation runs: when they fire") over a real SQLite file: a project clock moved past a due
time fires the schedule once, missed times collapse into one firing, two processes firing the
same due time make one run, FireScheduledEvaluationRun, a request that no longer runs, the
scheduler off, and the clock's own rules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import duration_pb2

from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.engine import scheduler
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, ME, Harness
from tests.unit.test_running import _golden, _wait

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

Scheduled = evaluation_pb2.ScheduledEvaluationRun
Run = evaluation_pb2.EvaluationRun
PROJECT = APP.split("/")[1]
CLOCK = f"projects/{PROJECT}/clock"
HOUR = 3600


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _schedule(core: Harness, *, active: bool = True, in_hours: float = 1) -> Scheduled:
    evaluation = _golden(core, "Nightly golden")
    schedule = Scheduled(display_name="Nightly", active=active)
    schedule.request.app = APP
    schedule.request.evaluations.append(evaluation.name)
    schedule.scheduling_config.frequency = Scheduled.SchedulingConfig.Frequency.DAILY
    start = datetime.now(UTC) + timedelta(hours=in_hours)
    schedule.scheduling_config.start_time.FromDatetime(start)
    return core.call(
        "create_scheduled_evaluation_run",
        service_pb2.CreateScheduledEvaluationRunRequest(
            parent=APP, scheduled_evaluation_run=schedule
        ),
    )


def _advance(core: Harness, seconds: float) -> emulator_pb2.ProjectClock:
    by = duration_pb2.Duration()
    by.FromNanoseconds(int(seconds * 1e9))
    return core.call("advance_clock", emulator_pb2.AdvanceClockRequest(name=CLOCK, by=by))


def _runs(core: Harness) -> list[Run]:
    listed = core.call(
        "list_evaluation_runs", service_pb2.ListEvaluationRunsRequest(parent=APP, page_size=100)
    )
    return list(listed.evaluation_runs)


def _get(core: Harness, name: str) -> Scheduled:
    return core.call(
        "get_scheduled_evaluation_run", service_pb2.GetScheduledEvaluationRunRequest(name=name)
    )


def _operation_of(core: Harness, run: Run) -> operations_pb2.Operation:
    return core.call("get_operation", operations_pb2.GetOperationRequest(name=run.operation))


def test_a_clock_moved_past_the_due_time_fires_once(core: Harness) -> None:
    schedule = _schedule(core)
    due = schedule.next_scheduled_execution_time.ToDatetime(UTC)
    assert not _runs(core)
    clock = _advance(core, 1.5 * HOUR)
    assert clock.offset.seconds == 1.5 * HOUR
    [run] = _runs(core)
    assert run.scheduled_evaluation_run == schedule.name
    assert run.initiated_by == schedule.created_by
    fired = _get(core, schedule.name)
    assert fired.total_executions == 1 and fired.etag != schedule.etag
    assert fired.next_scheduled_execution_time.ToDatetime(UTC) == due + timedelta(days=1)
    _advance(core, 60)  # not due again yet
    assert len(_runs(core)) == 1
    assert not _wait(core, _operation_of(core, run)).HasField("error")
    assert _get(core, schedule.name).last_completed_run == run.name


def test_missed_times_fire_once_and_the_next_is_after_the_clock(core: Harness) -> None:
    schedule = _schedule(core)
    clock = _advance(core, 10 * 24 * HOUR)  # ten daily firings missed
    assert len(_runs(core)) == 1
    fired = _get(core, schedule.name)
    assert fired.total_executions == 1
    following = fired.next_scheduled_execution_time.ToDatetime(UTC)
    assert clock.now.ToDatetime(UTC) < following <= clock.now.ToDatetime(UTC) + timedelta(days=1)


def test_two_processes_firing_one_due_time_make_one_run(core: Harness) -> None:
    schedule = _schedule(core)
    tokens = pages.PageTokens(core.run(core.storage.secret()))
    other = Core(core.storage, tokens)
    # Moves the clock, fires nothing.
    quiet = Core(core.storage, tokens, settings=Settings(scheduler=False))
    by = duration_pb2.Duration(seconds=2 * HOUR)
    core.run(quiet.advance_clock(emulator_pb2.AdvanceClockRequest(name=CLOCK, by=by), ME))
    assert not _runs(core)

    async def both() -> list[int]:
        return list(
            await asyncio.gather(
                scheduler.fire_due(core.core.context), scheduler.fire_due(other.context)
            )
        )

    try:
        assert sorted(core.run(both())) == [0, 1]
        [run] = _runs(core)
        assert _get(core, schedule.name).total_executions == 1
        # A process that read the schedule before the firing changes nothing with it.
        moment = _advance(core, 1).now
        assert core.run(scheduler.fire(other.context, schedule, moment, due=True)) is None
        assert len(_runs(core)) == 1
        assert not _wait(core, _operation_of(core, run)).HasField("error")
    finally:  # the run may be the other process's to play: it stops with it
        core.run(other.context.runner.shutdown())


def test_fire_now_fires_an_inactive_schedule_and_keeps_its_next_time(core: Harness) -> None:
    schedule = _schedule(core, active=False)
    operation = core.call(
        "fire_scheduled_evaluation_run",
        emulator_pb2.FireScheduledEvaluationRunRequest(name=schedule.name),
    )
    metadata = service_pb2.RunEvaluationOperationMetadata()
    assert operation.metadata.Unpack(metadata)
    assert not _wait(core, operation).HasField("error")
    [run] = _runs(core)
    assert run.name == metadata.evaluation_run and run.state == Run.COMPLETED
    fired = _get(core, schedule.name)
    assert fired.total_executions == 1 and fired.last_completed_run == run.name
    assert not fired.HasField("next_scheduled_execution_time")  # inactive: none
    _advance(core, 48 * HOUR)
    assert len(_runs(core)) == 1  # inactive schedules never fall due


def test_a_request_that_no_longer_runs(core: Harness) -> None:
    schedule = _schedule(core)
    core.call(
        "delete_evaluation",
        service_pb2.DeleteEvaluationRequest(name=schedule.request.evaluations[0], force=True),
    )
    error = core.error(
        "fire_scheduled_evaluation_run",
        emulator_pb2.FireScheduledEvaluationRunRequest(name=schedule.name),
    )
    assert error.code is Code.NOT_FOUND
    assert not _runs(core) and _get(core, schedule.name).total_executions == 0
    _advance(core, 2 * HOUR)  # due: the firing is recorded, with a run that ended at once
    [run] = _runs(core)
    assert (
        run.state == Run.ERROR and schedule.request.evaluations[0] in run.error_info.error_message
    )
    assert run.scheduled_evaluation_run == schedule.name
    assert _get(core, schedule.name).total_executions == 1


def test_the_scheduler_off_fires_nothing(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "db.sqlite")
    try:
        harness.core = Core(
            harness.storage,
            pages.PageTokens(harness.run(harness.storage.secret())),
            settings=Settings(scheduler=False),
        )
        schedule = _schedule(harness)
        _advance(harness, 2 * HOUR)
        assert not _runs(harness)
        assert _get(harness, schedule.name).total_executions == 0
    finally:
        harness.close()


def test_the_clock_rules_and_reset(core: Harness) -> None:
    got = core.call("get_project_clock", emulator_pb2.GetProjectClockRequest(name=CLOCK))
    assert got.name == CLOCK and not got.HasField("offset") and got.now.seconds
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": CLOCK}, "by"),
        ({"name": CLOCK, "by": {"seconds": -1}}, "by"),
        ({"name": CLOCK, "by": {"seconds": 11 * 366 * 86400}}, "by"),
        ({"name": "projects/p/clocks", "by": {"seconds": 1}}, "name"),
    ]
    for fields, field in cases:
        error = core.error("advance_clock", emulator_pb2.AdvanceClockRequest(**fields))
        assert error.code is Code.INVALID_ARGUMENT
        assert [v.field for v in error.violations] == [field], fields
    _advance(core, 30)
    assert _advance(core, 30).offset.seconds == 60
    reset = core.call("reset_project", emulator_pb2.ResetProjectRequest(name=f"projects/{PROJECT}"))
    assert reset.deleted_resources["projectClocks"] == 1
    got = core.call("get_project_clock", emulator_pb2.GetProjectClockRequest(name=CLOCK))
    assert not got.HasField("offset")
