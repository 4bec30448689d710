"""A protoc plugin for ``buf generate`` that runs one of grpcio-tools' built-in generators.

grpcio-tools ships protoc as a Python module (``python -m grpc_tools.protoc``) with protoc's
Python generator and its own gRPC Python generator built in, and no ``protoc-gen-*`` binary. buf
runs protoc's generators as ``protoc_builtin`` plugins, but only those protoc itself knows, and
it hands them descriptors in which every field's ``json_name`` is set: the Python generator would
then embed each one in its serialized descriptors, unlike protoc compiling the sources, which
sets only the names a ``.proto`` spells out. So buf.gen.yaml runs both generators through this
plugin: it reads the CodeGeneratorRequest (google/protobuf/compiler/plugin.proto), drops the
``json_name`` values equal to the default (protobuf computes the same name from the field name),
runs grpcio-tools' protoc over the request's files given as a descriptor set, and answers with
the files it wrote. The output is byte for byte what ``grpc_tools.protoc`` writes from the
sources.

Usage (buf.gen.yaml): ``local: [.venv/bin/python, tools/grpc_tools_plugin.py, GENERATOR]`` with
GENERATOR ``python`` or ``grpc_python``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc

GENERATORS = frozenset({"python", "grpc_python"})


def default_json_name(field_name: str) -> str:
    """protoc's default JSON name (descriptor.cc ToJsonName): underscores dropped, the letter
    after each capitalized."""
    out: list[str] = []
    upper = False
    for char in field_name:
        if char == "_":
            upper = True
        elif upper:
            out.append(char.upper())
            upper = False
        else:
            out.append(char)
    return "".join(out)


def _messages(
    messages: Iterable[descriptor_pb2.DescriptorProto],
) -> Iterable[descriptor_pb2.DescriptorProto]:
    for message in messages:
        yield message
        yield from _messages(message.nested_type)


def drop_default_json_names(file: descriptor_pb2.FileDescriptorProto) -> None:
    """Clear, in place, every field's ``json_name`` that only restates the default."""
    fields = [*file.extension]
    for message in _messages(file.message_type):
        fields += [*message.field, *message.extension]
    for field in fields:
        if field.json_name == default_json_name(field.name):
            field.ClearField("json_name")


def respond(
    generator: str, request: plugin_pb2.CodeGeneratorRequest
) -> plugin_pb2.CodeGeneratorResponse:
    """The files ``generator`` writes for ``request.file_to_generate``."""
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    files = descriptor_pb2.FileDescriptorSet(file=request.proto_file)
    for file in files.file:
        drop_default_json_names(file)
    with tempfile.TemporaryDirectory() as tmp:
        descriptors, out = Path(tmp) / "request.binpb", Path(tmp) / "out"
        out.mkdir()
        descriptors.write_bytes(files.SerializeToString())
        option = f"{request.parameter}:" if request.parameter else ""
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"--descriptor_set_in={descriptors}",
                f"--{generator}_out={option}{out}",
                *request.file_to_generate,
            ]
        )
        if status != 0:
            response.error = f"grpc_tools.protoc --{generator}_out exited {status}"
            return response
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            response.file.add(
                name=path.relative_to(out).as_posix(), content=path.read_text(encoding="utf-8")
            )
    return response


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 1 or arguments[0] not in GENERATORS:
        print(f"usage: grpc_tools_plugin.py {{{','.join(sorted(GENERATORS))}}}", file=sys.stderr)
        return 2
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(respond(arguments[0], request).SerializeToString())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
