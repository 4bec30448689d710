"""Bearer tokens for the tests of ``serve --auth-tokens`` (fixtures, not secrets)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ces_eval.testing.server import RunningServer, start_server

__all__ = ["ADMIN", "ALICE", "BOB", "READER", "guarded_server", "write_token_file"]

ALICE = "token-for-alice-0001"
BOB = "token-for-bob-000001"
READER = "token-for-reader-001"
ADMIN = "token-for-admin-0001"


def write_token_file(path: Path) -> Path:
    """The token file the integration tests serve with (JSON, mode 600)."""
    document = {
        "tokens": [
            {"name": "alice", "token": ALICE, "projects": ["proj-a"]},
            {"name": "bob", "token": BOB, "projects": ["proj-b"], "access": "read-write"},
            {"name": "reader", "token": READER, "projects": ["proj-a"], "access": "read-only"},
            {
                "name": "admin",
                "token_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(),
                "projects": ["*"],
            },
        ]
    }
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)
    return path


@contextmanager
def guarded_server(folder: Path) -> Iterator[RunningServer]:
    """A real server in ``folder`` with ``--auth-tokens`` and the tokens above."""
    tokens = write_token_file(folder / "tokens.json")
    running = start_server(folder / "ces-eval.db", "--auth-tokens", str(tokens))
    try:
        yield running
    finally:
        running.kill()
