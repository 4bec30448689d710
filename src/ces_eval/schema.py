"""The compiled contract: services and HTTP rules, read from the generated descriptors.

Everything that depends on the API's shape (routes, schemas, validation, docs) starts here, so
there is no hand-kept list of methods or fields anywhere else (GUIDE §7.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from google.api import annotations_pb2

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2

if TYPE_CHECKING:
    from google.api import http_pb2
    from google.protobuf import descriptor

__all__ = ["HttpBinding", "http_bindings", "services"]


@dataclass(frozen=True)
class HttpBinding:
    """One HTTP binding of a method (the rule itself or one of its additional_bindings)."""

    method: descriptor.MethodDescriptor
    verb: str
    template: str
    body: str


@cache
def services() -> tuple[descriptor.ServiceDescriptor, ...]:
    """The services this server implements: the public EvaluationService and our emulator."""
    return (
        evaluation_service_pb2.DESCRIPTOR.services_by_name["EvaluationService"],
        emulator_service_pb2.DESCRIPTOR.services_by_name["EmulatorService"],
    )


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
            options = method.GetOptions()
            if options.HasExtension(annotations_pb2.http):
                found += _bindings(method, options.Extensions[annotations_pb2.http])
    return tuple(found)
