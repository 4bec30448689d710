"""PostgreSQL storage: one database shared by any number of ``ces-eval serve`` replicas.

What each call reads and writes is a transaction script of :mod:`._scripts`, shared with
SQLite, in this engine's SQL (:data:`._dialect.POSTGRESQL`); this module runs them on pooled
connections, retries what the database aborted and maps ``psycopg``'s exceptions onto
:mod:`.errors`.

Nothing about correctness lives in process memory. Every conditional write is one transaction
that the database serializes: etag checks are ``UPDATE … WHERE etag = …`` (or run under the
evaluation's row lock), display-name uniqueness is a unique index, a result write locks its
evaluation's row (``SELECT … FOR UPDATE``) so derived metrics are recomputed from every committed
result, and operation leases are read against the database's clock. Migrations run under an
advisory lock, so replicas starting together apply each exactly once. Durability is the server's
commit: with PostgreSQL's default ``synchronous_commit=on`` a write returns only once its WAL
record is flushed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import ExecStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ces_eval.storage import _dialect, _scripts
from ces_eval.storage._scripted import Make, ScriptedStorage
from ces_eval.storage._scripts import Rows, Statement, Taken
from ces_eval.storage.errors import Unavailable

__all__ = ["PostgresStorage"]

T = TypeVar("T")
_Connection = psycopg.AsyncConnection[TupleRow]
# Transactions the database aborted to keep concurrent writers serializable are retried.
_RETRIES = 5
_POOL_OPTIONS = {"pool_min_size": 1, "pool_max_size": 16}
_CONNECTION_WAIT = 10.0
# How long the first connection at start may take, unless the URL sets connect_timeout.
_CONNECT_SECONDS = 5


async def _execute(connection: _Connection, statement: Statement) -> Rows:
    """Run one statement of a script; a unique index refusing a ``unique`` statement is Taken
    (the constraint's name says whether it was the display name's)."""
    try:
        # No parameters: the text is sent as it is (psycopg would read a ``%`` in it as one).
        cursor = await connection.execute(statement.sql.encode(), statement.params or None)
    except pg_errors.UniqueViolation as error:
        if statement.unique is None:
            raise
        name, display_name = statement.unique
        constraint = error.diag.constraint_name or ""
        raise Taken(name, display_name, on_display_name="display_name" in constraint) from error
    # Only a statement that returned rows has any to fetch (read from the result's status:
    # ``description`` would build its columns first).
    result = cursor.pgresult
    tuples = result is not None and result.status == ExecStatus.TUPLES_OK
    return Rows(await cursor.fetchall() if tuples else (), cursor.rowcount)


async def _run(make: Make[T], connection: _Connection) -> T:
    return await _scripts.drive_async(make(), partial(_execute, connection))


async def _point(statement: Statement, decode: Callable[[Rows], T], connection: _Connection) -> T:
    return decode(await _execute(connection, statement))


def _split_url(url: str) -> tuple[str, dict[str, int]]:
    """The libpq URL without our own ``pool_min_size``/``pool_max_size`` query parameters."""
    parts = urlsplit(url)
    ours = dict(_POOL_OPTIONS)
    kept = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            ours[key] = int(value)
        else:
            kept.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(kept))), ours


class PostgresStorage(ScriptedStorage):
    """The :class:`~ces_eval.storage.base.Storage` contract over one PostgreSQL database: the
    scripts of :class:`ScriptedStorage` run on pooled connections, each write in one
    transaction.

    ``url`` is a libpq URL (``postgresql://user:password@host:port/database?sslmode=…``) that
    may also carry ``pool_min_size`` and ``pool_max_size`` (connections per process, default
    1 and 16).
    """

    _sql = _dialect.POSTGRESQL

    def __init__(self, url: str) -> None:
        conninfo, options = _split_url(url)
        self._conninfo = conninfo
        self._pool = AsyncConnectionPool(
            conninfo,
            min_size=options["pool_min_size"],
            max_size=options["pool_max_size"],
            kwargs={"autocommit": True},
            open=False,
            name="ces-eval",
            # How long a call waits for a connection before it answers UNAVAILABLE.
            timeout=_CONNECTION_WAIT,
            reconnect_timeout=_CONNECTION_WAIT,
        )
        self._secret = b""

    # -- plumbing ----------------------------------------------------------------------------

    async def _read(self, work: Callable[[_Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; once more on a fresh one if the first was
        broken (pooled connections die with a database restart or failover)."""
        for attempt in range(2):
            try:
                async with self._pool.connection() as connection:
                    try:
                        return await work(connection)
                    except psycopg.OperationalError:
                        if attempt == 0 and connection.broken:
                            continue
                        raise
            except (psycopg.OperationalError, PoolTimeout) as error:
                raise Unavailable(str(error)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _transaction(self, make: Make[T]) -> T:
        return await self._transact(partial(_run, make))

    async def _query(self, make: Make[T]) -> T:
        return await self._read(partial(_run, make))

    async def _point_query(self, statement: Statement, decode: Callable[[Rows], T]) -> T:
        return await self._read(partial(_point, statement, decode))

    async def _transact(self, work: Callable[[_Connection], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction, again if the database aborted it to resolve a
        deadlock or a serialization conflict (nothing of it was committed)."""
        for attempt in range(_RETRIES):
            try:
                async with self._pool.connection() as connection, connection.transaction():
                    return await work(connection)
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                if attempt == _RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * 2**attempt)
            except (psycopg.OperationalError, PoolTimeout) as error:
                raise Unavailable(str(error)) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _reachable(self) -> None:
        """One connection, tried before the pool opens: a database that refuses, cannot be
        resolved or never answers is one :class:`Unavailable` within the URL's
        ``connect_timeout`` (default :data:`_CONNECT_SECONDS`), where the pool would retry
        for 30 s, logging each attempt. Its reason is libpq's first line (never the URL)."""
        given = conninfo_to_dict(self._conninfo)
        conninfo = make_conninfo(
            self._conninfo, connect_timeout=given.get("connect_timeout", _CONNECT_SECONDS)
        )
        try:
            connection = await psycopg.AsyncConnection.connect(conninfo)
        except psycopg.OperationalError as error:
            reason = (str(error).strip().splitlines() or ["no reason given"])[0]
            password = str(given.get("password") or "")
            if password:
                reason = reason.replace(password, "***")
            raise Unavailable(f"cannot connect to PostgreSQL: {reason}") from None
        await connection.close()

    async def open(self) -> None:
        await self._reachable()
        try:
            await self._pool.open(wait=True, timeout=30)
        except PoolTimeout as error:
            raise Unavailable(f"cannot connect to PostgreSQL: {error}") from error

        try:
            self._secret = await self._transaction(
                partial(_scripts.migrate, self._sql, "postgresql", "the database", os.urandom(32))
            )
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self._pool.close()

    async def secret(self) -> bytes:
        return self._secret

    @property
    def shared(self) -> bool:
        return True

    async def version(self) -> int | None:
        """None: replicas write without this process seeing it, so no read is kept."""
        return None

    async def ping(self) -> None:
        await self._query(partial(_scripts.ping, self._sql))
