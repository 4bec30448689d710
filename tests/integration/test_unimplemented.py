"""No official method answers UNIMPLEMENTED; a method nobody declares does, in Google's model.

Against the real ``ces-eval serve``: every official method (``official_routes.json``, not a list
here) is served, so raw gRPC calls of each official method path and raw HTTP calls of each
official route reach the method (its answer or its own error), never UNIMPLEMENTED / 501 or a
routing refusal. A method path no service declares answers gRPC UNIMPLEMENTED with ErrorInfo
reason METHOD_NOT_IMPLEMENTED naming it; a path no route binds answers 404 PATH_NOT_FOUND in
Google's error envelope. The official client (``tests/official/unimplemented_scenario.py`` in
``.venv-client``) calls every official method over gRPC and over REST and never sees
``MethodNotImplemented``, and api_core reads both unknown-method answers as Google's errors.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ces_eval.contract import schema
from ces_eval.core.service import implements
from ces_eval.testing.server import RunningServer
from tests.support.official import run_script, targets
from tests.unit.test_official_routes import JSON_FILE, official_unserved, sample_path

DOMAIN = "ces.googleapis.com"
UNKNOWN_METHOD = "/google.cloud.ces.v1beta.EvaluationService/NoSuchMethod"
# What unimplemented_scenario.py posts over REST (an unbound custom verb on an app).
UNKNOWN_ROUTE = "/v1beta/projects/x/locations/x/apps/x:noSuchMethod"
ROUTING_REASONS = {"PATH_NOT_FOUND", "METHOD_NOT_ALLOWED"}


def official_methods() -> list[dict[str, Any]]:
    """The official methods: the entries of the committed JSON."""
    methods: list[dict[str, Any]] = json.loads(JSON_FILE.read_text(encoding="utf-8"))["methods"]
    return methods


def unserved_methods() -> list[dict[str, Any]]:
    """The official methods that no implemented method of ours serves."""
    served = {
        f"/{service.full_name}/{method.name}"
        for service in schema.services()
        for method in service.methods
        if implements(method)
    }
    return [m for m in official_methods() if m["path"] not in served]


METHODS = official_methods()
ROUTES = sorted(
    (m["path"], h["verb"], h["template"], h["body"]) for m in METHODS for h in m["http"]
)


def expected_message(path: str) -> str:
    return f"Method {path.lstrip('/')} is not implemented by ces-eval."


def test_the_unserved_set_is_empty() -> None:
    """Every official method and route is served (the product's acceptance)."""
    names = {m["name"] for m in METHODS}
    assert {"RunEvaluation", "GenerateEvaluation", "GetLocation", "ListOperations"} <= names
    # EvaluationService 35, AgentService 51, SessionService 3, ToolService 3, WidgetService 1
    # (the whole v1beta API: 93), the mixins 6.
    assert len(METHODS) == 99
    assert unserved_methods() == []
    assert official_unserved() == []
    # Every method has an HTTP binding but BidiRunSession (gRPC only, as Google declares it).
    assert [m["name"] for m in METHODS if not m["http"]] == ["BidiRunSession"]


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_official_client_never_gets_method_not_implemented(
    module_server: RunningServer, transport: str
) -> None:
    *calls, last = run_script(
        "unimplemented_scenario.py",
        transport,
        targets([module_server], transport),
        stdin=json.dumps(METHODS),
        servers=[module_server],
    )
    reports = {r["client_method"]: r for r in calls}
    assert set(reports) == {m["client_method"] for m in METHODS}
    for report in reports.values():
        # The call reached the server's method: an answer, or an error api_core parsed from
        # Google's error model (not a client-side failure, not an unimplemented method).
        if report["exception"] is None:
            continue
        assert report["exception"] != "MethodNotImplemented", report
        assert report["domain"] == DOMAIN, report
        assert report["reason"] not in {"METHOD_NOT_IMPLEMENTED", *ROUTING_REASONS}, report
        assert report["grpc_status"] != "UNIMPLEMENTED", report
        assert report["http_status"] != 501, report
    assert reports["run_evaluation"]["exception"] == (
        "InvalidArgument" if transport == "grpc" else "BadRequest"
    ), reports["run_evaluation"]

    unknown = last["unknown"]
    if transport == "grpc":
        method = UNKNOWN_METHOD.lstrip("/")
        assert unknown["exception"] == "MethodNotImplemented", unknown
        assert (unknown["grpc_status"], unknown["http_status"]) == ("UNIMPLEMENTED", None)
        assert (unknown["reason"], unknown["domain"]) == ("METHOD_NOT_IMPLEMENTED", DOMAIN)
        assert unknown["metadata"] == {"method": method}
        assert expected_message(UNKNOWN_METHOD) in unknown["message"], unknown
    else:
        assert unknown["exception"] == "NotFound", unknown
        assert unknown["http_status"] == 404, unknown
        assert (unknown["reason"], unknown["domain"]) == ("PATH_NOT_FOUND", DOMAIN)
        assert unknown["metadata"] == {"method": "POST", "path": UNKNOWN_ROUTE}
        assert f"No API method is bound to POST {UNKNOWN_ROUTE}." in unknown["message"]


def rest_call(server: RunningServer, verb: str, path: str, body: bytes | None) -> tuple[int, Any]:
    request = urllib.request.Request(
        server.http_base + path,
        data=body,
        method=verb,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def error_info(document: dict[str, Any]) -> dict[str, Any]:
    infos = [d for d in document["error"]["details"] if d["@type"].endswith("rpc.ErrorInfo")]
    assert len(infos) == 1, document
    info: dict[str, Any] = infos[0]
    return info


@pytest.mark.parametrize(
    ("path", "verb", "template", "body"),
    ROUTES,
    ids=[f"{verb} {template}" for _, verb, template, _ in ROUTES],
)
def test_official_route_reaches_its_method(
    module_server: RunningServer, path: str, verb: str, template: str, body: str
) -> None:
    status, document = rest_call(
        module_server, verb, sample_path(template), b"{}" if body else None
    )
    assert status != 501, (path, document)
    if status >= 400:
        assert set(document) == {"error"}, document
        assert document["error"]["code"] == status
        assert document["error"]["status"] != "UNIMPLEMENTED", document
        info = error_info(document)
        assert info["domain"] == DOMAIN
        assert info["reason"] not in {"METHOD_NOT_IMPLEMENTED", *ROUTING_REASONS}, document


@pytest.mark.parametrize("path", [m["path"] for m in METHODS])
def test_official_grpc_path_reaches_its_method(module_server: RunningServer, path: str) -> None:
    """An empty request of each official method is answered by the method itself (often
    INVALID_ARGUMENT or NOT_FOUND), not UNIMPLEMENTED."""
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        try:
            channel.unary_unary(path)(b"", timeout=30)
        except grpc.RpcError as error:
            assert error.code() is not grpc.StatusCode.UNIMPLEMENTED, (path, error.details())
            status = rpc_status.from_call(error)
            if status is not None and status.details:
                info = error_details_pb2.ErrorInfo()
                if status.details[0].Unpack(info):
                    assert info.reason != "METHOD_NOT_IMPLEMENTED", path


def test_unknown_grpc_method_answers_unimplemented(module_server: RunningServer) -> None:
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        call = channel.unary_unary(UNKNOWN_METHOD)
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=30)
    error = raised.value
    assert error.code() is grpc.StatusCode.UNIMPLEMENTED
    assert error.details() == expected_message(UNKNOWN_METHOD)
    status = rpc_status.from_call(error)
    assert status is not None
    assert status.message == expected_message(UNKNOWN_METHOD)
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "METHOD_NOT_IMPLEMENTED",
        DOMAIN,
        {"method": UNKNOWN_METHOD.lstrip("/")},
    )


@pytest.mark.parametrize(
    ("verb", "path"),
    [
        ("POST", UNKNOWN_ROUTE),  # a custom verb nobody binds
        ("GET", "/v1beta/projects/x/locations/x/apps/x/widgets"),  # a collection nobody binds
        ("POST", "/v1beta/google.cloud.ces.v1beta.EvaluationService/NoSuchMethod"),
    ],
)
def test_unknown_route_answers_404_in_googles_envelope(
    module_server: RunningServer, verb: str, path: str
) -> None:
    """REST names no method for a path no route binds: 404 PATH_NOT_FOUND, not 501."""
    status, document = rest_call(module_server, verb, path, b"{}" if verb == "POST" else None)
    assert status == 404, document
    assert set(document) == {"error"}
    error = document["error"]
    assert set(error) == {"code", "message", "status", "details"}
    assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert error["message"] == f"No API method is bound to {verb} {path}."
    assert error["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "PATH_NOT_FOUND",
            "domain": DOMAIN,
            "metadata": {"method": verb, "path": path},
        }
    ]
