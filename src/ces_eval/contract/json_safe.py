"""Values the binary protobuf form carries but proto3 JSON cannot say, refused on input.

A gRPC caller can write what no JSON rendering of the resource could hold: a Timestamp or
Duration outside the range its proto documents (timestamp.proto: 0001-01-01T00:00:00Z to
9999-12-31T23:59:59.999999999Z; duration.proto: ±315,576,000,000 s, nanos with the sign of the
seconds), a ``google.protobuf.Value`` number that is NaN or infinite (struct.proto: serializing
them "results in error"), an ``Any`` whose type this server does not know or whose bytes are not
that type. Stored, such a resource could never be read over REST or MCP again (json_format
raises; the reader would get a 500), so the writes refuse it with INVALID_ARGUMENT: one
violation per value, at its path.

:func:`violations` walks only the fields whose type can lead to one of those types (a plan per
message type, built once), first without building paths (they are built only when something is
found). Struct trees, which a golden conversation is full of, are entered only when the encoded
message holds what a non-finite ``Value.number_value`` looks like (:data:`_NON_FINITE_NUMBER`),
which requests almost never do. On the 5 KB benchmark evaluation the check costs about a fifth
of the rest of validation (~55-75 us against ~300-500 us on the shared 2-CPU machine).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from ces_eval.contract.limits import MAX_VIOLATIONS, key_path
from ces_eval.errors import FieldViolation

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

__all__ = ["violations"]

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_VALUE = "google.protobuf.Value"
_ANY = "google.protobuf.Any"
_CHECKED = frozenset({_TIMESTAMP, _DURATION, _VALUE, _ANY})
# Value.number_value (field 2, a double: tag 0x11, then 8 bytes little-endian) when it is NaN or
# infinite: all exponent bits set, so the last byte is 0x7F or 0xFF and the one before it is at
# least 0xF0. Found anywhere else in the encoding (inside bytes fields, say) it only costs the
# full walk; a non-finite number is never missed.
_NON_FINITE_NUMBER = re.compile(rb"\x11[\x00-\xff]{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)

_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)  # 0001-01-01 .. 9999-12-31
_DURATION_SECONDS = 315_576_000_000
_MAX_NANOS = 999_999_999


def _target(field: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
    """The message type a field holds (a map's value type), or None."""
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        value: descriptor.Descriptor | None = entry.fields_by_name["value"].message_type
        return value
    return entry


def _reaches(
    message_type: descriptor.Descriptor, checked: frozenset[str], seen: frozenset[str]
) -> bool:
    if message_type.full_name in checked:
        return True
    if message_type.full_name in seen:
        return False
    seen = seen | {message_type.full_name}
    return any(
        (target := _target(field)) is not None and _reaches(target, checked, seen)
        for field in message_type.fields
    )


_SINGLE, _REPEATED, _MAP = range(3)


class _Plans(dict["descriptor.Descriptor", "tuple[Callable[[Any], str] | None, dict[str, int]]"]):
    """Message type → (the check of the type itself or None, the fields that can lead to a
    type in ``checked``: name → _SINGLE, _REPEATED or _MAP), built on first use."""

    def __init__(self, checked: frozenset[str]) -> None:
        super().__init__()
        self.checked = checked

    def __missing__(
        self, message_type: descriptor.Descriptor
    ) -> tuple[Callable[[Any], str] | None, dict[str, int]]:
        fields = {
            field.name: (
                _MAP
                if field.message_type.GetOptions().map_entry
                else _REPEATED
                if field.is_repeated
                else _SINGLE
            )
            for field in message_type.fields
            if field.message_type is not None
            and (target := _target(field)) is not None
            and _reaches(target, self.checked, frozenset())
        }
        name = message_type.full_name
        plan = (_PROBLEMS.get(name) if name in self.checked else None, fields)
        self[message_type] = plan
        return plan


def _timestamp_problem(message: Any) -> str:  # noqa: ANN401 - a google.protobuf.Timestamp
    low, high = _TIMESTAMP_SECONDS
    if not low <= message.seconds <= high or not 0 <= message.nanos <= _MAX_NANOS:
        return (
            "Timestamp out of range: it must lie between 0001-01-01T00:00:00Z and "
            "9999-12-31T23:59:59.999999999Z, with nanos from 0 to 999999999."
        )
    return ""


def _duration_problem(message: Any) -> str:  # noqa: ANN401 - a google.protobuf.Duration
    seconds, nanos = message.seconds, message.nanos
    if (
        abs(seconds) > _DURATION_SECONDS
        or abs(nanos) > _MAX_NANOS
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        return (
            f"Duration out of range: seconds must lie within ±{_DURATION_SECONDS}, nanos "
            "within ±999999999 with the sign of the seconds."
        )
    return ""


def _any_payload(message: Any, path: str, out: list[FieldViolation]) -> Message | None:  # noqa: ANN401 - a google.protobuf.Any
    """The message an Any holds, or None (after recording why) when JSON could not render it;
    None as well for an empty Any, whose JSON form is ``{}``."""
    if not message.type_url and not message.value:
        return None
    type_name = message.type_url.rpartition("/")[2]
    try:
        payload_type = descriptor_pool.Default().FindMessageTypeByName(type_name)
    except KeyError:
        out.append(
            FieldViolation(
                f"{path}.type_url",
                f"Unknown message type {message.type_url[:200]!r}: this server cannot render "
                "it in JSON.",
                "UNKNOWN_TYPE",
            )
        )
        return None
    payload: Message = message_factory.GetMessageClass(payload_type)()
    try:
        payload.ParseFromString(message.value)
    except DecodeError:
        out.append(FieldViolation(f"{path}.value", f"Not a valid {type_name}.", "INVALID_VALUE"))
        return None
    return payload


def _value_problem(message: Any) -> str:  # noqa: ANN401 - a google.protobuf.Value
    if message.WhichOneof("kind") == "number_value" and not math.isfinite(message.number_value):
        return "A Value number must be finite: JSON has no NaN or Infinity."
    return ""


_PROBLEMS: dict[str, Callable[[Any], str]] = {
    _TIMESTAMP: _timestamp_problem,
    _DURATION: _duration_problem,
    _VALUE: _value_problem,
}


def _unrenderable(message: Message, plans: _Plans) -> bool:
    """Whether anything in ``message`` is unrenderable: the fast pass, without paths."""
    # types-protobuf types DESCRIPTOR as a union with the upb class; no call on this path.
    check, fields = plans[message.DESCRIPTOR]  # type: ignore[index]
    if check is not None and check(message):
        return True
    for name, shape in fields.items():
        if shape == _SINGLE:
            if message.HasField(name) and _unrenderable(getattr(message, name), plans):
                return True
            continue
        value = getattr(message, name)
        for item in value.values() if shape == _MAP else value:
            if _unrenderable(item, plans):
                return True
    return False


def _walk(message: Message, path: str, out: list[FieldViolation], plans: _Plans) -> None:
    """Record each unrenderable value in ``message`` with its path (the first
    :data:`MAX_VIOLATIONS`: the walk ends there)."""
    if len(out) >= MAX_VIOLATIONS:
        return
    name = message.DESCRIPTOR.full_name
    if name == _ANY:
        payload = _any_payload(message, path, out)
        if payload is not None:
            _walk(payload, f"{path}.value", out, _ALL)
        return
    check, fields = plans[message.DESCRIPTOR]  # type: ignore[index]
    problem = check(message) if check is not None else ""
    if problem:
        where = f"{path}.number_value" if name == _VALUE else path
        out.append(FieldViolation(where, problem, "OUT_OF_RANGE"))
    for field, value in message.ListFields() if fields else ():
        shape = fields.get(field.name)
        at = f"{path}.{field.name}"
        if shape == _MAP:
            for key, item in value.items():
                _walk(item, f"{at}{key_path(key)}", out, plans)
        elif shape == _REPEATED:
            for index, item in enumerate(value):
                _walk(item, f"{at}[{index}]", out, plans)
        elif shape == _SINGLE:
            _walk(value, at, out, plans)


def _any_problem(message: Any) -> str:  # noqa: ANN401 - a google.protobuf.Any
    out: list[FieldViolation] = []
    payload = _any_payload(message, "", out)
    if out:
        return out[0].description
    return "unrenderable" if payload is not None and _unrenderable(payload, _ALL) else ""


_PROBLEMS[_ANY] = _any_problem
_ALL = _Plans(_CHECKED)
_ALL_BUT_VALUES = _Plans(_CHECKED - {_VALUE})


def violations(message: Message, path: str) -> list[FieldViolation]:
    """One violation per value in ``message`` (at ``path``) that proto3 JSON cannot render, up
    to :data:`MAX_VIOLATIONS`."""
    numbers = _NON_FINITE_NUMBER.search(message.SerializeToString()) is not None
    plans = _ALL if numbers else _ALL_BUT_VALUES
    if not _unrenderable(message, plans):
        return []
    out: list[FieldViolation] = []
    _walk(message, path, out, plans)
    return out
