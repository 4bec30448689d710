"""The example GitHub Actions workflow (examples/github-actions/ces-eval.yml) does what it says:
its steps that call ``ces-eval`` (a line of their ``run:`` starting with ``ces-eval``) run here as
they stand, in bash as GitHub runs them (``-eo pipefail``), from the repository's root with the
workflow's ``env:`` and the variables GitHub sets (GITHUB_ACTIONS, GITHUB_STEP_SUMMARY). Only the
agent differs: the team's agent is replaced by the test agent (tests/support/agent.py, a weather
agent whose answers the seeded order goldens fail: the gate fails, exit status 1) or by the
example agent the workflow starts (examples/agent/agent.py on a free port: the gate holds, 0).
Either way the JUnit, JSON and HTML reports the upload step takes are there, and GitHub's
outputs are written."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import contract
from tests.support.agent import Agent

WORKFLOW = contract.ROOT / "examples" / "github-actions" / "ces-eval.yml"
CALLS_CES_EVAL = re.compile(r"^\s*ces-eval\s", re.MULTILINE)
WAIT = 300.0  # seconds: a bound on one step (a server's start, a run), never a measurement
pytestmark = pytest.mark.external  # bash and sh run the workflow's steps


def _workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return loaded


def _steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _workflow()["jobs"]["evaluations"]["steps"]
    return steps


def _ces_eval_steps() -> list[str]:
    return [step["run"] for step in _steps() if CALLS_CES_EVAL.search(step.get("run", ""))]


@pytest.fixture
def renderer() -> None:
    """The workflow writes the HTML report: ``ces-eval run --html`` needs ces_eval.report.html."""
    pytest.importorskip("ces_eval.report.html", reason="no HTML report renderer in this tree")


def _run_workflow(agent_url: str, folder: Path) -> tuple[int, str]:
    """Run the workflow's ces-eval steps as GitHub would, the agent at ``agent_url`` and the
    reports under ``folder``; the last status (bash stops at a failing step, as GitHub does)
    and what the steps printed on stdout."""
    env = {
        **os.environ,
        **{key: str(value) for key, value in _workflow()["env"].items()},
        "AGENT_URL": agent_url,
        "REPORTS": str(folder / "reports"),
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(folder / "summary.md"),
        # ces-eval and python as `pip install ces-eval` puts them on PATH.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    bash = shutil.which("bash")
    assert bash is not None, "GitHub's runners run steps in bash"
    status, printed = 0, list[str]()
    for script in _ces_eval_steps():
        done = subprocess.run(
            [bash, "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=contract.ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        status, printed = done.returncode, [*printed, done.stdout]
        assert "Traceback" not in done.stderr, done.stderr
        if status != 0:
            break
    return status, "".join(printed)


def _suite(folder: Path) -> dict[str, str]:
    """The JUnit file's one testsuite's counts."""
    root = ET.parse(folder / "reports" / "junit.xml").getroot()  # noqa: S314 - our own file
    [suite] = root.iter("testsuite")
    return {key: suite.attrib[key] for key in ("tests", "failures", "errors")}


def test_the_workflow_installs_runs_and_uploads_the_reports_even_when_the_gate_fails() -> None:
    triggers = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8").replace("\non:", "\n'on':"))
    assert set(triggers["on"]) == {"push", "pull_request"}  # YAML 1.1 reads a bare `on` as true
    steps = _steps()
    assert any(step.get("run") == "pip install ces-eval" for step in steps)
    assert len(_ces_eval_steps()) == 1
    [upload] = [step for step in steps if step.get("uses", "").startswith("actions/upload-")]
    assert upload["uses"] == "actions/upload-artifact@v4"
    assert upload["if"] == "always()"  # the reports of a failing gate are the ones wanted
    assert upload["with"]["path"] == "${{ env.REPORTS }}"
    [run] = _ces_eval_steps()
    for report in ("junit.xml", "report.html"):
        assert f"$REPORTS/{report}" in run


@pytest.mark.usefixtures("renderer")
def test_the_workflow_fails_the_build_on_an_agent_that_fails_the_goldens(
    agent: Agent, tmp_path: Path
) -> None:
    before = len(agent.requests)
    status, printed = _run_workflow(agent.url + "/agent", tmp_path)
    assert status == 1, printed
    assert _suite(tmp_path) == {"tests": "2", "failures": "2", "errors": "0"}
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert report["gate"]["held"] is False
    assert report["summary"]["results"]["failed"] == 2
    page = (tmp_path / "reports" / "report.html").read_text()
    assert "Order status" in page and "Refund status" in page
    # The run played against the agent the workflow pointed the app at.
    app = _workflow()["env"]["APP"]
    assert any(request["session"].startswith(app) for request in agent.requests[before:])
    # GitHub's outputs: one annotation per failing evaluation, and the step summary.
    assert len([line for line in printed.splitlines() if line.startswith("::error ")]) == 2
    assert "Order status" in (tmp_path / "summary.md").read_text()


@pytest.fixture
def example_agent(tmp_path: Path) -> Iterator[str]:
    """examples/agent/agent.py, as the workflow starts it, on a free port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    example = contract.ROOT / "examples" / "agent" / "agent.py"
    process = subprocess.Popen(
        [sys.executable, str(example), str(port)], cwd=tmp_path, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # until it listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.usefixtures("renderer")
def test_the_workflow_passes_with_the_example_agent(example_agent: str, tmp_path: Path) -> None:
    status, printed = _run_workflow(example_agent, tmp_path)
    assert status == 0, printed
    assert _suite(tmp_path) == {"tests": "2", "failures": "0", "errors": "0"}
    assert json.loads((tmp_path / "reports" / "report.json").read_text())["gate"]["held"] is True
    assert (tmp_path / "reports" / "report.html").is_file()
    assert not [line for line in printed.splitlines() if line.startswith("::error ")]
