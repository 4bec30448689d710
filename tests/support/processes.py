"""A server's process tree: the workers of a ``--workers`` supervisor, and killing the whole
group outright (SIGKILL to every worker, then the supervisor), as a crash of the machine's
processes would."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ces_eval.testing.server import RunningServer

__all__ = ["kill_group", "worker_pids"]


def worker_pids(running: RunningServer) -> set[int]:
    """The live (not zombie) child processes of the supervisor."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(parent) == running.process.pid and state != "Z":
            found.add(int(entry.name))
    return found


def kill_group(running: RunningServer) -> None:
    """SIGKILL to every worker, then to the supervisor: nothing of the group records
    anything."""
    for pid in worker_pids(running):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    running.kill()
