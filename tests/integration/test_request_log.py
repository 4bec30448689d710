"""The request log of the real server (``--log-level``, ``--log-format``; src/ces_eval/logs.py).

One line per call on every surface, refused calls included, naming the surface, the method, the
resource, the status, the duration and the caller's name; never the token. Off below INFO.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import httpx

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, start_server
from tests.support.load import golden_evaluation
from tests.support.mcp import call_tool
from tests.support.tokens import ALICE, write_token_file

APP = "projects/proj-a/locations/l/apps/a"
SERVICE = "google.cloud.ces.v1beta.EvaluationService"


def _calls(running: RunningServer) -> None:
    """One call of each kind: gRPC create and a missing get, REST get and an unknown path, an
    MCP tool call, a REST call without a token; health probes in between."""
    bearer = [("authorization", f"Bearer {ALICE}")]
    with grpc.insecure_channel(running.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        stub.CreateEvaluation(
            service_pb2.CreateEvaluationRequest(
                parent=APP, evaluation_id="logged", evaluation=golden_evaluation("logged")
            ),
            metadata=bearer,
            timeout=10,
        )
        try:
            stub.GetEvaluation(
                service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/missing"),
                metadata=bearer,
                timeout=10,
            )
            raise AssertionError("a missing evaluation was found")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    headers = {"authorization": f"Bearer {ALICE}"}
    with httpx.Client(base_url=running.http_base, timeout=10) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get(f"/v1beta/{APP}/evaluations/logged", headers=headers).status_code == 200
        assert http.get("/v1beta/nothing/here", headers=headers).status_code == 404
        answer = call_tool(
            http, "get_evaluation", {"name": f"{APP}/evaluations/logged"}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["isError"] is False
        assert http.get(f"/v1beta/{APP}/evaluations").status_code == 401
        assert http.get("/openapi.json").status_code == 200


def _guarded(tmp_path: Path, *extra: str) -> RunningServer:
    tokens = write_token_file(tmp_path / "tokens.json")
    return start_server(tmp_path / "db.sqlite", "--auth-tokens", str(tokens), *extra)


def test_json_lines_name_every_call_and_never_the_token(tmp_path: Path) -> None:
    running = _guarded(tmp_path, "--log-format", "json")
    try:
        _calls(running)
    finally:
        assert running.stop() == 0
    output = running.output()
    assert ALICE not in output
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    lines: list[dict[str, Any]] = [r for r in records if r["logger"] == "ces_eval.access"]
    for line in lines:
        assert line["duration_ms"] >= 0
        assert line["level"] == "INFO"
    seen = {
        (line["surface"], line["method"], line["resource"], line["code"], line.get("http_status"))
        for line in lines
    }
    expected = {
        ("grpc", f"{SERVICE}/CreateEvaluation", APP, "OK", None),
        ("grpc", f"{SERVICE}/GetEvaluation", f"{APP}/evaluations/missing", "NOT_FOUND", None),
        ("rest", f"{SERVICE}/GetEvaluation", f"{APP}/evaluations/logged", "OK", 200),
        ("rest", "GET /v1beta/nothing/here", "", "NOT_FOUND", 404),
        ("mcp", f"{SERVICE}/GetEvaluation", f"{APP}/evaluations/logged", "OK", 200),
        ("rest", "GET /v1beta/" + APP + "/evaluations", "", "UNAUTHENTICATED", 401),
    }
    assert seen == expected  # health probes and /openapi.json are not calls
    callers = {line["caller"] for line in lines if line["code"] != "UNAUTHENTICATED"}
    assert callers == {"alice"}  # the token's name
    assert len(lines) == len(expected)


def test_text_lines_and_no_log_below_info(tmp_path: Path) -> None:
    (tmp_path / "text").mkdir()
    (tmp_path / "quiet").mkdir()
    running = _guarded(tmp_path / "text")
    try:
        _calls(running)
    finally:
        assert running.stop() == 0
    text = [line for line in running.output().splitlines() if " ces_eval.access: " in line]
    assert len(text) == 6
    assert any(
        f"ces_eval.access: rest {SERVICE}/GetEvaluation {APP}/evaluations/logged OK 200 " in line
        and line.endswith("caller=alice")
        for line in text
    ), text
    assert ALICE not in running.output()

    quiet = _guarded(tmp_path / "quiet", "--log-level", "warning")
    try:
        _calls(quiet)  # the same calls succeed with no request log
    finally:
        assert quiet.stop() == 0
    assert "ces_eval.access" not in quiet.output()
