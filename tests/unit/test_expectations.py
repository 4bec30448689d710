"""Evaluation expectations through the core, over a real SQLite file: the generic standard
methods on a generic table, the references evaluations make to expectations and the refused
delete of a named one."""

from __future__ import annotations

from typing import Any

import pytest

from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, Harness, core, golden, violations

__all__ = ["core"]  # the fixture, used by name

Expectation = evaluation_pb2.EvaluationExpectation


def expectation(harness: Harness, display_name: str, expectation_id: str = "") -> Any:
    return harness.call(
        "create_evaluation_expectation",
        service_pb2.CreateEvaluationExpectationRequest(
            parent=APP,
            evaluation_expectation_id=expectation_id,
            evaluation_expectation=Expectation(
                display_name=display_name,
                llm_criteria=Expectation.LlmCriteria(prompt="Polite."),
            ),
        ),
    )


def naming(harness: Harness, display_name: str, *expectations: str) -> Any:
    message = golden(display_name)
    message.golden.evaluation_expectations.extend(expectations)
    return harness.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation=message),
    )


def test_required_fields_and_output_only_stamps(core: Harness) -> None:
    error = core.error(
        "create_evaluation_expectation",
        service_pb2.CreateEvaluationExpectationRequest(
            parent=APP,
            evaluation_expectation=Expectation(llm_criteria=Expectation.LlmCriteria()),
        ),
    )
    assert error.code is Code.INVALID_ARGUMENT
    assert set(violations(error)) == {
        "evaluation_expectation.display_name",
        "evaluation_expectation.llm_criteria.prompt",
    }
    created = expectation(core, "Polite", "polite")
    assert created.name == f"{APP}/evaluationExpectations/polite"
    assert created.etag and created.create_time == created.update_time


def test_display_names_are_unique_within_the_app(core: Harness) -> None:
    first = expectation(core, "Polite")
    error = core.error(
        "create_evaluation_expectation",
        service_pb2.CreateEvaluationExpectationRequest(
            parent=APP,
            evaluation_expectation=Expectation(
                display_name="Polite", llm_criteria=Expectation.LlmCriteria(prompt="x")
            ),
        ),
    )
    assert error.code is Code.ALREADY_EXISTS
    assert first.name in error.message


def test_evaluations_name_only_existing_expectations_of_their_app(core: Harness) -> None:
    known = expectation(core, "Polite", "polite")
    other_app = "projects/p/locations/l/apps/b/evaluationExpectations/polite"
    message = golden("Refers")
    message.golden.evaluation_expectations.extend(
        [known.name, f"{APP}/evaluationExpectations/absent", other_app, "not a name"]
    )
    error = core.error(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=message)
    )
    assert error.code is Code.INVALID_ARGUMENT
    assert violations(error) == [
        f"evaluation.golden.evaluation_expectations[{i}]" for i in (1, 2, 3)
    ]
    assert naming(core, "Refers", known.name).golden.evaluation_expectations == [known.name]


def test_a_named_expectation_is_deleted_only_once_no_evaluation_names_it(
    core: Harness,
) -> None:
    named = expectation(core, "Polite", "polite")
    evaluation = naming(core, "Refers", named.name)
    delete = service_pb2.DeleteEvaluationExpectationRequest(name=named.name)
    error = core.error("delete_evaluation_expectation", delete)
    assert error.code is Code.FAILED_PRECONDITION
    assert error.reason == "EVALUATION_EXPECTATION_IN_USE"
    assert evaluation.name in error.message
    cleared = evaluation_pb2.Evaluation(name=evaluation.name)
    cleared.golden.turns.add().steps.add().user_input.text = "hi"
    core.call(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(evaluation=cleared, update_mask={"paths": ["golden"]}),
    )
    core.call("delete_evaluation_expectation", delete)
    gone = core.error(
        "get_evaluation_expectation",
        service_pb2.GetEvaluationExpectationRequest(name=named.name),
    )
    assert gone.code is Code.NOT_FOUND


@pytest.mark.parametrize("field", ["tags", "display_name"])
def test_lists_filter_on_the_declared_fields(core: Harness, field: str) -> None:
    core.call(
        "create_evaluation_expectation",
        service_pb2.CreateEvaluationExpectationRequest(
            parent=APP,
            evaluation_expectation=Expectation(
                display_name="Tone", tags=["tone"], llm_criteria={"prompt": "x"}
            ),
        ),
    )
    expectation(core, "Other")
    text = 'tags:"tone"' if field == "tags" else 'display_name = "Tone"'
    page = core.call(
        "list_evaluation_expectations",
        service_pb2.ListEvaluationExpectationsRequest(parent=APP, filter=text),
    )
    assert [e.display_name for e in page.evaluation_expectations] == ["Tone"]
