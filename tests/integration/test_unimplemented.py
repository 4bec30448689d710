"""Official methods the server does not serve yet, against the real ``ces-eval serve``.

The official client (``tests/official/unimplemented_scenario.py`` in ``.venv-client``) calls every
one of them over gRPC and over REST and must see ``MethodNotImplemented`` with reason
METHOD_NOT_IMPLEMENTED naming the method; raw HTTP and raw gRPC calls check each official route
and method path (HTTP 501 in Google's error envelope, gRPC UNIMPLEMENTED with the same message and
metadata). The methods and routes come from ``official_routes.json``, not from a list here.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ces_eval.contract import schema
from ces_eval.core.service import implements
from tests.support import contract
from tests.support.server import RunningServer
from tests.unit.test_official_routes import JSON_FILE, official_unserved, sample_path

DOMAIN = "ces.googleapis.com"


def unserved_methods() -> list[dict[str, Any]]:
    """The official methods (entries of the JSON) that no implemented method of ours serves."""
    served = {
        f"/{service.full_name}/{method.name}"
        for service in schema.services()
        for method in service.methods
        if implements(method)
    }
    document = json.loads(JSON_FILE.read_text(encoding="utf-8"))
    return [m for m in document["methods"] if m["path"] not in served]


UNSERVED = unserved_methods()
BINDINGS = official_unserved()


def expected_message(path: str) -> str:
    return f"Method {path.lstrip('/')} is not implemented by ces-eval."


def test_the_unserved_set_is_not_empty() -> None:
    names = {m["name"] for m in UNSERVED}
    assert "RunEvaluation" in names
    served = {"GetLocation", "ListLocations", "ImportEvaluations", "GenerateEvaluation"}
    assert not served & names
    assert {path for path, *_ in BINDINGS} == {m["path"] for m in UNSERVED if m["http"]}


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_official_client_gets_method_not_implemented(
    module_server: RunningServer, transport: str
) -> None:
    target = module_server.grpc_target if transport == "grpc" else module_server.http_base
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / "unimplemented_scenario.py"),
            transport,
            target,
        ],
        input=json.dumps(UNSERVED),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr + module_server.output()
    reports = {r["client_method"]: r for r in map(json.loads, completed.stdout.splitlines())}
    assert set(reports) == {m["client_method"] for m in UNSERVED}
    for method in UNSERVED:
        report = reports[method["client_method"]]
        method_name = method["path"].lstrip("/")
        assert report["exception"] == "MethodNotImplemented", report
        assert report["reason"] == "METHOD_NOT_IMPLEMENTED", report
        assert report["domain"] == DOMAIN, report
        assert report["metadata"] == {"method": method_name}, report
        assert expected_message(method["path"]) in report["message"], report
        assert report["grpc_status"] == "UNIMPLEMENTED", report
        assert report["http_status"] == (None if transport == "grpc" else 501), report


def rest_call(server: RunningServer, verb: str, path: str, body: bytes | None) -> tuple[int, Any]:
    request = urllib.request.Request(
        server.http_base + path,
        data=body,
        method=verb,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("path", "verb", "template", "body"),
    BINDINGS,
    ids=[f"{verb} {template}" for _, verb, template, _ in BINDINGS],
)
def test_rest_route_answers_501_in_googles_envelope(
    module_server: RunningServer, path: str, verb: str, template: str, body: str
) -> None:
    status, document = rest_call(
        module_server, verb, sample_path(template), b"{}" if body else None
    )
    assert status == 501, document
    assert set(document) == {"error"}
    error = document["error"]
    assert set(error) == {"code", "message", "status", "details"}
    assert error["code"] == 501
    assert error["status"] == "UNIMPLEMENTED"
    assert error["message"] == expected_message(path)
    assert error["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "METHOD_NOT_IMPLEMENTED",
            "domain": DOMAIN,
            "metadata": {"method": path.lstrip("/")},
        }
    ]


@pytest.mark.parametrize("path", [m["path"] for m in UNSERVED])
def test_grpc_path_answers_unimplemented_like_rest(module_server: RunningServer, path: str) -> None:
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        call = channel.unary_unary(path)
        with pytest.raises(grpc.RpcError) as raised:
            call(b"", timeout=30)
    error = raised.value
    assert error.code() is grpc.StatusCode.UNIMPLEMENTED
    assert error.details() == expected_message(path)
    status = rpc_status.from_call(error)
    assert status is not None
    assert status.message == expected_message(path)
    assert len(status.details) == 1
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "METHOD_NOT_IMPLEMENTED",
        DOMAIN,
        {"method": path.lstrip("/")},
    )
    rest = [b for b in BINDINGS if b[0] == path]
    if rest:  # the REST 501 of the same method carries the same message and metadata
        _, verb, template, body = rest[0]
        _, document = rest_call(module_server, verb, sample_path(template), b"{}" if body else None)
        assert document["error"]["message"] == status.message
        assert document["error"]["details"][0]["metadata"] == dict(info.metadata)
