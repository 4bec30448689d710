"""A run's byte budget at the request (docs/semantics.md, "Evaluation runs"): RunEvaluation,
CreateScheduledEvaluationRun and UpdateScheduledEvaluationRun refuse a plan whose repetitions,
each at least what its result repeats of its evaluation (here a user input of 1 MiB), cannot
fit :data:`limits.MAX_RUN_BYTES`; nothing is stored. What a run stores while it plays is held to
the same budget: tests/integration/test_run_budget.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from google.protobuf import field_mask_pb2

from ces_eval.contract import limits
from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, Harness
from tests.unit.test_scheduled_runs import body

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# One user input of 1 MiB (the most characters a string holds, 4 bytes each in UTF-8).
_LARGE_TEXT = "\U0001f600" * limits.MAX_STRING_CHARS
_TOO_MANY_REPETITIONS = limits.MAX_RUN_BYTES // len(_LARGE_TEXT.encode()) + 1  # 257


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _large(core: Harness) -> evaluation_pb2.Evaluation:
    evaluation = evaluation_pb2.Evaluation(display_name="Large")
    evaluation.golden.turns.add().steps.add().user_input.text = _LARGE_TEXT
    return core.call(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    )


def _refused(core: Harness, method: str, request: object, field: str) -> None:
    error = core.error(method, request)
    assert error.code == Code.INVALID_ARGUMENT, error
    assert [(v.field, v.reason) for v in error.violations] == [(field, "TOO_LARGE")], error
    assert f"{limits.MAX_RUN_BYTES} bytes" in error.message


def test_run_evaluation_refuses_a_plan_past_the_budget(core: Harness) -> None:
    large = _large(core)
    request = evaluation_pb2.RunEvaluationRequest(
        app=APP, evaluations=[large.name], run_count=_TOO_MANY_REPETITIONS
    )
    _refused(core, "run_evaluation", request, "run_count")
    dataset = core.call(
        "create_evaluation_dataset",
        service_pb2.CreateEvaluationDatasetRequest(
            parent=APP, evaluation_dataset={"display_name": "D", "evaluations": [large.name]}
        ),
    )
    request = evaluation_pb2.RunEvaluationRequest(
        app=APP,
        evaluation_dataset=dataset.name,
        run_count=_TOO_MANY_REPETITIONS,
    )
    _refused(core, "run_evaluation", request, "run_count")
    # A scenario runs five times by default; 52 of 1 MiB are past the budget too.
    scenarios = []
    for index in range(_TOO_MANY_REPETITIONS // 5 + 1):
        scenario = evaluation_pb2.Evaluation(display_name=f"Scenario {index}")
        scenario.scenario.task = _LARGE_TEXT
        scenario.scenario.rubrics.append("Answers.")
        expected = scenario.scenario.scenario_expectations.add().agent_response
        expected.role = "agent"
        expected.chunks.add().text = "Done."
        scenarios.append(
            core.call(
                "create_evaluation",
                service_pb2.CreateEvaluationRequest(parent=APP, evaluation=scenario),
            ).name
        )
    request = evaluation_pb2.RunEvaluationRequest(app=APP, evaluations=scenarios)
    _refused(core, "run_evaluation", request, "evaluations")
    listed = core.call("list_evaluation_runs", service_pb2.ListEvaluationRunsRequest(parent=APP))
    assert not listed.evaluation_runs  # nothing refused left a run behind


def test_a_schedule_whose_plan_cannot_fit_is_refused(core: Harness) -> None:
    large = _large(core)
    schedule = body(evaluations=(large.name,))
    schedule.request.run_count = _TOO_MANY_REPETITIONS
    field = "scheduled_evaluation_run.request.run_count"
    request = service_pb2.CreateScheduledEvaluationRunRequest(
        parent=APP, scheduled_evaluation_run=schedule
    )
    _refused(core, "create_scheduled_evaluation_run", request, field)
    schedule.request.run_count = 1
    created = core.call(
        "create_scheduled_evaluation_run",
        service_pb2.CreateScheduledEvaluationRunRequest(
            parent=APP, scheduled_evaluation_run=schedule
        ),
    )
    created.request.run_count = _TOO_MANY_REPETITIONS
    request = service_pb2.UpdateScheduledEvaluationRunRequest(
        scheduled_evaluation_run=created,
        update_mask=field_mask_pb2.FieldMask(paths=["request.run_count"]),
    )
    _refused(core, "update_scheduled_evaluation_run", request, field)
