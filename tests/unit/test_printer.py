"""The compiled proto3 JSON printer (:mod:`ces_eval.transcoding.printer`) prints exactly what
``json.dumps(json_format.MessageToDict(...))`` prints, byte for byte: every message type of the
contract, generated messages of the main resources and List responses, and every kind of field
proto3 JSON has, in a message type of the test's own (maps of every key type, float32,
wrappers, NullValue, proto3 ``optional``, a custom JSON name, enum aliases and custom enum value
names, extensions). Where json_format raises (a Timestamp out of range, an Any of an unknown
type, a NaN in a Struct), the printer raises the same exception."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_enumvalue_options_pb2,
    json_format,
    message_factory,
    struct_pb2,
    text_format,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.transcoding import printer
from ces_eval.transcoding.rendering import COMPACT, _whole
from tests.support import samples
from tests.support.generated import generated_examples, messages

SEPARATORS = [COMPACT, (", ", ": ")]


def _expected(message: Message, int_enums: bool, separators: tuple[str, str] = COMPACT) -> str:
    document = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
    return json.dumps(document, ensure_ascii=False, separators=separators)


def _compiled(message: Message, int_enums: bool, separators: tuple[str, str] = COMPACT) -> str:
    """The compiled printer's own output: never json_format's, which :func:`printer.to_dict`
    falls back to."""
    document = printer._render_of(message.DESCRIPTOR, int_enums)(message)
    return json.dumps(document, ensure_ascii=False, separators=separators)


def _assert_printed_as_json_format(
    message: Message, int_enums: bool, separators: tuple[str, str] = COMPACT
) -> None:
    expected = _expected(message, int_enums, separators)
    assert _compiled(message, int_enums, separators) == expected
    assert printer.to_json(message, int_enums, separators) == expected
    assert printer.to_dict(message, int_enums) == json_format.MessageToDict(
        message, use_integers_for_enums=int_enums
    )


def _assert_raises_as_json_format(message: Message, int_enums: bool) -> bool:
    """Prints as json_format does, or raises the exception json_format raises (type and
    text); whether it raised."""
    try:
        expected = _expected(message, int_enums)
    except Exception as error:  # noqa: BLE001 - any exception json_format raises is expected
        with pytest.raises(type(error)) as raised:
            printer.to_json(message, int_enums)
        assert str(raised.value) == str(error)
        return True
    assert printer.to_json(message, int_enums) == expected
    return False


# -- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize("separators", SEPARATORS)
def test_every_message_of_the_contract_is_printed_as_json_format_prints_it(
    int_enums: bool, separators: tuple[str, str]
) -> None:
    found = samples.contract_messages(empty=True)
    assert len(found) > 250
    for message in found:
        _assert_printed_as_json_format(message, int_enums, separators)
        assert _whole(message, int_enums, separators) == _expected(message, int_enums, separators)


MAIN = [
    evaluation_pb2.Evaluation,
    evaluation_pb2.EvaluationResult,
    evaluation_pb2.EvaluationRun,
    evaluation_pb2.EvaluationDataset,
    evaluation_pb2.EvaluationExpectation,
    evaluation_pb2.ScheduledEvaluationRun,
    service_pb2.ListEvaluationsResponse,
    service_pb2.ListEvaluationResultsResponse,
    service_pb2.ListEvaluationRunsResponse,
    service_pb2.ListEvaluationDatasetsResponse,
    service_pb2.ListEvaluationExpectationsResponse,
    service_pb2.ListScheduledEvaluationRunsResponse,
]


@pytest.mark.parametrize("message_class", MAIN, ids=[c.DESCRIPTOR.name for c in MAIN])
def test_generated_messages_are_printed_as_json_format_prints_them(
    message_class: type[Message],
) -> None:
    @generated_examples(12)
    @given(messages(message_class, max_depth=4, json_safe=True), st.booleans())
    def check(message: Message, int_enums: bool) -> None:
        _assert_printed_as_json_format(message, int_enums)

    check()


@pytest.mark.parametrize("int_enums", [False, True])
def test_what_json_format_refuses_the_printer_refuses_alike(int_enums: bool) -> None:
    """Messages with values proto3 JSON has no form for (Timestamps and Durations out of range,
    Any of unknown types, non-finite Struct numbers), among others."""
    raised: list[str] = []
    for message_class in MAIN[:3]:

        @generated_examples(40)
        @given(messages(message_class, max_depth=4, json_safe=False))
        def check(message: Message) -> None:
            if _assert_raises_as_json_format(message, int_enums):
                raised.append(message.DESCRIPTOR.name)

        check()
    assert len(set(raised)) >= 2, raised


def _evaluation_with_timestamp(seconds: int, nanos: int) -> Message:
    evaluation = evaluation_pb2.Evaluation(name="e")
    evaluation.create_time.seconds = seconds
    evaluation.create_time.nanos = nanos
    return evaluation


def _evaluation_with_value(value: Callable[[struct_pb2.Value], object]) -> Message:
    evaluation = evaluation_pb2.Evaluation()
    step = evaluation.golden.turns.add().steps.add()
    value(step.expectation.tool_call.args.fields["x"])
    return evaluation


def _unknown_any() -> any_pb2.Any:
    return any_pb2.Any(type_url="type.googleapis.com/no.such.Type", value=b"\x08\x01")


REFUSED: list[tuple[str, Message, type[Exception]]] = [
    ("timestamp", timestamp_pb2.Timestamp(seconds=-62_135_596_801), ValueError),
    ("timestamp nanos", timestamp_pb2.Timestamp(nanos=-1), ValueError),
    ("duration", duration_pb2.Duration(seconds=315_576_000_001), ValueError),
    ("duration sign", duration_pb2.Duration(seconds=1, nanos=-1), ValueError),
    (
        "nested timestamp",
        _evaluation_with_timestamp(253_402_300_800, 0),
        json_format.SerializeToJsonError,
    ),
    ("value NaN", struct_pb2.Value(number_value=math.nan), ValueError),
    ("value infinity", struct_pb2.Value(number_value=-math.inf), ValueError),
    (
        "nested NaN",
        _evaluation_with_value(lambda v: setattr(v, "number_value", math.nan)),
        json_format.SerializeToJsonError,
    ),
    ("any", _unknown_any(), TypeError),
    ("field mask", field_mask_pb2.FieldMask(paths=["a__b"]), ValueError),
]


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize(
    ("message", "error"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_values_json_format_refuses_raise_its_exception(
    message: Message, error: type[Exception], int_enums: bool
) -> None:
    with pytest.raises(error):
        json_format.MessageToDict(message, use_integers_for_enums=int_enums)
    assert _assert_raises_as_json_format(message, int_enums)


def test_an_any_of_an_unknown_type_inside_a_message_raises_as_json_format() -> None:
    evaluation = evaluation_pb2.Evaluation()
    result = evaluation_pb2.EvaluationResult()
    result.error.details.add().CopyFrom(_unknown_any())
    evaluation.last_completed_result.CopyFrom(result)
    assert _assert_raises_as_json_format(evaluation, False)


# -- well-known types at the top -----------------------------------------------------------------


def _struct() -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update({"b": [1.5, None, True, "x", {"c": []}], "a": {}, "z": -0.0, "n": None})
    return value


def _any_of(message: Message, prefix: str = "type.googleapis.com/") -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message, type_url_prefix=prefix)
    return packed


WELL_KNOWN: list[Message] = [
    timestamp_pb2.Timestamp(),
    timestamp_pb2.Timestamp(seconds=-62_135_596_800),
    timestamp_pb2.Timestamp(seconds=253_402_300_799, nanos=999_999_999),
    timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=120_000_000),
    duration_pb2.Duration(),
    duration_pb2.Duration(seconds=-315_576_000_000, nanos=-999_999_999),
    duration_pb2.Duration(nanos=-1_000),
    field_mask_pb2.FieldMask(paths=["display_name", "golden.turns"]),
    empty_pb2.Empty(),
    struct_pb2.Struct(),
    _struct(),
    struct_pb2.Value(),
    struct_pb2.Value(null_value=struct_pb2.NULL_VALUE),
    struct_pb2.Value(list_value=struct_pb2.ListValue()),
    struct_pb2.Value(struct_value=_struct()),
    struct_pb2.ListValue(),
    wrappers_pb2.Int64Value(),
    wrappers_pb2.Int64Value(value=-(2**63)),
    wrappers_pb2.UInt64Value(value=2**64 - 1),
    wrappers_pb2.Int32Value(value=-5),
    wrappers_pb2.UInt32Value(value=2**32 - 1),
    wrappers_pb2.FloatValue(value=0.1),
    wrappers_pb2.FloatValue(value=math.inf),
    wrappers_pb2.DoubleValue(value=math.nan),
    wrappers_pb2.DoubleValue(value=-0.0),
    wrappers_pb2.BoolValue(value=True),
    wrappers_pb2.StringValue(value="ü\x00\u2028"),
    wrappers_pb2.BytesValue(value=b"\xfb\xff"),
    any_pb2.Any(),
    _any_of(duration_pb2.Duration(seconds=3)),
    _any_of(_struct(), "example.com/a/b/"),
    _any_of(wrappers_pb2.Int64Value(value=7)),
    _any_of(evaluation_pb2.Evaluation(name="e", create_time=timestamp_pb2.Timestamp(seconds=1))),
]


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize("message", WELL_KNOWN, ids=[str(i) for i in range(len(WELL_KNOWN))])
def test_a_well_known_type_is_printed_as_json_format_prints_it(
    message: Message, int_enums: bool
) -> None:
    _assert_printed_as_json_format(message, int_enums)


_SECONDS_EDGES = (
    -62_135_596_801,
    -62_135_596_800,
    -315_576_000_001,
    -315_576_000_000,
    -86_401,
    -86_400,
    -1,
    0,
    1,
    86_399,
    951_782_400,  # 2000-02-29
    253_402_300_799,
    253_402_300_800,
    315_576_000_000,
    315_576_000_001,
    -(2**63),
    2**63 - 1,
)
_NANOS_EDGES = (0, 1, -1, 1_000, 1_000_000, 999_999_999, -999_999_999, 10**9, -(10**9), 2**31 - 1)


@generated_examples(400)
@given(
    st.one_of(st.sampled_from(_SECONDS_EDGES), st.integers(-320_000_000_000, 320_000_000_000)),
    st.one_of(st.sampled_from(_NANOS_EDGES), st.integers(-(10**9), 10**9)),
)
def test_timestamps_and_durations_are_written_as_to_json_string_writes_them(
    seconds: int, nanos: int
) -> None:
    for message_class in (timestamp_pb2.Timestamp, duration_pb2.Duration):
        message = message_class(seconds=seconds, nanos=nanos)
        try:
            expected = message.ToJsonString()
        except ValueError:
            with pytest.raises(printer._Unhandled):
                printer._render_of(message.DESCRIPTOR, False)(message)
            with pytest.raises(ValueError):  # noqa: PT011 - json_format's own ValueError
                printer.to_dict(message)
            continue
        assert printer._render_of(message.DESCRIPTOR, False)(message) == expected
        assert printer.to_dict(message) == expected


# -- every kind of field: a message type of the test's own ----------------------------------------

_KINDS_PROTO = """
name: "ces_eval_tests/printer_kinds.proto"
package: "ces_eval_tests.printer"
syntax: "proto3"
dependency: [
  "google/protobuf/any.proto", "google/protobuf/duration.proto", "google/protobuf/empty.proto",
  "google/protobuf/field_mask.proto", "google/protobuf/struct.proto",
  "google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto",
  "google/protobuf/json_enumvalue_options.proto"
]
enum_type {
  name: "Color"
  options { allow_alias: true }
  value { name: "COLOR_UNSPECIFIED" number: 0 }
  value { name: "RED" number: 1 }
  value { name: "CRIMSON" number: 1 }
  value { name: "GREEN" number: 2 }
}
message_type {
  name: "Kinds"
  field { name: "by_bool" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByBoolEntry" }
  field { name: "by_int32" number: 2 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByInt32Entry" }
  field { name: "by_int64" number: 3 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByInt64Entry" }
  field { name: "by_uint64" number: 4 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByUint64Entry" }
  field { name: "by_string" number: 5 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByStringEntry" }
  field { name: "by_sint32" number: 6 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.BySint32Entry" }
  field { name: "by_fixed64" number: 7 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds.ByFixed64Entry" }
  field { name: "single" number: 8 label: LABEL_OPTIONAL type: TYPE_FLOAT }
  field { name: "double" number: 9 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
  field { name: "singles" number: 10 label: LABEL_REPEATED type: TYPE_FLOAT }
  field { name: "doubles" number: 11 label: LABEL_REPEATED type: TYPE_DOUBLE }
  field { name: "color" number: 12 label: LABEL_OPTIONAL type: TYPE_ENUM
          type_name: ".ces_eval_tests.printer.Color" }
  field { name: "colors" number: 13 label: LABEL_REPEATED type: TYPE_ENUM
          type_name: ".ces_eval_tests.printer.Color" }
  field { name: "null" number: 14 label: LABEL_OPTIONAL type: TYPE_ENUM
          type_name: ".google.protobuf.NullValue" }
  field { name: "nulls" number: 15 label: LABEL_REPEATED type: TYPE_ENUM
          type_name: ".google.protobuf.NullValue" }
  field { name: "maybe" number: 16 label: LABEL_OPTIONAL type: TYPE_INT32
          oneof_index: 1 proto3_optional: true }
  field { name: "text" number: 17 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
  field { name: "nested" number: 18 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds" oneof_index: 0 }
  field { name: "u32" number: 19 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "f32" number: 20 label: LABEL_OPTIONAL type: TYPE_FIXED32 }
  field { name: "sf64" number: 21 label: LABEL_OPTIONAL type: TYPE_SFIXED64 }
  field { name: "s64" number: 22 label: LABEL_OPTIONAL type: TYPE_SINT64 }
  field { name: "u64" number: 23 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "f64" number: 24 label: LABEL_OPTIONAL type: TYPE_FIXED64 }
  field { name: "i64" number: 25 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "s32" number: 26 label: LABEL_OPTIONAL type: TYPE_SINT32 }
  field { name: "sf32" number: 27 label: LABEL_OPTIONAL type: TYPE_SFIXED32 }
  field { name: "flag" number: 28 label: LABEL_OPTIONAL type: TYPE_BOOL }
  field { name: "data" number: 29 label: LABEL_OPTIONAL type: TYPE_BYTES }
  field { name: "datas" number: 30 label: LABEL_REPEATED type: TYPE_BYTES }
  field { name: "i64s" number: 31 label: LABEL_REPEATED type: TYPE_INT64 }
  field { name: "flags" number: 32 label: LABEL_REPEATED type: TYPE_BOOL }
  field { name: "texts" number: 33 label: LABEL_REPEATED type: TYPE_STRING }
  field { name: "i64_value" number: 40 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Int64Value" }
  field { name: "u64_value" number: 41 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.UInt64Value" }
  field { name: "float_value" number: 42 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.FloatValue" }
  field { name: "double_value" number: 43 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.DoubleValue" }
  field { name: "bytes_value" number: 44 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.BytesValue" }
  field { name: "bool_value" number: 45 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.BoolValue" }
  field { name: "string_value" number: 46 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.StringValue" }
  field { name: "i32_value" number: 47 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Int32Value" }
  field { name: "u32_value" number: 48 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.UInt32Value" }
  field { name: "empty" number: 49 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Empty" }
  field { name: "mask" number: 50 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.FieldMask" }
  field { name: "any" number: 51 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Any" }
  field { name: "struct" number: 52 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Struct" }
  field { name: "value" number: 53 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Value" }
  field { name: "list" number: 54 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.ListValue" }
  field { name: "time" number: 55 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Timestamp" }
  field { name: "times" number: 56 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".google.protobuf.Timestamp" }
  field { name: "span" number: 57 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Duration" }
  field { name: "values" number: 58 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".google.protobuf.Value" }
  field { name: "children" number: 59 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".ces_eval_tests.printer.Kinds" }
  field { name: "custom_name" number: 60 label: LABEL_OPTIONAL type: TYPE_STRING
          json_name: "customJSON" }
  nested_type { name: "ByBoolEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING } }
  nested_type { name: "ByInt32Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_DOUBLE } }
  nested_type { name: "ByInt64Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".ces_eval_tests.printer.Kinds" } }
  nested_type { name: "ByUint64Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_UINT64 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_ENUM
            type_name: ".ces_eval_tests.printer.Color" } }
  nested_type { name: "ByStringEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_BYTES } }
  nested_type { name: "BySint32Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_SINT32 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_FLOAT } }
  nested_type { name: "ByFixed64Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_FIXED64 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".google.protobuf.Value" } }
  oneof_decl { name: "choice" }
  oneof_decl { name: "_maybe" }
}
"""

_CLOSED_PROTO = """
name: "ces_eval_tests/printer_closed.proto"
package: "ces_eval_tests.printer"
syntax: "proto2"
enum_type { name: "Shade" value { name: "DARK" number: 1 } value { name: "LIGHT" number: 2 } }
message_type {
  name: "Closed"
  field { name: "shade" number: 1 label: LABEL_OPTIONAL type: TYPE_ENUM
          type_name: ".ces_eval_tests.printer.Shade" }
  field { name: "shades" number: 2 label: LABEL_REPEATED type: TYPE_ENUM
          type_name: ".ces_eval_tests.printer.Shade" }
  field { name: "count" number: 3 label: LABEL_OPTIONAL type: TYPE_INT32 }
  extension_range { start: 100 end: 200 }
}
extension { name: "note" number: 100 label: LABEL_OPTIONAL type: TYPE_STRING
            extendee: ".ces_eval_tests.printer.Closed" }
"""


def _message_class(proto: descriptor_pb2.FileDescriptorProto, name: str) -> type[Message]:
    """``name`` of the file ``proto``, added to the default pool once (json_format looks Any
    types and the enum value option up there)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(proto.name)
    except KeyError:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def _kinds_file() -> descriptor_pb2.FileDescriptorProto:
    """The file of Kinds, GREEN with a JSON name of its own (json_format's enum value option)."""
    proto = text_format.Parse(_KINDS_PROTO, descriptor_pb2.FileDescriptorProto())
    (green,) = [value for value in proto.enum_type[0].value if value.name == "GREEN"]
    green.options.Extensions[json_enumvalue_options_pb2.json].string = "green-ish"
    return proto


Kinds = _message_class(_kinds_file(), "ces_eval_tests.printer.Kinds")
Closed = _message_class(
    text_format.Parse(_CLOSED_PROTO, descriptor_pb2.FileDescriptorProto()),
    "ces_eval_tests.printer.Closed",
)


def _kinds(variant: int) -> Message:
    """A Kinds with every field set; ``variant`` picks the oneof branch and some values."""
    m: Any = Kinds()
    m.by_bool[False] = "no"
    m.by_bool[True] = "yes"
    for key in (3, -1, 2**31 - 1, 0):
        m.by_int32[key] = key / 3
        m.by_sint32[key] = 0.1 * key
        m.by_uint64[key + 1] = (1, 2, 7, 0)[(variant + key) % 4]
    m.by_int64[-(2**63)].text = "deep"
    m.by_int64[5].by_bool[True] = ""
    m.by_fixed64[2**64 - 1].number_value = 1e300
    m.by_fixed64[0].list_value.append("x")
    m.by_string["é\u2028"] = b"\x00"
    m.by_string[""] = b""
    m.single = (0.1, math.inf, -math.inf, math.nan, 3.4028234663852886e38)[variant % 5]
    m.double = (-0.0, math.nan, 1e-320, 2.0**53 + 2, -math.inf)[variant % 5]
    m.singles.extend([0.1, 1e-45, -0.0, math.nan, 16_777_217.0])
    m.doubles.extend([0.1, math.inf, 5e-324, 1e16])
    m.color = (1, 2, 3, -7)[variant % 4]
    m.colors.extend([0, 1, 2, 99])
    m.nulls.extend([0, 5])
    m.maybe = 0
    if variant % 2:
        m.nested.text = "inner"
        m.nested.nested.maybe = -1
    else:
        m.text = '\U0010ffff\x00"/'
    m.u32, m.f32, m.s32, m.sf32 = 2**32 - 1, 7, -(2**31), -1
    m.sf64, m.s64, m.u64, m.f64, m.i64 = -(2**63), 2**53 + 1, 2**64 - 1, 1, -1
    m.flag = True
    m.data = bytes(range(256))
    m.datas.extend([b"", b"\xfb\xff", b"\x00"])
    m.i64s.extend([0, -(2**63), 2**63 - 1])
    m.flags.extend([True, False])
    m.texts.extend(["", "שלום", "\u2028"])
    m.i64_value.value = 2**53 + 1
    m.u64_value.SetInParent()  # set, holding zero: printed as "0"
    m.float_value.value = 0.2
    m.double_value.value = math.nan if variant % 2 else 0.2
    m.bytes_value.value = b"\xff"
    m.bool_value.SetInParent()
    m.string_value.value = "s"
    m.i32_value.value = -(2**31)
    m.u32_value.value = 2**32 - 1
    m.empty.SetInParent()
    m.mask.paths.extend(["display_name", "golden.turns"])
    m.any.Pack(evaluation_pb2.Evaluation(name="packed", create_time={"seconds": variant}))
    m.struct.update({"b": [1, None, {"c": True}], "a": "x"})
    m.value.SetInParent()  # an empty Value: null
    m.list.extend([None, 2.5, "x", [], {}])
    m.time.seconds, m.time.nanos = 1_700_000_000 + variant, 1_000 * variant
    m.times.add(seconds=-62_135_596_800)
    m.times.add(seconds=253_402_300_799, nanos=999_999_999)
    m.span.seconds, m.span.nanos = -variant, -500_000_000
    m.values.add()
    m.values.add(null_value=0)
    m.values.add(bool_value=False)
    m.values.add(number_value=-0.0)
    m.children.add(custom_name="child").children.add()
    m.custom_name = f"variant {variant}"
    return m


KINDS = [Kinds(), *(_kinds(variant) for variant in range(5))]


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize("separators", SEPARATORS)
@pytest.mark.parametrize("message", KINDS, ids=[str(i) for i in range(len(KINDS))])
def test_every_kind_of_field_is_printed_as_json_format_prints_it(
    message: Message, int_enums: bool, separators: tuple[str, str]
) -> None:
    _assert_printed_as_json_format(message, int_enums, separators)


def test_the_test_type_has_what_it_is_meant_to_have() -> None:
    document = json.loads(_expected(KINDS[2], False))
    assert document["color"] == "green-ish"  # the custom enum value name
    # Of the aliases RED and CRIMSON, json_format finds RED.
    assert document["colors"] == ["COLOR_UNSPECIFIED", "RED", "green-ish", 99]
    assert document["byBool"] == {"false": "no", "true": "yes"}
    assert document["nulls"] == [None, None]  # NullValue: null, whatever the number
    assert document["maybe"] == 0  # proto3 optional: set to zero, printed
    assert "customJSON" in document
    assert "nested" in document
    assert "text" in json.loads(_expected(KINDS[1], False))  # the other oneof branch


@generated_examples(40)
@given(messages(Kinds, max_depth=3, json_safe=True), st.booleans())
def test_generated_messages_of_every_kind_are_printed_as_json_format_prints_them(
    message: Message, int_enums: bool
) -> None:
    _assert_printed_as_json_format(message, int_enums)


def test_a_closed_enum_and_an_extension_are_printed_as_json_format_prints_them() -> None:
    closed = Closed(shade=2, shades=[1, 2], count=0)
    for int_enums in (False, True):
        _assert_printed_as_json_format(closed, int_enums)
    extension = Closed.DESCRIPTOR.file.extensions_by_name["note"]
    closed.Extensions[extension] = "aside"
    expected = _expected(closed, False)
    assert '"[ces_eval_tests.printer.note]":"aside"' in expected
    assert printer.to_json(closed) == expected  # through json_format: its names are its own
    with pytest.raises(KeyError):
        printer._render_of(Closed.DESCRIPTOR, False)(closed)


def test_a_printer_is_compiled_once_per_type_and_enum_encoding() -> None:
    descriptor = evaluation_pb2.Evaluation.DESCRIPTOR
    names = printer._render_of(descriptor, False)
    assert printer._render_of(descriptor, False) is names
    assert printer._render_of(descriptor, True) is not names
