"""How many sessions a run plays at once (core/engine/sessions.py; docs/agents.md,
"Concurrency"), driven directly on an event loop, no HTTP: the run's slots and the server's,
a back-off that gives its slots back, a cancelled wait, and the limit halving on push backs
and climbing back on answers."""

from __future__ import annotations

import asyncio

import pytest

from ces_eval.core.engine.pace import UNPACED, Pace
from ces_eval.core.engine.sessions import DROP_WINDOW, RunPace, Slots, server_slots


class _Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


async def _settle() -> None:
    """Let every task ready to run take its steps."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_run_plays_at_most_its_limit_and_the_server_bounds_every_run() -> None:
    async def check() -> None:
        server = Slots(3)
        first, second = RunPace(2, server), RunPace(2, server)
        release = asyncio.Event()
        most = {"first": 0, "second": 0, "all": 0}

        async def session(pace: RunPace, label: str) -> None:
            async with pace.session():
                most[label] = max(most[label], pace.playing)
                most["all"] = max(most["all"], server.taken)
                await release.wait()

        tasks = [asyncio.ensure_future(session(first, "first")) for _ in range(4)]
        tasks += [asyncio.ensure_future(session(second, "second")) for _ in range(4)]
        await _settle()
        assert (first.playing, second.playing, server.taken) == (2, 1, 3)
        release.set()
        await asyncio.gather(*tasks)
        assert (most["first"], most["all"]) == (2, 3) and most["second"] <= 2
        assert (first.playing, second.playing, server.taken) == (0, 0, 0)

    asyncio.run(check())


def test_a_pause_gives_the_sessions_slots_back_meanwhile() -> None:
    async def check() -> None:
        server = Slots(10)
        pace = RunPace(1, server)
        order: list[str] = []
        paused = asyncio.Event()

        async def backing_off() -> None:
            async with pace.session():
                order.append("first calls")
                paused.set()
                await pace.pause(0.05)
                order.append("first calls again")

        async def other() -> None:
            await paused.wait()
            async with pace.session():
                order.append("second plays")

        await asyncio.gather(backing_off(), other())
        assert order == ["first calls", "second plays", "first calls again"]
        assert (pace.playing, server.taken) == (0, 0)

    asyncio.run(check())


def test_a_pause_outside_a_session_only_sleeps() -> None:
    async def check() -> None:
        pace = RunPace(1, Slots(1))
        pace_seam: Pace = pace
        await pace_seam.pause(0)
        await UNPACED.pause(0)
        assert pace.playing == 0

    asyncio.run(check())


def test_a_session_cancelled_while_it_waits_or_pauses_holds_no_slot() -> None:
    async def check() -> None:
        server = Slots(10)
        pace = RunPace(1, server)
        holding = asyncio.Event()

        async def holder() -> None:
            async with pace.session():
                holding.set()
                await pace.pause(60)

        async def waiter() -> None:
            async with pace.session():
                await asyncio.sleep(60)

        first = asyncio.ensure_future(holder())
        await holding.wait()
        second = asyncio.ensure_future(waiter())  # takes the slot the pause gave back
        await _settle()
        assert pace.playing == 1
        third = asyncio.ensure_future(waiter())  # waits for it
        await _settle()
        for task in (first, second, third):
            task.cancel()
        await asyncio.wait([first, second, third])
        assert (pace.playing, server.taken) == (0, 0)
        async with pace.session():  # nothing leaked: the slot is free
            assert pace.playing == 1

    asyncio.run(check())


def test_push_backs_halve_the_limit_once_per_window_and_answers_raise_it() -> None:
    clock = _Clock()
    pace = RunPace(16, Slots(64), clock)
    assert pace.limit == 16
    pace.pushed_back()
    assert pace.limit == 8
    for _ in range(5):  # the rest of the burst, within the window
        pace.pushed_back()
    assert pace.limit == 8
    for limit in (4, 2, 1, 1):
        clock.at += DROP_WINDOW
        pace.pushed_back()
        assert pace.limit == limit  # never below 1
    pace.answered()
    assert pace.limit == 2  # 1 answered call at limit 1
    pace.answered()
    assert pace.limit == 2
    pace.pushed_back()  # within the window: the limit stays, the answers count again
    pace.answered()
    assert pace.limit == 2
    pace.answered()
    assert pace.limit == 3
    for _ in range(3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 + 14 + 15):
        pace.answered()
    assert pace.limit == 16
    for _ in range(100):
        pace.answered()
    assert pace.limit == 16  # never past the endpoint's number


def test_a_lower_limit_lets_no_new_session_in_until_fewer_play() -> None:
    async def check() -> None:
        pace = RunPace(4, Slots(64))
        release = [asyncio.Event() for _ in range(4)]

        async def session(index: int) -> None:
            async with pace.session():
                await release[index].wait()

        playing = [asyncio.ensure_future(session(index)) for index in range(4)]
        await _settle()
        pace.pushed_back()
        assert (pace.limit, pace.playing) == (2, 4)  # none stopped
        late = asyncio.Event()

        async def latecomer() -> None:
            async with pace.session():
                late.set()

        waiting = asyncio.ensure_future(latecomer())
        for index in range(3):
            release[index].set()
            await _settle()
            assert late.is_set() == (index == 2), index  # in once one plays
        release[3].set()
        await asyncio.gather(*playing, waiting)

    asyncio.run(check())


class _Owner:
    """Stands for a server's agent HTTP port."""


@pytest.mark.parametrize("limit", [1, 64])
def test_the_server_slots_are_one_per_owner(limit: int) -> None:
    owner, other = _Owner(), _Owner()
    assert server_slots(owner, limit) is server_slots(owner, limit)
    assert server_slots(owner, limit).limit == limit
    assert server_slots(other, limit) is not server_slots(owner, limit)
