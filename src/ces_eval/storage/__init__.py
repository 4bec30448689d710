"""Storage backends behind one Protocol; :func:`from_url` picks one from a database URL.

The package, from the contract down: :mod:`.base` (the ``Storage`` Protocol and its query
types), :mod:`.errors` (``StorageError`` and its outcomes), :mod:`.derived` (the evaluation
fields computed from its results); ``_scripted`` (every data method, once, as "run this
script"), ``_scripts`` (the transaction scripts: sans-IO generators of statements),
``_dialect`` (their SQL text per engine, built once) and ``_tables`` (rows to messages and
back); then the backends, :mod:`.sqlite` and :mod:`.postgresql`, which supply connections,
threads, locks and error mapping, and ``migrations/`` per engine.
"""

from __future__ import annotations

from pathlib import Path

from ces_eval.storage.base import Storage
from ces_eval.storage.errors import StorageError
from ces_eval.storage.sqlite import SqliteStorage

__all__ = ["Storage", "StorageError", "from_url"]

_SQLITE = "sqlite:///"
_POSTGRESQL = ("postgresql://", "postgres://")


def from_url(url: str, *, shared: bool = False) -> Storage:
    """``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (SQLAlchemy's form), or
    a libpq URL ``postgresql://user:password@host:port/database`` (shared by replicas).

    ``shared``: open a SQLite file as one worker process of a ``serve --workers`` group (whose
    supervisor holds the file's lock); PostgreSQL is always shared."""
    if url.startswith(_SQLITE):
        return SqliteStorage(Path(url[len(_SQLITE) :]), shared=shared)
    if url.startswith(_POSTGRESQL):
        # Imported here: the SQLite default does not need the PostgreSQL driver loaded.
        from ces_eval.storage.postgresql import PostgresStorage  # noqa: PLC0415

        return PostgresStorage(url)
    raise ValueError(
        f"unsupported database URL {url!r}; use sqlite:///path/to/file.db or "
        "postgresql://user@host:port/database"
    )
