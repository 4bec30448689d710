"""Throw-away PostgreSQL servers for tests.

``PostgresCluster.start()`` runs ``initdb`` into a fresh temporary folder and starts ``postgres``
from it as a child process: TCP on 127.0.0.1 only, on a free port, its unix socket inside the same
folder, trust authentication for the ``postgres`` superuser. ``stop()`` shuts it down and removes
the folder. Tests get a fresh database each (``create_database()``), so they never see each
other's rows.

initdb and postgres refuse to run as root; when the tests run as root (CI, containers) both run as
the ``postgres`` system user, which owns the folder.

The cluster trades durability for speed (``fsync=off``): it lives for one test session only and
a crash of the machine loses nothing anyone wants. Crashes of *our* server (SIGKILL tests) are
unaffected; PostgreSQL itself stays up.

With ``CES_EVAL_TEST_POSTGRES_URL`` set to a superuser URL of a server you already run
(``PostgresCluster.from_environment()``), no server is started: databases are created there and
dropped again, and ``stop()`` leaves that server running.

Server binaries come from ``find_bindir()``; ``tools/postgres.sh ensure`` installs them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

__all__ = [
    "ENV_URL",
    "PostgresCluster",
    "PostgresStartFailed",
    "PostgresUnavailable",
    "find_bindir",
]

ENV_URL = "CES_EVAL_TEST_POSTGRES_URL"
_SERVER_PROGRAMS = ("initdb", "postgres")
_DATABASE_PREFIX = "ces_eval_test_"
_BIND_FAILURES = ("could not bind", "Address already in use", "could not create any TCP/IP")
_START_ATTEMPTS = 5

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, postgres) were not found; run "
    "`tools/postgres.sh ensure` (installs Debian's postgresql package when run as root, otherwise "
    f"says what to install), or set {ENV_URL} to the superuser URL of a running server, or set "
    "CES_EVAL_SKIP_POSTGRES=1 to skip the PostgreSQL tests."
)


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries (or no ``postgres`` user to run them as root)."""


class PostgresStartFailed(RuntimeError):
    """initdb or postgres failed, or the external server is unreachable; says why."""


def _has_server(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in _SERVER_PROGRAMS)


def _version_key(folder: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin; "9.6" sorts below "15".
    try:
        return tuple(int(part) for part in folder.parent.name.split("."))
    except ValueError:
        return (-1,)


def find_bindir() -> Path | None:
    """The folder holding the server programs initdb and postgres, or None.

    Same order as ``tools/postgres.sh bindir``: the newest ``/usr/lib/postgresql/<version>/bin``
    (Debian, Ubuntu), then ``pg_config --bindir``, then the folder of an ``initdb`` on PATH.
    """
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
            if found:
                candidates.append(Path(found))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    return next((folder for folder in candidates if _has_server(folder)), None)


def _free_port() -> int:
    # The port is free when the socket closes; another process may still take it before postgres
    # binds it, which start() notices (postgres exits with "could not bind") and retries.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _database_name(url: str) -> str:
    name = psycopg.conninfo.conninfo_to_dict(url).get("dbname")
    if not isinstance(name, str) or not name:
        raise ValueError(f"no database name in {url!r}")
    return name


class PostgresCluster:
    """One PostgreSQL server for a test session; one database per test.

    Use ``start()``/``stop()`` or ``with PostgresCluster() as cluster:``. ``bindir`` defaults to
    ``find_bindir()``; ``external_url`` uses that running server instead of starting one.
    """

    def __init__(
        self,
        bindir: Path | None = None,
        *,
        external_url: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.bindir = bindir
        self.external_url = external_url
        self.timeout = timeout
        self.folder: Path | None = None
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._user: pwd.struct_passwd | None = None
        self._databases: set[str] = set()
        self._external_connected = False

    @classmethod
    def from_environment(cls, *, timeout: float = 60.0) -> PostgresCluster:
        """The server named by ``CES_EVAL_TEST_POSTGRES_URL``, else a new one from local binaries.

        Raises PostgresUnavailable (with what to do) when neither is available.
        """
        external = os.environ.get(ENV_URL, "").strip()
        if external:
            return cls(external_url=external, timeout=timeout)
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailable(INSTALL_HINT)
        return cls(bindir, timeout=timeout)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def started(self) -> bool:
        if self.external_url is not None:
            return self._external_connected
        return self.process is not None and self.process.poll() is None

    @property
    def admin_url(self) -> str:
        """Superuser URL of the ``postgres`` maintenance database."""
        if self.external_url is not None:
            return self.external_url
        if self.port is None:
            raise RuntimeError("the PostgreSQL cluster is not started")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        if self.started:
            return
        self.stop()  # the leftovers of a server that died, if any
        if self.external_url is not None:
            self._connect_external()
            return
        bindir = self.bindir or find_bindir()
        if bindir is None:
            raise PostgresUnavailable(INSTALL_HINT)
        self.bindir = bindir
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable(
                    "running as root, and initdb/postgres refuse to run as root, but there is no "
                    "`postgres` system user to run them as (Debian's postgresql package creates "
                    "it; `tools/postgres.sh ensure` installs that package)"
                ) from None
        self.folder = Path(tempfile.mkdtemp(prefix="ces-eval-pg-"))
        atexit.register(self.stop)
        try:
            if self._user is not None:
                os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
            self._initdb()
            self._launch()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Shut the server down (fast shutdown, then harder) and remove its folder.

        For an external server: drop the databases this object created and leave it running.
        Safe to call more than once.
        """
        atexit.unregister(self.stop)
        if self.external_url is not None:
            if self._external_connected:
                for name in sorted(self._databases):
                    with contextlib.suppress(psycopg.Error):
                        self._drop(name)
            self._external_connected = False
            return
        process, self.process = self.process, None
        if process is not None:
            # SIGINT is PostgreSQL's fast shutdown (pg_ctl stop -m fast): abort open transactions,
            # disconnect clients, checkpoint. SIGQUIT is immediate shutdown; SIGKILL the last word.
            for sig, grace in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0)):
                if process.poll() is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=grace)
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None
        folder, self.folder = self.folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        self.port = None
        self._databases.clear()

    # -- databases ---------------------------------------------------------------------------

    def create_database(self) -> str:
        """Create a new, empty, uniquely named database; return its URL (same user as admin)."""
        name = f"{_DATABASE_PREFIX}{uuid.uuid4().hex}"
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self._databases.add(name)
        return self.database_url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by create_database(), disconnecting anyone still connected."""
        self._drop(_database_name(url))

    def database_url(self, name: str) -> str:
        """The admin URL pointed at database ``name``."""
        parts = urlsplit(self.admin_url)
        if parts.scheme in {"postgresql", "postgres"}:
            return urlunsplit(parts._replace(path=f"/{name}"))
        return psycopg.conninfo.make_conninfo(self.admin_url, dbname=name)

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        self._databases.discard(name)

    # -- start-up ----------------------------------------------------------------------------

    def _as_server_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _initdb(self) -> None:
        assert self.bindir is not None
        assert self.folder is not None
        command = [
            str(self.bindir / "initdb"),
            "--pgdata",
            str(self.folder / "data"),
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",  # C collation: byte order, the same as SQLite's BINARY
            "--no-sync",
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=self.timeout,
            cwd=self.folder,
            **self._as_server_user(),
        )
        if done.returncode != 0:
            hint = ""
            if self._user is not None:
                hint = (
                    f"\n(initdb runs as the postgres user: every folder above {self.folder} must "
                    "be searchable by it; set TMPDIR to such a folder, e.g. /tmp)"
                )
            raise PostgresStartFailed(
                f"initdb failed (exit {done.returncode}):\n{done.stdout}{done.stderr}{hint}"
            )

    def _launch(self) -> None:
        assert self.bindir is not None
        assert self.folder is not None
        log_path = self.folder / "postgres.log"
        self._log = log_path.open("ab")
        for _attempt in range(_START_ATTEMPTS):
            start_offset = self._log.tell()
            self.port = _free_port()
            command = [
                str(self.bindir / "postgres"),
                "-D",
                str(self.folder / "data"),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.folder}",
                "-c",
                "max_connections=300",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                **self._as_server_user(),
            )
            outcome = self._wait_ready()
            if outcome == "ready":
                return
            log = self._read_log(log_path, start_offset)
            self.process.wait(timeout=30)
            self.process = None
            if outcome == "exited" and any(text in log for text in _BIND_FAILURES):
                continue  # lost the port to another process: try another
            raise PostgresStartFailed(
                f"PostgreSQL did not start on port {self.port} ({outcome}); its log:\n{log}"
            )
        raise PostgresStartFailed(
            f"PostgreSQL could not bind a free port in {_START_ATTEMPTS} attempts; its log:\n"
            + self._read_log(log_path, 0)
        )

    def _wait_ready(self) -> str:
        """Wait for our postmaster to report itself ready, then for a connection to succeed.

        Connecting alone is not enough: while our postgres is failing to bind the port, whoever
        holds it may accept TCP and never answer, and the connect would hang until its timeout.
        """
        assert self.process is not None
        assert self.folder is not None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return "exited"
            if self._postmaster_ready(self.folder / "data" / "postmaster.pid"):
                try:
                    with psycopg.connect(self.admin_url, connect_timeout=5):
                        return "ready"
                except psycopg.OperationalError:
                    pass
            time.sleep(0.02)
        self.process.kill()
        return f"not accepting connections after {self.timeout:g} s"

    def _postmaster_ready(self, pid_file: Path) -> bool:
        # postmaster.pid: line 1 the postmaster's pid, line 4 its port, line 8 its status
        # ("starting", "ready", "stopping"), as pg_ctl -w reads it.
        assert self.process is not None
        try:
            lines = pid_file.read_text().splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return False
        return (
            len(lines) >= 8
            and lines[0].strip() == str(self.process.pid)
            and lines[3].strip() == str(self.port)
            and lines[7].strip() == "ready"
        )

    def _connect_external(self) -> None:
        try:
            with psycopg.connect(self.admin_url, connect_timeout=10) as connection:
                self.port = connection.info.port
        except psycopg.OperationalError as error:
            raise PostgresStartFailed(
                f"cannot connect to {ENV_URL}={self.admin_url!r}: {error}"
            ) from error
        self._external_connected = True

    def _read_log(self, path: Path, offset: int) -> str:
        if self._log is not None:
            self._log.flush()
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", errors="replace")
