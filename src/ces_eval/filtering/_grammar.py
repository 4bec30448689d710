"""AIP-160 filter syntax: the grammar, the syntax tree, and ``parse``.

The grammar follows the EBNF of AIP-160 with the decisions below, each one made so that a filter
means the same thing on every surface and every storage backend:

* Precedence, loosest first: ``AND``, then the implicit AND of terms separated by whitespace, then
  ``OR``, then ``NOT`` / ``-``. AIP-160 deliberately binds ``OR`` tighter than ``AND`` (colloquial
  speech: ``a AND b OR c`` is ``a AND (b OR c)``). Whitespace-separated terms are a "fuzzy" AND in
  AIP-160; this service has no ranking, so they are an exact AND and share the ``And`` node.
* ``NOT`` and ``-`` negate one term (a restriction or a parenthesized expression); ``NOT NOT a``
  needs parentheses, as in the EBNF. Keywords are case-sensitive: ``and`` is a bare value.
* A restriction is ``member comparator value``. The member is one token of dot-separated segments
  (``a.b``), kept as a string: fields are looked up by their full dotted path. The value is a quoted
  string (``"..."`` or ``'...'`` with backslash escapes) or bare text, which may contain ``:``,
  ``.``, ``-`` and ``+`` so that ``create_time > 2024-01-01T00:00:00+02:00`` needs no quotes.
* A member with no comparator is a global restriction (``Global``); it parses, and the compiler
  rejects it. Functions (``f(x)``) and parenthesized value lists (``a = (1 OR 2)``) are not part of
  this dialect and are syntax errors.
* Limits, so that no filter can exhaust the server: at most ``MAX_FILTER_LENGTH`` characters and
  ``MAX_NESTING`` levels of parentheses. The parser is LALR and builds the tree while it parses, so
  there is no recursion proportional to the input anywhere.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, TypeAlias

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

__all__ = [
    "KEYWORDS",
    "MAX_FILTER_LENGTH",
    "MAX_NESTING",
    "And",
    "Comparator",
    "Expr",
    "FilterError",
    "Global",
    "Not",
    "Or",
    "Restriction",
    "parse",
]

MAX_FILTER_LENGTH = 8192
"""Longest filter accepted, in characters (AIP-160 lets services limit filter complexity)."""

MAX_NESTING = 64
"""Deepest nesting of parentheses accepted."""

KEYWORDS = frozenset({"AND", "OR", "NOT"})
"""The reserved words of AIP-160; case-sensitive."""


class FilterError(Exception):
    """A filter that cannot be parsed or does not fit the resource's fields.

    ``position`` is the 0-based character offset of the offending token in the filter text, so a
    surface can point at it; the service maps this error to INVALID_ARGUMENT (AIP-160 §Validation).
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at character {position})")
        self.message = message
        self.position = position


class Comparator(enum.Enum):
    """The comparison operators of AIP-160; the value is the operator as written."""

    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    HAS = ":"


@dataclass(frozen=True)
class Restriction:
    """``path comparator value``, e.g. ``state = COMPLETED`` or ``tags:"smoke"``.

    ``value`` is the literal with quotes removed and escapes resolved; ``quoted`` remembers whether
    it was quoted, which matters for wildcards (only a quoted ``"*x"`` is a pattern) and for ``:*``
    (presence). Positions point into the filter text and take no part in equality.
    """

    path: str
    comparator: Comparator
    value: str
    quoted: bool = False
    position: int = field(default=0, compare=False)
    comparator_position: int = field(default=0, compare=False)
    value_position: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Global:
    """A bare value with no field (AIP-160 "literals"), e.g. ``Hugo`` or ``"New York"``."""

    value: str
    quoted: bool = False
    position: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Not:
    """``NOT x`` or ``-x``."""

    operand: Expr


@dataclass(frozen=True)
class And:
    """All operands hold: ``a AND b`` or ``a b``. A chain is one node; parentheses nest nodes."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """Any operand holds: ``a OR b``. A chain is one node; parentheses nest nodes."""

    operands: tuple[Expr, ...]


Expr: TypeAlias = And | Or | Not | Restriction | Global

# Terminals. MEMBER cannot start with "-" (that is negation) or "." and stops at every character
# with a meaning of its own; ARG_TEXT is what may follow a comparator, and additionally allows
# ":", "." and a leading "-" so timestamps and negative numbers need no quotes. The contextual
# lexer only tries ARG_TEXT right after a comparator, so the two never compete.
_GRAMMAR = r"""
    filter: expression?

    expression: sequence (_AND sequence)*
    sequence: factor+
    factor: term (_OR term)*
    ?term: simple
         | _NOT simple -> negation
         | _MINUS simple -> negation
    ?simple: restriction
           | _LPAR expression _RPAR
    restriction: MEMBER comparator arg -> comparison
               | MEMBER -> bare_member
               | STRING -> bare_string
    ?comparator: EQ | NE | LT | LE | GT | GE | HAS
    ?arg: ARG_TEXT | STRING

    _AND: "AND"
    _OR: "OR"
    _NOT: "NOT"
    _MINUS: "-"
    _LPAR: "("
    _RPAR: ")"
    EQ: "="
    NE: "!="
    LT: "<"
    LE: "<="
    GT: ">"
    GE: ">="
    HAS: ":"
    MEMBER: /[^\s()"'=<>!:,.\-][^\s()"'=<>!:,.]*(\.[^\s()"'=<>!:,.]+)*/
    ARG_TEXT: /[^\s()"'=<>!,]+/
    STRING: /"(?:[^"\\]|\\[\s\S])*"/ | /'(?:[^'\\]|\\[\s\S])*'/

    %ignore /\s+/
"""

# How syntax errors name what the parser expected instead.
_TERMINAL_NAMES = {
    "MEMBER": "a field name",
    "ARG_TEXT": "a value",
    "STRING": "a value",
    "EQ": "'='",
    "NE": "'!='",
    "LT": "'<'",
    "LE": "'<='",
    "GT": "'>'",
    "GE": "'>='",
    "HAS": "':'",
    "_AND": "AND",
    "_OR": "OR",
    "_NOT": "NOT",
    "_MINUS": "'-'",
    "_LPAR": "'('",
    "_RPAR": "')'",
    "$END": "end of filter",
}

_MAX_HINTS = 4

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}
_ESCAPE = re.compile(r"\\([\s\S])")


def _unescape(quoted: str) -> str:
    r"""The text of a STRING token: quotes dropped, ``\n \r \t`` decoded, ``\x`` is ``x`` else."""
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), quoted[1:-1])


def _reject_keyword(token: lark.Token) -> None:
    """Keywords are reserved; the contextual lexer reads one as text where none is expected."""
    if token in KEYWORDS:
        raise FilterError(f"syntax error: unexpected keyword {token}", _pos(token))


def _pos(token: lark.Token) -> int:
    return token.start_pos if token.start_pos is not None else 0


class _Builder(lark.Transformer[lark.Token, Any]):
    """Builds the syntax tree while the LALR parser reduces (no recursive tree walk afterwards).

    ``sequence`` returns a plain list so that ``expression`` can merge implicit and explicit ANDs
    of one level into one node, while a parenthesized ``And`` (returned by ``simple``) stays nested.
    """

    def filter(self, children: list[Expr]) -> Expr | None:
        return children[0] if children else None

    def expression(self, children: list[list[Expr]]) -> Expr:
        operands = [operand for sequence in children for operand in sequence]
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def sequence(self, children: list[Expr]) -> list[Expr]:
        return children

    def factor(self, children: list[Expr]) -> Expr:
        return children[0] if len(children) == 1 else Or(tuple(children))

    def negation(self, children: list[Expr]) -> Expr:
        return Not(children[0])

    def comparison(self, children: list[lark.Token]) -> Restriction:
        member, comparator, arg = children
        _reject_keyword(member)
        if arg.type == "STRING":
            value, quoted = _unescape(arg), True
        else:
            _reject_keyword(arg)
            value, quoted = str(arg), False
        return Restriction(
            path=str(member),
            comparator=Comparator(str(comparator)),
            value=value,
            quoted=quoted,
            position=_pos(member),
            comparator_position=_pos(comparator),
            value_position=_pos(arg),
        )

    def bare_member(self, children: list[lark.Token]) -> Global:
        _reject_keyword(children[0])
        return Global(str(children[0]), quoted=False, position=_pos(children[0]))

    def bare_string(self, children: list[lark.Token]) -> Global:
        return Global(_unescape(children[0]), quoted=True, position=_pos(children[0]))


@cache
def _parser() -> lark.Lark:
    return lark.Lark(_GRAMMAR, start="filter", parser="lalr", transformer=_Builder())


def _check_text(text: str) -> None:
    """Length, character and nesting limits, checked before the parser sees the text."""
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(
            f"filter is longer than {MAX_FILTER_LENGTH} characters", MAX_FILTER_LENGTH
        )
    depth = 0
    quote = ""
    escaped = False
    for index, char in enumerate(text):
        # NUL cannot be stored in PostgreSQL text and a lone surrogate cannot be encoded as UTF-8;
        # neither can reach us in a valid request, so both are rejected here, not in the database.
        if char == "\0" or "\ud800" <= char <= "\udfff":
            raise FilterError(f"invalid character {char!r}", index)
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
            if depth > MAX_NESTING:
                raise FilterError(f"filter nests parentheses deeper than {MAX_NESTING}", index)
        elif char == ")":
            depth -= 1


def _syntax_error(text: str, error: UnexpectedInput) -> FilterError:
    """Translate lark's error into ours, positioned at the unexpected token or character."""
    position = error.pos_in_stream
    if position is None or position < 0 or position > len(text):
        position = len(text)
    expected: set[str] = set()
    found = repr(text[position]) if position < len(text) else "end of filter"
    if isinstance(error, UnexpectedToken):
        expected = set(error.expected)
        if error.token.type == "$END":
            position, found = len(text), "end of filter"
        else:
            found = repr(str(error.token))
    elif isinstance(error, UnexpectedCharacters):
        expected = set(error.allowed or ())
    elif isinstance(error, UnexpectedEOF):  # pragma: no cover - raised by Earley, not LALR
        expected = set(error.expected)
    names = sorted({_TERMINAL_NAMES.get(name, name) for name in expected})
    # After a complete term, LALR lookahead sets are long and partly misleading: name short ones.
    hint = f"; expected {' or '.join(names)}" if 0 < len(names) <= _MAX_HINTS else ""
    return FilterError(f"syntax error: unexpected {found}{hint}", position)


@lru_cache(maxsize=1024)
def parse(text: str) -> Expr | None:
    """Parse an AIP-160 filter into its syntax tree; ``None`` for an empty filter.

    An empty (or whitespace-only) filter matches everything (AIP-160). Every problem, syntax or
    limit, raises ``FilterError`` with the position of the offending character. The trees are
    immutable, so the filters asked for most recently are remembered by their text: a client
    paging through a list sends the same filter with every page.
    """
    _check_text(text)
    try:
        result: object = _parser().parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    if result is None or isinstance(result, And | Or | Not | Restriction | Global):
        return result
    raise AssertionError(f"unexpected parse result {result!r}")  # pragma: no cover
