"""Values the binary protobuf form carries but proto3 JSON cannot say, refused on input.

A gRPC caller can write what no JSON rendering of the resource could hold: a Timestamp or
Duration outside the range its proto documents (timestamp.proto: 0001-01-01T00:00:00Z to
9999-12-31T23:59:59.999999999Z; duration.proto: ±315,576,000,000 s, nanos with the sign of the
seconds), a ``google.protobuf.Value`` number that is NaN or infinite (struct.proto: serializing
them "results in error"), an ``Any`` whose type this server does not know or whose bytes are not
that type. Stored, such a resource could never be read over REST or MCP again (json_format
raises; the reader would get a 500), so the writes refuse it with INVALID_ARGUMENT: one
violation per value, at its path.

:func:`violations` walks only the fields whose type can lead to one of those four types (a plan
per message type, built once), so the rest of a large golden conversation costs nothing.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import DecodeError

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

_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)  # 0001-01-01 .. 9999-12-31
_DURATION_SECONDS = 315_576_000_000
_MAX_NANOS = 999_999_999
_KEY_SHOWN = 64  # characters of a map key shown in a path


def _target(field: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
    """The message type a field holds (a map's value type), or None."""
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        value: descriptor.Descriptor | None = entry.fields_by_name["value"].message_type
        return value
    return entry


def _reaches(message_type: descriptor.Descriptor, seen: frozenset[str]) -> bool:
    if message_type.full_name in _CHECKED:
        return True
    if message_type.full_name in seen:
        return False
    seen = seen | {message_type.full_name}
    return any(
        (target := _target(field)) is not None and _reaches(target, seen)
        for field in message_type.fields
    )


@cache
def _plan(message_type: descriptor.Descriptor) -> dict[str, tuple[bool, bool]]:
    """Field name → (is a map, is repeated), for the fields that can lead to a checked type."""
    return {
        field.name: (field.message_type.GetOptions().map_entry, field.is_repeated)
        for field in message_type.fields
        if (target := _target(field)) is not None
        and _reaches(target, frozenset())
        and field.message_type is not None
    }


def _key(key: object) -> str:
    if isinstance(key, str):
        shown = json.dumps(key[:_KEY_SHOWN], ensure_ascii=False)
        return f'[{shown[:-1]}…"]' if len(key) > _KEY_SHOWN else f"[{shown}]"
    return f"[{key}]"


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


_PROBLEMS = {_TIMESTAMP: _timestamp_problem, _DURATION: _duration_problem, _VALUE: _value_problem}


def _walk(message: Message, path: str, out: list[FieldViolation]) -> None:
    name = message.DESCRIPTOR.full_name
    if name == _ANY:
        payload = _any_payload(message, path, out)
        if payload is not None:
            _walk(payload, f"{path}.value", out)
        return
    problem = _PROBLEMS[name](message) if name in _PROBLEMS else ""
    if problem:
        where = f"{path}.number_value" if name == _VALUE else path
        out.append(FieldViolation(where, problem, "OUT_OF_RANGE"))
    plan = _plan(message.DESCRIPTOR)
    if not plan:
        return
    for field, value in message.ListFields():
        shape = plan.get(field.name)
        if shape is None:
            continue
        at = f"{path}.{field.name}"
        if shape[0]:
            for key, item in value.items():
                _walk(item, f"{at}{_key(key)}", out)
        elif shape[1]:
            for index, item in enumerate(value):
                _walk(item, f"{at}[{index}]", out)
        else:
            _walk(value, at, out)


def violations(message: Message, path: str) -> list[FieldViolation]:
    """One violation per value in ``message`` (at ``path``) that proto3 JSON cannot render."""
    out: list[FieldViolation] = []
    _walk(message, path, out)
    return out
