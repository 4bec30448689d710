"""Compile a filter's syntax tree into a parameterized SQL ``WHERE`` condition.

Safety: column names come only from ``FieldSpec`` (checked to be plain identifiers) and every value
from the filter is a bound parameter, so no filter text ever becomes SQL text.

Logic: every restriction compiles to a condition that is TRUE or FALSE, never NULL, so ``NOT x``
is always the exact complement of ``x``. Only TIMESTAMP columns may be NULL (an unset message
field); AIP-160 says a comparison on an unset message field is false whatever the comparator, so
those conditions are guarded with ``IS NOT NULL``. Columns of the other kinds hold proto3 scalars,
which always have a value, and are expected to be NOT NULL.

Resource names: on a field of resource names (``FieldSpec.reference``) ``:`` takes a whole name
or a resource's ID: a value without ``/`` matches the names whose last segment it is
(``request.evaluations:e1`` holds ``…/evaluations/e1``; AIP-160 leaves ``:`` on a field to the
service, and the official list filters are documented with IDs). A value with ``/`` is a whole
name, matched exactly. On a list of names, ``=`` means the same (as on any string list).

Engine limits: SQLite's parser holds at most 100 pending grammar symbols (``parser stack
overflow``) and its expression trees may be at most 1000 deep. A filter within our text and
nesting limits can exceed either, so the compiler tracks both for every fragment it emits, keeps
them small (long AND/OR chains are split into parenthesized groups; the operand that needs the
most parser stack goes first, before anything of its chain is pending) and rejects, with a
``FilterError``, the rare filter that still does not fit the dialect's budget. The budget leaves
room for the service's own statement around the filter.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from itertools import chain
from typing import TYPE_CHECKING, assert_never

from ces_eval.filtering._fields import (
    FieldKind,
    FieldSpec,
    allowed_comparators,
    to_bool,
    to_enum_number,
    to_integer,
    to_timestamp_micros,
)
from ces_eval.filtering._grammar import (
    MAX_NESTING,
    And,
    Comparator,
    Expr,
    FilterError,
    Global,
    Not,
    Or,
    Restriction,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["POSTGRESQL", "SQLITE", "Dialect", "compile_filter"]

# A parsed filter nests at most three nodes (AND, OR, NOT) per parenthesis level; trees built by
# hand are held to the same bound so that compiling never recurses without limit.
_MAX_DEPTH = 3 * MAX_NESTING + 8

# Operands per flat AND/OR chain; longer chains become chains of parenthesized groups, so that
# a chain adds little to the expression tree's height.
_GROUP = 16

_ORDERING = frozenset({Comparator.LT, Comparator.LE, Comparator.GT, Comparator.GE})
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

_SQL_OPERATORS = {
    Comparator.EQ: "=",
    Comparator.NE: "<>",
    Comparator.LT: "<",
    Comparator.LE: "<=",
    Comparator.GT: ">",
    Comparator.GE: ">=",
}


@dataclass(frozen=True)
class Dialect:
    """What differs between SQL engines: placeholders, patterns, JSON lists, text ordering, limits.

    Templates receive ``{column}`` (a checked identifier) and ``{param}`` (the placeholder).
    """

    name: str
    placeholder: str
    """Bound parameter marker: ``?`` (sqlite3) or ``%s`` (psycopg)."""
    pattern_operator: str
    """``GLOB`` or ``LIKE``, used for wildcard equality and ``:`` substring matches."""
    pattern_any: str
    """The pattern's "any sequence of characters" wildcard."""
    pattern_escapes: tuple[tuple[str, str], ...]
    """How each pattern metacharacter in user text is made literal."""
    pattern_suffix: str
    """Appended after the pattern parameter (e.g. an ESCAPE clause)."""
    list_contains: str
    """Condition: the STRING_LIST ``{column}`` has an element equal to ``{param}``."""
    list_nonempty: str
    """Condition: the STRING_LIST ``{column}`` has at least one element."""
    list_matches: str
    """Condition: the STRING_LIST ``{column}`` has an element matching ``{param}``, a pattern of
    :attr:`pattern_operator`."""
    text_ordering_suffix: str
    """Appended to ``<``/``<=``/``>``/``>=`` on text so that both engines order by code point."""
    ascii_lower: str
    """The text ``{column}`` with its ASCII capitals made small, and nothing else changed (both
    engines alike, whatever their collation or build: a ``fold_case`` field's ``:``)."""
    max_parser_stack: int | None = None
    """Most SQLite parser-stack symbols the condition may need at once (None: no limit)."""
    max_expression_height: int | None = None
    """Highest expression tree the condition may produce (None: no limit)."""


SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    # Deliberately GLOB, not LIKE: SQLite's LIKE ignores ASCII case, which would make
    # name = "Eval*" match "evaluation" on SQLite but not on PostgreSQL. GLOB is case-sensitive
    # and has no ESCAPE clause; a metacharacter is made literal by a one-character class.
    pattern_operator="GLOB",
    pattern_any="*",
    pattern_escapes=(("[", "[[]"), ("*", "[*]"), ("?", "[?]")),
    pattern_suffix="",
    list_contains="EXISTS (SELECT 1 FROM json_each({column}) WHERE value = {param})",
    list_nonempty="json_array_length({column}) > 0",
    list_matches="EXISTS (SELECT 1 FROM json_each({column}) WHERE value GLOB {param})",
    # BINARY collation compares UTF-8 bytes, which is code point order.
    text_ordering_suffix="",
    # SQLite's own lower() folds ASCII only (without the ICU extension, which Python's lacks).
    ascii_lower="lower({column})",
    # Of the parser's 100 symbols, 36 are left for the statement around the condition (a
    # correlated EXISTS subquery with its own WHERE uses about 25).
    max_parser_stack=64,
    # SQLITE_MAX_EXPR_DEPTH is 1000; the rest is for the statement around the condition.
    max_expression_height=900,
)

POSTGRESQL = Dialect(
    name="postgresql",
    placeholder="%s",
    pattern_operator="LIKE",
    pattern_any="%",
    pattern_escapes=(("\\", "\\\\"), ("%", "\\%"), ("_", "\\_")),
    pattern_suffix=" ESCAPE '\\'",
    # "{column} ? %s" would be read by psycopg as a placeholder; containment says the same thing.
    list_contains="{column} @> jsonb_build_array({param}::text)",
    list_nonempty="jsonb_array_length({column}) > 0",
    list_matches=(
        "EXISTS (SELECT 1 FROM jsonb_array_elements_text({column}) AS element (value) "
        "WHERE value LIKE {param} ESCAPE '\\')"
    ),
    # The database's collation may be locale-aware; "C" orders UTF-8 by code point, like SQLite.
    text_ordering_suffix=' COLLATE "C"',
    # lower() would follow the database's locale; translate() changes exactly A-Z.
    ascii_lower=f"translate({{column}}, '{string.ascii_uppercase}', '{string.ascii_lowercase}')",
)


@dataclass(frozen=True)
class _Sql:
    """A compiled condition with its parameters, in text order.

    ``atomic``: needs no parentheses inside AND/OR. ``stack``: the most parser symbols SQLite
    holds while reading it (measured: ``a = ?`` 3, ``NOT (x)`` 2 + x, each operand after the
    first of a chain 2 + its own, ``(x)`` 1 + x). ``height``: the height of SQLite's expression
    tree for it. ``position``: the filter character the deepest part comes from.
    """

    text: str
    params: tuple[object, ...]
    atomic: bool
    stack: int
    height: int
    position: int

    @property
    def wrapped(self) -> str:
        return self.text if self.atomic else f"({self.text})"

    @property
    def wrapped_stack(self) -> int:
        return self.stack if self.atomic else self.stack + 1


# Parser stack and tree height of each kind of leaf condition, measured on SQLite 3.40 and
# rounded up.
_COMPARISON = (3, 2)
_PATTERN = (5, 3)
_TIMESTAMP = (5, 3)
_PRESENCE = (5, 3)
_LIST_CONTAINS = (14, 4)
_LIST_MATCHES = (14, 4)


def compile_filter(
    expr: Expr | None, fields: Mapping[str, FieldSpec], dialect: Dialect
) -> tuple[str, list[object]]:
    """Compile a parsed filter into ``(condition, params)`` for a ``WHERE`` clause.

    ``fields`` maps each filterable field path (as written in filters, e.g. ``evaluation_run``) to
    its column. An empty filter (``None``) compiles to a condition that is always true. Unknown
    fields, values of the wrong type, comparators a field's kind does not support and global
    restrictions raise ``FilterError`` positioned at the offending token (AIP-160 §Validation), as
    does a filter too deeply nested for the dialect's engine. The condition is atomic or
    parenthesized, so it can be ANDed into a larger condition as it is.
    """
    if expr is None:
        return "1=1", []
    sql = _Compiler(fields, dialect).compile(expr, 0)
    limits = (
        (dialect.max_parser_stack, sql.wrapped_stack),
        (dialect.max_expression_height, sql.height),
    )
    for limit, needed in limits:
        if limit is not None and needed > limit:
            raise FilterError(f"filter is nested too deeply to run on {dialect.name}", sql.position)
    return sql.wrapped, list(sql.params)


class _Compiler:
    def __init__(self, fields: Mapping[str, FieldSpec], dialect: Dialect) -> None:
        self.fields = fields
        self.dialect = dialect

    def compile(self, expr: Expr, depth: int) -> _Sql:
        if depth > _MAX_DEPTH:
            raise FilterError(f"filter nests deeper than {_MAX_DEPTH} levels", _position(expr))
        if isinstance(expr, Restriction):
            return self.restriction(expr)
        if isinstance(expr, Global):
            # AIP-160 lets a service choose which fields bare literals search; this one chooses
            # none, and says so rather than guessing.
            raise FilterError("global restrictions are not supported", expr.position)
        if isinstance(expr, Not):
            inner = self.compile(expr.operand, depth + 1)
            return _Sql(
                f"NOT ({inner.text})",
                inner.params,
                atomic=True,
                stack=inner.stack + 2,
                height=inner.height + 1,
                position=inner.position,
            )
        if isinstance(expr, And | Or):
            keyword, empty = ("AND", "1=1") if isinstance(expr, And) else ("OR", "1=0")
            parts = [self.compile(operand, depth + 1) for operand in expr.operands]
            if not parts:
                return _Sql(empty, (), atomic=True, stack=3, height=2, position=0)
            return _chain(keyword, parts)
        assert_never(expr)

    def restriction(self, restriction: Restriction) -> _Sql:
        spec = self.fields.get(restriction.path)
        if spec is None:
            known = ", ".join(sorted(self.fields)) or "(none)"
            raise FilterError(
                f"unknown field {restriction.path!r}; filterable fields are: {known}",
                restriction.position,
            )
        comparator = restriction.comparator
        if comparator not in allowed_comparators(spec.kind):
            allowed = " ".join(c.value for c in Comparator if c in allowed_comparators(spec.kind))
            raise FilterError(
                f"operator {comparator.value!r} cannot be used on {spec.kind.value} field "
                f"{restriction.path!r}; use one of: {allowed}",
                restriction.comparator_position,
            )
        column, position = spec.column, restriction.position
        if comparator is Comparator.HAS and restriction.value == "*" and not restriction.quoted:
            return _leaf(self.presence(spec), (), _PRESENCE, position)
        if spec.reference:
            named = self.names(restriction, spec)
            if named is not None:
                return named
        if spec.kind is FieldKind.STRING:
            return self.string(restriction, column, fold_case=spec.fold_case)
        placeholder = self.dialect.placeholder
        if spec.kind is FieldKind.STRING_LIST:
            text = self.dialect.list_contains.format(column=column, param=placeholder)
            return _leaf(text, (restriction.value,), _LIST_CONTAINS, position)
        if spec.kind is FieldKind.TIMESTAMP:
            if comparator is Comparator.HAS:
                raise FilterError(
                    f"':' on timestamp field {restriction.path!r} only tests presence, as in "
                    f"{restriction.path}:*",
                    restriction.comparator_position,
                )
            micros = to_timestamp_micros(restriction)
            text = f"{column} IS NOT NULL AND {column} {_SQL_OPERATORS[comparator]} {placeholder}"
            return _leaf(text, (micros,), _TIMESTAMP, position, atomic=False)
        value: object
        if spec.kind is FieldKind.ENUM:
            value = to_enum_number(restriction, spec)
            comparator = Comparator.EQ if comparator is Comparator.HAS else comparator
        elif spec.kind is FieldKind.INTEGER:
            value = to_integer(restriction)
        else:
            value = to_bool(restriction)
        text = f"{column} {_SQL_OPERATORS[comparator]} {placeholder}"
        return _leaf(text, (value,), _COMPARISON, position)

    def names(self, restriction: Restriction, spec: FieldSpec) -> _Sql | None:
        """``:`` on a field of resource names (see the module docstring); None when the
        restriction means what it means on any string field."""
        column, position, value = spec.column, restriction.position, restriction.value
        by_id = "/" not in value
        if spec.kind is FieldKind.STRING_LIST:
            if not by_id:
                return None
            text = self.dialect.list_matches.format(column=column, param=self.dialect.placeholder)
            pattern = self.literal(f"/{value}", prefix=True, suffix=False)
            return _leaf(text, (pattern,), _LIST_MATCHES, position)
        if restriction.comparator is not Comparator.HAS:
            return None
        if by_id:
            return self.pattern(column, f"/{value}", (True, False, False), position)
        exact = replace(restriction, comparator=Comparator.EQ, quoted=False)
        return self.string(exact, column)

    def presence(self, spec: FieldSpec) -> str:
        """``field:*`` (AIP-160 has operator with ``*``): the field is set to a non-default."""
        column = spec.column
        if spec.kind is FieldKind.STRING:
            return f"{column} <> ''"
        if spec.kind is FieldKind.ENUM:
            return f"{column} <> 0"
        if spec.kind is FieldKind.TIMESTAMP:
            return f"{column} IS NOT NULL"
        return self.dialect.list_nonempty.format(column=column)

    def string(self, restriction: Restriction, column: str, *, fold_case: bool = False) -> _Sql:
        """A restriction of a STRING ``column``; with ``fold_case``, ``:`` ignores ASCII case
        (:class:`FieldSpec`)."""
        comparator, value = restriction.comparator, restriction.value
        position = restriction.position
        if comparator is Comparator.HAS and fold_case:
            column = self.dialect.ascii_lower.format(column=column)
            value = value.translate(_ASCII_LOWER)
        if comparator is Comparator.HAS:
            return self.pattern(column, value, (True, True, False), position)
        if comparator in (Comparator.EQ, Comparator.NE) and restriction.quoted:
            # AIP-160 wildcards: a quoted value may start and/or end with "*". A "*" elsewhere is
            # literal; "!=" is the exact negation of "=", wildcards included.
            prefix, suffix = value.startswith("*"), value.endswith("*")
            if prefix or suffix:
                inner = value[1 if prefix else 0 : -1 if suffix else None]
                shape = (prefix, suffix, comparator is Comparator.NE)
                return self.pattern(column, inner, shape, position)
        ordering = self.dialect.text_ordering_suffix if comparator in _ORDERING else ""
        text = f"{column} {_SQL_OPERATORS[comparator]} {self.dialect.placeholder}{ordering}"
        return _leaf(text, (value,), _COMPARISON, position)

    def pattern(
        self, column: str, literal: str, shape: tuple[bool, bool, bool], position: int
    ) -> _Sql:
        """``column`` starts with / ends with / contains ``literal`` (``shape``: prefix wildcard,
        suffix wildcard, negated)."""
        dialect = self.dialect
        prefix, suffix, negate = shape
        pattern = self.literal(literal, prefix=prefix, suffix=suffix)
        operator = f"NOT {dialect.pattern_operator}" if negate else dialect.pattern_operator
        text = f"{column} {operator} {dialect.placeholder}{dialect.pattern_suffix}"
        return _leaf(text, (pattern,), _PATTERN, position)

    def literal(self, literal: str, *, prefix: bool, suffix: bool) -> str:
        """The dialect's pattern of ``literal``, with "any sequence" before and/or after."""
        dialect = self.dialect
        escapes: dict[str, str | int | None] = dict(dialect.pattern_escapes)
        pattern = literal.translate(str.maketrans(escapes))
        before = dialect.pattern_any if prefix else ""
        return before + pattern + (dialect.pattern_any if suffix else "")


def _leaf(
    text: str,
    params: tuple[object, ...],
    cost: tuple[int, int],
    position: int,
    *,
    atomic: bool = True,
) -> _Sql:
    stack, height = cost
    return _Sql(text, params, atomic=atomic, stack=stack, height=height, position=position)


def _chain(keyword: str, parts: Sequence[_Sql]) -> _Sql:
    """``parts`` joined by ``keyword``, in groups of at most ``_GROUP``.

    AND and OR are commutative here (conditions have no side effects), so operands are reordered:
    the one needing the most parser stack goes first, where nothing of this chain is pending yet.
    """
    ordered = sorted(parts, key=lambda part: -part.wrapped_stack)
    while len(ordered) > _GROUP:
        ordered = [
            _flat(keyword, ordered[start : start + _GROUP])
            for start in range(0, len(ordered), _GROUP)
        ]
    return _flat(keyword, ordered)


def _flat(keyword: str, parts: Sequence[_Sql]) -> _Sql:
    if len(parts) == 1:
        return parts[0]
    count = len(parts)
    # SQLite parses "a AND b AND c" as ((a AND b) AND c): after the first operand, each one
    # waits on "<expr> AND"; the first two operands are the deepest in the tree.
    stack, position = max(
        (part.wrapped_stack + (2 if index else 0), part.position)
        for index, part in enumerate(parts)
    )
    height = max(part.height + count - max(index, 1) for index, part in enumerate(parts))
    return _Sql(
        f" {keyword} ".join(part.wrapped for part in parts),
        tuple(chain.from_iterable(part.params for part in parts)),
        atomic=False,
        stack=stack,
        height=height,
        position=position,
    )


def _position(expr: Expr) -> int:
    return expr.position if isinstance(expr, Restriction | Global) else 0
