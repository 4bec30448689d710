"""The Storage contract over the transaction scripts, shared by the SQL backends.

:class:`ScriptedStorage` implements every data method of :class:`~.base.Storage` once, as "run
this script (:mod:`._scripts`) in a write transaction / a read / a point read". A backend
subclasses it and supplies the three ways of running a script (``_transaction``, ``_query``,
``_point_query``) plus ``open``, ``close``, ``secret``, ``shared`` and ``ping``: its connections,
threads, locks, retries and error mapping. Scripts are passed as factories (a script started
once cannot be started again), so a backend may rerun a transaction the database aborted.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from ces_eval.generated.google.cloud.ces.v1beta import conversation_pb2, evaluation_pb2
from ces_eval.storage import _scripts
from ces_eval.storage._scripts import Rows, Script, Statement, Taken
from ces_eval.storage.errors import Conflict

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message
    from google.rpc import status_pb2

    from ces_eval.storage._dialect import Sql
    from ces_eval.storage.base import Change, Cursor, ListQuery, ResetCounts
    from ces_eval.storage.tables import Table

__all__ = ["ScriptedStorage"]

T = TypeVar("T")
M = TypeVar("M", bound="Message")
Make = Callable[[], Script[T]]
_Evaluation = evaluation_pb2.Evaluation
_Result = evaluation_pb2.EvaluationResult
_Dataset = evaluation_pb2.EvaluationDataset
_Metrics = evaluation_pb2.AggregatedMetrics


def _parsed(message_class: type[M], data: bytes | None) -> M | None:
    return None if data is None else message_class.FromString(data)


class ScriptedStorage(abc.ABC):
    """Storage methods as scripts; subclasses run them (see the module docstring)."""

    _sql: Sql

    @abc.abstractmethod
    async def _transaction(self, make: Make[T]) -> T:
        """Run the script ``make()`` in one write transaction; durable when this returns.
        Raises what the script raises (nothing of it committed), Taken for a statement whose
        ``unique`` a unique index refused, Unavailable when the database cannot take it."""

    @abc.abstractmethod
    async def _query(self, make: Make[T]) -> T:
        """Run the read-only script ``make()`` on the last committed state."""

    async def _point_query(self, statement: Statement, decode: Callable[[Rows], T]) -> T:
        """Read one row by primary key: ``decode`` of what ``statement`` answers (a backend
        may run it on a faster path than a script's)."""
        return await self._query(partial(_scripts.point, statement, decode))

    async def _write(self, make: Make[T]) -> T:
        try:
            return await self._transaction(make)
        except Taken as taken:
            raise await self._conflict(taken) from taken

    async def _conflict(self, taken: Taken) -> Conflict:
        """Which uniqueness rule ``taken`` broke; for a display name, who holds it (read
        after the transaction rolled back, so a row it inserted itself is never named)."""
        if not taken.on_display_name:
            return Conflict("name", taken.name)
        owner = await self._query(
            partial(_scripts.display_name_owner, self._sql, taken.name, taken.display_name)
        )
        return Conflict("display_name", owner)

    # -- evaluations -------------------------------------------------------------------------

    async def insert_evaluation(self, evaluation: _Evaluation) -> None:
        await self._write(partial(_scripts.insert_evaluation, self._sql, evaluation))

    async def read_evaluation(self, name: str) -> bytes | None:
        return await self._point_query(
            Statement(self._sql.evaluation_get, (name,)), _scripts.evaluation_bytes_of
        )

    async def get_evaluation(self, name: str) -> _Evaluation | None:
        return _parsed(_Evaluation, await self.read_evaluation(name))

    async def list_evaluations(self, query: ListQuery) -> list[tuple[_Evaluation, Cursor]]:
        return await self._query(partial(_scripts.list_evaluations, self._sql, query))

    async def replace_evaluation(self, evaluation: _Evaluation, expected_etag: str) -> None:
        await self._write(
            partial(_scripts.replace_evaluation, self._sql, evaluation, expected_etag)
        )

    async def delete_evaluation(
        self, name: str, expected_etag: str | None, *, dataset_etag: str
    ) -> None:
        await self._write(
            partial(_scripts.delete_evaluation, self._sql, name, expected_etag, dataset_etag)
        )

    # -- results -----------------------------------------------------------------------------

    async def recent_results(
        self, evaluations: Sequence[str], count: int, max_bytes: int | None = None
    ) -> dict[str, list[_Result]]:
        return await self._query(
            partial(_scripts.recent_results, self._sql, evaluations, count, max_bytes)
        )

    async def insert_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        await self._write(
            partial(_scripts.insert_result, self._sql, result, parent_etag, max_evaluation_bytes)
        )

    async def read_result(self, name: str) -> bytes | None:
        return await self._point_query(Statement(self._sql.result_get, (name,)), _scripts.data_of)

    async def get_result(self, name: str) -> _Result | None:
        return _parsed(_Result, await self.read_result(name))

    async def replace_result(
        self, result: _Result, parent_etag: str, *, max_evaluation_bytes: int | None = None
    ) -> None:
        await self._write(
            partial(_scripts.replace_result, self._sql, result, parent_etag, max_evaluation_bytes)
        )

    async def import_bundle(
        self,
        evaluations: Sequence[_Evaluation],
        results: Sequence[_Result],
        *,
        max_evaluation_bytes: int | None = None,
        replacing: Sequence[str] = (),
    ) -> None:
        await self._write(
            partial(
                _scripts.import_bundle,
                self._sql,
                evaluations,
                results,
                max_evaluation_bytes,
                replacing,
            )
        )

    async def list_results(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        return await self._query(partial(_scripts.list_results, self._sql, query))

    async def delete_result(self, name: str, parent_etag: str) -> None:
        await self._write(partial(_scripts.delete_result, self._sql, name, parent_etag))

    async def reset_project(self, project: str | None) -> ResetCounts:
        return await self._write(partial(_scripts.reset_project, self._sql, project))

    async def locations(self, project: str) -> list[str]:
        return await self._query(partial(_scripts.locations, self._sql, project))

    async def apps(self) -> list[str]:
        return await self._query(partial(_scripts.apps, self._sql))

    # -- generic tables ------------------------------------------------------------------------

    async def insert_row(self, table: Table[M], message: M) -> None:
        await self._write(partial(_scripts.insert_row, self._sql, table, message))

    async def read_row(self, table: Table[M], name: str) -> bytes | None:
        statement = Statement(self._sql.table(table).get, (name,))
        return await self._point_query(statement, _scripts.data_of)

    async def get_row(self, table: Table[M], name: str) -> M | None:
        return _parsed(table.message, await self.read_row(table, name))

    async def list_rows(self, table: Table[M], query: ListQuery) -> list[tuple[bytes, Cursor]]:
        return await self._query(partial(_scripts.list_rows, self._sql, table, query))

    async def count_rows(self, table: Table[M], parents: Sequence[str]) -> dict[str, int]:
        return await self._query(partial(_scripts.count_rows, self._sql, table, parents))

    async def replace_row(self, table: Table[M], message: M, expected_etag: str) -> None:
        await self._write(partial(_scripts.replace_row, self._sql, table, message, expected_etag))

    async def write_rows(self, changes: Sequence[Change]) -> None:
        await self._write(partial(_scripts.write_rows, self._sql, changes))

    async def delete_row(self, table: Table[M], name: str, expected_etag: str | None) -> None:
        await self._write(partial(_scripts.delete_row, self._sql, table, name, expected_etag))

    async def delete_tree(self, table: Table[M], name: str, expected_etag: str | None) -> None:
        await self._write(partial(_scripts.delete_tree, self._sql, table, name, expected_etag))

    # -- evaluation datasets -------------------------------------------------------------------

    async def insert_dataset(self, dataset: _Dataset, evaluation_etag: str) -> _Metrics:
        return await self._write(
            partial(_scripts.insert_dataset, self._sql, dataset, evaluation_etag)
        )

    async def get_dataset(self, name: str) -> _Dataset | None:
        return await self._query(partial(_scripts.get_dataset, self._sql, name))

    async def list_datasets(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        return await self._query(partial(_scripts.list_datasets, self._sql, query))

    async def replace_dataset(
        self, dataset: _Dataset, expected_etag: str, evaluation_etag: str
    ) -> _Metrics:
        return await self._write(
            partial(_scripts.replace_dataset, self._sql, dataset, expected_etag, evaluation_etag)
        )

    async def delete_dataset(
        self, name: str, expected_etag: str | None, evaluation_etag: str
    ) -> None:
        await self._write(
            partial(_scripts.delete_dataset, self._sql, name, expected_etag, evaluation_etag)
        )

    async def delete_evaluation_run(self, name: str, evaluation_etag: str) -> int:
        return await self._write(
            partial(_scripts.delete_evaluation_run, self._sql, name, evaluation_etag)
        )

    async def record_run(
        self,
        run: evaluation_pb2.EvaluationRun,
        results: Sequence[_Result],
        conversations: Sequence[conversation_pb2.Conversation],
        evaluation_etag: str,
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        await self._write(
            partial(
                _scripts.record_run,
                self._sql,
                run,
                results,
                conversations,
                evaluation_etag,
                max_bytes=max_evaluation_bytes,
            )
        )

    async def due_schedules(
        self, before: int, limit: int
    ) -> list[evaluation_pb2.ScheduledEvaluationRun]:
        # An index seek that finds nothing nearly every time: a point read (no thread hop on
        # SQLite), since every server process asks every second.
        statement = Statement(self._sql.schedules_due, (before, limit))
        return await self._point_query(statement, _scripts.schedules_of)

    async def fire_schedule(
        self,
        schedule: evaluation_pb2.ScheduledEvaluationRun,
        expected_etag: str,
        run: evaluation_pb2.EvaluationRun,
        operation: tuple[operations_pb2.Operation, str, str, float] | None,
    ) -> None:
        await self._write(
            partial(_scripts.fire_schedule, self._sql, schedule, expected_etag, run, operation)
        )

    # -- long-running operations -----------------------------------------------------------

    async def insert_operation(
        self, operation: operations_pb2.Operation, method: str, owner: str, lease: float
    ) -> None:
        await self._write(
            partial(_scripts.insert_operation, self._sql, operation, method, owner, lease)
        )

    async def get_operation(self, name: str) -> operations_pb2.Operation | None:
        return await self._point_query(
            Statement(self._sql.operation_get, (name,)), _scripts.operation_of
        )

    async def list_operations(
        self,
        parent: str,
        limit: int,
        after: str | None,
        done: bool | None,
        max_bytes: int | None = None,
    ) -> list[operations_pb2.Operation]:
        return await self._query(
            partial(
                _scripts.list_operations,
                self._sql,
                parent,
                limit,
                after,
                done=done,
                max_bytes=max_bytes,
            )
        )

    async def finish_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._write(partial(_scripts.replace_running, self._sql, operation))

    async def update_running_operation(self, operation: operations_pb2.Operation) -> bool:
        return await self._write(partial(_scripts.replace_running, self._sql, operation))

    async def request_cancel(self, name: str) -> operations_pb2.Operation | None:
        return await self._write(partial(_scripts.request_cancel, self._sql, name))

    async def cancel_requested(self, name: str) -> bool:
        return await self._point_query(
            Statement(self._sql.operation_cancel_requested, (name,)), _scripts.flag_of
        )

    async def delete_operation(self, name: str) -> bool:
        return await self._write(partial(_scripts.delete_operation, self._sql, name))

    async def renew_leases(self, owner: str, lease: float) -> list[str]:
        return await self._write(partial(_scripts.renew_leases, self._sql, owner, lease))

    async def fail_expired(self, error: status_pb2.Status) -> int:
        sql = self._sql
        # The clock is read when the transaction runs, not when it is queued.
        return await self._write(
            lambda: _scripts.fail_running(sql, Statement(sql.operations_expired, sql.now()), error)
        )

    async def fail_unfinished(self, error: status_pb2.Status, owner: str | None = None) -> int:
        sql = self._sql
        if owner is None:
            select = Statement(sql.operations_running)
        else:
            select = Statement(sql.operations_of_owner, (owner,))
        return await self._write(partial(_scripts.fail_running, sql, select, error))
