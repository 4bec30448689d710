"""The compiled contract: services and HTTP rules, read from the generated descriptors.

Everything that depends on the API's shape (routes, schemas, validation, docs) starts here, so
there is no hand-kept list of methods or fields anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

from google.api import annotations_pb2, http_pb2
from google.cloud.location import locations_pb2
from google.longrunning import operations_proto_pb2

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    evaluation_service_pb2,
    session_service_pb2,
    tool_service_pb2,
    widget_service_pb2,
)

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

__all__ = [
    "LOCATIONS",
    "OFFICIAL_ROUTES",
    "OPERATIONS",
    "SPECIAL_JSON_TYPES",
    "WRAPPER_TYPES",
    "HttpBinding",
    "OfficialBinding",
    "OfficialMethod",
    "OfficialRoutes",
    "descriptor_of",
    "http_bindings",
    "http_rule",
    "method_path",
    "methods",
    "official_routes",
    "services",
    "unserved_bindings",
]


def descriptor_of(message: Message | type[Message]) -> descriptor.Descriptor:
    """``message``'s descriptor, as ``google.protobuf.descriptor`` types it (the stubs give
    ``DESCRIPTOR`` the union with upb's own class, which has the same members)."""
    return cast("descriptor.Descriptor", message.DESCRIPTOR)


# google.protobuf wrapper messages: JSON and query parameters carry their bare value.
WRAPPER_TYPES = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
# Well-known types whose proto3 JSON form is not an object of their fields.
SPECIAL_JSON_TYPES = WRAPPER_TYPES | {
    "google.protobuf.Timestamp",
    "google.protobuf.Duration",
    "google.protobuf.FieldMask",
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Any",
}


@dataclass(frozen=True)
class HttpBinding:
    """One HTTP binding of a method (the rule itself or one of its additional_bindings)."""

    method: descriptor.MethodDescriptor
    verb: str
    template: str
    body: str


# The mixins carry generic rules (``/v1/{name=operations/**}``, ``/v1/{name=locations/*}``); each
# API rebinds them in its service configuration. These are the CES bindings, as the official
# client's REST transport uses them (WaitOperation has none: it is gRPC only).
OPERATIONS = "google.longrunning.Operations"
LOCATIONS = "google.cloud.location.Locations"
_MIXIN_RULES = {
    OPERATIONS: {
        "GetOperation": http_pb2.HttpRule(get="/v1beta/{name=projects/*/locations/*/operations/*}"),
        "ListOperations": http_pb2.HttpRule(get="/v1beta/{name=projects/*/locations/*}/operations"),
        "DeleteOperation": http_pb2.HttpRule(
            delete="/v1beta/{name=projects/*/locations/*/operations/*}"
        ),
        "CancelOperation": http_pb2.HttpRule(
            post="/v1beta/{name=projects/*/locations/*/operations/*}:cancel", body="*"
        ),
    },
    LOCATIONS: {
        "GetLocation": http_pb2.HttpRule(get="/v1beta/{name=projects/*/locations/*}"),
        "ListLocations": http_pb2.HttpRule(get="/v1beta/{name=projects/*}/locations"),
    },
}


@cache
def services() -> tuple[descriptor.ServiceDescriptor, ...]:
    """The services this server implements: the public EvaluationService, AgentService,
    SessionService and WidgetService, the Operations service of their long-running methods, the
    Locations mixin, and our emulator."""
    return (
        evaluation_service_pb2.DESCRIPTOR.services_by_name["EvaluationService"],
        agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"],
        tool_service_pb2.DESCRIPTOR.services_by_name["ToolService"],
        session_service_pb2.DESCRIPTOR.services_by_name["SessionService"],
        widget_service_pb2.DESCRIPTOR.services_by_name["WidgetService"],
        operations_proto_pb2.DESCRIPTOR.services_by_name["Operations"],
        locations_pb2.DESCRIPTOR.services_by_name["Locations"],
        emulator_service_pb2.DESCRIPTOR.services_by_name["EmulatorService"],
    )


def http_rule(method: descriptor.MethodDescriptor) -> http_pb2.HttpRule | None:
    """The HTTP rule of ``method``: its ``google.api.http`` option, or for a mixin
    (Operations, Locations) the CES service-configuration binding."""
    mixin = _MIXIN_RULES.get(method.containing_service.full_name)
    if mixin is not None:
        return mixin.get(method.name)
    options = method.GetOptions()
    if options.HasExtension(annotations_pb2.http):
        return options.Extensions[annotations_pb2.http]
    return None


def _bindings(method: descriptor.MethodDescriptor, rule: http_pb2.HttpRule) -> list[HttpBinding]:
    pattern = rule.WhichOneof("pattern")
    found: list[HttpBinding] = []
    if pattern == "custom":
        found.append(HttpBinding(method, rule.custom.kind.upper(), rule.custom.path, rule.body))
    elif pattern is not None:
        found.append(HttpBinding(method, pattern.upper(), getattr(rule, pattern), rule.body))
    for extra in rule.additional_bindings:
        found += _bindings(method, extra)
    return found


@cache
def http_bindings() -> tuple[HttpBinding, ...]:
    """Every ``google.api.http`` binding of every method, in declaration order."""
    found: list[HttpBinding] = []
    for service in services():
        for method in service.methods:
            rule = http_rule(method)
            if rule is not None:
                found += _bindings(method, rule)
    return tuple(found)


def method_path(method: descriptor.MethodDescriptor) -> str:
    """The gRPC path of ``method`` (``/package.Service/Method``): the key of the core's handlers
    and of the official routes."""
    return f"/{method.containing_service.full_name}/{method.name}"


@cache
def methods() -> Mapping[str, descriptor.MethodDescriptor]:
    """Every method of :func:`services` by its gRPC path (:func:`method_path`), in declaration
    order: what the surfaces, authorization and the methods table look methods up by."""
    return {method_path(method): method for service in services() for method in service.methods}


# The official client's methods and routes, written by tools/official_routes.py (make generate).
OFFICIAL_ROUTES = "official_routes.json"


@dataclass(frozen=True)
class OfficialBinding:
    """One HTTP binding of an official method, as Google's client sends it."""

    path: str  # the method's gRPC path
    verb: str
    template: str
    body: str


@dataclass(frozen=True)
class OfficialMethod:
    """One method Google's client calls: an RPC of a CES service or of a mixin."""

    name: str
    service: str
    path: str
    client_method: str  # the client's Python method, e.g. ``run_evaluation``
    bindings: tuple[OfficialBinding, ...]


@dataclass(frozen=True)
class OfficialRoutes:
    client: str  # distribution and version of the client they were read from
    methods: tuple[OfficialMethod, ...]


def _official_method(entry: dict[str, Any]) -> OfficialMethod:
    path = str(entry["path"])
    return OfficialMethod(
        name=str(entry["name"]),
        service=str(entry["service"]),
        path=path,
        client_method=str(entry["client_method"]),
        bindings=tuple(
            OfficialBinding(path, str(b["verb"]), str(b["template"]), str(b["body"]))
            for b in entry["http"]
        ),
    )


@cache
def official_routes() -> OfficialRoutes:
    """The official client's methods, sorted by gRPC path. Read as package data (it ships in the
    wheel beside the descriptor set), never from the source tree."""
    text = resources.files("ces_eval.generated").joinpath(OFFICIAL_ROUTES).read_text("utf-8")
    document = json.loads(text)
    client = document["client"]
    return OfficialRoutes(
        client=f"{client['distribution']} {client['version']}",
        methods=tuple(_official_method(entry) for entry in document["methods"]),
    )


def unserved_bindings(bindings: Iterable[HttpBinding] | None = None) -> tuple[OfficialBinding, ...]:
    """The official bindings of every method that none of ``bindings`` (default: all of ours,
    :func:`http_bindings`) binds: a method is served on REST as soon as ``bindings`` bind its
    gRPC path, whatever its official templates. The REST surface passes the bindings of the
    methods the core implements (:func:`ces_eval.surfaces.rest.served_bindings`), so a method
    our descriptors declare but the core does not implement keeps its official 501 routes."""
    served = {method_path(b.method) for b in (http_bindings() if bindings is None else bindings)}
    return tuple(
        binding
        for method in official_routes().methods
        if method.path not in served
        for binding in method.bindings
    )
