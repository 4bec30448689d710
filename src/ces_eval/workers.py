"""``ces-eval serve --workers N``: one machine's cores behind the same gRPC and HTTP ports.

A supervisor process serves no request itself. In order, it

1. with a SQLite database, opens the file as the single owner a one-process server is: it takes
   the file's lock (so a second ``ces-eval serve`` on the file is still refused), applies the
   migrations and fails the operations an earlier run left unfinished (nothing else can be
   running them), and holds the lock until every worker has exited. PostgreSQL needs none of
   this: workers are replicas like any other;
2. removes the temporary files of interrupted exports, once (a worker must not: another
   worker's export may be under way);
3. binds the gRPC and HTTP ports with SO_REUSEPORT without listening on them (with port 0 the
   kernel picks them), and keeps them bound, so the ports stay the group's across restarts;
4. starts N workers, ``python -m ces_eval.cli serve --worker-of FD`` with the concrete ports:
   each is a complete server (:func:`ces_eval.server.serve`) listening on the same two ports
   with SO_REUSEPORT, and the kernel spreads new connections over them. A worker opens a SQLite
   file shared, so its operations use leases, as replicas on PostgreSQL do;
5. prints the ready line a single server prints, once every worker reported ready over its
   socket (FD, a socketpair end it inherits).

SIGTERM or SIGINT: forwarded to every worker (as SIGTERM), which drains as a single server does;
the supervisor exits 0 once all of them exited cleanly, else 1. Workers run in their own process
groups, so a terminal's Ctrl-C reaches the supervisor only, which stops them in order.

A worker that exits on its own (crash, SIGKILL, out of memory) is logged and replaced by a new
one on the same ports; the operations it was running fail when their lease runs out (as with a
lost replica), and connections it had accepted are cut (clients retry). More than
``RESTART_LIMIT`` replacements within ``RESTART_WINDOW`` seconds, or a worker that fails before
the group first reported ready, stop the whole group with exit status 1: a fault that recurs is
better reported than hidden. Workers stop by themselves when the supervisor disappears (their
socket to it closes), e.g. after ``kill -9`` of the supervisor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING

from ces_eval import options
from ces_eval.core.io.operations import OperationRunner
from ces_eval.server import (
    ExitStatus,
    ServerConfig,
    StartupError,
    bind_sockets,
    open_database,
    ready_message,
    watch_lifeline,
)

if TYPE_CHECKING:
    from ces_eval.storage.base import Storage

__all__ = ["RESTART_LIMIT", "RESTART_WINDOW", "supervise"]

_log = logging.getLogger("ces_eval")
START_SECONDS = 60.0
# A worker's drain (10 s) plus stopping its operations (up to 30 s), with a margin.
STOP_SECONDS = 90.0
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0
_READY = b"ready\n"
_SQLITE = "sqlite:///"


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


@dataclasses.dataclass
class _Worker:
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @property
    def pid(self) -> int:
        return self.process.pid

    async def ready(self) -> bool | None:
        """True once the worker reported ready; False if it exited first (its socket closed);
        None if it stayed silent for START_SECONDS."""
        try:
            line = await asyncio.wait_for(self.reader.readline(), START_SECONDS)
        except TimeoutError:
            return None
        except OSError:
            return False
        return line == _READY

    def signal(self, signum: int) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    async def reap(self, grace: float) -> int:
        """Its exit status, killing it if it is still running after ``grace`` seconds."""
        try:
            return await asyncio.wait_for(asyncio.shield(self.process.wait()), grace)
        except TimeoutError:
            _log.error("worker %d did not stop within %g s; killing it", self.pid, grace)
            self.signal(signal.SIGKILL)
            return await self.process.wait()
        finally:
            self.writer.close()


class _Group:
    """N worker slots; each slot runs one worker at a time and replaces it when it dies."""

    def __init__(self, config: ServerConfig, count: int) -> None:
        self._config = config
        self._count = count
        self._live: dict[int, _Worker] = {}
        self._started = [asyncio.Event() for _ in range(count)]
        self._stop = asyncio.Event()
        self._stopping = False
        self._serving = False
        self._restarts: collections.deque[float] = collections.deque()
        self.failed = False
        self.interrupted: str | None = None  # the signal that stopped the start-up, if one did

    def stop(self, signum: int) -> None:
        if not self._serving and not self._stop.is_set():
            self.interrupted = signal.Signals(signum).name
        self._stop.set()

    def _fail(self, why: str) -> None:
        if not self._stop.is_set():
            _log.error("stopping all workers: %s", why)
        self.failed = True
        self._stop.set()

    def _may_restart(self) -> bool:
        now = time.monotonic()
        while self._restarts and self._restarts[0] < now - RESTART_WINDOW:
            self._restarts.popleft()
        if len(self._restarts) >= RESTART_LIMIT:
            return False
        self._restarts.append(now)
        return True

    def _arguments(self, link: int) -> list[str]:
        """A worker's command line: every option of the supervisor's configuration as a flag
        (the concrete ports among them), but the worker count and the lifeline (a worker's
        is its link, ``--worker-of``)."""
        without = ("workers", "lifeline")
        return [*options.arguments(self._config, without=without), "--worker-of", str(link)]

    async def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "ces_eval.cli",
                "serve",
                *self._arguments(theirs.fileno()),
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                process_group=0,  # a terminal's Ctrl-C goes to the supervisor only
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker's copy is its own; EOF reaches us when it exits
        reader, writer = await asyncio.open_connection(sock=ours)
        return _Worker(process, reader, writer)

    async def _slot(self, index: int) -> None:
        try:
            await self._run_slot(index)
        except Exception as error:  # noqa: BLE001 - e.g. cannot start a process: stop the group
            _log.exception("worker slot %d failed", index)
            self._fail(f"cannot run a worker: {error}")

    async def _run_slot(self, index: int) -> None:
        while not self._stop.is_set():
            worker = await self._spawn()
            self._live[index] = worker
            if self._stop.is_set():  # stop came while it was starting
                worker.signal(signal.SIGTERM)
            ready = await worker.ready()
            if ready:
                self._started[index].set()
            elif ready is None and not self._stop.is_set():
                _log.error("worker %d did not become ready within %g s", worker.pid, START_SECONDS)
                worker.signal(signal.SIGTERM)
            code = await worker.reap(STOP_SECONDS) if not ready else await self._watch(worker)
            del self._live[index]
            if self._stopping:
                if code not in (0, -signal.SIGTERM):
                    _log.error("worker %d %s while stopping", worker.pid, _describe(code))
                    self.failed = True
                return
            _log.error("worker %d %s unexpectedly", worker.pid, _describe(code))
            if not self._serving:
                self._fail("a worker failed to start")
                return
            if not self._may_restart():
                self._fail(f"more than {RESTART_LIMIT} worker restarts within {RESTART_WINDOW:g} s")
                return
            _log.warning("starting a worker to replace %d", worker.pid)

    async def _watch(self, worker: _Worker) -> int:
        """Wait for a ready worker to exit; after a stop request, for at most STOP_SECONDS."""
        exited = asyncio.ensure_future(worker.process.wait())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        return await worker.reap(STOP_SECONDS)

    async def run(self) -> None:
        """Start the workers, print the ready line once all are ready, and return when all have
        exited after a stop request or a failure."""
        slots = [asyncio.create_task(self._slot(i), name=f"worker-{i}") for i in range(self._count)]

        async def all_started() -> None:
            for event in self._started:
                await event.wait()

        async def stop_requested() -> None:
            await self._stop.wait()

        started = asyncio.create_task(all_started())
        stopped = asyncio.create_task(stop_requested())
        await asyncio.wait({started, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not self._stop.is_set():
            self._serving = True
            pids = ", ".join(str(w.pid) for w in self._live.values())
            print(
                ready_message(self._config, self._config.grpc_port, self._config.http_port)
                + f"\n  {self._count} worker processes (pids {pids})",
                file=sys.stderr,
                flush=True,
            )
        await stopped
        started.cancel()
        self._stopping = True
        for worker in list(self._live.values()):
            worker.signal(signal.SIGTERM)
        await asyncio.wait(slots)


async def _open_single_owner(config: ServerConfig) -> Storage | None:
    """A SQLite file opened as its single owner (lock, migrations, start-up recovery); None for
    PostgreSQL."""
    if not config.database.startswith(_SQLITE):
        return None
    database = await open_database(config)
    runner = OperationRunner(database, lease=config.operation_lease, export_root=config.export_dir)
    try:
        # Not shared: fails every operation an earlier run left running, removes their files.
        await runner.recover()
        await runner.shutdown()
    except BaseException:
        await database.close()
        raise
    return database


async def supervise(config: ServerConfig, workers: int) -> int:
    """Run ``workers`` worker processes serving ``config`` until SIGTERM or SIGINT; the exit
    status (0: every worker stopped cleanly). What stops the start raises
    :class:`StartupError`."""
    if config.database == _SQLITE + ":memory:":
        raise StartupError(
            "--workers: needs a database file or PostgreSQL: workers cannot share "
            "sqlite:///:memory:"
        )
    watch_lifeline(config.lifeline)  # its SIGTERM stops the workers too (below)
    held: list[socket.socket] = []
    owner: Storage | None = None
    try:
        # The ports first: a taken one changes nothing. Bound with SO_REUSEPORT for the
        # workers only after a bind without it showed that no other program holds them.
        held += bind_sockets(
            config.host, config.grpc_port, flag="--grpc-port", what="gRPC", shared=True
        )
        grpc_port = held[-1].getsockname()[1]
        http_held = bind_sockets(
            config.host, config.http_port, flag="--http-port", what="HTTP", shared=True
        )
        held += http_held
        owner = await _open_single_owner(config)
        group = _Group(
            dataclasses.replace(
                config, grpc_port=grpc_port, http_port=http_held[0].getsockname()[1]
            ),
            workers,
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, group.stop, signum)
        await group.run()
    finally:
        for sock in held:
            sock.close()
        if owner is not None:
            await owner.close()  # releases the SQLite file, now that no worker uses it
    if group.interrupted is not None and not group.failed:  # before the ready line: as cli.main
        print(
            f"ces-eval: start-up interrupted by {group.interrupted}; stopped",
            file=sys.stderr,
            flush=True,
        )
    else:
        print("ces-eval stopped", file=sys.stderr, flush=True)
    return ExitStatus.FAILED if group.failed else ExitStatus.STOPPED
