"""The compiled contract: services and HTTP rules, read from the generated descriptors.

Everything that depends on the API's shape (routes, schemas, validation, docs) starts here, so
there is no hand-kept list of methods or fields anywhere else (GUIDE §7.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from google.api import annotations_pb2, http_pb2
from google.longrunning import operations_proto_pb2

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2

if TYPE_CHECKING:
    from google.protobuf import descriptor

__all__ = [
    "OPERATIONS",
    "SPECIAL_JSON_TYPES",
    "WRAPPER_TYPES",
    "HttpBinding",
    "http_bindings",
    "http_rule",
    "services",
]

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


# google.longrunning.Operations carries generic rules (``/v1/{name=operations/**}``); each API
# rebinds it in its service configuration. These are the CES bindings, as the official client's
# REST transport uses them (WaitOperation has none: it is gRPC only).
_OPERATIONS_RULES = {
    "GetOperation": http_pb2.HttpRule(get="/v1beta/{name=projects/*/locations/*/operations/*}"),
    "ListOperations": http_pb2.HttpRule(get="/v1beta/{name=projects/*/locations/*}/operations"),
    "DeleteOperation": http_pb2.HttpRule(
        delete="/v1beta/{name=projects/*/locations/*/operations/*}"
    ),
    "CancelOperation": http_pb2.HttpRule(
        post="/v1beta/{name=projects/*/locations/*/operations/*}:cancel", body="*"
    ),
}
OPERATIONS = "google.longrunning.Operations"


@cache
def services() -> tuple[descriptor.ServiceDescriptor, ...]:
    """The services this server implements: the public EvaluationService, the Operations
    service of its long-running methods, and our emulator."""
    return (
        evaluation_service_pb2.DESCRIPTOR.services_by_name["EvaluationService"],
        operations_proto_pb2.DESCRIPTOR.services_by_name["Operations"],
        emulator_service_pb2.DESCRIPTOR.services_by_name["EmulatorService"],
    )


def http_rule(method: descriptor.MethodDescriptor) -> http_pb2.HttpRule | None:
    """The HTTP rule of ``method``: its ``google.api.http`` option, or for the Operations
    service the CES service-configuration binding."""
    if method.containing_service.full_name == OPERATIONS:
        return _OPERATIONS_RULES.get(method.name)
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
