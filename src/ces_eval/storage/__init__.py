"""Storage backends behind one Protocol; :func:`from_url` picks one from a database URL."""

from __future__ import annotations

from pathlib import Path

from ces_eval.core.derived import derive
from ces_eval.storage.base import Storage
from ces_eval.storage.sqlite import SqliteStorage

__all__ = ["Storage", "from_url"]

_SQLITE = "sqlite:///"


def from_url(url: str) -> Storage:
    """``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (SQLAlchemy's form)."""
    if url.startswith(_SQLITE):
        return SqliteStorage(Path(url[len(_SQLITE) :]), derive=derive)
    raise ValueError(f"unsupported database URL {url!r}; use sqlite:///path/to/file.db")
