"""proto3-JSON JSON Schemas from descriptors (src/ces_eval/jsonschema.py).

Field kinds are checked on a test-only proto built in this module (every scalar type, maps with
string/int/bool keys, every well-known type, recursion, oneofs, proto3 ``optional``, field
behaviours), the contract on the real messages: samples filled by ``tests/support/samples.py``
and printed by ``json_format`` must validate, broken documents must not. Every value a schema
accepts in the table below is also fed to ``json_format``'s parser, so a schema can never accept
what the service's parser rejects.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest
from google.api import field_behavior_pb2, resource_pb2
from google.protobuf import (
    any_pb2,
    descriptor,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import Message
from jsonschema import Draft202012Validator

from ces_eval.contract.checks import required_violations
from ces_eval.contract.comments import comments
from ces_eval.contract.jsonschema import (
    DIALECT,
    SchemaBuilder,
    View,
    document,
    iter_refs,
    message_schema,
)
from ces_eval.contract.schema import services
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    common_pb2,
    evaluation_pb2,
    evaluation_service_pb2,
)
from tests.support.samples import populate

# --- a test-only proto with every kind of field ------------------------------------------------

PKG = "ces_eval.test.jsonschema"
_T = descriptor_pb2.FieldDescriptorProto
REQ, OUT = field_behavior_pb2.REQUIRED, field_behavior_pb2.OUTPUT_ONLY

_SCALARS = {
    "i32": _T.TYPE_INT32,
    "s32": _T.TYPE_SINT32,
    "sf32": _T.TYPE_SFIXED32,
    "u32": _T.TYPE_UINT32,
    "f32": _T.TYPE_FIXED32,
    "i64": _T.TYPE_INT64,
    "s64": _T.TYPE_SINT64,
    "sf64": _T.TYPE_SFIXED64,
    "u64": _T.TYPE_UINT64,
    "f64": _T.TYPE_FIXED64,
    "flt": _T.TYPE_FLOAT,
    "dbl": _T.TYPE_DOUBLE,
    "flag": _T.TYPE_BOOL,
    "text": _T.TYPE_STRING,
    "blob": _T.TYPE_BYTES,
}
_WELL_KNOWN = {
    "at": ".google.protobuf.Timestamp",
    "took": ".google.protobuf.Duration",
    "mask": ".google.protobuf.FieldMask",
    "data": ".google.protobuf.Struct",
    "anything": ".google.protobuf.Value",
    "list": ".google.protobuf.ListValue",
    "packed": ".google.protobuf.Any",
    "big": ".google.protobuf.Int64Value",
    "maybe": ".google.protobuf.StringValue",
    "raw": ".google.protobuf.BytesValue",
    "ratio": ".google.protobuf.DoubleValue",
    "nothing": ".google.protobuf.Empty",
}


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    field_type: int,
    *,
    type_name: str = "",
    repeated: bool = False,
    behaviors: tuple[int, ...] = (),
    **extra: Any,
) -> descriptor_pb2.FieldDescriptorProto:
    field = message.field.add(
        name=name,
        number=len(message.field) + 1,
        type=field_type,  # type: ignore[arg-type]
        label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL,
        **extra,
    )
    if type_name:
        field.type_name = type_name
    field.options.Extensions[field_behavior_pb2.field_behavior].extend(behaviors)
    return field


def _map(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    key: int,
    value: int,
    value_type: str = "",
    behaviors: tuple[int, ...] = (),
) -> None:
    entry_name = "".join(part.title() for part in name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", key)
    _field(entry, "value", value, type_name=value_type)
    _field(
        message,
        name,
        _T.TYPE_MESSAGE,
        type_name=f".{PKG}.{message.name}.{entry_name}",
        repeated=True,
        behaviors=behaviors,
    )


def _test_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="ces_eval_test_jsonschema.proto",
        package=PKG,
        syntax="proto3",
        dependency=[
            "google/api/field_behavior.proto",
            "google/api/resource.proto",
            *(
                module.DESCRIPTOR.name
                for module in (
                    any_pb2,
                    duration_pb2,
                    empty_pb2,
                    field_mask_pb2,
                    struct_pb2,
                    timestamp_pb2,
                    wrappers_pb2,
                )
            ),
        ],
    )
    color = file.enum_type.add(name="Color")
    for number, name in enumerate(("COLOR_UNSPECIFIED", "RED", "GREEN")):
        color.value.add(name=name, number=number)
    node_type, color_type = f".{PKG}.Node", f".{PKG}.Color"

    node = file.message_type.add(name="Node")
    _field(node, "label", _T.TYPE_STRING)
    _field(node, "children", _T.TYPE_MESSAGE, type_name=node_type, repeated=True)
    _field(node, "parent", _T.TYPE_MESSAGE, type_name=node_type)

    kinds = file.message_type.add(name="Kinds")
    for name, field_type in _SCALARS.items():
        _field(kinds, name, field_type)
    _field(kinds, "color", _T.TYPE_ENUM, type_name=color_type)
    _field(kinds, "many_i64", _T.TYPE_INT64, repeated=True)
    _field(kinds, "colors", _T.TYPE_ENUM, type_name=color_type, repeated=True)
    _map(kinds, "by_name", _T.TYPE_STRING, _T.TYPE_INT32)
    _map(kinds, "by_id", _T.TYPE_INT64, _T.TYPE_STRING)
    _map(kinds, "by_flag", _T.TYPE_BOOL, _T.TYPE_MESSAGE, node_type)
    for name, type_name in _WELL_KNOWN.items():
        _field(kinds, name, _T.TYPE_MESSAGE, type_name=type_name)
    _field(kinds, "node", _T.TYPE_MESSAGE, type_name=node_type)
    _field(kinds, "nodes", _T.TYPE_MESSAGE, type_name=node_type, repeated=True)
    kinds.oneof_decl.add(name="choice")
    _field(kinds, "left", _T.TYPE_STRING, oneof_index=0)
    _field(kinds, "right", _T.TYPE_MESSAGE, type_name=node_type, oneof_index=0)
    _field(kinds, "middle", _T.TYPE_INT64, oneof_index=0)
    kinds.oneof_decl.add(name="_maybe_count")
    _field(kinds, "maybe_count", _T.TYPE_INT32, oneof_index=1, proto3_optional=True)
    _field(kinds, "custom", _T.TYPE_STRING, json_name="renamed")
    _field(kinds, "snake_case_name", _T.TYPE_STRING)

    behaviors = file.message_type.add(name="Behaviors")
    behaviors.options.Extensions[resource_pb2.resource].type = "test.example.com/Behaviors"
    _field(behaviors, "must", _T.TYPE_STRING, behaviors=(REQ,))
    _field(behaviors, "shown", _T.TYPE_STRING, behaviors=(OUT,))
    _field(behaviors, "tags", _T.TYPE_STRING, repeated=True, behaviors=(REQ,))
    _field(behaviors, "hue", _T.TYPE_ENUM, type_name=color_type, behaviors=(REQ,))
    _field(behaviors, "node", _T.TYPE_MESSAGE, type_name=node_type, behaviors=(REQ,))
    _field(behaviors, "child", _T.TYPE_MESSAGE, type_name=f".{PKG}.Behaviors", behaviors=(OUT,))
    behaviors.oneof_decl.add(name="pick")
    _field(behaviors, "a", _T.TYPE_STRING, oneof_index=0, behaviors=(REQ,))
    _field(behaviors, "b", _T.TYPE_STRING, oneof_index=0)
    _map(behaviors, "labels", _T.TYPE_STRING, _T.TYPE_STRING, behaviors=(REQ,))
    behaviors.oneof_decl.add(name="_count")
    _field(behaviors, "count", _T.TYPE_INT32, oneof_index=1, proto3_optional=True, behaviors=(REQ,))
    old = _field(behaviors, "old", _T.TYPE_STRING)
    old.options.deprecated = True

    plain = file.message_type.add(name="Plain")  # not a resource
    _field(plain, "must", _T.TYPE_STRING, behaviors=(REQ,))

    update = file.message_type.add(name="UpdateBehaviorsRequest")
    _field(update, "behaviors", _T.TYPE_MESSAGE, type_name=f".{PKG}.Behaviors", behaviors=(REQ,))
    _field(update, "update_mask", _T.TYPE_MESSAGE, type_name=".google.protobuf.FieldMask")
    _field(update, "other", _T.TYPE_MESSAGE, type_name=f".{PKG}.Plain")
    return file


def _pool() -> descriptor_pool.DescriptorPool:
    # The default pool, so that well-known fields get the generated classes samples.py expects.
    pool = descriptor_pool.Default()
    pool.AddSerializedFile(_test_file().SerializeToString())
    return pool


POOL = _pool()
KINDS = POOL.FindMessageTypeByName(f"{PKG}.Kinds")
NODE = POOL.FindMessageTypeByName(f"{PKG}.Node")
BEHAVIORS = POOL.FindMessageTypeByName(f"{PKG}.Behaviors")
UPDATE = POOL.FindMessageTypeByName(f"{PKG}.UpdateBehaviorsRequest")


def _new(message: descriptor.Descriptor) -> Message:
    return message_factory.GetMessageClass(message)()


@cache
def _validator(
    message: descriptor.Descriptor, *, output: bool, enums_as: Any = "names"
) -> Draft202012Validator:
    schema = document(message, output=output, enums_as=enums_as)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _parses(message: descriptor.Descriptor, doc: dict[str, Any]) -> bool:
    try:
        json_format.ParseDict(doc, _new(message), descriptor_pool=POOL)
    except json_format.ParseError:
        return False
    return True


def _errors(validator: Draft202012Validator, doc: object) -> list[str]:
    return [error.message for error in validator.iter_errors(doc)]


# --- field kinds: (field JSON name, accepted on output, rejected on output, accepted on input
# only, rejected on input too). Output values are also accepted on input.
INT32_MAX, INT64_BIG = 2**31 - 1, str(-(2**53) - 3)
KIND_CASES = [
    (
        "i32",
        [0, -5, INT32_MAX, -(2**31), 3.0],
        ["5", 2**31, 1.5, True, None],
        ["5", "-12"],
        ["x", 2**31, "1.5", 1.5],
    ),
    ("s32", [-(2**31), INT32_MAX], [-(2**31) - 1, 2**31], ["-7"], [-(2**31) - 1, 2**31]),
    ("sf32", [7, -(2**31)], ["7", 2**31], ["7"], ["7a", 2**31]),
    ("u32", [0, 2**32 - 1], [-1, 2**32], ["4294967295"], [-1, "-1", 2**32]),
    ("f32", [3], [-3], ["3"], ["-3"]),
    (
        "i64",
        [INT64_BIG, "0", "9223372036854775807"],
        [5, "5.5", "x", "", "1e3"],
        [5, -(2**63)],
        ["5.5", 2**63, 1.5, "x"],
    ),
    ("s64", ["-1"], [-1], [-1], ["--1"]),
    ("sf64", ["12"], [12], [12], ["1 2"]),
    ("u64", ["18446744073709551615"], ["-1", 1], [2**64 - 1], [-1, "-1", 2**64]),
    ("f64", ["1"], [1], [1], ["-1"]),
    (
        "flt",
        [1.5, 0, -2, "NaN", "Infinity", "-Infinity"],
        ["1.5", "nan", "inf", True],
        ["1.5", "-2e3", ".5"],
        ["nan", "1,5", "abc"],
    ),
    ("dbl", [1e300, "NaN"], ["1e3", [1]], ["1e3", "-0.25"], ["Inf"]),
    ("flag", [True, False], ["true", 1, 0], [], ["true", 1]),
    ("text", ["", "ünï €", "a\nb"], [1, None, ["a"]], [], [1, False]),
    (
        "blob",
        ["+/8AAb8=", "", "YQ=="],
        ["-_8AAb8", "YQ", "!!!!", 1],
        ["-_8AAb8", "YQ", "-_8AAb8="],
        ["!!!!", "a b", 1],
    ),
    ("color", ["RED", "COLOR_UNSPECIFIED"], [1, "BLUE", "red"], [1, 0, 2], ["BLUE", 7, "red"]),
    ("manyI64", [[], ["1", INT64_BIG]], [[1], "1", ["x"]], [[1, "2"]], [["x"], "1"]),
    ("colors", [["RED", "GREEN"]], [[1], "RED"], [[1, "GREEN"]], [["BLUE"]]),
    ("byName", [{}, {"a": 1, "ü": -2}], [{"a": "1"}, []], [{"a": "1"}], [{"a": "x"}]),
    ("byId", [{"12": "x", "-3": "y"}], [{"x": "y"}, {"1": 2}], [], [{"x": "y"}, {"1.5": "y"}]),
    (
        "byFlag",
        [{"true": {}, "false": {"label": "x"}}],
        [{"yes": {}}, {"true": {"nope": 1}}],
        [],
        [{"1": {}}],
    ),
    (
        "at",
        ["2024-05-01T10:00:00Z", "1970-01-01T00:00:00.123Z", "2024-05-01T10:00:00.123456789Z"],
        ["2024-05-01T10:00:00+02:00", "2024-05-01T10:00:00.1Z", "2024-05-01", 1714557600],
        ["2024-05-01T10:00:00+02:00", "2024-05-01T10:00:00.1Z", "2024-05-01T10:00:00.12-01:30"],
        ["2024-05-01 10:00:00Z", "2024-05-01", 0],
    ),
    (
        "took",
        ["3s", "-0.500s", "1.000000001s", "0s"],
        ["3", "1.5 s", "1.0000000001s", 3],
        [],
        ["3", 3],
    ),
    ("mask", ["displayName,golden.turns", ""], [["displayName"], 1], [], [1]),
    ("data", [{}, {"a": [1, None, {"b": "c"}], "n": None}], [[], "x", 1], [], [[]]),
    ("anything", [None, 1, "x", [1, {"a": None}], {"k": True}, False], [], [], []),
    ("list", [[], [1, "two", None, [False]]], [{}, "x"], [], [{}]),
    (
        "packed",
        [{"@type": "type.googleapis.com/google.protobuf.Duration", "value": "1s"}],
        [{}, {"value": "1s"}, "x"],
        [],
        [{"value": "1s"}],
    ),
    ("big", ["5", None], [5], [5], ["x"]),
    ("maybe", ["x", "", None], [1], [], [1]),
    ("raw", ["YQ==", None], ["YQ"], ["YQ"], ["!!"]),
    ("ratio", [0.5, "NaN", None], ["0.5"], ["0.5"], ["half"]),
    ("nothing", [{}], [{"a": 1}, []], [], [{"a": 1}]),
    (
        "node",
        [{}, {"label": "x", "children": [{"children": [{}]}], "parent": {}}],
        [{"nope": 1}, {"children": {}}, "x"],
        [],
        [{"nope": 1}],
    ),
    ("nodes", [[{}, {"label": "y"}]], [{}, [1]], [], [[1]]),
    ("maybeCount", [0, 5], ["0"], ["0"], ["x"]),
    ("renamed", ["x"], [1], [], [1]),
    ("snakeCaseName", ["x"], [1], [], [1]),
]


@pytest.mark.parametrize(
    ("name", "output_ok", "output_bad", "input_only_ok", "input_bad"),
    [pytest.param(*case, id=case[0]) for case in KIND_CASES],
)
def test_field_kind(
    name: str,
    output_ok: list[Any],
    output_bad: list[Any],
    input_only_ok: list[Any],
    input_bad: list[Any],
) -> None:
    output, input_ = _validator(KINDS, output=True), _validator(KINDS, output=False)
    for value in output_ok:
        assert _errors(output, {name: value}) == [], value
    for value in output_bad:
        assert _errors(output, {name: value}), value
    for value in [*output_ok, *input_only_ok]:
        doc = {name: value}
        assert _errors(input_, doc) == [], value
        assert _parses(KINDS, doc), value  # what a schema accepts, the parser accepts
    for value in input_bad:
        assert _errors(input_, {name: value}), value
    for value in input_only_ok:  # the two views really differ where the table says so
        assert _errors(output, {name: value}), value


def test_every_field_of_the_test_proto_is_in_the_table() -> None:
    covered = {case[0] for case in KIND_CASES} | {"left", "right", "middle"}  # oneof: own test
    assert covered == {f.json_name for f in KINDS.fields}


@pytest.mark.parametrize(
    ("field", "view", "expected"),
    [
        ("i32", View.OUTPUT, {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}),
        ("u32", View.OUTPUT, {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}),
        ("i64", View.OUTPUT, {"type": "string", "pattern": "^-?[0-9]+$"}),
        ("u64", View.OUTPUT, {"type": "string", "pattern": "^[0-9]+$"}),
        (
            "i64",
            View.INPUT,
            {
                "type": ["string", "integer"],
                "pattern": "^-?[0-9]+$",
                "minimum": -(2**63),
                "maximum": 2**63 - 1,
            },
        ),
        (
            "i32",
            View.INPUT,
            {
                "type": ["integer", "string"],
                "pattern": "^-?[0-9]+$",
                "minimum": -(2**31),
                "maximum": 2**31 - 1,
            },
        ),
        ("dbl", View.OUTPUT, {"type": ["number", "string"], "pattern": "^(NaN|-?Infinity)$"}),
        ("flag", View.OUTPUT, {"type": "boolean"}),
        ("text", View.INPUT, {"type": "string"}),
        ("color", View.OUTPUT, {"type": "string", "enum": ["COLOR_UNSPECIFIED", "RED", "GREEN"]}),
        (
            "color",
            View.INPUT,
            {"type": ["string", "integer"], "enum": ["COLOR_UNSPECIFIED", "RED", "GREEN", 0, 1, 2]},
        ),
        ("took", View.OUTPUT, {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]{1,9})?s$"}),
        ("mask", View.OUTPUT, {"type": "string"}),
        ("data", View.OUTPUT, {"type": "object"}),
        ("anything", View.OUTPUT, {}),
        ("list", View.OUTPUT, {"type": "array"}),
        (
            "nothing",
            View.OUTPUT,
            {"type": "object", "properties": {}, "additionalProperties": False},
        ),
        ("big", View.OUTPUT, {"type": ["string", "null"], "pattern": "^-?[0-9]+$"}),
        ("maybe", View.INPUT, {"type": ["string", "null"]}),
        ("node", View.OUTPUT, {"$ref": f"#/$defs/{PKG}.Node"}),
        ("nodes", View.OUTPUT, {"type": "array", "items": {"$ref": f"#/$defs/{PKG}.Node"}}),
        (
            "manyI64",
            View.OUTPUT,
            {"type": "array", "items": {"type": "string", "pattern": "^-?[0-9]+$"}},
        ),
        (
            "byId",
            View.OUTPUT,
            {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "propertyNames": {"pattern": "^-?[0-9]+$"},
            },
        ),
        (
            "byFlag",
            View.OUTPUT,
            {
                "type": "object",
                "additionalProperties": {"$ref": f"#/$defs/{PKG}.Node"},
                "propertyNames": {"enum": ["true", "false"]},
            },
        ),
    ],
)
def test_field_schema_shape(field: str, view: View, expected: dict[str, Any]) -> None:
    root, _ = message_schema(KINDS, output=view is View.OUTPUT)
    schema = dict(root["properties"][field])
    schema.pop("description", None)  # the enum's value list
    assert schema == expected


def test_well_known_shapes_that_carry_keywords() -> None:
    root, _ = message_schema(KINDS, output=True)
    props = root["properties"]
    assert props["blob"]["contentEncoding"] == "base64"
    assert props["at"]["format"] == "date-time"
    assert props["packed"]["required"] == ["@type"]
    assert "additionalProperties" not in props["packed"]  # the packed message's fields
    assert props["anything"] == {}


def test_properties_use_json_names() -> None:
    root, _ = message_schema(KINDS, output=True)
    assert "snakeCaseName" in root["properties"]
    assert "renamed" in root["properties"]
    assert "snake_case_name" not in root["properties"]
    assert "custom" not in root["properties"]
    assert list(root["properties"]) == [f.json_name for f in KINDS.fields]
    validator = _validator(KINDS, output=False)
    assert _errors(validator, {"snake_case_name": "x"})  # proto names: deliberately not listed


def test_unknown_property_rejected_at_every_depth() -> None:
    for output in (True, False):
        validator = _validator(KINDS, output=output)
        assert _errors(validator, {"bogus": 1})
        assert _errors(validator, {"node": {"children": [{"parent": {"bogus": 1}}]}})
        assert _errors(validator, {"byFlag": {"true": {"bogus": 1}}})
        assert _errors(validator, {"node": {"children": [{"parent": {"label": "ok"}}]}}) == []


def test_oneof_members_are_mutually_exclusive() -> None:
    for output in (True, False):
        validator = _validator(KINDS, output=output)
        for alone in ({}, {"left": "x"}, {"right": {}}, {"middle": "5"}):
            assert _errors(validator, alone) == [], alone
        for pair in (
            {"left": "x", "right": {}},
            {"left": "x", "middle": "5"},
            {"right": {}, "middle": "5"},
            {"left": "x", "right": {}, "middle": "5"},
        ):
            assert _errors(validator, pair), pair
            assert not _parses(KINDS, pair)  # the parser agrees
    root, _ = message_schema(KINDS, output=True)
    assert len(root["allOf"]) == 1  # proto3 `optional` (synthetic oneof) adds no constraint
    assert "excludes `right`, `middle`" in root["properties"]["left"]["description"]
    assert "Oneof `choice`: at most one of `left`, `right`, `middle`." in root["description"]
    assert "_maybe_count" not in root["description"]


def test_recursion_through_defs() -> None:
    _, defs = message_schema(KINDS, output=True)
    node = defs[f"{PKG}.Node"]
    assert node["properties"]["children"]["items"] == {"$ref": f"#/$defs/{PKG}.Node"}
    assert node["properties"]["parent"]["$ref"] == f"#/$defs/{PKG}.Node"
    deep: dict[str, Any] = {"label": "leaf"}
    for depth in range(30):
        deep = {"label": str(depth), "children": [deep], "parent": {"label": "p"}}
    validator = _validator(KINDS, output=True)
    assert _errors(validator, {"node": deep}) == []
    broken = copy.deepcopy(deep)
    cursor = broken
    for _ in range(20):
        cursor = cursor["children"][0]
    cursor["label"] = 5
    assert _errors(validator, {"node": broken})


def test_refs_resolve_and_prefix_is_used() -> None:
    for message in (KINDS, evaluation_pb2.Evaluation.DESCRIPTOR):
        for output in (True, False):
            root, defs = message_schema(message, output=output, ref_prefix="#/components/x/")
            refs = list(iter_refs([root, defs]))
            assert refs
            for ref in refs:
                assert ref.startswith("#/components/x/")
                assert ref.removeprefix("#/components/x/") in defs


def test_document_is_a_valid_2020_12_schema() -> None:
    schema = document(evaluation_pb2.Evaluation.DESCRIPTOR, output=True)
    assert schema["$schema"] == DIALECT == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"


# --- field behaviours ----------------------------------------------------------------------------

VALID_BEHAVIORS: dict[str, Any] = {
    "must": "x",
    "tags": ["t"],
    "hue": "RED",
    "node": {},
    "a": "y",
    "labels": {"k": "v"},
    "count": 0,
}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID_BEHAVIORS.items() if k != key}


BEHAVIOR_CASES = [
    pytest.param(VALID_BEHAVIORS, True, id="complete"),
    pytest.param(
        {**VALID_BEHAVIORS, "shown": "ignored", "child": {}}, True, id="output-only-given"
    ),
    pytest.param({**_without("a"), "b": "z"}, True, id="other-oneof-member"),
    pytest.param({**VALID_BEHAVIORS, "hue": 2}, True, id="enum-number"),
    pytest.param(_without("must"), False, id="missing-string"),
    pytest.param({**VALID_BEHAVIORS, "must": ""}, False, id="empty-string"),
    pytest.param({**VALID_BEHAVIORS, "tags": []}, False, id="empty-repeated"),
    pytest.param({**VALID_BEHAVIORS, "hue": "COLOR_UNSPECIFIED"}, False, id="zero-enum-name"),
    pytest.param({**VALID_BEHAVIORS, "hue": 0}, False, id="zero-enum-number"),
    pytest.param(_without("node"), False, id="missing-message"),
    pytest.param({**VALID_BEHAVIORS, "labels": {}}, False, id="empty-map"),
    pytest.param(_without("a"), False, id="required-oneof-unset"),
    pytest.param(_without("count"), False, id="missing-optional-scalar"),
]


@pytest.mark.parametrize(("doc", "valid"), BEHAVIOR_CASES)
def test_required_on_input_matches_the_service(doc: dict[str, Any], valid: bool) -> None:
    validator = _validator(BEHAVIORS, output=False)
    assert (_errors(validator, doc) == []) is valid
    message = json_format.ParseDict(doc, _new(BEHAVIORS), descriptor_pool=POOL)
    assert (required_violations(message, "behaviors") == []) is valid  # core enforces the same
    output = _validator(BEHAVIORS, output=True, enums_as="names_or_numbers")
    assert _errors(output, doc) == []  # output requires nothing


def test_required_and_read_only_keywords() -> None:
    root, defs = message_schema(BEHAVIORS, output=False)
    assert root["required"] == ["must", "tags", "hue", "node", "labels", "count"]
    assert {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]} in root["allOf"]
    assert root["properties"]["shown"]["readOnly"] is True
    assert root["properties"]["child"]["readOnly"] is True
    assert root["properties"]["old"]["deprecated"] is True
    # An OUTPUT_ONLY sub-tree is ignored on input, so nothing inside it is required.
    child = defs[root["properties"]["child"]["$ref"].removeprefix("#/$defs/")]
    assert "required" not in child
    assert not any("anyOf" in c for c in child.get("allOf", []))
    output, _ = message_schema(BEHAVIORS, output=True)
    assert "required" not in output
    assert output["properties"]["shown"]["readOnly"] is True


def test_update_request_takes_a_partial_resource() -> None:
    validator = _validator(UPDATE, output=False)
    assert _errors(validator, {"behaviors": {"old": "x"}, "updateMask": "old"}) == []
    assert _errors(validator, {"updateMask": "old"})  # the resource itself is required
    assert _errors(validator, {"behaviors": {"bogus": 1}})
    # Only the resource beside update_mask is partial; another message field is not.
    assert _errors(validator, {"behaviors": {}, "other": {}})
    assert _errors(validator, {"behaviors": {}, "other": {"must": "x"}}) == []
    root, _ = message_schema(UPDATE, output=False)
    assert root["properties"]["behaviors"]["$ref"] == f"#/$defs/{PKG}.Behaviors-Partial"
    assert root["properties"]["other"]["$ref"] == f"#/$defs/{PKG}.Plain-Input"


def test_printed_samples_validate() -> None:
    for variant in range(4):
        message = populate(_new(KINDS), variant)
        printed = json_format.MessageToDict(message, descriptor_pool=POOL)
        assert _errors(_validator(KINDS, output=True), printed) == []
        assert _errors(_validator(KINDS, output=False), printed) == []


# --- the contract's messages ---------------------------------------------------------------------

RESPONSES = [
    evaluation_pb2.Evaluation,
    evaluation_pb2.EvaluationResult,
    evaluation_service_pb2.ListEvaluationsResponse,
    evaluation_service_pb2.ListEvaluationResultsResponse,
]


@pytest.mark.parametrize("variant", range(4))
@pytest.mark.parametrize("message_class", RESPONSES, ids=lambda c: c.DESCRIPTOR.name)
def test_contract_samples_validate(message_class: type[Message], variant: int) -> None:
    message = populate(message_class(), variant)
    descriptor_ = message_class.DESCRIPTOR
    by_name = json_format.MessageToDict(message)
    by_number = json_format.MessageToDict(message, use_integers_for_enums=True)
    assert _errors(_validator(descriptor_, output=True), by_name) == []
    # Enums as numbers ($alt=json;enum-encoding=int) need the names_or_numbers output form.
    assert _errors(_validator(descriptor_, output=True), by_number)
    numbers = _validator(descriptor_, output=True, enums_as="names_or_numbers")
    assert _errors(numbers, by_number) == []
    assert _errors(numbers, by_name) == []
    # Every printed form is an accepted input form (the partial view: input forms, no
    # `required`, which samples cut off at MAX_DEPTH could not meet deep down).
    builder = SchemaBuilder()
    partial = {**builder.root(descriptor_, View.PARTIAL), "$defs": builder.defs}
    assert _errors(Draft202012Validator(partial), by_name) == []
    assert _errors(Draft202012Validator(partial), by_number) == []


@pytest.mark.parametrize("variant", range(4))
@pytest.mark.parametrize(
    ("request_class", "field", "resource_class"),
    [
        pytest.param(
            evaluation_service_pb2.CreateEvaluationRequest,
            "evaluation",
            evaluation_pb2.Evaluation,
            id="create",
        ),
        pytest.param(
            evaluation_service_pb2.UpdateEvaluationRequest,
            "evaluation",
            evaluation_pb2.Evaluation,
            id="update",
        ),
        pytest.param(
            emulator_service_pb2.CreateEvaluationResultRequest,
            "evaluation_result",
            evaluation_pb2.EvaluationResult,
            id="create-result",
        ),
        pytest.param(evaluation_service_pb2.ExportEvaluationsRequest, "", None, id="export"),
    ],
)
def test_request_samples_validate_as_input(
    request_class: type[Message], field: str, resource_class: type[Message] | None, variant: int
) -> None:
    request = populate(request_class(), variant)
    if resource_class is not None:  # a whole resource, not one cut off a level earlier
        getattr(request, field).CopyFrom(populate(resource_class(), variant))
    validator = _validator(request_class.DESCRIPTOR, output=False)
    for printed in (
        json_format.MessageToDict(request),
        json_format.MessageToDict(request, use_integers_for_enums=True),
    ):
        assert _errors(validator, printed) == []


def _evaluation() -> dict[str, Any]:
    return json_format.MessageToDict(populate(evaluation_pb2.Evaluation(), 0))


def _golden_step(doc: dict[str, Any]) -> dict[str, Any]:
    step: dict[str, Any] = doc["golden"]["turns"][0]["steps"][0]
    return step


@pytest.mark.parametrize("output", [True, False], ids=["output", "input"])
def test_contract_rejections(output: bool) -> None:
    validator = _validator(evaluation_pb2.Evaluation.DESCRIPTOR, output=output)
    good = _evaluation()
    assert "golden" in good  # variant 0 picks the golden member of `inputs`
    assert _errors(validator, good) == []

    unknown = _evaluation()
    unknown["colour"] = "red"
    assert _errors(validator, unknown)

    nested_unknown = _evaluation()
    _golden_step(nested_unknown)["bogus"] = True
    assert _errors(validator, nested_unknown)

    wrong_type = _evaluation()
    wrong_type["displayName"] = 5
    assert _errors(validator, wrong_type)

    wrong_container = _evaluation()
    wrong_container["golden"]["turns"] = {"steps": []}
    assert _errors(validator, wrong_container)

    two_inputs = _evaluation()
    two_inputs["scenario"] = json_format.MessageToDict(
        populate(evaluation_pb2.Evaluation.Scenario(), 0)
    )
    assert _errors(validator, two_inputs)

    two_steps = _evaluation()
    two_steps["golden"]["turns"][0]["steps"][0] = {"userInput": {}, "agentTransfer": {}}
    assert _errors(validator, two_steps)

    bad_time = _evaluation()
    bad_time["createTime"] = "yesterday"
    assert _errors(validator, bad_time)


def test_int64_is_a_string_on_output_and_either_on_input() -> None:
    response = emulator_service_pb2.ResetProjectResponse.DESCRIPTOR
    output, input_ = _validator(response, output=True), _validator(response, output=False)
    assert _errors(output, {"deletedEvaluations": "5"}) == []
    assert _errors(output, {"deletedEvaluations": 5})
    assert _errors(input_, {"deletedEvaluations": 5}) == []
    assert _errors(input_, {"deletedEvaluations": "five"})


def test_required_fields_of_the_contract() -> None:
    create = _validator(evaluation_service_pb2.CreateEvaluationRequest.DESCRIPTOR, output=False)
    parent = "projects/p/locations/l/apps/a"
    assert _errors(create, {"parent": parent, "evaluation": {"displayName": "d"}}) == []
    assert _errors(create, {"parent": parent, "evaluation": {"description": "no name"}})
    assert _errors(create, {"parent": parent, "evaluation": {"displayName": ""}})
    assert _errors(create, {"evaluation": {"displayName": "d"}})
    update = _validator(evaluation_service_pb2.UpdateEvaluationRequest.DESCRIPTOR, output=False)
    assert _errors(update, {"evaluation": {"description": "x"}, "updateMask": "description"}) == []
    assert _errors(update, {"updateMask": "description"})
    root, defs = message_schema(
        evaluation_service_pb2.CreateEvaluationRequest.DESCRIPTOR, output=False
    )
    assert root["required"] == ["parent", "evaluation"]
    evaluation = defs["google.cloud.ces.v1beta.Evaluation-Input"]
    assert evaluation["required"] == ["displayName"]
    assert evaluation["properties"]["createTime"]["readOnly"] is True
    assert evaluation["properties"]["lastCompletedResult"]["readOnly"] is True


def test_output_view_requires_nothing() -> None:
    for service in services():
        for method in service.methods:
            root, defs = message_schema(method.output_type, output=True)
            for schema in [root, *defs.values()]:
                assert schema.get("required", ["@type"]) == ["@type"] or "required" not in schema


def test_recursive_contract_types() -> None:
    _, defs = message_schema(evaluation_pb2.Evaluation.DESCRIPTOR, output=True)
    span = defs[common_pb2.Span.DESCRIPTOR.full_name]
    assert (
        span["properties"]["childSpans"]["items"]["$ref"] == "#/$defs/google.cloud.ces.v1beta.Span"
    )
    root, defs = message_schema(evaluation_pb2.Evaluation.DESCRIPTOR, output=True)
    last = root["properties"]["lastCompletedResult"]
    assert last["$ref"] == "#/$defs/google.cloud.ces.v1beta.EvaluationResult"
    assert "google.cloud.ces.v1beta.EvaluationResult" in defs


def test_descriptions_come_from_comments() -> None:
    root, _ = message_schema(evaluation_pb2.Evaluation.DESCRIPTOR, output=True)
    found = comments()
    assert root["description"].startswith(found["google.cloud.ces.v1beta.Evaluation"])
    assert (
        root["properties"]["displayName"]["description"]
        == (found["google.cloud.ces.v1beta.Evaluation.display_name"])
    )
    assert "excludes `scenario`" in root["properties"]["golden"]["description"]
    _, defs = message_schema(
        evaluation_service_pb2.ExportEvaluationsRequest.DESCRIPTOR, output=False
    )
    options = defs["google.cloud.ces.v1beta.ExportOptions-Input"]
    assert "- `YAML` (2): YAML document." in options["properties"]["exportFormat"]["description"]


def _reachable() -> list[descriptor.Descriptor]:
    seen: dict[str, descriptor.Descriptor] = {}
    stack = [
        m
        for s in services()
        for method in s.methods
        for m in (method.input_type, method.output_type)
    ]
    while stack:
        current = stack.pop()
        if current.full_name in seen:
            continue
        seen[current.full_name] = current
        stack.extend(f.message_type for f in current.fields if f.message_type is not None)
    return list(seen.values())


@pytest.mark.parametrize("enums_as", ["names", "names_or_numbers"])
def test_views_share_an_entry_only_when_identical(enums_as: Any) -> None:
    builder = SchemaBuilder(enums_as=enums_as)
    shared = 0
    for message in [*_reachable(), KINDS, NODE, BEHAVIORS, UPDATE]:
        if message.full_name.startswith("google.protobuf.") or message.GetOptions().map_entry:
            continue
        for first, second in (
            (View.OUTPUT, View.INPUT),
            (View.INPUT, View.PARTIAL),
            (View.OUTPUT, View.PARTIAL),
        ):
            if builder.def_name(message, first) == builder.def_name(message, second):
                shared += 1
                assert builder.object(message, first) == builder.object(message, second), (
                    message.full_name,
                    first,
                    second,
                )
    assert shared > 20  # sharing happens, so the equality check above is exercised


def test_builder_shares_defs_across_roots() -> None:
    builder = SchemaBuilder(ref_prefix="#/components/schemas/")
    builder.ref(evaluation_pb2.Evaluation.DESCRIPTOR, View.OUTPUT)
    count = len(builder.defs)
    builder.ref(evaluation_service_pb2.ListEvaluationsResponse.DESCRIPTOR, View.OUTPUT)
    assert len(builder.defs) == count + 1  # only the response itself is new
    assert builder.def_name(evaluation_pb2.Evaluation.DESCRIPTOR, View.INPUT).endswith("-Input")
    assert builder.ref(empty_pb2.Empty.DESCRIPTOR, View.OUTPUT) == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
