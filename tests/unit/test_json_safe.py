"""Values proto3 JSON cannot render (contract/json_safe.py, walked by contract/checks.py) and
gRPC errors trimmed to fit trailers (surfaces/grpc_api.py): both found by
tests/integration/test_generated_input.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2

from ces_eval.contract import json_safe
from ces_eval.contract.checks import unrenderable as violations
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.surfaces import grpc_api

Result = evaluation_pb2.EvaluationResult


def _result(change: Callable[[Any], object]) -> Result:
    result = Result(display_name="r")
    change(result)
    return result


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        pytest.param(lambda r: None, [], id="nothing set"),
        pytest.param(
            lambda r: setattr(r.create_time, "seconds", 253_402_300_799),
            [],
            id="the last second of 9999",
        ),
        pytest.param(
            lambda r: setattr(r.create_time, "seconds", 253_402_300_800),
            ["r.create_time"],
            id="year 10000",
        ),
        pytest.param(
            lambda r: setattr(r.create_time, "seconds", -62_135_596_801),
            ["r.create_time"],
            id="before year 1",
        ),
        pytest.param(
            lambda r: setattr(r.create_time, "nanos", 1_000_000_000),
            ["r.create_time"],
            id="a whole second of nanos",
        ),
        pytest.param(
            lambda r: r.golden_result.turn_replay_results.add().turn_latency.MergeFrom(
                r.golden_result.turn_replay_results[0].turn_latency.__class__(
                    seconds=-315_576_000_000, nanos=-999_999_999
                )
            ),
            [],
            id="the most negative Duration",
        ),
        pytest.param(
            lambda r: r.golden_result.turn_replay_results.add().turn_latency.MergeFrom(
                r.golden_result.turn_replay_results[0].turn_latency.__class__(seconds=1, nanos=-1)
            ),
            ["r.golden_result.turn_replay_results[0].turn_latency"],
            id="Duration nanos against the sign",
        ),
        pytest.param(
            lambda r: r.root_span.attributes.update({"x": math.inf, "y": [1, math.nan]}),
            [
                'r.root_span.attributes.fields["x"].number_value',
                'r.root_span.attributes.fields["y"].list_value.values[1].number_value',
            ],
            id="non-finite Struct numbers",
        ),
        pytest.param(
            lambda r: r.root_span.attributes.update({"k" * 100: -0.0, "z": 1e308}),
            [],
            id="finite Struct numbers",
        ),
        pytest.param(
            lambda r: r.root_span.attributes.update({"k" * 200: math.nan}),
            ['r.root_span.attributes.fields["' + "k" * 128 + '…"].number_value'],
            id="a long key is cut in the path",
        ),
        pytest.param(lambda r: r.error.details.add(), [], id="an empty Any"),
        pytest.param(
            lambda r: r.error.details.add().Pack(error_details_pb2.ErrorInfo(reason="R")),
            [],
            id="an Any of a known type",
        ),
        pytest.param(
            lambda r: r.error.details.add(type_url="example.com/no.Such", value=b""),
            ["r.error.details[0].type_url"],
            id="an Any of an unknown type",
        ),
        pytest.param(
            lambda r: r.error.details.add(
                type_url="type.googleapis.com/google.rpc.ErrorInfo", value=b"\x0a\xff"
            ),
            ["r.error.details[0].value"],
            id="an Any whose bytes are not its type",
        ),
        pytest.param(
            lambda r: r.error.details.add().Pack(
                evaluation_pb2.EvaluationResult(create_time={"nanos": -5})
            ),
            ["r.error.details[0].value.create_time"],
            id="inside an Any",
        ),
    ],
)
def test_unrenderable_values_are_found_where_they_are(
    change: Callable[[Any], object], fields: list[str]
) -> None:
    result = _result(change)
    assert sorted(v.field for v in violations(result, "r")) == fields
    if not fields:
        json_format.MessageToJson(result)  # what is accepted renders
    else:
        with pytest.raises((ValueError, TypeError, DecodeError, json_format.SerializeToJsonError)):
            json_format.MessageToJson(result)


def test_bytes_that_look_like_a_non_finite_number_are_no_violation() -> None:
    """The encoding of a NaN or infinite Value number found in a bytes field: the Struct trees
    are walked, and their finite numbers pass."""
    evaluation = evaluation_pb2.Evaluation(display_name="e")
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.audio = b"\x11" + b"\x00" * 6 + b"\xf0\x7f"
    args = turn.steps.add().expectation.tool_call.args
    args.update({"x": 2.5, "y": [-0.0, 1e308]})
    assert json_safe.may_hold_non_finite(evaluation)
    assert violations(evaluation, "e") == []
    args["y"].append(math.nan)
    assert [v.field for v in violations(evaluation, "e")] == [
        'e.golden.turns[0].steps[1].expectation.tool_call.args.fields["y"].list_value.values[2]'
        ".number_value"
    ]


def test_violations_name_their_reason() -> None:
    result = _result(lambda r: setattr(r.create_time, "seconds", 2**40))
    result.error.details.add(type_url="x/y")
    assert [(v.reason, v.field) for v in violations(result, "r")] == [
        ("OUT_OF_RANGE", "r.create_time"),
        ("UNKNOWN_TYPE", "r.error.details[0].type_url"),
    ]


def test_a_small_error_is_sent_as_it_is() -> None:
    error = ServiceError.invalid_argument("bad", [FieldViolation("a.b", "Required.", "REQUIRED")])
    assert grpc_api._fitted(error) is error


@pytest.mark.parametrize("letter", ["x", "é", "𝔘"])
def test_a_huge_error_is_trimmed_to_fit_grpc_trailers(letter: str) -> None:
    violations_ = [
        FieldViolation(f"evaluation.golden.turns[{i}].{letter * 300}", "Required." * 40, "R")
        for i in range(1_001)
    ]
    error = ServiceError.invalid_argument(letter * 20_000, violations_)
    fitted = grpc_api._fitted(error)
    assert grpc_api._trailer_size(fitted) <= grpc_api._TRAILER_BUDGET
    assert len(fitted.violations) >= 3
    assert fitted.violations[0].field.startswith("evaluation.golden.turns[0].")
    assert fitted.violations[0].field.endswith("…")
    assert fitted.message.startswith(letter)
    assert fitted.message.endswith("…")
    assert (fitted.code, fitted.reason) == (error.code, error.reason)
