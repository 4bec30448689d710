"""Proto3 JSON printing, exactly as json_format prints, at about half its cost.

``json_format.MessageToDict`` decides how to print every value as it meets it: for each field of
each message it asks the descriptor whether the field is a map, repeated, which C++ type it
has, whether its message is a well-known type (by comparing names), and so on. Rendering a
few-kilobyte evaluation that way is a fifth of a REST request's CPU time. This module asks
those questions once per message type: :func:`to_dict` compiles, from a type's descriptor, a
table from each field to its JSON name and a converter chosen for its kind, keeps it (one
table per descriptor and enum encoding) and afterwards only walks ``ListFields()`` through it.

The value tree it builds is json_format's own, member for member and in the same order (field
number order, as ``ListFields()`` gives them; a map's entries in the order the map iterates),
so ``json.dumps`` of it gives the same text byte for byte (:func:`to_json`). Writing the JSON
text directly in Python was measured too: a few percent faster than handing the tree to
``json.dumps`` (whose encoder is C), not worth a second copy of its string escaping and number
formatting.

Timestamp and Duration are written by code of this module, character for character what their
``ToJsonString`` writes (which costs 2 to 3 µs each: a datetime, float arithmetic). What is
rare or fiddly is left to protobuf itself: an ``Any`` (its type URL is resolved through the
descriptor pool) is printed by ``MessageToDict``, a FieldMask by its ``ToJsonString``. Custom
enum value names (the ``pb.enumvalue.json`` option) are looked up when an enum is compiled: a
file whose values carry the option imports the file declaring it, which is then known.
Whenever the printer meets what it does not handle (an extension, an unnamed number of a closed
enum, a non-finite Struct number, a Timestamp or Duration out of range, any error at all) the
whole message is printed by json_format instead, which then raises what it raises, or prints.
"""

from __future__ import annotations

import binascii
import datetime
import functools
import json
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import descriptor, descriptor_pool, json_format
from google.protobuf.internal import type_checkers

if TYPE_CHECKING:
    from google.protobuf import duration_pb2, field_mask_pb2, struct_pb2, timestamp_pb2
    from google.protobuf.message import Message

__all__ = ["to_dict", "to_json"]

_F = descriptor.FieldDescriptor
_Convert = Callable[[Any], object]
# A message type's printer: the message → its JSON value (a dict for most types).
_Render = Callable[[Any], object]
# Per field: its JSON name and the converter of its value (None: the value as it is).
_Table = dict[descriptor.FieldDescriptor, tuple[str, _Convert | None]]

_WRAPPERS_FILE = "google/protobuf/wrappers.proto"
_NULL_VALUE = "google.protobuf.NullValue"
# The ranges google/protobuf/timestamp.proto and duration.proto define (and ToJsonString checks).
_TIMESTAMP_SECONDS_MIN = -62_135_596_800  # 0001-01-01T00:00:00Z
_TIMESTAMP_SECONDS_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z
_DURATION_SECONDS_MAX = 315_576_000_000
_NANOS_PER_SECOND = 1_000_000_000
_EPOCH = datetime.date(1970, 1, 1)
# json_format's custom enum value names (an option of enum values), when a loaded file
# declares the option.
_ENUM_VALUE_JSON_OPTION = "pb.enumvalue.json"


class _Unhandled(Exception):
    """A value this printer leaves to json_format."""


# -- values whose printing does not depend on the enum encoding ---------------------------------


def _double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _float(value: float) -> float | str:
    if math.isfinite(value):
        shortest: float = type_checkers.ToShortestFloat(value)
        return shortest
    return _double(value)


def _int64(value: int) -> str:
    return str(value)


def _bytes(value: bytes) -> str:
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def _bool_key(key: bool) -> str:
    return "true" if key else "false"


def _null(_: object) -> None:
    return None


def _field_mask(message: field_mask_pb2.FieldMask) -> str:
    return message.ToJsonString()


def _fraction(nanos: int) -> str:
    """Nanoseconds (0 to 999,999,999) as ToJsonString writes them: nothing when zero, else as
    few of 3, 6 or 9 digits as hold them exactly."""
    if nanos == 0:
        return ""
    if nanos % 1_000_000 == 0:
        return f".{nanos // 1_000_000:03d}"
    if nanos % 1_000 == 0:
        return f".{nanos // 1_000:06d}"
    return f".{nanos:09d}"


@functools.lru_cache(maxsize=4096)
def _day(days: int) -> str:
    """The date ``days`` after 1970-01-01, ISO 8601 (a year of four digits)."""
    return (_EPOCH + datetime.timedelta(days=days)).isoformat()


def _timestamp(message: timestamp_pb2.Timestamp) -> str:
    """``Timestamp.ToJsonString()``, without building a datetime each time: a Timestamp costs
    ~3 µs that way, as much as the rest of a small message."""
    seconds = message.seconds
    nanos = message.nanos
    if not (
        _TIMESTAMP_SECONDS_MIN <= seconds <= _TIMESTAMP_SECONDS_MAX
        and 0 <= nanos < _NANOS_PER_SECOND
    ):
        raise _Unhandled("a Timestamp out of range")  # json_format raises ValueError
    days, second = divmod(seconds, 86_400)
    hour, second = divmod(second, 3_600)
    minute, second = divmod(second, 60)
    return f"{_day(days)}T{hour:02d}:{minute:02d}:{second:02d}{_fraction(nanos)}Z"


def _duration(message: duration_pb2.Duration) -> str:
    """``Duration.ToJsonString()`` in integer arithmetic (it takes ~2 µs, in floats)."""
    seconds = message.seconds
    nanos = message.nanos
    if (
        not -_DURATION_SECONDS_MAX <= seconds <= _DURATION_SECONDS_MAX
        or not -_NANOS_PER_SECOND < nanos < _NANOS_PER_SECOND
        or seconds < 0 < nanos
        or nanos < 0 < seconds
    ):
        raise _Unhandled("a Duration out of range")  # json_format raises ValueError
    if seconds < 0 or nanos < 0:
        return f"-{-seconds}{_fraction(-nanos)}s"
    return f"{seconds}{_fraction(nanos)}s"


def _value(message: struct_pb2.Value) -> object:
    """A ``google.protobuf.Value``: what it holds; an empty Value is null as well."""
    kind = message.WhichOneof("kind")
    if kind == "string_value":
        return message.string_value
    if kind == "number_value":
        number = message.number_value
        if not math.isfinite(number):
            raise _Unhandled("a non-finite number in a Value")  # json_format refuses it
        return number
    if kind == "struct_value":
        return _struct(message.struct_value)
    if kind == "list_value":
        return list(map(_value, message.list_value.values))
    if kind == "bool_value":
        return message.bool_value
    return None


def _struct(message: struct_pb2.Struct) -> dict[str, object]:
    fields = message.fields
    return {key: _value(fields[key]) for key in fields}


def _list_value(message: struct_pb2.ListValue) -> list[object]:
    return list(map(_value, message.values))


# The well-known types with a JSON form of their own (but Any and the wrappers).
_SPECIAL: dict[str, _Render] = {
    "google.protobuf.Value": _value,
    "google.protobuf.Struct": _struct,
    "google.protobuf.ListValue": _list_value,
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    "google.protobuf.FieldMask": _field_mask,
}


# -- compiling ------------------------------------------------------------------------------------


def _enum_value_json_names() -> Callable[[descriptor.EnumValueDescriptor], str | None]:
    """The custom JSON name of an enum value as json_format finds it (the value's
    ``pb.enumvalue.json`` option, when the default pool knows that option), or None."""
    try:
        option: Any = descriptor_pool.Default().FindExtensionByName(_ENUM_VALUE_JSON_OPTION)
    except KeyError:
        return lambda _: None

    def custom(value: descriptor.EnumValueDescriptor) -> str | None:
        options: Any = value.GetOptions()
        if not options.HasExtension(option):
            return None
        name: str = options.Extensions[option].string
        return name

    return custom


def _enum(enum: descriptor.EnumDescriptor) -> _Convert:
    """An enum value by name; a number the enum does not name as the number (open enums)."""
    custom = _enum_value_json_names()
    names: dict[int, str] = {}
    by_number = enum.values_by_number
    for number in by_number:
        value = by_number[number]  # of aliases, the one json_format's lookup finds
        name = custom(value)
        names[number] = value.name if name is None else name
    closed = enum.is_closed

    def convert(number: int) -> str | int:
        name = names.get(number)
        if name is not None:
            return name
        if closed:
            raise _Unhandled("a closed enum holding a number it does not name")
        return number

    return convert


class _Compiler:
    """Builds the printers of one enum encoding; ``pending`` holds those of the types being
    compiled (a type may hold itself), published all at once when compiling ends."""

    def __init__(self, done: dict[descriptor.Descriptor, _Render], int_enums: bool) -> None:
        self._done = done
        self._int_enums = int_enums
        self.pending: dict[descriptor.Descriptor, _Render] = {}

    def render(self, message_type: descriptor.Descriptor) -> _Render:
        found = self._done.get(message_type) or self.pending.get(message_type)
        if found is not None:
            return found
        name = message_type.full_name
        if message_type.file.name == _WRAPPERS_FILE:
            found = self._wrapper(message_type)
        elif name in _SPECIAL:
            found = _SPECIAL[name]
        elif name == "google.protobuf.Any":
            found = self._any()
        else:
            return self._regular(message_type)
        self.pending[message_type] = found
        return found

    def _any(self) -> _Render:
        """An Any, printed by json_format: it resolves the type URL through the pool."""
        int_enums = self._int_enums

        def render(message: Message) -> object:
            return json_format.MessageToDict(message, use_integers_for_enums=int_enums)

        return render

    def _wrapper(self, message_type: descriptor.Descriptor) -> _Render:
        """A wrapper prints as its ``value``, set or not."""
        convert = self._scalar(message_type.fields_by_name["value"])
        if convert is None:
            return lambda message: message.value
        return lambda message: convert(message.value)

    def _regular(self, message_type: descriptor.Descriptor) -> _Render:
        table: _Table = {}

        def render(message: Message) -> dict[str, object]:
            document: dict[str, object] = {}
            for field, value in message.ListFields():
                name, convert = table[field]  # an extension is not there: json_format's
                document[name] = value if convert is None else convert(value)
            return document

        self.pending[message_type] = render  # before the fields: a type may hold itself
        for field in message_type.fields:
            table[field] = (field.json_name, self._field(field))
        return render

    def _field(self, field: descriptor.FieldDescriptor) -> _Convert | None:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            return self._map(entry)
        convert = self._scalar(field)
        if not field.is_repeated:
            return convert
        if convert is None:
            return list
        element = convert
        return lambda values: list(map(element, values))

    def _map(self, entry: descriptor.Descriptor) -> _Convert:
        key_field = entry.fields_by_name["key"]
        if key_field.type == _F.TYPE_BOOL:
            key: _Convert | None = _bool_key
        elif key_field.type == _F.TYPE_STRING:
            key = None
        else:
            key = str
        value = self._scalar(entry.fields_by_name["value"])
        if value is None:
            if key is None:
                return lambda pairs: {k: pairs[k] for k in pairs}
            convert_key = key
            return lambda pairs: {convert_key(k): pairs[k] for k in pairs}
        convert_value = value
        if key is None:
            return lambda pairs: {k: convert_value(pairs[k]) for k in pairs}
        convert_both = key
        return lambda pairs: {convert_both(k): convert_value(pairs[k]) for k in pairs}

    def _scalar(self, field: descriptor.FieldDescriptor) -> _Convert | None:  # noqa: PLR0911 - one return per kind
        """The converter of one value of ``field`` (an element, when repeated)."""
        if field.message_type is not None:
            return self.render(field.message_type)
        if field.enum_type is not None:
            if self._int_enums:
                return None
            if field.enum_type.full_name == _NULL_VALUE:
                return _null
            return _enum(field.enum_type)
        cpp = field.cpp_type
        if cpp == _F.CPPTYPE_STRING:
            return _bytes if field.type == _F.TYPE_BYTES else None
        if cpp in (_F.CPPTYPE_INT64, _F.CPPTYPE_UINT64):
            return _int64
        if cpp == _F.CPPTYPE_DOUBLE:
            return _double
        if cpp == _F.CPPTYPE_FLOAT:
            return _float
        return None  # bool and 32-bit integers


# By enum encoding (False: names, True: numbers), then message type.
_RENDERS: tuple[dict[descriptor.Descriptor, _Render], dict[descriptor.Descriptor, _Render]] = (
    {},
    {},
)
_COMPILING = threading.Lock()


def _render_of(message_type: descriptor.Descriptor, int_enums: bool) -> _Render:
    done = _RENDERS[int_enums]
    found = done.get(message_type)
    if found is not None:
        return found
    with _COMPILING:
        compiler = _Compiler(done, int_enums)
        found = compiler.render(message_type)
        done.update(compiler.pending)
    return found


# -- the facade ----------------------------------------------------------------------------------


def to_dict(message: Message, int_enums: bool = False) -> object:
    """``json_format.MessageToDict(message, use_integers_for_enums=int_enums)``: an equal
    value tree, dicts in the same member order; raises what json_format raises."""
    try:
        return _render_of(cast("descriptor.Descriptor", message.DESCRIPTOR), int_enums)(message)
    except Exception:  # noqa: BLE001 - whatever the printer cannot print, json_format decides
        return json_format.MessageToDict(message, use_integers_for_enums=int_enums)


_ENCODERS: dict[tuple[str, str], json.JSONEncoder] = {}


def to_json(
    message: Message, int_enums: bool = False, separators: tuple[str, str] = (",", ":")
) -> str:
    """``json.dumps(json_format.MessageToDict(message, use_integers_for_enums=int_enums),
    ensure_ascii=False, separators=separators)``, byte for byte."""
    encoder = _ENCODERS.get(separators)
    if encoder is None:
        # json.dumps builds this encoder on each call, but for check_circular: a tree printed
        # afresh holds no cycle, and checking for one costs a sixth of the encoding.
        encoder = json.JSONEncoder(ensure_ascii=False, separators=separators, check_circular=False)
        _ENCODERS[separators] = encoder
    return encoder.encode(to_dict(message, int_enums))
