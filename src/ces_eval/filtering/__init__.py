"""AIP-160 list filters: parse, validate against a resource's fields, compile to SQL.

``parse`` turns filter text into a syntax tree (``None`` for an empty filter); ``compile_filter``
checks it against a table of ``FieldSpec`` and produces a parameterized ``WHERE`` condition for
SQLite or PostgreSQL. Every failure is a ``FilterError`` carrying the offending character's
position, which the service reports as INVALID_ARGUMENT (docs/semantics.md, "Lists").
"""

from ces_eval.filtering._fields import FieldKind, FieldSpec
from ces_eval.filtering._grammar import (
    And,
    Comparator,
    Expr,
    FilterError,
    Global,
    Not,
    Or,
    Restriction,
    parse,
)
from ces_eval.filtering._sql import POSTGRESQL, SQLITE, Dialect, compile_filter

__all__ = [
    "POSTGRESQL",
    "SQLITE",
    "And",
    "Comparator",
    "Dialect",
    "Expr",
    "FieldKind",
    "FieldSpec",
    "FilterError",
    "Global",
    "Not",
    "Or",
    "Restriction",
    "compile_filter",
    "parse",
]
