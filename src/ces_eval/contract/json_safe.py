"""Values the binary protobuf form carries but proto3 JSON cannot say: the checks of each value.

A gRPC caller can write what no JSON rendering of the resource could hold: a Timestamp or
Duration outside the range its proto documents (timestamp.proto: 0001-01-01T00:00:00Z to
9999-12-31T23:59:59.999999999Z; duration.proto: ±315,576,000,000 s, nanos with the sign of the
seconds), a ``google.protobuf.Value`` number that is NaN or infinite (struct.proto: serializing
them "results in error"), an ``Any`` whose type this server does not know or whose bytes are not
that type. Stored, such a resource could never be read over REST or MCP again (json_format
raises; the reader would get a 500), so the writes refuse it with INVALID_ARGUMENT: one
violation per value, at its path.

This module judges one value of each of those types (:func:`check`); the walk that reaches them
is the one validation pass of :mod:`ces_eval.contract.checks`, whose per-type plans descend only
into fields that can lead to one. Struct trees, which a golden conversation is full of, are
entered only when the encoded message holds what a non-finite ``Value.number_value`` looks like
(:func:`may_hold_non_finite`), which requests almost never do.
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
    from google.protobuf.message import Message

__all__ = ["STRUCTS", "TYPES", "check", "may_hold_non_finite"]

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_VALUE = "google.protobuf.Value"
_STRUCT = "google.protobuf.Struct"
_LIST = "google.protobuf.ListValue"
_ANY = "google.protobuf.Any"
# The Struct types: their trees are walked only for the numbers (``numbers`` of check()).
STRUCTS = frozenset({_VALUE, _STRUCT, _LIST})
# Every type a value of which check() judges.
TYPES = frozenset({_TIMESTAMP, _DURATION, _ANY}) | STRUCTS
# Value.number_value (field 2, a double: tag 0x11, then 8 bytes little-endian) when it is NaN or
# infinite: all exponent bits set, so the last byte is 0x7F or 0xFF and the one before it is at
# least 0xF0. Found anywhere else in the encoding (inside bytes fields, say) it only costs the
# walk of the Struct trees; a non-finite number is never missed.
_NON_FINITE_NUMBER = re.compile(rb"\x11[\x00-\xff]{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)

_TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)  # 0001-01-01 .. 9999-12-31
_DURATION_SECONDS = 315_576_000_000
_MAX_NANOS = 999_999_999

_NON_FINITE = "A Value number must be finite: JSON has no NaN or Infinity."


def may_hold_non_finite(message: Message) -> bool:
    """Whether ``message`` may hold a NaN or infinite Value number (else no Struct tree needs
    walking for them)."""
    return _NON_FINITE_NUMBER.search(message.SerializeToString()) is not None


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


_RANGES: dict[str, Callable[[Any], str]] = {
    _TIMESTAMP: _timestamp_problem,
    _DURATION: _duration_problem,
}


def _payload(message: Any, path: str, out: list[FieldViolation]) -> Message | None:  # noqa: ANN401 - a google.protobuf.Any
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


def _numbers(message: Any, path: str, out: list[FieldViolation]) -> None:  # noqa: ANN401 - a Struct, Value or ListValue
    """Each NaN or infinite number in a Struct tree, with its path."""
    if len(out) >= MAX_VIOLATIONS:
        return
    name = message.DESCRIPTOR.full_name
    if name == _STRUCT:
        for key, value in message.fields.items():
            _numbers(value, f"{path}.fields{key_path(key)}", out)
    elif name == _LIST:
        for index, value in enumerate(message.values):
            _numbers(value, f"{path}.values[{index}]", out)
    else:
        kind = message.WhichOneof("kind")
        if kind == "number_value" and not math.isfinite(message.number_value):
            out.append(FieldViolation(f"{path}.number_value", _NON_FINITE, "OUT_OF_RANGE"))
        elif kind == "struct_value":
            _numbers(message.struct_value, f"{path}.struct_value", out)
        elif kind == "list_value":
            _numbers(message.list_value, f"{path}.list_value", out)


def check(
    message: Message,
    path: str,
    out: list[FieldViolation],
    *,
    numbers: bool,
    payload: Callable[[Message, str], None],
) -> None:
    """Record in ``out`` why ``message`` (a value of one of :data:`TYPES`, at ``path``) cannot
    be rendered in JSON, if it cannot. Struct trees are walked only with ``numbers``; the
    payload of an Any is handed to ``payload`` (with its path), the walk that judges it."""
    name = message.DESCRIPTOR.full_name
    problem = _RANGES.get(name)
    if problem is not None:
        text = problem(message)
        if text:
            out.append(FieldViolation(path, text, "OUT_OF_RANGE"))
    elif name == _ANY:
        held = _payload(message, path, out)
        if held is not None:
            payload(held, f"{path}.value")
    elif numbers:
        _numbers(message, path, out)
