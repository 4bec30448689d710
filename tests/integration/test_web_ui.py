"""The web view at /ui in a real browser: Debian's Chromium (tools/chromium.sh) driven by
Playwright, against the real ``ces-eval serve`` holding an app seeded through the API (two
evaluations, a dataset, three runs with one scripted failure). Each page's content is asserted
and screenshotted into build/test-artifacts/web-ui/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ces_eval.testing import Emulator
from ces_eval.testing.server import start_server
from tests.support.tokens import ALICE, guarded_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Page

    from ces_eval.testing.server import RunningServer

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts" / "web-ui"
APP = "projects/web/locations/us-central1/apps/orders"
RUNS = 3


def _chromium() -> str:
    done = subprocess.run(
        [str(REPO / "tools" / "chromium.sh"), "path"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"no Chromium for the browser tests: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only these tests need it

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=_chromium(), headless=True)
        try:
            yield launched
        finally:
            launched.close()


def _golden(display_name: str, order: int) -> dict[str, Any]:
    tool = f"{APP}/tools/lookup-order"
    return {
        "displayName": display_name,
        "golden": {
            "turns": [
                {
                    "steps": [
                        {"userInput": {"text": f"Where is order {order}?"}},
                        {"expectation": {"toolCall": {"tool": tool, "args": {"order": order}}}},
                    ]
                }
            ]
        },
    }


def _seed(server: RunningServer) -> dict[str, Any]:
    """Two evaluations, a dataset of both, and RUNS runs in which the refund fails."""
    admin = Emulator(server.http_base)
    with httpx.Client(base_url=server.http_base, timeout=30) as http:

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = http.post(f"/v1beta/{path}", json=body)
            assert answer.status_code == 200, answer.text
            created: dict[str, Any] = answer.json()
            return created

        status = post(f"{APP}/evaluations", _golden("Status of 42", 42))
        refund = post(f"{APP}/evaluations", _golden("Refund of 7", 7))
        post(
            f"{APP}/evaluationDatasets",
            {"displayName": "Nightly set", "evaluations": [status["name"], refund["name"]]},
        )
        admin.create_outcome_rule(
            APP,
            {
                "evaluation": refund["name"],
                "outcome": "FAIL",
                "observed": {"toolArgs": {"order": 8}},
            },
        )
        runs = []
        for _ in range(RUNS):
            operation = post(
                f"{APP}:runEvaluation", {"evaluations": [status["name"], refund["name"]]}
            )
            runs.append(admin.wait(operation)["response"]["evaluationRun"])
    return {"status": status, "refund": refund, "runs": runs}


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_pages_show_the_seeded_app_from_apps_to_turns(browser: Browser, tmp_path: Path) -> None:
    server = start_server(tmp_path / "ui.db")
    try:
        seeded = _seed(server)
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        page.goto(server.http_base + "/")  # / leads to the web view
        assert page.url == server.http_base + "/ui"
        assert page.locator("main a").all_inner_texts() == [APP]
        _shot(page, "1-apps")

        page.click(f"text={APP}")
        page.wait_for_url(f"**/ui/{APP}")
        evaluations = page.locator("#evaluations tr").all_inner_texts()
        assert [row.split("\t")[0] for row in evaluations[1:]] == ["Refund of 7", "Status of 42"]
        assert "FAIL" in evaluations[1] and "PASS" in evaluations[2]
        assert page.locator("#datasets").inner_text().count("Nightly set") == 1
        runs = page.locator("#runs tr").all_inner_texts()[1:]
        assert len(runs) == RUNS
        assert all("COMPLETED" in row and "2/2" in row and "50%" in row for row in runs), runs
        _shot(page, "2-app")

        page.click("#runs a >> nth=0")
        assert page.locator("#state").inner_text() == "COMPLETED"
        assert page.locator("#pass-rate").inner_text() == "50%"
        outcomes = sorted(
            row.split("\t")[-1] for row in page.locator("#results tr").all_inner_texts()[1:]
        )
        assert outcomes == ["FAIL", "PASS"]
        _shot(page, "3-run")

        page.click("#results tr:has-text('FAIL') a >> nth=0")
        expected = page.locator("pre.expected").inner_text()
        observed = page.locator("pre.observed").inner_text()
        assert '"order": 7' in expected and '"order": 8' in observed
        _shot(page, "4-result")

        page.goto(f"{server.http_base}/ui/{seeded['refund']['name']}")
        chart = page.locator("#pass-rate svg")
        assert chart.count() == 1
        assert "Pass rate over runs" in (chart.text_content() or "")
        assert len(page.locator("#results tr").all_inner_texts()) == RUNS + 1
        _shot(page, "5-evaluation")
        # Each page view is a request line of the web view, with its outcome; the redirect of
        # / too (a plain route's status is recorded as it is sent).
        assert f" ui GET /ui/{APP} - OK 200 " in server.output()
        assert " rest GET / - OK 302 " in server.output()
        assert " CANCELLED " not in server.output()
        if os.environ.get("CES_EVAL_README_SCREENSHOT"):  # the README's picture, when asked
            page.goto(f"{server.http_base}/ui/{APP}")
            page.screenshot(path=str(REPO / "docs" / "web-ui.png"))
    finally:
        server.kill()


def test_the_view_takes_the_apis_tokens_and_projects(browser: Browser, tmp_path: Path) -> None:
    """With --auth-tokens: no token, the 401 page; a token of one project, only its apps, and
    another project's pages refused as the API refuses them."""
    with guarded_server(tmp_path) as server:
        page = browser.new_page()
        answer = page.goto(server.http_base + "/ui")
        assert answer is not None and answer.status == 401
        assert "UNAUTHENTICATED" in page.locator("h1").inner_text()
        answer = page.goto(f"{server.http_base}/ui?access_token={ALICE}")
        assert answer is not None and answer.status == 200
        answer = page.goto(f"{server.http_base}/ui/{APP}?access_token={ALICE}")
        assert answer is not None and answer.status == 403
        assert "PERMISSION_DENIED" in page.locator("h1").inner_text()


def test_the_view_only_reads(tmp_path: Path) -> None:
    server = start_server(tmp_path / "ro.db")
    try:
        answer = httpx.post(server.http_base + "/ui", json={}, timeout=10)
        assert (answer.status_code, answer.headers["allow"]) == (405, "GET")
        missing = httpx.get(server.http_base + "/ui/nothing/here", timeout=10)
        assert missing.status_code == 404 and "NOT_FOUND" in missing.text
    finally:
        server.kill()
