"""Google's official Python client drives the real server over gRPC and REST.

The client runs in its own environment (``.venv-client``) as a subprocess:
``tests/official/client_scenario.py`` asserts each step from the client's side and reports what
it saw; this test checks those reports, including the derived metrics against values computed by
hand from the seeded results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official, run_script
from tests.support.tokens import ALICE, BOB, guarded_server

# Google's official client runs in its own environment (.venv-client).
pytestmark = pytest.mark.external

APP = "projects/demo-project/locations/us-central1/apps/support-bot"
TOOL = APP + "/tools/lookup-order"


def run_scenario(servers: list[RunningServer], transport: str) -> dict[str, dict[str, object]]:
    """The scenario's steps by name; with several servers (replicas), calls alternate."""
    return run_official("client_scenario.py", servers, transport)


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_official_client_scenario(server: RunningServer, transport: str) -> None:
    check_steps(run_scenario([server], transport), transport, server.export_dir)


def check_steps(steps: dict[str, dict[str, object]], transport: str, export_dir: Path) -> None:
    """What the official client must have seen at each step of the scenario."""

    names = steps["create"]["names"]
    assert isinstance(names, list)
    assert names[0] == APP + "/evaluations/order-status"

    duplicates = steps["duplicates"]
    assert duplicates["id"] == {
        "reason": "RESOURCE_ALREADY_EXISTS",
        "domain": "ces.googleapis.com",
        "violations": [],
    }
    assert names[1] in str(duplicates["display_name"])

    assert steps["invalid"] == {
        "reason": "INVALID_ARGUMENT",
        "domain": "ces.googleapis.com",
        "violations": ["evaluation.display_name", "evaluation.golden.turns[0].steps"],
    }
    # Default order is update_time descending; page_size 1 walks three pages.
    assert steps["list"] == {"names": sorted(names), "pages": 3}
    assert steps["update"]["stale"]["reason"] == "ETAG_MISMATCH"  # type: ignore[index]

    evaluation_names = {n.rsplit("/", 1)[-1] for n in names}  # type: ignore[union-attr]
    assert "order-status" in evaluation_names
    run2 = sorted(
        [
            f"{names[0]}/results/r2",
            f"{names[0]}/results/r3",
            f"{names[1]}/results/r4",
        ]
    )
    assert steps["list_results"] == {"names": run2}

    # Seeded on order-status: r1 (v1, run-1, PASS, similarity 4, turn 2s, tool 1s, tool PASS),
    # r2 (v1, run-2, FAIL, similarity 2, turn 4s, tool 3s, tool FAIL), r3 (v2, RUNNING: ignored).
    tool = {"tool": TOOL, "pass_count": 1, "fail_count": 1}
    per_turn = {
        "turn_index": 0,
        "tool_metrics": [tool],
        "semantic_similarity_metrics": [{"score": 3.0}],
        "hallucination_metrics": [],
        "tool_call_latency_metrics": [{"tool": TOOL, "average_latency": "2s"}],
        "turn_latency_metrics": [{"average_latency": "3s"}],
    }
    expected = {
        "metrics_by_app_version": [
            {
                "app_version_id": "v1",
                "pass_count": 1,
                "fail_count": 1,
                "metrics_by_turn": [per_turn],
                **{k: v for k, v in per_turn.items() if k != "turn_index"},
            }
        ]
    }
    derived = steps["derived"]
    assert derived["aggregated_metrics"] == expected
    assert derived["evaluation_runs"] == [
        APP + "/evaluationRuns/run-2",
        APP + "/evaluationRuns/run-1",
    ]
    assert derived["last_completed_result"] == f"{names[0]}/results/r2"

    assert steps["delete"]["stale"]["reason"] == "ETAG_MISMATCH"  # type: ignore[index]
    assert steps["delete"]["gone"]["reason"] == "RESOURCE_NOT_FOUND"  # type: ignore[index]
    assert str(steps["delete"]["gone"]["message"]).endswith(  # type: ignore[index]
        f"Evaluation {names[0]} not found."
    )
    export = steps["export"]
    assert export["evaluations"] == [names[0]]
    assert export["results"] == [f"{names[0]}/results/r{i}" for i in (1, 2, 3)]
    assert export["failed"] == [APP + "/evaluations/missing"]
    assert export["metadata"] == "OperationMetadata"
    uri = str(steps["export_file"]["uri"])
    assert uri.startswith("gs://ces-exports/nightly/evaluations-")
    assert uri.endswith(".yaml")
    assert steps["export_file"]["content"] == 0
    written = export_dir / uri.removeprefix("gs://")
    assert names[1] in written.read_text(encoding="utf-8")
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # no temp files left
    assert steps["export_results"] == {"results": [f"{names[0]}/results/r1"]}
    # r1: similarity 4 >= 3, tool call PASS -> PASS; r2: similarity 2 < 3 -> FAIL.
    assert steps["metrics"] == {"statuses": {"r1": "PASS", "r2": "FAIL"}}
    operations = steps["operations"]
    assert operations["count"] == 5  # two evaluation exports, one results export, two metric runs
    assert operations["done"] is True

    # RunEvaluation is served: the method itself refuses a run of nothing, naming the field.
    refused = dict(steps["run_refused"])
    message = str(refused.pop("message"))
    assert message.endswith(
        "The run request is invalid (1 problem): evaluations: Give evaluations or an "
        "evaluation_dataset."
    ), message
    assert refused == {
        "exception": "InvalidArgument" if transport == "grpc" else "BadRequest",
        "reason": "INVALID_ARGUMENT",
        "domain": "ces.googleapis.com",
        "violations": ["evaluations"],
    }


def test_official_client_sends_bearer_tokens_on_both_transports(tmp_path: Path) -> None:
    """The token wiring docs/security.md shows works with the unmodified client: the owner's
    token creates and lists, a foreign project's token is refused on every call."""
    with guarded_server(tmp_path) as guarded:
        reports = run_script(
            "auth_scenario.py",
            guarded.grpc_target,
            guarded.http_base,
            ALICE,
            BOB,
            servers=[guarded],
        )
    assert [r["transport"] for r in reports] == ["grpc", "rest"]
    for report in reports:
        assert report["created_by"] == "alice"
        assert report["listed"] is True
        assert report["stranger"] == {
            "get": "PermissionDenied" if report["transport"] == "grpc" else "Forbidden",
            "list": "PermissionDenied" if report["transport"] == "grpc" else "Forbidden",
            "delete": "PermissionDenied" if report["transport"] == "grpc" else "Forbidden",
        }
