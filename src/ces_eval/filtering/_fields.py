"""What a filterable field is: its column, its kind, and how a filter value becomes a SQL value.

AIP-160 §Validation: fields named in a filter must exist, values must fit the field's type, enum
values must be in the set, and timestamps must follow RFC 3339. Each check here raises
``FilterError`` at the position of the offending value.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING

from ces_eval.filtering._grammar import Comparator, FilterError, Restriction

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "FieldKind",
    "FieldSpec",
    "allowed_comparators",
    "to_bool",
    "to_enum_number",
    "to_integer",
    "to_timestamp_micros",
]


class FieldKind(enum.Enum):
    """How a field is stored and which comparisons make sense for it."""

    STRING = "string"
    """TEXT column. ``=``/``!=`` exact or with a leading/trailing ``*`` wildcard in a quoted value;
    ``<``..``>=`` lexical by code point; ``:`` substring."""
    ENUM = "enum"
    """INTEGER column holding the enum number; filtered by name or number (``=``, ``!=``, ``:``)."""
    TIMESTAMP = "timestamp"
    """INTEGER column holding microseconds since the Unix epoch (UTC), NULL when unset."""
    INTEGER = "integer"
    """INTEGER column (int64 range)."""
    BOOL = "bool"
    """Boolean column; filtered with ``true`` / ``false``."""
    STRING_LIST = "string list"
    """A repeated string: JSON array text (SQLite) or JSONB array (PostgreSQL)."""


_ORDERING = frozenset({Comparator.LT, Comparator.LE, Comparator.GT, Comparator.GE})
_EQUALITY = frozenset({Comparator.EQ, Comparator.NE})

_ALLOWED: Mapping[FieldKind, frozenset[Comparator]] = {
    FieldKind.STRING: frozenset(Comparator),
    # AIP-160's has operator on a scalar enum can only mean equality (or presence, ":*").
    FieldKind.ENUM: _EQUALITY | {Comparator.HAS},
    # ":" on a timestamp is only the presence test "create_time:*" (AIP-160 has operator).
    FieldKind.TIMESTAMP: _EQUALITY | _ORDERING | {Comparator.HAS},
    FieldKind.INTEGER: _EQUALITY | _ORDERING,
    FieldKind.BOOL: _EQUALITY,
    # AIP-160: "r:42" is true when the repeated field r contains 42. "=" is accepted with the same
    # meaning because users write "tags = smoke"; there is no whole-list equality.
    FieldKind.STRING_LIST: frozenset({Comparator.HAS, Comparator.EQ}),
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", re.ASCII)


def allowed_comparators(kind: FieldKind) -> frozenset[Comparator]:
    """The comparators a filter may apply to a field of this kind."""
    return _ALLOWED[kind]


@dataclass(frozen=True)
class FieldSpec:
    """One filterable field of a resource: the SQL column behind it and its kind.

    ``column`` is written into SQL verbatim, so it must be a plain (optionally table-qualified)
    identifier; it comes from the service's field table, never from a request. ``enum_values`` maps
    each enum value name to its number (ENUM only). ``reference``: the field holds resource names
    (``google.api.resource_reference``), which ``:`` matches by the whole name or by the resource
    ID alone (STRING and STRING_LIST only; see :mod:`._sql`). ``fold_case``: ``:`` on the field
    (a STRING) matches ignoring ASCII case, where a resource's list documents it so (``=`` stays
    exact).
    """

    column: str
    kind: FieldKind
    enum_values: Mapping[str, int] = field(default_factory=dict, hash=False)
    reference: bool = False
    fold_case: bool = False

    def __post_init__(self) -> None:
        if not _IDENTIFIER.fullmatch(self.column):
            raise ValueError(f"column {self.column!r} is not a plain SQL identifier")
        if self.enum_values and self.kind is not FieldKind.ENUM:
            raise ValueError(f"enum_values given for a {self.kind.value} field")
        if self.reference and self.kind not in (FieldKind.STRING, FieldKind.STRING_LIST):
            raise ValueError(f"reference given for a {self.kind.value} field")
        if self.fold_case and self.kind is not FieldKind.STRING:
            raise ValueError(f"fold_case given for a {self.kind.value} field")


_INT64 = range(-(2**63), 2**63)
_INT32 = range(-(2**31), 2**31)
_INTEGER = re.compile(r"[+-]?[0-9]+")
# RFC 3339 section 5.6 date-time; 't'/'z' may be lower case (its note on case), fraction 1-9 digits.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_integer(restriction: Restriction) -> int:
    """The value as an int64, for INTEGER fields."""
    if not _INTEGER.fullmatch(restriction.value):
        raise FilterError(
            f"field {restriction.path!r} is an integer; {restriction.value!r} is not",
            restriction.value_position,
        )
    number = int(restriction.value)
    if number not in _INT64:
        raise FilterError(
            f"{restriction.value} is out of range for integer field {restriction.path!r}",
            restriction.value_position,
        )
    return number


def to_bool(restriction: Restriction) -> bool:
    """``true`` or ``false``, for BOOL fields."""
    if restriction.value in ("true", "false"):
        return restriction.value == "true"
    raise FilterError(
        f"field {restriction.path!r} is a boolean; expected true or false, "
        f"got {restriction.value!r}",
        restriction.value_position,
    )


def to_enum_number(restriction: Restriction, spec: FieldSpec) -> int:
    """The enum number for a value name (case-sensitive, as in proto) or an int32 number."""
    name = restriction.value
    if name in spec.enum_values:
        return spec.enum_values[name]
    if _INTEGER.fullmatch(name) and int(name) in _INT32:
        return int(name)
    allowed = ", ".join(spec.enum_values) or "(none)"
    raise FilterError(
        f"invalid value {name!r} for enum field {restriction.path!r}; "
        f"expected one of {allowed}, or an enum number",
        restriction.value_position,
    )


def to_timestamp_micros(restriction: Restriction) -> int:
    """An RFC 3339 timestamp as microseconds since the epoch, UTC.

    Digits beyond the sixth fractional digit are truncated: columns hold microseconds, the same
    precision every stored timestamp was truncated to.
    """
    match = _RFC3339.fullmatch(restriction.value)
    try:
        if match is None:
            raise ValueError
        year, month, day, hour, minute, second, fraction, sign, off_h, off_m = match.groups()
        offset = timedelta(0)
        if sign is not None:
            if int(off_h) > 23 or int(off_m) > 59:
                raise ValueError
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            offset = -offset if sign == "-" else offset
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "").ljust(6, "0")[:6]),
            tzinfo=timezone(offset),
        )
        micros = (moment - _EPOCH) // _MICROSECOND
    except (ValueError, OverflowError):
        raise FilterError(
            f"field {restriction.path!r} is a timestamp; {restriction.value!r} is not an "
            "RFC 3339 timestamp such as 2024-01-31T12:00:00Z",
            restriction.value_position,
        ) from None
    return micros
