"""The one validation walk (``ces_eval.contract.checks``): a single :meth:`Checks.inspect` clears
OUTPUT_ONLY fields and finds REQUIRED fields left empty, values out of the seeds' ranges, values
JSON cannot render and the request limits together, under the input policy (what a caller
writes) and the seeded one (what the emulator stores whole); an Any's payload is held to
JSON-safety alone; the walk stops at MAX_VIOLATIONS."""

from __future__ import annotations

import math

import pytest
from google.protobuf import duration_pb2, message_factory, timestamp_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.contract import checks, limits, schema
from ces_eval.core.aip import validation
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from tests.support.generated import generated_examples, messages

Evaluation = evaluation_pb2.Evaluation
Result = evaluation_pb2.EvaluationResult
_AGAINST_THE_SIGN = duration_pb2.Duration(seconds=1, nanos=-1)  # no JSON form


def _evaluation_with_every_kind_of_problem() -> Evaluation:
    evaluation = Evaluation(display_name="x" * (limits.MAX_DISPLAY_NAME + 1))
    evaluation.create_time.seconds = 10**12  # OUTPUT_ONLY and unrenderable: cleared, not judged
    turn = evaluation.golden.turns.add()
    turn.turn_level_metrics_thresholds_override.semantic_similarity_success_threshold = 5
    step = turn.steps.add()
    step.expectation.tool_call.args.update({"n": math.inf})
    evaluation.golden.turns.add()  # a turn without steps: REQUIRED
    return evaluation


def test_one_inspect_finds_every_kind_of_problem_of_caller_input() -> None:
    evaluation = _evaluation_with_every_kind_of_problem()
    found = validation.evaluation_violations(evaluation, "e")
    assert [(v.field, v.reason) for v in found] == [
        ("e.golden.turns[1].steps", "REQUIRED"),
        (
            'e.golden.turns[0].steps[0].expectation.tool_call.args.fields["n"].number_value',
            "OUT_OF_RANGE",
        ),
        (
            "e.golden.turns[0].turn_level_metrics_thresholds_override"
            ".semantic_similarity_success_threshold",
            "OUT_OF_RANGE",
        ),
        ("e.display_name", "TOO_LONG"),
    ]
    assert not evaluation.HasField("create_time")  # cleared in the same pass


def test_the_seeded_policy_keeps_output_only_fields_and_judges_them() -> None:
    result = Result(display_name="r")
    result.create_time.seconds = 10**12  # year ~33,658: no RFC 3339 form
    result.golden_result.turn_replay_results.add().turn_latency.MergeFrom(_AGAINST_THE_SIGN)
    found = validation.seeded_violations(result, "r")
    assert [(v.field, v.reason) for v in found] == [
        ("r.create_time", "OUT_OF_RANGE"),
        ("r.golden_result.turn_replay_results[0].turn_latency", "OUT_OF_RANGE"),
    ]
    assert result.create_time.seconds == 10**12
    # The input policy clears the same fields instead, and finds nothing in them.
    as_input = checks.Checks(limits=limits.LIMITS)
    assert as_input.inspect(result, "r") == ([], [])
    assert not result.HasField("create_time")


def test_an_any_payload_is_held_to_json_safety_alone() -> None:
    result = Result(display_name="r")
    bad = Result(create_time=timestamp_pb2.Timestamp(nanos=-5))  # no display_name: not REQUIRED
    result.error.details.add().Pack(bad)
    result.error.details.add().Pack(error_details_pb2.ErrorInfo(reason="R"))
    assert [v.field for v in checks.unrenderable(result, "r")] == [
        "r.error.details[0].value.create_time"
    ]


def test_struct_trees_are_judged_only_when_the_encoding_may_hold_a_non_finite_number() -> None:
    evaluation = Evaluation(display_name="e")
    args = evaluation.golden.turns.add().steps.add().expectation.tool_call.args
    args.update({"a": [1.5, {"b": -0.0}]})
    assert not checks.unrenderable(evaluation, "e")
    args["a"][1]["b"] = math.nan
    assert [v.field for v in checks.unrenderable(evaluation, "e")] == [
        'e.golden.turns[0].steps[0].expectation.tool_call.args.fields["a"]'
        '.list_value.values[1].struct_value.fields["b"].number_value'
    ]


def test_the_walk_stops_at_max_violations() -> None:
    result = Result(display_name="r")
    for _ in range(limits.MAX_VIOLATIONS + 50):
        result.golden_result.turn_replay_results.add().turn_latency.MergeFrom(_AGAINST_THE_SIGN)
    found = validation.seeded_violations(result, "r")
    assert len(found) == limits.MAX_VIOLATIONS
    assert found[-1].field == (
        f"r.golden_result.turn_replay_results[{limits.MAX_VIOLATIONS - 1}].turn_latency"
    )


def test_required_violations_and_clear_output_only_are_the_same_walk_with_one_job() -> None:
    evaluation = _evaluation_with_every_kind_of_problem()
    assert [v.field for v in checks.required_violations(evaluation, "e")] == [
        "e.golden.turns[1].steps"
    ]
    assert evaluation.HasField("create_time")  # required_violations changes nothing
    checks.clear_output_only(evaluation)
    assert not evaluation.HasField("create_time")
    assert evaluation.display_name  # and clear_output_only keeps the rest


_REQUESTS = sorted(
    {
        method.input_type.full_name: message_factory.GetMessageClass(method.input_type)
        for method in schema.methods().values()
        if method is not None
    }.items()
)
_CHECKERS = {
    "input": validation._INPUT,
    "seeded": validation._SEEDED,
    "json only": checks._JSON_ONLY,
    "required only": checks._REQUIRED_ONLY,
    "clear only": checks._CLEAR_ONLY,
}


@pytest.mark.parametrize("checker", list(_CHECKERS), ids=str)
@pytest.mark.parametrize("request_class", [c for _, c in _REQUESTS], ids=lambda c: c.__name__)
@given(data=st.data())
@generated_examples(10)
def test_the_compiled_walks_do_what_the_general_walk_does(
    checker: str, request_class: type[Message], data: st.DataObject
) -> None:
    """Every request type, every policy, messages with every kind of value (output-only fields,
    empty REQUIRED ones, non-finite numbers, out-of-range times, counts over their limits): the
    same violations in the same order, the same fields cleared."""
    message = data.draw(messages(request_class, max_depth=6))
    general = request_class()
    general.CopyFrom(message)
    found = _CHECKERS[checker].inspect(message, "r")
    assert found == _CHECKERS[checker].inspect(general, "r", compiled=False)
    assert message == general
