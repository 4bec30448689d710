"""``ces-eval run``, the real program as a subprocess, against the real server: one server for
the module with scripted outcomes (a pass, a failure, an error: docs/semantics.md, "Scripted
outcomes"), the throw-away local server it starts itself with ``--seed``, and the server behind
TLS with tokens standing in for hosted CES. Asserted: the exit statuses of each gate case, the
JUnit file (parsed) and its counts, the JSON report and the baseline's classes, the GitHub
outputs, the cancellation on Ctrl-C, and one line for each run that could not be done."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support.tls_front import tls_front
from tests.support.tokens import ALICE, write_token_file

APP = "projects/gate/locations/l/apps/orders"
HELD = "projects/gate/locations/l/apps/held"
TOOL = "lookup-order"


def _golden(display_name: str, order: int, tags: list[str]) -> dict[str, Any]:
    return {
        "displayName": display_name,
        "tags": tags,
        "golden": {
            "turns": [
                {
                    "steps": [
                        {"userInput": {"text": f"Where is order {order}?"}},
                        {"expectation": {"toolCall": {"tool": TOOL, "args": {"order": order}}}},
                    ]
                }
            ]
        },
    }


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = http.post(f"/v1beta/{path}", json=body)
    assert answer.status_code == 200, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _seed_scripted(http: httpx.Client, admin: Emulator, app: str) -> None:
    """Three evaluations of ``app``: one passes, one fails (the tool called with order 8), one
    errors."""
    for evaluation_id, golden in (
        ("status", _golden("Status of 42", 42, ["smoke"])),
        ("refund", _golden("Refund of 7", 7, ["refunds"])),
        ("cancel", _golden("Cancel 9", 9, ["flaky"])),
    ):
        _post(http, f"{app}/evaluations?evaluationId={evaluation_id}", golden)
    admin.create_outcome_rule(
        app,
        {"evaluation": "refund", "outcome": "FAIL", "observed": {"toolArgs": {"order": 8}}},
    )
    admin.create_outcome_rule(app, {"evaluation": "cancel", "outcome": "ERROR"})


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("gate") / "ces-eval.db")
    try:
        with httpx.Client(base_url=server.http_base, timeout=30) as http:
            _seed_scripted(http, Emulator(server.http_base), APP)
            _post(http, f"{HELD}/evaluations?evaluationId=slow", _golden("Slow", 1, []))
        Emulator(server.http_base).create_outcome_rule(
            HELD, {"evaluation": "slow", "hold": "QUEUED"}
        )
        yield server
    finally:
        server.kill()


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment without what would change the command's outputs (a test
    run inside GitHub Actions, a token of the caller's)."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GITHUB_") and key not in ("CES_EVAL_TOKEN", "SSL_CERT_FILE")
    }
    return {**kept, **extra}


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ces_eval.cli", "run", *args]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(*args),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_environment(**env),
    )


def _junit(path: Path) -> ET.Element:
    return ET.parse(path).getroot()  # noqa: S314 - the file the command under test wrote


def _counts(element: ET.Element) -> tuple[str | None, ...]:
    return tuple(element.get(key) for key in ("tests", "failures", "errors"))


@pytest.fixture(scope="module")
def first(scripted: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every evaluation of APP, twice: its exit status, output and the files it wrote."""
    folder = tmp_path_factory.mktemp("first")
    done = _run(
        "--server",
        scripted.http_base,
        "--app",
        APP,
        "--run-count",
        "2",
        "--junit",
        str(folder / "junit.xml"),
        "--json",
        str(folder / "report.json"),
        "--html",
        str(folder / "report.html"),
        COLUMNS="200",
    )
    return {
        "html": (folder / "report.html").read_text(encoding="utf-8"),
        "done": done,
        "junit": _junit(folder / "junit.xml"),
        "report": json.loads((folder / "report.json").read_text()),
        "folder": folder,
    }


def test_failures_and_errors_fail_the_gate_and_junit_counts_them(first: dict[str, Any]) -> None:
    done = first["done"]
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""  # not a terminal: no progress line, and nothing went wrong
    root = first["junit"]
    assert _counts(root) == ("6", "2", "2")
    (suite,) = root.findall("testsuite")
    assert _counts(suite) == ("6", "2", "2")
    assert suite.get("timestamp") and suite.get("time")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert sorted(cases) == sorted(
        f"{name} ({k} of 2)" for name in ("Status of 42", "Refund of 7", "Cancel 9") for k in (1, 2)
    )
    failure = cases["Refund of 7 (2 of 2)"].find("failure")
    assert failure is not None
    assert failure.get("message") == (
        'turn 1, expectation 1 (Tool call): expected lookup-order({"order": 7.0}), '
        'observed lookup-order({"order": 8.0})'
    )
    error = cases["Cancel 9 (1 of 2)"].find("error")
    assert error is not None and error.get("type") == "RUNTIME_FAILURE"
    assert "Scripted error (outcome rule" in (error.text or "")
    assert all(case.get("classname") == "orders" for case in cases.values())
    lines = done.stdout.splitlines()
    assert lines[0].endswith("COMPLETED: 6 results, 2 passed, 2 failed, 2 errors")
    assert any(
        line.split()[:7] == ["Refund", "of", "7", "(1", "of", "2)", "FAIL"] for line in lines
    )
    assert lines[-1] == "gate fails (--fail-on any): 2 failing evaluations"


def test_the_html_report_holds_each_failure_and_nothing_from_elsewhere(
    first: dict[str, Any],
) -> None:
    """The page itself is ces_eval.report's (its tests open it in Chromium with every other
    request refused); here, that the command wrote it from this run."""
    html = first["html"]
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")
    for shown in (
        "Refund of 7",
        "Cancel 9",
        "Status of 42",
        "Scripted error",
        "2 failing evaluations",
    ):
        assert shown in html
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html) is None


def test_the_json_report(first: dict[str, Any], scripted: RunningServer) -> None:
    report = first["report"]
    assert (report["kind"], report["version"], report["server"]) == (
        "ces-eval#report",
        1,
        scripted.http_base,
    )
    assert report["app"]["name"] == APP
    assert report["options"]["runCount"] == 2
    assert len(report["options"]["evaluations"]) == 3
    (run,) = report["runs"]
    assert run["run"]["state"] == "COMPLETED" and len(run["results"]) == 6
    assert report["summary"]["results"] == {"total": 6, "passed": 2, "failed": 2, "errors": 2}
    statuses = {entry["displayName"]: entry["status"] for entry in report["summary"]["evaluations"]}
    assert statuses == {"Status of 42": "PASSED", "Refund of 7": "FAILED", "Cancel 9": "ERROR"}
    assert report["gate"] == {
        "failOn": "any",
        "maxFailures": None,
        "failing": 2,
        "held": False,
        "reason": "2 failing evaluations",
    }


@pytest.mark.parametrize(
    ("selection", "status", "last"),
    [
        (["--tag", "smoke"], 0, "gate holds (--fail-on any): 0 failing evaluations"),
        (
            ["--display-name-prefix", "Re", "--evaluation", "refund", "status"],
            1,
            "gate fails (--fail-on any): 1 failing evaluation",
        ),
        (
            ["--max-failures", "2"],
            0,
            "gate holds (--fail-on any): 2 failing evaluations, within the budget of 2",
        ),
        (
            ["--max-failures", "1"],
            1,
            "gate fails (--fail-on any): 2 failing evaluations, over the budget of 1",
        ),
    ],
)
def test_selection_and_budget(
    scripted: RunningServer, selection: list[str], status: int, last: str
) -> None:
    done = _run("--server", scripted.http_base, "--app", APP, *selection)
    assert done.returncode == status, done.stderr
    assert done.stdout.splitlines()[-1] == last


def _baseline(first: dict[str, Any], path: Path, **statuses: str) -> Path:
    """The first run's report with the statuses of some evaluations (by ID) changed, and an
    evaluation this app no longer has."""
    report = json.loads(json.dumps(first["report"]))
    for entry in report["summary"]["evaluations"]:
        evaluation_id = entry["evaluation"].rsplit("/", 1)[1]
        entry["status"] = statuses.get(evaluation_id, entry["status"])
    report["summary"]["evaluations"].append(
        {"evaluation": f"{APP}/evaluations/retired", "status": "PASSED"}
    )
    path.write_text(json.dumps(report))
    return path


def test_regressions_against_a_baseline_and_the_github_outputs(
    scripted: RunningServer, first: dict[str, Any], tmp_path: Path
) -> None:
    before = _baseline(first, tmp_path / "before.json", refund="PASSED", status="FAILED")
    summary = tmp_path / "summary.md"
    summary.write_text("# Earlier step\n")
    report = tmp_path / "report.json"
    done = _run(
        "--server",
        scripted.http_base,
        "--app",
        APP,
        "--baseline",
        str(before),
        "--fail-on",
        "regression",
        "--json",
        str(report),
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(summary),
        COLUMNS="200",
    )
    assert done.returncode == 1, done.stderr
    written = json.loads(report.read_text())
    classes = {e["displayName"]: e["baseline"] for e in written["summary"]["evaluations"]}
    assert classes == {
        "Status of 42": "NEWLY_PASSING",
        "Refund of 7": "NEWLY_FAILING",
        "Cancel 9": "STILL_FAILING",
    }
    assert written["baseline"]["file"] == str(before)
    assert written["baseline"]["gone"] == [f"{APP}/evaluations/retired"]
    assert written["gate"]["failing"] == 1 and not written["gate"]["held"]
    commands = sorted(line for line in done.stdout.splitlines() if line.startswith("::"))
    assert len(commands) == 2
    assert commands[0].startswith(
        "::error title=ces-eval%3A Cancel 9 errored::error: RUNTIME_FAILURE: Scripted error"
    )
    assert commands[1] == (
        "::error title=ces-eval%3A Refund of 7 failed::turn 1, expectation 1 (Tool call): "
        'expected lookup-order({"order": 7.0}), observed lookup-order({"order": 8.0})'
    )
    assert "newly failing: Refund of 7" in done.stdout
    markdown = summary.read_text()
    assert markdown.startswith("# Earlier step\n## ces-eval run: " + APP)  # appended
    assert "| 3 | 1 | 1 | 1 |" in markdown
    assert "**Gate ❌ fails** (`--fail-on regression`): 1 newly failing evaluation" in markdown
    assert "| NEWLY_FAILING (1) | Refund of 7 |" in markdown
    assert f"| GONE (1) | {APP}/evaluations/retired |" in markdown

    # The same failures, already failing in the baseline: no regression, the gate holds.
    same = _baseline(first, tmp_path / "same.json")
    done = _run(
        "--server",
        scripted.http_base,
        "--app",
        APP,
        "--baseline",
        str(same),
        "--fail-on",
        "regression",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "gate holds (--fail-on regression): 0 newly failing evaluations"
    )
    assert "::" not in done.stdout  # GITHUB_ACTIONS unset: no workflow command


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--fail-on", "regression"], "--fail-on regression compares with a --baseline"),
        (["--evaluation", "nope"], f"--evaluation {APP}/evaluations/nope: no such evaluation"),
        (["--dataset", "missing"], "GET " + APP + "/evaluationDatasets/missing: 404 NOT_FOUND"),
        (["--persona", "other"], "POST " + APP + ":runEvaluation: 404 NOT_FOUND"),
        (
            ["--baseline", "/nonexistent/base.json"],
            "--baseline /nonexistent/base.json: No such file",
        ),
        (["--seed", "seed.json"], "--seed seeds the local server; with --server, seed that server"),
    ],
)
def test_a_run_that_cannot_be_done_is_exit_2_and_one_line(
    scripted: RunningServer, args: list[str], line: str
) -> None:
    done = _run("--server", scripted.http_base, "--app", APP, *args)
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("ces-eval run: ")
    assert line in done.stderr


def test_an_unreachable_server_and_a_foreign_baseline_are_exit_2(
    scripted: RunningServer, tmp_path: Path
) -> None:
    with socket_closed() as url:
        done = _run("--server", url, "--app", APP)
    assert done.returncode == 2
    assert done.stderr.startswith(f"ces-eval run: cannot reach {url}")
    foreign = tmp_path / "junit.xml"
    foreign.write_text("<testsuites/>")
    done = _run("--server", scripted.http_base, "--app", APP, "--baseline", str(foreign))
    assert (done.returncode, done.stderr.count("\n")) == (2, 1)
    assert "not JSON" in done.stderr


@contextlib.contextmanager
def socket_closed() -> Iterator[str]:
    """A URL where nothing listens: a port taken and given back."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


def _runs(server: RunningServer, app: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.http_base}/v1beta/{app}/evaluationRuns", timeout=30)
    assert answer.status_code == 200, answer.text
    runs: list[dict[str, Any]] = answer.json().get("evaluationRuns", [])
    return runs


def _started(server: RunningServer, app: str, known: int) -> dict[str, Any]:
    """The run a command started in ``app`` (which had ``known`` runs before)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = _runs(server, app)
        if len(runs) > known:
            return runs[0]  # newest first
        time.sleep(0.05)
    pytest.fail("ces-eval run started no run")


def test_ctrl_c_cancels_the_run_on_the_server(scripted: RunningServer, tmp_path: Path) -> None:
    known = len(_runs(scripted, HELD))
    process = subprocess.Popen(
        _command("--server", scripted.http_base, "--app", HELD, "--junit", str(tmp_path / "j.xml")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    try:
        run = _started(scripted, HELD, known)
        assert run["state"] == "QUEUED"  # held by the rule: it waits for us
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 2
    assert stderr == f"ces-eval run: interrupted by SIGINT; cancelled {run['name']}\n"
    assert stdout == ""
    assert not (tmp_path / "j.xml").exists()
    answer = httpx.get(f"{scripted.http_base}/v1beta/{run['name']}", timeout=30)
    assert answer.json()["state"] == "CANCELLED"


def test_a_run_cancelled_elsewhere_is_exit_2_with_its_reports(
    scripted: RunningServer, tmp_path: Path
) -> None:
    known = len(_runs(scripted, HELD))
    junit = tmp_path / "junit.xml"
    process = subprocess.Popen(
        _command("--server", scripted.http_base, "--app", HELD, "--junit", str(junit)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    try:
        run = _started(scripted, HELD, known)
        cancelled = httpx.post(f"{scripted.http_base}/v1beta/{run['operation']}:cancel", json={})
        assert cancelled.status_code == 200, cancelled.text
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 2
    assert stderr == "ces-eval run: the run ended CANCELLED\n"
    assert (
        stdout.splitlines()[-1] == "gate fails (--fail-on any): the run ended CANCELLED: no verdict"
    )
    assert _counts(_junit(junit)) == ("1", "0", "1")  # the cancelled repetition, as an error


def test_the_local_server_it_starts_with_a_seed(tmp_path: Path) -> None:
    """The throw-away server reads CES_EVAL_* as serve does (here, a token file) and is sent
    the token as any server is."""
    app = "projects/proj-a/locations/l/apps/shop"

    def evaluation(evaluation_id: str) -> dict[str, Any]:
        return {
            "name": f"{app}/evaluations/{evaluation_id}",
            **_golden(evaluation_id.title(), 1, []),
        }

    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps(
            {"format": "ces-eval.export/v1", "evaluations": [evaluation("one"), evaluation("two")]}
        )
    )
    junit = tmp_path / "junit.xml"
    report = tmp_path / "report.json"
    done = _run(
        *("--app", app, "--seed", str(seed), "--junit", str(junit), "--json", str(report)),
        CES_EVAL_AUTH_TOKENS=str(write_token_file(tmp_path / "tokens.json")),
        CES_EVAL_TOKEN=ALICE,
    )
    assert done.returncode == 0, done.stderr
    assert _counts(_junit(junit)) == ("2", "0", "0")
    written = json.loads(report.read_text())
    assert written["server"].startswith("http://127.0.0.1:")
    assert written["gate"]["held"]
    # The server is gone with the command.
    with pytest.raises(httpx.TransportError):
        httpx.get(written["server"] + "/healthz", timeout=5)

    seed.write_text("{}")
    done = _run("--app", app, "--seed", str(seed))
    assert done.returncode == 2
    assert done.stderr.startswith("ces-eval run: the local server did not start: --seed")
    assert done.stderr.count("\n") == 1


@contextlib.contextmanager
def _guarded(folder: Path) -> Iterator[RunningServer]:
    """A server with ``--auth-tokens`` (tests/support/tokens.py) that answers to ``localhost``,
    the name the TLS front is reached by (its certificate's)."""
    tokens = write_token_file(folder / "tokens.json")
    server = start_server(
        folder / "ces-eval.db", "--auth-tokens", str(tokens), "--allow-host", "localhost"
    )
    try:
        yield server
    finally:
        server.kill()


def test_a_tls_server_with_tokens_standing_in_for_hosted_ces(tmp_path: Path) -> None:
    app = "projects/proj-a/locations/us/apps/orders"
    with _guarded(tmp_path) as server:
        with httpx.Client(
            base_url=server.http_base, timeout=30, headers={"Authorization": f"Bearer {ALICE}"}
        ) as http:
            _seed_scripted(http, Emulator(server.http_base, token=ALICE), app)
        with tls_front(server.http_base, tmp_path) as front:
            trusted = ["--server", front.url, "--app", app, "--ca-file", str(front.authority)]
            junit = tmp_path / "junit.xml"
            done = _run(*trusted, "--junit", str(junit), CES_EVAL_TOKEN=ALICE)
            assert done.returncode == 1, done.stderr
            assert _counts(_junit(junit)) == ("3", "1", "1")
            done = _run(*trusted, "--tag", "smoke", "--token", ALICE)
            assert done.returncode == 0, done.stderr

            done = _run(*trusted)  # no token
            assert done.returncode == 2
            assert (
                "401 UNAUTHENTICATED" in done.stderr and "--token or CES_EVAL_TOKEN" in done.stderr
            )
            done = _run("--server", front.url, "--app", app, CES_EVAL_TOKEN=ALICE)  # untrusted
            assert done.returncode == 2
            assert "CERTIFICATE_VERIFY_FAILED" in done.stderr
            done = _run(
                *trusted,
                "--tag",
                "smoke",
                SSL_CERT_FILE=str(front.authority),
                CES_EVAL_TOKEN=ALICE,
            )
            assert done.returncode == 0, done.stderr


def test_progress_shows_on_a_terminal(scripted: RunningServer) -> None:
    """stderr a terminal (a pseudo-terminal here): the progress line is drawn in place; the
    other tests, with stderr a pipe, find nothing there."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            _command("--server", scripted.http_base, "--app", APP, "--tag", "smoke"),
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            env=_environment(COLUMNS="100"),
        )
    finally:
        os.close(terminal)
    drawn = bytearray()
    with contextlib.suppress(OSError):  # EIO once the command, the last holder, has closed it
        while chunk := os.read(controller, 4096):
            drawn += chunk
    os.close(controller)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0, stdout
    text = drawn.decode()
    assert text.startswith("\r[")
    last = text.rstrip("\r\n").rsplit("\r", 1)[-1]
    assert last.startswith("[##############################] 1/1  passed 1  failed 0  errors 0")
    assert last.rstrip().endswith("COMPLETED")
    assert len(last) == 99  # the line fills the terminal's width less one column
