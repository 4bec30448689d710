"""Fixtures that run the real server as a subprocess on a temporary SQLite file, and the real
test agent (tests/support/agent.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support.agent import Agent, running_agent


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
