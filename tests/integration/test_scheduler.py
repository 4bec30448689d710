"""Schedules fire and runs survive their server, against the real ``ces-eval serve`` over REST:
a project clock moved past a due time fires a schedule once across two worker processes (both
of whose schedulers look at it), a time missed while no server ran fires once at the next
start, and a run whose server is killed with SIGKILL mid-run ends ERROR at the next start,
never stuck RUNNING, its operation ABORTED."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from ces_eval.testing.server import RunningServer, start_server

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PROJECT = "scheduler-project"
APP = f"projects/{PROJECT}/locations/us-central1/apps/nightly"
LOOKS = 3.0  # seconds: three looks of every worker's scheduler (scheduler.INTERVAL is 1 s)


def until(what: Callable[[], Any], timeout: float = 30) -> Any:
    """``what()`` once it is truthy, polled."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def as_json(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def golden(http: httpx.Client, display_name: str) -> dict[str, Any]:
    """A new one-turn golden evaluation of the app."""
    created: dict[str, Any] = as_json(
        http.post(
            f"/v1beta/{APP}/evaluations",
            json={
                "displayName": display_name,
                "golden": {"turns": [{"steps": [{"userInput": {"text": "Hi"}}]}]},
            },
        )
    )
    return created


def seed(http: httpx.Client, start: datetime) -> dict[str, Any]:
    """An evaluation and an active daily schedule of it from ``start``."""
    evaluation = golden(http, "Golden")
    schedule: dict[str, Any] = as_json(
        http.post(
            f"/v1beta/{APP}/scheduledEvaluationRuns",
            json={
                "displayName": "Nightly",
                "active": True,
                "request": {"app": APP, "evaluations": [evaluation["name"]]},
                "schedulingConfig": {
                    "frequency": "DAILY",
                    "startTime": start.isoformat().replace("+00:00", "Z"),
                },
            },
        )
    )
    return schedule


def runs(http: httpx.Client) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = as_json(http.get(f"/v1beta/{APP}/evaluationRuns")).get(
        "evaluationRuns", []
    )
    return runs


def test_a_moved_clock_fires_once_across_workers(tmp_path: Path) -> None:
    server = start_server(tmp_path / "ces-eval.db", "--workers", "2")
    try:
        with httpx.Client(base_url=server.http_base, timeout=30) as http:
            schedule = seed(http, datetime.now(UTC) + timedelta(hours=1))
            clock = as_json(
                http.post(f"/emulator/v1/projects/{PROJECT}/clock:advance", json={"by": "7200s"})
            )
            assert clock["offset"] == "7200s"
            [run] = runs(http)  # fired before AdvanceClock answered
            assert run["scheduledEvaluationRun"] == schedule["name"]
            time.sleep(LOOKS)  # both workers' schedulers see the moved clock, and fire nothing
            assert [r["name"] for r in runs(http)] == [run["name"]]
            done = until(
                lambda: as_json(http.get(f"/v1beta/{run['name']}"))["state"] == "COMPLETED"
            )
            assert done
            fired = as_json(http.get(f"/v1beta/{schedule['name']}"))
            assert fired["totalExecutions"] == 1
            assert fired["lastCompletedRun"] == run["name"]
    finally:
        server.kill()


def test_a_time_missed_while_down_fires_once_at_start(tmp_path: Path) -> None:
    database = tmp_path / "ces-eval.db"
    first = start_server(database, "--scheduler", "off")
    try:
        with httpx.Client(base_url=first.http_base, timeout=30) as http:
            schedule = seed(http, datetime.now(UTC) + timedelta(seconds=1))
            due = datetime.fromisoformat(schedule["nextScheduledExecutionTime"])
            time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + LOOKS / 2)
            assert not runs(http)  # the scheduler is off: the due time passes
    finally:
        assert first.stop(signal.SIGTERM) == 0
    second = start_server(database)
    try:
        with httpx.Client(base_url=second.http_base, timeout=30) as http:
            [run] = until(lambda: runs(http))
            time.sleep(LOOKS)
            assert [r["name"] for r in runs(http)] == [run["name"]]
            fired = as_json(http.get(f"/v1beta/{schedule['name']}"))
            assert fired["totalExecutions"] == 1
            following = datetime.fromisoformat(fired["nextScheduledExecutionTime"])
            assert following > datetime.now(UTC)
    finally:
        second.kill()


def test_a_run_killed_mid_run_ends_in_error_at_the_next_start(tmp_path: Path) -> None:
    database = tmp_path / "ces-eval.db"
    first: RunningServer = start_server(database)
    with httpx.Client(base_url=first.http_base, timeout=30) as http:
        evaluation = golden(http, "Held")
        as_json(
            http.post(
                f"/emulator/v1/{APP}/outcomeRules",
                json={"evaluation": evaluation["name"], "hold": "RUNNING"},
            )
        )
        operation = as_json(
            http.post(f"/v1beta/{APP}:runEvaluation", json={"evaluations": [evaluation["name"]]})
        )
        run = operation["metadata"]["evaluationRun"]
        until(lambda: as_json(http.get(f"/v1beta/{run}"))["state"] == "RUNNING")
    first.kill()  # SIGKILL: nothing of the process records anything
    second = start_server(database)
    try:
        with httpx.Client(base_url=second.http_base, timeout=30) as http:
            found = as_json(http.get(f"/v1beta/{run}"))
            assert found["state"] == "ERROR", found
            assert found["errorInfo"]["errorType"] == "RUNTIME_FAILURE"
            assert "stopped" in found["errorInfo"]["errorMessage"]
            ended = as_json(http.get(f"/v1beta/{operation['name']}"))
            assert ended["done"] and ended["error"]["code"] == 10  # ABORTED
    finally:
        second.kill()
