"""The caller of a request, from its credentials or its claimed user.

Authentication stays outside the core (which receives a finished :class:`Caller`): the
surfaces call :func:`identify` with what the request carried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.access import bearer
from ces_eval.core.caller import DEFAULT_USER, Caller

if TYPE_CHECKING:
    from ces_eval.access import Tokens

__all__ = ["identify"]


def identify(tokens: Tokens | None, authorization: str | None, user: str | None = None) -> Caller:
    """The caller of a request that carried ``authorization`` (the Authorization header's
    value) and ``user`` (``x-goog-user``). Without a token table the server is open and
    ``user`` names the caller; with one, the token must be valid (else UNAUTHENTICATED) and
    its principal's name is recorded, whatever ``user`` claims."""
    if tokens is None:
        name = user.strip() if user else ""
        return Caller(user=name or DEFAULT_USER)
    principal = tokens.authenticate(bearer(authorization), presented=bool(authorization))
    return Caller(user=principal.name, principal=principal)
