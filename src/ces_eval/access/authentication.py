"""Authentication: the :class:`~ces_eval.access.caller.Caller` of a request, from the
credentials its surface decoded (the ``Authorization`` value: gRPC metadata, HTTP header, or
REST's ``access_token`` system parameter; and ``x-goog-user``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.access.caller import DEFAULT_USER, Caller
from ces_eval.access.tokens import bearer

if TYPE_CHECKING:
    from ces_eval.access.tokens import Tokens

__all__ = ["identify"]


def identify(tokens: Tokens | None, authorization: str | None, user: str | None = None) -> Caller:
    """The caller of a request that carried ``authorization`` (the Authorization value) and
    ``user`` (``x-goog-user``). Without a token table the server is open and ``user`` names the
    caller; with one, the token must be valid (else UNAUTHENTICATED, telling a missing token from
    a wrong one as RFC 6750 does) and its principal's name is recorded, whatever ``user``
    claims."""
    if tokens is None:
        name = user.strip() if user else ""
        return Caller(user=name or DEFAULT_USER)
    principal = tokens.authenticate(bearer(authorization), presented=bool(authorization))
    return Caller(user=principal.name, principal=principal)
