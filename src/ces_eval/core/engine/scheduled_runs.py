"""Scheduled evaluation runs: the resource's declaration and its standard methods (Create, Get,
List, Update, Delete).

A scheduled run is kept in a generic table (:data:`ces_eval.storage.tables.SCHEDULED_RUNS`)
and served by the generic standard methods. What is its own:

* ``request`` is held to what RunEvaluation would accept: ``app`` is the schedule's own app,
  every resource name in it lies within that app, exactly one of ``evaluations`` and
  ``evaluation_dataset`` is given, each listed evaluation (or the dataset) exists when the
  schedule is written, ``run_count`` is at least 1 when set and no persona has a negative
  ``task_count`` (personas are names of the app's ``evaluationPersonas``, checked for their
  form only: this service keeps no personas), and the run it starts, with the evaluations as
  they are when the schedule is written, holds no more results than a run may and fits a
  run's byte budget (:func:`running.plan_violations`; a firing checks again).
* ``scheduling_config`` follows :mod:`ces_eval.core.engine.schedules` (frequency REQUIRED,
  ``start_time`` REQUIRED, ``days_of_week`` 1-7, unrepeated, only for WEEKLY and BIWEEKLY).
* ``next_scheduled_execution_time`` (output only) is computed on create and on every update
  that changes ``scheduling_config`` or ``active``: the first firing after that moment
  (:func:`schedules.next_execution`, UTC), and none while the schedule is inactive or has no
  firing left. An update that changes neither keeps it. ``total_executions`` and
  ``last_completed_run`` are output only and kept across updates: the runs a schedule fires
  maintain them. docs/semantics.md ("Scheduled evaluation runs") says the same for users.

Display names need not be unique within the app (the table says so).
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.engine import running, schedules
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2

    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.errors import FieldViolation

__all__ = ["RPCS", "SCHEDULED_RUNS", "set_next_execution"]

Scheduled = evaluation_pb2.ScheduledEvaluationRun
_FIELD = "scheduled_evaluation_run"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _schedule(config: Scheduled.SchedulingConfig) -> schedules.Schedule:
    """The config as :mod:`schedules` reads it. A missing or unrepresentable start is read as
    the epoch: the field rules report it, and nothing is computed from it."""
    start = _EPOCH
    if config.HasField("start_time"):
        with contextlib.suppress(ValueError, OverflowError):
            start = config.start_time.ToDatetime(UTC)
    return schedules.Schedule(int(config.frequency), start, tuple(config.days_of_week))


def _rules(run: Scheduled, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    violations = validation.resource_violations(run, path)
    if any(v.reason == "TOO_MANY" for v in violations):
        return violations
    if run.HasField("scheduling_config"):
        # A frequency left UNSPECIFIED is already reported as REQUIRED.
        reported = {v.field for v in violations}
        found = schedules.violations(_schedule(run.scheduling_config), f"{path}.scheduling_config")
        violations += [v for v in found if v.field not in reported]
    if run.HasField("request"):
        app = names.APP.format(**{key: parts[key] for key in names.APP.variables})
        violations += running.request_violations(run.request, f"{path}.request", app)
    return violations


async def _verify(context: Context, run: Scheduled) -> list[FieldViolation]:
    """The evaluations (or the dataset) the request runs exist now (their form and app were
    checked by the field rules), and the run it would start fits a run's bounds (its count of
    results, its byte budget) with them as they are now."""
    path, app = f"{_FIELD}.request", tables.parent_of(run.name)
    return await running.verify(context, run.request, path, app) or (
        await running.plan_violations(context, run.request, path, app)
    )


def set_next_execution(run: Scheduled, after: datetime) -> None:
    """``next_scheduled_execution_time``: the first firing after ``after`` (aware), by
    ``run``'s config and its ``total_executions``; unset while inactive or when none is left."""
    run.ClearField("next_scheduled_execution_time")
    if not run.active:
        return
    following = schedules.next_execution(
        _schedule(run.scheduling_config), after, run.total_executions
    )
    if following is not None:
        run.next_scheduled_execution_time.FromDatetime(following)


def _next_execution(
    run: Scheduled, previous: Scheduled | None, moment: timestamp_pb2.Timestamp
) -> None:
    """``next_scheduled_execution_time`` anew when the schedule is new or its config or
    ``active`` changed: the first firing after ``moment``; none while inactive."""
    if (
        previous is not None
        and previous.active == run.active
        and previous.scheduling_config == run.scheduling_config
    ):
        return
    set_next_execution(run, moment.ToDatetime(UTC))


SCHEDULED_RUNS = standard.Resource(
    message=Scheduled,
    parent=names.APP,
    store=standard.Store.of(tables.SCHEDULED_RUNS),
    rules=_rules,
    verify=_verify,
    derive=_next_execution,
)

RPCS: dict[str, Rpc] = standard.methods(SCHEDULED_RUNS, "Create", "Get", "List", "Update", "Delete")
