"""What people read of results, in the real browser (Chromium over Playwright): the HTML report
that ``ces-eval run --html`` writes of a scripted run of the real server, opened from its file
with every request outside the file refused, and the web view's result pages of the same run.
Both show a result as the conversation it was, the difference marked, an ERROR with its reason,
and nothing overflows at a phone's width (375 px). Screenshots go to
build/test-artifacts/report/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ces_eval.surfaces.web_ui import CONTENT_SECURITY_POLICY
from ces_eval.testing import Emulator
from ces_eval.testing.server import start_server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, ConsoleMessage, Page, Route

    from ces_eval.testing.server import RunningServer

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts" / "report"
APP = "projects/report/locations/us-central1/apps/shop"
TOOL = f"{APP}/tools/lookup-order"
PHONE = {"width": 375, "height": 800}
WIDE = {"width": 1100, "height": 800}


def _golden(display_name: str, tags: list[str]) -> dict[str, Any]:
    answer = {"role": "agent", "chunks": [{"text": "Your order 42 ships on Monday."}]}
    return {
        "displayName": display_name,
        "tags": tags,
        "golden": {
            "turns": [
                {
                    "steps": [
                        {"userInput": {"text": "Where is order 42?"}},
                        {"expectation": {"toolCall": {"tool": TOOL, "args": {"order": 42}}}},
                        {"expectation": {"agentResponse": answer}},
                    ]
                },
                {"steps": [{"userInput": {"text": "Thanks, bye"}}]},
            ]
        },
    }


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, dict[str, Any], Path]]:
    """A server holding one run of four evaluations: one passes, one answers otherwise, one
    calls its tool with other arguments, one errs (scripted outcomes, docs/semantics.md); and
    the report file and the HTML report ``ces-eval run`` wrote of its run of them."""
    server = start_server(tmp_path_factory.mktemp("report") / "report.db")
    try:
        admin = Emulator(server.http_base)
        with httpx.Client(base_url=f"{server.http_base}/v1beta", timeout=30) as http:

            def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
                answer = http.request(method, path, json=body)
                assert answer.status_code == 200, answer.text
                return answer.json()

            code = "def lookup_order(order):\n    return order\n"
            tool = {"pythonFunction": {"name": "lookup_order", "pythonCode": code}}
            call("POST", f"/{APP}/tools?toolId=lookup-order", tool)
            evaluations = {
                key: call("POST", f"/{APP}/evaluations", _golden(key, tags))
                for key, tags in (
                    ("Passes", ["smoke"]),
                    ("Answers otherwise", ["orders"]),
                    ("Calls otherwise", ["orders", "smoke"]),
                    ("Errs", []),
                )
            }
            otherwise = {"text": "Your order 42 ships <i>next</i> Friday."}
            rules = (
                ("Answers otherwise", {"outcome": "FAIL", "turn": 0, "expectation": 1,
                                       "observed": otherwise}),
                ("Calls otherwise", {"outcome": "FAIL", "observed": {"toolArgs": {"order": 8}}}),
                ("Errs", {"outcome": "ERROR"}),
            )  # fmt: skip
            for key, rule in rules:
                admin.create_outcome_rule(APP, {"evaluation": evaluations[key]["name"], **rule})
        folder = tmp_path_factory.mktemp("written")
        report, html = folder / "report.json", folder / "report.html"
        done = subprocess.run(
            [sys.executable, "-m", "ces_eval.cli", "run", "--server", server.http_base,
             "--app", APP, "--latency-report", "--json", str(report), "--html", str(html)],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr  # the gate fails: 2 failures and an error
        yield server, json.loads(report.read_text(encoding="utf-8")), html
    finally:
        server.kill()


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _overflow(page: Page) -> int:
    """How far the page is wider than its window (0: nothing overflows horizontally)."""
    width: int = page.evaluate(
        "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        " - window.innerWidth"
    )
    return width


def test_the_report_opens_from_its_file_and_fetches_nothing(
    browser: Browser, seeded: tuple[RunningServer, dict[str, Any], Path]
) -> None:
    _, _, written = seeded
    url = written.as_uri()
    for viewport, name in ((PHONE, "report-375"), (WIDE, "report")):
        page = browser.new_page(viewport=viewport)
        requested: list[str] = []
        refused: list[str] = []

        def route(route: Route, refused: list[str] = refused) -> None:
            if route.request.url == url:
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        page.route("**/*", route)
        page.on("request", lambda request, requested=requested: requested.append(request.url))
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert refused == [] and requested == [url]
        assert _overflow(page) == 0, name
        assert page.locator(".gate strong").inner_text() == "The gate failed"
        failures = page.locator("section.result")
        assert failures.count() == 3  # each failure and the error, rendered
        answered = page.locator("section.result:has-text('Answers otherwise')")
        assert answered.locator(".expected del").inner_text() == "on Monday"
        assert answered.locator(".observed ins").inner_text() == "<i>next</i> Friday"
        called = page.locator("section.result:has-text('Calls otherwise')")
        assert called.locator(".observed ins").inner_text() == '  "order": 8.0'
        errs = page.locator("section.result:has-text('Errs')")
        assert errs.locator(".reason").inner_text() == "RUNTIME_FAILURE"
        rates = page.locator("#rates tbody tr").all_inner_texts()
        assert [row.split("\t")[0] for row in rates] == ["(no tag)", "orders", "smoke"]
        assert page.locator(".latency td >> nth=1").inner_text().startswith(TOOL)
        _shot(page, name)
        page.close()


def _watched(page: Page) -> list[str]:
    """Content-Security-Policy violations Chromium reports on ``page``."""
    found: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            found.append(message.text)

    page.on("console", console)
    return found


def test_the_web_views_result_pages_show_the_chat_the_diff_and_the_error(
    browser: Browser, seeded: tuple[RunningServer, dict[str, Any], Path]
) -> None:
    server, report, _ = seeded
    results = {
        evaluation["displayName"]: result
        for evaluation in report["evaluations"]
        for result in report["runs"][0]["results"]
        if result["name"].startswith(evaluation["name"] + "/")
    }
    for viewport, suffix in ((WIDE, ""), (PHONE, "-375")):
        page = browser.new_page(viewport=viewport)
        violations = _watched(page)
        answer = page.goto(f"{server.http_base}/ui/{results['Answers otherwise']['name']}")
        assert (
            answer is not None
            and answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        )
        assert page.locator("#status").inner_text() == "FAIL"
        users = page.locator(".msg.user").all_inner_texts()
        assert [text.split("\n")[-1] for text in users] == ["Where is order 42?", "Thanks, bye"]
        assert page.locator(".failed .expected del").inner_text() == "on Monday"
        assert page.locator(".failed .observed ins").inner_text() == "<i>next</i> Friday"
        scores = page.locator("ul.scores li").all_inner_texts()
        assert "Semantic similarity 1 (≥ 3 of 4) FAIL" in scores
        assert _overflow(page) == 0
        _shot(page, f"web-result-fail{suffix}")

        page.goto(f"{server.http_base}/ui/{results['Errs']['name']}")
        assert page.locator("#status").inner_text() == "ERROR"
        assert page.locator(".error-box .reason").inner_text() == "RUNTIME_FAILURE"
        assert page.locator(".error-box .message").inner_text().startswith("Scripted error")
        assert "OUTCOME_UNSPECIFIED" not in page.locator("body").inner_text()
        assert _overflow(page) == 0
        _shot(page, f"web-result-error{suffix}")
        assert page.locator("nav.back").inner_text().startswith("Of evaluation Errs, run ")
        page.click("nav.back a >> nth=1")  # back to its run
        assert page.url.endswith(report["runs"][0]["run"]["name"])
        assert violations == []
        page.close()
