"""JSON request bodies into messages, with every problem reported as a BadRequest violation.

protobuf's json_format does the conversion; before it, a descriptor walk checks the document so
that unknown fields, wrong JSON types, unknown enum names and doubly-set oneofs are reported with
their field paths (proto names, ``evaluation.golden.turns[0].steps``), all at once, instead of
json_format's first-error message.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from google.protobuf import descriptor, json_format

from ces_eval import schema
from ces_eval.core.limits import MAX_MESSAGE_NESTING, shown
from ces_eval.errors import FieldViolation, ServiceError

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["parse_body"]

_F = descriptor.FieldDescriptor
_INTEGERS = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_FIXED64: (0, 2**64 - 1),
}
# Well-known types whose JSON form is not an object of their fields; json_format checks them.
_OPAQUE = schema.SPECIAL_JSON_TYPES


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _integer_problem(low: int, high: int) -> Callable[[object], str]:
    def check(value: object) -> str:
        number: object = value
        if isinstance(value, str):
            try:
                number = int(value)
            except ValueError:
                return "expected an integer"
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        if isinstance(number, bool) or not isinstance(number, int):
            return "expected an integer"
        return "" if low <= number <= high else f"out of range [{low}, {high}]"

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


_SCALAR_CHECKS: dict[int, Callable[[object], str]] = {
    _F.TYPE_STRING: lambda v: "" if isinstance(v, str) else "expected a string",
    _F.TYPE_BYTES: lambda v: "" if isinstance(v, str) else "expected a base64 string",
    _F.TYPE_BOOL: lambda v: "" if isinstance(v, bool) else "expected true or false",
    _F.TYPE_FLOAT: _float_problem,
    _F.TYPE_DOUBLE: _float_problem,
    **{kind: _integer_problem(low, high) for kind, (low, high) in _INTEGERS.items()},
}


def _enum_problem(enum: descriptor.EnumDescriptor, value: object) -> str:
    if isinstance(value, str):
        known = enum.values_by_name
        return "" if value in known else f"unknown value; expected one of {', '.join(known)}"
    ok = isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
    return "" if ok else "expected an enum value name or number"


def _check_value(
    field: descriptor.FieldDescriptor, value: object, path: str, out: list[FieldViolation]
) -> None:
    """One (non-repeated) value of ``field``; null means the default value in proto3 JSON."""
    if value is None:
        return
    if field.message_type is not None:
        if field.message_type.full_name not in _OPAQUE:
            _check_message(field.message_type, value, path, out)
        return
    if field.enum_type is not None:
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


def _check_field(
    field: descriptor.FieldDescriptor, value: object, where: str, out: list[FieldViolation]
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
            _check_value(value_field, item, f'{where}["{key}"]', out)
            if value_field.type == _F.TYPE_FLOAT:
                value[key] = _as_float32(item)
    elif field.is_repeated:
        if not isinstance(value, list):
            out.append(FieldViolation(where, "Expected a JSON array."))
            return value
        for index, item in enumerate(value):
            _check_value(field, item, f"{where}[{index}]", out)
            if field.type == _F.TYPE_FLOAT:
                value[index] = _as_float32(item)
    else:
        _check_value(field, value, where, out)
        if field.type == _F.TYPE_FLOAT:
            return _as_float32(value)
    return value


def _check_message(
    message: descriptor.Descriptor, document: object, path: str, out: list[FieldViolation]
) -> None:
    if not isinstance(document, dict):
        out.append(FieldViolation(path or "body", "Expected a JSON object."))
        return
    by_json = {f.json_name: f for f in message.fields}
    seen: dict[str, str] = {}
    oneofs: dict[str, str] = {}
    for key, value in document.items():
        field = by_json.get(key) or message.fields_by_name.get(key)
        if field is None:
            out.append(
                FieldViolation(
                    _join(path, shown(key)), f"Unknown field {shown(key)!r} in {message.name}."
                )
            )
            continue
        where = _join(path, field.name)
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


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON (RFC 8259 has no NaN or Infinity literals)")


def parse_body(data: bytes, message: Message, path: str) -> None:
    """Merge the JSON document ``data`` into ``message``.

    ``path`` is the request field the body binds to (``evaluation``), or "" for ``body: "*"``.
    Raises INVALID_ARGUMENT listing every problem.
    """
    try:
        document = json.loads(data, parse_constant=_not_json)
        violations: list[FieldViolation] = []
        if message.DESCRIPTOR.full_name not in _OPAQUE:
            _check_message(message.DESCRIPTOR, document, path, violations)  # type: ignore[arg-type]
    except RecursionError as error:
        # Deeper than any message json_format accepts (MAX_NESTING): refused before it is walked.
        raise ServiceError.invalid_argument(
            _TOO_DEEP, [FieldViolation(path or "body", _TOO_DEEP, "TOO_DEEP")]
        ) from error
    except (ValueError, UnicodeDecodeError) as error:
        description = f"The request body is not valid JSON: {error}."
        raise ServiceError.invalid_argument(
            description, [FieldViolation(path or "body", description)]
        ) from error
    if violations:
        raise ServiceError.invalid_argument(
            f"The request body is invalid: {violations[0].field}: {violations[0].description}"
            + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""),
            violations,
        )
    try:
        json_format.ParseDict(document, message, max_recursion_depth=MAX_NESTING)
    except RecursionError as error:
        raise ServiceError.invalid_argument(
            _TOO_DEEP, [FieldViolation(path or "body", _TOO_DEEP, "TOO_DEEP")]
        ) from error
    except (json_format.ParseError, ValueError, TypeError, OverflowError) as error:
        # OverflowError: an integer literal too large for a double where json_format converts
        # one (a Struct number hundreds of digits long).
        description = str(error).split("\n", 1)[0]
        raise ServiceError.invalid_argument(
            f"The request body is invalid: {description}",
            [FieldViolation(path or "body", description)],
        ) from error
