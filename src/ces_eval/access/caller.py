"""Who calls the core, and the shape of a call as the surfaces dispatch it.

The surfaces' boundary authenticates a request (:func:`ces_eval.access.authentication.identify`)
and hands the core a finished :class:`Caller`: the core records its ``user`` (created_by,
last_updated_by) and never looks at credentials. Authorization wraps the core's handlers
(:func:`ces_eval.access.authorization.authorized`) before any surface sees them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.access.tokens import Principal
    from ces_eval.contract.encoded import Response

__all__ = ["DEFAULT_USER", "BidiHandler", "Caller", "Handler", "StreamHandler"]

DEFAULT_USER = "local-user@ces-eval.localhost"


@dataclass(frozen=True)
class Caller:
    """Who is calling: ``user`` is recorded in created_by / last_updated_by; ``principal`` is
    the authenticated token's principal when the server runs with ``--auth-tokens`` (None on an
    open server, where every project is reachable)."""

    user: str = DEFAULT_USER
    principal: Principal | None = None


# One RPC bound to a core: the request message and the caller in, the response out (a message,
# or one held as its wire bytes: ces_eval.contract.encoded), or a ServiceError raised. What the
# surfaces dispatch to (ces_eval.core.service.handlers).
Handler = Callable[["Message", Caller], Awaitable["Response"]]
# A server-streaming RPC bound to a core: the request in, its responses out as they come (a
# ServiceError raised ends the stream with that status).
StreamHandler = Callable[["Message", Caller], AsyncIterator["Response"]]
# A bidirectional RPC bound to a core: the client's messages in as they come, responses out.
BidiHandler = Callable[[AsyncIterator["Message"], Caller], AsyncIterator["Response"]]
