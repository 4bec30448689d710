"""AIP-160 filters (https://google.aip.dev/160): parse trees, errors, and SQL run against SQLite.

The behavioural tests compile filters and run them against a real in-memory SQLite table, then
assert which rows matched. The hypothesis tests round-trip random syntax trees through text, feed
arbitrary text to the parser, and compare compiled SQL against a Python model of the semantics.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ces_eval.filtering import (
    POSTGRESQL,
    SQLITE,
    And,
    Comparator,
    Dialect,
    Expr,
    FieldKind,
    FieldSpec,
    FilterError,
    Global,
    Not,
    Or,
    Restriction,
    compile_filter,
    parse,
)


def r(path: str, comparator: str, value: str, *, quoted: bool = False) -> Restriction:
    return Restriction(path, Comparator(comparator), value, quoted)


def and_(*operands: Expr) -> And:
    return And(operands)


def or_(*operands: Expr) -> Or:
    return Or(operands)


A, B, C = r("a", "=", "1"), r("b", "=", "2"), r("c", "=", "3")


# --- Parse trees ----------------------------------------------------------------------------------

PARSE_CASES: list[tuple[str, Expr | None]] = [
    # Empty filters match everything.
    ("", None),
    ("   ", None),
    ("\n\t ", None),
    # AIP-160: OR binds tighter than AND.
    ("a=1 AND b=2 OR c=3", and_(A, or_(B, C))),
    ("a=1 OR b=2 AND c=3", and_(or_(A, B), C)),
    ("a=1 OR b=2 OR c=3", or_(A, B, C)),
    ("a=1 AND b=2 AND c=3", and_(A, B, C)),
    # Implicit AND (whitespace) is AND, looser than OR, and merges with explicit AND.
    ("a=1 b=2", and_(A, B)),
    ("a=1 b=2 OR c=3", and_(A, or_(B, C))),
    ("a=1 OR b=2 c=3", and_(or_(A, B), C)),
    ("a=1 AND b=2 c=3", and_(A, B, C)),
    ("a = 1\tAND\nb = 2", and_(A, B)),
    # Parentheses nest; they are not flattened into the enclosing chain.
    ("(a=1 AND b=2) AND c=3", and_(and_(A, B), C)),
    ("a=1 OR (b=2 OR c=3)", or_(A, or_(B, C))),
    ("(a=1 OR b=2) c=3", and_(or_(A, B), C)),
    ("((a=1))", A),
    # Negation binds tightest and applies to one term.
    ("NOT a=1", Not(A)),
    ("-a=1", Not(A)),
    ("NOT(a=1)", Not(A)),
    ("NOT a=1 OR b=2", or_(Not(A), B)),
    ("-a=1 b=2", and_(Not(A), B)),
    ("NOT (a=1 OR b=2)", Not(or_(A, B))),
    ("NOT (NOT a=1)", Not(Not(A))),
    ("a=1 -b=2", and_(A, Not(B))),
    # Comparators.
    ("a != 1", r("a", "!=", "1")),
    ("a < 1", r("a", "<", "1")),
    ("a <= 1", r("a", "<=", "1")),
    ("a > 1", r("a", ">", "1")),
    ("a >= 1", r("a", ">=", "1")),
    ("a:1", r("a", ":", "1")),
    ("a : *", r("a", ":", "*")),
    # Field paths are kept whole.
    ("a.b.c = x", r("a.b.c", "=", "x")),
    ("display_name = x", r("display_name", "=", "x")),
    # Bare values may hold ':', '.', '-', '+' and '*'.
    ("t > 2024-01-01T00:00:00Z", r("t", ">", "2024-01-01T00:00:00Z")),
    ("t>=2024-01-01T00:00:00.5+05:30", r("t", ">=", "2024-01-01T00:00:00.5+05:30")),
    ("n = -5", r("n", "=", "-5")),
    ("n=-5", r("n", "=", "-5")),
    ("n = 1.5", r("n", "=", "1.5")),
    ("a:b:c", r("a", ":", "b:c")),
    ("a = foo*", r("a", "=", "foo*")),
    # Quoting: both quote characters, backslash escapes.
    ('a = "x y"', r("a", "=", "x y", quoted=True)),
    ("a = 'x y'", r("a", "=", "x y", quoted=True)),
    ('a = "say \\"hi\\""', r("a", "=", 'say "hi"', quoted=True)),
    ("a = 'it\\'s'", r("a", "=", "it's", quoted=True)),
    ('a = "it\'s"', r("a", "=", "it's", quoted=True)),
    ('a = "back\\\\slash"', r("a", "=", "back\\slash", quoted=True)),
    ('a = "tab\\tnew\\nline"', r("a", "=", "tab\tnew\nline", quoted=True)),
    ('a = "\\*x"', r("a", "=", "*x", quoted=True)),
    ('a = ""', r("a", "=", "", quoted=True)),
    ('a = "AND"', r("a", "=", "AND", quoted=True)),
    ('a = "(x) OR y"', r("a", "=", "(x) OR y", quoted=True)),
    # Keywords are case-sensitive: lower case is text (here, global restrictions).
    ("a=1 and b=2", and_(A, Global("and"), B)),
    ("a=1 or b=2", and_(A, Global("or"), B)),
    ("NOTE = 1", r("NOTE", "=", "1")),
    ("ORDER=1", r("ORDER", "=", "1")),
    ("a = ANDROID", r("a", "=", "ANDROID")),
    # Bare values without a field are global restrictions.
    ("foo", Global("foo")),
    ('"New York"', Global("New York", quoted=True)),
    ("Victor Hugo", and_(Global("Victor"), Global("Hugo"))),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse_tree(text: str, expected: Expr | None) -> None:
    assert parse(text) == expected


def test_positions_point_into_the_text() -> None:
    text = 'a = 1 AND  display_name != "x"'
    tree = parse(text)
    assert isinstance(tree, And)
    restriction = tree.operands[1]
    assert isinstance(restriction, Restriction)
    assert (restriction.position, restriction.comparator_position, restriction.value_position) == (
        11,
        24,
        27,
    )
    assert text[restriction.value_position] == '"'


def test_nesting_up_to_the_limit_parses() -> None:
    text = "(" * 64 + "a=1" + ")" * 64
    assert parse(text) == A
    assert parse("a = " + '"' + "(" * 100 + '"') == r("a", "=", "(" * 100, quoted=True)


def test_longest_filter_parses() -> None:
    text = " ".join(["a=1"] * 2048)
    assert len(text) == 8191
    tree = parse(text)
    assert isinstance(tree, And)
    assert len(tree.operands) == 2048


# --- Syntax and limit errors ------------------------------------------------------------------

SYNTAX_ERRORS: list[tuple[str, int, str]] = [
    ("a =", 3, "end of filter"),
    ("a = = 1", 4, "'='"),
    ("(a=1", 4, "end of filter"),
    ("a=1)", 3, "')'"),
    ("a ! b", 2, "'!'"),
    ('a = "abc', 4, "'\"'"),
    ("a = 'abc", 4, '"\'"'),
    ("AND a=1", 0, "keyword AND"),
    ("a=1 AND", 7, "end of filter"),
    ("a=1 OR OR b=2", 7, "keyword OR"),
    ("NOT", 3, "end of filter"),
    ("-", 1, "end of filter"),
    ("NOT NOT a=1", 4, "keyword NOT"),
    ("--a=1", 1, "'-a'"),
    ("a = AND", 4, "keyword AND"),
    ("OR = 1", 0, "keyword OR"),
    ("a=b=c", 3, "'='"),
    ("f(x, y)", 3, "','"),
    ("a..b = 1", 1, "'..b'"),
    ("a. = 1", 1, "'.'"),
    ("a = (1 OR 2)", 4, "'('"),
    ("()", 1, "')'"),
    ("a = 1 AND (b = 2", 16, "end of filter"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), SYNTAX_ERRORS)
def test_syntax_error(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse(text)
    assert caught.value.position == position
    assert caught.value.message.startswith("syntax error")
    assert fragment in caught.value.message


def test_syntax_error_names_what_was_expected() -> None:
    with pytest.raises(FilterError) as caught:
        parse("a = ")
    assert caught.value.message == "syntax error: unexpected end of filter; expected a value"
    assert str(caught.value) == f"{caught.value.message} (at character 4)"


LIMIT_ERRORS: list[tuple[str, int, str]] = [
    ("a" * 8193, 8192, "longer than 8192"),
    ("(" * 65 + "a=1" + ")" * 65, 64, "deeper than 64"),
    ("a=1 " + "NOT (" * 65 + "a=1" + ")" * 65, 4 + 5 * 64 + 4, "deeper than 64"),
    ('a = "x\0y"', 6, "invalid character"),
    ("a = x\ud800", 5, "invalid character"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), LIMIT_ERRORS)
def test_limit_error(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse(text)
    assert caught.value.position == position
    assert fragment in caught.value.message


# --- The behavioural table --------------------------------------------------------------------

STATES = {"STATE_UNSPECIFIED": 0, "RUNNING": 1, "COMPLETED": 2, "FAILED": 3}

FIELDS: dict[str, FieldSpec] = {
    "name": FieldSpec("evals.name", FieldKind.STRING),
    "display_name": FieldSpec("display", FieldKind.STRING),
    "state": FieldSpec("state", FieldKind.ENUM, STATES),
    "create_time": FieldSpec("created", FieldKind.TIMESTAMP),
    "turns": FieldSpec("turns", FieldKind.INTEGER),
    "stats.turns": FieldSpec("turns", FieldKind.INTEGER),
    "done": FieldSpec("done", FieldKind.BOOL),
    "tags": FieldSpec("tags", FieldKind.STRING_LIST),
}


def _micros(text: str) -> int:
    return (datetime.fromisoformat(text) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
        microseconds=1
    )


ROWS: list[dict[str, Any]] = [
    {
        "id": "alpha",
        "display": "Alpha smoke test",
        "state": 2,
        "created": _micros("2024-01-01T00:00:00+00:00"),
        "turns": 3,
        "done": True,
        "tags": ["smoke", "nightly"],
    },
    {
        "id": "beta",
        "display": "beta_100%",
        "state": 1,
        "created": _micros("2024-06-15T12:30:00.500000+00:00"),
        "turns": 10,
        "done": False,
        "tags": ["nightly"],
    },
    {
        "id": "gamma",
        "display": "Gamma*star",
        "state": 3,
        "created": None,
        "turns": 0,
        "done": False,
        "tags": [],
    },
    {
        "id": "delta",
        "display": "",
        "state": 0,
        "created": _micros("2023-12-31T23:59:59.999999+00:00"),
        "turns": -2,
        "done": True,
        "tags": ["smoke", "a'b"],
    },
    {
        "id": "epsilon",
        "display": "ÉPSILON [x]?",
        "state": 2,
        "created": _micros("2025-03-01T00:00:00+02:00"),
        "turns": 42,
        "done": True,
        "tags": ["Smoke"],
    },
]
ALL = frozenset(row["id"] for row in ROWS)


@dataclass(frozen=True)
class Table:
    """A table the filter cases run on, written once for both backends (this file runs them on
    SQLite, tests/contract/test_filters_postgresql.py on PostgreSQL): each column with its SQLite
    and its PostgreSQL type, and the rows' values in column order. A JSONB column holds a list,
    stored as JSON text on SQLite."""

    name: str
    columns: tuple[tuple[str, str, str], ...]
    rows: tuple[tuple[Any, ...], ...]

    def create(self, dialect: Dialect) -> str:
        types = (f"{c} {sqlite if dialect is SQLITE else pg}" for c, sqlite, pg in self.columns)
        return f"CREATE TABLE {self.name} ({', '.join(types)})"

    def insert(self, dialect: Dialect) -> tuple[str, list[tuple[Any, ...]]]:
        """The INSERT statement for ``dialect`` and the values of every row."""
        json_columns = [pg.startswith("JSONB") for _, _, pg in self.columns]
        cast = "::jsonb" if dialect is POSTGRESQL else ""
        marks = (dialect.placeholder + (cast if j else "") for j in json_columns)
        values = [
            tuple(json.dumps(v) if j else v for v, j in zip(row, json_columns, strict=True))
            for row in self.rows
        ]
        return f"INSERT INTO {self.name} VALUES ({', '.join(marks)})", values  # noqa: S608


_TEXT = ("TEXT NOT NULL", 'TEXT COLLATE "C" NOT NULL')
EVALS = Table(
    "evals",
    (
        ("name", *_TEXT),
        ("display", *_TEXT),
        ("state", "INTEGER NOT NULL", "INTEGER NOT NULL"),
        ("created", "INTEGER", "BIGINT"),
        ("turns", "INTEGER NOT NULL", "BIGINT NOT NULL"),
        ("done", "INTEGER NOT NULL", "BOOLEAN NOT NULL"),
        ("tags", "TEXT NOT NULL", "JSONB NOT NULL"),
    ),
    tuple(tuple(row.values()) for row in ROWS),  # each row's keys are in column order
)


def _database() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.execute(EVALS.create(SQLITE))
    connection.executemany(*EVALS.insert(SQLITE))
    return connection


DB = _database()


def _run(sql: str, params: list[object]) -> frozenset[str]:
    # The condition is compile_filter's output: the subject under test, not user text.
    rows = DB.execute(f"SELECT name FROM evals WHERE {sql}", params).fetchall()  # noqa: S608
    return frozenset(name for (name,) in rows)


def matching(text: str) -> frozenset[str]:
    sql, params = compile_filter(parse(text), FIELDS, SQLITE)
    assert_structural(sql, SQLITE)
    return _run(sql, params)


# The only words compiled SQL may contain besides column names: no value from a filter can appear.
_SQL_WORDS = frozenset(
    {
        *("AND", "OR", "NOT", "IS", "NULL", "EXISTS", "SELECT", "FROM", "WHERE", "value"),
        *("GLOB", "LIKE", "ESCAPE", "COLLATE", "text"),
        *("json_each", "json_array_length", "jsonb_build_array", "jsonb_array_length"),
    }
)
_SQL_TOKEN = re.compile(
    r"\s+|[()]|\?|%s|<>|<=|>=|=|<|>|@>|::|'\\'|''|\"C\"|1=1|1=0|[0-9]+|[A-Za-z_][A-Za-z0-9_.]*"
)
COLUMNS = frozenset(spec.column for spec in FIELDS.values())


def assert_structural(sql: str, dialect: Dialect) -> None:
    """The SQL is built only from operators, placeholders, our own words and known columns."""
    position = 0
    while position < len(sql):
        token = _SQL_TOKEN.match(sql, position)
        assert token is not None, f"unexpected SQL at {position}: {sql!r}"
        word = token.group()
        if word[0].isalpha() or word[0] == "_":
            assert word in _SQL_WORDS or word in COLUMNS, f"unexpected word {word!r} in {sql!r}"
        position = token.end()
    other = POSTGRESQL if dialect is SQLITE else SQLITE
    assert other.placeholder not in sql


MATCH_CASES: list[tuple[str, set[str]]] = [
    ("", set(ALL)),
    # STRING equality is exact and case-sensitive.
    ('display_name = "Alpha smoke test"', {"alpha"}),
    ('display_name = "alpha smoke test"', set()),
    ("display_name != 'Alpha smoke test'", ALL - {"alpha"}),
    ('name = "gamma"', {"gamma"}),
    # Wildcards in quoted values: prefix, suffix, contains; case-sensitive; metacharacters literal.
    ('display_name = "Alpha*"', {"alpha"}),
    ('display_name = "alpha*"', set()),
    ('display_name = "*test"', {"alpha"}),
    ('display_name = "*smoke*"', {"alpha"}),
    ('display_name = "beta_1*"', {"beta"}),
    ('display_name = "bet__*"', set()),
    ('display_name = "beta%*"', set()),
    ('display_name = "*100%"', {"beta"}),
    ('display_name = "*a*s*"', {"gamma"}),
    ('display_name = "Gamma*star"', {"gamma"}),
    ('display_name = "Gamm?*"', set()),
    ('display_name = "*[x]?"', {"epsilon"}),
    ('display_name = "*x]*"', {"epsilon"}),
    ('display_name = "*"', set(ALL)),
    ('display_name != "Alpha*"', ALL - {"alpha"}),
    ('display_name != "*"', set()),
    # Bare values are never patterns.
    ("display_name = Alpha*", set()),
    # ':' on a string is a substring test; ':*' (bare) is presence.
    ("display_name:smoke", {"alpha"}),
    ("display_name:Smoke", set()),
    ('display_name:"100%"', {"beta"}),
    ("display_name:_", {"beta"}),
    ('display_name:"*"', {"gamma"}),
    ('display_name:"[x]"', {"epsilon"}),
    ("display_name:*", ALL - {"delta"}),
    ("-display_name:*", {"delta"}),
    # Ordering on strings is by code point.
    ('display_name < "B"', {"alpha", "delta"}),
    ('display_name >= "b"', {"beta", "epsilon"}),
    ('display_name > "beta_100%"', {"epsilon"}),
    ('display_name <= ""', {"delta"}),
    # ENUM by name or number; ':' means '='; ':*' means "not the zero value".
    ("state = COMPLETED", {"alpha", "epsilon"}),
    ("state = 2", {"alpha", "epsilon"}),
    ("state = '2'", {"alpha", "epsilon"}),
    ('state = "COMPLETED"', {"alpha", "epsilon"}),
    ("state != COMPLETED", {"beta", "gamma", "delta"}),
    ("state:FAILED", {"gamma"}),
    ("state:*", ALL - {"delta"}),
    ("state = 7", set()),
    ("state = COMPLETED OR state = RUNNING", {"alpha", "beta", "epsilon"}),
    # TIMESTAMP: RFC 3339 with any offset and 0-9 fraction digits; unset (NULL) never compares.
    ("create_time > 2024-01-01T00:00:00Z", {"beta", "epsilon"}),
    ("create_time >= 2024-01-01T00:00:00Z", {"alpha", "beta", "epsilon"}),
    ("create_time < 2024-01-01T00:00:00Z", {"delta"}),
    ("create_time <= 2024-01-01T00:00:00Z", {"alpha", "delta"}),
    ('create_time = "2024-06-15T12:30:00.500Z"', {"beta"}),
    ("create_time = 2024-06-15T14:30:00.5+02:00", {"beta"}),
    ("create_time = 2024-06-15t12:30:00.500000000z", {"beta"}),
    ("create_time = 2025-02-28T22:00:00Z", {"epsilon"}),
    ("create_time = 2025-02-28T17:00:00-05:00", {"epsilon"}),
    ("create_time <= 2023-12-31T23:59:59.999999999Z", {"delta"}),
    ("create_time < 2023-12-31T23:59:59.999999Z", set()),
    ("create_time != 2024-01-01T00:00:00Z", {"beta", "delta", "epsilon"}),
    ("NOT create_time = 2024-01-01T00:00:00Z", ALL - {"alpha"}),
    ("NOT create_time < 2030-01-01T00:00:00Z", {"gamma"}),
    ("create_time:*", ALL - {"gamma"}),
    ("-create_time:*", {"gamma"}),
    # INTEGER, including a dotted path.
    ("turns > 2", {"alpha", "beta", "epsilon"}),
    ("turns = -2", {"delta"}),
    ("turns = +3", {"alpha"}),
    ("turns <= 0", {"gamma", "delta"}),
    ("turns != 0", ALL - {"gamma"}),
    ("stats.turns >= 10", {"beta", "epsilon"}),
    # BOOL.
    ("done = true", {"alpha", "delta", "epsilon"}),
    ("done = false", {"beta", "gamma"}),
    ("done != true", {"beta", "gamma"}),
    # STRING_LIST: ':' and '=' both test membership of one element, exactly.
    ("tags:smoke", {"alpha", "delta"}),
    ("tags = smoke", {"alpha", "delta"}),
    ("tags:Smoke", {"epsilon"}),
    ("tags:smo", set()),
    ('tags:"a\'b"', {"delta"}),
    ("tags:nightly tags:smoke", {"alpha"}),
    ("tags:*", ALL - {"gamma"}),
    ("-tags:*", {"gamma"}),
    ("NOT tags:smoke", {"beta", "gamma", "epsilon"}),
    # Precedence, observed on data: OR binds tighter than AND.
    ("tags:smoke AND state = COMPLETED OR state = FAILED", {"alpha"}),
    ("(tags:smoke AND state = COMPLETED) OR state = FAILED", {"alpha", "gamma"}),
    ("state = FAILED OR state = RUNNING done = false", {"beta", "gamma"}),
    ("done = true state = COMPLETED OR turns < 0", {"alpha", "delta", "epsilon"}),
    ("NOT (state = COMPLETED OR done = true)", {"beta", "gamma"}),
    ("-state = COMPLETED turns > 0", {"beta"}),
    ("NOT (NOT tags:smoke)", {"alpha", "delta"}),
    # SQL in values is data.
    ("display_name = \"x' OR '1'='1\"", set()),
    ('display_name = "\'; DROP TABLE evals; --"', set()),
    ('tags:"\') OR 1=1 --"', set()),
    ("display_name:\"' OR name LIKE '%\"", set()),
]


@pytest.mark.parametrize(("text", "expected"), MATCH_CASES)
def test_filter_selects_rows(text: str, expected: set[str]) -> None:
    assert matching(text) == expected


def test_injection_attempts_are_parameters() -> None:
    payload = "'; DROP TABLE evals; --"
    for text in (f'display_name = "{payload}"', f'tags:"{payload}"', f'name = "*{payload}"'):
        sql, params = compile_filter(parse(text), FIELDS, SQLITE)
        assert payload not in sql
        assert any(payload in str(param) for param in params)
    assert matching('display_name = "x\') OR 1=1 --"') == set()
    assert DB.execute("SELECT count(*) FROM evals").fetchone() == (len(ROWS),)


def test_empty_filter_is_true() -> None:
    assert compile_filter(None, FIELDS, SQLITE) == ("1=1", [])
    assert compile_filter(None, FIELDS, POSTGRESQL) == ("1=1", [])
    assert _run(*compile_filter(None, FIELDS, SQLITE)) == ALL


def test_compiled_condition_can_be_anded_into_a_larger_query() -> None:
    # An unparenthesized "a OR b" would let the OR escape an enclosing AND.
    sql, params = compile_filter(parse("state = FAILED OR state = RUNNING"), FIELDS, SQLITE)
    statement = f"SELECT name FROM evals WHERE done = 1 AND {sql}"  # noqa: S608 - under test
    rows = DB.execute(statement, params).fetchall()
    assert rows == []


def test_expected_sqlite_sql() -> None:
    text = 'display_name = "ab*" state = COMPLETED OR state = 1 -create_time < 2024-01-01T00:00:00Z'
    # Operands are reordered, deepest first (see test_deep_filters_fit_sqlite); params follow.
    assert compile_filter(parse(text), FIELDS, SQLITE) == (
        "(NOT (created IS NOT NULL AND created < ?) AND (state = ? OR state = ?) AND "
        "display GLOB ?)",
        [1704067200000000, 2, 1, "ab*"],
    )
    assert compile_filter(parse("tags:x"), FIELDS, SQLITE) == (
        "EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)",
        ["x"],
    )
    assert compile_filter(parse("create_time:*"), FIELDS, SQLITE) == ("created IS NOT NULL", [])


POSTGRESQL_CASES: list[tuple[str, str, list[object]]] = [
    ('display_name = "a%_\\\\*"', "display LIKE %s ESCAPE '\\'", ["a\\%\\_\\\\%"]),
    ('display_name != "*x"', "display NOT LIKE %s ESCAPE '\\'", ["%x"]),
    ("display_name:x", "display LIKE %s ESCAPE '\\'", ["%x%"]),
    ("display_name < x", 'display < %s COLLATE "C"', ["x"]),
    ("display_name = x", "display = %s", ["x"]),
    ("tags:x", "tags @> jsonb_build_array(%s::text)", ["x"]),
    ("tags:*", "jsonb_array_length(tags) > 0", []),
    ("done = false", "done = %s", [False]),
    ("state:RUNNING", "state = %s", [1]),
    (
        "turns > 1 OR NOT turns = 2",
        "(NOT (turns = %s) OR turns > %s)",
        [2, 1],
    ),
]


@pytest.mark.parametrize(("text", "sql", "params"), POSTGRESQL_CASES)
def test_postgresql_sql(text: str, sql: str, params: list[object]) -> None:
    compiled = compile_filter(parse(text), FIELDS, POSTGRESQL)
    assert compiled == (sql, params)
    assert_structural(compiled[0], POSTGRESQL)
    # psycopg reads every '%' in the SQL text as a placeholder.
    assert "%" not in compiled[0].replace("%s", "")


# --- Validation errors ------------------------------------------------------------------------

COMPILE_ERRORS: list[tuple[str, int, str]] = [
    ("nope = 1", 0, "unknown field 'nope'; filterable fields are: create_time, display_name"),
    ("turns = 1 AND stats.nope = 2", 14, "unknown field 'stats.nope'"),
    ("NOT (turns = 1 OR Turns = 2)", 18, "unknown field 'Turns'"),
    ("state = RUNNIN", 8, "expected one of STATE_UNSPECIFIED, RUNNING, COMPLETED, FAILED"),
    ("state = completed", 8, "invalid value 'completed' for enum field 'state'"),
    ("state = 99999999999", 8, "invalid value"),
    ("state < COMPLETED", 6, "operator '<' cannot be used on enum field 'state'; use one of: = !="),
    ("create_time > yesterday", 14, "is not an RFC 3339 timestamp"),
    ("create_time > 2024-01-01", 14, "RFC 3339"),
    ("create_time > 2024-13-01T00:00:00Z", 14, "RFC 3339"),
    ("create_time > 2024-02-30T00:00:00Z", 14, "RFC 3339"),
    ("create_time > 2024-01-01T00:00:60Z", 14, "RFC 3339"),
    ("create_time > 2024-01-01T00:00:00", 14, "RFC 3339"),
    ("create_time > 2024-01-01T00:00:00.1234567890Z", 14, "RFC 3339"),
    ("create_time > 2024-01-01T00:00:00+24:00", 14, "RFC 3339"),
    ("create_time > '2024-01-01 00:00:00Z'", 14, "RFC 3339"),
    ("create_time:2024-01-01T00:00:00Z", 11, "only tests presence"),
    ("turns = 1.5", 8, "field 'turns' is an integer; '1.5' is not"),
    ("turns = ３", 8, "is an integer"),
    ("turns = 1_000", 8, "is an integer"),
    ("turns > 9223372036854775808", 8, "out of range"),
    ("turns:1", 5, "operator ':' cannot be used on integer field"),
    ("done = yes", 7, "expected true or false"),
    ("done = TRUE", 7, "expected true or false"),
    ("done > true", 5, "operator '>' cannot be used on bool field"),
    ("tags != x", 5, "operator '!=' cannot be used on string list field 'tags'; use one of: = :"),
    ("tags < x", 5, "cannot be used"),
    ("hello", 0, "global restrictions are not supported"),
    ('turns = 1 "quoted"', 10, "global restrictions are not supported"),
    ("NOT bogus", 4, "global restrictions are not supported"),
    ("turns = 1 and turns = 2", 10, "global restrictions are not supported"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), COMPILE_ERRORS)
def test_compile_error(text: str, position: int, fragment: str) -> None:
    tree = parse(text)
    for dialect in (SQLITE, POSTGRESQL):
        with pytest.raises(FilterError) as caught:
            compile_filter(tree, FIELDS, dialect)
        assert caught.value.position == position
        assert fragment in caught.value.message


def test_deep_hand_built_tree_is_an_error_not_a_recursion_error() -> None:
    tree: Expr = A
    for _ in range(5000):
        tree = Not(tree)
    with pytest.raises(FilterError, match="nests deeper"):
        compile_filter(tree, {"a": FieldSpec("a", FieldKind.INTEGER)}, SQLITE)


def test_empty_chains_compile_to_their_identity() -> None:
    assert compile_filter(And(()), FIELDS, SQLITE) == ("1=1", [])
    assert compile_filter(Or(()), FIELDS, SQLITE) == ("1=0", [])


@pytest.mark.parametrize(
    ("column", "kind", "values"),
    [
        ("name; DROP TABLE x", FieldKind.STRING, {}),
        ("a.b.c", FieldKind.STRING, {}),
        ('"quoted"', FieldKind.STRING, {}),
        ("", FieldKind.STRING, {}),
        ("state", FieldKind.STRING, {"A": 1}),
    ],
)
def test_field_spec_rejects_unsafe_columns(
    column: str, kind: FieldKind, values: dict[str, int]
) -> None:
    with pytest.raises(ValueError, match=r"column|enum_values"):
        FieldSpec(column, kind, values)


# Fields of resource names (FieldSpec.reference): ":" takes a whole name or an ID.
REFERENCE_FIELDS = {
    "run": FieldSpec("ref", FieldKind.STRING, reference=True),
    "evaluations": FieldSpec("refs", FieldKind.STRING_LIST, reference=True),
}
_E = "projects/p/locations/l/apps/a/evaluations"
REFERENCE_ROWS = {
    "one": (f"{_E}/e1", [f"{_E}/e1", f"{_E}/e2"]),
    "ten": (f"{_E}/e10", [f"{_E}/e10"]),
    "odd": ("projects/p/locations/l/apps/a/runs/e1[*]?", ["x/e1%_"]),
    "none": ("", []),
}
NAMES = Table(
    "names",
    (("name", "TEXT", "TEXT"), ("ref", "TEXT", 'TEXT COLLATE "C"'), ("refs", "TEXT", "JSONB")),
    tuple((key, ref, refs) for key, (ref, refs) in REFERENCE_ROWS.items()),
)


REFERENCE_CASES = [
    ("run:e1", {"one"}),
    (f'run:"{_E}/e1"', {"one"}),
    ("run:e", set()),
    ('run:"evaluations/e1"', set()),
    ("run = e1", set()),
    (f'run = "{_E}/e1*"', {"one", "ten"}),
    ("run:*", {"one", "ten", "odd"}),
    ('run:"e1[*]?"', {"odd"}),
    ("evaluations:e2", {"one"}),
    ("evaluations = e1", {"one"}),
    (f'evaluations:"{_E}/e10"', {"ten"}),
    ("evaluations:e", set()),
    ('evaluations:"e1%_"', {"odd"}),
    ('evaluations:"e1%"', set()),
    ("NOT evaluations:e1", {"ten", "odd", "none"}),
    ("evaluations:*", {"one", "ten", "odd"}),
]


@pytest.mark.parametrize(("text", "expected"), REFERENCE_CASES)
def test_resource_names_match_by_name_or_id(text: str, expected: set[str]) -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute(NAMES.create(SQLITE))
    connection.executemany(*NAMES.insert(SQLITE))
    sql, params = compile_filter(parse(text), REFERENCE_FIELDS, SQLITE)
    rows = connection.execute(f"SELECT name FROM names WHERE {sql}", params).fetchall()  # noqa: S608 - under test
    assert {name for (name,) in rows} == expected


@pytest.mark.parametrize("kind", [FieldKind.ENUM, FieldKind.INTEGER, FieldKind.TIMESTAMP])
def test_only_string_fields_hold_references(kind: FieldKind) -> None:
    with pytest.raises(ValueError, match="reference"):
        FieldSpec("ref", kind, reference=True)


def _compile_or_error(
    tree: Expr | None, dialect: Dialect
) -> tuple[str, list[object]] | FilterError:
    try:
        return compile_filter(tree, FIELDS, dialect)
    except FilterError as error:
        return error


def run_in_context(sql: str, params: list[object]) -> frozenset[str]:
    """Run a condition inside a statement like the service's own: a correlated EXISTS."""
    statement = (
        "SELECT name FROM evals WHERE name <> ? AND EXISTS (SELECT 1 FROM evals r "  # noqa: S608 - under test
        f"WHERE r.name = evals.name AND r.turns > ? AND {sql})"
    )
    rows = DB.execute(statement, ["", -100, *params]).fetchall()
    return frozenset(name for (name,) in rows)


def test_longest_filters_run_on_sqlite() -> None:
    # 2048 restrictions in one chain: SQLite refuses a left-deep tree deeper than 1000.
    for term in ("turns=1", "tags:x", "-done=true", "NOT (turns=1 tags:x)"):
        for joiner in (" ", " OR "):
            text = joiner.join([term] * ((8192 + len(joiner)) // (len(term) + len(joiner))))
            assert len(text) <= 8192
            sql, params = compile_filter(parse(text), FIELDS, SQLITE)
            run_in_context(sql, params)


DEEP_SHAPES = [
    ("NOT (", ")"),
    ("-(", ")"),
    ("(tags:x OR ", ")"),
    ("turns=1 AND NOT (", ")"),
    ("(tags:x OR NOT (tags:y ", "))"),
    ("tags:x (done=true OR NOT (", "))"),
    ("(tags:x tags:y) OR (tags:z AND (", "))"),
]


@pytest.mark.parametrize(("opening", "closing"), DEEP_SHAPES)
def test_deep_filters_fit_sqlite_or_are_rejected(opening: str, closing: str) -> None:
    """What SQLite accepts runs, with room for a statement around it; 16 levels always fit."""
    for levels in range(1, 33):
        text = opening * levels + "tags:smoke" + closing * levels
        if text.count("(") > 64:
            break
        tree = parse(text)
        compile_filter(tree, FIELDS, POSTGRESQL)  # no engine limit
        outcome = _compile_or_error(tree, SQLITE)
        if isinstance(outcome, FilterError):
            assert text.count("(") > 16
            assert outcome.message == "filter is nested too deeply to run on sqlite"
            assert text[outcome.position :].startswith("tags:smoke")
        else:
            run_in_context(*outcome)


def test_nesting_limit_on_sqlite() -> None:
    assert matching("NOT (" * 16 + "tags:smoke" + ")" * 16) == {"alpha", "delta"}
    assert matching("NOT (" * 15 + "tags:smoke" + ")" * 15) == ALL - {"alpha", "delta"}
    text = "NOT (" * 64 + "tags:smoke" + ")" * 64
    with pytest.raises(FilterError) as caught:
        compile_filter(parse(text), FIELDS, SQLITE)
    assert caught.value.position == 5 * 64
    assert compile_filter(parse(text), FIELDS, POSTGRESQL)[1] == ["smoke"]


def test_expression_height_limit() -> None:
    shallow = replace(SQLITE, max_expression_height=5)
    assert compile_filter(parse("turns=1 turns=2 turns=3"), FIELDS, shallow)[1] == [1, 2, 3]
    with pytest.raises(FilterError, match="nested too deeply to run on sqlite"):
        compile_filter(parse("turns=1 turns=2 turns=3 turns=4 turns=5"), FIELDS, shallow)


# --- Property tests ---------------------------------------------------------------------------

_BARE_VALUE = re.compile(r"[^\s()\"'=<>!,]+")
KEYWORDS = {"AND", "OR", "NOT"}

# Field paths: one token of dot-separated segments; a segment never starts a path with '-'.
_segment = st.from_regex(r"[A-Za-z_é*~][A-Za-z0-9_\-*~é+/]{0,6}", fullmatch=True)
paths = st.lists(_segment, min_size=1, max_size=3).map(".".join).filter(lambda p: p not in KEYWORDS)
_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0"), max_size=12)
bare_values = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\0"), min_size=1, max_size=12
).filter(lambda v: _BARE_VALUE.fullmatch(v) is not None and v not in KEYWORDS)
comparators = st.sampled_from(list(Comparator))


@st.composite
def restrictions(draw: st.DrawFn) -> Restriction:
    quoted = draw(st.booleans())
    value = draw(_text if quoted else bare_values)
    return Restriction(draw(paths), draw(comparators), value, quoted)


globals_ = st.one_of(
    paths.map(Global),
    _text.map(lambda value: Global(value, quoted=True)),
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    chains = st.lists(children, min_size=2, max_size=4).map(tuple)
    return st.one_of(children.map(Not), chains.map(And), chains.map(Or))


trees = st.recursive(st.one_of(restrictions(), globals_), _extend, max_leaves=12)


def _quote(value: str, choose: Any) -> str:
    quote = choose.choice(['"', "'"])
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def render(expr: Expr, choose: Any) -> str:
    """Filter text for a tree, picking at random among equivalent spellings."""
    if isinstance(expr, Restriction):
        value = _quote(expr.value, choose) if expr.quoted else expr.value
        space = choose.choice(["", " "])
        return f"{expr.path}{space}{expr.comparator.value}{space}{value}"
    if isinstance(expr, Global):
        return _quote(expr.value, choose) if expr.quoted else expr.value
    if isinstance(expr, Not):
        operand = expr.operand
        inner = render(operand, choose)
        if not isinstance(operand, Restriction | Global):
            inner = f"({inner})"
        return choose.choice(["NOT ", "-"]) + inner
    if isinstance(expr, And):
        parts = [
            f"({render(op, choose)})" if isinstance(op, And) else render(op, choose)
            for op in expr.operands
        ]
        text = parts[0]
        for part in parts[1:]:
            text += choose.choice([" AND ", " "]) + part
        return text
    parts = [
        f"({render(op, choose)})" if isinstance(op, And | Or) else render(op, choose)
        for op in expr.operands
    ]
    return " OR ".join(parts)


@settings(max_examples=300, deadline=None)
@given(trees, st.randoms(use_true_random=False))
def test_round_trip(tree: Expr, choose: Any) -> None:
    text = render(tree, choose)
    assert parse(text) == tree, text


def _parse_or_error(text: str) -> Expr | FilterError | None:
    try:
        return parse(text)
    except FilterError as error:
        return error


_FILTERISH = st.lists(
    st.sampled_from([*"ab.= !<>:()\"'\\-*1 \t", "AND", "OR", "NOT", "tags", "turns", "é", "\0"]),
    max_size=60,
)


@settings(max_examples=500, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=200), _FILTERISH.map("".join)))
def test_arbitrary_text_only_raises_filter_error(text: str) -> None:
    outcome = _parse_or_error(text)
    if not isinstance(outcome, FilterError):
        outcome = _compile_or_error(outcome, SQLITE)
    if isinstance(outcome, FilterError):
        assert 0 <= outcome.position <= len(text)
    else:
        assert_structural(outcome[0], SQLITE)
        _run(*outcome)


@pytest.mark.parametrize(
    "text",
    [
        "(" * 8192,
        ")" * 8192,
        '"' * 8192,
        '"' + "\\" * 8190 + '"',
        "NOT " * 2048,
        "-" * 8192,
        "a" * 8192,
        "a=" * 4096,
        "(" * 64 + "a=1 " * 2000,
        "'" + "(" * 8190,
    ],
)
def test_adversarial_text_finishes(text: str) -> None:
    outcome = _parse_or_error(text)
    if isinstance(outcome, FilterError):
        assert 0 <= outcome.position <= len(text)


# Semantic property: compiled SQL, run by SQLite, selects exactly the rows a Python model selects.

_TIMES = [row["created"] for row in ROWS if row["created"] is not None]


def _format_time(micros: int, offset_minutes: int, digits: int) -> str:
    zone = timezone(timedelta(minutes=offset_minutes))
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    local = moment.astimezone(zone)
    fraction = f"{local.microsecond:06d}000"[:digits]
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if digits else "")
    if offset_minutes == 0 and digits % 2 == 0:
        return text + "Z"
    sign = "-" if offset_minutes < 0 else "+"
    return text + f"{sign}{abs(offset_minutes) // 60:02d}:{abs(offset_minutes) % 60:02d}"


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    micros = draw(st.sampled_from(_TIMES)) + draw(
        st.sampled_from([-1, 0, 1, 999_999, -3_600_000_000])
    )
    offset = draw(st.sampled_from([0, 60, -300, 330, 23 * 60 + 59]))
    digits = draw(st.sampled_from([0, 3, 6, 9])) if micros % 1_000_000 == 0 else 6
    return _format_time(micros, offset, digits)


_STRINGS = sorted({row["display"] for row in ROWS} | {"beta", "B", "", "x"})
_WORDS = ["smoke", "Smoke", "nightly", "a'b", "%", "_", "*", "[x]", "a*s", "?", "e"]


_NOT_HAS = [c for c in Comparator if c is not Comparator.HAS]
_PRESENCE = Comparator.HAS, "*"


@st.composite
def _string_values(draw: st.DrawFn) -> tuple[Comparator, str, bool]:
    comparator = draw(comparators)
    core = draw(st.one_of(st.sampled_from(_STRINGS + _WORDS), _text))
    if comparator is Comparator.HAS and draw(st.booleans()):
        return (*_PRESENCE, False)
    if comparator in (Comparator.EQ, Comparator.NE) and draw(st.booleans()):
        core = draw(st.sampled_from(["*", ""])) + core + draw(st.sampled_from(["*", ""]))
    return comparator, core, True


@st.composite
def _enum_values(draw: st.DrawFn) -> tuple[Comparator, str, bool]:
    comparator = draw(st.sampled_from([Comparator.EQ, Comparator.NE, Comparator.HAS]))
    if comparator is Comparator.HAS and draw(st.booleans()):
        return (*_PRESENCE, False)
    value = draw(st.one_of(st.sampled_from(sorted(STATES)), st.integers(-1, 4).map(str)))
    return comparator, value, draw(st.booleans())


@st.composite
def _timestamp_values(draw: st.DrawFn) -> tuple[Comparator, str, bool]:
    if draw(st.integers(0, 6)) == 0:
        return (*_PRESENCE, False)
    return draw(st.sampled_from(_NOT_HAS)), draw(timestamps()), draw(st.booleans())


@st.composite
def _list_values(draw: st.DrawFn) -> tuple[Comparator, str, bool]:
    comparator = draw(st.sampled_from([Comparator.EQ, Comparator.HAS]))
    if comparator is Comparator.HAS and draw(st.booleans()):
        return (*_PRESENCE, False)
    return comparator, draw(st.sampled_from(_WORDS)), True


_VALUES: dict[FieldKind, st.SearchStrategy[tuple[Comparator, str, bool]]] = {
    FieldKind.STRING: _string_values(),
    FieldKind.ENUM: _enum_values(),
    FieldKind.TIMESTAMP: _timestamp_values(),
    FieldKind.INTEGER: st.tuples(
        st.sampled_from(_NOT_HAS), st.integers(-3, 43).map(str), st.booleans()
    ),
    FieldKind.BOOL: st.tuples(
        st.sampled_from([Comparator.EQ, Comparator.NE]),
        st.sampled_from(["true", "false"]),
        st.booleans(),
    ),
    FieldKind.STRING_LIST: _list_values(),
}


@st.composite
def valid_restrictions(draw: st.DrawFn) -> Restriction:
    """Restrictions on the table's fields with values of the right type."""
    path = draw(st.sampled_from(sorted(FIELDS)))
    comparator, value, quoted = draw(_VALUES[FIELDS[path].kind])
    return Restriction(path, comparator, value, quoted)


valid_trees = st.recursive(valid_restrictions(), _extend, max_leaves=8)


def _compare(left: Any, comparator: Comparator, right: Any) -> bool:
    return {
        Comparator.EQ: left == right,
        Comparator.NE: left != right,
        Comparator.LT: left < right,
        Comparator.LE: left <= right,
        Comparator.GT: left > right,
        Comparator.GE: left >= right,
    }[comparator]


def _string_model(stored: str, restriction: Restriction) -> bool:
    comparator, value = restriction.comparator, restriction.value
    if comparator is Comparator.HAS:
        return value in stored
    prefix, suffix = value.startswith("*"), value.endswith("*")
    if comparator in (Comparator.EQ, Comparator.NE) and restriction.quoted and (prefix or suffix):
        inner = value[1 if prefix else 0 : -1 if suffix else None]
        if prefix and suffix:
            hit = inner in stored
        else:
            hit = stored.endswith(inner) if prefix else stored.startswith(inner)
        return hit == (comparator is Comparator.EQ)
    return _compare(stored, comparator, value)


def _enum_model(stored: int, restriction: Restriction) -> bool:
    value = restriction.value
    number = STATES[value] if value in STATES else int(value)
    comparator = restriction.comparator
    return _compare(stored, Comparator.EQ if comparator is Comparator.HAS else comparator, number)


def _timestamp_model(stored: int | None, restriction: Restriction) -> bool:
    # AIP-160: a comparison on an unset message field is false, whatever the comparator.
    if stored is None:
        return False
    return _compare(stored, restriction.comparator, _micros(restriction.value))


_MODELS: dict[FieldKind, Any] = {
    FieldKind.STRING: _string_model,
    FieldKind.ENUM: _enum_model,
    FieldKind.TIMESTAMP: _timestamp_model,
    FieldKind.INTEGER: lambda stored, r: _compare(stored, r.comparator, int(r.value)),
    FieldKind.BOOL: lambda stored, r: _compare(stored, r.comparator, r.value == "true"),
    FieldKind.STRING_LIST: lambda stored, r: r.value in stored,
}
# ":*" (AIP-160 has operator with "*"): set to a non-default value.
_PRESENT: dict[FieldKind, Any] = {
    FieldKind.STRING: lambda stored: stored != "",
    FieldKind.ENUM: lambda stored: stored != 0,
    FieldKind.TIMESTAMP: lambda stored: stored is not None,
    FieldKind.STRING_LIST: lambda stored: len(stored) > 0,
}


def model(expr: Expr, row: dict[str, Any]) -> bool:
    """The filter semantics, independently of SQL: what each restriction means for one row."""
    if isinstance(expr, Not):
        return not model(expr.operand, row)
    if isinstance(expr, And):
        return all(model(operand, row) for operand in expr.operands)
    if isinstance(expr, Or):
        return any(model(operand, row) for operand in expr.operands)
    assert isinstance(expr, Restriction)
    spec = FIELDS[expr.path]
    stored = row["id"] if spec.column == "evals.name" else row[spec.column]
    if expr.comparator is Comparator.HAS and expr.value == "*" and not expr.quoted:
        return bool(_PRESENT[spec.kind](stored))
    return bool(_MODELS[spec.kind](stored, expr))


@settings(max_examples=400, deadline=None)
@given(valid_trees)
def test_sqlite_agrees_with_the_model(tree: Expr) -> None:
    sql, params = compile_filter(tree, FIELDS, SQLITE)
    assert_structural(sql, SQLITE)
    assert sql.count("?") == len(params)
    selected = _run(sql, params)
    assert run_in_context(sql, params) == selected
    assert selected == {row["id"] for row in ROWS if model(tree, row)}
    # Two-valued logic: NOT selects exactly the other rows, even where a column is NULL.
    assert _run(*compile_filter(Not(tree), FIELDS, SQLITE)) == ALL - selected
    # The same tree compiles for PostgreSQL with one %s per parameter and no stray '%'.
    pg_sql, pg_params = compile_filter(tree, FIELDS, POSTGRESQL)
    assert_structural(pg_sql, POSTGRESQL)
    assert pg_sql.count("%s") == len(pg_params) == len(params)
    assert "%" not in pg_sql.replace("%s", "")


@settings(max_examples=200, deadline=None)
@given(valid_trees, st.randoms(use_true_random=False))
def test_valid_trees_round_trip_to_the_same_sql(tree: Expr, choose: Any) -> None:
    reparsed = parse(render(tree, choose))
    assert reparsed == tree
    assert compile_filter(reparsed, FIELDS, SQLITE) == compile_filter(tree, FIELDS, SQLITE)
