"""Who may call what (docs/security.md): the token table of ``serve --auth-tokens FILE``
(:mod:`~ces_eval.access.tokens`), authentication (:mod:`~ces_eval.access.authentication`, which
the surfaces' boundary calls before anything of a request is parsed) and authorization
(:mod:`~ces_eval.access.authorization`, which the core applies to every call and the REST and
MCP surfaces apply early, to path variables and tool arguments).
"""

from ces_eval.access.authorization import (
    Fields,
    JsonFields,
    MessageFields,
    MethodAccess,
    VariableFields,
    addressed,
    authorize,
    method_access,
    project_of,
)
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
    "MIN_TOKEN_LENGTH",
    "Fields",
    "JsonFields",
    "MessageFields",
    "MethodAccess",
    "Principal",
    "TokenFileError",
    "Tokens",
    "VariableFields",
    "addressed",
    "authorize",
    "bearer",
    "method_access",
    "project_of",
]
