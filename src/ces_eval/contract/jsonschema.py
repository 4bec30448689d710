"""JSON Schemas (draft 2020-12) of the proto3 JSON form of messages, walked from their descriptors.

One walker serves every surface that describes JSON: MCP tool ``inputSchema``/``outputSchema``
(:func:`message_schema`) and the OpenAPI document (a shared :class:`SchemaBuilder` whose ``$defs``
become ``components.schemas``). No library turns descriptors into faithful proto3-JSON
Schema, so protobuf's JSON mapping (the one ``json_format`` implements) is spelled out here.

Three views of a message
------------------------
``View.OUTPUT``
    What a proto3 JSON *printer* emits (``json_format.MessageToDict``): int64 family as decimal
    strings, 32-bit integers as numbers, floats as numbers or ``"NaN"``/``"Infinity"``/
    ``"-Infinity"``, bytes as padded standard base64, Timestamps normalized to ``Z``, enums by name
    (or, with ``enums_as="names_or_numbers"``, also by number, for ``$alt=json;enum-encoding=int``).
    Nothing is ``required``: proto3 JSON omits fields holding their default value.
``View.INPUT``
    What a proto3 JSON *parser* accepts: the spec says "either numbers or strings are accepted"
    for every integer and float type, so integers are ``["integer", "string"]`` (int64 family
    ``["string", "integer"]``: the canonical form first) with the decimal pattern and the type's
    range; enums by name or number; bytes in standard or URL-safe base64, padding optional;
    Timestamps with any UTC offset and 1-9 fraction digits. REQUIRED fields
    (google/api/field_behavior.proto, AIP-203) are listed in ``required`` and, since the service
    treats an empty value as unset, strings/bytes get ``minLength: 1``, repeated fields
    ``minItems: 1``, maps ``minProperties: 1`` and enums lose their zero value.
``View.PARTIAL``
    The input forms without any ``required``: used where the service takes a message field by
    field, namely the resource of an update request (a field of a ``google.api.resource`` type
    beside a ``google.protobuf.FieldMask update_mask``, AIP-134: the mask decides which fields
    must be there, and the service validates the merged result) and OUTPUT_ONLY sub-trees of
    input (AIP-203: ignored, never rejected).

OUTPUT_ONLY fields are ``readOnly: true`` in every view and stay accepted on input. Every message
object has ``additionalProperties: false`` (proto3 JSON parsers reject unknown fields) except
``google.protobuf.Struct`` (any JSON object).

Deliberately stricter than a parser, so that what a schema accepts the parser accepts too (as far
as a schema can tell: an Any's packed type and FieldMask paths are left to the service):
properties are keyed by JSON name only (parsers also accept the proto field name; listing both
would double every property), ``null`` is not accepted in place of a default, numeric strings
must be plain decimals, and enum numbers must be declared values.

Oneofs: each real oneof of two or more members adds ``{"not": {"anyOf": [{"required": [a, b]},
...]}}`` to the message's ``allOf`` (no two members together), plus, on input, ``{"anyOf":
[{"required": [a]}, ...]}`` when a member is REQUIRED (the service then wants exactly one).
Members' descriptions name their group. Proto3 ``optional`` (a synthetic one-member oneof) is a
plain optional property.

Messages become ``$defs`` entries named by full name, so recursive types (``Span.childSpans``,
``Evaluation.lastCompletedResult`` → ``EvaluationResult``) are plain ``$ref`` cycles. A view whose
schema differs from the output view gets a suffix: ``<full name>-Input`` or ``<full name>-Partial``
(``-`` cannot occur in a proto name and is allowed in OpenAPI component names); a view identical
to another shares its entry. Well-known types are inlined in their JSON string/any form.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Collection, Iterator
from functools import cache
from typing import Any, Literal

from google.api import resource_pb2
from google.protobuf import descriptor

from ces_eval.contract import schema
from ces_eval.contract.comments import comment
from ces_eval.contract.fields import OUTPUT_ONLY, REQUIRED, has_behavior

__all__ = [
    "DIALECT",
    "EnumsAs",
    "JsonSchema",
    "SchemaBuilder",
    "View",
    "document",
    "iter_refs",
    "message_schema",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"

JsonSchema = dict[str, Any]
EnumsAs = Literal["names", "names_or_numbers"]


class View(enum.Enum):
    """Which JSON of a message a schema describes; see the module docstring."""

    OUTPUT = ""
    INPUT = "-Input"
    PARTIAL = "-Partial"


_F = descriptor.FieldDescriptor

_SIGNED = "^-?[0-9]+$"
_UNSIGNED = "^[0-9]+$"
# (minimum, maximum, 64-bit) of every integer type.
_INTEGERS: dict[int, tuple[int, int, bool]] = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1, False),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1, False),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1, False),
    _F.TYPE_UINT32: (0, 2**32 - 1, False),
    _F.TYPE_FIXED32: (0, 2**32 - 1, False),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1, True),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1, True),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1, True),
    _F.TYPE_UINT64: (0, 2**64 - 1, True),
    _F.TYPE_FIXED64: (0, 2**64 - 1, True),
}
_FLOATS = frozenset({_F.TYPE_FLOAT, _F.TYPE_DOUBLE})
_FLOAT_SPECIAL = "^(NaN|-?Infinity)$"
_FLOAT_TEXT = "^(NaN|-?Infinity|-?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?)$"
_BASE64 = "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_BASE64_ANY = "^[A-Za-z0-9+/_-]*={0,2}$"  # standard or URL-safe, padding optional
_DATE_TIME = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
_TIMESTAMP_OUT = _DATE_TIME + "(\\.[0-9]{3}|\\.[0-9]{6}|\\.[0-9]{9})?Z$"
_TIMESTAMP_IN = _DATE_TIME + "(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})$"
_DURATION = "^-?[0-9]+(\\.[0-9]{1,9})?s$"

_TIMESTAMP = "google.protobuf.Timestamp"
_WRAPPERS = schema.WRAPPER_TYPES
_WELL_KNOWN = schema.SPECIAL_JSON_TYPES | {"google.protobuf.Empty"}


def _map_entry(
    field: descriptor.FieldDescriptor,
) -> tuple[descriptor.FieldDescriptor, descriptor.FieldDescriptor] | None:
    """The key and value fields of a map field, None for other fields."""
    entry = field.message_type
    if entry is None or not entry.GetOptions().map_entry:
        return None
    return entry.fields_by_name["key"], entry.fields_by_name["value"]


def _element(field: descriptor.FieldDescriptor) -> descriptor.FieldDescriptor:
    """The field whose type one JSON value has: a map's value field, else the field itself."""
    entry = _map_entry(field)
    return field if entry is None else entry[1]


def _is_json_enum(enum_type: descriptor.EnumDescriptor | None) -> bool:
    """An enum read as names/numbers (``google.protobuf.NullValue`` is JSON ``null``)."""
    return enum_type is not None and enum_type.full_name != "google.protobuf.NullValue"


def _in_real_oneof(field: descriptor.FieldDescriptor) -> bool:
    """Member of a oneof with alternatives (not a proto3 ``optional``'s synthetic oneof)."""
    oneof = field.containing_oneof
    return oneof is not None and len(oneof.fields) > 1


def _is_required(field: descriptor.FieldDescriptor) -> bool:
    return has_behavior(field, REQUIRED) and not has_behavior(field, OUTPUT_ONLY)


def _is_update_resource(field: descriptor.FieldDescriptor) -> bool:
    """The resource of an update request: a singular field of a ``google.api.resource`` type
    beside a ``google.protobuf.FieldMask update_mask`` (AIP-134)."""
    target, request = field.message_type, field.containing_type
    if target is None or request is None or field.is_repeated:
        return False
    if not target.GetOptions().HasExtension(resource_pb2.resource):
        return False
    mask = request.fields_by_name.get("update_mask")
    return (
        mask is not None
        and mask.message_type is not None
        and (mask.message_type.full_name == "google.protobuf.FieldMask")
    )


@cache
def _closure(message: descriptor.Descriptor) -> tuple[descriptor.Descriptor, ...]:
    """``message`` and every message with a ``$defs`` entry that its schema can reach."""
    seen: dict[str, descriptor.Descriptor] = {}
    stack = [message]
    while stack:
        current = stack.pop()
        if current.full_name in seen:
            continue
        seen[current.full_name] = current
        for field in current.fields:
            target = _element(field).message_type
            if target is not None and target.full_name not in _WELL_KNOWN:
                stack.append(target)
    return tuple(seen.values())


def _scalar(field_type: int, view: View) -> JsonSchema:
    """Schema of one non-message, non-enum value."""
    output = view is View.OUTPUT
    if field_type in _INTEGERS:
        low, high, wide = _INTEGERS[field_type]
        pattern = _UNSIGNED if low == 0 else _SIGNED
        if output:
            wide_form: JsonSchema = {"type": "string", "pattern": pattern}
            return wide_form if wide else {"type": "integer", "minimum": low, "maximum": high}
        kinds = ["string", "integer"] if wide else ["integer", "string"]
        return {"type": kinds, "pattern": pattern, "minimum": low, "maximum": high}
    if field_type in _FLOATS:
        return {"type": ["number", "string"], "pattern": _FLOAT_SPECIAL if output else _FLOAT_TEXT}
    if field_type == _F.TYPE_BYTES:
        pattern = _BASE64 if output else _BASE64_ANY
        return {"type": "string", "contentEncoding": "base64", "pattern": pattern}
    return {"type": "boolean" if field_type == _F.TYPE_BOOL else "string"}


def _scalar_differs(field_type: int) -> bool:
    return _scalar(field_type, View.OUTPUT) != _scalar(field_type, View.INPUT)


def _well_known(message: descriptor.Descriptor, view: View) -> JsonSchema | None:
    """Inline schema of a well-known type with a special JSON form, None for other messages."""
    name = message.full_name
    if name in _WRAPPERS:
        # A wrapper is its scalar; null (unset) is accepted and never printed.
        schema = _scalar(message.fields_by_name["value"].type, view)
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return {**schema, "type": [*kinds, "null"]}
    if name == _TIMESTAMP:
        pattern = _TIMESTAMP_OUT if view is View.OUTPUT else _TIMESTAMP_IN
        return {"type": "string", "format": "date-time", "pattern": pattern}
    simple: dict[str, JsonSchema] = {
        "google.protobuf.Duration": {"type": "string", "pattern": _DURATION},
        # Comma-separated field paths, lowerCamelCase in JSON.
        "google.protobuf.FieldMask": {"type": "string"},
        "google.protobuf.Struct": {"type": "object"},
        "google.protobuf.Value": {},
        "google.protobuf.ListValue": {"type": "array"},
        "google.protobuf.Any": {
            "type": "object",
            "properties": {"@type": {"type": "string", "description": "Type URL of the value."}},
            "required": ["@type"],
        },
        "google.protobuf.Empty": {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        },
    }
    return simple.get(name)


def _values_doc(enum_type: descriptor.EnumDescriptor) -> str:
    lines = []
    for value in enum_type.values:
        text = comment(value).replace("\n", " ")
        lines.append(f"- `{value.name}` ({value.number})" + (f": {text}" if text else ""))
    return "Values:\n" + "\n".join(lines)


class SchemaBuilder:
    """Builds schemas of messages in one view or another, collecting shared ``$defs``.

    ``ref_prefix`` is prepended to ``$defs`` names in every ``$ref`` (``"#/$defs/"`` for a
    standalone JSON Schema, ``"#/components/schemas/"`` for OpenAPI). ``enums_as`` is the form of
    enums in the output view; input always accepts names and numbers.
    """

    def __init__(self, *, ref_prefix: str = "#/$defs/", enums_as: EnumsAs = "names") -> None:
        self._ref_prefix = ref_prefix
        self._enums_as = enums_as
        self._defs: dict[str, JsonSchema] = {}
        self._leafy: dict[str, bool] = {}

    @property
    def defs(self) -> dict[str, JsonSchema]:
        """Every ``$defs`` entry referenced so far, by name (live; copy before changing it)."""
        return self._defs

    # --- naming -------------------------------------------------------------------------------

    def _leaf_differs(self, field: descriptor.FieldDescriptor) -> bool:
        """Whether one value of ``field`` reads differently in input and output (not recursing)."""
        element = _element(field)
        if element.enum_type is not None:
            return self._enums_as == "names" and _is_json_enum(element.enum_type)
        target = element.message_type
        if target is None:
            return _scalar_differs(element.type)
        if target.full_name in _WRAPPERS:
            return _scalar_differs(target.fields_by_name["value"].type)
        return target.full_name == _TIMESTAMP

    def _is_leafy(self, message: descriptor.Descriptor) -> bool:
        """Whether any value reachable from ``message`` reads differently in input and output."""
        name = message.full_name
        if name not in self._leafy:
            self._leafy[name] = any(
                self._leaf_differs(field)
                for reached in _closure(message)
                for field in reached.fields
            )
        return self._leafy[name]

    @staticmethod
    def _is_requiring(message: descriptor.Descriptor) -> bool:
        return any(_is_required(f) for reached in _closure(message) for f in reached.fields)

    def _canonical(self, message: descriptor.Descriptor, view: View) -> View:
        """The view whose schema of ``message`` is the same as ``view``'s and names its entry."""
        if view is View.OUTPUT:
            return View.OUTPUT
        leafy, requiring = self._is_leafy(message), self._is_requiring(message)
        if view is View.INPUT:
            return View.INPUT if leafy or requiring else View.OUTPUT
        if not leafy:
            return View.OUTPUT
        return View.PARTIAL if requiring else View.INPUT

    def def_name(self, message: descriptor.Descriptor, view: View) -> str:
        """The ``$defs`` name of ``message`` in ``view``."""
        return message.full_name + self._canonical(message, view).value

    # --- schemas ------------------------------------------------------------------------------

    def ref(self, message: descriptor.Descriptor, view: View) -> JsonSchema:
        """A schema of ``message`` in ``view``: a ``$ref`` to its entry, or a well-known type."""
        inline = _well_known(message, view)
        if inline is not None:
            return inline
        name = self.def_name(message, view)
        if name not in self._defs:
            self._defs[name] = {}  # placeholder: recursive references stop here
            self._defs[name] = self.object(message, self._canonical(message, view))
        return {"$ref": self._ref_prefix + name}

    def root(self, message: descriptor.Descriptor, view: View) -> JsonSchema:
        """An inline schema of ``message`` (an object for messages, as MCP wants at the root)."""
        inline = _well_known(message, view)
        return inline if inline is not None else self.object(message, view)

    def object(
        self, message: descriptor.Descriptor, view: View, *, exclude: Collection[str] = ()
    ) -> JsonSchema:
        """The object schema of a (not well-known) message, without the fields in ``exclude``
        (proto names; used for an HTTP body ``*`` without the fields bound by the path)."""
        fields = [f for f in message.fields if f.name not in exclude]
        properties = {f.json_name: self.field(f, view) for f in fields}
        schema: JsonSchema = {"type": "object"}
        notes = [comment(message)]
        constraints: list[JsonSchema] = []
        for oneof in message.oneofs:
            members = [f.json_name for f in oneof.fields if f.name not in exclude]
            if len(oneof.fields) < 2 or not members:
                continue
            listed = ", ".join(f"`{m}`" for m in members)
            notes.append(f"Oneof `{oneof.name}`: at most one of {listed}.")
            if len(members) > 1:
                pairs = [{"required": list(pair)} for pair in itertools.combinations(members, 2)]
                constraints.append({"not": {"anyOf": pairs}})
            if view is View.INPUT and any(_is_required(f) for f in oneof.fields):
                constraints.append({"anyOf": [{"required": [m]} for m in members]})
        description = "\n\n".join(n for n in notes if n)
        if description:
            schema["description"] = description
        schema["properties"] = properties
        if view is View.INPUT:
            required = [f.json_name for f in fields if _is_required(f) and not _in_real_oneof(f)]
            if required:
                schema["required"] = required
        if constraints:
            schema["allOf"] = constraints
        schema["additionalProperties"] = False
        return schema

    def field(self, field: descriptor.FieldDescriptor, view: View) -> JsonSchema:
        """The property schema of ``field`` inside its message rendered in ``view``."""
        value = self._value(_element(field), self._child_view(field, view))
        # The service reads an empty value as unset (core.fields.required_violations).
        non_empty = view is View.INPUT and _is_required(field) and not field.has_presence
        entry = _map_entry(field)
        if entry is not None:
            schema: JsonSchema = {"type": "object", "additionalProperties": value}
            key_type = entry[0].type
            if key_type in _INTEGERS:
                schema["propertyNames"] = {"pattern": _scalar(key_type, View.OUTPUT)["pattern"]}
            elif key_type == _F.TYPE_BOOL:
                schema["propertyNames"] = {"enum": ["true", "false"]}
            if non_empty:
                schema["minProperties"] = 1
        elif field.is_repeated:
            schema = {"type": "array", "items": value, **({"minItems": 1} if non_empty else {})}
        else:
            schema = self._non_empty(field, value) if non_empty else value
        description = self._field_doc(field)
        if description:
            schema["description"] = description
        if has_behavior(field, OUTPUT_ONLY):
            schema["readOnly"] = True
        if field.GetOptions().deprecated:
            schema["deprecated"] = True
        return schema

    @staticmethod
    def _non_empty(field: descriptor.FieldDescriptor, schema: JsonSchema) -> JsonSchema:
        """``schema`` of a singular field without the value the service reads as unset."""
        if field.type in (_F.TYPE_STRING, _F.TYPE_BYTES):
            return {**schema, "minLength": 1}
        zero = field.enum_type.values_by_number.get(0) if field.enum_type is not None else None
        if zero is not None and "enum" in schema:
            return {**schema, "enum": [v for v in schema["enum"] if v not in (zero.name, 0)]}
        return schema

    def value(self, field: descriptor.FieldDescriptor, view: View) -> JsonSchema:
        """The schema of one element of ``field`` (one item of a repeated field or map value)."""
        return self._value(_element(field), view)

    def _value(self, element: descriptor.FieldDescriptor, view: View) -> JsonSchema:
        if element.message_type is not None:
            return dict(self.ref(element.message_type, view))
        if element.enum_type is not None:
            return self._enum(element.enum_type, view)
        return _scalar(element.type, view)

    def _enum(self, enum_type: descriptor.EnumDescriptor, view: View) -> JsonSchema:
        if enum_type.full_name == "google.protobuf.NullValue":
            return {"type": "null"}
        names: list[object] = [v.name for v in enum_type.values]
        if view is View.OUTPUT and self._enums_as == "names":
            return {"type": "string", "enum": names}
        numbers = list(dict.fromkeys(v.number for v in enum_type.values))
        return {"type": ["string", "integer"], "enum": names + numbers}

    @staticmethod
    def _child_view(field: descriptor.FieldDescriptor, view: View) -> View:
        if view is View.OUTPUT:
            return View.OUTPUT
        if view is View.PARTIAL or has_behavior(field, OUTPUT_ONLY):
            return View.PARTIAL
        return View.PARTIAL if _is_update_resource(field) else View.INPUT

    @staticmethod
    def is_required(field: descriptor.FieldDescriptor) -> bool:
        """Whether input must carry ``field`` on its own (REQUIRED, not output-only, not one
        member of a oneof, whose requirement is met by any member)."""
        return _is_required(field) and not _in_real_oneof(field)

    def query_value(self, field: descriptor.FieldDescriptor) -> JsonSchema:
        """Schema of one query-parameter value of a scalar, enum or string-form well-known field.

        Query strings carry text, so numbers take their canonical printed form (int64 as a
        decimal, 32-bit integers and floats as numbers); enums are accepted by name or number,
        bytes in either base64 alphabet, Timestamps with any offset.
        """
        if field.enum_type is not None:
            return self._enum(field.enum_type, View.INPUT)
        target = field.message_type
        if target is not None:
            if target.full_name in _WRAPPERS:
                return self.query_value(target.fields_by_name["value"])
            return _well_known(target, View.INPUT) or {}
        return _scalar(field.type, View.INPUT if field.type == _F.TYPE_BYTES else View.OUTPUT)

    @staticmethod
    def field_description(field: descriptor.FieldDescriptor) -> str:
        """The description of ``field``: its comment, enum values and oneof group."""
        return SchemaBuilder._field_doc(field)

    @staticmethod
    def _field_doc(field: descriptor.FieldDescriptor) -> str:
        notes = [comment(field)]
        enum_type = _element(field).enum_type
        if enum_type is not None and _is_json_enum(enum_type):
            notes.append(_values_doc(enum_type))
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            others = ", ".join(f"`{f.json_name}`" for f in oneof.fields if f is not field)
            notes.append(f"Member of oneof `{oneof.name}`; excludes {others}.")
        return "\n\n".join(n for n in notes if n)


def message_schema(
    message: descriptor.Descriptor,
    *,
    output: bool,
    ref_prefix: str = "#/$defs/",
    enums_as: EnumsAs = "names",
) -> tuple[JsonSchema, dict[str, JsonSchema]]:
    """The proto3 JSON Schema of ``message``: ``(root, defs)``.

    ``root`` is an inline object schema (the MCP tool schema shape); ``defs`` holds every message
    it references by ``ref_prefix + name``. ``output`` picks the printer's forms (responses, MCP
    ``outputSchema``) over the parser's (requests, MCP ``inputSchema``); ``enums_as`` only
    matters for output.
    """
    builder = SchemaBuilder(ref_prefix=ref_prefix, enums_as=enums_as)
    root = builder.root(message, View.OUTPUT if output else View.INPUT)
    return root, dict(builder.defs)


def document(
    message: descriptor.Descriptor, *, output: bool, enums_as: EnumsAs = "names"
) -> JsonSchema:
    """:func:`message_schema` as one standalone document (``$schema`` and ``$defs`` included)."""
    root, defs = message_schema(message, output=output, enums_as=enums_as)
    result: JsonSchema = {"$schema": DIALECT, **root}
    if defs:
        result["$defs"] = defs
    return result


def iter_refs(schema: object) -> Iterator[str]:
    """Every ``$ref`` value inside a schema (or any JSON), depth first."""
    if isinstance(schema, dict):
        for key, item in schema.items():
            if key == "$ref" and isinstance(item, str):
                yield item
            else:
                yield from iter_refs(item)
    elif isinstance(schema, list):
        for item in schema:
            yield from iter_refs(item)
