"""Raw HTTP against the real server: what curl users see (transcoding)."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer
from tests.support.errors import violation_fields

APP = "projects/p/locations/l/apps/a"
BASE = f"/v1beta/{APP}/evaluations"


def golden(display_name: str, **extra: Any) -> dict[str, Any]:
    return {
        "displayName": display_name,
        "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
        **extra,
    }


@pytest.fixture
def http(server: RunningServer) -> Any:
    with httpx.Client(base_url=server.http_base, timeout=30) as client:
        yield client


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert error["code"] == response.status_code
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert error["details"][0]["domain"] == "ces.googleapis.com"
    return error


def test_crud_over_rest(http: httpx.Client) -> None:
    created = http.post(
        BASE,
        params={"evaluationId": "one"},
        json=golden("One", tags=["x"]),
        headers={"x-goog-user": "alice@example.com"},
    )
    assert created.status_code == 200, created.text
    assert created.headers["content-type"] == "application/json; charset=utf-8"
    body = created.json()
    assert body["name"] == f"{APP}/evaluations/one"
    assert body["createdBy"] == "alice@example.com"
    assert body["createTime"].endswith("Z")

    snake = http.post(
        BASE,
        params={"evaluation_id": "two"},
        json={"display_name": "Two", "golden": golden("x")["golden"]},
    )
    assert snake.status_code == 200, snake.text
    assert snake.json()["displayName"] == "Two"

    got = http.get(f"/v1beta/{APP}/evaluations/one")
    assert got.json() == body

    listed = http.get(BASE, params={"pageSize": 1, "orderBy": "name"})
    first = listed.json()
    assert [e["name"] for e in first["evaluations"]] == [body["name"]]
    second = http.get(
        BASE, params={"page_size": 1, "order_by": "name", "pageToken": first["nextPageToken"]}
    )
    assert [e["displayName"] for e in second.json()["evaluations"]] == ["Two"]
    assert "nextPageToken" not in second.json()
    filtered = http.get(BASE, params={"evaluationFilter": 'tags:"x"'})
    assert [e["displayName"] for e in filtered.json()["evaluations"]] == ["One"]

    patched = http.patch(
        f"/v1beta/{APP}/evaluations/one",
        params={"updateMask": "description,tags"},
        json={"description": "changed", "displayName": "ignored", "tags": []},
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["description"], patched.json()["displayName"]) == ("changed", "One")
    assert "tags" not in patched.json()

    stale = http.patch(
        f"/v1beta/{APP}/evaluations/one",
        params={"updateMask": "description"},
        json={"description": "again", "etag": body["etag"]},
    )
    assert stale.status_code == 409
    assert error_of(stale)["status"] == "ABORTED"

    deleted = http.delete(f"/v1beta/{APP}/evaluations/one")
    assert (deleted.status_code, deleted.json()) == (200, {})
    missing = http.get(f"/v1beta/{APP}/evaluations/one")
    assert missing.status_code == 404
    assert error_of(missing)["status"] == "NOT_FOUND"


def test_enums_as_names_or_integers_and_seeding(http: httpx.Client) -> None:
    http.post(BASE, params={"evaluationId": "e"}, json=golden("E")).raise_for_status()
    seeded = http.post(
        f"/emulator/v1/{APP}/evaluations/e/results",
        params={"evaluationResultId": "r1"},
        json={
            "executionState": "COMPLETED",
            "evaluationStatus": 1,
            "changelogCreateTime": "2024-01-01T10:00:00.5+02:00",
            "evaluationRun": f"{APP}/evaluationRuns/run-1",
        },
    )
    assert seeded.status_code == 200, seeded.text
    result = seeded.json()
    assert result["executionState"] == "COMPLETED"
    assert result["evaluationStatus"] == "PASS"
    assert result["changelogCreateTime"] == "2024-01-01T08:00:00.500Z"
    numbers = http.get(
        f"/v1beta/{APP}/evaluations/e/results/r1", params={"$alt": "json;enum-encoding=int"}
    ).json()
    assert (numbers["executionState"], numbers["evaluationStatus"]) == (2, 1)
    across = http.get(
        f"/v1beta/{APP}/evaluations/-/results",
        params={"filter": f'evaluation_run = "{APP}/evaluationRuns/run-1"'},
    ).json()
    assert [r["name"] for r in across["evaluationResults"]] == [result["name"]]


def test_bytes_accept_url_safe_base64(http: httpx.Client) -> None:
    raw = bytes([0xFB, 0xFF, 0xBF, 0x00])
    evaluation = golden("Audio")
    evaluation["golden"]["turns"][0]["steps"][0]["userInput"] = {
        "audio": base64.urlsafe_b64encode(raw).decode().rstrip("=")
    }
    created = http.post(BASE, json=evaluation)
    assert created.status_code == 200, created.text
    audio = created.json()["golden"]["turns"][0]["steps"][0]["userInput"]["audio"]
    assert base64.b64decode(audio) == raw


@pytest.mark.parametrize(
    ("method", "path", "params", "body", "status", "field"),
    [
        ("GET", BASE, {"colour": "red"}, None, 400, "colour"),
        ("GET", BASE, {"pageSize": "ten"}, None, 400, "pageSize"),
        ("GET", BASE, {"pageSize": "-1"}, None, 400, "page_size"),
        ("GET", BASE, {"evaluationFilter": "display_name = "}, None, 400, "evaluation_filter"),
        ("GET", BASE, {}, b'{"x": 1}', 400, "body"),
        ("POST", BASE, {}, b"{not json", 400, "evaluation"),
        ("POST", BASE, {}, json.dumps(golden("X", colour=1)).encode(), 400, "evaluation.colour"),
        (
            "POST",
            BASE,
            {},
            json.dumps({"displayName": 5, "golden": {"turns": "many"}}).encode(),
            400,
            "evaluation.display_name",
        ),
        ("POST", f"{BASE}:export", {"extra": "1"}, b"{}", 400, "extra"),
        ("GET", "/v1beta/projects/p", {}, None, 404, None),
        ("GET", "/nothing/here", {}, None, 404, None),
        ("PUT", f"{BASE}/e", {}, b"{}", 405, None),
        # %2F inside a multi-segment variable stays encoded, so the name is malformed.
        ("GET", "/v1beta/projects/p%2Fq/locations/l/apps/a/evaluations/e", {}, None, 400, "name"),
    ],
)
def test_http_errors(
    http: httpx.Client,
    method: str,
    path: str,
    params: dict[str, str],
    body: bytes | None,
    status: int,
    field: str | None,
) -> None:
    # A body is JSON, as clients send it (other types are 415: test_browser_guard.py).
    headers = {"content-type": "application/json"} if body is not None else None
    response = http.request(method, path, params=params, content=body, headers=headers)
    assert response.status_code == status, response.text
    error = error_of(response)
    if field is not None:
        assert (
            field in violation_fields(error) or field == violation_fields(error)[0].split(".")[0]
        ), error
    if status == 405:
        assert set(response.headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}


def test_percent_decoding_of_names(http: httpx.Client) -> None:
    http.post(BASE, params={"evaluationId": "my-eval"}, json=golden("M")).raise_for_status()
    encoded = http.get("/v1beta/projects/p/locations/l/apps/a/evaluations/my%2Deval")
    assert encoded.status_code == 200
    assert encoded.json()["name"] == f"{APP}/evaluations/my-eval"


def test_body_over_the_limit_is_413(http: httpx.Client) -> None:
    response = http.post(
        BASE,
        content=b"{" + b" " * (11 * 1024 * 1024) + b"}",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert error_of(response)["status"] == "RESOURCE_EXHAUSTED"


def test_rest_and_grpc_answer_the_same_messages(server: RunningServer, http: httpx.Client) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        created = stub.CreateEvaluation(
            service_pb2.CreateEvaluationRequest(
                parent=APP,
                evaluation_id="same",
                evaluation=json_format.ParseDict(golden("Same"), evaluation_pb2.Evaluation()),
            ),
            timeout=10,
        )
        pairs = [
            (
                stub.GetEvaluation(service_pb2.GetEvaluationRequest(name=created.name), timeout=10),
                http.get(f"/v1beta/{created.name}"),
                evaluation_pb2.Evaluation(),
            ),
            (
                stub.ListEvaluations(
                    service_pb2.ListEvaluationsRequest(parent=APP, order_by="name"), timeout=10
                ),
                http.get(BASE, params={"orderBy": "name"}),
                service_pb2.ListEvaluationsResponse(),
            ),
            (
                stub.ListEvaluationResults(
                    service_pb2.ListEvaluationResultsRequest(parent=created.name), timeout=10
                ),
                http.get(f"/v1beta/{created.name}/results"),
                service_pb2.ListEvaluationResultsResponse(),
            ),
        ]
        for over_grpc, over_rest, empty in pairs:
            assert over_rest.status_code == 200
            assert json_format.Parse(over_rest.text, empty) == over_grpc
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetEvaluation(
                service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/no"), timeout=10
            )
    rest_error = error_of(http.get(f"/v1beta/{APP}/evaluations/no"))
    assert rest_error["status"] == raised.value.code().name  # type: ignore[attr-defined]
    assert rest_error["message"] == raised.value.details()  # type: ignore[attr-defined]
