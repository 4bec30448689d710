"""Field behaviours (google/api/field_behavior.proto) applied by walking descriptors.

OUTPUT_ONLY fields are cleared from input (AIP-203: ignored, not rejected), REQUIRED fields are
enforced inside every message the caller set, and update masks (AIP-134, AIP-161) are checked
and applied against the fields a caller may change.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, cast

from google.api import field_behavior_pb2

from ces_eval.contract.limits import MAX_VIOLATIONS
from ces_eval.errors import FieldViolation, ServiceError

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.contract.limits import Limits, Rules, Walk

__all__ = [
    "InputRules",
    "apply_update_mask",
    "clear_output_only",
    "has_behavior",
    "required_violations",
    "updatable_paths",
]

OUTPUT_ONLY = field_behavior_pb2.OUTPUT_ONLY
REQUIRED = field_behavior_pb2.REQUIRED
IMMUTABLE = field_behavior_pb2.IMMUTABLE
IDENTIFIER = field_behavior_pb2.IDENTIFIER


@cache
def _behaviors(field: descriptor.FieldDescriptor) -> frozenset[int]:
    return frozenset(field.GetOptions().Extensions[field_behavior_pb2.field_behavior])


def has_behavior(field: descriptor.FieldDescriptor, behavior: int) -> bool:
    return behavior in _behaviors(field)


def _descriptor(message: Message) -> descriptor.Descriptor:
    # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
    return cast("descriptor.Descriptor", message.DESCRIPTOR)


def _is_map(field: descriptor.FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _target(field: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
    """The message type a field holds (a map's value type), or None for scalars."""
    if field.message_type is None:
        return None
    if _is_map(field):
        value_type: descriptor.Descriptor | None = field.message_type.fields_by_name[
            "value"
        ].message_type
        return value_type
    return field.message_type


def _search(
    message_descriptor: descriptor.Descriptor,
    behavior: int,
    seen: frozenset[descriptor.Descriptor],
) -> bool:
    if message_descriptor.full_name.startswith("google.protobuf.") or message_descriptor in seen:
        return False
    seen = seen | {message_descriptor}
    for field in message_descriptor.fields:
        if behavior in _behaviors(field):
            return True
        target = _target(field)
        if target is not None and _search(target, behavior, seen):
            return True
    return False


@cache
def _subtree_has(message_descriptor: descriptor.Descriptor, behavior: int) -> bool:
    """Whether any field of this type or of a type reachable from it has ``behavior``: walks
    skip sub-trees where it cannot occur (most of a large golden conversation)."""
    return _search(message_descriptor, behavior, frozenset())


@cache
def _leads_to(field: descriptor.FieldDescriptor, behavior: int) -> bool:
    target = _target(field)
    return target is not None and _subtree_has(target, behavior)


@cache
def _required_fields(
    message_descriptor: descriptor.Descriptor,
) -> tuple[descriptor.FieldDescriptor, ...]:
    return tuple(
        field
        for field in message_descriptor.fields
        if has_behavior(field, REQUIRED) and not has_behavior(field, OUTPUT_ONLY)
    )


def _children(
    message: Message, behavior: int
) -> Iterator[tuple[descriptor.FieldDescriptor, str, Message]]:
    """Set sub-messages of ``message`` with their path suffix (``.f``, ``.f[2]``, ``.f["k"]``),
    only those whose type can contain a field with ``behavior``."""
    for field, value in message.ListFields():
        if not _leads_to(field, behavior):
            continue
        if _is_map(field):
            for key, item in value.items():
                yield field, f'{field.name}["{key}"]', item
        elif field.is_repeated:
            for index, item in enumerate(value):
                yield field, f"{field.name}[{index}]", item
        else:
            yield field, field.name, value


def clear_output_only(message: Message) -> None:
    """Remove every OUTPUT_ONLY field from ``message`` and its sub-messages, in place."""
    for field, _ in message.ListFields():
        if has_behavior(field, OUTPUT_ONLY):
            message.ClearField(field.name)
    for _, _, child in _children(message, OUTPUT_ONLY):
        clear_output_only(child)


def _is_set(message: Message, field: descriptor.FieldDescriptor) -> bool:
    if field.is_repeated:
        return len(getattr(message, field.name)) > 0
    if field.has_presence:
        return message.HasField(field.name)
    return bool(getattr(message, field.name))


def _own_required_violations(message: Message, path: str) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    for field in _required_fields(_descriptor(message)):
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if message.WhichOneof(oneof.name) is None:
                violations.append(
                    FieldViolation(
                        f"{path}.{oneof.name}", "One of its fields is required.", "REQUIRED"
                    )
                )
            continue
        if not _is_set(message, field):
            violations.append(FieldViolation(f"{path}.{field.name}", "Required.", "REQUIRED"))
    return violations


Bounds = dict[tuple[str, str], tuple[float, float]]


@dataclass(frozen=True)
class _Plan:
    """What one pass over a message of one type does: OUTPUT_ONLY fields to clear, bounded
    fields, the fields to descend into: (whether their sub-tree holds REQUIRED fields,
    whether they are maps), and what the request limits check here (empty: nothing)."""

    output_only: frozenset[str]
    bounded: dict[str, tuple[float, float]]
    descend: dict[str, tuple[bool, bool]]
    limits: Rules


def _reaches_bounded(
    message_descriptor: descriptor.Descriptor,
    types: frozenset[str],
    seen: frozenset[descriptor.Descriptor],
) -> bool:
    if message_descriptor.full_name in types:
        return True
    if message_descriptor in seen or message_descriptor.full_name.startswith("google.protobuf."):
        return False
    seen = seen | {message_descriptor}
    return any(
        (target := _target(field)) is not None and _reaches_bounded(target, types, seen)
        for field in message_descriptor.fields
    )


class _Enough(Exception):
    """A pass found :data:`MAX_VIOLATIONS` problems: the request is refused, nothing else of
    it needs looking at."""


class InputRules:
    """One pass over caller input (:meth:`inspect`) with the bounds of some numeric fields
    (``bounds``: (message type, field) → inclusive range) and, when given, the request
    ``limits`` (checked in the same pass: each message is listed once); plans are built once
    per type. The pass stops once it has found :data:`MAX_VIOLATIONS` problems, and never
    looks inside a repeated field or map over its count limit."""

    def __init__(self, bounds: Bounds, limits: Limits | None = None) -> None:
        self._limits = limits
        self._bounds = dict(bounds)
        self._types = frozenset(message for message, _ in bounds)
        self._plans: dict[descriptor.Descriptor, _Plan] = {}

    def _plan(self, message_descriptor: descriptor.Descriptor) -> _Plan:
        plan = self._plans.get(message_descriptor)
        if plan is not None:
            return plan
        descend: dict[str, tuple[bool, bool]] = {}
        for field in message_descriptor.fields:
            target = _target(field)
            if target is None or target.full_name.startswith("google.protobuf."):
                continue
            required = not has_behavior(field, OUTPUT_ONLY) and _subtree_has(target, REQUIRED)
            if (
                required
                or _subtree_has(target, OUTPUT_ONLY)
                or _reaches_bounded(target, self._types, frozenset())
            ):
                descend[field.name] = (required, _is_map(field))
        output_only = frozenset(
            f.name for f in message_descriptor.fields if has_behavior(f, OUTPUT_ONLY)
        )
        plan = _Plan(
            output_only=output_only,
            bounded={
                field: bounds
                for (message, field), bounds in self._bounds.items()
                if message == message_descriptor.full_name
            },
            descend=descend,
            limits=self._limits.rules(message_descriptor, output_only, frozenset(descend))
            if self._limits is not None
            else ({}, {}),
        )
        self._plans[message_descriptor] = plan
        return plan

    def inspect(
        self, message: Message, path: str
    ) -> tuple[list[FieldViolation], list[FieldViolation]]:
        """Clear every OUTPUT_ONLY field of ``message`` in place (as :func:`clear_output_only`)
        and return its REQUIRED violations (as :func:`required_violations`), and its bounded
        fields out of range followed by the limits it exceeds, in one pass."""
        required: list[FieldViolation] = []
        ranges: list[FieldViolation] = []
        walk = self._limits.walk(message) if self._limits is not None else None
        with suppress(_Enough):
            self._inspect(message, path, required, ranges, walk, check_required=True)
        found = list(dict.fromkeys(required)), ranges + (walk.violations if walk else [])
        return found[0][:MAX_VIOLATIONS], found[1][:MAX_VIOLATIONS]

    def _inspect(  # noqa: PLR0912 - one pass does four jobs; a helper would cost a call per message
        self,
        message: Message,
        path: str,
        required: list[FieldViolation],
        ranges: list[FieldViolation],
        walk: Walk | None,
        *,
        check_required: bool,
    ) -> None:
        if len(required) + len(ranges) + (len(walk.violations) if walk else 0) >= MAX_VIOLATIONS:
            raise _Enough
        plan = self._plan(_descriptor(message))
        present = message.ListFields()
        if plan.output_only:
            for field, _ in present:
                if field.name in plan.output_only:
                    message.ClearField(field.name)
        if check_required:
            required += _own_required_violations(message, path)
        over: tuple[descriptor.FieldDescriptor, ...] = ()
        if walk is not None and plan.limits[walk.large]:
            over = walk.fields(plan.limits[walk.large], present, path)
        for field, value in present:
            name = field.name
            if name in plan.output_only or (over and field in over):
                continue
            bounds = plan.bounded.get(name)
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                ranges.append(
                    FieldViolation(
                        f"{path}.{name}",
                        f"Must be between {bounds[0]:g} and {bounds[1]:g}; got {value:g}.",
                        "OUT_OF_RANGE",
                    )
                )
            below = plan.descend.get(name)
            if below is None:
                continue
            check = check_required and below[0]
            items: Iterable[tuple[str, Message]]
            if below[1]:
                items = ((f'{path}.{name}["{key}"]', item) for key, item in value.items())
            elif field.is_repeated:
                items = ((f"{path}.{name}[{index}]", item) for index, item in enumerate(value))
            else:
                items = ((f"{path}.{name}", value),)
            for item_path, item in items:
                self._inspect(item, item_path, required, ranges, walk, check_required=check)


def required_violations(message: Message, path: str) -> list[FieldViolation]:
    """One violation per REQUIRED field left empty in ``message`` or any sub-message it sets
    (the first :data:`MAX_VIOLATIONS`).

    Sub-trees marked OUTPUT_ONLY are not checked: the caller does not write them. A REQUIRED
    member of a oneof is satisfied by any member of that oneof.
    """
    violations: list[FieldViolation] = []
    with suppress(_Enough):
        _required_into(message, path, violations)
    # Deduplicate oneof violations reported once per REQUIRED member.
    return list(dict.fromkeys(violations))[:MAX_VIOLATIONS]


def _required_into(message: Message, path: str, violations: list[FieldViolation]) -> None:
    violations += _own_required_violations(message, path)
    if len(violations) >= MAX_VIOLATIONS:
        raise _Enough
    for field, suffix, child in _children(message, REQUIRED):
        if not has_behavior(field, OUTPUT_ONLY):
            _required_into(child, f"{path}.{suffix}", violations)


@cache
def updatable_paths(message_descriptor: descriptor.Descriptor) -> frozenset[str]:
    """Top-level fields a caller may change: not OUTPUT_ONLY, IDENTIFIER or IMMUTABLE."""
    return frozenset(
        f.name
        for f in message_descriptor.fields
        if not _behaviors(f) & {OUTPUT_ONLY, IDENTIFIER, IMMUTABLE}
    )


def _resolve(message_descriptor: descriptor.Descriptor, path: str) -> str | None:
    """Why ``path`` cannot be used in an update mask, or None when it can."""
    parts = path.split(".")
    current: descriptor.Descriptor | None = message_descriptor
    for depth, part in enumerate(parts):
        if current is None:
            return f"{'.'.join(parts[:depth])} has no sub-fields"
        field = current.fields_by_name.get(part)
        if field is None:
            return f"{current.name} has no field {part!r}"
        if depth == 0 and part not in updatable_paths(message_descriptor):
            return f"{part} cannot be updated (output only, identifier or immutable)"
        if depth > 0 and _behaviors(field) & {OUTPUT_ONLY, IDENTIFIER, IMMUTABLE}:
            return f"{path} cannot be updated (output only, identifier or immutable)"
        if field.is_repeated and depth < len(parts) - 1:
            return f"{'.'.join(parts[: depth + 1])} is repeated; name it whole"
        current = field.message_type
    return None


def apply_update_mask(target: Message, source: Message, paths: list[str], mask_field: str) -> None:
    """Copy the fields named by ``paths`` from ``source`` into ``target`` (AIP-134).

    No paths means every updatable field; ``*`` alone means the same (full replacement of what
    the caller may write). Unknown or read-only paths raise INVALID_ARGUMENT naming each one.
    """
    descriptor_ = _descriptor(target)
    if not paths or paths == ["*"]:
        paths = sorted(updatable_paths(descriptor_))
    violations = [
        FieldViolation(mask_field, f"{path!r}: {problem}.")
        for path in paths
        if (
            problem := ("'*' must be the only path" if path == "*" else _resolve(descriptor_, path))
        )
    ]
    if violations:
        raise ServiceError.invalid_argument(
            "The update mask names fields that cannot be updated.", violations
        )
    for path in paths:
        _copy_path(target, source, path.split("."))


def _copy_path(target: Message, source: Message, parts: list[str]) -> None:
    name = parts[0]
    field = target.DESCRIPTOR.fields_by_name[name]
    if len(parts) > 1:
        if not source.HasField(name):
            target.ClearField(name)  # AIP-134: a path to an unset message clears it
            return
        _copy_path(getattr(target, name), getattr(source, name), parts[1:])
        return
    if field.is_repeated:
        target.ClearField(name)
        getattr(target, name).MergeFrom(getattr(source, name))
    elif field.message_type is not None:
        if source.HasField(name):
            getattr(target, name).CopyFrom(getattr(source, name))
        else:
            target.ClearField(name)
    elif field.has_presence and not source.HasField(name):
        target.ClearField(name)
    else:
        setattr(target, name, getattr(source, name))
