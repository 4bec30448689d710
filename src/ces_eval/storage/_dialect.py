"""The SQL of every transaction script, in each backend's dialect, built once at import.

The scripts (:mod:`._scripts`) name statements (``sql.evaluation_lock``); this module holds
their text. Everything that differs between SQLite and PostgreSQL is decided here, by the
:class:`Sql` instance a backend passes to the scripts: placeholders (``?`` or ``%s``), the cast
of a JSON parameter, the empty blob literal, row locks (``FOR UPDATE`` and ``FOR UPDATE SKIP
LOCKED``; SQLite has one writer and needs none), how a running operation is selected (so that
SQLite's ``(done, owner)`` index serves it), whose clock a lease is read against (this
process's on SQLite, the database's on PostgreSQL, shared by every replica) and the
bookkeeping of migrations. Fixed statements are attributes computed in ``__init__``; only list
pages, whose filters and cursors vary, are composed per call.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from ces_eval import filtering
from ces_eval.storage._tables import (
    EVALUATION_COLUMNS,
    EVALUATION_FILTER_FIELDS,
    RESULT_COLUMNS,
    RESULT_FILTER_FIELDS,
    now_micros,
)
from ces_eval.storage.base import ListQuery, SortKey
from ces_eval.storage.errors import InvalidFilter
from ces_eval.storage.tables import RUNS

if TYPE_CHECKING:
    from ces_eval.storage.tables import Table

__all__ = ["POSTGRESQL", "SQLITE", "Sql", "TableSql"]

_JSON_COLUMNS = frozenset({"tags", "evaluation_datasets", "evaluation_expectations"})
# What a row holds of its resource as served, in bytes (ListQuery.max_bytes): read from the
# stored lengths, never from the blobs.
_STORED_BYTES = {
    "evaluations": "length(evaluations.data) + length(evaluations.derived)",
    "evaluation_results": "length(evaluation_results.data)",
    "operations": "length(operations.data)",
}
_SORT_COLUMNS = {
    SortKey.NAME: "name",
    SortKey.CREATE_TIME: "create_time",
    SortKey.UPDATE_TIME: "update_time",
}
_NO_ORDERS: Mapping[str, str] = {}
_NEWEST_FIRST = "ORDER BY evaluation_results.create_time DESC, evaluation_results.name DESC"


class Sql:
    """Statement text in one backend's dialect (see the module docstring for what differs).

    ``json_param``: the placeholder of a JSON array column (string lists), with the cast the
    column type needs. ``empty_blob``: the literal of an empty ``derived`` blob. ``lock_row``
    and ``lock_skip``: the suffixes that lock the selected rows for the transaction, waiting
    for or skipping rows locked by another one. ``running``: the condition of an operation not
    yet done. ``lease_clock``: the SQL of "now plus a parameter" for lease deadlines and
    ``expired``: the condition of a lease run out; ``database_clock`` says whether both read
    the database's clock (their parameters are then seconds and nothing) or this process's
    (microseconds since the epoch, and now). ``migrations_table`` and ``record_migration``:
    the DDL and the insert of the migrations ledger; ``migration_lock``: a statement that
    serializes migrating processes, if any. ``recent_results_batch``: where the engine can,
    the newest results of a whole page of evaluations in one statement (parameters: the
    evaluations as an array, the count, the byte budget twice), rows of (evaluation, data).
    ``find``: the function giving the position of a substring (``instr``, ``strpos``).
    """

    def __init__(
        self,
        dialect: filtering.Dialect,
        *,
        json_param: str,
        empty_blob: str,
        lock_row: str,
        lock_skip: str,
        running: str,
        lease_clock: str,
        expired: str,
        database_clock: bool,
        migrations_table: str,
        record_migration: str,
        name_list: str,
        find: str,
        migration_lock: str | None = None,
        recent_results_batch: str | None = None,
    ) -> None:
        self.dialect, self.find = dialect, find
        self.json_param = json_param
        self.database_clock = database_clock
        self.migrations_table = migrations_table
        self.record_migration = record_migration
        self.migration_lock = migration_lock
        self.recent_results_batch = recent_results_batch
        p = self.p
        self.applied_migrations = "SELECT version FROM schema_migrations"
        self.secret_insert = (
            f"INSERT INTO meta (key, value) VALUES ('page_token_secret', {p}) "
            "ON CONFLICT (key) DO NOTHING"
        )
        self.secret_get = "SELECT value FROM meta WHERE key = 'page_token_secret'"
        self.ping = "SELECT 1"

        self.evaluation_insert = self.insert(
            "evaluations", EVALUATION_COLUMNS, {"derived": empty_blob, "metrics_tally": "'{}'"}
        )
        self.evaluation_get = f"SELECT data, derived, etag FROM evaluations WHERE name = {p}"
        self.evaluation_exists = f"SELECT 1 FROM evaluations WHERE name = {p}"
        # The identity columns (name, app) are never updated; the etag must still be the
        # caller's, or nothing changes.
        self.evaluation_update = self.update(
            "evaluations", EVALUATION_COLUMNS[2:], f"name = {p} AND etag = {p}"
        )
        self.lock_row = lock_row
        self.evaluation_delete = f"DELETE FROM evaluations WHERE name = {p}"
        self.evaluation_stored = (
            "SELECT metrics_tally, length(data), length(derived), etag FROM evaluations "
            f"WHERE name = {p}"
        )
        self.evaluation_derive = (
            f"UPDATE evaluations SET derived = {p}, etag = {p}, metrics_tally = {p} "
            f"WHERE name = {p}"
        )
        self.evaluation_display_name = (
            f"SELECT name FROM evaluations WHERE app = {p} AND display_name = {p}"
        )
        self._locked_evaluations(lock_row, name_list)

        self.result_insert = self.insert("evaluation_results", RESULT_COLUMNS, {})
        self.result_get = f"SELECT data FROM evaluation_results WHERE name = {p}"
        # The identity columns (name, evaluation, app) are never updated.
        self.result_update = self.update("evaluation_results", RESULT_COLUMNS[3:], f"name = {p}")
        self.result_delete = f"DELETE FROM evaluation_results WHERE name = {p}"
        self.result_display_name = (
            f"SELECT name FROM evaluation_results WHERE evaluation = {p} AND display_name = {p}"
        )
        self.results_of = f"SELECT data FROM evaluation_results WHERE evaluation = {p}"
        # The evaluation's distinct non-empty runs, most recent first (by their results'
        # latest create_time, then name).
        self.runs_of = (
            "SELECT evaluation_run FROM evaluation_results "
            f"WHERE evaluation = {p} AND evaluation_run <> '' GROUP BY evaluation_run "
            "ORDER BY max(create_time) DESC, evaluation_run ASC"
        )
        # The data of the evaluation's newest result in a state (COMPLETED): by create_time,
        # then name.
        self.last_completed_of = (
            "SELECT data FROM evaluation_results "
            f"WHERE evaluation = {p} AND execution_state = {p} "
            "ORDER BY create_time DESC, name DESC LIMIT 1"
        )
        # An evaluation's newest results (parameters: evaluation, count), and the same within
        # a byte budget (evaluation, evaluation, count, budget): the first one always, each
        # next one while those before hold at most the budget.
        newest = ["evaluation_results.evaluation = " + p]
        self.recent_results = (
            f"SELECT data FROM evaluation_results WHERE {newest[0]} {_NEWEST_FIRST} LIMIT {p}"
        )
        self.recent_results_within = (
            f"SELECT data FROM evaluation_results WHERE {newest[0]} {_NEWEST_FIRST} "
            + self.limit(
                "evaluation_results",
                newest,
                [],
                column="evaluation_results.create_time",
                order=_NEWEST_FIRST,
                limit=0,
                max_bytes=0,
                always=1,
            )
        )

        self.operation_insert = (
            "INSERT INTO operations (name, parent, method, done, create_time, update_time, "
            f"owner, lease_until, data) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, "
            f"{lease_clock}, {p})"
        )
        self.operation_get = f"SELECT data FROM operations WHERE name = {p}"
        self.operation_replace_running = (
            f"UPDATE operations SET data = {p}, done = {p}, update_time = {p} "
            f"WHERE name = {p} AND {running}"
        )
        self.operation_request_cancel = (
            f"UPDATE operations SET cancel_requested = TRUE WHERE name = {p} AND {running}"
        )
        self.operation_cancel_requested = (
            f"SELECT cancel_requested FROM operations WHERE name = {p}"
        )
        self.operation_delete = f"DELETE FROM operations WHERE name = {p}"
        self.operation_renew = (
            f"UPDATE operations SET lease_until = {lease_clock} WHERE {running} AND owner = {p}"
        )
        self.operation_cancelling = (
            f"SELECT name FROM operations WHERE {running} AND owner = {p} AND cancel_requested"
        )
        running_select = f"SELECT data FROM operations WHERE {running} AND "
        self.operations_expired = f"{running_select}{expired}{lock_skip}"
        self.operations_of_owner = f"{running_select}owner = {p}{lock_skip}"
        self.operations_running = f"{running_select}TRUE{lock_skip}"
        self.operation_fail = (
            f"UPDATE operations SET done = TRUE, data = {p}, update_time = {p} WHERE name = {p}"
        )

        like = f"LIKE {p} ESCAPE '\\'"
        self.reset_count_results = f"SELECT count(*) FROM evaluation_results WHERE name {like}"
        self.reset_evaluations = f"DELETE FROM evaluations WHERE name {like}"
        self.reset_operations = f"DELETE FROM operations WHERE name {like}"

    def _locked_evaluations(self, lock_row: str, name_list: str) -> None:
        """The statements reading evaluations locked (their etag; their etag and data) and
        those of the evaluations' side of the datasets that list them (EvaluationDataset
        .evaluations mirrored in Evaluation.evaluation_datasets): the list written with a new
        etag, the metrics tallies of a set of evaluations (the stored ones among the names
        given)."""
        p = self.p
        self.evaluation_lock = f"SELECT etag FROM evaluations WHERE name = {p}{lock_row}"
        self.evaluation_lock_data = f"SELECT etag, data FROM evaluations WHERE name = {p}{lock_row}"
        self.evaluation_memberships = (
            f"UPDATE evaluations SET data = {p}, evaluation_datasets = {self.json_param}, "
            f"etag = {p} WHERE name = {p}"
        )
        self.evaluation_tallies = (
            f"SELECT name, metrics_tally FROM evaluations WHERE name IN {name_list}"
        )

    @cached_property
    def schedules_due(self) -> str:
        """The schedules due by a moment (only active ones have a next execution), soonest
        first (parameters: the moment in microseconds, the count)."""
        p = self.p
        return (
            "SELECT data FROM scheduled_evaluation_runs "
            f"WHERE next_scheduled_execution_time <= {p} "
            f"ORDER BY next_scheduled_execution_time, name LIMIT {p}"
        )

    @cached_property
    def run_evaluations(self) -> str:
        """The evaluations a run's results belong to, in name order (the order they are locked
        in)."""
        return (
            "SELECT DISTINCT evaluation FROM evaluation_results "
            f"WHERE evaluation_run = {self.p} ORDER BY evaluation"
        )

    @cached_property
    def run_results_of(self) -> str:
        """The data of a run's results of one evaluation (parameters: evaluation, run)."""
        return f"SELECT data {self._run_results}"

    @cached_property
    def run_results_delete(self) -> str:
        """Delete a run's results of one evaluation (parameters: evaluation, run)."""
        return f"DELETE {self._run_results}"

    @property
    def _run_results(self) -> str:
        p = self.p
        return f"FROM evaluation_results WHERE evaluation = {p} AND evaluation_run = {p}"

    @property
    def p(self) -> str:
        """The placeholder."""
        return self.dialect.placeholder

    @staticmethod
    def names(names: Sequence[str]) -> str:
        """The parameter of ``name_list`` holding ``names``: a JSON array in both dialects."""
        return json.dumps(list(names))

    def lease(self, seconds: float) -> object:
        """The parameter of ``lease_clock`` for a lease of ``seconds`` from now."""
        return seconds if self.database_clock else now_micros() + int(seconds * 1_000_000)

    def now(self) -> tuple[object, ...]:
        """The parameters of ``expired``: none on the database's clock, else this process's."""
        return () if self.database_clock else (now_micros(),)

    def _param(self, column: str, json_columns: Collection[str] = _JSON_COLUMNS) -> str:
        return self.json_param if column in json_columns else self.p

    def insert(
        self,
        table: str,
        columns: Sequence[str],
        extra: dict[str, str],
        json_columns: Collection[str] = _JSON_COLUMNS,
    ) -> str:
        """``INSERT`` of ``columns`` (parameters) and ``extra`` (column → SQL expression);
        ``json_columns`` take :attr:`json_param`."""
        names = [*columns, *extra]
        values = [self._param(column, json_columns) for column in columns] + list(extra.values())
        return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(values)})"

    def update(
        self,
        table: str,
        columns: Sequence[str],
        where: str,
        json_columns: Collection[str] = _JSON_COLUMNS,
    ) -> str:
        """``UPDATE`` setting ``columns`` (parameters, in order) for rows matching ``where``."""
        assignments = ", ".join(
            f"{column} = {self._param(column, json_columns)}" for column in columns
        )
        return f"UPDATE {table} SET {assignments} WHERE {where}"

    def locations_used(self, tables: Sequence[str]) -> str:
        """The distinct location IDs in the names of ``tables``' rows under one project: per
        table, the parameters are the length of ``projects/{project}/locations/`` plus one and
        the LIKE pattern of that prefix. Every name goes on past its location (``…/apps/…``,
        ``…/operations/…``), so the ID ends at the next ``/``."""
        p = self.p
        rest = f"substr(name, CAST({p} AS INTEGER))"
        union = " UNION ALL ".join(
            f"SELECT {rest} AS rest FROM {table} WHERE name LIKE {p} ESCAPE '\\'"
            for table in tables
        )
        return f"SELECT DISTINCT substr(rest, 1, {self.find}(rest, '/') - 1) FROM ({union}) AS used"

    def table(self, table: Table[Any]) -> TableSql:
        """The statements of a generic table (built at its first use, then kept)."""
        return _table_sql(self, table)

    def compile(
        self, expr: filtering.Expr | None, fields: dict[str, filtering.FieldSpec], which: str
    ) -> tuple[str, list[object]]:
        """A filter as a condition and its parameters; InvalidFilter names ``which``."""
        try:
            return filtering.compile_filter(expr, fields, self.dialect)
        except filtering.FilterError as error:
            raise InvalidFilter(which, error) from error

    def page(
        self,
        table: str,
        columns: str,
        where: list[str],
        params: list[object],
        query: ListQuery,
        *,
        orders: Mapping[str, str] = _NO_ORDERS,
    ) -> str:
        """``SELECT <columns>, name, <sort value>`` of one keyset page; appends the page's
        parameters (cursor, limit, byte budget) to ``params``. ``orders``: the SQL of the sort
        value of each order the table declares besides the :class:`SortKey` ones.

        The page starts strictly after the cursor's (sort column, name); the name breaks ties in
        the same direction as the sort column, so one index scan in one direction serves the page
        with no sort step, however deep the page is. With ``query.max_bytes`` the page ends at the
        first row past the budget (:meth:`limit`).
        """
        key = query.order.key
        column = f"{table}.{_SORT_COLUMNS[key]}" if isinstance(key, SortKey) else orders[key]
        direction = "DESC" if query.order.descending else "ASC"
        compare = "<" if query.order.descending else ">"
        p = self.p
        after = query.after
        if query.order.key is SortKey.NAME:
            order = f"ORDER BY {table}.name {direction}"
            if after is not None:
                where.append(f"{table}.name {compare} {p}")
                params.append(after.name)
        else:
            order = f"ORDER BY {column} {direction}, {table}.name {direction}"
            if after is not None:
                # A row-value comparison, which both engines turn into one index range (the
                # equivalent OR of two conditions makes SQLite walk every row before the cursor).
                where.append(f"({column}, {table}.name) {compare} ({p}, {p})")
                params += [after.value, after.name]
        limit = self.limit(
            table,
            where,
            params,
            column=column,
            order=order,
            limit=query.limit,
            max_bytes=query.max_bytes,
        )
        return (
            f"SELECT {columns}, {table}.name, {column} FROM {table} "
            f"WHERE {' AND '.join(where)} {order} {limit}"
        )

    def limit(
        self,
        table: str,
        where: list[str],
        params: list[object],
        *,
        column: str,
        order: str,
        limit: int,
        max_bytes: int | None,
        always: int = 2,
    ) -> str:
        """The ``LIMIT`` of a page of ``table`` whose rows ``where`` selects in ``order`` (an
        ``ORDER BY`` clause: ``column``, then name); appends its parameters to ``params``
        (which holds those of ``where``).

        With ``max_bytes``, the limit is also a byte budget: a row is read only while the rows
        before it hold at most ``max_bytes`` stored bytes, or when it is among the first
        ``always`` (two for pages: a caller then sees more follow even after a row larger than
        the budget). The number of such rows comes from the same selection read for its stored
        lengths alone (both engines read a blob's length without reading the blob), so the
        page itself remains one index range, read in order, that stops at its last row.
        """
        p = self.p
        if max_bytes is None:
            params.append(limit)
            return f"LIMIT {p}"
        direction = "DESC" if order.endswith("DESC") else "ASC"
        window = f"ORDER BY name {direction}"
        if column != f"{table}.name":
            window = f"ORDER BY sort_value {direction}, name {direction}"
        stored = _STORED_BYTES.get(table, f"length({table}.data)")
        sizes = (
            f"SELECT {column} AS sort_value, {table}.name AS name, "
            f"{stored} AS size FROM {table} WHERE {' AND '.join(where)} "
            f"{order} LIMIT {p}"
        )
        counted = (
            f"SELECT row_number() OVER ({window}) AS position, "
            f"sum(size) OVER ({window} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) "
            f"AS before FROM ({sizes}) AS sizes"
        )
        params += [*params, limit, max_bytes]
        return (
            f"LIMIT (SELECT count(*) FROM ({counted}) AS counted "
            f"WHERE position <= {always} OR before <= {p})"
        )

    def list_evaluations(self, query: ListQuery) -> tuple[str, list[object]]:
        """One page of an app's evaluations: ``data, derived, etag, name, <sort value>``."""
        where = [f"evaluations.app = {self.p}"]
        params: list[object] = [query.parent]
        sql, values = self.compile(query.filter, EVALUATION_FILTER_FIELDS, "filter")
        where.append(f"({sql})")
        params += values
        if query.run_filter is not None:
            # Over the runs the evaluation's results belong to (Evaluation.evaluation_runs).
            sql, values = self.compile(query.run_filter, RUNS.filter_fields, "run_filter")
            where.append(
                f"EXISTS (SELECT 1 FROM evaluation_results r JOIN {RUNS.name} "
                f"ON {RUNS.name}.name = r.evaluation_run "
                f"WHERE r.evaluation = evaluations.name AND ({sql}))"
            )
            params += values
        return self.page("evaluations", "data, derived, etag", where, params, query), params

    def list_results(self, query: ListQuery) -> tuple[str, list[object]]:
        """One page of an evaluation's (or an app's) results: ``data, name, <sort value>``."""
        scope = "app" if query.across_evaluations else "evaluation"
        where = [f"evaluation_results.{scope} = {self.p}"]
        params: list[object] = [query.parent]
        sql, values = self.compile(query.filter, RESULT_FILTER_FIELDS, "filter")
        where.append(f"({sql})")
        params += values
        return self.page("evaluation_results", "data", where, params, query), params

    def list_operations(
        self,
        parent: str,
        limit: int,
        after: str | None,
        *,
        done: bool | None,
        max_bytes: int | None,
    ) -> tuple[str, list[object]]:
        """Operations under ``parent`` by name after ``after``, done or running or both; with
        ``max_bytes``, cut as :meth:`limit` says."""
        p = self.p
        where = [f"parent = {p}"]
        params: list[object] = [parent]
        if after is not None:
            where.append(f"name > {p}")
            params.append(after)
        if done is not None:
            where.append(f"done = {p}")
            params.append(done)
        where_sql = " AND ".join(where)
        order = "ORDER BY operations.name ASC"
        limit_sql = self.limit(
            "operations",
            where,
            params,
            column="operations.name",
            order=order,
            limit=limit,
            max_bytes=max_bytes,
        )
        statement = f"SELECT data FROM operations WHERE {where_sql} {order} {limit_sql}"
        return statement, params


class TableSql:
    """The statements of one generic table (:mod:`ces_eval.storage.tables`) in one dialect.

    ``insert``, ``get`` (``data``), ``exists``, ``update`` (every column but the identity, name
    and parent, where name and etag match), ``lock`` (the etag, locking the row),
    ``lock_data`` (the data, locking the row), ``delete``,
    ``display_name`` (who holds a display name within a parent), ``reset`` (``name LIKE``);
    :meth:`list` composes a page."""

    def __init__(self, sql: Sql, table: Table[Any]) -> None:
        self._sql = sql
        self._table = table
        p = sql.p
        name = table.name
        columns = table.column_names
        json_columns = table.json_columns
        self.insert = sql.insert(name, columns, {}, json_columns)
        self.get = f"SELECT data FROM {name} WHERE name = {p}"
        self.exists = f"SELECT 1 FROM {name} WHERE name = {p}"
        self.update = sql.update(name, columns[2:], f"name = {p} AND etag = {p}", json_columns)
        self.lock = f"SELECT etag FROM {name} WHERE name = {p}{sql.lock_row}"
        self.lock_data = f"SELECT data FROM {name} WHERE name = {p}{sql.lock_row}"
        self.delete = f"DELETE FROM {name} WHERE name = {p}"
        self.display_name = f"SELECT name FROM {name} WHERE parent = {p} AND display_name = {p}"
        self.reset = f"DELETE FROM {name} WHERE name LIKE {p} ESCAPE '\\'"
        self._orders = {order.field: order.sql.format(table=name) for order in table.orders}

    def count(self, parents: int) -> str:
        """How many rows each of ``parents`` parents has (parameters: the parents): rows of
        (parent, count), none for a parent without rows. One statement for a whole page of
        parents, over the index on parent."""
        name = self._table.name
        listed = ", ".join([self._sql.p] * parents)
        return f"SELECT parent, count(*) FROM {name} WHERE parent IN ({listed}) GROUP BY parent"

    def list(self, query: ListQuery) -> tuple[str, list[object]]:
        """One page of a parent's rows: ``data, name, <sort value>``."""
        sql = self._sql
        name = self._table.name
        where = [f"{name}.parent = {sql.p}"]
        params: list[object] = [query.parent]
        condition, values = sql.compile(query.filter, self._table.filter_fields, "filter")
        where.append(f"({condition})")
        params += values
        return sql.page(name, "data", where, params, query, orders=self._orders), params


@cache
def _table_sql(sql: Sql, table: Table[Any]) -> TableSql:
    return TableSql(sql, table)


SQLITE = Sql(
    filtering.SQLITE,
    json_param="?",
    empty_blob="x''",
    # One writer at a time (the group commit's thread): a transaction never meets another's
    # locks, so it takes none.
    lock_row="",
    lock_skip="",
    # Spelled so that the (done, owner) index serves it; NOT done would not.
    running="done = 0",
    lease_clock="?",
    expired="lease_until < ?",
    database_clock=False,
    migrations_table=(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)"
    ),
    record_migration="INSERT INTO schema_migrations VALUES (?, ?, strftime('%s','now'))",
    name_list="(SELECT value FROM json_each(?))",
    find="instr",
)
# Any constant shared by every replica: the advisory lock that serializes migrations.
_MIGRATION_LOCK = 0x6365735F6576616C  # "ces_eval"
# Each evaluation's newest results (LATERAL over the array of names, in its order), read within
# the byte budget as Sql.limit reads a page: from the stored lengths, so no blob past the
# budget's last result is read; the first result always.
_NEWEST = (
    "SELECT e.name AS evaluation, e.n, r.name, r.create_time, length(r.data) AS size "
    "FROM unnest(%s::text[]) WITH ORDINALITY AS e(name, n) "
    "CROSS JOIN LATERAL (SELECT name, create_time, data FROM evaluation_results "
    "WHERE evaluation = e.name ORDER BY create_time DESC, name DESC LIMIT %s) r"
)
_NEWEST_ORDER = "n, create_time DESC, name DESC"
_RECENT_RESULTS_BATCH = (
    "SELECT page.evaluation, r.data FROM ("
    "SELECT evaluation, n, name, create_time, sum(size) OVER "
    f"(ORDER BY {_NEWEST_ORDER} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before "
    f"FROM ({_NEWEST}) AS newest) AS page "
    "JOIN evaluation_results r ON r.name = page.name "
    "WHERE page.before IS NULL OR %s::bigint IS NULL OR page.before <= %s::bigint "
    "ORDER BY page.n, page.create_time DESC, page.name DESC"
)
POSTGRESQL = Sql(
    filtering.POSTGRESQL,
    json_param="%s::jsonb",
    empty_blob="''::bytea",
    lock_row=" FOR UPDATE",
    # Rows another process is finishing at the same moment are skipped, not waited for.
    lock_skip=" FOR UPDATE SKIP LOCKED",
    running="NOT done",
    lease_clock="now() + make_interval(secs => %s)",
    expired="lease_until < now()",
    database_clock=True,
    migrations_table=(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
        "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    ),
    record_migration="INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
    name_list="(SELECT jsonb_array_elements_text(%s::jsonb))",
    find="strpos",
    migration_lock=f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})",
    recent_results_batch=_RECENT_RESULTS_BATCH,
)
