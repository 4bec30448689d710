"""The operation runner's slots over a real SQLite file (docs/semantics.md, "Long-running
operations"): one project never holds every slot while another waits, a freed slot goes to the
waiting project holding the fewest, and work cancelled or shut down while it waits for a slot
is seen by its own guard, as a cancellation during the work is."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from google.rpc import code_pb2

from ces_eval.core.aip.ports import Guard
from ces_eval.core.io.operations import OperationRunner
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine
    from pathlib import Path

    from google.longrunning import operations_pb2
    from google.protobuf.message import Message


class _Works:
    """Work that records when it starts and runs until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._releases: dict[str, asyncio.Event] = {}

    def work(self, label: str) -> Callable[[], Awaitable[Message]]:
        release = self._releases.setdefault(label, asyncio.Event())

        async def run() -> Message:
            self.started.append(label)
            await release.wait()
            return service_pb2.OperationMetadata()

        return run

    async def start(
        self, runner: OperationRunner, project: str, label: str, guard: Guard | None = None
    ) -> operations_pb2.Operation:
        """Start the work ``label`` in an operation of ``project``."""
        parent = f"projects/{project}/locations/l"
        metadata = service_pb2.OperationMetadata()
        return await runner.start(parent, "M", metadata, self.work(label), guard=guard)

    def release(self, label: str) -> None:
        self._releases[label].set()


async def _settle() -> None:
    """Let every task that can run do so (the runner's own steps, the storage's threads)."""
    for _ in range(20):
        await asyncio.sleep(0.01)


def _scenario(tmp_path: Path, body: Callable[[OperationRunner], Awaitable[None]]) -> None:
    async def scenario() -> None:
        storage = SqliteStorage(tmp_path / "db.sqlite")
        await storage.open()
        runner = OperationRunner(storage, concurrency=4)
        try:
            await body(runner)
        finally:
            await runner.shutdown()
            await storage.close()

    asyncio.run(scenario())


def test_one_project_leaves_another_a_slot(tmp_path: Path) -> None:
    """Five operations of project a, four slots: a holds three, and b's operation runs at once
    (before: a held all four and b waited for one of them to end)."""

    async def body(runner: OperationRunner) -> None:
        works = _Works()
        for index in range(5):
            await works.start(runner, "a", f"a{index}")
        await _settle()
        assert works.started == ["a0", "a1", "a2"]  # max(1, 4 - 1) of the 4 slots
        other = await works.start(runner, "b", "b")
        await _settle()
        assert works.started == ["a0", "a1", "a2", "b"]
        works.release("b")
        done = await runner.wait(other.name, timeout=10)
        assert done is not None and done.done and not done.HasField("error")
        # b's slot is free again, but a holds its share: a's next work waits for one of a's.
        await _settle()
        assert works.started == ["a0", "a1", "a2", "b"]
        works.release("a0")
        await _settle()
        assert works.started == ["a0", "a1", "a2", "b", "a3"]

    _scenario(tmp_path, body)


def test_a_freed_slot_goes_to_the_waiting_project_holding_fewest(tmp_path: Path) -> None:
    async def body(runner: OperationRunner) -> None:
        works = _Works()

        async def start(project: str, label: str) -> None:
            await works.start(runner, project, label)
            await _settle()

        for label in ("a0", "a1", "a2"):
            await start("a", label)
        await start("b", "b0")
        assert works.started == ["a0", "a1", "a2", "b0"]  # every slot taken
        for project, label in (("a", "a3"), ("b", "b1"), ("c", "c0"), ("c", "c1")):
            await start(project, label)
        assert len(works.started) == 4  # all four wait, in this order
        # a frees one: c, holding none, goes before a and b, which asked first; then b frees
        # one and holds none; then a and c hold one each, and a asked first; then c.
        for freed, expected in (("a0", "c0"), ("b0", "b1"), ("a1", "a3"), ("a2", "c1")):
            works.release(freed)
            await _settle()
            assert works.started[-1] == expected, (freed, works.started)

    _scenario(tmp_path, body)


def _guard(seen: list[str], runner: OperationRunner) -> Guard:
    """A guard that records what ended the work it guards: a cancellation or a shutdown."""

    async def guard(step: Coroutine[Any, Any, None]) -> None:
        try:
            await step
        except asyncio.CancelledError:
            seen.append("stopping" if runner.stopping else "cancelled")
            raise

    return guard


def test_work_cancelled_while_it_waits_for_a_slot_is_seen_by_its_guard(tmp_path: Path) -> None:
    async def body(runner: OperationRunner) -> None:
        works = _Works()
        for index in range(3):
            await works.start(runner, "a", f"a{index}")
        seen: list[str] = []
        waiting = await works.start(runner, "a", "a3", _guard(seen, runner))
        await _settle()
        assert "a3" not in works.started
        await runner.cancel(waiting.name)
        done = await runner.wait(waiting.name, timeout=10)
        assert done is not None and done.error.code == code_pb2.CANCELLED
        assert seen == ["cancelled"] and "a3" not in works.started
        # Shut down while one waits: its guard sees the server stop.
        stopped = await works.start(runner, "a", "a4", _guard(seen, runner))
        await _settle()
        await runner.shutdown()
        assert seen == ["cancelled", "stopping"] and "a4" not in works.started
        done = await runner.wait(stopped.name, timeout=10)
        assert done is not None and done.error.code == code_pb2.UNAVAILABLE

    _scenario(tmp_path, body)
