"""Google's official Python client uploads evaluation audio and tests a persona's voice on the
real server, over gRPC and REST (tests/official/media_scenario.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from ces_eval.testing.server import RunningServer
from tests.support import contract

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_audio_through_the_official_client(server: RunningServer, transport: str) -> None:
    target = server.grpc_target if transport == "grpc" else server.http_base
    completed = subprocess.run(
        [
            str(contract.CLIENT_PYTHON),
            str(contract.ROOT / "tests" / "official" / "media_scenario.py"),
            transport,
            target,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr + server.output()
    steps = {s.pop("step"): s for s in map(json.loads, completed.stdout.splitlines())}
    assert set(steps) == {"upload", "not_linear16", "too_large", "voice", "unknown_persona"}
    first, second = (
        server.export_dir / steps["upload"][k].removeprefix("gs://") for k in ("first", "second")
    )
    assert not first.exists() and second.is_file()  # the replaced audio is gone
    assert steps["not_linear16"]["violations"] == ["audio_content"]
    assert steps["too_large"]["reason"] == "AUDIO_TOO_LARGE"
    assert steps["unknown_persona"]["reason"] == "RESOURCE_NOT_FOUND"
