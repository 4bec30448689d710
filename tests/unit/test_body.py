"""JSON request bodies: every problem reported with its field path (proto names)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.longrunning import operations_pb2

from ces_eval.contract import schema
from ces_eval.contract.templates import TemplateError
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.transcoding.body import parse_body
from ces_eval.transcoding.router import Router


def problems(document: Any, path: str = "evaluation") -> list[str]:
    with pytest.raises(ServiceError) as raised:
        parse_body(json.dumps(document).encode(), evaluation_pb2.Evaluation(), path)
    assert raised.value.code is Code.INVALID_ARGUMENT
    return [v.field for v in raised.value.violations]


@pytest.mark.parametrize(
    ("document", "fields"),
    [
        ({"colour": 1}, ["evaluation.colour"]),
        ({"displayName": 1}, ["evaluation.display_name"]),
        ({"displayName": "a", "display_name": "b"}, ["evaluation.display_name"]),
        ({"golden": {"turns": {}}}, ["evaluation.golden.turns"]),
        (
            {"golden": {"turns": [{"steps": [{"nope": 1}]}]}},
            ["evaluation.golden.turns[0].steps[0].nope"],
        ),
        ({"golden": {}, "scenario": {}}, ["evaluation.scenario"]),
        ({"scenario": {"maxTurns": "many"}}, ["evaluation.scenario.max_turns"]),
        ({"scenario": {"maxTurns": 2**31}}, ["evaluation.scenario.max_turns"]),
        (
            {"scenario": {"taskCompletionBehavior": "SOMETIMES"}},
            ["evaluation.scenario.task_completion_behavior"],
        ),
        ({"tags": ["a", 2]}, ["evaluation.tags[1]"]),
        ({"invalid": "yes"}, ["evaluation.invalid"]),
        ([], ["evaluation"]),
        ({"colour": 1, "displayName": 2}, ["evaluation.colour", "evaluation.display_name"]),
        # Well-known types written as one value are read where the walk meets them.
        ({"createTime": "yesterday"}, ["evaluation.create_time"]),
        ({"createTime": 5, "tags": [1]}, ["evaluation.create_time", "evaluation.tags[0]"]),
    ],
)
def test_problems_are_reported_with_paths(document: Any, fields: list[str]) -> None:
    assert problems(document) == fields


def test_valid_documents_parse_in_both_spellings() -> None:
    message = evaluation_pb2.Evaluation()
    parse_body(
        json.dumps(
            {
                "display_name": "x",
                "scenario": {"maxTurns": "7", "taskCompletionBehavior": 1},
                "tags": None,
                "createTime": "2024-01-01T00:00:00+01:00",
            }
        ).encode(),
        message,
        "evaluation",
    )
    assert message.display_name == "x"
    assert message.scenario.max_turns == 7
    assert message.create_time.ToJsonString() == "2023-12-31T23:00:00Z"


def test_not_json_is_invalid_argument() -> None:
    with pytest.raises(ServiceError) as raised:
        parse_body(b"{", service_pb2.ListEvaluationsRequest(), "")
    assert [v.field for v in raised.value.violations] == ["body"]


def test_bad_templates_fail_at_start_naming_the_template() -> None:
    good = schema.http_bindings()[0]
    bad = schema.HttpBinding(good.method, "GET", "/v1beta/{parent=projects/*", "")
    with pytest.raises(TemplateError) as raised:
        Router([good, bad])
    assert "/v1beta/{parent=projects/*" in str(raised.value)
    assert good.method.full_name in str(raised.value)


def test_a_huge_unknown_key_is_quoted_cut_not_echoed_whole() -> None:
    key = "x" * 300_000
    with pytest.raises(ServiceError) as caught:
        parse_body(json.dumps({key: 1}).encode(), evaluation_pb2.Evaluation(), "evaluation")
    [violation] = caught.value.violations
    assert violation.field == "evaluation." + "x" * 128 + "…"
    assert len(violation.description) < 300
    assert len(caught.value.message) < 1_000


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"name": "operations/o", "timeout": "soon"}, "timeout"),
        ({"name": "operations/o", "timeout": 5}, "timeout"),
    ],
)
def test_a_malformed_one_value_form_is_named_by_its_path(document: Any, field: str) -> None:
    """A Duration (as a Timestamp, a FieldMask, a wrapper) in the wrong form: the violation
    names its field and says what is wrong, without json_format's own locator."""
    with pytest.raises(ServiceError) as raised:
        parse_body(json.dumps(document).encode(), operations_pb2.WaitOperationRequest(), "")
    [violation] = raised.value.violations
    assert violation.field == field
    assert violation.description.startswith(f"Invalid value {json.dumps(document[field])}: ")
    assert " at Duration" not in violation.description
