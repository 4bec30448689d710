"""Fixtures shared by every test folder, and the markers every test gets (tests/README.md).

PostgreSQL: ``postgres_cluster`` is one throw-away server for the whole session, started the first
time a test asks for it (a run that never does pays nothing); ``postgres_url`` is a fresh, empty
database on it for one test, dropped afterwards. Without server binaries the tests asking for them
fail and say to run ``tools/postgres.sh ensure``; ``CES_EVAL_SKIP_POSTGRES=1`` skips them instead.
``CES_EVAL_TEST_POSTGRES_URL`` (a superuser URL) uses a server you already run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ces_eval.testing.server import RunningServer, start_server
from tests.support import markers
from tests.support.postgres import (
    PostgresCluster,
    PostgresStartFailed,
    PostgresUnavailable,
)

# pytester runs pytest in a subprocess on a made-up suite: the plugin as users meet it.
pytest_plugins = ("pytester",)

SKIP_POSTGRES = "CES_EVAL_SKIP_POSTGRES"
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the marks added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test by what it needs: its folder, fixtures and parameters
    (:func:`tests.support.markers.implied`) on top of the marks written on it."""
    for item in items:
        folder = item.path.resolve().relative_to(TESTS).parts[0]
        callspec = getattr(item, "callspec", None)
        written = {mark.name for mark in item.iter_markers()}
        try:
            added = markers.implied(
                folder,
                getattr(item, "fixturenames", ()),
                callspec.params.values() if callspec is not None else (),
                written,
            )
        except KeyError:
            raise pytest.UsageError(
                f"{item.nodeid}: test files live in a folder of tests/ that "
                "tests/support/markers.py lists (tests/README.md)"
            ) from None
        for name in sorted(added):
            item.add_marker(name)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    if os.environ.get(SKIP_POSTGRES) == "1":
        pytest.skip(f"PostgreSQL tests skipped ({SKIP_POSTGRES}=1)")
    problem = ""
    try:
        cluster = PostgresCluster.from_environment()
        cluster.start()
    except (PostgresUnavailable, PostgresStartFailed) as error:
        problem = str(error)
    if problem:  # outside the except block: the message alone, without a chained traceback
        pytest.fail(problem, pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    url = postgres_cluster.create_database()
    yield url
    postgres_cluster.drop_database(url)


@pytest.fixture(scope="module")
def module_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RunningServer]:
    """One real ``ces-eval serve`` (SQLite) for the tests of a module that only read or call
    methods that change nothing."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    server = start_server(folder / "ces-eval.db")
    try:
        yield server
    finally:
        server.kill()
