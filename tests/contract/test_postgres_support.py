"""The PostgreSQL test fixtures give each test a real, empty database of its own."""

from __future__ import annotations

import psycopg

from tests.support.postgres import PostgresCluster


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    return {row[0] for row in rows}


def _database_exists(cluster: PostgresCluster, url: str) -> bool:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(cluster.admin_url) as connection:
        row = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    return row is not None


def test_databases_are_separate(postgres_cluster: PostgresCluster, postgres_url: str) -> None:
    other = postgres_cluster.create_database()
    assert other != postgres_url
    with psycopg.connect(postgres_url) as connection:
        connection.execute("CREATE TABLE only_here (id integer PRIMARY KEY)")
        connection.execute("INSERT INTO only_here VALUES (1)")
    assert _tables(postgres_url) == {"only_here"}
    assert _tables(other) == set()

    with psycopg.connect(other):  # dropping disconnects whoever is left
        postgres_cluster.drop_database(other)
    assert not _database_exists(postgres_cluster, other)
    assert _database_exists(postgres_cluster, postgres_url)


def test_each_test_starts_empty(postgres_url: str) -> None:
    assert _tables(postgres_url) == set()


def test_server_is_recent_utf8_and_roomy(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as connection:
        assert connection.info.server_version >= 130000
        assert connection.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        max_connections = connection.execute("SHOW max_connections").fetchone()
    if postgres_cluster.external_url is None:  # a server we started ourselves
        assert max_connections == ("300",)
        assert postgres_cluster.admin_url.startswith("postgresql://postgres@127.0.0.1:")
