"""The benchmark harness (bench/) end to end on a tiny data set: every scenario answered every
request without error and the report has every field. No timing assertions: the numbers of a
one-second run on a shared machine mean nothing.

h2load and wrk are installed as root when missing (bench/tools.sh ensure, as ``make bench``
does); only a machine without them where this is not root skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench import data

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [
    "get-grpc",
    "get-rest",
    "list-first-grpc",
    "list-first-rest",
    "list-deep-grpc",
    "list-deep-rest",
    "create-grpc",
    "create-rest",
]
FLOOR_SCENARIOS = [s for s in SCENARIOS if not s.startswith("list-deep")]
# The request log's cost: these reads against a log-on and a log-off server.
LOG_WORKLOADS = ["get-grpc", "get-rest", "list-first-rest"]
SCENARIO_FIELDS = {
    "scenario",
    "data_set",
    "surface",
    "tool",
    "requests",
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "errors",
    "error_detail",
    "peak_rss_mb",
    "peak_rss_scope",
    "duration_s",
    "concurrency",
    "cpu",
}
DATA_SET_FIELDS = {
    "app",
    "results",
    "evaluations",
    "results_per_evaluation",
    "runs",
    "evaluation_bytes",
    "result_bytes",
    "method",
    "load_s",
    "url",
    "disk_bytes",
    "server_start_s",
    "server_rss_at_start_mb",
    "get_answer_bytes",
    "list_answer_bytes",
    "deep_page",
    "server_log_problems",
    "server_exit",
    "server_log_level",
    "request_log_lines",
}
MACHINE_FIELDS = {
    "cpu_count",
    "cpus_available",
    "cpu_model",
    "kernel",
    "python",
    "grpcio",
    "protobuf",
    "uvicorn",
    "starlette",
    "h2load",
    "wrk",
    "commit",
}
OPTION_FIELDS = {
    "large",
    "small",
    "duration",
    "warmup",
    "connections",
    "streams",
    "deep_page",
    "workers",
    "log_repeats",
    "engine_evaluations",
    "engine_repetitions",
    "scale_sessions",
    "database",
    "server_cpu",
    "client_cpu",
    "page_size",
    "filter",
}


def _load_generators() -> None:
    if all(shutil.which(program) for program in ("h2load", "wrk", "taskset")):
        return
    if os.geteuid() != 0:
        pytest.skip("h2load/wrk are missing and only root can install them (bench/tools.sh)")
    subprocess.run([str(ROOT / "bench" / "tools.sh"), "ensure"], check=True)


@pytest.mark.external  # h2load, wrk and taskset
def test_harness_runs_every_scenario_without_errors(tmp_path: Path) -> None:
    _load_generators()
    output = tmp_path / "results"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--large",
            "2000",
            "--small",
            "200",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--connections",
            "2",
            "--streams",
            "2",
            "--log-repeats",
            "1",
            "--engine-evaluations",
            "10",
            "--engine-repetitions",
            "2",
            "--scale-sessions",
            "200",
            "--output",
            str(output),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads((output / "latest.json").read_text())

    assert {
        "date",
        "machine",
        "options",
        "data_sets",
        "scenarios",
        "durability",
        "floor",
        "engine",
    } <= set(report)
    # The run engine on both databases (PostgreSQL: the tests' own server, as tests/support
    # finds it): one run of 10 evaluations x 2, checked complete.
    for backend in ("sqlite", "postgresql"):
        engine = report["engine"][backend]
        assert engine["results"] == 20 and engine["run_checked"], (backend, engine)
        assert engine["results_per_s"] > 0 and engine["server_exit"] == 0, (backend, engine)
        assert engine["server_log_problems"] == [], (backend, engine)
    # Against the local agent: 10 single-turn and 10 3-turn goldens, then 10 x 5 at once.
    agent = report["engine"]["agent"]
    assert agent["concurrency"] == 16 and agent["server_exit"] == 0, agent
    assert agent["server_log_problems"] == [], agent
    for key, sessions in (
        ("single_turn", 10),
        ("three_turns", 10),
        ("zero_latency", 50),
        ("scale", 200),
    ):
        assert agent[key]["sessions"] == sessions and agent[key]["run_checked"], agent
    # The scale run's memory: the server's RSS before it and its peak over it.
    assert 0 < agent["scale"]["rss_before_mb"] <= agent["scale"]["peak_rss_mb"], agent
    assert agent["single_turn"]["ideal_seconds"] == 0.25 and agent["single_turn"]["ratio_to_ideal"]
    assert set(report["machine"]) >= MACHINE_FIELDS
    assert set(report["options"]) >= OPTION_FIELDS
    assert set(report["data_sets"]) == {"small", "large"}
    for name, info in report["data_sets"].items():
        assert set(info) >= DATA_SET_FIELDS, name
        assert info["server_exit"] == 0, name
        assert info["server_log_problems"] == [], name
        # ~5 KB goldens, results of a few KB.
        assert 4_500 <= info["evaluation_bytes"] <= 6_000
        assert all(2_000 <= size <= 8_000 for size in info["result_bytes"])
        # Served with the default request log: a line per call (warm-ups and probes add more).
        assert info["server_log_level"] == "info", name
        measured = sum(s["requests"] for s in report["scenarios"] if s["data_set"] == name)
        assert info["request_log_lines"] >= measured > 0, name
    assert report["data_sets"]["small"]["results"] == 200
    assert report["data_sets"]["large"]["results"] == 2000
    assert report["data_sets"]["large"]["deep_page"] == 2  # 200 of 2000 match: two pages

    found = {(s["data_set"], s["scenario"]) for s in report["scenarios"]}
    expected = {(d, s) for d in ("small", "large") for s in SCENARIOS} | {
        ("floor", s) for s in FLOOR_SCENARIOS
    }
    assert found == expected
    for scenario in report["scenarios"]:
        where = f"{scenario['data_set']} {scenario['scenario']}"
        assert set(scenario) >= SCENARIO_FIELDS, where
        assert scenario["requests"] > 0, where
        assert scenario["errors"] == 0, (where, scenario["error_detail"])
        assert scenario["requests_per_s"] > 0, where
        assert scenario["p99_ms"] >= scenario["p50_ms"] > 0, where
        assert scenario["peak_rss_mb"] > 0, where
        assert scenario["cpu"]["server_cpu_s"] > 0, where
        assert scenario["cpu"]["other_cpu_share"] >= 0, where
        if scenario["tool"] == "h2load":
            assert scenario["answer_checked"], where
            # Every answer carried the whole message (a gRPC error would carry none).
            assert scenario["bytes_per_answer"] >= scenario["answer_bytes"] + 5, where

    ratios = report["ratios"]
    assert all(value is not None and value > 0 for value in ratios.values()), ratios
    for key in (
        "get-grpc-large-vs-floor",
        "get-rest-large-vs-floor",
        "list-first-grpc-large-vs-small",
        "list-deep-vs-first-rest-large",
        "create-grpc-large-vs-floor",
    ):
        assert key in ratios
    for workload in LOG_WORKLOADS:
        assert ratios[f"request-log-{workload}-on-vs-off"] > 0

    log = report["request_log"]
    assert log["workloads"] == LOG_WORKLOADS and log["repeats"] == 1
    assert {(r["scenario"], r["request_log"]) for r in log["runs"]} == {
        (w, mode) for w in LOG_WORKLOADS for mode in ("on", "off")
    }
    for run in log["runs"]:
        assert run["errors"] == 0, (run["scenario"], run["request_log"], run["error_detail"])
        assert run["requests"] > 0 and run["p99_ms"] >= run["p50_ms"] > 0
    assert [row["workload"] for row in log["summary"]] == LOG_WORKLOADS
    for row in log["summary"]:
        assert row["ratio"] > 0 and len(row["ratios"]) == 1
        assert row["on_requests_per_s"] > 0 and row["off_requests_per_s"] > 0
        assert row["met"] == (row["ratio"] > 0.95)
    servers = log["servers"]
    assert servers["on"]["log_level"] == "info" and servers["off"]["log_level"] == "warning"
    on_requests = sum(r["requests"] for r in log["runs"] if r["request_log"] == "on")
    assert servers["on"]["request_log_lines"] >= on_requests
    assert servers["off"]["request_log_lines"] == 0
    assert all(s["server_exit"] == 0 and s["server_log_problems"] == [] for s in servers.values())

    targets = report["targets"]
    # 20 of reads and creates (issue 19), 2: the engine on both databases, 4: against an agent
    assert len(targets) == 20 + len(LOG_WORKLOADS) + 2 + 4
    assert all({"target", "value", "threshold", "unit", "met"} <= set(t) for t in targets)
    assert targets[-1]["target"] == "every request succeeded" and targets[-1]["met"]

    for name, durability in report["durability"].items():
        # Every acknowledged create is in the database (two probes at least).
        assert durability["ok"], (name, durability)
        assert durability["missing"] == 0
        assert durability["stored"] >= durability["acknowledged"] >= 2

    markdown = (output / "latest.md").read_text()
    assert "| get-grpc | floor |" in markdown
    assert "no acknowledged create lost" in markdown
    assert "run engine ≥ 500 results/s (SQLite, 10 evaluations x 2)" in markdown
    assert "Request log cost:" in markdown and "| get-rest |" in markdown
    # The work folder (data sets, logs) is gone.
    assert not any((tmp_path / "work").iterdir())


def test_direct_load_writes_what_the_storage_writes(tmp_path: Path) -> None:
    """bench/data.py's fast SQLite loader and Storage.import_bundle store the same rows,
    derived fields included (with a shorter last evaluation)."""
    data_set = data.DataSet("projects/p/locations/l/apps/a", results=250, per_evaluation=100)
    data.load_direct(tmp_path / "direct.db", data_set)
    data.load_via_storage(f"sqlite:///{tmp_path / 'storage.db'}", data_set)
    assert data.stored(f"sqlite:///{tmp_path / 'direct.db'}", data_set)

    queries = [
        "SELECT * FROM evaluations ORDER BY name",
        # update_time: the storage stamps the moment of the write, the loader the create time.
        "SELECT name, evaluation, app, display_name, create_time, evaluation_run, "
        "execution_state, evaluation_status, app_version, initiated_by, golden_run_method, data "
        "FROM evaluation_results ORDER BY name",
    ]
    for query in queries:
        with (
            contextlib.closing(sqlite3.connect(tmp_path / "direct.db")) as direct,
            contextlib.closing(sqlite3.connect(tmp_path / "storage.db")) as stored,
        ):
            direct_rows = direct.execute(query).fetchall()
            stored_rows = stored.execute(query).fetchall()
        assert direct_rows == stored_rows
    assert len(direct_rows) == 250
    assert data_set.matching(3) == 25
