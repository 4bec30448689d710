"""The long-running exports' ``names`` on the real server: a request full of bad names gets an
error of at most MAX_VIOLATIONS violations, like every other check (issue 15 hardening).

Before: one violation per bad name, so 1,000 bad names (the most the count limit lets through)
built and sent 1,000 violations, a REST error of about 100 KB.
"""

from __future__ import annotations

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2

from ces_eval.contract.limits import MAX_REPEATED, MAX_VIOLATIONS
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer
from tests.support.load import golden_evaluation

APP = "projects/export-names/locations/l/apps/a"
EVALUATION = f"{APP}/evaluations/e1"
BAD = [f"projects/other/locations/l/apps/a/evaluations/e{i}" for i in range(MAX_REPEATED)]


@pytest.fixture(scope="module")
def server(module_server: RunningServer) -> RunningServer:
    with grpc.insecure_channel(module_server.grpc_target) as channel:
        service_grpc.EvaluationServiceStub(channel).CreateEvaluation(
            service_pb2.CreateEvaluationRequest(
                parent=APP, evaluation_id="e1", evaluation=golden_evaluation("e1")
            ),
            timeout=30,
        )
    return module_server


def grpc_status(call: grpc.UnaryUnaryMultiCallable, request: object) -> status_pb2.Status:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(caught.value.trailing_metadata() or ())
    return status_pb2.Status.FromString(trailers["grpc-status-details-bin"])


def grpc_fields(status: status_pb2.Status) -> list[str]:
    kinds = [d.type_url.rsplit(".", 1)[-1] for d in status.details]
    assert kinds.count("ErrorInfo") == 1, kinds
    bad = error_details_pb2.BadRequest()
    assert any(d.Unpack(bad) for d in status.details), status
    return [v.field for v in bad.field_violations]


CASES = [
    pytest.param(
        f"/v1beta/{APP}/evaluations:export",
        {"names": BAD, "includeEvaluations": True},
        "Must be an evaluation of",
        id="export-evaluations",
    ),
    pytest.param(
        f"/v1beta/{EVALUATION}/results:export",
        {"names": [name + "/results/r" for name in BAD]},
        "Must be a result of",
        id="export-evaluation-results",
    ),
    pytest.param(
        f"/v1beta/{APP}/evaluations:export",
        {
            "names": [f"{APP}/evaluations/Bad{i}" for i in range(MAX_REPEATED)],
            "includeEvaluations": True,
        },
        "has an invalid evaluation ID",
        id="export-evaluations-bad-ids",
    ),
]


@pytest.mark.parametrize(("path", "body", "said"), CASES)
def test_a_thousand_bad_names_cost_a_hundred_violations_over_rest(
    server: RunningServer, path: str, body: dict[str, object], said: str
) -> None:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = http.post(path, json=body)
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert [d["reason"] for d in error["details"] if d["@type"].endswith("ErrorInfo")] == [
        "INVALID_ARGUMENT"
    ]
    [bad] = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
    fields = [v["field"] for v in bad["fieldViolations"]]
    assert fields == [f"names[{i}]" for i in range(MAX_VIOLATIONS)]
    assert said in bad["fieldViolations"][0]["description"]
    assert f"at least {MAX_VIOLATIONS} problems" in error["message"]
    assert len(response.content) < 40_000  # before: 100 KB to 260 KB


def test_a_thousand_bad_names_cost_a_hundred_violations_over_grpc(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        evaluations = grpc_status(
            stub.ExportEvaluations,
            service_pb2.ExportEvaluationsRequest(parent=APP, names=BAD, include_evaluations=True),
        )
        results = grpc_status(
            stub.ExportEvaluationResults,
            service_pb2.ExportEvaluationResultsRequest(
                parent=EVALUATION, names=[name + "/results/r" for name in BAD]
            ),
        )
    for status in (evaluations, results):
        assert f"at least {MAX_VIOLATIONS} problems" in status.message
        fields = grpc_fields(status)
        assert fields == [f"names[{i}]" for i in range(len(fields))]
        assert len(fields) <= MAX_VIOLATIONS


def test_a_few_bad_names_are_each_named(server: RunningServer) -> None:
    names = [EVALUATION, BAD[0], f"{APP}/evaluations/Upper", EVALUATION]
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = http.post(
            f"/v1beta/{APP}/evaluations:export", json={"names": names, "includeEvaluations": True}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    [bad] = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
    assert [v["field"] for v in bad["fieldViolations"]] == ["names[1]", "names[2]"]
    assert error["message"].startswith("The export request is invalid (2 problems): names[1]: ")
