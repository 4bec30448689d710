"""Resource names and IDs (AIP-122), with patterns read from the protos' resource annotations.

Patterns come from ``google.api.resource`` on the messages and ``google.api.resource_definition``
on the service file, never from string literals here, so the contract stays the one source.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from google.api import resource_pb2

from ces_eval.core.aip.stamps import random_bits
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    app_pb2,
    conversation_pb2,
    evaluation_pb2,
    evaluation_service_pb2,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "APP",
    "CONVERSATION",
    "DEFAULT_PERSONA",
    "EVALUATION",
    "EVALUATION_PERSONA",
    "EVALUATION_RESULT",
    "SESSION",
    "WILDCARD",
    "ResourcePattern",
    "app_of",
    "by_type",
    "foreign_id",
    "location_of",
    "new_id",
    "of",
    "owned",
    "snake_case",
    "validate_id",
]

# AIP-122: lowercase letter first, then letters, digits and hyphens, no trailing hyphen, ≤ 63.
_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
_ID_RULE = (
    "a lowercase letter, then up to 62 lowercase letters, digits or hyphens, not ending with a "
    "hyphen"
)
# Segments of parents we do not own (projects, locations, apps): any URL-safe run without '/'.
_FOREIGN_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,127}")
_VARIABLE = re.compile(r"\{([a-z_]+)\}")
WILDCARD = "-"


@cache
def _matcher(pattern: str, owned: int, allow_wildcard: str) -> re.Pattern[str]:
    """One regular expression accepting exactly the names :meth:`ResourcePattern.parse` accepts
    (its fast path); each variable is a named group."""
    variables = _VARIABLE.findall(pattern)
    owned_names = set(variables[len(variables) - owned :]) if owned else set()
    parts = []
    for expected in pattern.split("/"):
        variable = _VARIABLE.fullmatch(expected)
        if variable is None:
            parts.append(re.escape(expected))
            continue
        key = variable.group(1)
        rule = (_ID if key in owned_names else _FOREIGN_SEGMENT).pattern.replace("(", "(?:")
        if key == allow_wildcard:
            rule = f"{rule}|{re.escape(WILDCARD)}"
        parts.append(f"(?P<{key}>{rule})")
    return re.compile("/".join(parts))


@dataclass(frozen=True)
class ResourcePattern:
    """One resource type and its single name pattern, e.g. ``projects/{project}/...``."""

    type: str
    pattern: str

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(_VARIABLE.findall(self.pattern))

    @property
    def kind(self) -> str:
        return self.type.rsplit("/", 1)[-1]

    def parse(
        self, name: str, field: str, *, owned: int = 1, allow_wildcard: str = ""
    ) -> dict[str, str]:
        """Split ``name`` into its variables or raise INVALID_ARGUMENT about ``field``.

        The last ``owned`` variables are IDs this service assigns and must follow AIP-122; the
        variable named ``allow_wildcard`` may be ``-`` (AIP-159 reading across collections).
        """
        fast = _matcher(self.pattern, owned, allow_wildcard).fullmatch(name)
        if fast is not None:
            return fast.groupdict()
        values, problem, _ = self._walk(name, owned, allow_wildcard)
        if problem:
            raise ServiceError.invalid_argument(
                f"{field} {name!r} {problem}.", [FieldViolation(field, f"{name!r} {problem}.")]
            )
        return values

    def violation(
        self, name: str, field: str, *, owned: int = 1, quote: bool = True
    ) -> FieldViolation | None:
        """The problem :meth:`parse` raises for ``name``, as a violation of ``field``; None for
        a valid name. Without ``quote`` the description holds nothing of ``name`` (for a
        document whose text must not be shown, docs/security.md)."""
        if _matcher(self.pattern, owned, "").fullmatch(name) is not None:
            return None
        _, problem, blind = self._walk(name, owned, "")
        if not problem:
            return None
        return FieldViolation(field, f"{name!r} {problem}." if quote else f"The name {blind}.")

    def _walk(self, name: str, owned: int, allow_wildcard: str) -> tuple[dict[str, str], str, str]:
        """Walk a name the fast path refused segment by segment to say what is wrong: (the
        variables, the problem quoting the offending segment, the problem quoting nothing)."""
        segments = name.split("/")
        template = self.pattern.split("/")
        values: dict[str, str] = {}
        if len(segments) != len(template):
            problem = f"must have the form {self.pattern}"
            return values, problem, problem
        owned_names = set(self.variables[len(self.variables) - owned :]) if owned else set()
        for segment, expected in zip(segments, template, strict=True):
            variable = _VARIABLE.fullmatch(expected)
            if variable is None:
                if segment != expected:
                    problem = f"must have the form {self.pattern}"
                    return values, problem, problem
                continue
            key = variable.group(1)
            wildcard = key == allow_wildcard and segment == WILDCARD
            rule = _ID if key in owned_names else _FOREIGN_SEGMENT
            if not wildcard and rule.fullmatch(segment) is None:
                why = f" (AIP-122: {_ID_RULE})" if key in owned_names else ""
                return (
                    values,
                    f"has an invalid {key} ID {segment!r}{why}",
                    f"has an invalid {key} ID{why}",
                )
            values[key] = segment
        return values, "", ""

    def format(self, **values: str) -> str:
        return _VARIABLE.sub(lambda m: values[m.group(1)], self.pattern)


def of(message: type[Message]) -> ResourcePattern:
    """The name pattern of a resource message, from its ``google.api.resource`` option."""
    options = message.DESCRIPTOR.GetOptions()
    resource = options.Extensions[resource_pb2.resource]
    return ResourcePattern(resource.type, resource.pattern[0])


@cache
def _definitions() -> dict[str, ResourcePattern]:
    options = evaluation_service_pb2.DESCRIPTOR.GetOptions()
    return {
        d.type: ResourcePattern(d.type, d.pattern[0])
        for d in options.Extensions[resource_pb2.resource_definition]
    }


@cache
def _declared() -> dict[str, ResourcePattern]:
    """Every resource message of the API's files (the services' files and all they import, in
    the package ``google.cloud.ces.v1beta``) by its resource type."""
    found: dict[str, ResourcePattern] = {}
    files = [evaluation_service_pb2.DESCRIPTOR, agent_service_pb2.DESCRIPTOR]
    seen: set[str] = set()
    while files:
        file = files.pop()
        if file.name in seen or file.package != evaluation_pb2.DESCRIPTOR.package:
            continue
        seen.add(file.name)
        files.extend(file.dependencies)
        for message in file.message_types_by_name.values():
            resource = message.GetOptions().Extensions[resource_pb2.resource]
            if resource.type:
                found[resource.type] = ResourcePattern(resource.type, resource.pattern[0])
    return found


@cache
def by_type(resource_type: str) -> ResourcePattern | None:
    """The pattern of the resource type ``resource_type`` (``ces.googleapis.com/Evaluation``):
    a resource message of the API or a definition of the EvaluationService's file."""
    return _declared().get(resource_type) or _definitions().get(resource_type)


EVALUATION = of(evaluation_pb2.Evaluation)
EVALUATION_RESULT = of(evaluation_pb2.EvaluationResult)
APP = of(app_pb2.App)
CONVERSATION = of(conversation_pb2.Conversation)
# A session (SessionService): no resource message declares it; its name names the session's
# conversation too (docs/sessions.md).
SESSION = ResourcePattern(
    "ces.googleapis.com/Session",
    "projects/{project}/locations/{location}/apps/{app}/sessions/{session}",
)
EVALUATION_PERSONA = _definitions()["ces.googleapis.com/EvaluationPersona"]
# The persona every app has: the one a scenario without its own plays, and the one whose voice
# audio tests speak in.
DEFAULT_PERSONA = "default"


def location_of(name: str) -> str:
    """The location a resource ``name`` lives in: the parent of the operations it starts."""
    return "/".join(name.split("/")[:4])


_APP_SEGMENTS = len(APP.pattern.split("/"))


def app_of(name: str) -> str:
    """The app a resource ``name`` lives in (``projects/p/locations/l/apps/a``), or "" for a
    name that is not inside an app."""
    segments = name.split("/")
    if len(segments) < _APP_SEGMENTS or segments[4] != "apps":
        return ""
    return "/".join(segments[:_APP_SEGMENTS])


def owned(pattern: ResourcePattern) -> int:
    """How many trailing IDs of ``pattern`` this service assigns (and holds to AIP-122): those
    below the App, whose own segments (projects, locations, apps) belong to another service."""
    return len(pattern.variables) - len(APP.variables)


def snake_case(name: str) -> str:
    """A CamelCase proto name in snake_case (``CreateEvaluation`` → ``create_evaluation``,
    ``EvaluationResult`` → ``evaluation_result``): an RPC's core method and MCP tool, a resource
    message's request field."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def validate_id(value: str, field: str) -> None:
    """Raise INVALID_ARGUMENT unless ``value`` is an AIP-122 resource ID."""
    if _ID.fullmatch(value) is None:
        description = f"{value!r} is not a valid ID: use {_ID_RULE} (AIP-122)."
        raise ServiceError.invalid_argument(
            f"{field}: {description}", [FieldViolation(field, description)]
        )


def foreign_id(value: str) -> bool:
    """Whether ``value`` may be the ID of a parent this service does not own (a project,
    location or app): what :meth:`ResourcePattern.parse` accepts there."""
    return _FOREIGN_SEGMENT.fullmatch(value) is not None


def new_id() -> str:
    """A server-assigned ID: a random (version 4) UUID whose first hex digit is a letter, as
    every AIP-122 ID starts with one."""
    bits = random_bits(128)
    first = 10 + (bits >> 124) % 6  # a..f
    bits = (bits & ~(0xF << 124)) | (first << 124)
    return str(uuid.UUID(int=bits, version=4))
