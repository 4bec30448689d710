"""tools/grpc_tools_plugin.py: grpcio-tools' generators as a buf plugin.

The plugin clears the ``json_name`` values buf sets on every field when they only restate the
default, so that the modules' serialized descriptors are what protoc writes from the sources;
the default must be protobuf's own, and a name a ``.proto`` spells out must stay. The byte
identity of the whole output is checked by tests/integration/test_check_generated.py.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.compiler import plugin_pb2

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["name", "display_name", "foo__bar", "_leading", "trailing_", "a_1_b", "camelCase", "x_y_z"]


def tool(name: str) -> ModuleType:
    """tools/<name>.py as a module (tools/ is a folder of scripts, not a package)."""
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module(name)


def plugin() -> ModuleType:
    return tool("grpc_tools_plugin")


def _file(json_names: dict[str, str]) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="t/names.proto", package="t", syntax="proto3")
    message = file.message_type.add(name="Names")
    for number, name in enumerate(NAMES, start=1):
        field = message.field.add(
            name=name,
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
        if name in json_names:
            field.json_name = json_names[name]
    nested = message.nested_type.add(name="Inner")
    nested.field.add(
        name="inner_field",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        json_name="innerField",
    )
    return file


def test_the_default_is_protobufs_own() -> None:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file({}))
    message = pool.FindMessageTypeByName("t.Names")
    for name in NAMES:
        assert plugin().default_json_name(name) == message.fields_by_name[name].json_name, name


def test_only_default_names_are_dropped() -> None:
    module = plugin()
    file = _file({name: module.default_json_name(name) for name in NAMES} | {"x_y_z": "custom"})
    module.drop_default_json_names(file)
    [message] = file.message_type
    assert {f.name: f.json_name for f in message.field if f.HasField("json_name")} == {
        "x_y_z": "custom"
    }
    assert not message.nested_type[0].field[0].HasField("json_name")


@pytest.mark.parametrize("generator", ["python", "grpc_python"])
def test_it_answers_with_grpcio_tools_output(generator: str) -> None:
    """Over the committed descriptor set (buf's: json_name on every field, comments), what
    generated/ holds."""
    files = descriptor_pb2.FileDescriptorSet.FromString(
        (ROOT / "generated" / "descriptor_set.binpb").read_bytes()
    )
    assert all(f.json_name for f in files.file[-1].message_type[0].field)
    target = evaluation_service_pb2.DESCRIPTOR.name
    request = plugin_pb2.CodeGeneratorRequest(file_to_generate=[target], proto_file=files.file)
    response = plugin().respond(generator, request)
    assert not response.error
    stem = "evaluation_service_pb2" if generator == "python" else "evaluation_service_pb2_grpc"
    name = f"google/cloud/ces/v1beta/{stem}.py"
    assert [f.name for f in response.file] == [name]
    # What generated/ holds, once tools/generate.py has rewritten the imports.
    generate = tool("generate")
    own = generate._own_modules(sorted(generate.PROTOS.rglob("*.proto")))
    rewritten = generate._relativize(response.file[0].content, "google.cloud.ces.v1beta", own)
    committed = (ROOT / "generated" / name).read_text(encoding="utf-8")
    assert generate._HEADER + rewritten == committed


def test_an_unknown_generator_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert plugin().main(["java"]) == 2
    assert "usage" in capsys.readouterr().err
