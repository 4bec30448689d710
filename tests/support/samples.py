"""Fully populated sample messages, built by walking descriptors.

``populate(message, variant)`` sets every field of ``message`` and, recursively, of every nested
message: one member of each oneof (``variant`` picks which; repeated elements take
``variant + index``, so a few variants cover every branch), two elements in every repeated field
and map, and values chosen to exercise proto3 JSON: non-ASCII strings, bytes whose base64 uses
``+`` and ``/``, int64 beyond 2**53, Timestamps with nanoseconds, negative Durations, Structs
with nested lists and nulls, Any with a packed message.
Recursive types (Span.child_spans, Evaluation.last_completed_result, Struct) stop at ``MAX_DEPTH``.
"""

from __future__ import annotations

from google.longrunning import operations_pb2
from google.protobuf import (
    any_pb2,
    descriptor,
    duration_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
)
from google.protobuf.message import Message

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

__all__ = ["MAX_DEPTH", "contract_messages", "oneof_branches", "populate", "set_branches"]

MAX_DEPTH = 7
_F = descriptor.FieldDescriptor


def _struct(variant: int) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(
        {
            "text": f"wert-{variant} – ✓",
            "number": 2.5 + variant,
            "flag": True,
            "nothing": None,
            "nested": {"list": [1, "two", None, [False, {"deep": None}]], "empty": {}},
            "emptyList": [],
        }
    )
    return value


def _well_known(message: Message, variant: int) -> bool:
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        assert isinstance(message, timestamp_pb2.Timestamp)
        message.seconds, message.nanos = 1_700_000_000 + variant, 123_456_789
    elif name == "google.protobuf.Duration":
        assert isinstance(message, duration_pb2.Duration)
        message.seconds, message.nanos = -3, -500_000_000
    elif name == "google.protobuf.Struct":
        message.CopyFrom(_struct(variant))
    elif name == "google.protobuf.Value":
        assert isinstance(message, struct_pb2.Value)
        message.struct_value.CopyFrom(_struct(variant))
    elif name == "google.protobuf.ListValue":
        assert isinstance(message, struct_pb2.ListValue)
        message.extend([1, None, "x"])
    elif name == "google.protobuf.Any":
        assert isinstance(message, any_pb2.Any)
        message.Pack(duration_pb2.Duration(seconds=7, nanos=1))
    else:
        return False
    return True


_SCALARS = {
    _F.TYPE_STRING: lambda f, v, i: f"{f.name}-{v}-{i}-ünï €",
    _F.TYPE_BYTES: lambda f, v, i: bytes([0xFB, 0xFF, 0x00, v, i, 0xBF]),
    _F.TYPE_BOOL: lambda f, v, i: True,
    _F.TYPE_INT64: lambda f, v, i: -(2**53) - 3 - v,
    _F.TYPE_SINT64: lambda f, v, i: -(2**53) - 3 - v,
    _F.TYPE_SFIXED64: lambda f, v, i: -(2**53) - 3 - v,
    _F.TYPE_UINT64: lambda f, v, i: 2**63 + v,
    _F.TYPE_FIXED64: lambda f, v, i: 2**63 + v,
    _F.TYPE_INT32: lambda f, v, i: -7 - v - i,
    _F.TYPE_SINT32: lambda f, v, i: -7 - v - i,
    _F.TYPE_SFIXED32: lambda f, v, i: -7 - v - i,
    _F.TYPE_UINT32: lambda f, v, i: 7 + v + i,
    _F.TYPE_FIXED32: lambda f, v, i: 7 + v + i,
    _F.TYPE_FLOAT: lambda f, v, i: 0.75 + v,  # exactly representable as float32
    _F.TYPE_DOUBLE: lambda f, v, i: 0.75 + v,
    _F.TYPE_ENUM: lambda f, v, i: [e.number for e in f.enum_type.values if e.number][
        (v + i) % len([e for e in f.enum_type.values if e.number])
    ],
}


def _scalar(field: descriptor.FieldDescriptor, variant: int, index: int) -> object:
    return _SCALARS[field.type](field, variant, index)


def _chosen(field: descriptor.FieldDescriptor, variant: int) -> bool:
    oneof = field.containing_oneof
    if oneof is None or (field.has_presence and len(oneof.fields) == 1):
        return True  # plain field, or proto3 `optional` (a synthetic one-member oneof)
    return oneof.fields[variant % len(oneof.fields)] is field


def _populate_map(
    message: Message, field: descriptor.FieldDescriptor, variant: int, depth: int
) -> None:
    key_field = field.message_type.fields_by_name["key"]
    value_field = field.message_type.fields_by_name["value"]
    container = getattr(message, field.name)
    for index in range(2):
        key = _scalar(key_field, variant, index)
        if value_field.message_type is None:
            container[key] = _scalar(value_field, variant, index)
        elif depth < MAX_DEPTH:
            populate(container[key], variant, depth + 1)


def populate(message: Message, variant: int = 0, depth: int = 0) -> Message:
    if _well_known(message, variant):
        return message
    for field in message.DESCRIPTOR.fields:
        if not _chosen(field, variant):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            _populate_map(message, field, variant, depth)
            continue
        if field.message_type is not None:
            if depth >= MAX_DEPTH:
                continue
            if field.is_repeated:
                # Each element takes the next variant, so branches deep inside a oneof member
                # are not always chosen together with that member.
                for index in range(2):
                    populate(getattr(message, field.name).add(), variant + index, depth + 1)
            else:
                populate(getattr(message, field.name), variant, depth + 1)
            continue
        if field.is_repeated:
            getattr(message, field.name).extend(_scalar(field, variant, i) for i in range(2))
        else:
            setattr(message, field.name, _scalar(field, variant, 0))
    return message


def oneof_branches(root: descriptor.Descriptor) -> set[str]:
    """Full names of every member of every real oneof reachable from ``root``."""
    seen: set[str] = set()
    branches: set[str] = set()

    def visit(message: descriptor.Descriptor) -> None:
        if message.full_name in seen:
            return
        seen.add(message.full_name)
        for oneof in message.oneofs:
            if len(oneof.fields) > 1 or not oneof.fields[0].has_presence:
                branches.update(f.full_name for f in oneof.fields)
        for field in message.fields:
            if field.message_type is not None:
                visit(field.message_type)

    visit(root)
    # google.protobuf.Value's `kind` is JSON-shaped data, exercised through Struct contents.
    return {b for b in branches if not b.startswith("google.protobuf.")}


def set_branches(message: Message) -> set[str]:
    """Full names of the oneof members set anywhere inside ``message``."""
    found: set[str] = set()
    for oneof in message.DESCRIPTOR.oneofs:
        name = message.WhichOneof(oneof.name)
        if name is not None:
            found.add(message.DESCRIPTOR.fields_by_name[name].full_name)
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            values = (
                list(value.values())
                if field.message_type.fields_by_name["value"].message_type
                else []
            )
        elif field.is_repeated:
            values = list(value)
        else:
            values = [value]
        for item in values:
            found |= set_branches(item)
    return found


def contract_messages(*, empty: bool = False) -> list[Message]:
    """Each message type of the contract (the resources', the service's and the operations'
    files, and their nested types), populated in four variants: every field kind, oneof
    branch, map and well-known type the contract has; ``empty``: each type's empty message
    too."""
    found: list[Message] = []
    pending = [
        message_type
        for module in (evaluation_pb2, service_pb2, operations_pb2)
        for message_type in module.DESCRIPTOR.message_types_by_name.values()
    ]
    seen: set[str] = set()
    while pending:
        message_type = pending.pop()
        if message_type.full_name in seen or message_type.GetOptions().map_entry:
            continue
        seen.add(message_type.full_name)
        pending.extend(message_type.nested_types)
        cls = message_factory.GetMessageClass(message_type)
        found += [*([cls()] if empty else []), *(populate(cls(), v) for v in range(4))]
    return found
