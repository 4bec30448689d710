"""``ces-eval serve --seed FILE``: an export document imported at start into the apps its names
name, evaluations with their results and runs, IDs kept; read again at the next start, it
changes nothing; a seed that cannot be read or imported stops the start with one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.server import SEED_MAX_BYTES
from ces_eval.testing.server import run_serve, start_server

ORDERS = "projects/seeded/locations/us-central1/apps/orders"
REFUNDS = "projects/seeded/locations/eu/apps/refunds"


def _evaluation(app: str, evaluation_id: str) -> dict[str, Any]:
    return {
        "name": f"{app}/evaluations/{evaluation_id}",
        "displayName": evaluation_id.title(),
        "golden": {"turns": [{"steps": [{"userInput": {"text": "Hi"}}]}]},
    }


def _document() -> dict[str, Any]:
    run = f"{ORDERS}/evaluationRuns/nightly"
    return {
        "format": "ces-eval.export/v1",
        "evaluations": [
            _evaluation(ORDERS, "status"),
            _evaluation(ORDERS, "cancel"),
            _evaluation(REFUNDS, "refund"),
        ],
        "evaluationResults": [
            {
                "name": f"{ORDERS}/evaluations/status/results/r1",
                "evaluationRun": run,
                "executionState": "COMPLETED",
                "evaluationStatus": "PASS",
            }
        ],
        "evaluationRuns": [
            {
                "name": run,
                "state": "COMPLETED",
                "evaluations": [f"{ORDERS}/evaluations/status"],
                "evaluationResults": [f"{ORDERS}/evaluations/status/results/r1"],
            }
        ],
    }


def _stored(http: httpx.Client) -> dict[str, Any]:
    def names(path: str, key: str) -> list[str]:
        answer = http.get(f"/v1beta/{path}")
        assert answer.status_code == 200, answer.text
        return sorted(item["name"].rsplit("/", 1)[1] for item in answer.json().get(key, []))

    return {
        "orders": names(f"{ORDERS}/evaluations", "evaluations"),
        "refunds": names(f"{REFUNDS}/evaluations", "evaluations"),
        "results": names(f"{ORDERS}/evaluations/status/results", "evaluationResults"),
        "runs": names(f"{ORDERS}/evaluationRuns", "evaluationRuns"),
    }


def test_a_seed_is_imported_once_and_read_again_harmlessly(tmp_path: Path) -> None:
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps(_document()))
    expected = {
        "orders": ["cancel", "status"],
        "refunds": ["refund"],
        "results": ["r1"],
        "runs": ["nightly"],
    }
    said_at = {
        1: "3 evaluations, 1 results and 1 runs imported; 0 already present",
        2: "0 evaluations, 0 results and 0 runs imported; 4 already present",
    }
    for start, said in said_at.items():
        served = start_server(tmp_path / "seeded.db", "--seed", str(seed))
        try:
            with httpx.Client(base_url=served.http_base, timeout=30) as http:
                assert _stored(http) == expected, start
                # The apps its names name exist from the seed on, as after any other write.
                for app in (ORDERS, REFUNDS):
                    location = app.rsplit("/apps/", 1)[0]
                    listed = http.get(f"/v1beta/{location}/apps").json()
                    assert [found["name"] for found in listed["apps"]] == [app]
                assert http.get(f"/v1beta/{ORDERS}").json()["displayName"] == "orders"
                if start == 1:  # what the team changed since is kept at the next start
                    changed = http.patch(
                        f"/v1beta/{ORDERS}/evaluations/cancel",
                        params={"updateMask": "displayName"},
                        json={"displayName": "Cancel an order"},
                    )
                    assert changed.status_code == 200, changed.text
                else:
                    kept = http.get(f"/v1beta/{ORDERS}/evaluations/cancel").json()
                    assert kept["displayName"] == "Cancel an order"
            assert served.stop() == 0
        finally:
            served.kill()
        assert said in served.output(), served.output()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "--seed: cannot read"),
        (b"{not json", "--seed: "),
        (
            json.dumps(
                {"format": "ces-eval.export/v1", "evaluations": [{"name": "nowhere"}]}
            ).encode(),
            "--seed: ",
        ),
    ],
    ids=["missing", "not JSON", "no app"],
)
def test_a_seed_that_cannot_be_imported_stops_the_start_in_one_line(
    tmp_path: Path, content: bytes | None, said: str
) -> None:
    seed = tmp_path / "seed.json"
    if content is not None:
        seed.write_bytes(content)
    completed = run_serve(f"sqlite:///{tmp_path / 'x.db'}", "--seed", str(seed))
    assert completed.returncode == 2, completed.stderr
    [line] = [line for line in completed.stderr.splitlines() if line.strip()]
    assert said in line


def _refusal(tmp_path: Path, seed: str) -> str:
    """The one line ``serve --seed SEED`` stops with (status 2, as any unusable seed)."""
    completed = run_serve(f"sqlite:///{tmp_path / 'x.db'}", "--seed", seed)
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    [line] = [line for line in completed.stderr.splitlines() if line.strip()]
    assert not (tmp_path / "x.db").exists()  # refused before the database was opened
    return line


@pytest.mark.parametrize("kind", ["FIFO", "character device", "folder"])
def test_a_seed_that_is_not_a_regular_file_is_refused_without_reading_it(
    tmp_path: Path, kind: str
) -> None:
    """Before: a FIFO hung the start silently (no writer ever came); ``/dev/zero`` was read
    until MemoryError, then "unexpected error". Only a regular file is read: the others are
    refused by what ``fstat`` says of them, opened without blocking."""
    if kind == "FIFO":
        seed = tmp_path / "seed.fifo"
        os.mkfifo(seed)
    elif kind == "folder":
        seed = tmp_path / "seeds"
        seed.mkdir()
    else:
        seed = Path("/dev/zero")
    line = _refusal(tmp_path, str(seed))
    assert line == f"ces-eval: --seed: {seed} is not a regular file ({kind})"


def test_a_seed_larger_than_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    """A file over SEED_MAX_BYTES (README, ``--seed``) is refused before any of it is read:
    here a sparse file, which reading would fill memory with zeros."""
    seed = tmp_path / "huge.json"
    with seed.open("wb") as file:
        file.truncate(SEED_MAX_BYTES + 1)
    line = _refusal(tmp_path, str(seed))
    assert line == (
        f"ces-eval: --seed: {seed} is {SEED_MAX_BYTES + 1} bytes; a seed may hold at most "
        f"{SEED_MAX_BYTES} bytes"
    )
