"""Fixtures that run the real server as a subprocess on a temporary SQLite file, the real
test agent (tests/support/agent.py), and the real browser (Debian's Chromium, tools/chromium.sh,
driven by Playwright) for the web view's pages and the HTML report."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import Agent, running_agent

if TYPE_CHECKING:
    from playwright.sync_api import Browser

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "ces-eval.db")
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    """The test agent, its judge and its simulator, one for the tests of a module."""
    with running_agent() as running:
        yield running


def _chromium() -> str:
    done = subprocess.run(
        [str(REPO / "tools" / "chromium.sh"), "path"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"no Chromium for the browser tests: {done.stderr.strip()}")
    return done.stdout.strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium, headless, one for the tests of a module."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only the browser tests need it

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=_chromium(), headless=True)
        try:
            yield launched
        finally:
            launched.close()
