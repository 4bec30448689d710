"""The storage contract: what the service core needs from a database (docs/architecture.md).

Backends (SQLite, PostgreSQL) implement :class:`Storage`; one contract test suite runs against
each. Resources cross this boundary as protobuf messages; a backend keeps whatever columns it
needs for filtering, ordering and constraints. Outcomes are reported with the exceptions of
:mod:`.errors` (re-exported here, all :class:`StorageError`) and translated into API errors by
the core.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ces_eval.storage.errors import (
    Conflict,
    EtagMismatch,
    InUse,
    InvalidFilter,
    Missing,
    StorageError,
    TooLarge,
    Unavailable,
)

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message
    from google.rpc import status_pb2

    from ces_eval.filtering import Expr
    from ces_eval.generated.google.cloud.ces.v1beta import conversation_pb2, evaluation_pb2
    from ces_eval.storage.tables import Table

M = TypeVar("M", bound="Message")


@dataclass(frozen=True)
class Insert:
    """A change of :meth:`Storage.write_rows`: store ``message`` as a new row of ``table``
    (:meth:`Storage.insert_row`)."""

    table: Table[Any]
    message: Message


@dataclass(frozen=True)
class Replace:
    """A change of :meth:`Storage.write_rows`: overwrite the row of ``message``'s name if its
    etag is still ``expected_etag`` (:meth:`Storage.replace_row`)."""

    table: Table[Any]
    message: Message
    expected_etag: str


@dataclass(frozen=True)
class Delete:
    """A change of :meth:`Storage.write_rows`: delete the row ``name`` of ``table``, only in
    ``expected_etag`` when given (:meth:`Storage.delete_row`: the row alone, not its subtree)."""

    table: Table[Any]
    name: str
    expected_etag: str | None


# One change of a transactional batch (Storage.write_rows).
Change = Insert | Replace | Delete

__all__ = [
    "Change",
    "Conflict",
    "Cursor",
    "Delete",
    "EtagMismatch",
    "InUse",
    "Insert",
    "InvalidFilter",
    "ListQuery",
    "Missing",
    "OrderBy",
    "Replace",
    "ResetCounts",
    "SortKey",
    "Storage",
    "StorageError",
    "TooLarge",
    "Unavailable",
]


class SortKey(enum.Enum):
    """Orderings the seeds allow (AIP-132) for every collection: name, create_time,
    update_time. A generic table may declare more
    (:attr:`~ces_eval.storage.tables.Table.orders`)."""

    NAME = "name"
    CREATE_TIME = "create_time"
    UPDATE_TIME = "update_time"


@dataclass(frozen=True)
class OrderBy:
    """``key``: a :class:`SortKey`, or the ``order_by`` field of an order the listed table
    declares (``next_scheduled_execution``)."""

    key: SortKey | str
    descending: bool

    @property
    def field(self) -> str:
        return self.key.value if isinstance(self.key, SortKey) else self.key


@dataclass(frozen=True)
class Cursor:
    """Where the previous page ended: its last row's sort value and name (keyset pagination)."""

    value: str | int
    name: str


@dataclass(frozen=True)
class ListQuery:
    """One page of a collection.

    ``parent`` is the collection owner; for results it may be an app (all evaluations, the
    AIP-159 ``-`` wildcard) or one evaluation. ``run_filter`` restricts evaluations to those with
    a result of an evaluation run matching it, over the run's fields
    (ListEvaluationsRequest.evaluation_run_filter).

    ``max_bytes`` bounds what is read besides ``limit``: a row is read only while the rows
    before it hold at most that many stored bytes (an evaluation's data and derived fields, a
    result's data), or when it is the first or second. The first row past the budget is
    therefore the last one returned, and tells the caller that more follow; no row after it is
    read (the sizes come from the stored lengths, not from reading the rows).
    """

    parent: str
    order: OrderBy
    limit: int
    filter: Expr | None = None
    run_filter: Expr | None = None
    after: Cursor | None = None
    across_evaluations: bool = False
    max_bytes: int | None = None


@dataclass(frozen=True)
class ResetCounts:
    """What a project reset deleted; ``others``: the resources of each generic table, by
    collection ID (``evaluationRuns``)."""

    evaluations: int = 0
    evaluation_results: int = 0
    operations: int = 0
    others: Mapping[str, int] = field(default_factory=dict)


class Storage(Protocol):
    """Persistence of evaluations and results. Every write is durable when the call returns."""

    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None: ...

    async def secret(self) -> bytes:
        """A random key created once per database, shared by every process using it."""

    @property
    def shared(self) -> bool:
        """Whether several server processes may use this database at once (replicas)."""

    async def ping(self) -> None:
        """Raise if the database cannot answer a trivial query now."""

    async def version(self) -> int | None:
        """A number that changes whenever a write commits, by any process (None: this
        database cannot tell). What was read at one version still holds while it lasts."""

    async def insert_evaluation(self, evaluation: evaluation_pb2.Evaluation) -> None:
        """Store a new evaluation (name, times and etag already set).

        Raises Conflict on a taken name or a display name taken within the app.
        """

    async def get_evaluation(self, name: str) -> evaluation_pb2.Evaluation | None:
        """The evaluation with its derived fields, or None."""

    async def read_evaluation(self, name: str) -> bytes | None:
        """:meth:`get_evaluation`'s answer as its wire bytes, unparsed (``contract.encoded``)."""

    async def list_evaluations(
        self, query: ListQuery
    ) -> list[tuple[evaluation_pb2.Evaluation, Cursor]]:
        """Up to ``query.limit`` evaluations after ``query.after``, each with its cursor."""

    async def replace_evaluation(
        self, evaluation: evaluation_pb2.Evaluation, expected_etag: str
    ) -> None:
        """Overwrite the stored evaluation if its etag is still ``expected_etag``.

        Raises Missing, EtagMismatch, or Conflict (display name).
        """

    async def delete_evaluation(
        self, name: str, expected_etag: str | None, *, dataset_etag: str
    ) -> None:
        """Delete an evaluation and its results, and take it out of the datasets that list
        it (each gets ``dataset_etag``). Raises Missing or EtagMismatch."""

    async def recent_results(
        self, evaluations: Sequence[str], count: int, max_bytes: int | None = None
    ) -> dict[str, list[evaluation_pb2.EvaluationResult]]:
        """The ``count`` newest results of each evaluation, newest first. With ``max_bytes``,
        taken in that order (evaluations as given) only while the results before hold at most
        that many stored bytes: the first one past it is the last returned, and evaluations
        after it get none."""

    async def insert_result(
        self,
        result: evaluation_pb2.EvaluationResult,
        parent_etag: str,
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        """Store a new result; recompute its evaluation's derived fields and give the
        evaluation ``parent_etag``. Raises Missing (evaluation) or Conflict; TooLarge (nothing
        stored) when the evaluation, served with its new derived fields, would be larger than
        ``max_evaluation_bytes`` and larger than it was (the same for every result write)."""

    async def get_result(self, name: str) -> evaluation_pb2.EvaluationResult | None: ...

    async def read_result(self, name: str) -> bytes | None:
        """:meth:`get_result`'s answer as its wire bytes, unparsed."""

    async def replace_result(
        self,
        result: evaluation_pb2.EvaluationResult,
        parent_etag: str,
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        """Overwrite a stored result, recompute its evaluation's derived fields and give the
        evaluation ``parent_etag``. Raises Missing or TooLarge."""

    async def import_bundle(
        self,
        evaluations: Sequence[evaluation_pb2.Evaluation],
        results: Sequence[evaluation_pb2.EvaluationResult],
        *,
        max_evaluation_bytes: int | None = None,
        replacing: Sequence[str] = (),
    ) -> None:
        """Store evaluations (with their etags) and results in one transaction, then derive.
        The stored evaluations named in ``replacing`` are deleted first (with their results),
        in the same transaction: an import that overwrites them. Raises Conflict (nothing
        stored) on a taken name or display name, Missing when a result's evaluation is neither
        stored nor imported or an evaluation to replace is gone, TooLarge (nothing stored) for
        the first evaluation the results would make too large."""

    async def list_results(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        """Up to ``query.limit`` results after ``query.after``, each serialized as stored
        (pages are copied into responses without parsing every result twice), with its cursor."""

    async def delete_result(self, name: str, parent_etag: str) -> None:
        """Delete a result and recompute its evaluation's derived fields. Raises Missing."""

    async def reset_project(self, project: str | None) -> ResetCounts:
        """Delete everything stored under ``projects/{project}/``, or under every project
        (None)."""

    async def locations(self, project: str) -> list[str]:
        """The location IDs that names stored under ``projects/{project}/`` use, sorted."""

    async def apps(self) -> list[str]:
        """The names of the apps that hold an evaluation or are stored, sorted (the web view's
        index)."""

    # -- generic tables (ces_eval.storage.tables) ---------------------------------------------

    async def insert_row(self, table: Table[M], message: M) -> None:
        """Store a new resource of ``table`` (name, times and etag already set). Raises
        Conflict on a taken name or (where the table says so) a display name taken within the
        parent."""

    async def get_row(self, table: Table[M], name: str) -> M | None: ...

    async def read_row(self, table: Table[M], name: str) -> bytes | None:
        """:meth:`get_row`'s answer as its wire bytes, unparsed."""

    async def list_rows(self, table: Table[M], query: ListQuery) -> list[tuple[bytes, Cursor]]:
        """Up to ``query.limit`` rows of ``query.parent`` after ``query.after``, serialized
        as stored, each with its cursor."""

    async def count_rows(self, table: Table[M], parents: Sequence[str]) -> dict[str, int]:
        """How many resources of ``table`` each of ``parents`` holds (0 for none), read in
        one statement: a count derived when read (an app's ``deployment_count``), never
        stored."""

    async def replace_row(self, table: Table[M], message: M, expected_etag: str) -> None:
        """Overwrite the stored resource if its etag is still ``expected_etag``. Raises
        Missing, EtagMismatch or Conflict (display name)."""

    async def write_rows(self, changes: Sequence[Change]) -> None:
        """Each of ``changes`` (:class:`Insert`, :class:`Replace`, :class:`Delete`, over any
        generic tables), in order, all in one transaction: when one raises (Conflict,
        EtagMismatch, Missing, as the single-row methods do), none is stored, so no reader
        sees some of them without the others. Uniqueness holds after each change: a display
        name passes from one row to another by deleting the first before writing the second."""

    async def delete_row(self, table: Table[M], name: str, expected_etag: str | None) -> None:
        """Delete a resource of ``table``. Raises Missing or EtagMismatch."""

    async def delete_tree(self, table: Table[M], name: str, expected_etag: str | None) -> None:
        """:meth:`delete_row`, and in the same transaction every resource stored under
        ``name`` (an app's evaluations, results and the rows of every generic table)."""

    # -- evaluation datasets (a generic table's rows, tables.DATASETS, with side effects) ------
    # The evaluations a dataset lists hold its name in their evaluation_datasets (each one whose
    # list a write changes gets ``evaluation_etag``, in the dataset write's transaction); a
    # dataset is served with its aggregated_metrics, the sum of its evaluations' metrics
    # tallies, read with it and never stored.

    async def insert_dataset(
        self, dataset: evaluation_pb2.EvaluationDataset, evaluation_etag: str
    ) -> evaluation_pb2.AggregatedMetrics:
        """Store a new dataset; return its aggregated_metrics. Raises Conflict as insert_row,
        Missing(evaluation) when one it lists is not stored."""

    async def get_dataset(self, name: str) -> evaluation_pb2.EvaluationDataset | None: ...

    async def list_datasets(self, query: ListQuery) -> list[tuple[bytes, Cursor]]:
        """A page of datasets as list_rows, each with its aggregated_metrics."""

    async def replace_dataset(
        self,
        dataset: evaluation_pb2.EvaluationDataset,
        expected_etag: str,
        evaluation_etag: str,
    ) -> evaluation_pb2.AggregatedMetrics:
        """Overwrite a dataset whose etag is still ``expected_etag``; return its
        aggregated_metrics. Raises Missing (the dataset, or an evaluation it now lists that is
        not stored), EtagMismatch or Conflict."""

    async def delete_dataset(
        self, name: str, expected_etag: str | None, evaluation_etag: str
    ) -> None:
        """Delete a dataset. Raises Missing or EtagMismatch."""

    async def delete_evaluation_run(self, name: str, evaluation_etag: str) -> int:
        """Delete the evaluation run ``name`` (of :data:`~.tables.RUNS`) and the results whose
        ``evaluation_run`` it is, in one transaction; the derived fields of their evaluations
        follow, and each of them gets ``evaluation_etag``. Returns how many results were
        deleted. Raises Missing."""

    async def record_run(
        self,
        run: evaluation_pb2.EvaluationRun,
        results: Sequence[evaluation_pb2.EvaluationResult],
        conversations: Sequence[conversation_pb2.Conversation],
        evaluation_etag: str,
        *,
        max_evaluation_bytes: int | None = None,
    ) -> None:
        """Store the run ``run`` (of :data:`~.tables.RUNS`, replacing its row) with new
        ``results`` it produced and the ``conversations`` (of :data:`~.tables.CONVERSATIONS`)
        they played, in one transaction, so that its progress never counts a result that is
        not stored; the results' evaluations get their derived fields brought up to date and
        ``evaluation_etag``. Raises Missing (the run or an evaluation), Conflict (a taken
        name or display name), TooLarge (see insert_result); nothing is stored then."""

    # -- the scheduler -----------------------------------------------------------------------

    async def due_schedules(
        self, before: int, limit: int
    ) -> list[evaluation_pb2.ScheduledEvaluationRun]:
        """Up to ``limit`` scheduled runs (of every project) whose next execution is at or
        before ``before`` (microseconds since the epoch), soonest first."""

    async def fire_schedule(
        self,
        schedule: evaluation_pb2.ScheduledEvaluationRun,
        expected_etag: str,
        run: evaluation_pb2.EvaluationRun,
        operation: tuple[operations_pb2.Operation, str, str, float] | None,
    ) -> None:
        """Replace ``schedule`` (fired: its count and next execution moved) if its etag is
        still ``expected_etag``, store the ``run`` it started and that run's operation
        (operation, method, owner, lease, as insert_operation takes them; None for a run that
        ended at once), all in one transaction: one firing per due time, whoever tries.
        Raises EtagMismatch or Missing (the schedule), Conflict; nothing is stored then."""

    # -- long-running operations -----------------------------------------------------------

    async def insert_operation(
        self, operation: operations_pb2.Operation, method: str, owner: str, lease: float
    ) -> None:
        """Store a new operation (not done) started by ``method``, run by the process
        ``owner``, whose lease on it lasts ``lease`` seconds unless renewed."""

    async def get_operation(self, name: str) -> operations_pb2.Operation | None: ...

    async def list_operations(
        self,
        parent: str,
        limit: int,
        after: str | None,
        done: bool | None,
        max_bytes: int | None = None,
    ) -> list[operations_pb2.Operation]:
        """Operations under ``parent`` (``projects/p/locations/l``) by name, after ``after``;
        ``done`` restricts to finished or running ones; ``max_bytes`` as in ListQuery."""

    async def finish_operation(self, operation: operations_pb2.Operation) -> bool:
        """Record the final state of a running operation; False if it was already done."""

    async def update_running_operation(self, operation: operations_pb2.Operation) -> bool:
        """Replace the metadata of an operation that is still running; False if done."""

    async def request_cancel(self, name: str) -> operations_pb2.Operation | None:
        """Mark an operation's cancellation as requested; None if it does not exist."""

    async def cancel_requested(self, name: str) -> bool: ...

    async def delete_operation(self, name: str) -> bool:
        """Forget an operation; False if it does not exist."""

    async def renew_leases(self, owner: str, lease: float) -> list[str]:
        """Extend to ``lease`` seconds from now the lease of every running operation of
        ``owner``; return the names of those whose cancellation was requested (by any process)."""

    async def fail_expired(self, error: status_pb2.Status) -> int:
        """Mark every running operation whose lease ran out as done with ``error``: the process
        that ran it is gone. Returns how many. Lease times are the database's clock where the
        database has one shared by every process."""

    async def fail_unfinished(self, error: status_pb2.Status, owner: str | None = None) -> int:
        """Mark every running operation of ``owner`` (of any owner when None: start-up recovery
        of a database no other process uses) as done with ``error``. Returns how many."""
