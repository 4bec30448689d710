"""ces_eval.testing.Emulator, the seeding helper users import beside Google's client, against the
real ``ces-eval serve``: every method reaches its emulator route, resources go in as dicts or
protobuf messages, refusals come back in Google's error model, and resets empty one project
or all of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.testing import Emulator, EmulatorError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ces_eval.testing.server import RunningServer


def _app(project: str) -> str:
    return f"projects/{project}/locations/us-central1/apps/bot"


def _golden(http: httpx.Client, app: str, display_name: str = "Golden") -> dict[str, Any]:
    answer = http.post(
        f"/v1beta/{app}/evaluations",
        json={
            "displayName": display_name,
            "golden": {"turns": [{"steps": [{"userInput": {"text": "Hi"}}]}]},
        },
    )
    assert answer.status_code == 200, answer.text
    created: dict[str, Any] = answer.json()
    return created


@pytest.fixture
def http(module_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_server.http_base, timeout=30) as client:
        yield client


@pytest.fixture
def admin(module_server: RunningServer) -> Emulator:
    return Emulator(module_server.http_base)


def test_results_and_runs_are_seeded_from_dicts_and_messages(
    admin: Emulator, http: httpx.Client
) -> None:
    app = _app("seeding")
    evaluation = _golden(http, app)
    run = admin.create_run(app, {"displayName": "Nightly", "state": "COMPLETED"}, run_id="n1")
    assert run["name"] == f"{app}/evaluationRuns/n1"
    as_message = evaluation_pb2.EvaluationResult(
        display_name="from a message", evaluation_run=run["name"], execution_state=2
    )
    seeded = [
        admin.create_result(evaluation["name"], {"displayName": "from a dict"}, result_id="d"),
        admin.create_result(evaluation["name"], as_message, result_id="m"),
    ]
    assert [s["name"].rsplit("/", 1)[1] for s in seeded] == ["d", "m"]
    listed = http.get(f"/v1beta/{evaluation['name']}/results").json()["evaluationResults"]
    assert sorted(r["displayName"] for r in listed) == ["from a dict", "from a message"]
    with pytest.raises(TypeError, match="proto3 JSON"):
        admin.create_result(evaluation["name"], ["not", "a", "resource"])


def test_conversations_and_imports_from_bytes_a_path_and_a_document(
    admin: Emulator, http: httpx.Client, tmp_path: Path
) -> None:
    app = _app("imports")
    conversation = admin.create_conversation(
        app, {"turns": [{"messages": [{"role": "user", "chunks": [{"text": "Hi"}]}]}]}, "c1"
    )
    assert conversation["name"] == f"{app}/conversations/c1"
    evaluation = _golden(http, app, "Exported")
    document = {
        "format": "ces-eval.export/v1",
        "evaluations": [{**evaluation, "displayName": f"Copy {n}"} for n in range(3)],
    }
    for n, item in enumerate(document["evaluations"]):
        item["name"] = f"{app}/evaluations/copy-{n}"
    path = tmp_path / "export.json"
    path.write_text(json.dumps({**document, "evaluations": document["evaluations"][1:2]}))
    imported = [
        admin.import_evaluations(
            app, json.dumps({**document, "evaluations": document["evaluations"][:1]}).encode()
        ),
        admin.import_evaluations(app, path),
        admin.import_evaluations(app, {**document, "evaluations": document["evaluations"][2:]}),
    ]
    assert [len(i["evaluations"]) for i in imported] == [1, 1, 1]
    names = {e["displayName"] for e in http.get(f"/v1beta/{app}/evaluations").json()["evaluations"]}
    assert names == {"Exported", "Copy 0", "Copy 1", "Copy 2"}


def test_outcome_rules_hold_a_run_until_released(admin: Emulator, http: httpx.Client) -> None:
    app = _app("holds")
    evaluation = _golden(http, app)
    rule = admin.create_outcome_rule(
        app, {"evaluation": evaluation["name"], "hold": "RUNNING"}, rule_id="hold"
    )
    assert [r["name"] for r in admin.outcome_rules(app)] == [rule["name"]]
    operation = http.post(
        f"/v1beta/{app}:runEvaluation", json={"evaluations": [evaluation["name"]]}
    ).json()
    with pytest.raises(TimeoutError):
        admin.wait(operation, timeout=0.5)
    assert admin.release_outcome_rule(rule["name"])["released"] is True
    assert admin.wait(operation)["done"] is True
    admin.delete_outcome_rule(rule["name"])
    assert admin.outcome_rules(app) == []


def test_the_clock_moves_and_a_schedule_fires(admin: Emulator, http: httpx.Client) -> None:
    project = "clock"
    app = _app(project)
    before = admin.clock(project)
    moved = admin.advance_clock(f"projects/{project}", timedelta(hours=2))
    assert moved["offset"] == "7200s"
    assert admin.advance_clock(project, 1.5)["offset"] == "7201.500s"
    assert datetime.fromisoformat(moved["now"]) - datetime.fromisoformat(
        before["now"]
    ) >= timedelta(hours=2)
    evaluation = _golden(http, app)
    schedule = http.post(
        f"/v1beta/{app}/scheduledEvaluationRuns",
        json={
            "displayName": "Nightly",
            "request": {"app": app, "evaluations": [evaluation["name"]]},
            "schedulingConfig": {
                "frequency": "DAILY",
                "startTime": (datetime.now(UTC) + timedelta(days=1))
                .isoformat()
                .replace("+00:00", "Z"),
            },
        },
    ).json()
    done = admin.wait(admin.fire(schedule["name"]))
    assert done["response"]["evaluationRun"].startswith(f"{app}/evaluationRuns/")


def test_refusals_come_back_in_googles_error_model(admin: Emulator) -> None:
    with pytest.raises(EmulatorError) as refused:
        admin.create_result(f"{_app('refusals')}/evaluations/none", {"displayName": "x"})
    error = refused.value
    assert (error.http_status, error.status) == (404, "NOT_FOUND")
    assert any(d.get("@type", "").endswith("ErrorInfo") for d in error.details)
    with pytest.raises(EmulatorError) as invalid:
        admin.reset_project("projects/has space")
    assert invalid.value.status == "INVALID_ARGUMENT"


def test_a_reset_empties_one_project_and_all_of_them(server: RunningServer) -> None:
    """On a server of its own: resetting every project would empty the module's."""
    admin = Emulator(server.http_base)
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        kept, dropped = _app("reset-kept"), _app("reset-dropped")
        _golden(http, kept)
        _golden(http, dropped)
        assert admin.reset_project("reset-dropped")["deletedEvaluations"] == "1"
        assert http.get(f"/v1beta/{dropped}/evaluations").json() == {}
        assert len(http.get(f"/v1beta/{kept}/evaluations").json()["evaluations"]) == 1
        assert admin.reset_all()["deletedEvaluations"] == "1"
        assert http.get(f"/v1beta/{kept}/evaluations").json() == {}
