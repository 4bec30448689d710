"""Google's official Python client uploads evaluation audio and tests a persona's voice on the
real server, over gRPC and REST (tests/official/media_scenario.py)."""

from __future__ import annotations

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_audio_through_the_official_client(server: RunningServer, transport: str) -> None:
    steps = run_official("media_scenario.py", [server], transport)
    assert set(steps) == {"upload", "not_linear16", "too_large", "voice", "unknown_persona"}
    first, second = (
        server.export_dir / steps["upload"][k].removeprefix("gs://") for k in ("first", "second")
    )
    assert not first.exists() and second.is_file()  # the replaced audio is gone
    assert steps["not_linear16"]["violations"] == ["audio_content"]
    assert steps["too_large"]["reason"] == "AUDIO_TOO_LARGE"
    assert steps["unknown_persona"]["reason"] == "RESOURCE_NOT_FOUND"
