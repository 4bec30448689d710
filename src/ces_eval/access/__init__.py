"""Who may call what (docs/security.md): the token table of ``serve --auth-tokens FILE``
(:mod:`~ces_eval.access.tokens`), the :class:`Caller` the core receives
(:mod:`~ces_eval.access.caller`), authentication (:mod:`~ces_eval.access.authentication`, which
the surfaces' boundary calls before anything of a request is parsed) and authorization
(:mod:`~ces_eval.access.authorization`, which wraps the core's handlers for every surface, and
which REST and MCP also apply early, to path variables and tool arguments).

Nothing here imports the core or a surface: the core imports :class:`Caller` from here.
"""

from ces_eval.access.authentication import identify
from ces_eval.access.authorization import (
    Fields,
    JsonFields,
    MessageFields,
    MethodAccess,
    VariableFields,
    addressed,
    authorize,
    authorized,
    authorized_bidi,
    authorized_streams,
    method_access,
    project_of,
)
from ces_eval.access.caller import DEFAULT_USER, BidiHandler, Caller, Handler, StreamHandler
from ces_eval.access.tokens import (
    ALL_PROJECTS,
    MIN_TOKEN_LENGTH,
    Principal,
    TokenFileError,
    Tokens,
    bearer,
)

__all__ = [
    "ALL_PROJECTS",
    "DEFAULT_USER",
    "MIN_TOKEN_LENGTH",
    "BidiHandler",
    "Caller",
    "Fields",
    "Handler",
    "JsonFields",
    "MessageFields",
    "MethodAccess",
    "Principal",
    "StreamHandler",
    "TokenFileError",
    "Tokens",
    "VariableFields",
    "addressed",
    "authorize",
    "authorized",
    "authorized_bidi",
    "authorized_streams",
    "bearer",
    "identify",
    "method_access",
    "project_of",
]
