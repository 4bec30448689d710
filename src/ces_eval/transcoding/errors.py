"""ServiceError → Google's JSON error envelope (AIP-193), and the HTTP-only errors.

The envelope is what Google front ends send and what api_core parses:
``{"error": {"code": <http status>, "message": ..., "status": "<CANONICAL_CODE>", "details":
[{"@type": "type.googleapis.com/google.rpc.ErrorInfo", ...}, ...]}}``.
"""

from __future__ import annotations

import json

from google.protobuf import json_format

from ces_eval.errors import Code, ServiceError

__all__ = [
    "envelope",
    "jsonrpc_envelope",
    "method_not_allowed",
    "not_found_path",
    "payload_too_large",
    "request_body_timeout",
]


def envelope(error: ServiceError, http_status: int | None = None) -> tuple[int, bytes]:
    """HTTP status and JSON body for ``error``; ``http_status`` overrides the code's mapping
    for the answers HTTP has and gRPC lacks (405, 413)."""
    status = http_status or error.code.http_status
    body = {"error": _error_object(error, status)}
    return status, json.dumps(body, ensure_ascii=False).encode()


def jsonrpc_envelope(error: ServiceError, http_status: int | None = None) -> tuple[int, bytes]:
    """As :func:`envelope`, for ``/mcp`` requests refused before MCP read them: a JSON-RPC
    error with id null, as the MCP SDK answers transport errors, whose ``data`` is the
    envelope's error object (the SDK's client surfaces a JSON-RPC error body; a bare envelope
    would reach its user as "Server returned an error response")."""
    status = http_status or error.code.http_status
    body = {
        "jsonrpc": "2.0",
        "id": None,
        # JSON-RPC 2.0 leaves -32000 to -32099 to the server's own errors.
        "error": {"code": -32000, "message": error.message, "data": _error_object(error, status)},
    }
    return status, json.dumps(body, ensure_ascii=False).encode()


def _error_object(error: ServiceError, status: int) -> dict[str, object]:
    return {
        "code": status,
        "message": error.message,
        "status": error.code.name,
        "details": [json_format.MessageToDict(detail) for detail in error.details()],
    }


def not_found_path(method: str, path: str) -> ServiceError:
    return ServiceError(
        Code.NOT_FOUND,
        f"No API method is bound to {method} {path}.",
        "PATH_NOT_FOUND",
        {"method": method, "path": path},
    )


def method_not_allowed(method: str, path: str, allowed: list[str]) -> ServiceError:
    """405 is not a canonical code: the status is UNIMPLEMENTED's text with HTTP 405 set by the
    caller, mirroring how Google front ends answer a known path with another verb."""
    return ServiceError(
        Code.UNIMPLEMENTED,
        f"{method} is not allowed on {path}; allowed: {', '.join(allowed)}.",
        "METHOD_NOT_ALLOWED",
        {"method": method, "path": path, "allowed": ",".join(allowed)},
    )


def payload_too_large(limit: int) -> ServiceError:
    return ServiceError(
        Code.RESOURCE_EXHAUSTED,
        f"The request body is larger than {limit} bytes.",
        "REQUEST_BODY_TOO_LARGE",
        {"limit": str(limit)},
    )


def request_body_timeout(
    received: int, elapsed: float, allowance: float, rate: int
) -> ServiceError:
    """408 is not a canonical code either: DEADLINE_EXCEEDED's text with HTTP 408 set by the
    caller, for a body not complete in time (``received`` bytes in ``elapsed`` seconds, where a
    body may take ``allowance`` seconds plus one per ``rate`` bytes)."""
    return ServiceError(
        Code.DEADLINE_EXCEEDED,
        f"The request body did not arrive in time: {received} bytes in {elapsed:.1f} s, where "
        f"a body may take {allowance:g} s plus 1 s per {rate} bytes.",
        "REQUEST_BODY_TIMEOUT",
        {"received": str(received), "elapsed": f"{elapsed:.1f}s", "rate": str(rate)},
    )
