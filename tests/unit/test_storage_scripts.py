"""The storage's structure: scripts written once (sans-IO), one error base, no core imports.

The scripts of src/ces_eval/storage/_scripts.py are driven here by a fake engine that records
the statements and answers them, with no database: the same script issues the same statements
on both dialects (only their text differs), and its outcomes follow from the rows it is given.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest

import ces_eval.storage
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import _dialect, _scripts, base, errors
from ces_eval.storage._scripted import ScriptedStorage
from ces_eval.storage._scripts import Rows, Statement, Taken
from ces_eval.storage.postgresql import PostgresStorage
from ces_eval.storage.sqlite import SqliteStorage
from tests.support.imports import imports_of

APP = "projects/p/locations/l/apps/a"
NAME = f"{APP}/evaluations/e1"
DIALECTS = [_dialect.SQLITE, _dialect.POSTGRESQL]


class Engine:
    """Answers statements from ``replies`` (SQL text -> Rows; unknown text: no rows, one
    changed) and records what it was asked."""

    def __init__(self, replies: dict[str, Rows] | None = None) -> None:
        self.replies = replies or {}
        self.asked: list[Statement] = []

    def __call__(self, statement: Statement) -> Rows:
        self.asked.append(statement)
        return self.replies.get(statement.sql, Rows([], 1))


def _evaluation(etag: str = "e0") -> evaluation_pb2.Evaluation:
    return evaluation_pb2.Evaluation(name=NAME, display_name="One", etag=etag)


def _result(rid: str) -> evaluation_pb2.EvaluationResult:
    return evaluation_pb2.EvaluationResult(name=f"{NAME}/results/{rid}", display_name=rid)


def _stored(sql: _dialect.Sql) -> dict[str, Rows]:
    """The replies of an evaluation that exists, with an empty tally and no results."""
    return {
        sql.evaluation_lock: Rows([("e0",)], -1),
        sql.evaluation_stored: Rows([("{}", 10, 0, "e0")], -1),
    }


@pytest.mark.parametrize("sql", DIALECTS, ids=lambda sql: sql.dialect.name)
def test_a_result_write_is_the_same_statements_on_each_dialect(sql: _dialect.Sql) -> None:
    engine = Engine(_stored(sql))
    _scripts.drive(_scripts.insert_result(sql, _result("r1"), "p1", None), engine)
    names = {text: name for name, text in vars(sql).items() if isinstance(text, str)}
    assert [names.get(statement.sql) for statement in engine.asked] == [
        "evaluation_lock",
        "result_insert",
        "evaluation_stored",
        "runs_of",
        "last_completed_of",
        "evaluation_derive",
    ]
    assert engine.asked[1].unique == (f"{NAME}/results/r1", "r1")
    derived, etag, tally, evaluation = engine.asked[-1].params
    assert (etag, evaluation) == ("p1", NAME)
    assert isinstance(derived, bytes) and isinstance(tally, str)


@pytest.mark.parametrize("sql", DIALECTS, ids=lambda sql: sql.dialect.name)
def test_a_replace_that_changed_nothing_tells_mismatch_from_missing(sql: _dialect.Sql) -> None:
    unchanged = Rows([], 0)
    exists = Engine({sql.evaluation_update: unchanged, sql.evaluation_exists: Rows([(1,)], -1)})
    with pytest.raises(errors.EtagMismatch):
        _scripts.drive(_scripts.replace_evaluation(sql, _evaluation(), "stale"), exists)
    gone = Engine({sql.evaluation_update: unchanged})
    with pytest.raises(errors.Missing):
        _scripts.drive(_scripts.replace_evaluation(sql, _evaluation(), "stale"), gone)
    done = Engine()
    assert _scripts.drive(_scripts.replace_evaluation(sql, _evaluation(), "e0"), done) is None
    assert len(done.asked) == 1  # one conditional UPDATE when the etag matches


def test_a_growing_evaluation_is_refused_before_its_derived_fields_are_written() -> None:
    sql = _dialect.SQLITE
    engine = Engine(_stored(sql))
    with pytest.raises(errors.TooLarge):
        _scripts.drive(_scripts.insert_result(sql, _result("r1"), "p1", max_bytes=10), engine)
    assert sql.evaluation_derive not in [statement.sql for statement in engine.asked]


def test_the_async_driver_runs_the_same_script() -> None:
    sql = _dialect.POSTGRESQL
    engine = Engine({sql.evaluation_get: Rows([(b"", b"", "e7")], -1)})

    async def execute(statement: Statement) -> Rows:
        return engine(statement)

    point = _scripts.point(Statement(sql.evaluation_get, (NAME,)), _scripts.evaluation_bytes_of)
    found = asyncio.run(_scripts.drive_async(point, execute))
    assert found == evaluation_pb2.Evaluation(etag="e7").SerializeToString()
    assert engine.asked == [Statement(sql.evaluation_get, (NAME,))]


def test_taken_is_what_a_unique_statement_becomes() -> None:
    taken = Taken("n", "d", on_display_name=True)
    assert (taken.name, taken.display_name, taken.on_display_name) == ("n", "d", True)
    assert not issubclass(Taken, errors.StorageError)  # never reaches the core


def test_every_storage_error_has_one_base_and_keeps_its_name() -> None:
    outcomes = [getattr(errors, name) for name in errors.__all__ if name != "StorageError"]
    assert len(outcomes) == 7
    for outcome in outcomes:
        assert issubclass(outcome, errors.StorageError), outcome
        assert getattr(base, outcome.__name__) is outcome  # base re-exports the same class
    assert base.StorageError is errors.StorageError


def test_storage_imports_nothing_of_the_core() -> None:
    folder = Path(inspect.getfile(ces_eval.storage)).parent
    for path in folder.glob("*.py"):
        core = {name for name in imports_of(path) if name.startswith("ces_eval.core")}
        assert not core, f"{path.name} imports {core}"


def test_the_backends_hold_no_transaction_script() -> None:
    """Every Storage data method is written once (ScriptedStorage); the backends add only
    plumbing: they define none of those methods and hold no SQL of a resource table."""
    plumbing = {"open", "close", "secret", "shared", "ping", "version"}
    methods = {name for name in vars(base.Storage) if not name.startswith("_")} - plumbing
    assert len(methods) >= 24  # evaluations, results, operations, reset
    for backend in (SqliteStorage, PostgresStorage):
        assert not methods & set(vars(backend)), backend
        assert all(name in vars(ScriptedStorage) for name in methods)
    folder = Path(inspect.getfile(ces_eval.storage)).parent
    for backend_file in ("sqlite.py", "postgresql.py"):
        text = (folder / backend_file).read_text(encoding="utf-8")
        for table in ("FROM evaluations", "INTO evaluation_results", "UPDATE operations"):
            assert table not in text, (backend_file, table)
