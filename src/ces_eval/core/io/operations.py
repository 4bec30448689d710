"""Long-running operations (AIP-151): persisted, run in the background, cancellable.

An operation is stored before its work starts, so a caller can always read it; its final state
(response or error) is written once, when the work ends. Work runs as asyncio tasks of the
server process, at most ``concurrency`` at a time, in slots shared fairly between projects
(:class:`_Slots`): one project's work never takes every slot while another's waits.

Each operation belongs to the process that started it (its ``owner``), which renews a lease on
it every third of the lease while it runs, and in the same round trip learns which of its
operations another process was asked to cancel. A process that dies stops renewing: every
process fails the operations whose lease ran out, so no operation is ever left running forever.
With a database only one process uses (SQLite), :meth:`OperationRunner.recover` fails every
unfinished operation at start-up instead of waiting for leases.

An export's temporary file names its owner (:meth:`OperationRunner.export_owner`: the database
and the operation), so the runner removes such a file only once its operation is done, whoever
wrote it: at start (everything of this database, when no other process uses it) and whenever
operations of stopped processes are failed.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from google.longrunning import operations_pb2
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2

from ces_eval.contract import limits
from ces_eval.core.aip import names
from ces_eval.core.aip.stamps import now
from ces_eval.core.io import objects
from ces_eval.errors import Code, ServiceError
from ces_eval.storage.base import Unavailable

if TYPE_CHECKING:
    from pathlib import Path

    from google.protobuf.message import Message

    from ces_eval.core.aip.ports import Guard
    from ces_eval.storage.base import Storage

__all__ = ["OperationRunner"]

_log = logging.getLogger(__name__)
_CRASHED = status_pb2.Status(
    code=code_pb2.ABORTED,
    message="The server stopped while this operation was running; start it again.",
)
_SHUTDOWN = status_pb2.Status(
    code=code_pb2.UNAVAILABLE,
    message="The server shut down before this operation finished; start it again.",
)
_CANCELLED = status_pb2.Status(code=code_pb2.CANCELLED, message="The operation was cancelled.")
_FINISH_RETRY_MAX = 2.0  # seconds between attempts to record an operation's end
# The metadata fields that say a cancellation was requested (the API spells it both ways).
_CANCEL_FLAGS = frozenset({"requested_cancellation", "cancel_requested"})
# The operation whose work runs in this context (set by OperationRunner._run).
_CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("ces_eval_operation", default="")


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _project_of(operation: str) -> str:
    """The project of an operation named ``projects/{project}/locations/{l}/operations/{o}``."""
    parts = operation.split("/", 2)
    return parts[1] if len(parts) > 1 and parts[0] == "projects" else ""


class _Slots:
    """The runner's ``count`` operation slots, shared between projects (docs/semantics.md,
    "Long-running operations"): a project holds at most ``max(1, count - 1)`` of them, so
    that another project's work always finds one free however long the first project's
    work takes (runs against a slow agent, held runs). A freed slot goes to the waiting work
    whose project holds the fewest slots, and among equals to the work that asked first: one
    project's queue does not make another's wait behind it. Work waiting for a slot is
    cancellable; it leaves the queue without a slot."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._share = max(1, count - 1)
        self._held: dict[str, int] = {}
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []  # in the order they asked

    async def acquire(self, project: str) -> None:
        """Take a slot for ``project``, waiting for it as the class says."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((project, waiter))
        self._hand_out()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(project)  # handed a slot just as the work was cancelled
            else:
                self._waiting = [entry for entry in self._waiting if entry[1] is not waiter]
            raise

    def release(self, project: str) -> None:
        """Give back a slot ``project`` held; the next waiting work takes it."""
        held = self._held[project] - 1
        if held:
            self._held[project] = held
        else:
            del self._held[project]
        self._free += 1
        self._hand_out()

    def _hand_out(self) -> None:
        while self._free and self._waiting:
            # A waiter cancelled meanwhile leaves the queue (acquire removes it once its task
            # runs again; a slot must not go to it before then).
            self._waiting = [entry for entry in self._waiting if not entry[1].done()]
            eligible = [
                (self._held.get(project, 0), index)
                for index, (project, _) in enumerate(self._waiting)
                if self._held.get(project, 0) < self._share
            ]
            if not eligible:
                return
            _, index = min(eligible)
            project, waiter = self._waiting.pop(index)
            self._held[project] = self._held.get(project, 0) + 1
            self._free -= 1
            waiter.set_result(None)


class OperationRunner:
    """Starts, finishes, cancels and recovers operations over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        concurrency: int = 4,
        lease: float = 30.0,
        export_root: Path | None = None,
    ) -> None:
        self._storage = storage
        self._export_root = export_root
        self._database_tag = ""  # set by recover(): which database the exports belong to
        self._slots = _Slots(concurrency)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._metadata: dict[str, Message] = {}
        self._stopping = False
        self._lease = lease
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self._keeper: asyncio.Task[None] | None = None

    async def recover(self) -> int:
        """Fail the operations nothing runs any more (all unfinished ones when no other process
        shares the database, else those whose lease ran out), then keep this process's leases
        alive in the background."""
        if self._storage.shared:
            count = await self._storage.fail_expired(_CRASHED)
        else:
            count = await self._storage.fail_unfinished(_CRASHED)
        if count:
            _log.warning("marked %d interrupted operation(s) as failed", count)
        secret = await self._storage.secret()
        self._database_tag = hashlib.sha256(b"ces-eval export owner\0" + secret).hexdigest()[:12]
        # Not shared: no export of this database runs anywhere now, so all of its temporary
        # files are abandoned, and no query is needed to tell.
        await self.sweep_exports(everything=not self._storage.shared)
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep_leases(), name="operation-leases")
        return count

    async def _keep_leases(self) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                await self.tend()
            except Exception:  # noqa: BLE001 - the database may be away for a moment; retry
                _log.exception("could not renew operation leases")

    async def tend(self) -> None:
        """One heartbeat: renew this process's leases, cancel the work others asked to cancel,
        and fail operations whose owner stopped renewing."""
        for name in await self._storage.renew_leases(self.owner, self._lease):
            task = self._tasks.get(name)
            if task is not None and not task.done():
                task.cancel()
        if count := await self._storage.fail_expired(_CRASHED):
            _log.warning("marked %d operation(s) of stopped processes as failed", count)
            await self.sweep_exports()

    def export_owner(self) -> str:
        """The owner for the temporary file of an export written by the work running now
        (objects.write_atomically): this database's tag and the operation's name, so that any
        process on the database can tell when the file is abandoned. Only the tag when the
        name would not fit in a file name; empty outside an operation or before recover()."""
        parts = _CURRENT.get().split("/")
        if not self._database_tag or len(parts) != 6:  # projects/p/locations/l/operations/o
            return self._database_tag
        owner = "+".join((self._database_tag, parts[1], parts[3], parts[5]))
        return owner if len(owner) <= objects.OWNER_MAX else self._database_tag

    def _operation_of(self, owner: str) -> str | None:
        """The operation recorded in ``owner`` (see export_owner), if of this database."""
        fields = owner.split("+")
        if len(fields) != 4 or fields[0] != self._database_tag:
            return None
        _, project, location, operation = fields
        return f"projects/{project}/locations/{location}/operations/{operation}"

    async def sweep_exports(self, *, everything: bool = False) -> int:
        """Remove the temporary files of exports that provably no process writes any more:
        with ``everything`` (start-up of a database no other process uses), every file of this
        database and of older versions (which recorded no owner); otherwise only the files
        whose operation is done (finished, or failed when its owner's lease ran out). A file
        whose operation is still running, is unknown here (another database's, or deleted), or
        has no owner is kept. Returns how many were removed."""
        root = self._export_root
        if root is None:
            return 0
        tag = self._database_tag

        def ours(owner: str) -> bool:
            return owner.split("+", 1)[0] in ("", tag)

        abandoned: Callable[[str], bool] = ours
        if not everything:
            done: set[str] = set()
            for owner in await asyncio.to_thread(objects.temporary_owners, root):
                name = self._operation_of(owner)
                if name is not None:
                    operation = await self._storage.get_operation(name)
                    if operation is not None and operation.done:
                        done.add(owner)
            abandoned = done.__contains__
        removed = await asyncio.to_thread(objects.sweep_temporary, root, abandoned)
        if removed:
            _log.warning("removed %d partial export file(s) of interrupted operations", removed)
        return removed

    async def start(
        self,
        parent: str,
        method: str,
        metadata: Message,
        work: Callable[[], Awaitable[Message]],
        *,
        name: str = "",
        ready: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
    ) -> operations_pb2.Operation:
        """Persist a new operation under ``parent`` (``projects/p/locations/l``), named
        ``name`` when given (from :meth:`new_name`, for work that records it elsewhere first),
        and run ``work`` in the background; its result becomes the operation's response.
        ``ready``, when given, is awaited first, before the work takes one of the runner's
        slots: work that waits for something else (a held run) does not keep others waiting.
        ``guard``, when given, is the work's own guard: the runner awaits what comes before
        the work (``ready``, then a slot) through it, so that a cancellation or a shutdown
        there reaches the work's side as one during the work does (a run waiting for a slot
        ends CANCELLED or ERROR, never left QUEUED)."""
        operation = self.new_operation(parent, metadata, name)
        await self._storage.insert_operation(operation, method, self.owner, self._lease)
        self.adopt(operation, metadata, work, ready, guard)
        return operation

    def new_operation(
        self, parent: str, metadata: Message, name: str = ""
    ) -> operations_pb2.Operation:
        """A new operation (not stored yet) under ``parent``, named ``name`` or afresh, its
        ``metadata`` stamped with its create_time."""
        if "create_time" in metadata.DESCRIPTOR.fields_by_name:
            getattr(metadata, "create_time").CopyFrom(now())  # noqa: B009 - optional field
        return operations_pb2.Operation(
            name=name or self.new_name(parent), metadata=_pack(metadata), done=False
        )

    def adopt(
        self,
        operation: operations_pb2.Operation,
        metadata: Message,
        work: Callable[[], Awaitable[Message]],
        ready: Callable[[], Awaitable[None]] | None = None,
        guard: Guard | None = None,
    ) -> None:
        """Run ``work`` (after ``ready``, through ``guard``, as :meth:`start` does) for
        ``operation``, which the caller stored with this process as its owner (in a
        transaction of its own)."""
        self._metadata[operation.name] = metadata
        task = asyncio.create_task(self._run(operation, work, ready, guard), name=operation.name)
        self._tasks[operation.name] = task
        task.add_done_callback(lambda _: self._tasks.pop(operation.name, None))

    @property
    def lease(self) -> float:
        """How long (seconds) this process's lease on an operation lasts unless renewed."""
        return self._lease

    @staticmethod
    def new_name(parent: str) -> str:
        """A fresh operation name under ``parent`` (``projects/p/locations/l``)."""
        return f"{parent}/operations/{names.new_id()}"

    @property
    def stopping(self) -> bool:
        """Whether the server is shutting down: work cancelled now is stopped by the shutdown,
        not by a caller's CancelOperation."""
        return self._stopping

    async def _run(
        self,
        operation: operations_pb2.Operation,
        work: Callable[[], Awaitable[Message]],
        ready: Callable[[], Awaitable[None]] | None,
        guard: Guard | None,
    ) -> None:
        final = operations_pb2.Operation()
        final.CopyFrom(operation)
        final.done = True
        _CURRENT.set(operation.name)  # this task's own context: seen by its work only
        project = _project_of(operation.name)
        holding = False

        async def admitted() -> None:
            nonlocal holding
            if ready is not None:
                await ready()
            await self._slots.acquire(project)
            holding = True

        try:
            try:
                await (admitted() if guard is None else guard(admitted()))
                response = await work()
            finally:
                if holding:
                    self._slots.release(project)
            final.response.CopyFrom(_pack(response))
        except asyncio.CancelledError:
            final.error.CopyFrom(_SHUTDOWN if self._stopping else _CANCELLED)
            self._mark_cancelled()
        except ServiceError as error:
            final.error.CopyFrom(error.to_status())
        except Exception:  # noqa: BLE001 - a failed operation, never a crashed server
            _log.exception("operation %s failed", operation.name)
            final.error.CopyFrom(
                ServiceError(
                    Code.INTERNAL, "Internal error; see the server log.", "INTERNAL"
                ).to_status()
            )
        metadata = self._metadata.pop(operation.name, None)
        if metadata is not None:
            if "end_time" in metadata.DESCRIPTOR.fields_by_name:
                getattr(metadata, "end_time").CopyFrom(now())  # noqa: B009 - optional field
            if final.error.code == code_pb2.CANCELLED:
                fields = metadata.DESCRIPTOR.fields_by_name
                for flag in (flag for flag in _CANCEL_FLAGS if flag in fields):
                    setattr(metadata, flag, True)
            final.metadata.CopyFrom(_pack(metadata))
        limits.bound_operation(final)  # the last resort: stored within what clients read
        await self._finish(final)

    async def _finish(self, final: operations_pb2.Operation) -> None:
        """Store ``final``, again and again while the database cannot take it (disk full, an
        outage): work that ended must not leave its operation running until the next start."""
        delay = 0.0
        while True:
            try:
                await asyncio.shield(self._storage.finish_operation(final))
            except Unavailable as error:
                if self._stopping:  # shutdown() records it, or logs that it could not
                    return
                if not delay:  # the first failure; the log need not repeat it
                    _log.warning("cannot record the end of %s (%s); retrying", final.name, error)
                delay = min(delay * 2 or 0.05, _FINISH_RETRY_MAX)
                await asyncio.sleep(delay)
            else:
                return

    def _mark_cancelled(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()

    async def cancel(self, name: str) -> operations_pb2.Operation | None:
        """Request cancellation (AIP-151: best effort); the operation ends CANCELLED if its work
        had not finished. None when there is no such operation."""
        operation = await self._storage.request_cancel(name)
        task = self._tasks.get(name)
        if task is not None and not task.done():
            task.cancel()
            # asyncio.wait never raises the task's own CancelledError; one raised here is the
            # caller's (its deadline, its disconnect) and must propagate.
            await asyncio.wait([task], timeout=30)
        return operation

    async def wait(self, name: str, timeout: float) -> operations_pb2.Operation | None:
        """The operation once done, or as it is when ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            operation = await self._storage.get_operation(name)
            if operation is None or operation.done or time.monotonic() >= deadline:
                return operation
            task = self._tasks.get(name)
            remaining = max(0.0, deadline - time.monotonic())
            if task is not None:
                await asyncio.wait([task], timeout=min(remaining, 1.0))
            else:
                await asyncio.sleep(min(delay, remaining))
                delay = min(delay * 2, 0.5)

    async def shutdown(self) -> None:
        """Stop running work; its operations end with UNAVAILABLE (SIGTERM path).

        Never raises for a database that cannot take the record (full disk, files removed
        under a SQLite server, an outage): the server must still stop cleanly, so one line says
        what was left unrecorded and who fails it later."""
        self._stopping = True
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.wait([self._keeper])
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=30)
        try:
            await self._storage.fail_unfinished(_SHUTDOWN, owner=self.owner)
        except Unavailable as error:
            later = (
                "the other servers mark them failed once their lease runs out"
                if self._storage.shared
                else "the next start marks them failed"
            )
            _log.warning(
                "could not record at stop that this process's unfinished operations ended "
                "(%d were running): %s; %s",
                len(tasks),
                error,
                later,
            )
