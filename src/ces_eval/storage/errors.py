"""What a storage call raises: one :class:`StorageError` base, one subclass per outcome.

The core translates each into an API error (a conflict, a missing resource, a failed
precondition, a retryable UNAVAILABLE); catching :class:`StorageError` catches every outcome a
backend reports on purpose, never a programming error. The backends map their drivers'
exceptions (``sqlite3``, ``psycopg``) onto these and let nothing driver-specific escape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ces_eval.filtering import FilterError

__all__ = [
    "Conflict",
    "EtagMismatch",
    "InUse",
    "InvalidFilter",
    "Missing",
    "StorageError",
    "TooLarge",
    "Unavailable",
]


class StorageError(Exception):
    """Base of every outcome a storage call reports on purpose."""


class Conflict(StorageError):
    """A uniqueness constraint failed: ``field`` is ``name`` or ``display_name``."""

    def __init__(self, field: str, existing: str) -> None:
        super().__init__(f"{field} conflicts with {existing}")
        self.field = field
        self.existing = existing


class _About(StorageError):
    """An outcome about one resource, ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Missing(_About):
    """The named resource (or the parent a write needs) does not exist."""


class InvalidFilter(StorageError):
    """A filter names fields or values the backend cannot apply; ``which`` is ``filter`` or
    ``run_filter`` (the ListQuery attribute), ``error`` says where."""

    def __init__(self, which: str, error: FilterError) -> None:
        super().__init__(str(error))
        self.which = which
        self.error = error


class EtagMismatch(_About):
    """A conditional write found another etag than the caller's."""


class TooLarge(StorageError):
    """A result write would make its evaluation, with the fields derived from its results,
    ``size`` bytes as served: more than the write allowed, and more than before."""

    def __init__(self, name: str, size: int) -> None:
        super().__init__(f"{name} would be {size} bytes")
        self.name = name
        self.size = size


class InUse(StorageError):
    """The database belongs to another process that does not share it (``open`` refuses)."""


class Unavailable(StorageError):
    """The database cannot serve the call now (unreachable, locked, out of space, its files
    removed or replaced); nothing of the call was committed to the database (a SQLite write
    refused after its commit went into files that are no longer the database's), and retrying
    later may succeed."""
