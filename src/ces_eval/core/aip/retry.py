"""The read-modify-write round, written once: read a stored resource, compute what replaces it,
write it on the condition that it is still the version read (its etag, AIP-154, or its absence),
and when another writer got there first, read again and reapply, a bounded number of times.

Every lost round is another writer's success, so the bound only limits the contention a call
rides out (:data:`ATTEMPTS`: 15 concurrent writers of one resource); past it the call gives up
with the error its caller names, ABORTED for every caller here (AIP-154: read it again and
retry). A round with a caller's etag never retries: a concurrent write is then the caller's
conflict, raised by the round itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["ATTEMPTS", "Changed", "rewrite"]

T = TypeVar("T")

# Rounds before a read-modify-write gives up.
ATTEMPTS = 16


class Changed(Exception):
    """Raised by a round whose conditional write found the stored resource changed (or created,
    or deleted) since its read: :func:`rewrite` runs it again. Raise it ``from`` the storage's
    exception, which becomes the cause of the error given up with."""


async def rewrite(
    round_: Callable[[], Awaitable[T]],
    given_up: Callable[[], Exception],
    attempts: int = ATTEMPTS,
) -> T:
    """What ``round_`` returns, run again each time it raises :class:`Changed`, at most
    ``attempts`` times; then ``given_up()`` is raised (from the last round's cause)."""
    for _ in range(attempts - 1):
        try:
            return await round_()
        except Changed:
            continue
    try:
        return await round_()
    except Changed as changed:
        raise given_up() from changed.__cause__
