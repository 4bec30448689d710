"""Query parameters into request messages (google/api/http.proto "Rules for HTTP mapping"; AIP-127).

The API's own requests (ListEvaluations, UpdateEvaluation with its FieldMask, ExportEvaluations
with a repeated field and an enum) show the everyday cases; a message built in a private descriptor
pool covers every scalar type, the well-known types, oneofs, maps, a custom JSON name and a closed
(proto2) enum. Hypothesis checks value conversions round-trip and that no input raises anything
but ``QueryError``.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

import pytest
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    field_mask_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service
from ces_eval.transcoding.query import SYSTEM_PARAMETERS, QueryError, apply_query

# --- a message with every kind of field, in a pool of its own ---------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "i32": _F.TYPE_INT32,
    "s32": _F.TYPE_SINT32,
    "sf32": _F.TYPE_SFIXED32,
    "u32": _F.TYPE_UINT32,
    "f32": _F.TYPE_FIXED32,
    "i64": _F.TYPE_INT64,
    "s64": _F.TYPE_SINT64,
    "sf64": _F.TYPE_SFIXED64,
    "u64": _F.TYPE_UINT64,
    "f64": _F.TYPE_FIXED64,
    "flt": _F.TYPE_FLOAT,
    "dbl": _F.TYPE_DOUBLE,
    "flag": _F.TYPE_BOOL,
    "text": _F.TYPE_STRING,
    "blob": _F.TYPE_BYTES,
}
_WRAPPERS = [
    "DoubleValue",
    "FloatValue",
    "Int64Value",
    "UInt64Value",
    "Int32Value",
    "UInt32Value",
    "BoolValue",
    "StringValue",
    "BytesValue",
]


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, duration_pb2, field_mask_pb2, wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)

    test = descriptor_pb2.FileDescriptorProto(
        name="ces_eval_test/query.proto",
        package="ces_eval_test",
        syntax="proto3",
        dependency=[
            "google/protobuf/timestamp.proto",
            "google/protobuf/duration.proto",
            "google/protobuf/field_mask.proto",
            "google/protobuf/wrappers.proto",
            "google/protobuf/struct.proto",
        ],
    )
    color = test.enum_type.add(name="Color")
    for number, name in enumerate(["COLOR_UNSPECIFIED", "RED", "GREEN"]):
        color.value.add(name=name, number=number)
    inner = test.message_type.add(name="Inner")
    inner.field.add(name="label", number=1, type=_F.TYPE_STRING)
    inner.field.add(name="count", number=2, type=_F.TYPE_INT32)
    inner.field.add(name="child", number=3, type=_F.TYPE_MESSAGE, type_name=".ces_eval_test.Inner")

    everything = test.message_type.add(name="Everything")
    number = 0

    def add(name: str, kind: int, **options: Any) -> None:
        nonlocal number
        number += 1
        everything.field.add(name=name, number=number, type=kind, **options)

    for name, kind in _SCALARS.items():
        add(name, kind)
    add("color", _F.TYPE_ENUM, type_name=".ces_eval_test.Color")
    add("many_ints", _F.TYPE_INT64, label=_F.LABEL_REPEATED)
    add("colors", _F.TYPE_ENUM, label=_F.LABEL_REPEATED, type_name=".ces_eval_test.Color")
    add("blobs", _F.TYPE_BYTES, label=_F.LABEL_REPEATED)
    add("custom", _F.TYPE_STRING, json_name="renamed")
    add("inner", _F.TYPE_MESSAGE, type_name=".ces_eval_test.Inner")
    add("inners", _F.TYPE_MESSAGE, label=_F.LABEL_REPEATED, type_name=".ces_eval_test.Inner")
    for name, wkt in [
        ("ts", "Timestamp"),
        ("dur", "Duration"),
        ("mask", "FieldMask"),
        ("st", "Struct"),
        ("val", "Value"),
    ]:
        add(name, _F.TYPE_MESSAGE, type_name=f".google.protobuf.{wkt}")
    for wrapper in _WRAPPERS:
        add(f"w_{wrapper.lower()}", _F.TYPE_MESSAGE, type_name=f".google.protobuf.{wrapper}")
    everything.oneof_decl.add(name="choice")
    add("alpha", _F.TYPE_STRING, oneof_index=0)
    add("beta", _F.TYPE_MESSAGE, type_name=".ces_eval_test.Inner", oneof_index=0)
    everything.oneof_decl.add(name="_maybe")
    add("maybe", _F.TYPE_INT32, oneof_index=1, proto3_optional=True)
    entry = everything.nested_type.add(name="LabelsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING)
    entry.field.add(name="value", number=2, type=_F.TYPE_STRING)
    add(
        "labels",
        _F.TYPE_MESSAGE,
        label=_F.LABEL_REPEATED,
        type_name=".ces_eval_test.Everything.LabelsEntry",
    )
    pool.AddSerializedFile(test.SerializeToString())

    legacy = descriptor_pb2.FileDescriptorProto(
        name="ces_eval_test/legacy.proto", package="ces_eval_test.legacy", syntax="proto2"
    )
    closed = legacy.enum_type.add(name="Closed")
    closed.value.add(name="CLOSED_ZERO", number=0)
    closed.value.add(name="CLOSED_ONE", number=1)
    old = legacy.message_type.add(name="Legacy")
    old.field.add(
        name="closed",
        number=1,
        type=_F.TYPE_ENUM,
        label=_F.LABEL_OPTIONAL,
        type_name=".ces_eval_test.legacy.Closed",
    )
    pool.AddSerializedFile(legacy.SerializeToString())
    return pool


_POOL = _build_pool()
Everything: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("ces_eval_test.Everything")
)
Legacy: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("ces_eval_test.legacy.Legacy")
)


def _apply(cls: type[Message], params: Sequence[tuple[str, str]], bound: Sequence[str] = ()) -> Any:
    message = cls()
    apply_query(message, params, bound=bound)
    return message


def _error(
    cls: type[Message], params: Sequence[tuple[str, str]], bound: Sequence[str] = ()
) -> QueryError:
    with pytest.raises(QueryError) as caught:
        _apply(cls, params, bound)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        f"invalid query parameter {caught.value.parameter!r}: {caught.value.description}"
    )
    return caught.value


# --- the API's requests -----------------------------------------------------------------------


def test_list_request_by_json_and_proto_names() -> None:
    query = "pageSize=10&page_token=abc&orderBy=name&filter=x%3D1&evaluationRunFilter=r"
    request = _apply(service.ListEvaluationsRequest, parse_qsl(query, keep_blank_values=True))
    expected = {"page_token": "abc"}  # a dict, so that ruff's S106 sees no password argument
    assert request == service.ListEvaluationsRequest(
        page_size=10, order_by="name", filter="x=1", evaluation_run_filter="r", **expected
    )


def test_official_client_query_string_is_accepted() -> None:
    # google-api-core sends camelCase names, strict lower-case booleans and "$alt".
    query = "pageSize=5&lastTenResults=true&%24alt=json%3Benum-encoding%3Dint"
    request = _apply(service.ListEvaluationsRequest, parse_qsl(query, keep_blank_values=True))
    assert request == service.ListEvaluationsRequest(page_size=5, last_ten_results=True)


@pytest.mark.parametrize("name", sorted(SYSTEM_PARAMETERS))
def test_system_parameters_are_skipped(name: str) -> None:
    assert _apply(service.ListEvaluationsRequest, [(name, "anything")]) == (
        service.ListEvaluationsRequest()
    )


def test_system_parameters_include_googles_documented_names() -> None:
    documented = {"$alt", "alt", "key", "access_token", "$fields", "fields", "prettyPrint"}
    documented |= {"$prettyPrint", "quotaUser", "$quotaUser", "callback", "$callback", "$.xgafv"}
    documented |= {"upload_protocol", "uploadType", "oauth_token", "$userProject", "$key"}
    assert documented <= SYSTEM_PARAMETERS
    assert not {"filter", "pageSize", "page_size", "parent", "names"} & SYSTEM_PARAMETERS


def test_unknown_parameter_names_the_parameter() -> None:
    error = _error(service.ListEvaluationsRequest, [("pageSise", "3")])
    assert (error.parameter, error.field_path) == ("pageSise", "pageSise")
    assert error.description == (
        "no field 'pageSise' in google.cloud.ces.v1beta.ListEvaluationsRequest"
    )


def test_names_are_case_sensitive() -> None:
    assert _error(service.ListEvaluationsRequest, [("PageSize", "3")]).field_path == "PageSize"


def test_singular_field_given_twice_is_an_error() -> None:
    error = _error(service.ListEvaluationsRequest, [("pageSize", "1"), ("page_size", "1")])
    assert (error.parameter, error.field_path) == ("page_size", "page_size")
    assert (
        error.description
        == "field 'page_size' is not repeated but given twice (first as 'pageSize')"
    )
    again = _error(service.ListEvaluationsRequest, [("filter", "a"), ("filter", "a")])
    assert again.description == "field 'filter' is not repeated but given twice"


def test_repeated_field_accumulates_in_order() -> None:
    params = [("names", "b"), ("names", "a"), ("names", "b"), ("includeEvaluations", "true")]
    request = _apply(service.ExportEvaluationsRequest, params)
    assert list(request.names) == ["b", "a", "b"]
    assert request.include_evaluations is True


@pytest.mark.parametrize(
    ("value", "number"), [("JSON", 1), ("YAML", 2), ("2", 2), ("0", 0), ("7", 7), ("-1", -1)]
)
def test_enum_by_name_or_number(value: str, number: int) -> None:
    request = _apply(service.ExportEvaluationsRequest, [("exportOptions.exportFormat", value)])
    assert request.export_options.export_format == number
    assert request.HasField("export_options")


@pytest.mark.parametrize("value", ["json", "Json", " JSON", "JSON ", "1.0", "", "2147483648", "x"])
def test_enum_rejects_other_text(value: str) -> None:
    error = _error(service.ExportEvaluationsRequest, [("export_options.export_format", value)])
    assert error.field_path == "export_options.export_format"
    assert error.description == (
        f"invalid value {value!r}: expected one of EXPORT_FORMAT_UNSPECIFIED, JSON, YAML "
        "or an enum number"
    )


def test_closed_enum_refuses_unknown_numbers() -> None:
    assert _apply(Legacy, [("closed", "CLOSED_ONE")]).closed == 1
    assert _apply(Legacy, [("closed", "1")]).closed == 1
    error = _error(Legacy, [("closed", "5")])
    assert "ces_eval_test.legacy.Closed is closed" in error.description


def test_update_mask_from_camel_case_or_snake_case() -> None:
    value = "displayName,description, evaluation_datasets ,evaluationMetricsThresholdOverride.x2Y"
    request = _apply(service.UpdateEvaluationRequest, [("updateMask", value)])
    assert list(request.update_mask.paths) == [
        "display_name",
        "description",
        "evaluation_datasets",
        "evaluation_metrics_threshold_override.x2_y",
    ]


@pytest.mark.parametrize(
    ("value", "paths"), [("*", ["*"]), ("", []), ("Odd", ["Odd"]), ("a.b_c.dE", ["a.b_c.d_e"])]
)
def test_update_mask_special_forms(value: str, paths: list[str]) -> None:
    request = _apply(service.UpdateEvaluationRequest, [("update_mask", value)])
    assert request.HasField("update_mask")  # present even when empty
    assert list(request.update_mask.paths) == paths


@pytest.mark.parametrize("value", ["a,,b", ",", "a,", "a..b", ".a", "a-b", "a b", "1a", "a.*b"])
def test_update_mask_rejects_malformed_paths(value: str) -> None:
    error = _error(service.UpdateEvaluationRequest, [("updateMask", value)])
    assert error.field_path == "update_mask"
    assert "expected comma-separated field paths" in error.description


def test_nested_fields_of_singular_messages() -> None:
    params = [
        ("evaluation.displayName", "Mine"),
        ("evaluation.tags", "a"),
        ("evaluation.tags", "b"),
    ]
    request = _apply(service.UpdateEvaluationRequest, params)
    assert request.evaluation.display_name == "Mine"
    assert list(request.evaluation.tags) == ["a", "b"]


def test_nested_message_is_present_even_for_a_default_value() -> None:
    request = _apply(service.ExportEvaluationsRequest, [("exportOptions.gcsUri", "")])
    assert request.HasField("export_options")


@pytest.mark.parametrize(
    ("bound", "name"),
    [
        (["parent"], "parent"),
        (["evaluation"], "evaluation.displayName"),
        (["evaluation"], "evaluation.tags"),
        (["evaluation.name"], "evaluation.name"),
    ],
)
def test_bound_fields_and_fields_under_them_cannot_be_set(bound: list[str], name: str) -> None:
    cls = service.ListEvaluationsRequest if bound == ["parent"] else service.UpdateEvaluationRequest
    error = _error(cls, [(name, "x")], bound)
    assert error.parameter == name
    assert error.description == (
        f"field {bound[0]!r} is set by the URL path or the request body; "
        "it cannot also be set by a query parameter"
    )


def test_bound_fields_leave_their_siblings_settable() -> None:
    request = _apply(
        service.UpdateEvaluationRequest,
        [("evaluation.displayName", "x"), ("updateMask", "displayName")],
        bound=["evaluation.name"],
    )
    assert request.evaluation.display_name == "x"


@pytest.mark.parametrize(
    ("name", "field_path", "description"),
    [
        (
            "evaluation",
            "evaluation",
            "'evaluation' is a message; set its fields one by one, e.g. evaluation.name",
        ),
        (
            "evaluation.lastTenResults",
            "evaluation.last_ten_results",
            "repeated message fields cannot be set from the query string",
        ),
        (
            "evaluation.golden.turns",
            "evaluation.golden.turns",
            "repeated message fields cannot be set from the query string",
        ),
        (
            "evaluation.createTime.seconds",
            "evaluation.create_time",
            "'evaluation.create_time' is a google.protobuf.Timestamp; give it as one value in its "
            "JSON form",
        ),
        (
            "evaluation.displayName.x",
            "evaluation.display_name.x",
            "field 'display_name' has no fields (it is a scalar)",
        ),
        ("evaluation.", "evaluation.", "an empty field name in google.cloud.ces.v1beta.Evaluation"),
        ("", "", "an empty field name in google.cloud.ces.v1beta.UpdateEvaluationRequest"),
        (
            ".evaluation",
            "",
            "an empty field name in google.cloud.ces.v1beta.UpdateEvaluationRequest",
        ),
    ],
)
def test_names_that_cannot_be_set(name: str, field_path: str, description: str) -> None:
    error = _error(service.UpdateEvaluationRequest, [(name, "1")])
    assert (error.parameter, error.field_path, error.description) == (name, field_path, description)


def test_oneof_members_exclude_each_other() -> None:
    params = [("evaluation.golden.evaluationExpectations", "x"), ("evaluation.scenario.task", "t")]
    error = _error(service.UpdateEvaluationRequest, params)
    assert error.parameter == "evaluation.scenario.task"
    assert error.description == (
        "'evaluation.scenario' and 'evaluation.golden' (from "
        "'evaluation.golden.evaluationExpectations') are members of oneof 'inputs'; "
        "only one may be set"
    )
    same = [("evaluation.scenario.task", "t"), ("evaluation.scenario.maxTurns", "3")]
    assert _apply(service.UpdateEvaluationRequest, same).evaluation.scenario.max_turns == 3


# --- every scalar type ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("i32", "-2147483648", -(2**31)),
        ("i32", "2147483647", 2**31 - 1),
        ("i32", "007", 7),
        ("i32", "-0", 0),
        ("s32", "-5", -5),
        ("sf32", "-2147483648", -(2**31)),
        ("u32", "4294967295", 2**32 - 1),
        ("f32", "0", 0),
        ("i64", "-9223372036854775808", -(2**63)),
        ("i64", "9223372036854775807", 2**63 - 1),
        ("s64", "-9223372036854775808", -(2**63)),
        ("sf64", "9223372036854775807", 2**63 - 1),
        ("u64", "18446744073709551615", 2**64 - 1),
        ("f64", "18446744073709551615", 2**64 - 1),
        ("dbl", "1.5", 1.5),
        ("dbl", "-1e-3", -0.001),
        ("dbl", "1E+300", 1e300),
        ("dbl", ".5", 0.5),
        ("dbl", "5.", 5.0),
        ("dbl", "Infinity", math.inf),
        ("dbl", "-Infinity", -math.inf),
        ("flt", "3.4028234e38", struct.unpack("<f", struct.pack("<f", 3.4028234e38))[0]),
        ("flt", "0.25", 0.25),
        ("flag", "true", True),
        ("flag", "false", False),
        ("flag", "True", True),
        ("flag", "FALSE", False),
        ("text", "", ""),
        ("text", "a b&c=d é 😀", "a b&c=d é 😀"),
        ("blob", "+/8=", b"\xfb\xff"),
        ("blob", "-_8=", b"\xfb\xff"),
        ("blob", "-_8", b"\xfb\xff"),
        ("blob", "aGk", b"hi"),
        ("blob", "aGk=", b"hi"),
        ("blob", "", b""),
        ("color", "GREEN", 2),
        ("renamed", "by JSON name", "by JSON name"),
        ("custom", "by proto name", "by proto name"),
        ("maybe", "0", 0),
    ],
)
def test_scalar_values(name: str, value: str, expected: object) -> None:
    message = _apply(Everything, [(name, value)])
    field = (
        message.DESCRIPTOR.fields_by_name.get(name) or message.DESCRIPTOR.fields_by_name["custom"]
    )
    assert getattr(message, field.name) == expected
    assert type(getattr(message, field.name)) is type(expected)


def test_nan_and_optional_presence() -> None:
    message = _apply(Everything, [("dbl", "NaN"), ("maybe", "0")])
    assert math.isnan(message.dbl)
    assert message.HasField("maybe")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "i32",
            "2147483648",
            "expected an int32: a decimal integer from -2147483648 to 2147483647",
        ),
        ("i32", "-2147483649", "expected an int32"),
        ("i32", "1.0", "expected an int32"),
        ("i32", "1e3", "expected an int32"),
        ("i32", "+1", "expected an int32"),
        ("i32", " 1", "expected an int32"),
        ("i32", "0x10", "expected an int32"),
        ("i32", "١", "expected an int32"),  # a non-ASCII digit
        ("i32", "", "expected an int32"),
        ("i32", "9" * 5000, "expected an int32"),
        ("s32", "2147483648", "expected an sint32"),
        ("sf32", "2147483648", "expected an sfixed32"),
        ("u32", "-1", "expected an uint32: a decimal integer from 0 to 4294967295"),
        ("f32", "4294967296", "expected an fixed32"),
        ("i64", "9223372036854775808", "expected an int64"),
        ("s64", "-9223372036854775809", "expected an sint64"),
        ("sf64", "9223372036854775808", "expected an sfixed64"),
        ("u64", "18446744073709551616", "expected an uint64"),
        ("f64", "-1", "expected an fixed64"),
        (
            "dbl",
            "1e400",
            "expected a double: a decimal number, NaN, Infinity or -Infinity "
            "(this one is out of the double range)",
        ),
        ("dbl", "inf", "expected a double"),
        ("dbl", "nan", "expected a double"),
        ("dbl", "+1", "expected a double"),
        ("dbl", "1_000", "expected a double"),
        ("dbl", " 1", "expected a double"),
        ("dbl", ".", "expected a double"),
        ("dbl", "", "expected a double"),
        (
            "flt",
            "3.5e38",
            "expected a float: a decimal number, NaN, Infinity or -Infinity "
            "(this one is out of the float range)",
        ),
        ("flag", "1", "expected true or false"),
        ("flag", "0", "expected true or false"),
        ("flag", "yes", "expected true or false"),
        ("flag", "", "expected true or false"),
        ("text", "\ud800", "expected text that is valid Unicode"),
        ("blob", "a", "expected base64 (standard or URL-safe alphabet, padding optional)"),
        ("blob", "a===", "expected base64"),
        ("blob", "aGk==", "expected base64"),
        ("blob", "aG=k", "expected base64"),
        ("blob", "aGk!", "expected base64"),
        ("blob", "aG k", "expected base64"),
        ("color", "PURPLE", "expected one of COLOR_UNSPECIFIED, RED, GREEN or an enum number"),
    ],
)
def test_scalar_values_rejected(name: str, value: str, expected: str) -> None:
    error = _error(Everything, [(name, value)])
    assert (error.parameter, error.field_path) == (name, name)
    assert error.description.startswith(f"invalid value {value!r}: {expected}")


def test_repeated_scalars_convert_each_value() -> None:
    params = [("manyInts", "1"), ("many_ints", "-9223372036854775808"), ("colors", "RED")]
    params += [("colors", "2"), ("blobs", "aGk"), ("blobs", "")]
    message = _apply(Everything, params)
    assert list(message.many_ints) == [1, -(2**63)]
    assert list(message.colors) == [1, 2]
    assert list(message.blobs) == [b"hi", b""]
    error = _error(Everything, [("manyInts", "1"), ("manyInts", "x")])
    assert error.description.startswith("invalid value 'x': expected an int64")


def test_nested_and_oneof_in_private_message() -> None:
    message = _apply(Everything, [("inner.child.label", "deep"), ("beta.count", "2")])
    assert message.inner.child.label == "deep"
    assert message.WhichOneof("choice") == "beta"
    error = _error(Everything, [("beta.count", "2"), ("alpha", "a")])
    assert error.description == (
        "'alpha' and 'beta' (from 'beta.count') are members of oneof 'choice'; only one may be set"
    )


def test_maps_and_other_protobuf_messages_are_refused() -> None:
    assert _error(Everything, [("labels", "a")]).description == (
        "map fields cannot be set from the query string"
    )
    assert _error(Everything, [("labels.key", "a")]).description == (
        "map fields cannot be set from the query string"
    )
    assert _error(Everything, [("st", "{}")]).description == (
        "a google.protobuf.Struct cannot be set by a query parameter"
    )
    assert _error(Everything, [("val", "1")]).description == (
        "a google.protobuf.Value cannot be set by a query parameter"
    )
    assert _error(Everything, [("inners.label", "a")]).description == (
        "repeated message fields cannot be set from the query string"
    )


# --- well-known types -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds", "nanos"),
    [
        ("2024-01-02T03:04:05Z", 1704164645, 0),
        ("2024-01-02T03:04:05.678Z", 1704164645, 678000000),
        ("2024-01-02T03:04:05.000001Z", 1704164645, 1000),
        ("2024-01-02T03:04:05.123456789Z", 1704164645, 123456789),
        ("2024-01-02T03:04:05.5+01:00", 1704164645 - 3600, 500000000),
        ("2024-01-02T03:04:05-05:30", 1704164645 + 5 * 3600 + 1800, 0),
        ("2024-01-02t03:04:05z", 1704164645, 0),
        ("1970-01-01T00:00:00Z", 0, 0),
        ("0001-01-01T00:00:00Z", -62135596800, 0),
        ("9999-12-31T23:59:59.999999999Z", 253402300799, 999999999),
    ],
)
def test_timestamp(value: str, seconds: int, nanos: int) -> None:
    message = _apply(Everything, [("ts", value)])
    assert message.HasField("ts")  # even the epoch, whose fields are all zero
    assert (message.ts.seconds, message.ts.nanos) == (seconds, nanos)


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-02T03:04:05",  # no zone
        "2024-01-02 03:04:05Z",
        "2024-01-02T03:04:05+1:00",
        "2024-01-02T03:04:05+01:60",
        "2024-01-02T03:04:05+24:00",
        "2024-01-02T03:04:05.Z",
        "2024-01-02T03:04:05.1234567891Z",
        "2024-02-30T00:00:00Z",
        "2024-13-01T00:00:00Z",
        "2016-12-31T23:59:60Z",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-01:00",
        "2024-01-02",
        "1704164645",
        "",
    ],
)
def test_timestamp_rejected(value: str) -> None:
    error = _error(Everything, [("ts", value)])
    assert error.description.startswith(f"invalid value {value!r}: expected an RFC 3339 timestamp")


@pytest.mark.parametrize(
    ("value", "seconds", "nanos"),
    [
        ("3.5s", 3, 500000000),
        ("-0.25s", 0, -250000000),
        ("0s", 0, 0),
        ("315576000000s", 315576000000, 0),
        ("1.000000001s", 1, 1),
    ],
)
def test_duration(value: str, seconds: int, nanos: int) -> None:
    message = _apply(Everything, [("dur", value)])
    assert message.HasField("dur")
    assert (message.dur.seconds, message.dur.nanos) == (seconds, nanos)


@pytest.mark.parametrize(
    "value", ["3", "3S", "1e3s", ".5s", "+3s", "3.s", "1.0000000001s", "315576000001s", "", "s"]
)
def test_duration_rejected(value: str) -> None:
    error = _error(Everything, [("dur", value)])
    assert error.description.startswith(
        f"invalid value {value!r}: expected a duration in seconds with an 's' suffix"
    )


@pytest.mark.parametrize(
    ("wrapper", "value", "expected"),
    [
        ("DoubleValue", "-2.5", -2.5),
        ("FloatValue", "0.5", 0.5),
        ("Int64Value", "-9223372036854775808", -(2**63)),
        ("UInt64Value", "18446744073709551615", 2**64 - 1),
        ("Int32Value", "0", 0),
        ("UInt32Value", "4294967295", 2**32 - 1),
        ("BoolValue", "false", False),
        ("StringValue", "", ""),
        ("BytesValue", "aGk", b"hi"),
    ],
)
def test_wrappers_take_their_scalar_form(wrapper: str, value: str, expected: object) -> None:
    name = f"w_{wrapper.lower()}"
    message = _apply(Everything, [(name, value)])
    assert message.HasField(name)  # a default value still sets the wrapper
    assert getattr(message, name).value == expected


@pytest.mark.parametrize(
    ("wrapper", "value", "expected"),
    [
        ("Int32Value", "2147483648", "expected an int32"),
        ("UInt64Value", "-1", "expected an uint64"),
        ("BoolValue", "1", "expected true or false"),
        ("FloatValue", "1e39", "expected a float"),
        ("BytesValue", "a", "expected base64"),
    ],
)
def test_wrappers_rejected(wrapper: str, value: str, expected: str) -> None:
    error = _error(Everything, [(f"w_{wrapper.lower()}", value)])
    assert error.description.startswith(f"invalid value {value!r}: {expected}")


def test_well_known_values_given_twice_are_an_error() -> None:
    error = _error(Everything, [("ts", "1970-01-01T00:00:00Z"), ("ts", "1970-01-01T00:00:00Z")])
    assert error.description == "field 'ts' is not repeated but given twice"


# --- properties -------------------------------------------------------------------------------


@given(number=st.integers(-(2**63), 2**63 - 1))
def test_int64_round_trips(number: int) -> None:
    assert _apply(Everything, [("i64", str(number))]).i64 == number


@given(number=st.integers(2**31, 2**70) | st.integers(-(2**70), -(2**31) - 1))
def test_int32_outside_its_range_is_refused(number: int) -> None:
    with pytest.raises(QueryError):
        _apply(Everything, [("i32", str(number))])


@given(number=st.floats(allow_nan=False))
def test_double_round_trips(number: float) -> None:
    text = {math.inf: "Infinity", -math.inf: "-Infinity"}.get(number, repr(number))
    assert _apply(Everything, [("dbl", text)]).dbl == number


@given(data=st.binary(), url_safe=st.booleans(), padded=st.booleans())
def test_bytes_round_trip_in_every_base64_form(data: bytes, url_safe: bool, padded: bool) -> None:
    text = (base64.urlsafe_b64encode if url_safe else base64.b64encode)(data).decode()
    if not padded:
        text = text.rstrip("=")
    assert _apply(Everything, [("blob", text)]).blob == data


_NAMES = sorted(
    {
        *SYSTEM_PARAMETERS,
        *(f.name for f in Everything.DESCRIPTOR.fields),
        *(f.json_name for f in Everything.DESCRIPTOR.fields),
        "inner.label",
        "inner.child.count",
        "beta.label",
        "pageSize",
        "page_size",
        "filter",
        "names",
        "exportOptions.exportFormat",
        "updateMask",
        "evaluation.displayName",
        "evaluation.scenario.maxTurns",
        "evaluation.createTime",
    }
)
_VALUES = st.one_of(
    st.text(),
    st.sampled_from(["", "0", "-1", "1.5", "true", "NaN", "aGk", "RED", "JSON", "3s", "*"]),
    st.integers().map(str),
    st.just("2024-01-02T03:04:05Z"),
)
_PARAMS = st.lists(st.tuples(st.one_of(st.sampled_from(_NAMES), st.text()), _VALUES), max_size=8)
_MESSAGES = st.sampled_from(
    [
        Everything,
        service.ListEvaluationsRequest,
        service.UpdateEvaluationRequest,
        service.ExportEvaluationsRequest,
    ]
)


@given(cls=_MESSAGES, params=_PARAMS, bound=st.lists(st.sampled_from(_NAMES), max_size=2))
def test_arbitrary_parameters_raise_only_query_errors(
    cls: type[Message], params: list[tuple[str, str]], bound: list[str]
) -> None:
    try:
        _apply(cls, params, bound)
    except QueryError as error:
        assert error.parameter in {name for name, _ in params}


@given(cls=_MESSAGES, query=st.text())
def test_arbitrary_query_strings_raise_only_query_errors(cls: type[Message], query: str) -> None:
    try:
        _apply(cls, parse_qsl(query, keep_blank_values=True))
    except QueryError as error:
        assert error.description
