"""The ready line's client wiring works for the mode the server is in (issue 14, item 4).

An open server prints a plaintext channel and anonymous credentials; with ``--auth-tokens``
the wiring carries the token (local channel credentials on loopback, since gRPC sends call
credentials only on a secure or local channel; per-call metadata on a public address). Google's
official client evaluates each printed line (in ``.venv-client``) and creates and lists with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support.official import run_script
from tests.support.tokens import ALICE, write_token_file

_PASSING = ", passing "


def _wirings(running: RunningServer) -> list[dict[str, object]]:
    found = []
    for line in running.output().splitlines():
        transport, _, expression = line.strip().partition(": ")
        if transport not in {"gRPC", "REST"} or not expression.startswith("ces_v1beta."):
            continue
        expression, passing, _ = expression.partition(_PASSING)
        found.append({"transport": transport, "expression": expression, "metadata": bool(passing)})
    return found


@pytest.mark.external  # the official client (.venv-client)
@pytest.mark.parametrize("mode", ["open", "tokens", "tokens on a public address"])
def test_the_printed_wiring_works(tmp_path: Path, mode: str) -> None:
    extra: list[str] = []
    token = ""
    if mode != "open":
        extra = ["--auth-tokens", str(write_token_file(tmp_path / "tokens.json"))]
        token = ALICE
    if mode == "tokens on a public address":
        extra += ["--host", "0.0.0.0"]  # noqa: S104 - the mode under test
    running = start_server(tmp_path / "db.sqlite", *extra)
    try:
        wirings = _wirings(running)
        assert [w["transport"] for w in wirings] == ["gRPC", "REST"], running.output()
        assert [w["metadata"] for w in wirings] == [mode == "tokens on a public address", False]
        if mode != "open":
            assert "<token>" in wirings[0]["expression"] or wirings[0]["metadata"]
            assert "<token>" in str(wirings[1]["expression"])
        reports = run_script(
            "wiring_scenario.py", json.dumps(wirings), token, servers=[running], timeout=120
        )
    finally:
        running.kill()
    assert [r["transport"] for r in reports] == ["gRPC", "REST"]
    for report in reports:
        assert report["created"] in report["listed"]
