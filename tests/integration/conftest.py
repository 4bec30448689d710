"""Fixtures that run the real server as a subprocess on a temporary SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer, start_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path / "ces-eval.db")
    try:
        yield running
    finally:
        running.kill()
