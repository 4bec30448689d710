"""Another program writing to a server's SQLite file (its own connection), for the tests of
what the server keeps and answers again (hot reads, kept answers)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2


def rename_evaluation(database: Path, name: str, display_name: str) -> None:
    """Rename the stored evaluation ``name`` to ``display_name`` and commit."""
    with contextlib.closing(sqlite3.connect(database)) as other:
        (data,) = other.execute("SELECT data FROM evaluations WHERE name = ?", (name,)).fetchone()
        changed = evaluation_pb2.Evaluation.FromString(data)
        changed.display_name = display_name
        other.execute(
            "UPDATE evaluations SET data = ? WHERE name = ?", (changed.SerializeToString(), name)
        )
        other.commit()


def retag_evaluation(database: Path, name: str, etag: str) -> None:
    """Give the stored evaluation ``name`` the etag ``etag`` (a write of another program, as
    the server sees it) and commit."""
    with contextlib.closing(sqlite3.connect(database)) as other:
        other.execute("UPDATE evaluations SET etag = ? WHERE name = ?", (etag, name))
        other.commit()
