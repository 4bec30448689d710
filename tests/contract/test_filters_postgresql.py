"""AIP-160 filters compiled for PostgreSQL and run on a real PostgreSQL server.

The same tables, behavioural cases and hypothesis model as tests/unit/test_filtering.py (which runs
them on SQLite): both backends must select exactly the same rows for every filter.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given, settings

from ces_eval.filtering import POSTGRESQL, Expr, Not, compile_filter, parse
from tests.support.postgres import PostgresCluster
from tests.unit.test_filtering import (
    ALL,
    EVALS,
    FIELDS,
    MATCH_CASES,
    NAMES,
    REFERENCE_CASES,
    REFERENCE_FIELDS,
    ROWS,
    assert_structural,
    model,
    valid_trees,
)

Connection = psycopg.Connection[tuple[object, ...]]


@pytest.fixture(scope="module")
def database(postgres_cluster: PostgresCluster) -> Iterator[Connection]:
    url = postgres_cluster.create_database()
    connection: Connection = psycopg.connect(url, autocommit=True)
    connection.execute(EVALS.create(POSTGRESQL))
    with connection.cursor() as cursor:
        cursor.executemany(*EVALS.insert(POSTGRESQL))
    yield connection
    connection.close()
    postgres_cluster.drop_database(url)


def _run(connection: Connection, sql: str, params: list[object]) -> frozenset[str]:
    # The condition is compile_filter's output: the subject under test, not user text.
    statement = f"SELECT name FROM evals WHERE {sql}"  # noqa: S608
    rows = connection.execute(statement.encode(), params).fetchall()
    return frozenset(str(row[0]) for row in rows)


def _select(connection: Connection, tree: Expr | None) -> frozenset[str]:
    sql, params = compile_filter(tree, FIELDS, POSTGRESQL)
    assert_structural(sql, POSTGRESQL)
    return _run(connection, sql, params)


@pytest.mark.parametrize(("text", "expected"), MATCH_CASES)
def test_filter_selects_rows_on_postgresql(
    database: Connection, text: str, expected: set[str]
) -> None:
    assert _select(database, parse(text)) == expected


@settings(max_examples=200, deadline=None)
@given(tree=valid_trees)
def test_postgresql_agrees_with_the_model(database: Connection, tree: Expr) -> None:
    selected = _select(database, tree)
    assert selected == {row["id"] for row in ROWS if model(tree, row)}
    assert _select(database, Not(tree)) == ALL - selected


@pytest.mark.parametrize(("text", "expected"), REFERENCE_CASES)
def test_resource_names_match_by_name_or_id_on_postgresql(
    database: Connection, text: str, expected: set[str]
) -> None:
    with database.transaction(force_rollback=True):
        database.execute(NAMES.create(POSTGRESQL))
        with database.cursor() as cursor:
            cursor.executemany(*NAMES.insert(POSTGRESQL))
        sql, params = compile_filter(parse(text), REFERENCE_FIELDS, POSTGRESQL)
        statement = f"SELECT name FROM names WHERE {sql}"  # noqa: S608 - under test
        rows = database.execute(statement.encode(), params).fetchall()
        assert {str(row[0]) for row in rows} == expected
