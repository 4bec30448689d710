"""Authentication: the :class:`~ces_eval.core.service.Caller` of a request, from the credentials
its surface decoded (the ``Authorization`` value: gRPC metadata, HTTP header, or REST's
``access_token`` system parameter; and ``x-goog-user``).

Not re-exported by :mod:`ces_eval.access`: the core imports that package (for
:func:`~ces_eval.access.authorization.authorize` and :class:`~ces_eval.access.tokens.Principal`)
while this module returns the core's ``Caller``; importing it from the package would make the two
import each other. Surfaces import it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.access.tokens import bearer
from ces_eval.core.caller import DEFAULT_USER, Caller

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
