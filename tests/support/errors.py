"""What an error says, read from its JSON form (``google.rpc.Status`` in proto3 JSON, as the REST
surface and MCP's tool results carry it): the field violations of its BadRequest detail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BAD_REQUEST", "violation_fields", "violations"]

BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def violations(error: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, reason)`` of each field violation of ``error``'s BadRequest, in order (no
    reason: ``""``); none when it has no BadRequest. An error has one at most."""
    bad_requests = [d for d in error.get("details", ()) if d.get("@type") == BAD_REQUEST]
    assert len(bad_requests) <= 1, error
    return [
        (v["field"], v.get("reason", ""))
        for bad_request in bad_requests
        for v in bad_request.get("fieldViolations", ())
    ]


def violation_fields(error: Mapping[str, Any]) -> list[str]:
    """The field paths of :func:`violations`."""
    return [field for field, _ in violations(error)]
