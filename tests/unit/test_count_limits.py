"""The count limits before anything else (issue 15, item 1): repeated fields, maps and Struct
entries are counted on the request as it arrives (a JSON document for REST and MCP, the
protobuf encoding or the decoded message for gRPC) before any per-element work, and a request
over one is refused with the first few containers found and nothing else. The three checks
agree on paths and reasons; the encoding check stops at the limit (so it cannot say how many
there were); the JSON reader that replaces json.loads for bodies of many values reads what
json.loads reads, and stops at the first container too large for any limit."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, json_format, struct_pb2
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.contract import limits, schema
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.offload import HEAVY_SWITCH_SECONDS, heavy_held, off_loop
from ces_eval.surfaces import grpc_api, mcp_tools
from ces_eval.transcoding import body

LIMITS = limits.LIMITS
CREATE = service_pb2.CreateEvaluationRequest
STEP_ARGS = "evaluation.golden.turns[0].steps[0].expectation.tool_call.args"


def _request(
    build: Callable[[evaluation_pb2.Evaluation], None],
) -> service_pb2.CreateEvaluationRequest:
    request = CREATE(parent="projects/p/locations/l/apps/a")
    request.evaluation.display_name = "e"
    build(request.evaluation)
    return request


def _turns(n: int) -> Callable[[evaluation_pb2.Evaluation], None]:
    def build(evaluation: evaluation_pb2.Evaluation) -> None:
        for _ in range(n):
            evaluation.golden.turns.add()

    return build


def _steps_in_third_turn(evaluation: evaluation_pb2.Evaluation) -> None:
    for _ in range(3):
        evaluation.golden.turns.add().steps.add().user_input.text = "hi"
    for _ in range(limits.MAX_REPEATED):
        evaluation.golden.turns[2].steps.add().user_input.text = "more"


def _tags(evaluation: evaluation_pb2.Evaluation) -> None:
    evaluation.tags.extend(["t"] * (limits.MAX_REPEATED + 1))


def _args(evaluation: evaluation_pb2.Evaluation) -> Any:
    step = evaluation.golden.turns.add().steps.add()
    step.expectation.tool_call.tool = "projects/p/locations/l/apps/a/tools/t"
    return step.expectation.tool_call.args


def _wide_struct(evaluation: evaluation_pb2.Evaluation) -> None:
    _args(evaluation).update({f"k{i}": i for i in range(limits.MAX_STRUCT_ENTRIES + 1)})


def _nested_list(evaluation: evaluation_pb2.Evaluation) -> None:
    """The total passes the limit at a list two levels down: its path in Struct notation."""
    args = _args(evaluation)
    args["before"] = 1
    values = args.fields["a"].struct_value.fields["b"].list_value.values
    for _ in range(limits.MAX_STRUCT_ENTRIES):
        values.add().number_value = 1


CASES = {
    "turns": (
        _turns(limits.MAX_GOLDEN_TURNS + 1),
        "evaluation.golden.turns",
        limits.MAX_GOLDEN_TURNS,
    ),
    "steps": (_steps_in_third_turn, "evaluation.golden.turns[2].steps", limits.MAX_REPEATED),
    "tags": (_tags, "evaluation.tags", limits.MAX_REPEATED),
    "struct": (_wide_struct, STEP_ARGS, None),
    "nested list": (
        _nested_list,
        STEP_ARGS + '.fields["a"].struct_value.fields["b"].list_value',
        None,
    ),
}


def _json_of(message: Message) -> Any:
    return json_format.MessageToDict(message)


def _as_expected(path: str, limit: int | None, got: int | None) -> tuple[str, str, str]:
    if limit is None:
        return (path, limits.too_many_struct_entries(path).description, "TOO_MANY")
    return (path, limits.too_many(path, limit, got).description, "TOO_MANY")


@pytest.mark.parametrize("case", CASES)
def test_every_encoding_names_the_same_container(case: str) -> None:
    build, path, limit = CASES[case]
    request = _request(build)
    got = None if limit is None else limit + 1
    if case == "steps":
        got = limits.MAX_REPEATED + 1
    exact = [_as_expected(path, limit, got)]

    def found(violations: list[Any]) -> list[tuple[str, str, str]]:
        return [(v.field, v.description, v.reason) for v in violations]

    assert found(LIMITS.counts(request)) == exact
    assert found(LIMITS.json_counts(CREATE.DESCRIPTOR, _json_of(request))) == exact
    encoded = LIMITS.encoded_counts(CREATE.DESCRIPTOR, request.SerializeToString())
    assert found(encoded) == [_as_expected(path, limit, None)]
    assert limit is None or encoded[0].description.endswith("got more.")


def test_paths_start_at_the_given_field() -> None:
    request = _request(_tags)
    assert [v.field for v in LIMITS.counts(request.evaluation, "evaluation")] == ["evaluation.tags"]
    evaluation = request.evaluation.SerializeToString()
    encoded = LIMITS.encoded_counts(evaluation_pb2.Evaluation.DESCRIPTOR, evaluation, "e")
    assert [v.field for v in encoded] == ["e.tags"]


def test_the_encoding_check_stops_at_the_limit() -> None:
    """What follows the 101st turn is never read: here, bytes no decoder would accept."""
    encoded = _request(_turns(limits.MAX_GOLDEN_TURNS + 1)).SerializeToString()
    golden = encoded + b"\xff\xff\xff"  # trailing garbage inside no field: the turns come first
    assert [v.field for v in LIMITS.encoded_counts(CREATE.DESCRIPTOR, golden)] == [
        "evaluation.golden.turns"
    ]


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff\xff", b"\x0a\x02\xc3\x28", b"\x12\x80\x80\x80\x80\x10", b"\x1a\x05\x12\x03"],
    ids=["not protobuf", "invalid UTF-8", "length beyond the end", "truncated message"],
)
def test_malformed_encodings_are_left_to_the_decoder(data: bytes) -> None:
    assert LIMITS.encoded_counts(CREATE.DESCRIPTOR, data) == []


def test_within_the_limits_nothing_is_found() -> None:
    request = _request(_turns(limits.MAX_GOLDEN_TURNS - 1))
    args = _args(request.evaluation)  # the last turn
    args.update({f"k{i}": [1, {"x": 2}] for i in range(100)})
    request.evaluation.tags.extend(["t"] * limits.MAX_REPEATED)
    assert LIMITS.counts(request) == []
    assert LIMITS.json_counts(CREATE.DESCRIPTOR, _json_of(request)) == []
    assert LIMITS.encoded_counts(CREATE.DESCRIPTOR, request.SerializeToString()) == []


def test_the_first_few_are_reported() -> None:
    def every_turn_too_long(evaluation: evaluation_pb2.Evaluation) -> None:
        for _ in range(limits.MAX_GOLDEN_TURNS):
            steps = evaluation.golden.turns.add().steps
            for _ in range(limits.MAX_REPEATED + 1):
                steps.add()

    request = _request(every_turn_too_long)
    decoded = LIMITS.counts(request)
    assert [v.field for v in decoded] == [
        f"evaluation.golden.turns[{i}].steps" for i in range(limits.MAX_COUNT_VIOLATIONS)
    ]
    assert LIMITS.json_counts(CREATE.DESCRIPTOR, _json_of(request)) == decoded
    assert [
        v.field for v in LIMITS.encoded_counts(CREATE.DESCRIPTOR, request.SerializeToString())
    ] == ["evaluation.golden.turns[0].steps"]


def test_output_only_fields_are_ignored_but_bounded() -> None:
    """AIP-203: a caller may send back what it read (evaluation_runs grows with every run), so
    OUTPUT_ONLY fields are not held to the limits; their encoding is still bounded."""
    request = _request(lambda e: e.evaluation_runs.extend(["r"] * (limits.MAX_REPEATED + 1)))
    assert LIMITS.counts(request) == []
    assert LIMITS.json_counts(CREATE.DESCRIPTOR, _json_of(request)) == []
    assert LIMITS.encoded_counts(CREATE.DESCRIPTOR, request.SerializeToString()) == []
    request.evaluation.evaluation_runs.extend(["r"] * limits.MAX_DECODED_ENTRIES)
    [violation] = LIMITS.encoded_counts(CREATE.DESCRIPTOR, request.SerializeToString())
    assert (violation.field, violation.reason) == ("evaluation.evaluation_runs", "TOO_MANY")
    assert str(limits.MAX_DECODED_ENTRIES) in violation.description


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one field each"])
def test_repeated_scalars_count_each_element(packed: bool) -> None:
    """No request of ours has a packable repeated field yet; descriptor.proto does
    (SourceCodeInfo.Location.path, ``[packed = true]``): a packed run is one field on the
    wire holding many elements, each counted (a varint ends at a byte below 0x80)."""
    location = descriptor_pb2.SourceCodeInfo.Location.DESCRIPTOR

    def encoded(count: int) -> bytes:
        numbers = [1, 300, 70_000] * (count // 3) + [5] * (count % 3)
        message = descriptor_pb2.SourceCodeInfo.Location(path=numbers)
        if packed:
            return message.SerializeToString()
        return b"".join(b"\x08" + _varint(n) for n in numbers)  # field 1, varint

    assert LIMITS.encoded_counts(location, encoded(limits.MAX_REPEATED)) == []
    [violation] = LIMITS.encoded_counts(location, encoded(limits.MAX_REPEATED + 1))
    assert (violation.field, violation.reason) == ("path", "TOO_MANY")


def _varint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


# -- JSON bodies ----------------------------------------------------------------------------------


def _refusal(document: bytes, path: str = "evaluation") -> list[tuple[str, str]]:
    with pytest.raises(ServiceError) as raised:
        body.parse_body(document, evaluation_pb2.Evaluation(), path)
    assert raised.value.code is Code.INVALID_ARGUMENT
    return [(v.field, v.reason) for v in raised.value.violations]


def test_a_body_over_a_count_limit_is_refused_with_that_alone() -> None:
    turns = [{"steps": [{"nope": 1}]}] * (limits.MAX_GOLDEN_TURNS + 1)
    document = {"displayName": 5, "bogus": 1, "golden": {"turns": turns}}
    assert _refusal(json.dumps(document).encode()) == [("evaluation.golden.turns", "TOO_MANY")]


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"golden": {"turns": [{}] * (limits.MAX_GOLDEN_TURNS + 1)}}, "evaluation.golden.turns"),
        ({"tags": ["a"] * (limits.MAX_REPEATED + 1)}, "evaluation.tags"),
        (
            {"golden": {"turns": [{"steps": [{}] * (limits.MAX_REPEATED + 1)}]}},
            "evaluation.golden.turns[0].steps",
        ),
    ],
    ids=["messages", "strings", "deeper"],
)
def test_a_body_valid_but_for_a_count_is_refused_at_that_count(
    document: dict[str, object], field: str
) -> None:
    """Nothing else is wrong: the one walk that merges a valid document counts as it goes."""
    within = json.loads(json.dumps(document).replace("[{}, ", "[", 1).replace('["a", ', "[", 1))
    body.parse_body(json.dumps(within).encode(), evaluation_pb2.Evaluation(), "evaluation")
    assert _refusal(json.dumps({"displayName": "x", **document}).encode()) == [(field, "TOO_MANY")]


ENOUGH = limits.MAX_DECODED_ENTRIES + 1


@pytest.mark.parametrize(
    ("document", "field", "description"),
    [
        (
            '{"tags":[' + ",".join(['"a"'] * ENOUGH) + "]}",
            "evaluation.tags",
            f"At most {limits.MAX_REPEATED} entries; got more.",
        ),
        (
            '{"evaluationRuns":[' + ",".join(['"r"'] * ENOUGH) + "]}",
            "evaluation.evaluation_runs",
            f"At most {limits.MAX_DECODED_ENTRIES} entries; got more.",
        ),
        (
            '{"golden":{"turns":[{"steps":[{"expectation":{"toolCall":{"args":{"a":{"l":['
            + ",".join(["1"] * ENOUGH)
            + "]}}}}}]}]}}",
            STEP_ARGS + '.fields["a"].struct_value.fields["l"].list_value',
            limits.too_many_struct_entries("").description,
        ),
        (
            '{"bogus":{"deeper":[' + ",".join(["0"] * ENOUGH) + "]}}",
            "evaluation.bogus.deeper",
            f"At most {limits.MAX_DECODED_ENTRIES} entries; got more.",
        ),
    ],
    ids=["repeated field", "output only", "list in a Struct", "unknown field"],
)
def test_the_reader_stops_at_a_container_too_large_for_any_limit(
    document: str, field: str, description: str
) -> None:
    data = document.encode()
    assert body.heavy(data)
    with pytest.raises(ServiceError) as raised:
        body.parse_body(data, evaluation_pb2.Evaluation(), "evaluation")
    [violation] = raised.value.violations
    assert (violation.field, violation.description, violation.reason) == (
        field,
        description,
        "TOO_MANY",
    )


def test_small_bodies_stay_on_the_event_loop() -> None:
    assert not body.heavy(json.dumps({"displayName": "x", "tags": ["a"] * 100}).encode())
    assert body.heavy(json.dumps({"tags": ["a"] * 1000}).encode())
    assert body.heavy(b'{"description": "' + b"d" * (1 << 17) + b'"}')
    assert not body.heavy_document({"a": [1] * 10}, 32)
    assert body.heavy_document({"a": [{"b": [1] * 20}] * 2}, 32)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=40,
)


@settings(max_examples=300)
@given(json_values, st.sampled_from(["", " ", "\n\t"]))
def test_the_reader_reads_what_json_loads_reads(value: object, space: str) -> None:
    text = json.dumps(value, indent=None, separators=(f",{space}", f":{space}"))
    assert body._Reader(text).document() == json.loads(text)


@settings(max_examples=300)
@given(st.text(alphabet='{}[]",:0123456789.eE+-ntrufalsNIiy \\', max_size=30))
def test_the_reader_refuses_what_json_loads_refuses(text: str) -> None:
    def outcome(read: Callable[[], object]) -> object:
        try:
            return ("value", read())
        except RecursionError:
            return "too deep"
        except ValueError as error:  # JSONDecodeError, and NaN or Infinity
            return ("error", str(error))

    def strict_loads() -> object:
        return json.loads(text, parse_constant=body.not_json)

    expected = outcome(strict_loads)
    got = outcome(lambda: body._Reader(text).document())
    assert got == expected


# -- MCP arguments --------------------------------------------------------------------------------


def test_mcp_arguments_are_counted_before_the_types() -> None:
    """A wrong type beside a list over its count: the count limit answers alone (it bounds
    hostile input before any per-element work), as for a REST body."""
    spec = mcp_tools.tool_specs()["create_evaluation"]
    arguments = {
        "parent": "projects/p/locations/l/apps/a",
        "evaluation": {"displayName": 7, "tags": ["a"] * (limits.MAX_REPEATED + 1)},
    }
    with pytest.raises(ServiceError) as raised:
        mcp_tools._request(spec, arguments)
    assert [(v.field, v.reason) for v in raised.value.violations] == [
        ("evaluation.tags", "TOO_MANY")
    ]


# -- gRPC -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turns",
    [limits.LOOP_BYTES // 2, limits.ENCODED_CHECK_BYTES // 2 + 1],
    ids=["decoded, then counted", "counted on the encoding"],
)
def test_grpc_requests_are_counted_before_the_core(turns: int) -> None:
    raw = _request(_turns(turns)).SerializeToString()
    with pytest.raises(ServiceError) as raised:
        grpc_api._decode(CREATE, raw)
    assert [(v.field, v.reason) for v in raised.value.violations] == [
        ("evaluation.golden.turns", "TOO_MANY")
    ]


# -- off the loop ---------------------------------------------------------------------------------


def test_heavy_work_runs_in_a_thread_collector_paused_switching_often() -> None:
    loop_thread = threading.get_ident()
    usual = sys.getswitchinterval()
    assert usual > HEAVY_SWITCH_SECONDS

    def work() -> tuple[int, bool, float]:
        return threading.get_ident(), gc.isenabled(), sys.getswitchinterval()

    assert gc.isenabled()
    assert asyncio.run(off_loop(False, work)) == (loop_thread, True, usual)
    there, enabled, interval = asyncio.run(off_loop(True, work))
    assert there != loop_thread
    assert (enabled, interval) == (False, HEAVY_SWITCH_SECONDS)
    assert (gc.isenabled(), sys.getswitchinterval()) == (True, usual)


def test_heavy_holds_nest_and_the_last_one_out_restores_the_interpreter() -> None:
    usual = sys.getswitchinterval()
    with heavy_held():
        with heavy_held():
            assert (gc.isenabled(), sys.getswitchinterval()) == (False, HEAVY_SWITCH_SECONDS)
        assert (gc.isenabled(), sys.getswitchinterval()) == (False, HEAVY_SWITCH_SECONDS)
    assert (gc.isenabled(), sys.getswitchinterval()) == (True, usual)
    gc.disable()  # a collector the program turned off stays off
    try:
        with heavy_held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def _message_types() -> list[Any]:
    """Every message type a request or response of our services holds, once."""
    found: dict[str, Any] = {}
    pending = [m.input_type for s in schema.services() for m in s.methods]
    pending += [m.output_type for s in schema.services() for m in s.methods]
    while pending:
        message_type = pending.pop()
        if message_type.full_name not in found:
            found[message_type.full_name] = message_type
            pending += [f.message_type for f in message_type.fields if f.message_type]
    return list(found.values())


def test_checking_and_counting_follow_one_plan_per_message_type() -> None:
    """One compiled plan per message type (Limits.plan): the checking walk's rules and the
    count passes' plan are its two views, so they never disagree on a container's limit, and
    every field a count pass enters is one the checking walk looks at."""
    checked = limits.Limits()
    containers = 0
    for message_type in _message_types():
        plan = checked.plan(message_type)
        assert checked.plan(message_type) is plan  # compiled once
        assert checked.rules_of(message_type) is plan.rules
        assert checked.count_plan(message_type) is plan.counts
        rules = plan.rules[1]
        for field, (kind, limit, *_) in rules.items():
            if field.is_repeated:  # every repeated field and map: counted at the same limit
                containers += 1
                counted = plan.counts[field.number]
                assert (counted[0], counted[1]) == (kind, limit), field.full_name
        for number in plan.counts:
            assert message_type.fields_by_number[number] in rules
    assert containers > 50


def _filled(message: Message, rnd: random.Random, depth: int = 0) -> None:
    """Set about half of ``message``'s fields, each repeated field and map with up to four
    entries, Structs and Values nested a few levels (for counts that pass small limits)."""
    for field in message.DESCRIPTOR.fields:
        if depth > 4 or rnd.random() < 0.5:
            continue
        target = field.message_type
        if target is not None and target.GetOptions().map_entry:
            value_type = target.fields_by_name["value"].message_type
            entries = getattr(message, field.name)
            for index in range(rnd.randint(0, 4)):
                key = f"k{index}" if target.fields_by_name["key"].type == 9 else index
                if value_type is not None:
                    _filled(entries[key], rnd, depth + 1)
                    entries[key].SetInParent()
        elif field.is_repeated and target is not None:
            for _ in range(rnd.randint(0, 4)):
                _filled(getattr(message, field.name).add(), rnd, depth + 1)
        elif target is not None and target.full_name == "google.protobuf.Value":
            getattr(message, field.name).CopyFrom(_value(rnd, 0))
        elif target is not None:
            _filled(getattr(message, field.name), rnd, depth + 1)
            getattr(message, field.name).SetInParent()


def _value(rnd: random.Random, depth: int) -> struct_pb2.Value:
    value = struct_pb2.Value()
    chance = rnd.random()
    if depth > 3 or chance < 0.4:
        value.string_value = "x"
    elif chance < 0.7:
        for index in range(rnd.randint(0, 4)):
            value.struct_value.fields[f"k{index}"].CopyFrom(_value(rnd, depth + 1))
    else:
        for _ in range(rnd.randint(0, 4)):
            value.list_value.values.add().CopyFrom(_value(rnd, depth + 1))
    return value


def test_a_decoded_request_and_its_json_are_counted_alike() -> None:
    """One count walk over both readings of a request (Limits.counts, Limits.json_counts):
    the same violations, at the same paths, for requests whose every repeated field, map and
    Struct may pass a small limit."""
    types = [CREATE, service_pb2.UpdateEvaluationRequest]
    small = {
        (message_type.full_name, field.name): 2
        for message_type in _message_types()
        for field in message_type.fields
        if field.is_repeated
    }
    counted = limits.Limits(counts=small)
    rnd = random.Random(37)  # noqa: S311 - a repeatable sample of requests, no secret
    over = 0
    for _ in range(300):
        request = rnd.choice(types)()
        _filled(request, rnd)
        decoded = counted.counts(request)
        assert decoded == counted.json_counts(request.DESCRIPTOR, _json_of(request))
        over += bool(decoded)
    assert over > 20  # many pass a limit: the walk is compared where it reports
