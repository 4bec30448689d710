"""Every read fits what the official clients receive (issue 15, item 8), on the real server.

Before, 7 MiB evaluations were accepted, and the official client's list_evaluations then failed
even with page_size=1 (grpc's 4 MiB receive limit); a REST list of 25 of them was 245 MB. Now
a write is refused when the resource, as it will be served, is larger than
``limits.MAX_RESOURCE_BYTES`` (4 MiB - 64 KiB), and a List page ends before the item that would
take it past ``limits.MAX_PAGE_BYTES``, with a next_page_token.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ces_eval.contract import limits
from ces_eval.core.exchange import FORMAT
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, start_server
from tests.support.errors import violations
from tests.support.mcp import call_tool
from tests.support.official import run_script, targets

APP = "projects/p/locations/l/apps/large"
EMPTY = "projects/p/locations/l/apps/refusals"  # where every refused create goes: stays empty
TEXT = 200_000  # characters of one step: under the string limit
NEAR = limits.MAX_RESOURCE_BYTES - 16 * 1024  # bytes of text in each stored evaluation
OVER = limits.MAX_RESOURCE_BYTES + 1  # bytes of text in a create that must be refused
COUNT = 6


def body(display_name: str, size: int) -> dict[str, Any]:
    """An evaluation as REST JSON whose steps hold ``size`` characters of text."""
    steps = []
    while size > 0:
        steps.append({"userInput": {"text": "x" * min(TEXT, size)}})
        size -= TEXT
    return {"displayName": display_name, "golden": {"turns": [{"steps": steps}]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("read-bounds") / "ces-eval.db")
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_base, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def stored(http: httpx.Client) -> list[str]:
    """COUNT evaluations just under the bound, created over REST."""
    names = []
    for index in range(COUNT):
        response = http.post(
            f"/v1beta/{APP}/evaluations",
            params={"evaluationId": f"near-{index}"},
            json=body(f"near {index}", NEAR),
        )
        assert response.status_code == 200, response.text[:2000]
        served = json_format.Parse(response.content, evaluation_pb2.Evaluation())
        assert NEAR < served.ByteSize() <= limits.MAX_RESOURCE_BYTES
        names.append(served.name)
    return names


def _scenario(server: RunningServer, transport: str) -> dict[str, Any]:
    target = targets([server], transport)
    [report] = run_script("large_scenario.py", transport, target, APP, str(OVER), timeout=600)
    return report


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_the_official_client_reads_every_page_of_large_evaluations(
    server: RunningServer, stored: list[str], transport: str
) -> None:
    """Default page size (50): each page holds the one evaluation that fits, and the client's
    pager walks them all; a Get of each fits too; a create one byte of text over the bound is
    INVALID_ARGUMENT with the field violation, and nothing is stored."""
    report = _scenario(server, transport)
    assert sorted(name for page in report["pages"] for name in page) == sorted(stored)
    assert [len(page) for page in report["pages"]] == [1] * COUNT
    assert set(report["sizes"]) == set(stored)
    assert all(size <= limits.MAX_RESOURCE_BYTES for size in report["sizes"].values())
    refused = report["refused"]
    assert refused["type"] == ("InvalidArgument" if transport == "grpc" else "BadRequest")
    assert refused["reason"] == "INVALID_ARGUMENT"
    assert refused["violations"] == [["evaluation", "TOO_LARGE"]]
    assert str(limits.MAX_RESOURCE_BYTES) in refused["message"]
    assert "Traceback" not in server.output()


def test_a_rest_list_of_large_evaluations_is_one_budget_per_page(
    http: httpx.Client, stored: list[str]
) -> None:
    """Before: one page held every evaluation (245 MB for 25 of 7 MiB). Now a page ends before
    the item that would pass the budget, and says where the next one starts."""
    seen: list[str] = []
    token = ""
    while True:
        response = http.get(
            f"/v1beta/{APP}/evaluations", params={"pageToken": token} if token else {}
        )
        assert response.status_code == 200
        page = json_format.Parse(response.content, service_pb2.ListEvaluationsResponse())
        assert len(page.evaluations) == 1
        assert page.ByteSize() <= limits.CLIENT_RECEIVE_BYTES
        assert len(response.content) < 2 * limits.MAX_PAGE_BYTES  # the JSON of one of them
        seen += [e.name for e in page.evaluations]
        token = page.next_page_token
        if not token:
            break
        assert len(seen) < COUNT
    assert sorted(seen) == sorted(stored)


def test_a_create_over_the_bound_is_refused_on_every_surface(
    server: RunningServer, http: httpx.Client
) -> None:
    rest = http.post(f"/v1beta/{EMPTY}/evaluations", json=body("over rest", OVER))
    assert rest.status_code == 400, rest.text[:2000]
    error = rest.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    [info] = [d for d in error["details"] if d["@type"].endswith("ErrorInfo")]
    assert info["reason"] == "INVALID_ARGUMENT"
    assert violations(error) == [("evaluation", "TOO_LARGE")]

    request = service_pb2.CreateEvaluationRequest(parent=EMPTY)
    json_format.ParseDict(body("over grpc", OVER), request.evaluation)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_grpc.EvaluationServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.CreateEvaluation(request, timeout=60)
        failure: Any = raised.value
        assert failure.code() is grpc.StatusCode.INVALID_ARGUMENT
        status = rpc_status.from_call(failure)
        assert status is not None
        found = []
        for detail in status.details:
            bad_request = error_details_pb2.BadRequest()
            if detail.Unpack(bad_request):
                found += [(v.field, v.reason) for v in bad_request.field_violations]
        assert found == [("evaluation", "TOO_LARGE")]

    arguments = {"parent": EMPTY, "evaluation": body("over mcp", OVER)}
    mcp = call_tool(http, "create_evaluation", arguments)
    assert mcp.status_code == 200, mcp.text[:2000]
    result = mcp.json()["result"]
    assert result["isError"] is True
    envelope = json.loads(result["content"][0]["text"])["error"]
    assert envelope["status"] == "INVALID_ARGUMENT"
    assert violations(envelope) == [("evaluation", "TOO_LARGE")]

    listed = http.get(f"/v1beta/{EMPTY}/evaluations").json()
    assert listed.get("evaluations", []) == []


def test_an_import_over_the_bound_names_the_evaluation(http: httpx.Client) -> None:
    document = {
        "format": FORMAT,
        "evaluations": [
            {"name": f"{APP}/evaluations/fine", **body("fine", 1000)},
            {"name": f"{APP}/evaluations/over", **body("over import", OVER)},
        ],
        "evaluationResults": [],
    }
    content = base64.b64encode(json.dumps(document).encode()).decode()
    response = http.post(f"/emulator/v1/{EMPTY}:importEvaluations", json={"content": content})
    assert response.status_code == 400, response.text[:2000]
    assert violations(response.json()["error"]) == [("content.evaluations[1]", "TOO_LARGE")]
    listed = http.get(f"/v1beta/{EMPTY}/evaluations").json()
    assert listed.get("evaluations", []) == []
