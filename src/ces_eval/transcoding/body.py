"""JSON documents into messages, with every problem reported as a BadRequest violation.

A document without a problem is read in one walk (see "the conversion"): each field is checked,
each repeated field counted against its limit, and each value set as json_format sets it. At
anything out of the ordinary the walk gives up, and the separate passes say what is wrong: the
count limits first (:mod:`ces_eval.contract.limits`: repeated fields, maps, Struct entries; a
body over one is refused with those violations alone), then a descriptor walk
(:func:`check_document`, the one proto3-JSON checker of REST bodies, MCP arguments and imported
documents) that reports unknown fields, wrong JSON types, integers out of range, malformed
base64, unknown enum names, doubly-set oneofs and malformed well-known values with their field
paths (proto names, ``evaluation.golden.turns[0].steps``), all at once, instead of json_format's
first-error message. An imported document is checked with the other policy: the first problem
only, its path spelled as the document spells its keys. The message is json_format's either way.

Reading the document itself is bounded too (see "reading the document"), and :func:`heavy`
tells the surfaces which bodies to parse off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import descriptor, descriptor_pool, json_format, message_factory, struct_pb2

from ces_eval.contract import schema
from ces_eval.contract.limits import (
    LIMITS,
    MAX_DECODED_ENTRIES,
    MAX_MESSAGE_NESTING,
    MAX_STRUCT_ENTRIES,
    MAX_VIOLATIONS,
    Count,
    key_path,
    shown,
)
from ces_eval.errors import FieldViolation, ServiceError

# The C string scanner json.loads itself uses (typed in _json only).
scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # not in typeshed

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "Overflow",
    "check_document",
    "heavy",
    "heavy_document",
    "load_json",
    "member_path",
    "not_json",
    "parse_body",
    "parse_document",
]

_F = descriptor.FieldDescriptor
_INTEGERS = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1, "a 32-bit integer"),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1, "a 32-bit integer"),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1, "a 32-bit integer"),
    _F.TYPE_UINT32: (0, 2**32 - 1, "an unsigned 32-bit integer"),
    _F.TYPE_FIXED32: (0, 2**32 - 1, "an unsigned 32-bit integer"),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1, "a 64-bit integer"),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1, "a 64-bit integer"),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1, "a 64-bit integer"),
    _F.TYPE_UINT64: (0, 2**64 - 1, "an unsigned 64-bit integer"),
    _F.TYPE_FIXED64: (0, 2**64 - 1, "an unsigned 64-bit integer"),
}
# Well-known types whose JSON form is not an object of their fields; json_format checks them.
_OPAQUE = schema.SPECIAL_JSON_TYPES
# Those of them written as one JSON value (RFC 3339 text, "1.5s", "a,b", a wrapper's bare value)
# are read into their message where the walk meets them, so that a malformed one is named by its
# field path as any other value is (json_format's own error names only the body). Struct, Value,
# ListValue and Any hold documents of their own, read once, later (the merge), rather than in a
# second walk of them here.
_ONE_VALUE_FORMS = _OPAQUE - {
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Any",
}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def member_path(path: str, key: str) -> str:
    """``path.key``, or ``path["key"]`` when the key is not a plain identifier; a long key is
    cut (:func:`~ces_eval.contract.limits.shown`). The paths of documents as they spell their
    keys (imports)."""
    return _join(path, shown(key)) if _IDENTIFIER.match(key) else f"{path}{key_path(key)}"


class _Full(Exception):
    """The findings reached their limit: nothing more needs looking at."""


class _Findings(list[FieldViolation]):
    """The problems found in one document, at most ``limit`` (the walk stops there), their
    paths in proto names or (``spelled``) as the document spells its keys."""

    def __init__(self, limit: int, *, spelled: bool) -> None:
        super().__init__()
        self.limit = limit
        self.spelled = spelled

    def append(self, violation: FieldViolation) -> None:
        super().append(violation)
        if len(self) >= self.limit:
            raise _Full


def _integer_problem(low: int, high: int, kind: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        number: object = value
        if isinstance(value, str):
            try:
                number = int(value)
            except ValueError:
                return f"expected {kind}"
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
            return f"expected {kind}"
        return ""

    return check


def _float_problem(value: object) -> str:
    if isinstance(value, str):
        if value in {"NaN", "Infinity", "-Infinity"}:
            return ""
        try:
            return "" if math.isfinite(float(value)) else "expected a number"
        except ValueError:
            return "expected a number"
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return "" if ok else "expected a number"


_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*\Z")


def _bytes_problem(value: object) -> str:
    """Standard or URL-safe base64, padded or not (proto3 JSON); json_format skips junk."""
    if not isinstance(value, str):
        return "expected base64 text"
    body = value.rstrip("=")
    padding = len(value) - len(body)
    if (
        _BASE64.match(body) is None
        or len(body) % 4 == 1
        or padding > 2
        or (padding and len(value) % 4)
    ):
        return "expected base64 text"
    return ""


_SCALAR_CHECKS: dict[int, Callable[[object], str]] = {
    _F.TYPE_STRING: lambda v: "" if isinstance(v, str) else "expected a string",
    _F.TYPE_BYTES: _bytes_problem,
    _F.TYPE_BOOL: lambda v: "" if isinstance(v, bool) else "expected true or false",
    _F.TYPE_FLOAT: _float_problem,
    _F.TYPE_DOUBLE: _float_problem,
    **{kind: _integer_problem(*bounds) for kind, bounds in _INTEGERS.items()},
}


def _enum_problem(enum: descriptor.EnumDescriptor, value: object) -> str:
    if isinstance(value, str):
        known = enum.values_by_name
        return "" if value in known else f"expected one of {', '.join(known)} (or its number)"
    ok = isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
    return "" if ok else "expected an enum value name or number"


_AT_TYPE = re.compile(r"\.? at [A-Za-z0-9_.]+\.?$")


# What the one-value forms json_format's own words explain worst look like.
_FORMS = {
    "google.protobuf.Timestamp": 'expected an RFC 3339 timestamp such as "2024-01-31T09:30:00.5Z"',
    "google.protobuf.Duration": 'expected a duration in seconds such as "1.5s" or "-3s"',
}


def _form_problem(message: descriptor.Descriptor, value: object) -> str:
    """What json_format finds wrong with ``value`` as the one-value JSON form of ``message``
    (see :data:`_ONE_VALUE_FORMS`), or ""."""
    try:
        # Typed as taking a dict; for these types json_format reads the one JSON value itself.
        json_format.ParseDict(
            cast("dict[str, Any]", value), message_factory.GetMessageClass(message)()
        )
    except (json_format.ParseError, ValueError, TypeError, OverflowError) as error:
        # json_format ends its message with where it was (" at Timestamp."): the field path
        # says that better.
        return _FORMS.get(message.full_name) or _AT_TYPE.sub(
            "", str(error).split("\n", 1)[0]
        ).rstrip(".")
    return ""


def _document_problem(name: str, value: object) -> str:
    """What is wrong with ``value`` as the JSON form of a Struct, ListValue or Any (the type
    ``name``) at its top (json_format reads what they hold), or ""."""
    if name == "google.protobuf.ListValue":
        return "" if isinstance(value, list) else "expected a JSON array"
    if name == "google.protobuf.Value":
        return ""
    if not isinstance(value, dict):
        return "expected a JSON object"
    if name == "google.protobuf.Any" and value:
        type_url = value.get("@type")
        if not isinstance(type_url, str):
            return "@type is missing"
        try:
            descriptor_pool.Default().FindMessageTypeByName(type_url.rpartition("/")[2])
        except KeyError:
            return f"unknown type {shown(type_url)}"
    return ""


def _check_value(
    field: descriptor.FieldDescriptor, value: object, path: str, out: _Findings
) -> None:
    """One (non-repeated) value of ``field``; null means the default value in proto3 JSON."""
    if value is None:
        return
    if field.message_type is not None:
        name = field.message_type.full_name
        if name not in _OPAQUE:
            _check_message(field.message_type, value, path, out)
            return
        if name in _ONE_VALUE_FORMS:
            problem = _form_problem(field.message_type, value)
        else:
            problem = _document_problem(name, value)
    elif field.enum_type is not None:
        problem = _enum_problem(field.enum_type, value)
    else:
        problem = _SCALAR_CHECKS[field.type](value)
    if problem:
        out.append(FieldViolation(path, f"Invalid value {json.dumps(value)[:80]}: {problem}."))


_FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def _as_float32(value: object) -> object:
    """A float field's JSON value as json_format must read it. The shortest text of the largest
    float, ``3.4028235e+38`` (what json_format itself prints for it), exceeds that float as a
    double, and json_format refuses it as too large: a number that rounds to ±max in 32 bits is
    ±max. Anything else is returned as is."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return value
    try:
        number = float(value)
        if not math.isfinite(number) or abs(number) <= _FLOAT_MAX:
            return value
        struct.pack("<f", number)  # OverflowError when 32-bit rounding gives infinity
    except (ValueError, OverflowError):
        return value
    return math.copysign(_FLOAT_MAX, number)


def _not_value(field: descriptor.FieldDescriptor) -> bool:
    """Whether ``field`` holds something else than ``google.protobuf.Value`` (for which null is
    a value)."""
    return field.message_type is None or field.message_type.full_name != "google.protobuf.Value"


def _check_field(
    field: descriptor.FieldDescriptor, value: object, where: str, out: _Findings
) -> object:
    """Check ``value`` of ``field``; the value to parse (see :func:`_as_float32`)."""
    if value is None:
        return value
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not isinstance(value, dict):
            out.append(FieldViolation(where, "Expected a JSON object (a map)."))
            return value
        value_field = field.message_type.fields_by_name["value"]
        for key, item in value.items():
            _check_value(value_field, item, f"{where}{key_path(key)}", out)
            if value_field.type == _F.TYPE_FLOAT:
                value[key] = _as_float32(item)
    elif field.is_repeated:
        if not isinstance(value, list):
            out.append(FieldViolation(where, "Expected a JSON array."))
            return value
        for index, item in enumerate(value):
            if item is None and _not_value(field):
                out.append(FieldViolation(f"{where}[{index}]", "A list element cannot be null."))
                continue
            _check_value(field, item, f"{where}[{index}]", out)
            if field.type == _F.TYPE_FLOAT:
                value[index] = _as_float32(item)
    else:
        _check_value(field, value, where, out)
        if field.type == _F.TYPE_FLOAT:
            return _as_float32(value)
    return value


def _check_message(
    message: descriptor.Descriptor, document: object, path: str, out: _Findings
) -> None:
    if not isinstance(document, dict):
        out.append(FieldViolation(path or "body", f"Expected a JSON object ({message.name})."))
        return
    by_json = {f.json_name: f for f in message.fields}
    seen: dict[str, str] = {}
    oneofs: dict[str, str] = {}
    for key, value in document.items():
        field = by_json.get(key) or message.fields_by_name.get(key)
        if field is None:
            out.append(
                FieldViolation(
                    member_path(path, key) if out.spelled else _join(path, shown(key)),
                    f"Unknown field {shown(key)!r} in {message.name}.",
                )
            )
            continue
        where = member_path(path, key) if out.spelled else _join(path, field.name)
        if field.name in seen:
            out.append(FieldViolation(where, f"Given twice (as {seen[field.name]!r} and {key!r})."))
            continue
        seen[field.name] = key
        oneof = field.containing_oneof
        if oneof is not None and value is not None and len(oneof.fields) > 1:
            if oneof.name in oneofs:
                out.append(
                    FieldViolation(
                        where,
                        f"Only one of the {oneof.name} fields may be set; {oneofs[oneof.name]} is.",
                    )
                )
            oneofs[oneof.name] = field.name
        document[key] = _check_field(field, value, where, out)


# Messages (a Struct and each Value in it count as one level each) nested in a request body, as
# protobuf's parsers allow.
MAX_NESTING = MAX_MESSAGE_NESTING
_TOO_DEEP = f"The request body nests messages more than {MAX_NESTING} levels deep."


def not_json(constant: str) -> object:
    """json's ``parse_constant``: NaN and the infinities are refused."""
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or Infinity literals)")


# -- reading the document: bounded work --------------------------------------------------------
#
# json.loads (C) holds the interpreter while it runs, ~70 ns per value: on 10 MiB of ``{},`` that
# is a quarter of a second in which no other thread (the event loop among them) runs. Bodies with
# few values (commas bound them: n values need about n-1) go to it; the others are read by
# :class:`_Reader`, which walks containers in Python (strings and numbers still in C) and so lets
# other threads run every few milliseconds, and stops at the first container holding more than
# MAX_DECODED_ENTRIES: a hostile body is refused after reading that much of it.

_C_VALUES = 20_000  # commas in a body json.loads reads (~1.5 ms)
_LOOP_BODY_BYTES = 64 * 1024
# Commas in a body parsed and checked on the event loop (~10 ms of work at most): larger bodies
# are parsed in a worker thread (see :func:`heavy`).
_LOOP_VALUES = 512
_COMMA_CHUNK = 1 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"n": ("null", None), "t": ("true", True), "f": ("false", False)}


def _commas(data: bytes) -> int:
    """Commas in ``data``, counted a megabyte at a time (each count holds the interpreter)."""
    return sum(
        data.count(b",", start, start + _COMMA_CHUNK) for start in range(0, len(data), _COMMA_CHUNK)
    )


def heavy(data: bytes) -> bool:
    """Whether parsing the body ``data`` into a message is work for a worker thread rather
    than the event loop (docs/security.md, "Limits"): parsing and checking costs up to ~20 us
    per JSON value."""
    return len(data) > _LOOP_BODY_BYTES or data.count(b",") > _LOOP_VALUES


def heavy_document(document: object, values: int = _LOOP_VALUES) -> bool:
    """:func:`heavy` for a document parsed already (MCP arguments): whether it holds more than
    ``values`` values (counting stops there)."""
    budget = values
    pending = [document]
    while pending:
        item = pending.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        budget -= len(children)
        if budget < 0:
            return True
        pending.extend(child for child in children if isinstance(child, dict | list))
    return False


class Overflow(Exception):
    """A JSON array or object with more than MAX_DECODED_ENTRIES entries. Each enclosing
    container adds the key or index leading to it (innermost first) on the way out."""

    def __init__(self, *, is_object: bool) -> None:
        super().__init__()
        self.is_object = is_object
        self.steps: list[str | int] = []


class _Reader:
    """A JSON reader equivalent to json.loads, for bodies with many values (see above)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.keys: dict[str, str] = {}  # one str object per distinct key, as json.loads does

    def document(self) -> object:
        text = self.text
        at = self._skip(0)
        value, at = self.value(at)
        at = self._skip(at)
        if at != len(text):
            raise json.JSONDecodeError("Extra data", text, at)
        return value

    def value(self, at: int) -> tuple[object, int]:
        text = self.text
        char = text[at : at + 1]
        if char == '"':
            return scanstring(text, at + 1, True)
        if char == "{":
            return self.members(at + 1)
        if char == "[":
            return self.elements(at + 1)
        literal = _LITERALS.get(char)
        if literal is not None and text.startswith(literal[0], at):
            return literal[1], at + len(literal[0])
        number = _NUMBER.match(text, at)
        if number is not None:
            integer, fraction, exponent = number.groups()
            if fraction or exponent:
                return float(number.group()), number.end()
            return int(integer), number.end()
        for constant in ("NaN", "Infinity", "-Infinity"):
            if text.startswith(constant, at):
                not_json(constant)
        raise json.JSONDecodeError("Expecting value", text, at)

    def _skip(self, at: int) -> int:
        """Where the whitespace at ``at`` ends (the pattern matches none, too)."""
        space = _WHITESPACE.match(self.text, at)
        return space.end() if space else at

    def members(self, at: int) -> tuple[dict[str, object], int]:
        text = self.text
        members: dict[str, object] = {}
        at = self._skip(at)
        if text[at : at + 1] == "}":
            return members, at + 1
        count = 0
        while True:
            if text[at : at + 1] != '"':
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, at
                )
            key, at = scanstring(text, at + 1, True)
            key = self.keys.setdefault(key, key)
            at = self._skip(at)
            if text[at : at + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
            count += 1
            if count > MAX_DECODED_ENTRIES:
                raise Overflow(is_object=True)
            try:
                members[key], at = self.value(self._skip(at + 1))
            except Overflow as overflow:
                overflow.steps.append(key)
                raise
            at = self._skip(at)
            char = text[at : at + 1]
            if char == "}":
                return members, at + 1
            if char != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
            at = self._skip(at + 1)

    def elements(self, at: int) -> tuple[list[object], int]:
        text = self.text
        values: list[object] = []
        at = self._skip(at)
        if text[at : at + 1] == "]":
            return values, at + 1
        while True:
            if len(values) == MAX_DECODED_ENTRIES:
                raise Overflow(is_object=False)
            try:
                value, at = self.value(at)
            except Overflow as overflow:
                overflow.steps.append(len(values))
                raise
            values.append(value)
            at = self._skip(at)
            char = text[at : at + 1]
            if char == "]":
                return values, at + 1
            if char != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
            at = self._skip(at + 1)


def load_json(data: bytes) -> object:
    """The JSON document ``data``: ValueError (JSONDecodeError, UnicodeDecodeError) when it is
    not one, RecursionError when it nests deeper than Python recurses, :class:`Overflow` when
    a container holds more than MAX_DECODED_ENTRIES."""
    if len(data) <= _LOOP_BODY_BYTES or _commas(data) <= _C_VALUES:
        return json.loads(data, parse_constant=not_json)
    return _Reader(data.decode(json.detect_encoding(data), "surrogatepass")).document()


def check_document(
    message_type: descriptor.Descriptor,
    document: object,
    path: str,
    *,
    limit: int = MAX_VIOLATIONS,
    spelled: bool = False,
) -> list[FieldViolation]:
    """The problems json_format would trip on (or let through) in ``document`` read as a
    ``message_type``, with their paths from ``path``: at most ``limit`` (1: the first only),
    paths in proto names or (``spelled``) as the document spells its keys. Float values are
    adjusted in place (see :func:`_as_float32`). RecursionError when it nests deeper than
    Python recurses."""
    found = _Findings(limit, spelled=spelled)
    if message_type.full_name not in _OPAQUE:
        with contextlib.suppress(_Full):
            _check_message(message_type, document, path, found)
    return list(found)


def _refused(
    violations: list[FieldViolation], refusal: str = "The request body is invalid"
) -> ServiceError:
    return ServiceError.invalid_argument(
        f"{refusal}: {violations[0].field}: {violations[0].description}"
        + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""),
        violations,
    )


def _too_deep(path: str) -> ServiceError:
    return ServiceError.invalid_argument(
        _TOO_DEEP, [FieldViolation(path or "body", _TOO_DEEP, "TOO_DEEP")]
    )


def parse_body(data: bytes, message: Message, path: str) -> None:
    """Merge the JSON document ``data`` into ``message``.

    ``path`` is the request field the body binds to (``evaluation``), or "" for ``body: "*"``.
    Raises INVALID_ARGUMENT listing every problem.
    """
    try:
        document = load_json(data)
    except Overflow as overflow:
        violation = LIMITS.json_overflow(
            schema.descriptor_of(message),
            reversed(overflow.steps),
            path,
            is_object=overflow.is_object,
        )
        raise _refused([violation]) from None
    except RecursionError as error:
        # Deeper than any message json_format accepts (MAX_NESTING): refused before it is walked.
        raise _too_deep(path) from error
    except (ValueError, UnicodeDecodeError) as error:
        description = f"The request body is not valid JSON: {error}."
        raise ServiceError.invalid_argument(
            description, [FieldViolation(path or "body", description)]
        ) from error
    # Each Struct entry or list element takes 2 bytes at least ("0," or "[]").
    parse_document(document, message, path, structs=len(data) > 2 * MAX_STRUCT_ENTRIES)


# -- the conversion: checked, counted and merged in one walk -----------------------------------
#
# json_format walks any document generically, looking each key up and deciding each value's kind
# on the way, and the check and the count limits would each walk it once more. A document
# without a problem needs none of that: :func:`_convert` walks it once, with a plan per message
# type, and sets each field directly (messages and lists of them by descent; strings, booleans,
# integers in range and enum names given as such, each as json_format sets it; Structs, lists
# and Values by the readers below), checking each repeated field's count before its elements.
# Any other field (well-known one-value forms, maps, bytes, floats, nulls, integers or enums in
# another spelling) goes through the whole pipeline on its own: counted, checked, then merged by
# json_format with the depth it has left. The result is json_format's.
#
# At the first thing out of the ordinary (a problem, a key given twice, a second member of a
# oneof, too deep) the walk gives up (:class:`_Refer`): the message is cleared, and the
# document is counted, checked and read by the separate passes above, whose refusal (every
# problem, counts first) is the answer. A refusal is never made by the walk itself.

_F_STRING = descriptor.FieldDescriptor.CPPTYPE_STRING
_F_BOOL = descriptor.FieldDescriptor.CPPTYPE_BOOL
_MESSAGE = descriptor.FieldDescriptor.CPPTYPE_MESSAGE
_ENUM = descriptor.FieldDescriptor.CPPTYPE_ENUM
_BYTES = descriptor.FieldDescriptor.TYPE_BYTES

# What the walk does with a field: set a scalar of one Python type (within bounds for integers),
# an enum by name, descend into a message or a document (Struct, ListValue, Value), or hand the
# field to the whole pipeline; the repeated forms of the first three.
_SET, _NAMED, _DESCEND, _DOCUMENT, _OTHER = range(5)
_REPEATED_BASE = 8  # added to _SET, _NAMED, _DESCEND for a repeated field


class _Refer(Exception):
    """Something in the document needs the separate passes: a problem to report, or a form
    the walk leaves to them."""


# A step: the field, what to do (see above), its argument (the Python type and integer bounds,
# the enum's numbers by name, the message type, or the document's reader), the repeated field's
# count limit (None: not counted, OUTPUT_ONLY), and the oneof whose members exclude each other.
_Step = tuple[descriptor.FieldDescriptor, int, Any, "int | None", "str | None"]
_PLANS: dict[descriptor.Descriptor, dict[str, _Step]] = {}


def _step(field: descriptor.FieldDescriptor, rule: Count | None) -> _Step:
    """What :func:`_convert` does with ``field``, whose count rule is ``rule``."""
    argument: object
    oneof = field.containing_oneof
    exclusive = oneof.name if oneof is not None and len(oneof.fields) > 1 else None
    limit = None if rule is None or rule[6] else rule[1]
    target = field.message_type
    if target is not None:
        name = target.full_name
        if target.GetOptions().map_entry:
            return field, _OTHER, None, limit, exclusive
        if name in _DOCUMENTS and not field.is_repeated:
            return field, _DOCUMENT, _DOCUMENTS[name], limit, exclusive
        if name in _OPAQUE:
            return field, _OTHER, None, limit, exclusive
        action, argument = _DESCEND, target
    elif field.cpp_type == _ENUM:
        enum_type = field.enum_type
        assert enum_type is not None  # an enum field's
        action = _NAMED
        argument = {name: value.number for name, value in enum_type.values_by_name.items()}
    elif field.cpp_type == _F_STRING and field.type != _BYTES:
        action, argument = _SET, (str, None)
    elif field.cpp_type == _F_BOOL:
        action, argument = _SET, (bool, None)
    elif field.type in _INTEGERS:
        low, high, _ = _INTEGERS[field.type]
        action, argument = _SET, (int, (low, high))
    else:
        return field, _OTHER, None, limit, exclusive
    if field.is_repeated:
        action += _REPEATED_BASE
    return field, action, argument, limit, exclusive


def _plan(message_type: descriptor.Descriptor) -> dict[str, _Step]:
    """A message's steps by JSON name, then by proto name (json_format's lookup order)."""
    plan = _PLANS.get(message_type)
    if plan is None:
        counts = LIMITS.count_plan(message_type)
        steps = {f: _step(f, counts.get(f.number)) for f in message_type.fields}
        plan = {f.name: steps[f] for f in message_type.fields}
        plan.update((f.json_name, steps[f]) for f in message_type.fields)
        _PLANS[message_type] = plan
    return plan


def _convert(document: object, message: Message, depth: int, counting: bool) -> None:
    """Merge ``document`` into ``message``, ``depth`` messages deep (the top is 1), as
    json_format.ParseDict(max_recursion_depth=MAX_NESTING) would, counting repeated fields
    against their limits when ``counting``; :class:`_Refer` at anything else."""
    if depth > MAX_NESTING or type(document) is not dict:
        raise _Refer
    message_type = schema.descriptor_of(message)
    plan = _PLANS.get(message_type) or _plan(message_type)
    seen: set[str] = set()
    oneofs: set[str] = set()
    for key, value in document.items():
        step = plan.get(key)
        if step is None:
            raise _Refer
        field, action, argument, limit, exclusive = step
        name = field.name
        if name in seen:
            raise _Refer
        seen.add(name)
        if exclusive is not None and value is not None:
            if exclusive in oneofs:
                raise _Refer
            oneofs.add(exclusive)
        if action == _DESCEND and type(value) is dict:
            child = getattr(message, name)
            child.SetInParent()
            _convert(value, child, depth + 1, counting and limit is not None)
        elif action == _SET and type(value) is argument[0] and _within(argument[1], value):
            setattr(message, name, value)
        elif action == _NAMED and type(value) is str and value in argument:
            setattr(message, name, argument[value])
        elif action == _DOCUMENT and value is not None and argument[0](value):
            child = getattr(message, name)
            child.SetInParent()
            try:
                argument[1](value, child, depth + 1)
            except json_format.ParseError:
                raise _Refer from None
        elif (
            action < _REPEATED_BASE
            or type(value) is not list
            or not _repeated(message, step, value, depth, counting)
        ):
            _other(message, key, value, depth, counting)


def _within(bounds: tuple[int, int] | None, value: object) -> bool:
    return bounds is None or bounds[0] <= cast("int", value) <= bounds[1]


def _repeated(message: Message, step: _Step, value: list[Any], depth: int, counting: bool) -> bool:
    """Set the repeated field of ``step`` from ``value`` when every element is of the kind set
    directly; False (nothing set) to leave it to :func:`_other`."""
    field, action, argument, limit, _ = step
    if counting and limit is not None and len(value) > limit:
        raise _Refer
    if action == _DESCEND + _REPEATED_BASE:
        if not all(type(item) is dict for item in value):
            return False
        message.ClearField(field.name)
        target = getattr(message, field.name)
        for item in value:
            _convert(item, target.add(), depth + 1, counting and limit is not None)
        return True
    if action == _SET + _REPEATED_BASE:
        kind, bounds = argument
        if not all(type(item) is kind and _within(bounds, item) for item in value):
            return False
        converted = value
    else:
        if not all(type(item) is str and item in argument for item in value):
            return False
        converted = [argument[item] for item in value]
    message.ClearField(field.name)
    getattr(message, field.name).extend(converted)
    return True


def _other(message: Message, key: str, value: object, depth: int, counting: bool) -> None:
    """One field of a kind :func:`_convert` does not set itself, through the whole pipeline:
    counted, checked (floats adjusted, see :func:`_as_float32`), then json_format's."""
    single = {key: value}
    message_type = schema.descriptor_of(message)
    if (counting and LIMITS.json_counts(message_type, single, structs=False)) or check_document(
        message_type, single, "", limit=1
    ):
        raise _Refer
    try:
        json_format.ParseDict(single, message, max_recursion_depth=MAX_NESTING - depth + 1)
    except (json_format.ParseError, ValueError, TypeError, OverflowError):
        raise _Refer from None


def _deeper(depth: int) -> None:
    if depth > MAX_NESTING:
        raise json_format.ParseError("too deep")


def _merge_struct(document: Any, message: struct_pb2.Struct, depth: int) -> None:  # noqa: ANN401 - a JSON object
    """A Struct from its JSON object, as json_format reads one (each level counted)."""
    _deeper(depth)
    message.Clear()  # present even when empty, as json_format makes it
    entries = message.fields
    for key, item in document.items():
        _merge_value(item, entries[key], depth + 1)


def _merge_list(document: Any, message: struct_pb2.ListValue, depth: int) -> None:  # noqa: ANN401 - a JSON array
    _deeper(depth)
    message.ClearField("values")
    values = message.values
    for item in document:
        _merge_value(item, values.add(), depth + 1)


def _merge_value(document: Any, message: struct_pb2.Value, depth: int) -> None:  # noqa: ANN401 - any JSON value
    _deeper(depth)
    kind = type(document)
    if kind is dict:
        _merge_struct(document, message.struct_value, depth + 1)
    elif kind is list:
        _merge_list(document, message.list_value, depth + 1)
    elif document is None:
        message.null_value = struct_pb2.NULL_VALUE
    elif kind is bool:
        message.bool_value = document
    elif kind is str:
        message.string_value = document
    elif kind is int or kind is float:
        message.number_value = document
    else:
        raise json_format.ParseError(f"a {kind.__name__} in a Value")


# The documents of their own a message may hold, read here as json_format reads them: which JSON
# values each takes, and its reader.
_DOCUMENTS: dict[str, tuple[Callable[[object], bool], Callable[[Any, Any, int], None]]] = {
    "google.protobuf.Struct": (lambda value: type(value) is dict, _merge_struct),
    "google.protobuf.ListValue": (lambda value: type(value) is list, _merge_list),
    "google.protobuf.Value": (lambda value: True, _merge_value),
}


def parse_document(
    document: object,
    message: Message,
    path: str,
    *,
    structs: bool = True,
    counted: bool = False,
    refusal: str = "The request body is invalid",
) -> None:
    """Merge the parsed JSON ``document`` into the empty ``message`` (see :func:`parse_body`);
    it may be changed in place. ``structs`` false: too small for any Struct total to pass its
    limit; ``counted``: the count limits were checked already (:meth:`Limits.json_counts`);
    ``refusal``: how the error message begins ("The tool arguments are invalid")."""
    message_type = schema.descriptor_of(message)
    opaque = message_type.full_name in _OPAQUE
    try:
        if structs and not counted and not opaque:
            # Struct totals are counted over the whole document before anything else.
            _refuse(LIMITS.json_counts(message_type, document, path), refusal)
            counted = True
        if not opaque:
            _convert(document, message, 1, not counted)
            return
    except (_Refer, RecursionError, ValueError, TypeError, OverflowError, json_format.ParseError):
        # ValueError: text protobuf cannot hold (a lone surrogate), found as it is set.
        message.Clear()
    # Something to report, or a form of json_format's own: the separate passes say what.
    try:
        if not counted and not opaque:
            _refuse(LIMITS.json_counts(message_type, document, path, structs=False), refusal)
        _refuse(check_document(message_type, document, path), refusal)
    except RecursionError as error:
        raise _too_deep(path) from error
    try:
        json_format.ParseDict(
            cast("dict[str, Any]", document), message, max_recursion_depth=MAX_NESTING
        )
    except RecursionError as error:
        raise _too_deep(path) from error
    except (json_format.ParseError, ValueError, TypeError, OverflowError) as error:
        # OverflowError: an integer literal too large for a double where json_format converts
        # one (a Struct number hundreds of digits long).
        description = str(error).split("\n", 1)[0]
        raise ServiceError.invalid_argument(
            f"{refusal}: {description}",
            [FieldViolation(path or "body", description)],
        ) from error
    if not opaque:
        # json_format took what the walk referred: a fault of ours (INTERNAL, logged).
        raise RuntimeError("the document walk referred what json_format reads")


def _refuse(violations: list[FieldViolation], refusal: str) -> None:
    if violations:
        raise _refused(violations, refusal)
