"""Write the SQLite and PostgreSQL migrations of the declared tables that no migration creates yet.

Every generic table is declared once (``ces_eval.storage.tables.Table``, in storage/tables.py or
beside its resource's declaration in the core); this program loads every declaration (the core's
service imports each resource module) and writes, per dialect, one
``src/ces_eval/storage/migrations/<dialect>/NNNN_<table>.sql`` for each table without one
(``ces_eval.storage.schema.pending``). Committed migrations are never rewritten: they are frozen
once released. ``--check`` writes nothing, names what it would write and fails if anything.

``make migrations`` runs it; tests/contract/test_migrations.py runs ``--check``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "src" / "ces_eval" / "storage" / "migrations"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail if stale")
    check = parser.parse_args(argv).check
    # Imported here: loading every declaration loads the whole core.
    import ces_eval.core.service  # noqa: F401, PLC0415 - every resource module, so every table
    from ces_eval.storage import schema  # noqa: PLC0415

    missing = [new for dialect in schema.DIALECTS for new in schema.pending(dialect)]
    for new in missing:
        path = FOLDER / new.dialect / new.file
        if check:
            print(f"missing: {path.relative_to(FOLDER.parents[3])}")
        else:
            path.write_text(new.sql, encoding="utf-8")
            print(f"wrote {path.relative_to(FOLDER.parents[3])}")
    return 1 if check and missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
