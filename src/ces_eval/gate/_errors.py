"""The one error of ``ces-eval run``: the run could not be done (exit status 2)."""

from __future__ import annotations

__all__ = ["NOT_DONE", "RunNotDone"]

NOT_DONE = 2  # the exit status: bad arguments, server unreachable or refusing, run not COMPLETED


class RunNotDone(Exception):
    """Why the run could not be done, in one line for the terminal (never a traceback)."""
