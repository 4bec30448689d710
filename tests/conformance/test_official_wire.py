"""Wire conformance with Google's published client (issue: schema foundation).

For every message and enum reachable from the request, response and long-running types of the
EvaluationService RPCs in ``google-cloud-ces`` (all of them, as its gRPC transport lists them:
``tests/official/dump_official.py``), and from the request and response of SessionService.RunSession
(the session JSON the run engine exchanges with a team's own agent; the service itself is not
ours), ours must have the same full name; every official field
must exist with the same number, name, JSON name, type, cardinality, message/enum type, oneof and
presence; every enum value must match by name and number. The RPCs themselves must have the same
gRPC path, request and response types, ``google.api.http`` rule and
``google.longrunning.operation_info``, whether the core implements them or not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import pytest
from google.api import annotations_pb2, http_pb2
from google.longrunning import operations_proto_pb2
from google.protobuf import descriptor, descriptor_pool

from ces_eval.contract import schema
from tests.support import contract

# Every test compares with the official client, dumped by its own environment (.venv-client).
pytestmark = pytest.mark.external

_LABEL_REPEATED = 3
D = TypeVar("D", descriptor.Descriptor, descriptor.EnumDescriptor)


def _official_name(field: descriptor.FieldDescriptor) -> str:
    """proto-plus appends ``_`` to field names that clash with Python names (``type`` becomes
    ``type_``, ``ignore_unknown_fields`` ``ignore_unknown_fields_``) but keeps the proto JSON
    name (``type``, ``ignoreUnknownFields``); undo the rename."""
    name = field.name
    if not name.endswith("_"):
        return name
    first, *rest = name[:-1].split("_")
    camel = first + "".join(part[:1].upper() + part[1:] for part in rest)
    return name[:-1] if field.json_name == camel else name


def _type_name(field: descriptor.FieldDescriptor) -> str:
    if field.message_type is not None:
        return field.message_type.full_name
    if field.enum_type is not None:
        return field.enum_type.full_name
    return ""


def _oneof(field: descriptor.FieldDescriptor) -> str:
    return field.containing_oneof.name if field.containing_oneof is not None else ""


def _is_map(field: descriptor.FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _field_mismatches(official: descriptor.Descriptor, ours: descriptor.Descriptor) -> list[str]:
    problems: list[str] = []
    by_number = {f.number: f for f in ours.fields}
    for field in official.fields:
        where = f"{official.full_name}.{_official_name(field)} (#{field.number})"
        mine = by_number.get(field.number)
        if mine is None:
            problems.append(f"{where}: missing")
            continue
        checks = {
            "name": (_official_name(field), mine.name),
            "json_name": (field.json_name, mine.json_name),
            "type": (field.type, mine.type),
            "repeated": (field.is_repeated, mine.is_repeated),
            "type_name": (_type_name(field), _type_name(mine)),
            "oneof": (_oneof(field), _oneof(mine)),
            "presence": (field.has_presence, mine.has_presence),
            "map": (_is_map(field), _is_map(mine)),
        }
        problems += [
            f"{where}: {what} official={want!r} ours={got!r}"
            for what, (want, got) in checks.items()
            if want != got
        ]
    return problems


def _enum_mismatches(
    official: descriptor.EnumDescriptor, ours: descriptor.EnumDescriptor
) -> list[str]:
    mine = {v.name: v.number for v in ours.values}
    return [
        f"{official.full_name}.{value.name}: official={value.number} ours={mine.get(value.name)}"
        for value in official.values
        if mine.get(value.name) != value.number
    ]


def _compared(
    kind: str,
    official: Mapping[str, D],
    find: Callable[[str], D],
    mismatches: Callable[[D, D], list[str]],
) -> list[str]:
    """The mismatches of each official ``kind`` (message or enum) against ours of the same full
    name, found by ``find``; one line for each that we lack."""
    problems: list[str] = []
    for name, theirs in sorted(official.items()):
        try:
            mine = find(name)
        except KeyError:
            problems.append(f"{kind} {name}: missing")
            continue
        problems += mismatches(theirs, mine)
    return problems


def test_every_reachable_message_and_enum_matches_the_official_client() -> None:
    official = contract.official()
    _, pool = contract.ours()
    messages, enums = contract.reachable(official.pool, official.roots)
    mismatches = _compared("message", messages, pool.FindMessageTypeByName, _field_mismatches)
    mismatches += _compared("enum", enums, pool.FindEnumTypeByName, _enum_mismatches)
    field_count = sum(len(message.fields) for message in messages.values())
    print(
        f"conformance: {len(official.rpcs)} RPCs, {len(messages)} messages, {len(enums)} enums, "
        f"{field_count} fields compared; {len(mismatches)} mismatches"
    )
    assert mismatches == []
    # The walk must have covered the contract, not an empty or partial dump.
    assert "google.cloud.ces.v1beta.EvaluationResult.GoldenResult.TurnReplayResult" in messages
    assert "google.cloud.ces.v1beta.ScheduledEvaluationRun.SchedulingConfig" in messages
    assert "google.cloud.ces.v1beta.Conversation.Source" in enums
    assert "google.cloud.ces.v1beta.SessionConfig.RemoteDialogflowQueryParameters" in messages
    assert "google.cloud.ces.v1beta.GoogleSearchSuggestions" in messages
    assert "google.cloud.ces.v1beta.App" in messages
    assert "google.cloud.ces.v1beta.DataStoreTool.BoostSpec.ConditionBoostSpec" in messages
    assert "google.cloud.ces.v1beta.GenerateAppResourceRequest.AppGenerationConfig" in messages
    assert len(messages) > 350


def test_comparison_detects_a_changed_field() -> None:
    """The comparison itself must fail when a field number, type or oneof differs."""
    official = contract.official()
    _, pool = contract.ours()
    name = "google.cloud.ces.v1beta.ToolCall"
    assert (
        _field_mismatches(
            official.pool.FindMessageTypeByName(name), pool.FindMessageTypeByName(name)
        )
        == []
    )
    other = pool.FindMessageTypeByName("google.cloud.ces.v1beta.ToolResponse")
    assert _field_mismatches(official.pool.FindMessageTypeByName(name), other) != []


def _operation_type(
    pool: descriptor_pool.DescriptorPool, service: descriptor.ServiceDescriptor, name: str
) -> descriptor.Descriptor:
    """A message named in ``operation_info``: fully qualified (``google.protobuf.Empty``), or
    relative to the service's package (google/longrunning/operations.proto)."""
    try:
        return pool.FindMessageTypeByName(name)
    except KeyError:
        return pool.FindMessageTypeByName(f"{service.file.package}.{name}")


def _http_rule(rule: http_pb2.HttpRule) -> dict[str, str]:
    pattern = rule.WhichOneof("pattern")
    assert pattern is not None
    out = {"method": pattern, "uri": getattr(rule, pattern)}
    if rule.body:
        out["body"] = rule.body
    return out


@pytest.mark.parametrize("qualified", sorted(contract.official_rpc_names()))
def test_rpc_matches_the_official_client(qualified: str) -> None:
    official = contract.official().rpcs[qualified]
    rpc = qualified.split(".")[1]
    files, pool = contract.ours()
    service = pool.FindServiceByName(official["service"])
    method = service.methods_by_name[rpc]
    assert f"/{service.full_name}/{method.name}" == official["path"]
    assert method.input_type.full_name == official["request"]
    assert method.output_type.full_name == official["response"]
    streaming = contract.method_options(files, official["service"])[rpc]
    assert streaming.client_streaming == official["client_streaming"]
    assert streaming.server_streaming == official["server_streaming"]

    proto = contract.method_options(files, official["service"])[rpc]
    if proto.options.HasExtension(annotations_pb2.http):
        rule = proto.options.Extensions[annotations_pb2.http]
        rules = [_http_rule(rule)] + [_http_rule(r) for r in rule.additional_bindings]
    else:
        rules = []
    assert rules == official["http"]

    info = proto.options.Extensions[operations_proto_pb2.operation_info]
    if official["lro"]:
        response, metadata = official["lro"]
        assert _operation_type(pool, service, info.response_type).full_name == response
        assert _operation_type(pool, service, info.metadata_type).full_name == metadata
    else:
        assert not proto.options.HasExtension(operations_proto_pb2.operation_info)


@pytest.mark.parametrize(
    ("service", "count"),
    [
        ("EvaluationService", 35),
        ("AgentService", 51),
        ("SessionService", 3),
        ("ToolService", 3),
        ("WidgetService", 1),
    ],
)
def test_service_declares_exactly_the_official_rpcs(service: str, count: int) -> None:
    _, pool = contract.ours()
    declared = pool.FindServiceByName(f"google.cloud.ces.v1beta.{service}")
    official = set(contract.official().rpcs)
    assert {f"{service}.{m.name}" for m in declared.methods} == {
        rpc for rpc in official if rpc.startswith(f"{service}.")
    }
    # What the RPC tests above are parametrized by is the client's own list.
    assert set(contract.official_rpc_names()) == official
    assert len([rpc for rpc in official if rpc.startswith(f"{service}.")]) == count


@pytest.mark.parametrize(
    "rpc", ["GetOperation", "ListOperations", "DeleteOperation", "CancelOperation"]
)
def test_operations_bindings_match_the_official_client(rpc: str) -> None:
    """The Operations service is rebound by the CES service configuration; ours must be the
    paths the official client's REST transport calls."""
    method = next(m for s in schema.services() for m in s.methods if m.name == rpc)
    rule = schema.http_rule(method)
    assert rule is not None
    assert [_http_rule(rule)] == contract.official().operations_http[rpc]


@pytest.mark.parametrize("rpc", ["GetLocation", "ListLocations"])
def test_locations_bindings_match_the_official_client(rpc: str) -> None:
    """The Locations mixin, rebound like Operations: the paths of the official REST transport,
    at the gRPC path its gRPC transport calls (official_routes.json)."""
    method = next(m for s in schema.services() for m in s.methods if m.name == rpc)
    assert method.containing_service.full_name == schema.LOCATIONS
    rule = schema.http_rule(method)
    assert rule is not None
    assert [_http_rule(rule)] == contract.official().locations_http[rpc]
    official = {m.path for m in schema.official_routes().methods}
    assert schema.method_path(method) in official
