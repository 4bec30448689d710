"""Hypothesis strategies for arbitrary protobuf messages and their JSON forms, built by walking
descriptors (no hand-kept field lists).

:func:`messages` fills every kind of field the descriptors declare: scalars at their extremes
(int32/int64/uint64 bounds, ±0.0, subnormals, the largest floats, NaN and infinities), hostile
Unicode (astral plane, combining marks, right-to-left text, NUL), empty and huge (~300 KB)
strings, bytes, open enums with numbers they do not name, Timestamp and Duration at and beyond
their valid ranges, Struct/Value/ListValue trees, maps, Any, repeated fields from empty to past
the server's limits, every branch of every oneof. Nesting is bounded. Hypothesis draws the
first choices of a run far from uniformly, so deep oneof branches would show up only by luck:
a strategy can instead *focus* on one branch, forcing the shortest field path to it, and tests
sweep the focus over every branch :func:`oneof_branches` finds.

:func:`json_documents` turns such messages into request bodies as proto3 JSON
(``json_format``) and mutates some of them with what only JSON can carry: lone surrogate escapes,
invalid UTF-8, numbers as strings or beyond their type, non-standard literals (``NaN``, ``1e400``),
unknown enum names, other timestamp and duration spellings, unknown fields, nulls, two members
of one oneof.

Field behaviours (google/api/field_behavior.proto) are read from the descriptors here too, on
purpose independently of ``ces_eval.contract.fields``: the tests check the server against them.
The ranges of the scalar types, Timestamp and Duration are written here from protobuf's own
definitions (descriptor.proto, timestamp.proto, duration.proto) for the same reason. What is the
server's choice is read from it, so that examples stand at its edges wherever they move: its
limits (``ces_eval.contract.limits``: string length, repeated fields and maps, Struct depth) and
the well-known types with a JSON form of their own (``ces_eval.contract.schema``).
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from google.api import field_behavior_pb2
from google.protobuf import (
    any_pb2,
    descriptor,
    duration_pb2,
    json_format,
    struct_pb2,
    timestamp_pb2,
)
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ces_eval.contract import limits, schema
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2

__all__ = [
    "FLOAT_MAX",
    "Raw",
    "branches_in",
    "clear_output_only",
    "encode_json",
    "json_documents",
    "messages",
    "oneof_branches",
    "parse_json",
]

_F = descriptor.FieldDescriptor
OUTPUT_ONLY = field_behavior_pb2.OUTPUT_ONLY
REQUIRED = field_behavior_pb2.REQUIRED

TIMESTAMP = timestamp_pb2.Timestamp.DESCRIPTOR.full_name
DURATION = duration_pb2.Duration.DESCRIPTOR.full_name
ANY = any_pb2.Any.DESCRIPTOR.full_name
STRUCT = struct_pb2.Struct.DESCRIPTOR.full_name
VALUE = struct_pb2.Value.DESCRIPTOR.full_name

# The valid ranges of google/protobuf/timestamp.proto and duration.proto.
TIMESTAMP_MIN = -62_135_596_800  # 0001-01-01T00:00:00Z
TIMESTAMP_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z
DURATION_MAX = 315_576_000_000  # ±10,000 years
NANOS = 999_999_999
FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
INT32 = (-(2**31), 2**31 - 1)

_INTEGER_RANGES = {
    _F.TYPE_INT32: INT32,
    _F.TYPE_SINT32: INT32,
    _F.TYPE_SFIXED32: INT32,
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_FIXED64: (0, 2**64 - 1),
}
_INTEGER_EDGES = (
    0,
    1,
    -1,
    2**31 - 1,
    -(2**31),
    2**31,
    2**32 - 1,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
)
_DOUBLE_EDGES = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.1,
    5e-324,  # the smallest subnormal
    -5e-324,
    2.2250738585072014e-308,  # the smallest normal
    1.7976931348623157e308,
    -1.7976931348623157e308,
    2.0**53 + 2,
    1e16,
    math.inf,
    -math.inf,
    math.nan,
)
_FLOAT_EDGES = (
    0.0,
    -0.0,
    0.5,
    1.401298464324817e-45,  # the smallest float32 subnormal
    -1.401298464324817e-45,
    1.1754943508222875e-38,  # the smallest float32 normal
    FLOAT_MAX,
    -FLOAT_MAX,
    16_777_217.0,  # 2**24 + 1: rounds in float32
    math.inf,
    -math.inf,
    math.nan,
)
_SPECIAL_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\t\r\n",
    "\u2028\u2029",
    '"\\/',
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",  # astral plane (Mathematical Alphanumeric Symbols)
    "👩\u200d👩\u200d👧\u200d👦",  # a ZWJ emoji sequence
    "e\u0301\u0302\u0303\u0304",  # combining marks
    "\u202eevil\u202c",  # right-to-left override
    "שלום עולם",
    "مرحبا بالعالم",
    "\ufeffBOM",
    "\ufffe\uffff",
    "\U0010ffff",
    "ǅİı",
    "%2F%00../",
    "null",
    "{}",
)
# Characters of every category protobuf strings may hold (UTF-8: no surrogates).
_TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
# Values of REQUIRED scalar fields when the first draw left them empty (unset, for proto3).
_FILLED: dict[int, st.SearchStrategy[Any]] = {
    _F.TYPE_STRING: st.text(st.characters(codec="utf-8"), min_size=1, max_size=24),
    _F.TYPE_BYTES: st.binary(min_size=1, max_size=8),
    _F.TYPE_BOOL: st.just(True),
}
# Huge strings: at, around and past the server's limit (in code points).
_HUGE_LENGTHS = (
    65_536,
    limits.MAX_STRING_CHARS - 1,
    limits.MAX_STRING_CHARS,
    limits.MAX_STRING_CHARS + 1,
    limits.MAX_STRING_CHARS + limits.MAX_STRING_CHARS // 8,
)
_HUGE_UNITS = ("x", "é", "𝔘", "a\x00")

# Messages an Any may hold: types the server knows (its error details, well-known types and
# its own API), so their JSON form can be rendered.
_ANY_PAYLOADS: tuple[type[Message], ...] = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.ResourceInfo,
    duration_pb2.Duration,
    timestamp_pb2.Timestamp,
    struct_pb2.Struct,
    struct_pb2.Value,
    content_pb2.ToolCall,
)


# -- descriptors ------------------------------------------------------------------------------


@cache
def _behaviors(field: descriptor.FieldDescriptor) -> frozenset[int]:
    return frozenset(field.GetOptions().Extensions[field_behavior_pb2.field_behavior])


def is_map(field: descriptor.FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _target(field: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
    """The message type a field holds (a map's value type), or None."""
    if is_map(field):
        value: descriptor.Descriptor | None = field.message_type.fields_by_name[
            "value"
        ].message_type
        return value
    return field.message_type


def _real_oneof(field: descriptor.FieldDescriptor) -> descriptor.OneofDescriptor | None:
    """The oneof of ``field``, unless it is the synthetic oneof of a proto3 ``optional``."""
    oneof = field.containing_oneof
    if oneof is None or (len(oneof.fields) == 1 and oneof.name == f"_{field.name}"):
        return None
    return oneof


def _branch(field: descriptor.FieldDescriptor) -> str:
    oneof = field.containing_oneof
    return f"{field.containing_type.full_name}.{oneof.name}.{field.name}"


@cache
def oneof_branches(
    root: descriptor.Descriptor, through_output_only: bool
) -> Mapping[str, tuple[descriptor.FieldDescriptor, ...]]:
    """Every oneof branch reachable from ``root`` (``<message>.<oneof>.<field>``) with the
    shortest field path that sets it (breadth first). Without ``through_output_only`` the
    paths avoid OUTPUT_ONLY fields: branches a caller can write."""
    paths: dict[str, tuple[descriptor.FieldDescriptor, ...]] = {}
    seen = {root}
    queue: deque[tuple[descriptor.Descriptor, tuple[descriptor.FieldDescriptor, ...]]] = deque(
        [(root, ())]
    )
    while queue:
        message, path = queue.popleft()
        for field in message.fields:
            if not through_output_only and OUTPUT_ONLY in _behaviors(field):
                continue
            if _real_oneof(field) is not None:
                paths.setdefault(_branch(field), (*path, field))
            target = _target(field)
            if target is not None and target not in seen and target.full_name != ANY:
                seen.add(target)
                queue.append((target, (*path, field)))
    return paths


def branches_in(message: Message) -> set[str]:
    """The oneof branches set anywhere in ``message`` (Any payloads not unpacked)."""
    found: set[str] = set()
    for field, value in message.ListFields():
        if _real_oneof(field) is not None:
            found.add(_branch(field))
        if field.message_type is None:
            continue
        if is_map(field):
            if _target(field) is not None:
                for item in value.values():
                    found |= branches_in(item)
        elif field.is_repeated:
            for item in value:
                found |= branches_in(item)
        else:
            found |= branches_in(value)
    return found


@cache
def _has_behaviors(message: descriptor.Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    """Whether any field of ``message`` or below carries a field behaviour."""
    if message.full_name in seen:
        return False
    seen = seen | {message.full_name}
    for field in message.fields:
        if _behaviors(field):
            return True
        target = _target(field)
        if target is not None and _has_behaviors(target, seen):
            return True
    return False


def clear_output_only(message: Message) -> None:
    """Remove every OUTPUT_ONLY field of ``message`` and below, in place."""
    for field, value in message.ListFields():
        if OUTPUT_ONLY in _behaviors(field):
            message.ClearField(field.name)
            continue
        target = _target(field)
        if target is None or not _has_behaviors(target):
            continue
        if is_map(field):
            items: Any = value.values()
        elif field.is_repeated:
            items = value
        else:
            items = (value,)
        for item in items:
            clear_output_only(item)


# -- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Profile:
    max_depth: int
    output_only: bool
    json_safe: bool
    overrides: Mapping[str, st.SearchStrategy[Any]]


class _Builder:
    """Fills one message from ``draw``. Chances are drawn as integers that shrink towards
    "leave optional fields unset, set REQUIRED fields and oneofs", so failing examples shrink
    to small messages the server would accept but for the value at fault."""

    def __init__(self, draw: st.DrawFn, profile: _Profile) -> None:
        self._draw = draw
        self._profile = profile

    def _chance(self, percent: int) -> bool:
        return self._draw(st.integers(0, 99)) >= 100 - percent

    def _count(self, at_least: int, limit: int) -> int:
        """How many elements a repeated field or map gets (``limit``: the server's)."""
        roll = self._draw(st.integers(0, 999))
        if roll < 500:
            n = 0
        elif roll < 850:
            n = 1
        elif roll < 950:
            n = 2
        elif roll < 990:
            n = self._draw(st.integers(3, 5))
        elif roll < 998:
            n = self._draw(st.integers(6, 12))
        else:
            n = self._draw(st.sampled_from((limit, limit + 1)))  # at and past the limit
        return max(n, at_least)

    # scalars

    def _integer(self, low: int, high: int) -> int:
        roll = self._draw(st.integers(0, 99))
        if roll < 50:
            return self._draw(st.integers(max(low, 0), min(high, 100)))
        if roll < 80:
            return self._draw(st.integers(low, high))
        return self._draw(st.sampled_from([e for e in _INTEGER_EDGES if low <= e <= high]))

    def _float(self, width: int) -> float:
        roll = self._draw(st.integers(0, 99))
        if roll < 35:
            return self._draw(st.floats(0, 4, width=width))
        if roll < 70:
            return self._draw(st.floats(width=width))
        edges = _FLOAT_EDGES if width == 32 else _DOUBLE_EDGES
        return self._draw(st.sampled_from(edges))

    def _string(self) -> str:
        roll = self._draw(st.integers(0, 999))
        if roll < 550:
            return self._draw(_TEXT)
        if roll < 850:
            return self._draw(st.sampled_from(_SPECIAL_STRINGS))
        if roll < 996:
            return self._draw(st.text(st.characters(codec="utf-8"), max_size=200))
        unit = self._draw(st.sampled_from(_HUGE_UNITS))
        return unit * (self._draw(st.sampled_from(_HUGE_LENGTHS)) // len(unit))

    def _bytes(self) -> bytes:
        roll = self._draw(st.integers(0, 999))
        if roll < 800:
            return self._draw(st.binary(max_size=32))
        if roll < 996:
            return self._draw(st.sampled_from((b"", b"\x00", b"\xff\xfe\xfd", bytes(range(256)))))
        return b"\x00\xff" * 150_000

    def _enum(self, enum: descriptor.EnumDescriptor) -> int:
        known = sorted(value.number for value in enum.values)
        if enum.is_closed or not self._chance(15):
            return self._draw(st.sampled_from(known))
        # Open enums keep numbers they do not name.
        return self._draw(
            st.one_of(
                st.sampled_from((known[-1] + 1, -1, *INT32)),
                st.integers(*INT32).filter(lambda n: n not in known),
            )
        )

    def scalar(self, field: descriptor.FieldDescriptor) -> object:  # noqa: PLR0911 - one return per field kind
        override = self._profile.overrides.get(field.full_name)
        if override is not None:
            return self._draw(override)
        if field.enum_type is not None:
            return self._enum(field.enum_type)
        kind = field.type
        if kind in _INTEGER_RANGES:
            return self._integer(*_INTEGER_RANGES[kind])
        if kind in (_F.TYPE_FLOAT, _F.TYPE_DOUBLE):
            return self._float(32 if kind == _F.TYPE_FLOAT else 64)
        if kind == _F.TYPE_BOOL:
            return self._draw(st.booleans())
        if kind == _F.TYPE_STRING:
            return self._string()
        if kind == _F.TYPE_BYTES:
            return self._bytes()
        raise AssertionError(f"unexpected field type {kind} of {field.full_name}")

    # well-known types

    def _seconds(self, low: int, high: int) -> int:
        roll = self._draw(st.integers(0, 99))
        if roll < 60:
            return self._draw(st.integers(low, high))
        if roll < 80 or self._profile.json_safe:
            return self._draw(st.sampled_from((low, high, 0, -1, 1)))
        return self._draw(st.sampled_from((low - 1, high + 1, -(2**63), 2**63 - 1)))

    def _timestamp(self, message: Any) -> None:
        message.seconds = self._seconds(TIMESTAMP_MIN, TIMESTAMP_MAX)
        message.nanos = self._nanos(0)

    def _nanos(self, sign: int) -> int:
        roll = self._draw(st.integers(0, 99))
        if roll < 80 or self._profile.json_safe:
            nanos = self._draw(st.sampled_from((0, NANOS)) if roll < 20 else st.integers(0, NANOS))
            return -nanos if sign < 0 else nanos
        return self._draw(st.sampled_from((-1, NANOS + 1, *INT32)))

    def _duration(self, message: Any) -> None:
        message.seconds = self._seconds(-DURATION_MAX, DURATION_MAX)
        message.nanos = self._nanos(-1 if message.seconds < 0 else 1)

    def _any(self, message: Any, depth: int) -> None:
        roll = self._draw(st.integers(0, 99))
        if roll < 70 or self._profile.json_safe:
            if roll < 10:
                return  # an empty Any
            payload_class = self._draw(st.sampled_from(_ANY_PAYLOADS))
            payload = payload_class()
            self.fill(payload, depth + 1, ())
            if self._profile.json_safe:
                _make_json_safe(payload)
            prefix = self._draw(st.sampled_from(("type.googleapis.com/", "example.com/a/b/")))
            message.Pack(payload, type_url_prefix=prefix)
            return
        message.type_url = self._draw(
            st.sampled_from(("type.googleapis.com/no.such.Type", "", "/", "not a url"))
        )
        message.value = self._bytes()

    def _deep_struct(self, message: Any) -> None:
        """A chain of Structs around the server's depth limit and within protobuf's (100 message
        levels; a Struct level costs 3: Struct, map entry, Value)."""
        depth = limits.MAX_STRUCT_DEPTH
        level = message
        for _ in range(self._draw(st.sampled_from((depth - 4, depth, depth + 1, depth + 4)))):
            level = level.fields["a"].struct_value

    # messages

    def fill(
        self,
        message: Any,
        depth: int,
        path: tuple[descriptor.FieldDescriptor, ...],
    ) -> None:
        """Set fields of ``message`` (``depth`` levels below the root); ``path`` is the field
        path still to force towards the focused oneof branch."""
        name = message.DESCRIPTOR.full_name
        if name == TIMESTAMP:
            self._timestamp(message)
            return
        if name == DURATION:
            self._duration(message)
            return
        if name == ANY:
            self._any(message, depth)
            return
        if name == STRUCT and not path and depth <= 4 and self._draw(st.integers(0, 999)) >= 990:
            self._deep_struct(message)
            return
        forced = path[0] if path else None
        chosen: dict[str, descriptor.FieldDescriptor | None] = {}
        for field in message.DESCRIPTOR.fields:
            oneof = _real_oneof(field)
            if oneof is None or oneof.name in chosen:
                continue
            if forced is not None and forced.containing_oneof is oneof:
                chosen[oneof.name] = forced
            elif self._chance(15):
                chosen[oneof.name] = None
            else:
                chosen[oneof.name] = self._draw(st.sampled_from(tuple(oneof.fields)))
        for field in message.DESCRIPTOR.fields:
            oneof = _real_oneof(field)
            behaviors = _behaviors(field)
            is_forced = field is forced
            if oneof is not None:
                wanted = chosen[oneof.name] is field
            elif is_forced:
                wanted = True
            elif OUTPUT_ONLY in behaviors:
                wanted = self._profile.output_only and self._chance(8)
            elif REQUIRED in behaviors:
                wanted = not self._chance(3)  # a few inputs leave a REQUIRED field empty
            else:
                wanted = self._chance(30)
            if not wanted:
                continue
            if _target(field) is not None and depth >= self._profile.max_depth and not is_forced:
                continue
            self._set(message, field, depth, path[1:] if is_forced else ())

    def _set(
        self,
        message: Any,
        field: descriptor.FieldDescriptor,
        depth: int,
        path: tuple[descriptor.FieldDescriptor, ...],
    ) -> None:
        target = _target(field)
        forced = 1 if path or _real_oneof(field) is not None else 0
        if is_map(field):
            entries = getattr(message, field.name)
            key_field = field.message_type.fields_by_name["key"]
            for index in range(self._count(forced, limits.MAX_MAP_ENTRIES)):
                key = self.scalar(key_field)
                if target is None:
                    entries[key] = self.scalar(field.message_type.fields_by_name["value"])
                else:
                    self.fill(entries[key], depth + 1, path if index == 0 else ())
            return
        if field.is_repeated:
            items = getattr(message, field.name)
            count = self._count(max(forced, REQUIRED in _behaviors(field)), limits.MAX_REPEATED)
            if count >= limits.MAX_REPEATED:
                # Past the limits: copies of one short value or of an empty message after the
                # first (cheap to draw, and a few MB at most).
                if target is None:
                    value = self.scalar(field)
                    if isinstance(value, str | bytes):
                        value = value[:64]
                    items.extend([value] * count)
                else:
                    self.fill(items.add(), depth + 1, path)
                    for _ in range(count - 1):
                        items.add()
                return
            for index in range(count):
                if target is None:
                    items.append(self.scalar(field))
                else:
                    self.fill(items.add(), depth + 1, path if index == 0 else ())
            return
        if target is None:
            value = self.scalar(field)
            if not value and REQUIRED in _behaviors(field) and not self._chance(5):
                value = self._draw(_FILLED[field.type]) if field.type in _FILLED else 1
            setattr(message, field.name, value)
            return
        child = getattr(message, field.name)
        child.SetInParent()
        self.fill(child, depth + 1, path)


def messages(
    message_class: type[Message],
    *,
    focus: str | None = None,
    max_depth: int = 9,
    output_only: bool = True,
    json_safe: bool = False,
    overrides: Mapping[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[Message]:
    """Arbitrary ``message_class`` messages.

    ``focus``: a oneof branch (a key of :func:`oneof_branches`) that every example sets, with
    the fields on the shortest path to it (avoiding OUTPUT_ONLY fields where it can).
    ``output_only``: also set OUTPUT_ONLY fields (a server must ignore them on input).
    ``json_safe``: only values proto3 JSON can carry (finite Struct numbers, in-range
    Timestamp/Duration, Any of known types), for bodies built with ``json_format``.
    ``overrides``: strategies for some scalar fields, by full name (values that must agree with
    the request's context, such as resource names under its parent).
    """
    profile = _Profile(max_depth, output_only, json_safe, dict(overrides or {}))
    path: tuple[descriptor.FieldDescriptor, ...] = ()
    if focus:
        # A path a caller can write when there is one, else one through OUTPUT_ONLY fields.
        writable = oneof_branches(message_class.DESCRIPTOR, through_output_only=False)
        path = writable.get(focus) or oneof_branches(message_class.DESCRIPTOR, True)[focus]

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = message_class()
        _Builder(draw, profile).fill(message, 0, path)
        if json_safe:
            _make_json_safe(message)
        return message

    return build()


FIELD_MASK = "google.protobuf.FieldMask"
_MASK_UNSAFE = re.compile(r"[^a-z0-9.]")


def _make_json_safe(message: Message) -> None:
    """Replace the non-finite numbers of Struct values (JSON has no form for them) by 0, and
    keep of each FieldMask path only lowercase letters, digits and dots (proto3 JSON writes a
    path in lowerCamelCase: an uppercase letter, or an underscore before anything but a
    lowercase letter, has no form there)."""
    if message.DESCRIPTOR.full_name == FIELD_MASK:
        paths = [_MASK_UNSAFE.sub("", path.lower()) for path in message.paths]  # type: ignore[attr-defined]
        message.ClearField("paths")
        message.paths.extend(paths)  # type: ignore[attr-defined]
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if is_map(field):
            items: Any = value.values() if _target(field) is not None else ()
        elif field.is_repeated:
            items = value
        else:
            items = (value,)
        for item in items:
            _make_json_safe(item)
    if (
        message.DESCRIPTOR.full_name == VALUE
        and message.WhichOneof("kind") == "number_value"
        and not math.isfinite(message.number_value)  # type: ignore[attr-defined]
    ):
        message.number_value = 0.0  # type: ignore[attr-defined]


# -- JSON -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text written as is by :func:`encode_json` (what ``json.dumps`` will not write)."""

    text: str


def encode_json(document: object, ascii_only: bool) -> bytes:
    """``document`` as JSON bytes. Strings keep lone surrogates: as ``\\udXXX`` escapes when
    ``ascii_only``, else as the (invalid) UTF-8 of the surrogate itself."""

    def text(value: object) -> str:
        if isinstance(value, Raw):
            return value.text
        if isinstance(value, dict):
            return "{" + ",".join(f"{text(k)}:{text(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ",".join(text(v) for v in value) + "]"
        return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)

    return text(document).encode("utf-8", "surrogatepass")


@dataclass
class _Slot:
    """One value in a JSON document: ``container[key]``, a value of ``field``."""

    container: Any
    key: Any
    field: descriptor.FieldDescriptor


def _slots(message: descriptor.Descriptor, document: object) -> Iterator[_Slot]:
    """Every field value in ``document`` (a JSON form of ``message``), depth first; the values
    of well-known types with a JSON form of their own are not entered."""
    if not isinstance(document, dict) or message.full_name in _OPAQUE:
        return
    by_key = {f.json_name: f for f in message.fields} | {f.name: f for f in message.fields}
    for key, value in list(document.items()):
        field = by_key.get(key)
        if field is None or value is None:
            continue
        target = _target(field)
        if is_map(field) and isinstance(value, dict):
            for item_key in value:
                yield _Slot(value, item_key, field.message_type.fields_by_name["value"])
                if target is not None:
                    yield from _slots(target, value[item_key])
        elif field.is_repeated and isinstance(value, list):
            for index in range(len(value)):
                yield _Slot(value, index, field)
                if target is not None:
                    yield from _slots(target, value[index])
        else:
            yield _Slot(document, key, field)
            if target is not None:
                yield from _slots(target, value)


# Well-known types whose proto3 JSON form is no object of their fields: their values are not
# entered (Empty's is one, of no fields).
_OPAQUE = schema.SPECIAL_JSON_TYPES | {"google.protobuf.Empty"}

_TIMESTAMP_SPELLINGS = (
    "1970-01-01T00:00:00Z",
    "1970-01-01T00:00:00.1Z",
    "1970-01-01T00:00:00.123456789Z",
    "1970-01-01T05:30:00+05:30",
    "1969-12-31T23:59:59.999999999-00:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999999Z",
    "10000-01-01T00:00:00Z",
    "0000-12-31T23:59:59Z",
    "1972-06-30T23:59:60Z",
    "1970-01-01t00:00:00z",
    "1970-01-01 00:00:00Z",
    "1970-01-01T00:00:00",
    "",
)
_DURATION_SPELLINGS = (
    "0s",
    "1.5s",
    "-0.000000001s",
    "315576000000s",
    "-315576000000.999999999s",
    "315576000001s",
    "1.0000000001s",
    "1",
    "s",
    "1e3s",
    "",
)
_NUMBER_SPELLINGS = (
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("1e400"),
    Raw("-1e400"),
    Raw("1" + "0" * 400),
    Raw("1E2"),
    Raw("-0"),
    "NaN",
    "Infinity",
    "-Infinity",
    "1e39",
    "3.5",
    " 1",
    "0x10",
    2**64,
    1.5,
    True,
)
_INTEGER_SPELLINGS = (
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551616",
    "1e1",
    "1.0",
    " 7",
    1.0,
    1.5,
    1e3,
    2**63,
    -(2**64),
    Raw("1e400"),
    Raw("NaN"),
    True,
    "",
)
_STRING_SPELLINGS = ("\ud800", "a\udfffb", "\udc00\ud800", 7, True, ["list"], {"an": "object"})
_BYTES_SPELLINGS = ("_-8", "AAE", "AAE=", "AA\nE=", "!!", "====", "YQ==YQ==", 5)


def _bytes_spellings(value: object) -> list[object]:
    """Other base64 spellings of a standard-base64 ``value``: URL-safe, unpadded."""
    if not isinstance(value, str):
        return []
    decoded = base64.b64decode(value)
    return [
        base64.urlsafe_b64encode(decoded).decode(),
        base64.urlsafe_b64encode(decoded).decode().rstrip("="),
    ]


def _replacements(slot: _Slot) -> list[object]:  # noqa: PLR0911 - one return per field kind
    """Values to put in ``slot`` instead of what is there."""
    field = slot.field
    current = slot.container[slot.key]
    name = field.message_type.full_name if field.message_type is not None else ""
    if name == TIMESTAMP:
        return [*_TIMESTAMP_SPELLINGS, 0]
    if name == DURATION:
        return [*_DURATION_SPELLINGS, 1.5]
    if name in {STRUCT, VALUE}:
        deep: object = 1
        for _ in range(40):
            deep = {"a": deep}
        return [*_NUMBER_SPELLINGS, None, [Raw("NaN")], {"n": Raw("1e400")}, deep, "\ud800"]
    if name:
        return [None, [], "text", {"unknownField": 1}, {"@type": "x"}]
    if field.enum_type is not None:
        return ["NOT_A_VALUE", "", 1, 2**31, -1, 1.5, None, str(current).lower()]
    if field.type in (_F.TYPE_FLOAT, _F.TYPE_DOUBLE):
        return list(_NUMBER_SPELLINGS)
    if field.type in _INTEGER_RANGES:
        return list(_INTEGER_SPELLINGS)
    if field.type == _F.TYPE_BOOL:
        return ["true", 1, 0, "false", None]
    if field.type == _F.TYPE_BYTES:
        return [*_bytes_spellings(current), *_BYTES_SPELLINGS]
    return list(_STRING_SPELLINGS)


def _message_nodes(message: descriptor.Descriptor, document: object) -> list[tuple[Any, Any]]:
    """(descriptor, JSON object) of every message in ``document`` with fields of its own."""
    nodes: list[tuple[Any, Any]] = []
    if isinstance(document, dict) and message.full_name not in _OPAQUE:
        nodes.append((message, document))
        for slot in _slots(message, document):
            target = _target(slot.field)
            value = slot.container[slot.key]
            if target is not None and isinstance(value, dict) and target.full_name not in _OPAQUE:
                nodes.append((target, value))
    return nodes


def _mutate(draw: st.DrawFn, message: descriptor.Descriptor, document: dict[str, Any]) -> str:
    """Change ``document`` in place in one of the ways only JSON allows; what was done."""
    kind = draw(st.sampled_from(("value", "value", "value", "unknown", "null", "second-oneof")))
    if kind == "value":
        slots = list(_slots(message, document))
        if slots:
            slot = draw(st.sampled_from(slots))
            replacement = draw(st.sampled_from(_replacements(slot)))
            slot.container[slot.key] = replacement
            return f"value of {slot.field.full_name} replaced by {replacement!r}"[:200]
    owner, node = draw(st.sampled_from(_message_nodes(message, document)))
    if kind == "unknown":
        node[draw(st.sampled_from(("unknownField", "", "@type", "display_name ")))] = 1
        return f"unknown field in {owner.full_name}"
    if kind == "null":
        for field in owner.fields:
            node.setdefault(field.json_name, None)
        return f"every field of {owner.full_name} null"
    oneofs = [o for o in owner.oneofs if len(o.fields) > 1]
    if not oneofs:
        return "nothing"
    oneof = draw(st.sampled_from(oneofs))
    for field in oneof.fields[:2]:
        node.setdefault(field.json_name, {} if field.message_type is not None else "x")
    return f"two members of {oneof.full_name}"


def json_documents(
    source: st.SearchStrategy[Message], message: descriptor.Descriptor
) -> st.SearchStrategy[tuple[bytes, str]]:
    """Request bodies from ``source`` (messages of type ``message``, drawn with
    ``json_safe``): proto3 JSON with lowerCamelCase or proto field names, escaped or raw UTF-8,
    mutated in about four of ten (see :func:`_mutate`). Each comes with a note of the mutation
    ("" for none)."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[bytes, str]:
        document = json_format.MessageToDict(
            draw(source), preserving_proto_field_name=draw(st.booleans())
        )
        note = ""
        if draw(st.integers(0, 9)) >= 6:
            note = _mutate(draw, message, document)
        return encode_json(document, ascii_only=draw(st.booleans())), note

    return build()


def _clamp_floats(message: descriptor.Descriptor, document: object) -> None:
    """Replace float (32-bit) values that round to ±FLOAT_MAX but exceed it as doubles (the
    shortest spelling of FLOAT_MAX, ``3.4028235e+38``, is such a value) by ±FLOAT_MAX:
    json_format refuses them as "too large" although they are the float it printed."""
    for slot in _slots(message, document):
        value = slot.container[slot.key]
        if slot.field.type != _F.TYPE_FLOAT or isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and abs(number) > FLOAT_MAX:
            try:
                struct.pack("<f", number)
            except OverflowError:
                continue  # beyond float32: let json_format refuse it
            slot.container[slot.key] = math.copysign(FLOAT_MAX, number)


def parse_json(message_class: type[Message], data: bytes | str) -> Message:
    """A JSON document as ``message_class``, as json_format parses it, except that floats
    printed for ±FLOAT_MAX are read back as such (see :func:`_clamp_floats`)."""
    document = json.loads(data)
    _clamp_floats(message_class.DESCRIPTOR, document)
    message = message_class()
    json_format.ParseDict(document, message)
    return message


def generated_examples(count: int) -> settings:
    """Hypothesis settings for tests over generated messages: the same ``count`` examples on
    every run (a suite that passes once passes again), no deadline and no size complaints
    (each can hold strings of hundreds of kilobytes)."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
