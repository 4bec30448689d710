"""Field behaviours (google/api/field_behavior.proto) read from the descriptors.

What each behaviour asks of one message (which fields are REQUIRED and left empty, which sub-trees
can hold a behaviour at all); the walk that applies them to a whole request, clearing OUTPUT_ONLY
fields (AIP-203: ignored, not rejected) and enforcing REQUIRED ones inside every message the caller
set, is :mod:`ces_eval.contract.checks`. Update masks (AIP-134, AIP-161) are checked and applied
here against the fields a caller may change.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, cast

from google.api import field_behavior_pb2

from ces_eval.errors import FieldViolation, ServiceError

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

__all__ = [
    "ONEOF_REQUIRED",
    "REQUIRED_EMPTY",
    "apply_update_mask",
    "has_behavior",
    "own_required_violations",
    "required_fields",
    "subtree_has",
    "target_of",
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


def target_of(field: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
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
        target = target_of(field)
        if target is not None and _search(target, behavior, seen):
            return True
    return False


@cache
def subtree_has(message_descriptor: descriptor.Descriptor, behavior: int) -> bool:
    """Whether any field of this type or of a type reachable from it has ``behavior``: walks
    skip sub-trees where it cannot occur (most of a large golden conversation)."""
    return _search(message_descriptor, behavior, frozenset())


@cache
def required_fields(
    message_descriptor: descriptor.Descriptor,
) -> tuple[descriptor.FieldDescriptor, ...]:
    return tuple(
        field
        for field in message_descriptor.fields
        if has_behavior(field, REQUIRED) and not has_behavior(field, OUTPUT_ONLY)
    )


def _is_set(message: Message, field: descriptor.FieldDescriptor) -> bool:
    if field.is_repeated:
        return len(getattr(message, field.name)) > 0
    if field.has_presence:
        return message.HasField(field.name)
    return bool(getattr(message, field.name))


# What a REQUIRED field left empty is told (its oneof's, for a member of a real oneof).
REQUIRED_EMPTY = "Required."
ONEOF_REQUIRED = "One of its fields is required."


def own_required_violations(message: Message, path: str) -> list[FieldViolation]:
    """The REQUIRED fields ``message`` itself leaves empty (not those of its sub-messages): a
    REQUIRED member of a oneof is satisfied by any member of that oneof, reported as the
    oneof (once per member: the caller deduplicates)."""
    violations: list[FieldViolation] = []
    for field in required_fields(_descriptor(message)):
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if message.WhichOneof(oneof.name) is None:
                violations.append(
                    FieldViolation(f"{path}.{oneof.name}", ONEOF_REQUIRED, "REQUIRED")
                )
            continue
        if not _is_set(message, field):
            violations.append(FieldViolation(f"{path}.{field.name}", REQUIRED_EMPTY, "REQUIRED"))
    return violations


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
