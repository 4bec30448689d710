"""The storage contract where several processes share one database (replicas).

Each test opens two or more Storage objects over the same PostgreSQL database, as replicas do, and
drives them concurrently: the database, not process memory, must decide every conflict. Operation
leases are exercised the same way. A SQLite file serves one process: a second opener is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from google.longrunning import operations_pb2
from google.rpc import code_pb2, status_pb2

from ces_eval.storage.base import Conflict, EtagMismatch, InUse, Storage
from ces_eval.storage.sqlite import SqliteStorage
from tests.contract.test_storage import (
    APP,
    BACKENDS,
    evaluation,
    result,
    storage_factory,
)

PARENT = "projects/p1/locations/l"
FAILED = status_pb2.Status(code=code_pb2.ABORTED, message="gone")


@pytest.fixture(params=[backend for backend in BACKENDS if backend != "sqlite"])
def make_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    return storage_factory(request, tmp_path)


def test_a_sqlite_file_serves_one_process_at_a_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = SqliteStorage(tmp_path / "db.sqlite")
        await first.open()
        second = SqliteStorage(tmp_path / "db.sqlite")
        with pytest.raises(InUse, match="in use by another ces-eval server"):
            await second.open()
        await first.close()
        await second.open()  # released on close
        await second.close()

    asyncio.run(scenario())


async def _replicas(make_storage: Callable[[], Storage], count: int) -> list[Storage]:
    """``count`` storages over one database, opened at the same time (migrations race)."""
    replicas = [make_storage() for _ in range(count)]
    await asyncio.gather(*(replica.open() for replica in replicas))
    return replicas


async def _close(replicas: list[Storage]) -> None:
    for replica in replicas:
        await replica.close()


def test_replicas_starting_together_migrate_once_and_share_the_secret(
    make_storage: Callable[[], Storage],
) -> None:
    async def scenario() -> None:
        replicas = await _replicas(make_storage, 4)
        secrets = {await replica.secret() for replica in replicas}
        await _close(replicas)
        assert len(secrets) == 1
        assert len(secrets.pop()) == 32

    asyncio.run(scenario())


def test_one_conditional_update_wins_per_etag(make_storage: Callable[[], Storage]) -> None:
    async def scenario() -> None:
        first, second = await _replicas(make_storage, 2)
        await first.insert_evaluation(evaluation(APP, "e1", "One", 1, etag="v0"))
        writers = [
            (first if index % 2 else second).replace_evaluation(
                evaluation(APP, "e1", f"Writer {index}", 1, etag=f"v1-{index}"),
                expected_etag="v0",
            )
            for index in range(12)
        ]
        outcomes = await asyncio.gather(*writers, return_exceptions=True)
        winners = [index for index, outcome in enumerate(outcomes) if outcome is None]
        losers = [outcome for outcome in outcomes if outcome is not None]
        assert len(winners) == 1, outcomes
        assert all(isinstance(outcome, EtagMismatch) for outcome in losers), losers
        for replica in (first, second):
            stored = await replica.get_evaluation(f"{APP}/evaluations/e1")
            assert stored is not None
            assert (stored.etag, stored.display_name) == (
                f"v1-{winners[0]}",
                f"Writer {winners[0]}",
            )
        await _close([first, second])

    asyncio.run(scenario())


def test_one_of_many_creates_gets_a_display_name(make_storage: Callable[[], Storage]) -> None:
    async def scenario() -> None:
        replicas = await _replicas(make_storage, 2)
        creates = [
            replicas[index % 2].insert_evaluation(evaluation(APP, f"e{index}", "Same", index))
            for index in range(20)
        ]
        outcomes = await asyncio.gather(*creates, return_exceptions=True)
        winners = [f"{APP}/evaluations/e{i}" for i, outcome in enumerate(outcomes) if not outcome]
        assert len(winners) == 1, outcomes
        conflicts = [outcome for outcome in outcomes if outcome is not None]
        assert all(isinstance(outcome, Conflict) for outcome in conflicts), conflicts
        assert {(c.field, c.existing) for c in conflicts if isinstance(c, Conflict)} == {
            ("display_name", winners[0])
        }
        await _close(replicas)

    asyncio.run(scenario())


def test_concurrent_result_writes_lose_no_derived_update(
    make_storage: Callable[[], Storage],
) -> None:
    async def scenario() -> None:
        first, second = await _replicas(make_storage, 2)
        parent = f"{APP}/evaluations/e1"
        await first.insert_evaluation(evaluation(APP, "e1", "One", 1))
        writes = [
            (first if index % 2 else second).insert_result(
                result(parent, f"r{index:02d}", index, run_id=f"run-{index % 3}"), f"p{index}"
            )
            for index in range(30)
        ]
        await asyncio.gather(*writes)
        stored = await second.get_evaluation(parent)
        assert stored is not None
        assert stored.aggregated_metrics.metrics_by_app_version[0].pass_count == 30
        assert len(stored.evaluation_runs) == 3
        assert stored.last_completed_result.name == f"{parent}/results/r29"
        await _close([first, second])

    asyncio.run(scenario())


def _operation(name: str) -> operations_pb2.Operation:
    return operations_pb2.Operation(name=f"{PARENT}/operations/{name}", done=False)


def test_operation_leases_cancellation_and_expiry(make_storage: Callable[[], Storage]) -> None:
    async def scenario() -> None:
        first, second = await _replicas(make_storage, 2)
        await first.insert_operation(_operation("long"), "M", owner="A", lease=60)
        await second.insert_operation(_operation("short"), "M", owner="B", lease=0.2)
        long_name, short_name = (f"{PARENT}/operations/{n}" for n in ("long", "short"))

        # Cancellation asked through one replica reaches the owner's next renewal only.
        assert await second.request_cancel(long_name) is not None
        assert await second.renew_leases("B", 0.2) == []
        assert await first.renew_leases("A", 60) == [long_name]

        # B stops renewing: its operation expires and any replica fails it, exactly once.
        await asyncio.sleep(0.5)
        counts = await asyncio.gather(first.fail_expired(FAILED), second.fail_expired(FAILED))
        assert sorted(counts) == [0, 1]
        expired = await first.get_operation(short_name)
        assert expired is not None
        assert expired.done
        assert expired.error.code == code_pb2.ABORTED
        # The owner finishing late does not overwrite the recorded failure.
        late = _operation("short")
        late.done = True
        assert not await second.finish_operation(late)

        # A's lease is long: nothing to expire; finishing works once.
        assert await second.fail_expired(FAILED) == 0
        done = _operation("long")
        done.done = True
        assert await first.finish_operation(done)
        assert not await first.finish_operation(done)
        await _close([first, second])

    asyncio.run(scenario())


def test_failing_unfinished_operations_is_scoped_to_their_owner(
    make_storage: Callable[[], Storage],
) -> None:
    async def scenario() -> None:
        (storage,) = await _replicas(make_storage, 1)
        await storage.insert_operation(_operation("a1"), "M", owner="A", lease=60)
        await storage.insert_operation(_operation("a2"), "M", owner="A", lease=60)
        await storage.insert_operation(_operation("b1"), "M", owner="B", lease=60)
        assert await storage.fail_unfinished(FAILED, owner="A") == 2
        running = await storage.list_operations(PARENT, 10, None, done=False)
        assert [operation.name for operation in running] == [f"{PARENT}/operations/b1"]
        assert await storage.fail_unfinished(FAILED) == 1
        assert await storage.list_operations(PARENT, 10, None, done=False) == []
        await _close([storage])

    asyncio.run(scenario())
