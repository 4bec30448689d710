"""Versioned schema migrations: ``migrations/<dialect>/NNNN_name.sql``, applied in order once.

Applied versions are recorded in ``schema_migrations``; a database newer than this code (a
version we do not know) is refused rather than silently used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "migrations", "pending"]

_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The statements of the file, without ``--`` comments (which may contain ``;``)."""
        lines = [line.split("--", 1)[0] for line in self.sql.splitlines()]
        return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migrations(dialect: str) -> list[Migration]:
    folder = resources.files("ces_eval.storage") / "migrations" / dialect
    found = [
        Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if (match := _FILE.fullmatch(entry.name))
    ]
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations must be numbered 1..n without gaps: {versions}")
    return found


def pending(dialect: str, applied: set[int], database: str) -> list[Migration]:
    """The migrations of ``dialect`` not yet in ``applied``, in order; a RuntimeError naming
    ``database`` when it has versions this code does not know (it is newer than us)."""
    known = migrations(dialect)
    unknown = applied - {m.version for m in known}
    if unknown:
        raise RuntimeError(
            f"{database} has schema versions {sorted(unknown)} that this ces-eval does not "
            "know; upgrade ces-eval"
        )
    return [m for m in known if m.version not in applied]
