"""Access to our compiled contract and to the official client's dumped facts, for tests.

Our side is ``generated/descriptor_set.binpb``; the official side comes from running
``tests/official/dump_official.py`` in the client's own environment. Each is loaded into a
DescriptorPool of its own, so both can be compared in one process without touching protobuf's
default pool.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTOR_SET = ROOT / "generated" / "descriptor_set.binpb"
OFFICIAL_ROUTES = ROOT / "generated" / "official_routes.json"
CLIENT_PYTHON = Path(os.environ.get("CES_CLIENT_PYTHON", ROOT / ".venv-client" / "bin" / "python"))
# The official services ces-eval serves, compared RPC by RPC with the client: the whole API.
SERVICES = tuple(
    f"google.cloud.ces.v1beta.{name}"
    for name in (
        "EvaluationService",
        "AgentService",
        "SessionService",
        "ToolService",
        "WidgetService",
    )
)


@dataclass(frozen=True)
class Official:
    # ``Service.Rpc`` (``AgentService.CreateApp``) → its facts, ``service`` the full name.
    rpcs: dict[str, dict[str, Any]]
    operations_http: dict[str, list[dict[str, str]]]
    locations_http: dict[str, list[dict[str, str]]]
    roots: list[str]
    files: descriptor_pb2.FileDescriptorSet
    pool: descriptor_pool.DescriptorPool


def load_pool(files: descriptor_pb2.FileDescriptorSet) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


@cache
def ours() -> tuple[descriptor_pb2.FileDescriptorSet, descriptor_pool.DescriptorPool]:
    files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes())
    return files, load_pool(files)


@cache
def official() -> Official:
    if not CLIENT_PYTHON.exists():
        raise RuntimeError(
            f"{CLIENT_PYTHON} is missing: `make setup` builds the official client's environment"
        )
    completed = subprocess.run(
        [str(CLIENT_PYTHON), str(ROOT / "tests" / "official" / "dump_official.py")],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(completed.stdout)
    files = descriptor_pb2.FileDescriptorSet.FromString(
        base64.b64decode(data["file_descriptor_set"])
    )
    return Official(
        rpcs=data["rpcs"],
        operations_http=data["operations_http"],
        locations_http=data["locations_http"],
        roots=data["roots"],
        files=files,
        pool=load_pool(files),
    )


def reachable(
    pool: descriptor_pool.DescriptorPool, roots: list[str]
) -> tuple[dict[str, descriptor.Descriptor], dict[str, descriptor.EnumDescriptor]]:
    """Every message and enum reachable from ``roots`` through fields and nesting."""
    messages: dict[str, descriptor.Descriptor] = {}
    enums: dict[str, descriptor.EnumDescriptor] = {}

    def visit(message: descriptor.Descriptor) -> None:
        if message.full_name in messages:
            return
        messages[message.full_name] = message
        for field in message.fields:
            if field.message_type is not None:
                visit(field.message_type)
            if field.enum_type is not None:
                enums[field.enum_type.full_name] = field.enum_type
        for nested in message.nested_types:
            visit(nested)
        for nested_enum in message.enum_types:
            enums[nested_enum.full_name] = nested_enum

    for root in roots:
        visit(pool.FindMessageTypeByName(root))
    return messages, enums


def method_options(
    files: descriptor_pb2.FileDescriptorSet, service: str
) -> dict[str, descriptor_pb2.MethodDescriptorProto]:
    """Method protos of ``service`` (options parsed with every imported extension)."""
    package, _, name = service.rpartition(".")
    for file in files.file:
        if file.package != package:
            continue
        for proto in file.service:
            if proto.name == name:
                return {m.name: m for m in proto.method}
    raise KeyError(service)


def official_rpc_names() -> list[str]:
    """The official client's RPCs of :data:`SERVICES`, as ``Service.Rpc``, for parametrizing
    tests at collection time without running the client: ``generated/official_routes.json``, which
    ``tools/official_routes.py`` records from the client's gRPC transport (``make
    check-generated`` keeps it fresh). ``test_official_wire`` also holds it equal to the RPCs
    :func:`official` dumps from the client itself."""
    document = json.loads(OFFICIAL_ROUTES.read_text(encoding="utf-8"))
    return sorted(
        f"{m['service'].rsplit('.', 1)[1]}.{m['name']}"
        for m in document["methods"]
        if m["service"] in SERVICES
    )
