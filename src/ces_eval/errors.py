"""The one error type of the service core and its translation table (docs/semantics.md, "Errors").

The core raises :class:`ServiceError`; only the surfaces translate it: gRPC into a status with
``grpc-status-details-bin``, REST into Google's JSON error envelope, MCP into an ``isError`` tool
result. Every error carries exactly one ``google.rpc.ErrorInfo`` (AIP-193) and, where they apply,
``google.rpc.BadRequest`` (field violations) and ``google.rpc.ResourceInfo``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

__all__ = [
    "DOMAIN",
    "Code",
    "FieldViolation",
    "ServiceError",
]

DOMAIN = "ces.googleapis.com"


class Code(enum.Enum):
    """Canonical codes (google.rpc.Code) with the HTTP status google/rpc/code.proto gives each."""

    OK = (code_pb2.OK, 200)
    CANCELLED = (code_pb2.CANCELLED, 499)
    UNKNOWN = (code_pb2.UNKNOWN, 500)
    INVALID_ARGUMENT = (code_pb2.INVALID_ARGUMENT, 400)
    DEADLINE_EXCEEDED = (code_pb2.DEADLINE_EXCEEDED, 504)
    NOT_FOUND = (code_pb2.NOT_FOUND, 404)
    ALREADY_EXISTS = (code_pb2.ALREADY_EXISTS, 409)
    PERMISSION_DENIED = (code_pb2.PERMISSION_DENIED, 403)
    UNAUTHENTICATED = (code_pb2.UNAUTHENTICATED, 401)
    RESOURCE_EXHAUSTED = (code_pb2.RESOURCE_EXHAUSTED, 429)
    FAILED_PRECONDITION = (code_pb2.FAILED_PRECONDITION, 400)
    ABORTED = (code_pb2.ABORTED, 409)
    OUT_OF_RANGE = (code_pb2.OUT_OF_RANGE, 400)
    UNIMPLEMENTED = (code_pb2.UNIMPLEMENTED, 501)
    INTERNAL = (code_pb2.INTERNAL, 500)
    UNAVAILABLE = (code_pb2.UNAVAILABLE, 503)
    DATA_LOSS = (code_pb2.DATA_LOSS, 500)

    @property
    def number(self) -> int:
        return int(self.value[0])

    @property
    def http_status(self) -> int:
        return int(self.value[1])


@dataclass(frozen=True)
class FieldViolation:
    """One entry of google.rpc.BadRequest: a request field path (proto names, ``a.b[2].c``)."""

    field: str
    description: str
    reason: str = ""


@dataclass
class ServiceError(Exception):
    """An API error raised by the core.

    ``reason`` is the ErrorInfo reason (UPPER_SNAKE_CASE, stable, documented), ``metadata`` its
    metadata; ``resource`` fills ResourceInfo (type, name) for errors about one resource.
    """

    code: Code
    message: str
    reason: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    violations: Sequence[FieldViolation] = ()
    resource: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def details(self) -> list[any_pb2.Any]:
        """ErrorInfo first, then BadRequest and ResourceInfo when they apply."""
        packed: list[any_pb2.Any] = []
        info = error_details_pb2.ErrorInfo(
            reason=self.reason, domain=DOMAIN, metadata=dict(self.metadata)
        )
        packed.append(_pack(info))
        if self.violations:
            bad_request = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=v.field, description=v.description, reason=v.reason
                    )
                    for v in self.violations
                ]
            )
            packed.append(_pack(bad_request))
        if self.resource is not None:
            resource_type, resource_name = self.resource
            packed.append(
                _pack(
                    error_details_pb2.ResourceInfo(
                        resource_type=resource_type, resource_name=resource_name
                    )
                )
            )
        return packed

    def to_status(self) -> status_pb2.Status:
        return status_pb2.Status(
            code=self.code.number, message=self.message, details=self.details()
        )

    # Constructors for the errors the core raises most; each names its reason once.

    @classmethod
    def invalid_argument(
        cls, message: str, violations: Sequence[FieldViolation] = ()
    ) -> ServiceError:
        return cls(Code.INVALID_ARGUMENT, message, "INVALID_ARGUMENT", violations=violations)

    @classmethod
    def not_found(cls, resource_type: str, name: str) -> ServiceError:
        return cls(
            Code.NOT_FOUND,
            f"{_short(resource_type)} {name} not found.",
            "RESOURCE_NOT_FOUND",
            {"resource": name},
            resource=(resource_type, name),
        )

    @classmethod
    def already_exists(cls, resource_type: str, name: str, message: str = "") -> ServiceError:
        return cls(
            Code.ALREADY_EXISTS,
            message or f"{_short(resource_type)} {name} already exists.",
            "RESOURCE_ALREADY_EXISTS",
            {"resource": name},
            resource=(resource_type, name),
        )

    @classmethod
    def aborted_etag(cls, resource_type: str, name: str) -> ServiceError:
        return cls(
            Code.ABORTED,
            f"The etag of {name} does not match its current etag; read it again and retry.",
            "ETAG_MISMATCH",
            {"resource": name},
            resource=(resource_type, name),
        )

    @classmethod
    def unimplemented(cls, method: str) -> ServiceError:
        return cls(
            Code.UNIMPLEMENTED,
            f"Method {method} is not implemented by ces-eval.",
            "METHOD_NOT_IMPLEMENTED",
            {"method": method},
        )


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]  # google.rpc messages are untyped (no stubs)
    return packed


def _short(resource_type: str) -> str:
    """``ces.googleapis.com/EvaluationResult`` → ``EvaluationResult``."""
    return resource_type.rsplit("/", 1)[-1]
