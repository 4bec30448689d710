"""How resources map to table rows, shared by the SQL backends.

Both backends keep the same tables (``evaluations``, ``evaluation_results``, ``operations``) with
the same columns; they differ in column types, placeholders and transaction plumbing. This module
holds what does not differ: the filterable columns, the keyset page clauses, and the conversion of
messages to rows and back. SQL text is built with the backend's placeholder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval import filtering
from ces_eval.core import derived
from ces_eval.generated.google.cloud.ces.v1beta import common_pb2, evaluation_pb2
from ces_eval.storage.base import InvalidFilter, ListQuery, SortKey, TooLarge

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from google.protobuf import timestamp_pb2
    from google.protobuf.descriptor import EnumDescriptor

    from ces_eval.core.derived import Tally

__all__ = [
    "EVALUATION_COLUMNS",
    "EVALUATION_FILTER_FIELDS",
    "RESULT_COLUMNS",
    "RESULT_FILTER_FIELDS",
    "RUN_FILTER_FIELDS",
    "Sql",
    "derived_blob",
    "evaluation_from_row",
    "evaluation_row",
    "micros",
    "now_micros",
    "refuse_growth",
    "result_row",
    "tally_change",
    "tally_json",
    "tally_of",
    "updated_tally",
]

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation


def micros(timestamp: timestamp_pb2.Timestamp) -> int:
    return int(timestamp.seconds) * 1_000_000 + int(timestamp.nanos) // 1000


def now_micros() -> int:
    """This process's clock, in the unit of the time columns."""
    return time.time_ns() // 1000


def _enum_values(enum: EnumDescriptor) -> dict[str, int]:
    return {value.name: value.number for value in enum.values}


def _specs(
    table: str, specs: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]]
) -> dict[str, filtering.FieldSpec]:
    """Filter fields by proto name and by JSON name, with columns qualified by ``table``."""
    out: dict[str, filtering.FieldSpec] = {}
    for name, (column, kind, values) in specs.items():
        spec = filtering.FieldSpec(column=f"{table}.{column}", kind=kind, enum_values=values)
        out[name] = spec
        head, *rest = name.split("_")
        out[head + "".join(part.title() for part in rest)] = spec
    return out


_K = filtering.FieldKind
EVALUATION_FILTER_FIELDS = _specs(
    "evaluations",
    {
        "name": ("name", _K.STRING, {}),
        "display_name": ("display_name", _K.STRING, {}),
        "description": ("description", _K.STRING, {}),
        "create_time": ("create_time", _K.TIMESTAMP, {}),
        "update_time": ("update_time", _K.TIMESTAMP, {}),
        "created_by": ("created_by", _K.STRING, {}),
        "last_updated_by": ("last_updated_by", _K.STRING, {}),
        "tags": ("tags", _K.STRING_LIST, {}),
        "evaluation_datasets": ("evaluation_datasets", _K.STRING_LIST, {}),
    },
)
_RESULT_SPECS: dict[str, tuple[str, filtering.FieldKind, dict[str, int]]] = {
    "name": ("name", _K.STRING, {}),
    "evaluation": ("evaluation", _K.STRING, {}),
    "display_name": ("display_name", _K.STRING, {}),
    "create_time": ("create_time", _K.TIMESTAMP, {}),
    "evaluation_run": ("evaluation_run", _K.STRING, {}),
    "execution_state": (
        "execution_state",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["ExecutionState"]),
    ),
    "evaluation_status": (
        "evaluation_status",
        _K.ENUM,
        _enum_values(_Result.DESCRIPTOR.enum_types_by_name["Outcome"]),
    ),
    "app_version": ("app_version", _K.STRING, {}),
    "initiated_by": ("initiated_by", _K.STRING, {}),
    "golden_run_method": (
        "golden_run_method",
        _K.ENUM,
        _enum_values(common_pb2.DESCRIPTOR.enum_types_by_name["GoldenRunMethod"]),
    ),
}
RESULT_FILTER_FIELDS = _specs("evaluation_results", _RESULT_SPECS)
# evaluation_run_filter: the same result fields, over the results of the evaluation in the row.
RUN_FILTER_FIELDS = _specs("r", _RESULT_SPECS)

_JSON_COLUMNS = frozenset({"tags", "evaluation_datasets"})
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


@dataclass(frozen=True)
class Sql:
    """Statement text shared by the backends, in one backend's dialect.

    ``json_param`` is the placeholder of a JSON array column (string lists), with whatever cast
    the backend's column type needs.
    """

    dialect: filtering.Dialect
    json_param: str

    @property
    def p(self) -> str:
        """The placeholder."""
        return self.dialect.placeholder

    def _param(self, column: str) -> str:
        return self.json_param if column in _JSON_COLUMNS else self.p

    def insert(self, table: str, columns: Sequence[str], extra: dict[str, str]) -> str:
        """``INSERT`` of ``columns`` (parameters) and ``extra`` (column → SQL expression)."""
        names = [*columns, *extra]
        values = [self._param(column) for column in columns] + list(extra.values())
        return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(values)})"  # noqa: S608 - fixed identifiers; values are parameters

    def update(self, table: str, columns: Sequence[str], where: str) -> str:
        """``UPDATE`` setting ``columns`` (parameters, in order) for rows matching ``where``."""
        assignments = ", ".join(f"{column} = {self._param(column)}" for column in columns)
        return f"UPDATE {table} SET {assignments} WHERE {where}"  # noqa: S608 - fixed identifiers; values are parameters

    def compile(
        self, expr: filtering.Expr | None, fields: dict[str, filtering.FieldSpec], which: str
    ) -> tuple[str, list[object]]:
        """A filter as a condition and its parameters; InvalidFilter names ``which``."""
        try:
            return filtering.compile_filter(expr, fields, self.dialect)
        except filtering.FilterError as error:
            raise InvalidFilter(which, error) from error

    def page(
        self, table: str, columns: str, where: list[str], params: list[object], query: ListQuery
    ) -> str:
        """``SELECT <columns>, name, <sort column>`` of one keyset page; appends the page's
        parameters (cursor, limit, byte budget) to ``params``.

        The page starts strictly after the cursor's (sort column, name); the name breaks ties in
        the same direction as the sort column, so one index scan in one direction serves the page
        with no sort step, however deep the page is. With ``query.max_bytes`` the page ends at the
        first row past the budget (:meth:`limit`).
        """
        sort = _SORT_COLUMNS[query.order.key]
        column = f"{table}.{sort}"
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
            f"SELECT {columns}, name, {sort} FROM {table} "  # noqa: S608 - fixed identifiers, compiled clauses; values are parameters
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
    ) -> str:
        """The ``LIMIT`` of a page of ``table`` whose rows ``where`` selects in ``order`` (an
        ``ORDER BY`` clause: ``column``, then name); appends its parameters to ``params``
        (which holds those of ``where``).

        With ``max_bytes``, the limit is also a byte budget: a row is read only while the rows
        before it hold at most ``max_bytes`` stored bytes, or when it is among the first two
        (a caller then sees more follow even after a row larger than the budget). The number
        of such rows comes from the same selection read for its stored lengths alone (both
        engines read a blob's length without reading the blob), so the page itself remains one
        index range, read in order, that stops at its last row.
        """
        p = self.p
        if max_bytes is None:
            params.append(limit)
            return f"LIMIT {p}"
        direction = "DESC" if order.endswith("DESC") else "ASC"
        window = f"ORDER BY name {direction}"
        if column != f"{table}.name":
            window = f"ORDER BY sort_value {direction}, name {direction}"
        sizes = (
            f"SELECT {column} AS sort_value, {table}.name AS name, "  # noqa: S608 - fixed identifiers, compiled clauses; values are parameters
            f"{_STORED_BYTES[table]} AS size FROM {table} WHERE {' AND '.join(where)} "
            f"{order} LIMIT {p}"
        )
        counted = (
            f"SELECT row_number() OVER ({window}) AS position, "  # noqa: S608 - fixed identifiers
            f"sum(size) OVER ({window} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) "
            f"AS before FROM ({sizes}) AS sizes"
        )
        params += [*params, limit, max_bytes]
        return (
            f"LIMIT (SELECT count(*) FROM ({counted}) AS counted "  # noqa: S608 - fixed identifiers; values are parameters
            f"WHERE position <= 2 OR before <= {p})"
        )

    def list_evaluations(self, query: ListQuery) -> tuple[str, list[object]]:
        """One page of an app's evaluations: ``data, derived, etag, name, <sort value>``."""
        where = [f"evaluations.app = {self.p}"]
        params: list[object] = [query.parent]
        sql, values = self.compile(query.filter, EVALUATION_FILTER_FIELDS, "filter")
        where.append(f"({sql})")
        params += values
        if query.run_filter is not None:
            sql, values = self.compile(query.run_filter, RUN_FILTER_FIELDS, "run_filter")
            where.append(
                "EXISTS (SELECT 1 FROM evaluation_results r "  # noqa: S608 - compiled clause, values are parameters
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
        done: bool | None,
        max_bytes: int | None = None,
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
        statement = f"SELECT data FROM operations WHERE {where_sql} {order} {limit_sql}"  # noqa: S608 - fixed clauses
        return statement, params

    def runs_of(self) -> str:
        """The evaluation's distinct non-empty runs, most recent first (by their results'
        latest create_time, then name); one parameter: the evaluation."""
        p = self.p
        return (
            "SELECT evaluation_run FROM evaluation_results "  # noqa: S608 - placeholder only
            f"WHERE evaluation = {p} AND evaluation_run <> '' GROUP BY evaluation_run "
            "ORDER BY max(create_time) DESC, evaluation_run ASC"
        )

    def last_completed_of(self) -> str:
        """The data of the evaluation's newest COMPLETED result (by create_time, then name);
        parameters: the evaluation, the COMPLETED enum number."""
        p = self.p
        return (
            "SELECT data FROM evaluation_results "  # noqa: S608 - placeholder only
            f"WHERE evaluation = {p} AND execution_state = {p} "
            "ORDER BY create_time DESC, name DESC LIMIT 1"
        )

    def display_name_owner(self, name: str, display_name: str) -> tuple[str, tuple[str, str]]:
        """SQL finding the resource that holds ``display_name`` in the scope of ``name``: the
        app for evaluations, the evaluation for results."""
        p = self.p
        if "/results/" in name:
            return (
                f"SELECT name FROM evaluation_results WHERE evaluation = {p} "  # noqa: S608 - placeholder only
                f"AND display_name = {p}",
                (name.rsplit("/results/", 1)[0], display_name),
            )
        return (
            f"SELECT name FROM evaluations WHERE app = {p} AND display_name = {p}",  # noqa: S608 - placeholder only
            (name.rsplit("/evaluations/", 1)[0], display_name),
        )


# Column order of evaluation_row / result_row, for INSERT and UPDATE statements. The first two
# (evaluations) or three (results) are the identity, never updated.
EVALUATION_COLUMNS = (
    "name",
    "app",
    "display_name",
    "description",
    "create_time",
    "update_time",
    "created_by",
    "last_updated_by",
    "tags",
    "evaluation_datasets",
    "etag",
    "data",
)
RESULT_COLUMNS = (
    "name",
    "evaluation",
    "app",
    "display_name",
    "create_time",
    "update_time",
    "evaluation_run",
    "execution_state",
    "evaluation_status",
    "app_version",
    "initiated_by",
    "golden_run_method",
    "data",
)


def evaluation_row(evaluation: _Evaluation) -> tuple[object, ...]:
    """The values of EVALUATION_COLUMNS; string lists are JSON arrays."""
    base = _Evaluation()
    base.CopyFrom(evaluation)
    # Fields computed from results (stored apart, in ``derived``, or read on demand) and the
    # etag (a column of its own) are never part of the ``data`` blob.
    for field in derived.FIELDS:
        base.ClearField(field)
    base.ClearField("last_ten_results")
    base.ClearField("etag")
    return (
        evaluation.name,
        evaluation.name.rsplit("/evaluations/", 1)[0],
        evaluation.display_name,
        evaluation.description,
        micros(evaluation.create_time),
        micros(evaluation.update_time),
        evaluation.created_by,
        evaluation.last_updated_by,
        json.dumps(list(evaluation.tags)),
        json.dumps(list(evaluation.evaluation_datasets)),
        evaluation.etag,
        base.SerializeToString(deterministic=True),
    )


def evaluation_from_row(data: bytes, derived: bytes, etag: str) -> _Evaluation:
    # Serialized protobuf messages merge when concatenated.
    return _Evaluation.FromString(
        bytes(data) + bytes(derived) + _Evaluation(etag=etag).SerializeToString()
    )


def refuse_growth(
    evaluation: str,
    stored: tuple[int, int, str],
    derived: bytes,
    etag: str,
    max_bytes: int | None,
) -> None:
    """Raise TooLarge when the evaluation whose row holds ``stored`` (the lengths of its data
    and derived blobs, its etag) would, served with the new ``derived`` blob and ``etag``, be
    larger than ``max_bytes`` and larger than it was. Its blobs hold disjoint fields, so its
    size as served is their lengths plus the etag's field: no blob is read or parsed."""
    if max_bytes is None:
        return
    data_length, derived_length, old_etag = stored
    before = data_length + derived_length + _Evaluation(etag=old_etag).ByteSize()
    after = data_length + len(derived) + _Evaluation(etag=etag).ByteSize()
    if after > max_bytes and after > before:
        raise TooLarge(evaluation, after)


def derived_blob(tally: Tally, runs: list[str], last_completed: bytes | None) -> bytes:
    """The ``derived`` column: the evaluation fields computed from its results — metrics
    rendered from the summed tallies, runs newest first, the newest completed result."""
    message = _Evaluation(aggregated_metrics=derived.render_tally(tally), evaluation_runs=runs)
    if last_completed is not None:
        message.last_completed_result.MergeFromString(last_completed)
    return message.SerializeToString(deterministic=True)


def tally_change(new: _Result | None, old: _Result | None) -> Tally:
    """How a write changes its evaluation's metrics tally: ``new`` stored, ``old`` gone."""
    change: Tally = {}
    if new is not None:
        derived.add_tally(change, derived.contribution(new))
    if old is not None:
        derived.add_tally(change, derived.contribution(old), sign=-1)
    return change


def tally_of(results: Iterable[bytes]) -> Tally:
    """The summed tally of serialized results (rows stored before incremental upkeep)."""
    total: Tally = {}
    for data in results:
        derived.add_tally(total, derived.contribution(_Result.FromString(bytes(data))))
    return total


def updated_tally(
    stored: str | None, change: Tally, results: Callable[[], Iterable[bytes]]
) -> Tally:
    """The tally after ``change``: the stored JSON plus the change, or — for an evaluation
    from before incremental upkeep (NULL) — the sum over ``results`` (which already reflect the
    write)."""
    if stored is None:
        return tally_of(results())
    tally: Tally = json.loads(stored)
    derived.add_tally(tally, change)
    return tally


def tally_json(tally: Tally) -> str:
    return json.dumps(tally, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def result_row(result: _Result) -> tuple[object, ...]:
    """The values of RESULT_COLUMNS; update_time is the moment of the write."""
    evaluation = result.name.rsplit("/results/", 1)[0]
    return (
        result.name,
        evaluation,
        evaluation.rsplit("/evaluations/", 1)[0],
        result.display_name,
        micros(result.create_time),
        now_micros(),
        result.evaluation_run,
        int(result.execution_state),
        int(result.evaluation_status),
        result.app_version,
        result.initiated_by,
        int(result.golden_run_method),
        result.SerializeToString(deterministic=True),
    )
