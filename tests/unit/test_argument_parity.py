"""One proto3-JSON checker for the HTTP surfaces: MCP tool arguments get exactly the checks a
REST body gets (transcoding.body), and a REST body present for a message field sets it.

The parity table (tests/integration/test_error_parity.py) shows the outcome over the wire; these
pin the two seams in process: MCP's arguments answer with REST's violations, word for word (the
message calls them "The tool arguments" where REST says "The request body"), and REST's ``{}``
body reaches the core as a message present (as gRPC's empty message does).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ces_eval.contract import limits, schema
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.surfaces import mcp_tools
from ces_eval.surfaces.rest import Transcoder
from ces_eval.transcoding.body import parse_body
from ces_eval.transcoding.router import Route, Router

APP = "projects/p/locations/l/apps/a"


def _refusal(parse: Any) -> tuple[str, list[FieldViolation]]:
    with pytest.raises(ServiceError) as raised:
        parse()
    return raised.value.message, list(raised.value.violations)


@pytest.mark.parametrize(
    "arguments",
    [
        {"parent": APP, "evaluation": {"displayName": 7}},
        {"parent": 5, "colour": "blue"},
        {"parent": APP, "evaluation": {"golden": {}, "scenario": {}}},
        {"parent": APP, "evaluation": {"scenario": {"taskCompletionBehavior": "SOMETIMES"}}},
        {"parent": APP, "evaluation": {"tags": ["a", 2], "createTime": "yesterday"}},
        {"parent": APP, "evaluation": {"tags": ["t"] * (limits.MAX_REPEATED + 1)}},
        {"parent": APP, "evaluationId": "e", "evaluation_id": "f"},
    ],
    ids=["type", "unknown", "oneof", "enum", "element-and-timestamp", "count", "twice"],
)
def test_mcp_arguments_are_refused_as_a_rest_body_is(arguments: dict[str, Any]) -> None:
    spec = mcp_tools.tool_specs()["create_evaluation"]
    body = json.dumps(arguments).encode()
    rest = _refusal(lambda: parse_body(body, service_pb2.CreateEvaluationRequest(), ""))
    mcp = _refusal(lambda: mcp_tools._request(spec, copy.deepcopy(arguments)))
    assert mcp[1] == rest[1]
    assert mcp[0].startswith("The tool arguments are invalid: "), mcp[0]
    assert mcp[0].removeprefix("The tool arguments are") == rest[0].removeprefix(
        "The request body is"
    )
    assert all(v.field != "body" for v in mcp[1]), mcp  # each problem at its own path


def test_mcp_arguments_leave_what_a_request_must_hold_to_the_core() -> None:
    """Required fields are the core's to name (on every surface alike): the arguments parse."""
    spec = mcp_tools.tool_specs()["create_evaluation"]
    request = mcp_tools._request(spec, {"evaluation": {}})
    assert isinstance(request, service_pb2.CreateEvaluationRequest)
    assert request.HasField("evaluation") and not request.parent


def _create_route() -> tuple[Route, dict[str, str]]:
    resolved = Router(schema.http_bindings()).resolve("POST", f"/v1beta/{APP}/evaluations")
    assert isinstance(resolved, tuple)
    return resolved


@pytest.mark.parametrize(
    ("data", "present"),
    [
        (b"{}", True),
        (b" { } ", True),
        (b'{"displayName": "x"}', True),
        (b"", False),
        (b"  ", False),
    ],
)
def test_a_rest_body_present_sets_its_message_field(data: bytes, present: bool) -> None:
    """grpc-gateway's rule: a JSON object (even ``{}``) allocates the body field's message; an
    empty body leaves it unset."""
    route, variables = _create_route()
    assert route.binding.body == "evaluation"
    request = Transcoder._request(route, variables, [], data)
    assert isinstance(request, service_pb2.CreateEvaluationRequest)
    assert request.HasField("evaluation") is present
    assert request.parent == APP
