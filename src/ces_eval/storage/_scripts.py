"""Every transaction script of the storage, written once for both backends.

A script is a sans-IO generator: it yields a :class:`Statement` (SQL text named on the
backend's :class:`~._dialect.Sql`, with its parameters), receives the statement's
:class:`Rows`, and returns the call's value (``Generator[Statement, Rows, T]``). It never
touches a connection, so the same script runs in SQLite's writer thread, inside one SAVEPOINT
of a group commit, driven synchronously (:func:`drive`), and on a psycopg connection, driven
by the event loop (:func:`drive_async`). A backend supplies only what a script must not know:
connections, threads, locks, transactions, retries, migrations' surroundings and the mapping of
its driver's exceptions onto :mod:`.errors`.

Why generators rather than a small synchronous connection protocol with an async adapter:
psycopg's async connection cannot be called from a worker thread without a second event loop,
and SQLite's writer cannot await; a generator is neither, and costs one ``send`` per statement.

A read of one row by primary key is a statement and a decoder (:func:`point`), so a backend
can run it on the fast path it has for those (SQLite answers them on the event loop's thread).

Statements whose failure is a uniqueness conflict carry ``unique`` (the name and display name
written): the driver turns the engine's unique violation into :class:`Taken`, which the
storage (:mod:`._scripted`) answers with :class:`~.errors.Conflict` once the transaction is
rolled back. Everything else a script raises (Missing, EtagMismatch, TooLarge) rolls its
transaction back and reaches the caller as it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

from google.longrunning import operations_pb2

from ces_eval.generated.google.cloud.ces.v1beta import (
    conversation_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import _tables, tables
from ces_eval.storage._migrations import pending
from ces_eval.storage.base import Cursor, Insert, ListQuery, Replace, ResetCounts
from ces_eval.storage.derived import Tally, add_tally, contribution, render_tally
from ces_eval.storage.errors import Conflict, EtagMismatch, Missing

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from google.rpc import status_pb2

    from ces_eval.storage._dialect import Sql
    from ces_eval.storage.base import Change
    from ces_eval.storage.tables import Table

__all__ = ["Rows", "Script", "Statement", "Taken", "drive", "drive_async"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
M = TypeVar("M", bound="Message")
_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Dataset = evaluation_pb2.EvaluationDataset
_COMPLETED = int(_Result.ExecutionState.COMPLETED)
_Run = evaluation_pb2.EvaluationRun
_Scheduled = evaluation_pb2.ScheduledEvaluationRun
_RUN_ENDED = frozenset({_Run.COMPLETED, _Run.ERROR, _Run.CANCELLED})


class Statement(NamedTuple):
    """One statement of a script: its text, its parameters and, when a unique index may
    refuse it, the (name, display name) of the row it writes."""

    sql: str
    params: Sequence[object] = ()
    unique: tuple[str, str] | None = None


class Rows(NamedTuple):
    """What a statement answered: its rows (none for most writes) and the rows it changed
    (``changed``: the driver's rowcount, -1 for a query)."""

    rows: Sequence[tuple[Any, ...]]
    changed: int


Script: TypeAlias = Generator[Statement, Rows, T]


class Taken(Exception):
    """A statement carrying ``unique`` broke a unique index: ``on_display_name`` when it was
    the display name's (within its app or evaluation), else the name's."""

    def __init__(self, name: str, display_name: str, *, on_display_name: bool) -> None:
        super().__init__(name)
        self.name = name
        self.display_name = display_name
        self.on_display_name = on_display_name


def drive(script: Script[T], execute: Callable[[Statement], Rows]) -> T:
    """Run ``script`` to its end with a synchronous ``execute``; an exception of ``execute``
    propagates (the script is abandoned with it)."""
    send = script.send
    try:
        statement = send(None)  # type: ignore[arg-type] # a generator starts with None
        while True:
            statement = send(execute(statement))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return] # StopIteration.value is Any; the script's T


async def drive_async(script: Script[T], execute: Callable[[Statement], Awaitable[Rows]]) -> T:
    """:func:`drive` with an asynchronous ``execute``."""
    send = script.send
    try:
        statement = send(None)  # type: ignore[arg-type] # a generator starts with None
        while True:
            statement = send(await execute(statement))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return] # StopIteration.value is Any; the script's T


def _first(rows: Rows) -> tuple[Any, ...] | None:
    return rows.rows[0] if rows.rows else None


def point(statement: Statement, decode: Callable[[Rows], T]) -> Script[T]:
    """A read of one statement whose rows ``decode`` turns into the answer: the point reads
    by primary key (``evaluation_of`` and the like), which a backend may also run without a
    generator (:meth:`~._scripted.ScriptedStorage._point_query`)."""
    return decode((yield statement))


# -- start-up ----------------------------------------------------------------------------------


def migrate(sql: Sql, dialect: str, database: str, secret: bytes) -> Script[bytes]:
    """Apply the pending migrations of ``dialect`` (refusing a database newer than this code)
    and return the database's page-token secret, storing ``secret`` if it has none."""
    if sql.migration_lock is not None:
        yield Statement(sql.migration_lock)
    yield Statement(sql.migrations_table)
    applied = {int(row[0]) for row in (yield Statement(sql.applied_migrations)).rows}
    for migration in pending(dialect, applied, database):
        for text in migration.statements():
            yield Statement(text)
        yield Statement(sql.record_migration, (migration.version, migration.name))
        _log.info("applied migration %s to %s", migration.name, database)
    yield Statement(sql.secret_insert, (secret,))
    row = _first((yield Statement(sql.secret_get)))
    if row is None:
        raise RuntimeError("meta.page_token_secret vanished during start-up")
    return bytes(row[0])


def ping(sql: Sql) -> Script[None]:
    yield Statement(sql.ping)


def display_name_owner(sql: Sql, name: str, display_name: str) -> Script[str]:
    """The resource holding ``display_name`` in the scope of ``name`` (the app for
    evaluations and the generic tables' resources, the evaluation for results); empty when none
    does any more."""
    table = tables.by_collection(name)
    if table is not None:
        statement = Statement(sql.table(table).display_name, (tables.parent_of(name), display_name))
    elif "/results/" in name:
        statement = Statement(
            sql.result_display_name, (name.rsplit("/results/", 1)[0], display_name)
        )
    else:
        statement = Statement(
            sql.evaluation_display_name, (name.rsplit("/evaluations/", 1)[0], display_name)
        )
    row = _first((yield statement))
    return "" if row is None else str(row[0])


# -- evaluations -------------------------------------------------------------------------------


def _insert_evaluation(sql: Sql, evaluation: _Evaluation) -> Statement:
    return Statement(
        sql.evaluation_insert,
        _tables.evaluation_row(evaluation),
        (evaluation.name, evaluation.display_name),
    )


def insert_evaluation(sql: Sql, evaluation: _Evaluation) -> Script[None]:
    yield _insert_evaluation(sql, evaluation)


def evaluation_bytes_of(rows: Rows) -> bytes | None:
    """The answer of ``sql.evaluation_get``: the evaluation's wire bytes as served."""
    return _tables.evaluation_bytes(*rows.rows[0]) if rows.rows else None


def list_evaluations(sql: Sql, query: ListQuery) -> Script[list[tuple[_Evaluation, Cursor]]]:
    statement, params = sql.list_evaluations(query)
    rows = (yield Statement(statement, params)).rows
    return [
        (_tables.evaluation_from_row(data, derived, etag), Cursor(value, name))
        for data, derived, etag, name, value in rows
    ]


def replace_evaluation(sql: Sql, evaluation: _Evaluation, expected_etag: str) -> Script[None]:
    """One conditional UPDATE; when it changed nothing, whether the evaluation exists tells
    EtagMismatch from Missing."""
    row = _tables.evaluation_row(evaluation)
    answer = yield Statement(
        sql.evaluation_update,
        (*row[2:], evaluation.name, expected_etag),
        (evaluation.name, evaluation.display_name),
    )
    if answer.changed == 1:
        return
    if (yield Statement(sql.evaluation_exists, (evaluation.name,))).rows:
        raise EtagMismatch(evaluation.name)
    raise Missing(evaluation.name)


def _delete_locked(
    lock: str, delete: str, name: str, expected_etag: str | None
) -> Script[tuple[Any, ...]]:
    """Lock the row ``name`` (``lock`` answers its etag first), check the etag, ``delete`` it;
    the row ``lock`` answered."""
    row = _first((yield Statement(lock, (name,))))
    if row is None:
        raise Missing(name)
    if expected_etag and row[0] != expected_etag:
        raise EtagMismatch(name)
    yield Statement(delete, (name,))
    return row


def delete_evaluation(
    sql: Sql, name: str, expected_etag: str | None, dataset_etag: str
) -> Script[None]:
    """Delete an evaluation (its results go with it: ON DELETE CASCADE) and take it out of
    the datasets that list it, which get ``dataset_etag`` (locked after the evaluation: the
    order of :func:`_memberships`)."""
    _, data = yield from _delete_locked(
        sql.evaluation_lock_data, sql.evaluation_delete, name, expected_etag
    )
    statements = sql.table(tables.DATASETS)
    for dataset_name in sorted(_Evaluation.FromString(bytes(data)).evaluation_datasets):
        held = _first((yield Statement(statements.lock_data, (dataset_name,))))
        if held is None:
            continue
        dataset = tables.DATASETS.parse(held[0])
        kept = [e for e in dataset.evaluations if e != name]
        old_etag = dataset.etag
        dataset.ClearField("evaluations")
        dataset.evaluations.extend(kept)
        dataset.etag = dataset_etag
        yield from replace_row(sql, tables.DATASETS, dataset, old_etag)


# -- results -----------------------------------------------------------------------------------


def recent_results(
    sql: Sql, evaluations: Sequence[str], count: int, max_bytes: int | None
) -> Script[dict[str, list[_Result]]]:
    """The ``count`` newest results of each evaluation, newest first; with ``max_bytes``, only
    while the results before hold at most that many bytes (the first one always), and the
    evaluations after the budget ran out get none. No result past the budget's last is read.

    One statement for the whole page where the dialect has one (PostgreSQL: one round trip
    instead of one per evaluation); else one per evaluation, each within what is left of the
    budget."""
    found: dict[str, list[_Result]] = {name: [] for name in evaluations}
    if sql.recent_results_batch is not None:
        if evaluations:
            params = (list(evaluations), count, max_bytes, max_bytes)
            for name, data in (yield Statement(sql.recent_results_batch, params)).rows:
                found[str(name)].append(_Result.FromString(data))
        return found
    read = 0
    for name in evaluations:
        if max_bytes is None:
            statement = Statement(sql.recent_results, (name, count))
        elif read > max_bytes:
            break
        else:
            statement = Statement(sql.recent_results_within, (name, name, count, max_bytes - read))
        taken = found[name]
        for (data,) in (yield statement).rows:
            taken.append(_Result.FromString(data))
            read += len(data)
    return found


def _lock_evaluation(sql: Sql, evaluation: str, missing: str) -> Script[str]:
    """Lock the evaluation's row for the transaction (result writes of one evaluation run one
    at a time, so its derived fields count every committed result) and return its etag;
    Missing(``missing``) when there is no such evaluation."""
    row = _first((yield Statement(sql.evaluation_lock, (evaluation,))))
    if row is None:
        raise Missing(missing)
    return str(row[0])


def _refresh_derived(
    sql: Sql, evaluation: str, etag: str, change: Tally, max_bytes: int | None = None
) -> Script[None]:
    """Apply a result write's ``change`` to the evaluation's metrics tally and store its
    derived fields with ``etag``: a few indexed reads, whatever the number of results (the
    caller holds the evaluation's row). TooLarge (see Storage.insert_result) before anything
    is stored."""
    row = _first((yield Statement(sql.evaluation_stored, (evaluation,))))
    if row is None:
        raise Missing(evaluation)
    stored, data_length, derived_length, old_etag = row
    if stored is None:  # from before incremental upkeep: sum every result once
        results = (yield Statement(sql.results_of, (evaluation,))).rows
        tally = _tables.tally_of(data for (data,) in results)
    else:
        tally = _tables.updated_tally(stored, change)
    runs = [str(run) for (run,) in (yield Statement(sql.runs_of, (evaluation,))).rows]
    last = _first((yield Statement(sql.last_completed_of, (evaluation, _COMPLETED))))
    derived = _tables.derived_blob(tally, runs, None if last is None else bytes(last[0]))
    _tables.refuse_growth(
        evaluation,
        (int(data_length), int(derived_length), str(old_etag)),
        derived,
        etag,
        max_bytes,
    )
    yield Statement(sql.evaluation_derive, (derived, etag, _tables.tally_json(tally), evaluation))


def _insert_result(sql: Sql, result: _Result) -> Statement:
    return Statement(
        sql.result_insert, _tables.result_row(result), (result.name, result.display_name)
    )


def insert_result(
    sql: Sql, result: _Result, parent_etag: str, max_bytes: int | None
) -> Script[None]:
    evaluation = result.name.rsplit("/results/", 1)[0]
    yield from _lock_evaluation(sql, evaluation, evaluation)
    yield _insert_result(sql, result)
    change = _tables.tally_change(result, None)
    yield from _refresh_derived(sql, evaluation, parent_etag, change, max_bytes)


def data_of(rows: Rows) -> bytes | None:
    """The answer of ``sql.result_get`` and of a generic table's ``get``: the stored
    resource's wire bytes (its ``data`` column)."""
    return bytes(rows.rows[0][0]) if rows.rows else None


def replace_result(
    sql: Sql, result: _Result, parent_etag: str, max_bytes: int | None
) -> Script[None]:
    row = _tables.result_row(result)
    evaluation = str(row[1])
    yield from _lock_evaluation(sql, evaluation, result.name)
    before = _first((yield Statement(sql.result_get, (result.name,))))
    if before is None:
        raise Missing(result.name)
    yield Statement(sql.result_update, (*row[3:], result.name))
    change = _tables.tally_change(result, _Result.FromString(before[0]))
    yield from _refresh_derived(sql, evaluation, parent_etag, change, max_bytes)


def delete_result(sql: Sql, name: str, parent_etag: str) -> Script[None]:
    evaluation = name.rsplit("/results/", 1)[0]
    yield from _lock_evaluation(sql, evaluation, name)
    gone = _first((yield Statement(sql.result_get, (name,))))
    if gone is None:
        raise Missing(name)
    yield Statement(sql.result_delete, (name,))
    change = _tables.tally_change(None, _Result.FromString(gone[0]))
    yield from _refresh_derived(sql, evaluation, parent_etag, change)


# -- evaluation runs ---------------------------------------------------------------------------


def delete_evaluation_run(sql: Sql, name: str, evaluation_etag: str) -> Script[int]:
    """Delete the run ``name`` (a row of :data:`tables.RUNS`) and the results it produced (those
    whose ``evaluation_run`` is it); each evaluation that loses results gets its derived fields
    brought up to date and ``evaluation_etag``. The evaluations are locked in name order, as
    :func:`import_bundle` locks them. Missing when there is no such run; returns how many
    results went."""
    run = sql.table(tables.RUNS)
    if _first((yield Statement(run.lock, (name,)))) is None:
        raise Missing(name)
    evaluations = [str(e) for (e,) in (yield Statement(sql.run_evaluations, (name,))).rows]
    deleted = 0
    for evaluation in evaluations:
        yield from _lock_evaluation(sql, evaluation, evaluation)
        gone = (yield Statement(sql.run_results_of, (evaluation, name))).rows
        change: Tally = {}
        for (data,) in gone:
            add_tally(change, contribution(_Result.FromString(bytes(data))), sign=-1)
        yield Statement(sql.run_results_delete, (evaluation, name))
        deleted += len(gone)
        yield from _refresh_derived(sql, evaluation, evaluation_etag, change)
    yield Statement(run.delete, (name,))
    return deleted


def record_run(
    sql: Sql,
    run: evaluation_pb2.EvaluationRun,
    results: Sequence[_Result],
    conversations: Sequence[conversation_pb2.Conversation],
    evaluation_etag: str,
    *,
    max_bytes: int | None,
) -> Script[None]:
    """Store ``run`` (a row of :data:`tables.RUNS`, as its engine has it now) with the new
    ``results`` it produced and the ``conversations`` they played, in one transaction: the run
    is locked first and the results' evaluations after it in name order (as
    :func:`delete_evaluation_run` locks them), and each of those evaluations gets its derived
    fields brought up to date and ``evaluation_etag``. Missing when the run was deleted, or an
    evaluation; TooLarge (nothing stored) as for every result write."""
    statements = sql.table(tables.RUNS)
    if _first((yield Statement(statements.lock, (run.name,)))) is None:
        raise Missing(run.name)
    by_evaluation: dict[str, list[_Result]] = {}
    for result in results:
        by_evaluation.setdefault(result.name.rsplit("/results/", 1)[0], []).append(result)
    for evaluation in sorted(by_evaluation):
        yield from _lock_evaluation(sql, evaluation, evaluation)
        change: Tally = {}
        for result in by_evaluation[evaluation]:
            yield _insert_result(sql, result)
            add_tally(change, contribution(result))
        yield from _refresh_derived(sql, evaluation, evaluation_etag, change, max_bytes)
    for conversation in conversations:
        yield from insert_row(sql, tables.CONVERSATIONS, conversation)
    yield from replace_row(sql, tables.RUNS, run, "")


def schedules_of(rows: Rows) -> list[_Scheduled]:
    """The answer of ``sql.schedules_due``."""
    return [_Scheduled.FromString(bytes(data)) for (data,) in rows.rows]


def fire_schedule(
    sql: Sql,
    schedule: _Scheduled,
    expected_etag: str,
    run: _Run,
    operation: tuple[operations_pb2.Operation, str, str, float] | None,
) -> Script[None]:
    """Record one firing of ``schedule`` (as it is once fired) in one transaction with the run
    it starts and that run's ``operation`` (the operation, its method, owner and lease; None
    for a run that ended at once): EtagMismatch when another process fired or changed the
    schedule since it was read, Missing when it was deleted; nothing is stored then."""
    yield from replace_row(sql, tables.SCHEDULED_RUNS, schedule, expected_etag)
    yield from insert_row(sql, tables.RUNS, run)
    if operation is not None:
        yield from insert_operation(sql, *operation)


class _Bundle:
    """The names and display names an import has written so far."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._holders: dict[tuple[str, str], str] = {}

    def claim(self, name: str, collection: str, display_name: str) -> None:
        """Record ``name`` (in its parent's ``collection``) and its display name; Conflict
        when an earlier row of the bundle has either (the name first, as the primary key is
        checked before the display name's index)."""
        if name in self._names:
            raise Conflict("name", name)
        scope = (name.rsplit(collection, 1)[0], display_name)
        holder = self._holders.setdefault(scope, name)
        if holder != name:
            raise Conflict("display_name", holder)
        self._names.add(name)


def import_bundle(
    sql: Sql,
    evaluations: Sequence[_Evaluation],
    results: Sequence[_Result],
    max_bytes: int | None,
    replacing: Sequence[str] = (),
) -> Script[None]:
    """Delete the evaluations ``replacing`` names (Missing when one is gone; their results go
    with them, their dataset memberships pass to the imported evaluation of the same name),
    insert the evaluations, lock every evaluation that receives results (in name
    order, so that concurrent imports never wait on each other in a cycle), insert the results,
    then derive each of those evaluations once, in the order the results first name them.

    A row that clashes with an earlier row of the bundle is a Conflict naming that row, found
    here before the database refuses it: once the transaction rolls back, the database can no
    longer say who held the name (:meth:`ScriptedStorage._conflict`)."""
    # A replaced evaluation stays in the datasets that list it: its successor, of the same
    # name, takes over its evaluation_datasets (the datasets are not written).
    memberships: dict[str, list[str]] = {}
    for name in sorted(replacing):
        _, data = yield from _delete_locked(
            sql.evaluation_lock_data, sql.evaluation_delete, name, None
        )
        memberships[name] = list(_Evaluation.FromString(bytes(data)).evaluation_datasets)
    bundle = _Bundle()
    for evaluation in evaluations:
        bundle.claim(evaluation.name, "/evaluations/", evaluation.display_name)
        if memberships.get(evaluation.name):
            successor = _Evaluation()
            successor.CopyFrom(evaluation)
            successor.evaluation_datasets[:] = memberships[evaluation.name]
            evaluation = successor  # noqa: PLW2901 - the row written is the successor
        yield _insert_evaluation(sql, evaluation)
    touched = list(dict.fromkeys(r.name.rsplit("/results/", 1)[0] for r in results))
    stored: dict[str, str | None] = {}
    for name in sorted(touched):
        row = _first((yield Statement(sql.evaluation_lock, (name,))))
        stored[name] = None if row is None else str(row[0])
    for name in touched:  # the first result whose evaluation is neither stored nor imported
        if stored[name] is None:
            raise Missing(name)
    changes: dict[str, Tally] = {name: {} for name in touched}
    for result in results:
        bundle.claim(result.name, "/results/", result.display_name)
        yield _insert_result(sql, result)
        add_tally(changes[result.name.rsplit("/results/", 1)[0]], contribution(result))
    etags = {e.name: e.etag for e in evaluations}
    for name in touched:
        etag = etags[name] if name in etags else str(stored[name])
        yield from _refresh_derived(sql, name, etag, changes[name], max_bytes)


def list_results(sql: Sql, query: ListQuery) -> Script[list[tuple[bytes, Cursor]]]:
    statement, params = sql.list_results(query)
    rows = (yield Statement(statement, params)).rows
    return [(bytes(data), Cursor(value, name)) for data, name, value in rows]


def _under(prefix: str) -> str:
    """The LIKE pattern (escape ``\\``) of the names starting with ``prefix``."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def apps(sql: Sql) -> Script[list[str]]:
    """The names of the apps that hold an evaluation or are stored (in the generic table of
    the ``apps`` collection, when one is declared), sorted."""
    stored = next((t.name for t in tables.TABLES if t.collection == "apps"), None)
    # The same on every engine: no parameter, no dialect; only declared table names.
    union = f" UNION SELECT name FROM {stored}" if stored else ""  # noqa: S608
    statement = f"SELECT DISTINCT app FROM evaluations{union} ORDER BY 1"  # noqa: S608
    rows = (yield Statement(statement, ())).rows
    return [str(app) for (app,) in rows]


def locations(sql: Sql, project: str) -> Script[list[str]]:
    """The location IDs the names of a project's evaluations, operations and generic tables'
    resources use, sorted (results live under their evaluations)."""
    prefix = f"projects/{project}/locations/"
    kept = ["evaluations", "operations", *(table.name for table in tables.TABLES)]
    params = [len(prefix) + 1, _under(prefix)] * len(kept)
    rows = (yield Statement(sql.locations_used(kept), params)).rows
    return sorted(str(location) for (location,) in rows if location)


def reset_project(sql: Sql, project: str | None) -> Script[ResetCounts]:
    """Delete everything under ``projects/{project}/``, or every project's (None; results go
    with their evaluations)."""
    pattern = (_under("projects/" if project is None else f"projects/{project}/"),)
    results = _first((yield Statement(sql.reset_count_results, pattern)))
    evaluations = (yield Statement(sql.reset_evaluations, pattern)).changed
    operations = (yield Statement(sql.reset_operations, pattern)).changed
    others = {}
    for table in tables.TABLES:
        others[table.collection] = (yield Statement(sql.table(table).reset, pattern)).changed
    return ResetCounts(
        evaluations=evaluations,
        evaluation_results=int(results[0]) if results else 0,
        operations=operations,
        others=others,
    )


# -- generic tables (ces_eval.storage.tables) -------------------------------------------------


def _unique(message: Message) -> tuple[str, str]:
    """What a unique index may refuse of a row (the display name's index exists only where the
    table declares display names unique)."""
    return (str(getattr(message, "name")), str(getattr(message, "display_name", "")))  # noqa: B009


def insert_row(sql: Sql, table: Table[M], message: M) -> Script[None]:
    yield Statement(sql.table(table).insert, table.row(message), _unique(message))


def row_of(table: Table[M]) -> Callable[[Rows], M | None]:
    """The decoder of ``sql.table(table).get``."""

    def decode(rows: Rows) -> M | None:
        return table.parse(rows.rows[0][0]) if rows.rows else None

    return decode


def list_rows(sql: Sql, table: Table[M], query: ListQuery) -> Script[list[tuple[bytes, Cursor]]]:
    statement, params = sql.table(table).list(query)
    rows = (yield Statement(statement, params)).rows
    return [(bytes(data), Cursor(value, name)) for data, name, value in rows]


def count_rows(sql: Sql, table: Table[M], parents: Sequence[str]) -> Script[dict[str, int]]:
    counted = dict.fromkeys(parents, 0)
    if counted:
        statement = Statement(sql.table(table).count(len(counted)), tuple(counted))
        for parent, count in (yield statement).rows:
            counted[str(parent)] = int(count)
    return counted


def replace_row(sql: Sql, table: Table[M], message: M, expected_etag: str) -> Script[None]:
    """One conditional UPDATE; when it changed nothing, whether the row exists tells
    EtagMismatch from Missing."""
    statements = sql.table(table)
    name = str(getattr(message, "name"))  # noqa: B009
    row = table.row(message)
    answer = yield Statement(statements.update, (*row[2:], name, expected_etag), _unique(message))
    if answer.changed == 1:
        return
    if (yield Statement(statements.exists, (name,))).rows:
        raise EtagMismatch(name)
    raise Missing(name)


def write_rows(sql: Sql, changes: Sequence[Change]) -> Script[None]:
    """The script of each change, in order, in the one transaction."""
    for change in changes:
        if isinstance(change, Insert):
            yield from insert_row(sql, change.table, change.message)
        elif isinstance(change, Replace):
            yield from replace_row(sql, change.table, change.message, change.expected_etag)
        else:
            yield from delete_row(sql, change.table, change.name, change.expected_etag)


def delete_row(sql: Sql, table: Table[M], name: str, expected_etag: str | None) -> Script[None]:
    statements = sql.table(table)
    yield from _delete_locked(statements.lock, statements.delete, name, expected_etag)


def delete_tree(sql: Sql, table: Table[M], name: str, expected_etag: str | None) -> Script[None]:
    """:func:`delete_row`, and everything stored under ``name``: the rows of every generic
    table and the evaluations (their results with them) whose names start with ``name/``."""
    yield from delete_row(sql, table, name, expected_etag)
    pattern = (_under(f"{name}/"),)
    yield Statement(sql.reset_evaluations, pattern)
    for other in tables.TABLES:
        yield Statement(sql.table(other).reset, pattern)


# -- evaluation datasets ------------------------------------------------------------------------
# A dataset's row is a generic table's (tables.DATASETS), written by the statements above; these
# scripts add the dataset's side effects to the same transaction: the evaluations it lists hold
# its name in Evaluation.evaluation_datasets (in name order, each change with a new etag), and
# its aggregated_metrics are the sum of their metrics tallies, read with it (never stored).
# Locks are taken evaluations first, then datasets (as delete_evaluation does), so that two
# transactions never wait on each other in a cycle.


def _memberships(
    sql: Sql, dataset: str, added: Iterable[str], removed: Iterable[str], etag: str
) -> Script[None]:
    """Add ``dataset`` to the evaluation_datasets of the ``added`` evaluations and take it out
    of the ``removed`` ones' (in name order), each changed evaluation getting ``etag``.
    Missing(evaluation) for an added evaluation that is not stored; a removed one that is
    gone has nothing to change."""
    adding = set(added)
    for name in sorted(adding | set(removed)):
        row = _first((yield Statement(sql.evaluation_lock_data, (name,))))
        if row is None:
            if name in adding:
                raise Missing(name)
            continue
        evaluation = _Evaluation.FromString(bytes(row[1]))
        held = set(evaluation.evaluation_datasets)
        changed = held | {dataset} if name in adding else held - {dataset}
        if changed == held:
            continue
        evaluation.ClearField("evaluation_datasets")
        evaluation.evaluation_datasets.extend(sorted(changed))
        yield Statement(
            sql.evaluation_memberships,
            (
                evaluation.SerializeToString(deterministic=True),
                json.dumps(sorted(changed)),
                etag,
                name,
            ),
        )


def _tallies(sql: Sql, evaluations: Sequence[str]) -> Script[dict[str, Tally]]:
    """The metrics tallies of the stored ones among ``evaluations``, by name (summed from the
    results once for an evaluation stored before incremental upkeep)."""
    if not evaluations:
        return {}
    found: dict[str, Tally] = {}
    rows = (yield Statement(sql.evaluation_tallies, (sql.names(evaluations),))).rows
    for name, stored in rows:
        if stored is None:
            results = (yield Statement(sql.results_of, (name,))).rows
            found[str(name)] = _tables.tally_of(data for (data,) in results)
        else:
            found[str(name)] = json.loads(stored)
    return found


def _metrics(
    datasets: Sequence[_Dataset], tallies: dict[str, Tally]
) -> list[evaluation_pb2.AggregatedMetrics]:
    """Each dataset's aggregated_metrics: its evaluations' tallies summed, rendered."""
    out = []
    for dataset in datasets:
        total: Tally = {}
        for name in set(dataset.evaluations):
            add_tally(total, tallies.get(name, {}))
        out.append(render_tally(total))
    return out


def _dataset_metrics(sql: Sql, dataset: _Dataset) -> Script[evaluation_pb2.AggregatedMetrics]:
    tallies = yield from _tallies(sql, list(dict.fromkeys(dataset.evaluations)))
    return _metrics([dataset], tallies)[0]


def _stored(dataset: _Dataset) -> _Dataset:
    """What a dataset's row holds: everything but its derived aggregated_metrics."""
    kept = _Dataset()
    kept.CopyFrom(dataset)
    kept.ClearField("aggregated_metrics")
    return kept


def insert_dataset(
    sql: Sql, dataset: _Dataset, evaluation_etag: str
) -> Script[evaluation_pb2.AggregatedMetrics]:
    """Store a new dataset and enter it in its evaluations; its aggregated_metrics."""
    yield from _memberships(sql, dataset.name, dataset.evaluations, (), evaluation_etag)
    yield from insert_row(sql, tables.DATASETS, _stored(dataset))
    return (yield from _dataset_metrics(sql, dataset))


def get_dataset(sql: Sql, name: str) -> Script[_Dataset | None]:
    dataset = row_of(tables.DATASETS)((yield Statement(sql.table(tables.DATASETS).get, (name,))))
    if dataset is not None:
        dataset.aggregated_metrics.CopyFrom((yield from _dataset_metrics(sql, dataset)))
    return dataset


def list_datasets(sql: Sql, query: ListQuery) -> Script[list[tuple[bytes, Cursor]]]:
    """A page of datasets, each served as stored followed by its aggregated_metrics (serialized
    messages merge when concatenated), the tallies of the whole page read at once."""
    rows = yield from list_rows(sql, tables.DATASETS, query)
    datasets = [tables.DATASETS.parse(data) for data, _ in rows]
    names = list(dict.fromkeys(e for dataset in datasets for e in dataset.evaluations))
    tallies = yield from _tallies(sql, names)
    return [
        (data + _Dataset(aggregated_metrics=metrics).SerializeToString(), cursor)
        for (data, cursor), metrics in zip(rows, _metrics(datasets, tallies), strict=True)
    ]


def replace_dataset(
    sql: Sql, dataset: _Dataset, expected_etag: str, evaluation_etag: str
) -> Script[evaluation_pb2.AggregatedMetrics]:
    """Overwrite a dataset whose etag is still ``expected_etag`` and move its evaluations'
    memberships with its list (only those added or removed change); EtagMismatch or Missing
    (the dataset) as replace_row, Missing(evaluation) for an added one not stored."""
    row = _first((yield Statement(sql.table(tables.DATASETS).get, (dataset.name,))))
    if row is None:
        raise Missing(dataset.name)
    stored = tables.DATASETS.parse(row[0])
    if stored.etag != expected_etag:
        raise EtagMismatch(dataset.name)
    before = set(stored.evaluations)
    after = set(dataset.evaluations)
    yield from _memberships(sql, dataset.name, after - before, before - after, evaluation_etag)
    # Conditional on the etag: a change since the read above rolls all of this back.
    yield from replace_row(sql, tables.DATASETS, _stored(dataset), expected_etag)
    return (yield from _dataset_metrics(sql, dataset))


def delete_dataset(
    sql: Sql, name: str, expected_etag: str | None, evaluation_etag: str
) -> Script[None]:
    """Delete a dataset and take it out of its evaluations' evaluation_datasets."""
    row = _first((yield Statement(sql.table(tables.DATASETS).get, (name,))))
    if row is None:
        raise Missing(name)
    stored = tables.DATASETS.parse(row[0])
    if expected_etag and stored.etag != expected_etag:
        raise EtagMismatch(name)
    yield from _memberships(sql, name, (), stored.evaluations, evaluation_etag)
    # Conditional on the etag read above: a change since rolls all of this back.
    yield from delete_row(sql, tables.DATASETS, name, stored.etag)


# -- long-running operations -------------------------------------------------------------------


def insert_operation(
    sql: Sql, operation: operations_pb2.Operation, method: str, owner: str, lease: float
) -> Script[None]:
    now = _tables.now_micros()
    yield Statement(
        sql.operation_insert,
        (
            operation.name,
            operation.name.rsplit("/operations/", 1)[0],
            method,
            operation.done,
            now,
            now,
            owner,
            sql.lease(lease),
            operation.SerializeToString(deterministic=True),
        ),
    )


def operation_of(rows: Rows) -> operations_pb2.Operation | None:
    """The answer of ``sql.operation_get``."""
    return operations_pb2.Operation.FromString(rows.rows[0][0]) if rows.rows else None


def list_operations(
    sql: Sql,
    parent: str,
    limit: int,
    after: str | None,
    *,
    done: bool | None,
    max_bytes: int | None,
) -> Script[list[operations_pb2.Operation]]:
    statement, params = sql.list_operations(parent, limit, after, done=done, max_bytes=max_bytes)
    rows = (yield Statement(statement, params)).rows
    return [operations_pb2.Operation.FromString(row[0]) for row in rows]


def replace_running(sql: Sql, operation: operations_pb2.Operation) -> Script[bool]:
    """Store the operation's new state if it is still running; False if it was done."""
    answer = yield Statement(
        sql.operation_replace_running,
        (
            operation.SerializeToString(deterministic=True),
            operation.done,
            _tables.now_micros(),
            operation.name,
        ),
    )
    return answer.changed == 1


def request_cancel(sql: Sql, name: str) -> Script[operations_pb2.Operation | None]:
    yield Statement(sql.operation_request_cancel, (name,))
    return operation_of((yield Statement(sql.operation_get, (name,))))


def flag_of(rows: Rows) -> bool:
    """The answer of ``sql.operation_cancel_requested``."""
    return bool(rows.rows and rows.rows[0][0])


def delete_operation(sql: Sql, name: str) -> Script[bool]:
    return (yield Statement(sql.operation_delete, (name,))).changed == 1


def renew_leases(sql: Sql, owner: str, lease: float) -> Script[list[str]]:
    yield Statement(sql.operation_renew, (sql.lease(lease), owner))
    return [str(name) for (name,) in (yield Statement(sql.operation_cancelling, (owner,))).rows]


def fail_running(sql: Sql, select: Statement, error: status_pb2.Status) -> Script[int]:
    """Finish with ``error`` every running operation ``select`` returns
    (it selects their data, locking them where the dialect locks)."""
    rows = (yield select).rows
    for (data,) in rows:
        operation = operations_pb2.Operation.FromString(data)
        operation.done = True
        operation.error.CopyFrom(error)
        yield Statement(
            sql.operation_fail,
            (
                operation.SerializeToString(deterministic=True),
                _tables.now_micros(),
                operation.name,
            ),
        )
        yield from _fail_run_of(sql, operation, error)
    return len(rows)


def _fail_run_of(
    sql: Sql, operation: operations_pb2.Operation, error: status_pb2.Status
) -> Script[None]:
    """The run of a RunEvaluation operation that fails without its engine (its server
    stopped) ends in ERROR with ``error``'s message, unless it had ended."""
    metadata = service_pb2.RunEvaluationOperationMetadata()
    if not operation.metadata.Unpack(metadata) or not metadata.evaluation_run:
        return
    row = _first((yield Statement(sql.table(tables.RUNS).lock_data, (metadata.evaluation_run,))))
    if row is None:
        return
    run = _Run.FromString(bytes(row[0]))
    if run.state in _RUN_ENDED:
        return
    run.state = _Run.ERROR
    run.error_info.error_type = evaluation_config_pb2.EvaluationErrorInfo.RUNTIME_FAILURE
    run.error_info.error_message = error.message
    yield from replace_row(sql, tables.RUNS, run, "")
