"""The proto comments of the contract, keyed by full name, for schemas and API docs.

The generated ``*_pb2`` modules drop comments; ``descriptor_set.binpb`` keeps them as
``source_code_info``: locations addressed by a *path* of field numbers and indexes into
``FileDescriptorProto`` (``[4, 0, 2, 3]`` = ``message_type[0].field[3]``; see
google/protobuf/descriptor.proto, ``SourceCodeInfo.Location.path``). This module resolves those
paths to full names once, so JSON Schemas, OpenAPI and MCP tool descriptions read the comments the
``.proto`` files were written with: descriptors drive the documents.

Keys: messages, fields (``pkg.Msg.field``), oneofs (``pkg.Msg.oneof``), enums, enum values
(``pkg.Enum.VALUE``, nested under the enum rather than in the enum's scope as protobuf's own
naming does, so a value never needs its enum guessed), services and methods
(``pkg.Service.Method``). Values are leading comments, dedented, trailing whitespace stripped.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from google.protobuf import descriptor, descriptor_pb2

__all__ = ["clean", "comment", "comments"]

_DESCRIPTOR_SET = "descriptor_set.binpb"

# Field numbers in google/protobuf/descriptor.proto that lead from a file to a named element.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM, _MESSAGE_ONEOF = 2, 3, 4, 8
_ENUM_VALUE = 2
_SERVICE_METHOD = 2

_Path = tuple[int, ...]


def _enum_names(
    enum: descriptor_pb2.EnumDescriptorProto, path: _Path, full: str
) -> Iterator[tuple[_Path, str]]:
    yield path, full
    for index, value in enumerate(enum.value):
        yield (*path, _ENUM_VALUE, index), f"{full}.{value.name}"


def _message_names(
    message: descriptor_pb2.DescriptorProto, path: _Path, full: str
) -> Iterator[tuple[_Path, str]]:
    yield path, full
    for index, field in enumerate(message.field):
        yield (*path, _MESSAGE_FIELD, index), f"{full}.{field.name}"
    for index, oneof in enumerate(message.oneof_decl):
        yield (*path, _MESSAGE_ONEOF, index), f"{full}.{oneof.name}"
    for index, nested in enumerate(message.nested_type):
        yield from _message_names(nested, (*path, _MESSAGE_NESTED, index), f"{full}.{nested.name}")
    for index, enum in enumerate(message.enum_type):
        yield from _enum_names(enum, (*path, _MESSAGE_ENUM, index), f"{full}.{enum.name}")


def _file_names(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[_Path, str]]:
    prefix = f"{file.package}." if file.package else ""
    for index, message in enumerate(file.message_type):
        yield from _message_names(message, (_FILE_MESSAGE, index), prefix + message.name)
    for index, enum in enumerate(file.enum_type):
        yield from _enum_names(enum, (_FILE_ENUM, index), prefix + enum.name)
    for index, service in enumerate(file.service):
        full = prefix + service.name
        yield (_FILE_SERVICE, index), full
        for method_index, method in enumerate(service.method):
            yield (_FILE_SERVICE, index, _SERVICE_METHOD, method_index), f"{full}.{method.name}"


def clean(text: str) -> str:
    """A comment as written: common indentation removed, no trailing whitespace or blank edges."""
    lines = [line.rstrip() for line in textwrap.dedent(text).splitlines()]
    return "\n".join(lines).strip("\n")


@cache
def comments() -> Mapping[str, str]:
    """Leading comment of every commented element of the contract and its imports, by full name.

    Read-only; built on first use from the descriptor set shipped beside the generated code.
    """
    data = resources.files("ces_eval.generated").joinpath(_DESCRIPTOR_SET).read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data)
    found: dict[str, str] = {}
    for file in files.file:
        names = dict(_file_names(file))
        for location in file.source_code_info.location:
            name = names.get(tuple(location.path))
            if name is not None and location.leading_comments.strip():
                found[name] = clean(location.leading_comments)
    return MappingProxyType(found)


def comment(
    element: descriptor.Descriptor
    | descriptor.FieldDescriptor
    | descriptor.OneofDescriptor
    | descriptor.EnumDescriptor
    | descriptor.EnumValueDescriptor
    | descriptor.ServiceDescriptor
    | descriptor.MethodDescriptor,
) -> str:
    """The comment of one descriptor ("" when it has none)."""
    if isinstance(element, descriptor.EnumValueDescriptor):
        return comments().get(f"{element.type.full_name}.{element.name}", "")
    return comments().get(element.full_name, "")
