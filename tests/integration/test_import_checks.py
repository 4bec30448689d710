"""The emulator's ImportEvaluations on the real server: documents whose names the import cannot
use (issue 15 hardening).

A result name without ``/results/`` answered 500 (an IndexError while renaming it into the
app); every name of the document must be a resource name of its kind, located by its path in
the document, over REST and gRPC, with ``content`` (quoted) and ``gcs_uri`` (never quoted).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2

from ces_eval.contract.limits import MAX_REQUEST_BYTES
from ces_eval.core.exchange import FORMAT
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.testing.server import RunningServer, start_server

APP = "projects/imports/locations/l/apps/a"
SOURCE = "projects/other/locations/l/apps/b"  # where the document was exported from
HIDDEN = "hidden-segment-7f3a"  # text of a file that no error may quote


def evaluation(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "displayName": name.rsplit("/", 1)[-1] or "unnamed",
        "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
    }


def document(evaluations: Sequence[str] = (), results: Sequence[str] = ()) -> bytes:
    return json.dumps(
        {
            "format": FORMAT,
            "evaluations": [evaluation(n) for n in evaluations],
            "evaluationResults": [{"name": n} for n in results],
        }
    ).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("imports")
    running = start_server(folder / "db.sqlite", export_dir=folder / "exports")
    (running.export_dir / "b").mkdir(parents=True)
    try:
        yield running
    finally:
        running.kill()


def rest_import(server: RunningServer, body: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        return http.post(f"/emulator/v1/{APP}:importEvaluations", json=body)


def grpc_import(
    server: RunningServer, request: emulator_pb2.ImportEvaluationsRequest
) -> status_pb2.Status:
    with grpc.insecure_channel(server.grpc_target) as channel:
        try:
            emulator_grpc.EmulatorServiceStub(channel).ImportEvaluations(request, timeout=30)
        except grpc.RpcError as failure:
            trailers = dict(failure.trailing_metadata() or ())
            return status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    return status_pb2.Status()


def violations(status: status_pb2.Status) -> list[tuple[str, str]]:
    """(field, description) of the BadRequest in ``status``, which must carry one ErrorInfo."""
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1, status
    found = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found += [(v.field, v.description) for v in bad.field_violations]
    return found


def rest_violations(response: httpx.Response) -> list[tuple[str, str]]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert [d["reason"] for d in error["details"] if d["@type"].endswith("ErrorInfo")] == [
        "INVALID_ARGUMENT"
    ]
    return [
        (v["field"], v["description"])
        for d in error["details"]
        if d["@type"].endswith("BadRequest")
        for v in d["fieldViolations"]
    ]


def listed(server: RunningServer) -> list[str]:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        page = http.get(f"/v1beta/{APP}/evaluations").json()
    return [e["name"] for e in page.get("evaluations", [])]


BAD_RESULT_NAMES = [
    pytest.param("r1", id="a-bare-id"),
    pytest.param(f"{SOURCE}/evaluations/e1/r1", id="no-results-segment"),
    pytest.param(f"{SOURCE}/evaluations/e1/outcomes/r1", id="another-collection"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize("name", BAD_RESULT_NAMES)
def test_a_result_name_that_is_no_result_name_is_invalid_argument_naming_its_field(
    server: RunningServer, name: str
) -> None:
    """Before: 500 INTERNAL (IndexError) for the first two, and nonsense names for the rest."""
    content = document([f"{SOURCE}/evaluations/e1"], [name])
    field = "content.evaluationResults[0].name"
    found = rest_violations(rest_import(server, {"content": base64.b64encode(content).decode()}))
    assert [f for f, _ in found] == [field], found
    assert "must have the form projects/{project}/" in found[0][1]
    status = grpc_import(server, emulator_pb2.ImportEvaluationsRequest(parent=APP, content=content))
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [f for f, _ in violations(status)] == [field]
    assert listed(server) == []  # nothing of the document was imported


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("e1", id="a-bare-id"),
        pytest.param("", id="empty"),
        pytest.param(f"{SOURCE}/datasets/e1", id="another-collection"),
    ],
)
def test_an_evaluation_name_that_is_no_evaluation_name_is_invalid_argument(
    server: RunningServer, name: str
) -> None:
    """Before: imported as ``…/evaluations/e1`` or ``…/evaluations/`` (an empty ID)."""
    content = document([name])
    found = rest_violations(rest_import(server, {"content": base64.b64encode(content).decode()}))
    assert [f for f, _ in found] == ["content.evaluations[0].name"], found
    assert listed(server) == []


def test_a_file_with_bad_names_is_refused_without_quoting_them(server: RunningServer) -> None:
    (server.export_dir / "b" / "names.json").write_bytes(
        document(
            [f"{SOURCE}/evaluations/e1", f"{SOURCE}/{HIDDEN}/e2"],
            [f"{SOURCE}/evaluations/e1/{HIDDEN}"],
        )
    )
    response = rest_import(server, {"gcsUri": "gs://b/names.json"})
    found = rest_violations(response)
    assert [f for f, _ in found] == [
        "gcs_uri.evaluations[1].name",
        "gcs_uri.evaluationResults[0].name",
    ]
    assert all(d.startswith("The name must have the form projects/") for _, d in found), found
    assert HIDDEN not in response.text
    status = grpc_import(
        server, emulator_pb2.ImportEvaluationsRequest(parent=APP, gcs_uri="gs://b/names.json")
    )
    assert HIDDEN not in str(status)
    assert len(violations(status)) == 2
    assert listed(server) == []


def test_results_and_evaluations_with_their_names_are_imported_renamed(
    server: RunningServer,
) -> None:
    content = document([f"{SOURCE}/evaluations/good"], [f"{SOURCE}/evaluations/good/results/r1"])
    response = rest_import(server, {"content": base64.b64encode(content).decode()})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "evaluations": [f"{APP}/evaluations/good"],
        "importedEvaluationResults": "1",
    }
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        result = http.get(f"/v1beta/{APP}/evaluations/good/results/r1")
        assert result.status_code == 200, result.text
        assert http.delete(f"/v1beta/{APP}/evaluations/good").status_code == 200


# -- AIP-122 IDs, as create checks them -----------------------------------------------------------

BAD_IDS = [
    pytest.param("Upper", id="uppercase"),
    pytest.param("9lives", id="digit-first"),
    pytest.param("trailing-", id="hyphen-last"),
    pytest.param("under_score", id="underscore"),
    pytest.param("a" * 64, id="64-characters"),
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_imported_ids_follow_aip_122_like_created_ones(server: RunningServer, bad: str) -> None:
    """Before: imported as they were (``…/evaluations/Upper``), though CreateEvaluation refuses
    the same ID; now the import refuses it with the create's rule, for evaluations and results
    (both of a result's IDs)."""
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        created = http.post(
            f"/v1beta/{APP}/evaluations",
            params={"evaluationId": bad},
            json=evaluation(""),
        )
    assert created.status_code == 400, created.text
    cases = {
        "content.evaluations[0].name": document([f"{SOURCE}/evaluations/{bad}"]),
        "content.evaluationResults[0].name": document(
            [f"{SOURCE}/evaluations/e1"], [f"{SOURCE}/evaluations/e1/results/{bad}"]
        ),
    }
    for field, content in cases.items():
        found = rest_violations(
            rest_import(server, {"content": base64.b64encode(content).decode()})
        )
        assert [f for f, _ in found] == [field], found
        assert f"ID {bad!r} (AIP-122:" in found[0][1], found
        status = grpc_import(
            server, emulator_pb2.ImportEvaluationsRequest(parent=APP, content=content)
        )
        assert [f for f, _ in violations(status)] == [field]
    content = document([], [f"{SOURCE}/evaluations/{bad}/results/r1"])
    found = rest_violations(rest_import(server, {"content": base64.b64encode(content).decode()}))
    assert "has an invalid evaluation ID" in found[0][1], found
    assert listed(server) == []


def test_bad_ids_in_a_file_are_refused_without_quoting_them(server: RunningServer) -> None:
    (server.export_dir / "b" / "ids.json").write_bytes(
        document([f"{SOURCE}/evaluations/{HIDDEN.upper()}"])
    )
    response = rest_import(server, {"gcsUri": "gs://b/ids.json"})
    [(field, description)] = rest_violations(response)
    assert field == "gcs_uri.evaluations[0].name"
    assert description.startswith("The name has an invalid evaluation ID (AIP-122:")
    assert HIDDEN.upper() not in response.text
    assert listed(server) == []


# -- the size of an object read from gcs_uri -------------------------------------------------------


def test_an_object_over_the_request_size_limit_is_not_imported(server: RunningServer) -> None:
    """Before: read whole, whatever its size, and imported. Now an object is held to the limit
    of a request (a document given as content): one of exactly MAX_REQUEST_BYTES imports, one
    byte more is INVALID_ARGUMENT with a TOO_LARGE violation on gcs_uri, over REST and gRPC."""
    limit = MAX_REQUEST_BYTES
    content = document([f"{SOURCE}/evaluations/sized"])
    exact = content + b" " * (limit - len(content))  # JSON allows trailing blanks
    (server.export_dir / "b" / "exact.json").write_bytes(exact)
    (server.export_dir / "b" / "over.json").write_bytes(exact + b" ")
    response = rest_import(server, {"gcsUri": "gs://b/over.json"})
    found = rest_violations(response)
    description = (
        f"gs://b/over.json is larger than {limit} bytes, the most one import reads. "
        "Export fewer evaluations per file."
    )
    assert found == [("gcs_uri", description)]
    error = response.json()["error"]
    assert error["message"] == f"gcs_uri: {description}"
    [info] = [d for d in error["details"] if d["@type"].endswith("ErrorInfo")]
    assert info["metadata"] == {"uri": "gs://b/over.json", "limit": str(limit)}
    [bad] = [d for d in error["details"] if d["@type"].endswith("BadRequest")]
    assert bad["fieldViolations"][0]["reason"] == "TOO_LARGE"
    status = grpc_import(
        server, emulator_pb2.ImportEvaluationsRequest(parent=APP, gcs_uri="gs://b/over.json")
    )
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert violations(status) == [("gcs_uri", description)]
    assert listed(server) == []
    imported = rest_import(server, {"gcsUri": "gs://b/exact.json"})
    assert imported.status_code == 200, imported.text
    assert listed(server) == [f"{APP}/evaluations/sized"]
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        assert http.delete(f"/v1beta/{APP}/evaluations/sized").status_code == 200
