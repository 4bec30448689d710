"""Authorization: which projects a call addresses, and whether its principal may use them.

A request is allowed only when every resource name it addresses lies in a project the principal
may use, with the access (read or write) the method needs. A refusal is PERMISSION_DENIED in the
form Google's front ends use ("… (or it may not exist)"), identical whether the resource exists
or not, so a foreign token learns nothing.

Which fields address resources, and whether a method writes, is read from the descriptors: the
variables of the method's ``google.api.http`` templates (``{parent=projects/*/…}``,
``{evaluation.name=…}``, parsed by :mod:`ces_eval.contract.templates`, the one template
grammar), or its ``name``/``parent`` field when it has no HTTP binding (WaitOperation), or else
the required resource references of its request's message fields (BidiRunSession, gRPC only:
``config.session`` of its first message, which :func:`authorized_bidi` authorizes before any
other is read); a method is read-only exactly when it is bound to GET, or has no binding and
takes no stream from the client.

A chat token's principal (GenerateChatToken, :mod:`ces_eval.access.chat_tokens`) reaches the
session methods of its one session and nothing else.

There is one extractor (:func:`addressed`), reading those fields through one path abstraction,
:class:`Fields`, wherever the values are: in a decoded request message (the core, for every
surface), in a REST route's path variables (before the body is read) or in MCP ``tools/call``
arguments (before they are validated).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from google.api import field_behavior_pb2, resource_pb2
from google.protobuf.message import Message

from ces_eval.access.tokens import ALL_PROJECTS
from ces_eval.contract import schema
from ces_eval.contract.templates import parse_template
from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from google.protobuf import descriptor

    from ces_eval.access.caller import BidiHandler, Caller, Handler, StreamHandler
    from ces_eval.access.tokens import Principal
    from ces_eval.contract.encoded import Response

__all__ = [
    "FieldPath",
    "Fields",
    "JsonFields",
    "MessageFields",
    "MethodAccess",
    "VariableFields",
    "addressed",
    "authorize",
    "authorized",
    "authorized_bidi",
    "authorized_streams",
    "method_access",
    "project_of",
]

FieldPath = tuple[str, ...]
_PROJECT = re.compile(r"projects/([^/]+)(?:/|$)")
_SHOWN = 512  # characters of a refused resource name quoted back
# The service whose methods a chat token's principal may call (for its own session).
SESSION_SERVICE = "google.cloud.ces.v1beta.SessionService"


class Fields(Protocol):
    """A request's field values, however the request is held: the string at a field path
    (proto names), "" when it is absent or not a string."""

    def value(self, path: FieldPath) -> str: ...


@dataclass(frozen=True, slots=True)
class MessageFields:
    """The fields of a decoded request message."""

    request: Message

    def value(self, path: FieldPath) -> str:
        current: Any = self.request
        for part in path:
            current = getattr(current, part)
        return str(current)


@dataclass(frozen=True, slots=True)
class VariableFields:
    """A REST route's path variables (dotted field path → value, as the router matched them)."""

    values: Mapping[str, str]

    def value(self, path: FieldPath) -> str:
        return self.values.get(".".join(path), "")


@dataclass(frozen=True, slots=True)
class JsonFields:
    """Proto3 JSON arguments (MCP ``tools/call``), which may spell each key by its proto or its
    JSON (lowerCamelCase) name."""

    arguments: Mapping[str, Any]

    def value(self, path: FieldPath) -> str:
        current: Any = self.arguments
        for part in path:
            if not isinstance(current, Mapping):
                return ""
            current = current.get(part, current.get(_camel(part)))
        return current if isinstance(current, str) else ""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


@dataclass(frozen=True)
class MethodAccess:
    """What a method touches: the request fields naming resources, and whether it writes."""

    fields: tuple[FieldPath, ...]
    write: bool


@cache
def method_access(method: descriptor.MethodDescriptor) -> MethodAccess:
    """The resource fields of ``method`` (the variables of all its HTTP bindings, in order) and
    whether it writes."""
    bindings = [b for b in schema.http_bindings() if b.method is method]
    paths: dict[FieldPath, None] = {}
    for binding in bindings:
        for variable in parse_template(binding.template).variables:
            paths[tuple(variable.split("."))] = None
    if not paths:
        for candidate in ("name", "parent"):
            if candidate in method.input_type.fields_by_name:
                paths[(candidate,)] = None
    if not paths:
        paths = dict.fromkeys(_referenced(method.input_type))
    write = any(binding.verb != "GET" for binding in bindings) or method.client_streaming
    return MethodAccess(tuple(paths), write)


def _referenced(message: descriptor.Descriptor) -> list[FieldPath]:
    """The required resource references of ``message``'s message fields
    (BidiSessionClientMessage: ``config.session``)."""
    found: list[FieldPath] = []
    for outer in message.fields:
        if outer.message_type is None:
            continue
        for inner in outer.message_type.fields:
            options = inner.GetOptions()
            required = (
                field_behavior_pb2.REQUIRED in options.Extensions[field_behavior_pb2.field_behavior]
            )
            if required and options.HasExtension(resource_pb2.resource_reference):
                found.append((outer.name, inner.name))
    return found


def _fields(source: Message | Fields) -> Fields:
    return MessageFields(source) if isinstance(source, Message) else source


def addressed(method: descriptor.MethodDescriptor, source: Message | Fields) -> tuple[str, ...]:
    """The resource names a call of ``method`` addresses, one per resource field, read from
    ``source`` (a request message, or :class:`Fields` of another form)."""
    fields = _fields(source)
    return tuple(fields.value(path) for path in method_access(method).fields)


def project_of(resource: str) -> str | None:
    """The project ID a resource name starts with (``projects/<id>/…``); None for none."""
    match = _PROJECT.match(resource)
    return None if match is None else match.group(1)


def authorize(
    principal: Principal, method: descriptor.MethodDescriptor, source: Message | Fields
) -> None:
    """PERMISSION_DENIED unless ``principal`` may use every project ``source`` addresses with
    the access ``method`` needs. Runs before validation: a name without a project is denied too
    (unless the principal reaches every project with that access, when validation answers), so
    a restricted token gets the same answer for every resource outside its projects."""
    write = method_access(method).write
    if principal.session:
        _authorize_session(principal, method, source)
        return
    for resource in addressed(method, source):
        project = project_of(resource)
        if project is None:
            if ALL_PROJECTS in principal.projects and (principal.writable or not write):
                continue
            raise _denied(method, resource)
        if not principal.may(project, write=write):
            raise _denied(method, resource)


def _authorize_session(
    principal: Principal, method: descriptor.MethodDescriptor, source: Message | Fields
) -> None:
    """A chat token's principal: the session methods of its session alone."""
    resources = addressed(method, source)
    if method.containing_service.full_name != SESSION_SERVICE or not resources:
        raise _denied(method, resources[0] if resources else "")
    for resource in resources:
        if resource != principal.session:
            raise _denied(method, resource)


def _principal(caller: Caller) -> Principal:
    if caller.principal is None:
        # The boundary authenticates first; reaching here without a principal is a wiring
        # fault, and it must fail closed.
        raise ServiceError(
            Code.UNAUTHENTICATED, "The request has no credentials.", "CREDENTIALS_MISSING"
        )
    return caller.principal


def _authorized(method: descriptor.MethodDescriptor, implementation: Handler) -> Handler:
    """``implementation`` behind :func:`authorize`: the first thing it does for every call."""

    async def call(request: Message, caller: Caller) -> Response:
        authorize(_principal(caller), method, request)
        return await implementation(request, caller)

    return call


def _authorized_stream(
    method: descriptor.MethodDescriptor, implementation: StreamHandler
) -> StreamHandler:
    """A server-streaming ``implementation`` behind :func:`authorize`, before its first
    response."""

    async def call(request: Message, caller: Caller) -> AsyncIterator[Response]:
        authorize(_principal(caller), method, request)
        async for response in implementation(request, caller):
            yield response

    return call


def _authorized_bidi(
    method: descriptor.MethodDescriptor, implementation: BidiHandler
) -> BidiHandler:
    """A bidirectional ``implementation`` behind :func:`authorize` of the client's first
    message (the resource fields are read there: :func:`method_access`), before the
    implementation reads anything."""

    async def call(requests: AsyncIterator[Message], caller: Caller) -> AsyncIterator[Response]:
        principal = _principal(caller)
        first = await anext(requests, None)
        if first is None:
            return
        authorize(principal, method, first)

        async def again() -> AsyncIterator[Message]:
            yield first
            async for request in requests:
                yield request

        async for response in implementation(again(), caller):
            yield response

    return call


def authorized_streams(implementations: Mapping[str, StreamHandler]) -> dict[str, StreamHandler]:
    """:func:`authorized` for server-streaming methods."""
    methods = schema.methods()
    return {
        path: _authorized_stream(methods[path], handler)
        for path, handler in implementations.items()
    }


def authorized_bidi(implementations: Mapping[str, BidiHandler]) -> dict[str, BidiHandler]:
    """:func:`authorized` for bidirectional methods."""
    methods = schema.methods()
    return {
        path: _authorized_bidi(methods[path], handler) for path, handler in implementations.items()
    }


def authorized(implementations: Mapping[str, Handler]) -> dict[str, Handler]:
    """``implementations`` (method path → handler, :func:`ces_eval.core.service.handlers`), each
    behind the project check of its method (``serve --auth-tokens``): every surface dispatches
    to these, so a call is authorized on its decoded request whatever wire it came by (REST and
    MCP also check path variables and tool arguments earlier, before reading the rest)."""
    methods = schema.methods()
    return {path: _authorized(methods[path], handler) for path, handler in implementations.items()}


def _denied(method: descriptor.MethodDescriptor, resource: str) -> ServiceError:
    permission = f"ces.{method.containing_service.name}.{method.name}"
    shown = resource if len(resource) <= _SHOWN else resource[:_SHOWN] + "…"
    return ServiceError(
        Code.PERMISSION_DENIED,
        f"Permission {permission!r} denied on resource {shown!r} (or it may not exist).",
        "IAM_PERMISSION_DENIED",
        {"permission": permission, "resource": shown},
    )
