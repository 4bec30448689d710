"""Scheduled evaluation runs fire (docs/semantics.md, "Scheduled evaluation runs: when they
fire"): the scheduler, the emulator's project clocks and its FireScheduledEvaluationRun.

A schedule is due when its ``next_scheduled_execution_time`` (set only while it is active) is
at or before its project's clock: the wall clock, moved forward by the emulator's AdvanceClock.
Firing it starts RunEvaluation with its stored ``request`` (``scheduled_evaluation_run`` naming
the schedule, ``initiated_by`` whoever last wrote the schedule) and records, in the transaction
that stores the run and its operation, the schedule fired: ``total_executions`` one more and
the next execution after the project's clock. That write is conditional on the schedule's etag,
so of every process, worker or replica that sees the schedule due, exactly one fires it; the
others' writes change nothing. A time missed while no server ran is due at the next start and
fires once, however many times were missed; the next execution is then the first after now.
When the stored request no longer runs (an evaluation deleted since), the firing is recorded
with a run that ended ERROR saying why.

Each server process with the scheduler on (``--scheduler on``, the default) looks for due
schedules every :data:`INTERVAL` seconds (an index seek on the event loop's thread), by the
projects' clocks as read every ten looks; AdvanceClock fires the project's due schedules before
it answers. ``last_completed_run`` is kept by the run engine when a run completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC
from functools import partial
from typing import TYPE_CHECKING

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.engine import running, scheduled_runs
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import (
    Conflict,
    EtagMismatch,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
    Unavailable,
)

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf import timestamp_pb2

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["INTERVAL", "RPCS", "Scheduler", "fire", "fire_due"]

_log = logging.getLogger(__name__)
Scheduled = evaluation_pb2.ScheduledEvaluationRun
Clock = emulator_pb2.ProjectClock
INTERVAL = 1.0  # seconds between two looks for due schedules
_BATCH = 100  # due schedules read at a time
_CLOCK_LOOKS = 10  # the background loop reads the projects' clocks every this many looks
_MAX_OFFSET_SECONDS = 10 * 366 * 86400  # how far a clock may be moved ahead, in all
_CLOCK = names.of(Clock)
_SCHEDULE = names.of(Scheduled)
_BY_NAME = OrderBy(SortKey.NAME, descending=False)


def _micros(stamp: timestamp_pb2.Timestamp) -> int:
    return stamp.seconds * 1_000_000 + stamp.nanos // 1000


def _clock_name(project: str) -> str:
    return f"projects/{project}/clock"


async def _offsets(context: Context) -> dict[str, int]:
    """Every moved clock's offset in microseconds, by project ID."""
    found: dict[str, int] = {}
    after = None
    while True:
        page = await context.storage.list_rows(
            tables.CLOCKS,
            ListQuery(parent="projects", order=_BY_NAME, limit=500, after=after),
        )
        for data, _ in page:
            clock = Clock.FromString(data)
            found[clock.name.split("/")[1]] = clock.offset.ToMicroseconds()
        if len(page) < 500:
            return found
        after = page[-1][1]


async def _offset(context: Context, project: str) -> int:
    clock = await context.storage.get_row(tables.CLOCKS, _clock_name(project))
    return clock.offset.ToMicroseconds() if clock is not None else 0


def _moment(micros: int) -> timestamp_pb2.Timestamp:
    moment = now()
    moment.FromMicroseconds(micros)
    return moment


async def fire(
    context: Context, schedule: Scheduled, moment: timestamp_pb2.Timestamp, *, due: bool
) -> operations_pb2.Operation | None:
    """Fire ``schedule`` as read (its etag the condition) at its project's ``moment``: the
    operation of the run it started, or None when another process fired or changed it first,
    or when its request no longer runs (recorded with a run that ended ERROR). ``due``: a
    firing of the schedule's own (its next execution moves past ``moment``); otherwise an
    extra one (FireScheduledEvaluationRun) that leaves the next execution as it is."""
    fired = Scheduled()
    fired.CopyFrom(schedule)
    fired.total_executions += 1
    fired.etag = new_etag()
    if due:
        scheduled_runs.set_next_execution(fired, moment.ToDatetime(UTC))
    request = evaluation_pb2.RunEvaluationRequest()
    request.CopyFrom(schedule.request)
    request.scheduled_evaluation_run = schedule.name
    user = schedule.last_updated_by or schedule.created_by
    runner = context.runner
    try:
        prepared = await running.prepare(context, request, user)
    except ServiceError as error:
        if not due:
            raise
        refused = running.refused_run(request, user, error)
        with contextlib.suppress(EtagMismatch, Missing, Conflict):
            await context.storage.fire_schedule(fired, schedule.etag, refused, None)
            _log.warning("%s fired, but its run %s ended: %s", schedule.name, refused.name, error)
        return None
    operation = runner.new_operation(prepared.location, prepared.metadata, prepared.run.operation)
    try:
        await context.storage.fire_schedule(
            fired,
            schedule.etag,
            prepared.run,
            (operation, "RunEvaluation", runner.owner, runner.lease),
        )
    except (EtagMismatch, Missing):
        return None  # fired or changed by another process, or deleted, since it was read
    prepared.start(context, operation)
    return operation


async def fire_due(
    context: Context, project: str | None = None, offsets: dict[str, int] | None = None
) -> int:
    """Fire every schedule due now (of ``project`` only when given; by the clocks' ``offsets``
    when given, else as stored now); how many fired."""
    if project is not None:
        offsets = {project: await _offset(context, project)}
    elif offsets is None:
        offsets = await _offsets(context)
    wall = now()
    wall_micros = _micros(wall)
    horizon = wall_micros + max(offsets.values(), default=0)
    fired = 0
    while True:
        batch = await context.storage.due_schedules(horizon, _BATCH)
        progressed = False
        for schedule in batch:
            owner = schedule.name.split("/")[1]
            if project is not None and owner != project:
                continue
            moment = wall_micros + offsets.get(owner, 0)
            if _micros(schedule.next_scheduled_execution_time) > moment:
                continue
            if await fire(context, schedule, _moment(moment), due=True) is not None:
                fired += 1
            progressed = True
        if len(batch) < _BATCH or not progressed:
            return fired


class Scheduler:
    """The background loop of one server process: :func:`fire_due` every ``interval``, by the
    projects' clocks as read every :data:`_CLOCK_LOOKS` looks (a clock moved through this
    process fires what became due at once; one moved through another is seen within that)."""

    def __init__(self, context: Context, interval: float = INTERVAL) -> None:
        self._context = context
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def _loop(self) -> None:
        away = False  # the database was unavailable at the last look: said once, not again
        offsets: dict[str, int] | None = None
        looks = 0
        while True:
            try:
                if offsets is None or looks % _CLOCK_LOOKS == 0:
                    offsets = await _offsets(self._context)
                looks += 1
                await fire_due(self._context, offsets=offsets)
            except Unavailable as error:  # away for a moment (an outage, no file descriptors)
                if not away:
                    _log.warning("cannot look for due scheduled evaluation runs (%s)", error)
                away = True
            except Exception:  # noqa: BLE001 - a bug: logged, and the next look goes on
                _log.exception("could not fire the due scheduled evaluation runs")
            else:
                away = False
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
            self._task = None


def _project_of(name: str, field: str) -> str:
    return _CLOCK.parse(name, field)["project"]


async def get_project_clock(
    context: Context, request: emulator_pb2.GetProjectClockRequest, caller: Caller
) -> Clock:
    project = _project_of(request.name, "name")
    stored = await context.storage.get_row(tables.CLOCKS, request.name)
    clock = Clock(name=_clock_name(project))
    if stored is not None:
        clock.CopyFrom(stored)
    clock.now.FromMicroseconds(_micros(now()) + clock.offset.ToMicroseconds())
    return clock


async def advance_clock(
    context: Context, request: emulator_pb2.AdvanceClockRequest, caller: Caller
) -> Clock:
    """Move the project's clock forward by ``by``, then fire what is due by it (when this
    server fires schedules)."""
    project = _project_of(request.name, "name")
    by = request.by.ToMicroseconds() if request.HasField("by") else 0
    if not request.HasField("by"):
        validation.raise_if_invalid([FieldViolation("by", "Required.", "REQUIRED")], "request")
    if by <= 0:
        validation.raise_if_invalid([FieldViolation("by", "Must be positive.")], "request")

    async def round_() -> None:
        stored = await context.storage.get_row(tables.CLOCKS, request.name)
        clock = Clock(name=_clock_name(project))
        offset = by + (stored.offset.ToMicroseconds() if stored is not None else 0)
        if offset > _MAX_OFFSET_SECONDS * 1_000_000:
            violation = FieldViolation(
                "by", "A clock may be at most 10 years ahead of the wall clock.", "OUT_OF_RANGE"
            )
            validation.raise_if_invalid([violation], "request")
        clock.offset.FromMicroseconds(offset)
        clock.update_time.CopyFrom(now())
        try:
            if stored is None:
                await context.storage.insert_row(tables.CLOCKS, clock)
            else:
                await context.storage.replace_row(tables.CLOCKS, clock, "")
        except (Conflict, Missing) as changed:
            raise Changed from changed  # created or reset meanwhile: read it again

    await rewrite(round_, partial(ServiceError.aborted_etag, _CLOCK.type, request.name))
    if context.settings.scheduler:
        await fire_due(context, project)
    return await get_project_clock(
        context, emulator_pb2.GetProjectClockRequest(name=request.name), caller
    )


async def fire_scheduled_evaluation_run(
    context: Context, request: emulator_pb2.FireScheduledEvaluationRunRequest, caller: Caller
) -> operations_pb2.Operation:
    """Fire the schedule now (see :func:`fire`); its request's errors are the answer's."""
    resource = scheduled_runs.SCHEDULED_RUNS

    async def round_() -> operations_pb2.Operation:
        schedule = await standard.get(context, resource, request.name)
        moment = _moment(_micros(now()) + await _offset(context, request.name.split("/")[1]))
        operation = await fire(context, schedule, moment, due=False)
        if operation is not None:
            return operation
        # Changed between the read and the firing: read it again (NOT_FOUND once deleted).
        if await context.storage.get_row(tables.SCHEDULED_RUNS, request.name) is None:
            raise ServiceError.not_found(_SCHEDULE.type, request.name)
        raise Changed

    return await rewrite(round_, partial(ServiceError.aborted_etag, _SCHEDULE.type, request.name))


RPCS: dict[str, Rpc] = {
    "FireScheduledEvaluationRun": fire_scheduled_evaluation_run,
    "AdvanceClock": advance_clock,
    "GetProjectClock": get_project_clock,
}
