"""URL query parameters into a request message (google/api/http.proto, "Rules for HTTP mapping").

Every request field that the path template and the body do not bind can be given as a query
parameter named by its field path (http.proto; AIP-127): ``?pageSize=10``,
``?exportOptions.exportFormat=JSON``, ``?names=a&names=b``. ``apply_query`` resolves each name
through the request's descriptor and converts each value from its proto3 JSON string form, so the
message is exactly what a gRPC client would have sent. What it accepts, and why:

* Names: dot-separated segments, each the proto name (``page_size``) or the JSON name
  (``pageSize``) of a field, through singular message fields (``evaluation.displayName``).
  Fields must be scalars, enums, repeated scalars or enums, or a singular well-known type written
  as one value (http.proto: "a primitive type or a repeated primitive type or a non-repeated
  message type"); repeated and map message fields cannot be expressed and are rejected.
* Repetition: a repeated field accumulates over repeated parameters in order; a singular field
  given twice is an error (rather than "last one wins", which hides typos in scripts). Two members
  of one oneof are an error too: the second would silently clear the first.
* ``bound``: proto field paths that the URL path or the body already set. They and everything
  under them cannot be given again (http.proto: each leaf field comes from exactly one place).
* System parameters (Google's "System parameters" page: ``$alt``/``alt``, ``key``, ``fields``,
  ``$.xgafv``, ... in ``SYSTEM_PARAMETERS``) are skipped. They are reserved names: a request field
  that happened to share one could not be set from the query string (none in this API does).
* Values (proto3 JSON string forms):

  - ``string`` as is; ``bytes`` base64 in the standard or URL-safe alphabet, padding optional.
  - ``bool``: ``true`` / ``false`` in any letter case (Python's ``requests`` sends ``True``);
    ``1`` / ``0`` are rejected, as proto3 JSON has no such booleans.
  - integers: decimal, range-checked per type; 64-bit ones too (the JSON forms are strings).
  - ``float`` / ``double``: decimal or exponent notation, ``NaN``, ``Infinity``, ``-Infinity``;
    a finite value out of the type's range is an error rather than a silent infinity.
  - enums: the value name (case-sensitive) or its number. An unknown number is accepted for an
    open (proto3) enum, as proto3 JSON parsers do and as gRPC delivers it: the service core then
    sees the same message on every surface and validates it once. Closed enums reject it.
  - ``google.protobuf.Timestamp``: RFC 3339 with ``Z`` or a ``+hh:mm`` offset and 0-9 fraction
    digits (e.g. ``2024-01-02T03:04:05.5+01:00``), years 0001-9999. ``Duration``: seconds with
    up to 9 fraction digits and an ``s`` suffix (``3.5s``, ``-0.25s``). ``FieldMask``: comma-
    separated paths whose dot-separated names are lowerCamelCase (the JSON form) or snake_case,
    stored as snake_case; ``*`` passes through (AIP-134) and an empty value is an empty mask.
    Wrappers (``Int32Value``, ``StringValue``, ...) take the form of their wrapped scalar.

Every failure is a ``QueryError`` naming the parameter as sent, the field path, and what was
expected; nothing else escapes for any input. On error the message may be partly filled: the
caller discards it.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ces_eval.contract import schema

if TYPE_CHECKING:
    from google.protobuf import duration_pb2, field_mask_pb2, timestamp_pb2
    from google.protobuf.message import Message

__all__ = ["SYSTEM_PARAMETERS", "QueryError", "apply_query"]

SYSTEM_PARAMETERS: frozenset[str] = frozenset(
    {
        # Google APIs' system parameters (current and earlier editions of their list)
        "$alt",
        "alt",
        "$.xgafv",
        "$apiFormat",
        "$apiVersion",
        "$callback",
        "callback",
        "$ct",
        "$fields",
        "fields",
        "$httpMethod",
        "$key",
        "key",
        "$prettyPrint",
        "prettyPrint",
        "$quotaUser",
        "quotaUser",
        "$userProject",
        "userProject",
        "access_token",
        "oauth_token",
        # Discovery documents' common parameters and legacy client-library ones.
        "bearer_token",
        "pp",
        "xgafv",
        "upload_protocol",
        "uploadType",
        "$uploadType",
        "userIp",
    }
)


class QueryError(ValueError):
    """A query parameter that names no settable field or whose value does not fit the field."""

    def __init__(self, parameter: str, field_path: str, description: str) -> None:
        super().__init__(f"invalid query parameter {parameter!r}: {description}")
        self.parameter = parameter
        """The parameter name as sent."""
        self.field_path = field_path
        """The proto field path it names, up to and including the first segment that did not
        resolve (that one as sent)."""
        self.description = description


class _Invalid(Exception):
    """A value that does not fit its field; ``apply_query`` turns it into a ``QueryError``."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass
class _State:
    bound: frozenset[str]
    singular: dict[str, str] = field(default_factory=dict)
    """Proto path of each singular leaf set so far -> the parameter name that set it."""
    oneofs: dict[str, tuple[str, str]] = field(default_factory=dict)
    """``parent path + oneof name`` -> (member path, parameter name) set so far."""


def apply_query(
    message: Message, params: Sequence[tuple[str, str]], *, bound: Collection[str] = ()
) -> None:
    """Set the fields that ``params`` name on ``message`` (see the module docstring).

    ``params`` are decoded ``(name, value)`` pairs in request order, e.g. from
    ``urllib.parse.parse_qsl(query, keep_blank_values=True)``; ``bound`` holds the proto field
    paths already set from the URL path or the body.
    """
    state = _State(bound=frozenset(bound))
    for name, value in params:
        if name in SYSTEM_PARAMETERS:
            continue
        _apply_one(message, name, value, state)


@dataclass(frozen=True, slots=True)
class _Resolved:
    """What applying a parameter name needs of its field chain (:func:`_resolve`), worked out
    once per message type and name: the chain, its proto path, the path of each of its
    prefixes, and per member of a real oneof the key it is tracked by, its own path and the
    oneof's name."""

    chain: tuple[FieldDescriptor, ...]
    path: str
    prefixes: tuple[str, ...]
    oneofs: tuple[tuple[str, str, str], ...]


# Resolved names by (message type, parameter name). Names come from requests, so the table is
# bounded: a name beyond it is resolved again on every use (correct, only slower).
_RESOLVED: dict[tuple[Descriptor, str], _Resolved] = {}
_MAX_RESOLVED = 4096


def _resolved(descriptor: Descriptor, name: str) -> _Resolved:
    key = (descriptor, name)
    found = _RESOLVED.get(key)
    if found is not None:
        return found
    chain = _resolve(descriptor, name)
    names = [f.name for f in chain]
    oneofs = []
    for depth, member in enumerate(chain):
        oneof = member.containing_oneof
        if oneof is None or len(oneof.fields) < 2:
            continue  # not in a oneof, or proto3 `optional` (a synthetic one-member oneof)
        tracked = ".".join(names[:depth]) + "#" + oneof.name
        oneofs.append((tracked, ".".join(names[: depth + 1]), oneof.name))
    found = _Resolved(
        tuple(chain),
        ".".join(names),
        tuple(".".join(names[:depth]) for depth in range(1, len(names) + 1)),
        tuple(oneofs),
    )
    if len(_RESOLVED) < _MAX_RESOLVED:
        _RESOLVED[key] = found
    return found


def _apply_one(message: Message, name: str, value: str, state: _State) -> None:
    # The stubs type DESCRIPTOR as the pure-Python class or upb's twin, which share one interface.
    resolved = _resolved(cast("Descriptor", message.DESCRIPTOR), name)
    path = resolved.path
    for prefix in resolved.prefixes:
        if prefix in state.bound:
            raise QueryError(
                name,
                path,
                f"field {prefix!r} is set by the URL path or the request body; "
                "it cannot also be set by a query parameter",
            )
    chain = resolved.chain
    leaf = chain[-1]
    if not leaf.is_repeated:
        earlier = state.singular.get(path)
        if earlier is not None:
            again = "" if earlier == name else f" (first as {earlier!r})"
            raise QueryError(name, path, f"field {path!r} is not repeated but given twice{again}")
        state.singular[path] = name
    for tracked, member_path, oneof_name in resolved.oneofs:
        other = state.oneofs.setdefault(tracked, (member_path, name))
        if other[0] != member_path:
            raise QueryError(
                name,
                path,
                f"{member_path!r} and {other[0]!r} (from {other[1]!r}) are members of oneof "
                f"{oneof_name!r}; only one may be set",
            )
    target: Any = message
    for parent_field in chain[:-1]:
        target = getattr(target, parent_field.name)  # assigning below marks it present
    try:
        _set_leaf(target, leaf, value)
    except _Invalid as invalid:
        raise QueryError(name, path, f"invalid value {value!r}: {invalid.expected}") from None


def _resolve(descriptor: Descriptor, name: str) -> list[FieldDescriptor]:
    """The chain of fields that the dotted parameter ``name`` names, checked to be settable."""
    chain: list[FieldDescriptor] = []
    segments = name.split(".")
    current: Descriptor | None = descriptor
    for index, segment in enumerate(segments):
        so_far = ".".join([*(f.name for f in chain), segment])
        if current is None:
            parent = chain[-1]
            raise QueryError(name, so_far, f"field {parent.name!r} has no fields (it is a scalar)")
        found = _fields_by_any_name(current).get(segment)
        if found is None:
            what = "an empty field name" if not segment else f"no field {segment!r}"
            raise QueryError(name, so_far, f"{what} in {current.full_name}")
        chain.append(found)
        path = ".".join(f.name for f in chain)
        last = index == len(segments) - 1
        child = found.message_type
        if child is None:
            current = None
            continue
        if child.GetOptions().map_entry:
            raise QueryError(name, path, "map fields cannot be set from the query string")
        if found.is_repeated:
            raise QueryError(
                name, path, "repeated message fields cannot be set from the query string"
            )
        if child.full_name in _WELL_KNOWN:
            if not last:
                raise QueryError(
                    name,
                    path,
                    f"{path!r} is a {child.full_name}; give it as one value in its JSON form",
                )
            continue
        if child.full_name.startswith("google.protobuf."):
            raise QueryError(name, path, f"a {child.full_name} cannot be set by a query parameter")
        if last:
            example = child.fields[0].json_name if child.fields else "field"
            raise QueryError(
                name,
                path,
                f"{path!r} is a message; set its fields one by one, e.g. {name}.{example}",
            )
        current = child
    return chain


_FIELD_NAMES: dict[Descriptor, dict[str, FieldDescriptor]] = {}


def _fields_by_any_name(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """Fields of ``descriptor`` by proto name and by JSON name (proto3 JSON accepts both)."""
    names = _FIELD_NAMES.get(descriptor)
    if names is None:
        names = {}
        for f in descriptor.fields:
            names[f.json_name] = f
        for f in descriptor.fields:
            names[f.name] = f  # a proto name wins over another field's equal JSON name
        _FIELD_NAMES[descriptor] = names
    return names


def _set_leaf(target: Message, leaf: FieldDescriptor, value: str) -> None:
    child = leaf.message_type
    if child is None:
        converted = _scalar(leaf, value)
        if leaf.is_repeated:
            getattr(target, leaf.name).append(converted)
        else:
            setattr(target, leaf.name, converted)
        return
    sub = getattr(target, leaf.name)
    fresh = type(sub)()
    _WELL_KNOWN[child.full_name](fresh, value)
    sub.CopyFrom(fresh)  # marks it present even for a default value (0s, epoch, empty mask)


# --- scalars ----------------------------------------------------------------------------------

_T = FieldDescriptor
_INTEGERS: dict[int, tuple[str, int, int]] = {
    _T.TYPE_INT32: ("int32", -(2**31), 2**31 - 1),
    _T.TYPE_SINT32: ("sint32", -(2**31), 2**31 - 1),
    _T.TYPE_SFIXED32: ("sfixed32", -(2**31), 2**31 - 1),
    _T.TYPE_UINT32: ("uint32", 0, 2**32 - 1),
    _T.TYPE_FIXED32: ("fixed32", 0, 2**32 - 1),
    _T.TYPE_INT64: ("int64", -(2**63), 2**63 - 1),
    _T.TYPE_SINT64: ("sint64", -(2**63), 2**63 - 1),
    _T.TYPE_SFIXED64: ("sfixed64", -(2**63), 2**63 - 1),
    _T.TYPE_UINT64: ("uint64", 0, 2**64 - 1),
    _T.TYPE_FIXED64: ("fixed64", 0, 2**64 - 1),
}
# 21 digits hold every 64-bit value; longer text is out of range without parsing it.
_INTEGER = re.compile(r"-?[0-9]{1,21}")
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BASE64 = re.compile(r"[A-Za-z0-9+/\-_]*={0,2}")


def _scalar(leaf: FieldDescriptor, value: str) -> object:
    kind = leaf.type
    if kind == _T.TYPE_STRING:
        return _string(value)
    if kind == _T.TYPE_BOOL:
        return _bool(value)
    if kind in _INTEGERS:
        return _integer(value, *_INTEGERS[kind])
    if kind in (_T.TYPE_DOUBLE, _T.TYPE_FLOAT):
        return _float(value, single=kind == _T.TYPE_FLOAT)
    if kind == _T.TYPE_BYTES:
        return _bytes(value)
    if kind == _T.TYPE_ENUM:
        return _enum(leaf, value)
    raise _Invalid(f"fields of proto type {kind} cannot be set by query parameters")


def _string(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid("expected text that is valid Unicode") from None
    return value


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise _Invalid("expected true or false")


def _integer(value: str, type_name: str, low: int, high: int) -> int:
    expected = f"expected an {type_name}: a decimal integer from {low} to {high}"
    if not _INTEGER.fullmatch(value):
        raise _Invalid(expected)
    number = int(value)
    if not low <= number <= high:
        raise _Invalid(expected)
    return number


def _float(value: str, *, single: bool) -> float:
    type_name = "float" if single else "double"
    expected = f"expected a {type_name}: a decimal number, NaN, Infinity or -Infinity"
    specials = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    if value in specials:
        return specials[value]
    if not _NUMBER.fullmatch(value):
        raise _Invalid(expected)
    number = float(value)
    if math.isinf(number):
        raise _Invalid(f"{expected} (this one is out of the {type_name} range)")
    if single:
        try:
            struct.pack("<f", number)
        except OverflowError:
            raise _Invalid(f"{expected} (this one is out of the float range)") from None
    return number


def _bytes(value: str) -> bytes:
    expected = "expected base64 (standard or URL-safe alphabet, padding optional)"
    if not _BASE64.fullmatch(value):
        raise _Invalid(expected)
    body = value.rstrip("=")
    if (len(body) != len(value) and len(value) % 4) or len(body) % 4 == 1:
        raise _Invalid(expected)
    standard = body.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except binascii.Error:  # pragma: no cover - the checks above leave only decodable text
        raise _Invalid(expected) from None


def _enum(leaf: FieldDescriptor, value: str) -> int:
    enum_type = leaf.enum_type
    if enum_type is None:  # pragma: no cover - TYPE_ENUM fields always have an enum type
        raise _Invalid("expected an enum value")
    by_name = enum_type.values_by_name.get(value)
    if by_name is not None:
        return by_name.number
    names = ", ".join(v.name for v in enum_type.values)
    expected = f"expected one of {names} or an enum number"
    if not _INTEGER.fullmatch(value):
        raise _Invalid(expected)
    number = int(value)
    if not -(2**31) <= number < 2**31:
        raise _Invalid(expected)
    if enum_type.is_closed and number not in enum_type.values_by_number:
        raise _Invalid(f"{expected} ({enum_type.full_name} is closed: unknown numbers are refused)")
    return number


# --- well-known types -------------------------------------------------------------------------

_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_DURATION = re.compile(r"-?[0-9]{1,12}(?:\.[0-9]{1,9})?s")
_MASK_NAME = re.compile(r"\*|[A-Za-z_][A-Za-z0-9_]*")
_UPPER = re.compile(r"[A-Z]")


def _timestamp(target: Message, value: str) -> None:
    expected = "expected an RFC 3339 timestamp such as 2024-01-02T03:04:05.678Z or with an offset"
    # json_format's own parser also takes "+1:00", "+01:60" and "05.Z": check the shape first.
    if not _TIMESTAMP.fullmatch(value):
        raise _Invalid(expected)
    try:
        cast("timestamp_pb2.Timestamp", target).FromJsonString(value.upper())
    except ValueError:  # day out of range for the month, or outside years 0001-9999
        raise _Invalid(f"{expected} (this one names no instant from 0001 to 9999)") from None


def _duration(target: Message, value: str) -> None:
    expected = "expected a duration in seconds with an 's' suffix, such as 3.5s"
    if not _DURATION.fullmatch(value):
        raise _Invalid(expected)
    try:
        cast("duration_pb2.Duration", target).FromJsonString(value)
    except ValueError:
        raise _Invalid(f"{expected}, within +-315576000000s") from None


def _field_mask(target: Message, value: str) -> None:
    expected = (
        "expected comma-separated field paths, each dot-separated names in lowerCamelCase "
        "or snake_case (or *)"
    )
    if not value:
        return
    paths: list[str] = []
    for raw_path in value.split(","):
        names = raw_path.strip().split(".")
        if not all(_MASK_NAME.fullmatch(name) for name in names):
            raise _Invalid(expected)
        paths.append(".".join(_snake(name) for name in names))
    cast("field_mask_pb2.FieldMask", target).paths.extend(paths)


def _snake(name: str) -> str:
    """``displayName`` -> ``display_name``; a name with ``_`` is snake_case already.

    Only lowerCamelCase is converted: a name that does not start with a lowercase letter (``*``,
    an unusual proto name) is kept, and the service reports it if no such field exists.
    """
    if "_" in name or not name[:1].islower():
        return name
    return _UPPER.sub(lambda upper: "_" + upper.group().lower(), name)


def _wrapper(target: Message, value: str) -> None:
    inner = cast("FieldDescriptor", target.DESCRIPTOR.fields_by_name["value"])
    setattr(target, "value", _scalar(inner, value))  # noqa: B010 - wrappers share no base type


_WELL_KNOWN: dict[str, Callable[[Message, str], None]] = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    "google.protobuf.FieldMask": _field_mask,
    **dict.fromkeys(schema.WRAPPER_TYPES, _wrapper),
}
