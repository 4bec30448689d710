"""The files of one SQLite database, as this process opened them: owned, and still the same.

A SQLite database in WAL mode is three files: the database, its write-ahead log (``-wal``) and
the log's index (``-shm``), which every process using the database maps into its memory. What a
server writes is kept only while the files it has open are the ones at the path:

- Removed or replaced (``rm``, ``mv``, another file renamed over it): SQLite goes on writing into
  the open files, which nothing reaches any more, and whatever was written is gone at the next
  start. :meth:`DatabaseFiles.check` therefore requires the path to name the same files
  (``st_dev``, ``st_ino``) as when they were opened.
- Overwritten in place (``cp other.db db.sqlite``: same file, other content): SQLite reads the
  pages its log does not hold from the new content, serves a mix of both databases, and its
  checkpoints write the old database's pages into the new one, which ends up malformed. The
  database header (its first 100 bytes) says so: :meth:`DatabaseFiles.check` requires the bytes
  no write of this server changes (the magic string, page size, format versions, reserved space
  and payload fractions, application ID) to be as they were, and the header's ``user_version``
  to be the database's identity, a random number the storage writes there once
  (:meth:`DatabaseFiles.opened`). Another file copied over it has another identity (or none);
  a copy of the same database (an older backup of it) has the same one and goes unnoticed, as
  does content changed in place beyond the header.
- The index made immutable (``chattr +i``) or cut short (``truncate``): the next access through
  the mapping faults and the kernel ends the process with SIGBUS, which no handler can recover
  from inside SQLite's C code. :meth:`DatabaseFiles.check` requires the index to be as long as it
  was and neither immutable nor append-only, so that the server refuses the call instead.

A check is a few system calls (one ``pread`` of the header) and opens nothing; the storage
runs it before and after every write transaction, in its health check, and before reads (at
most every few milliseconds: a read acknowledges nothing, and a check costs as much as a point
read). What remains is a change made during one SQLite call: a write committed then is refused
after its commit (never acknowledged), a read then may see the other content, and an index made
immutable exactly then still ends the process.

The owner: one process owns a SQLite file (``ces-eval serve``, or the supervisor of
``serve --workers``, whose workers open the file shared). It holds ``flock(LOCK_EX)`` on the
database file itself, which cannot be deleted away from under it: removing the file gives the path
a new database, which the owner refuses to use (above), never a second owner of the old one. It
holds the log and the index the same way, so a server is refused on a file renamed over the path
while the log and index there are still another live server's. On Linux, flock locks and the
POSIX locks SQLite takes on the same files are independent (not on NFS, where SQLite's WAL mode
does not work anyway). A worker requires the database file to be held by an owner, so a worker
restarted after the file was replaced refuses it too.

A log left without its database: when the database file was moved or removed, SQLite closes
without its final checkpoint and leaves the log and index at the path, where the next database
opened there would replay them as its own (a replacement file is overwritten with the old
database's pages). The owner therefore, on close, checkpoints a moved database into the file
where it now is and removes its own log and index from the path (:meth:`DatabaseFiles.close`);
a server refuses to start on a path whose database is missing while a log is there (a crashed
owner's).

Closing a file descriptor drops every POSIX lock its process holds on that file, SQLite's
included: the descriptors held here are closed only after every connection of the storage, and a
process must not use the file through another SQLite connection while it opens or closes one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import sys
import threading
import time

from ces_eval.storage.base import InUse, Unavailable

__all__ = ["DatabaseFiles", "FilesChanged"]

_log = logging.getLogger(__name__)

# The database header (SQLite's file format, "The Database Header"): the bytes no
# write of this server changes (magic string, page size, file format versions, reserved space,
# payload fractions; the application ID), and user_version, where the storage keeps the
# database's identity. The change counter, page count and schema cookie change with writes
# (checkpoints copy page 1 from the log), and the text encoding is set by the first table.
_HEADER_BYTES = 100
_FIXED = (slice(0, 24), slice(68, 72))
# The index's header: two copies of SQLite's 48-byte WalIndexHdr (its change counter, the log's
# last commit frame, page count, checksums and salts), rewritten at every commit
# (sqlite.org/walformat.html, "The WAL-Index Header").
_INDEX_HEADER_BYTES = 96
_IDENTITY = slice(60, 64)

# linux/fs.h: FS_IOC_GETFLAGS is _IOR('f', 1, long); the flags that forbid writing in place.
_FS_IOC_GETFLAGS = 0x80086601
_FS_IMMUTABLE_FL = 0x00000010
_FS_APPEND_FL = 0x00000020


class FilesChanged(sqlite3.OperationalError):
    """The database's files are no longer the ones the storage opened (or no longer writable
    in place): nothing can be stored, so the call is refused before SQLite touches them. An
    OperationalError, so a write transaction fails as a whole like one SQLite refused."""


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _names(path: str, identity: tuple[int, int]) -> bool:
    """Whether ``path`` names the file of ``identity``."""
    status = _stat(path)
    return status is not None and _identity(status) == identity


def _in_use(path: str) -> InUse:
    return InUse(
        f"{path} is in use by another ces-eval server; a SQLite database serves one process "
        "(use PostgreSQL to run several replicas)"
    )


class DatabaseFiles:
    """The database file (locked by its owner) and, once opened, its log and index."""

    def __init__(self, path: str) -> None:
        self._path = path
        # SQLite names the log and index after the database's path with symlinks resolved.
        real = os.path.realpath(path)
        self._log_path, self._index_path = real + "-wal", real + "-shm"
        self._owner = False
        self._database: int | None = None
        self._descriptors: dict[str, int] = {}  # log and index, by path
        self._expected: list[tuple[str, str, tuple[int, int]]] = []
        self._index_size = 0
        self._fixed = b""  # the header's unchanging bytes, once opened (empty: not checked)
        self._identities: frozenset[bytes] = frozenset()  # user_version values allowed
        self._identity = b""  # the database's own user_version
        self._flags_readable = sys.platform.startswith("linux")
        self._changed = False
        self._transition = threading.Lock()
        self._passed = -float("inf")  # when a check last passed (time.monotonic)

    # -- opening ---------------------------------------------------------------------------

    def claim(self, *, owner: bool) -> None:
        """Open the database file (the owner creates it) and lock it: exclusively as its owner
        (:class:`InUse` when another process owns it or the log and index at the path), or
        check, as a worker, that an owner holds it (:class:`Unavailable` when none does)."""
        self._owner = owner
        try:
            descriptor = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not owner:
                raise Unavailable(
                    f"{self._path} does not exist; a worker opens its supervisor's database"
                ) from None
            self._refuse_orphaned_log()
            descriptor = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_CREAT, 0o644)
        try:
            if owner:
                self._lock(descriptor, self._path)
                for path in (self._log_path, self._index_path):
                    self._probe(path)
            else:
                self._require_owner(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        self._database = descriptor
        self._expected = [("database file", self._path, _identity(os.fstat(descriptor)))]

    def _refuse_orphaned_log(self) -> None:
        status = _stat(self._log_path)
        if status is not None and status.st_size > 0:
            raise Unavailable(
                f"{self._path} does not exist but its write-ahead log {self._log_path} does "
                "(left by a server whose database was removed or moved): move the log away, or "
                "restore the database, before starting; a new database would replay it"
            )

    @staticmethod
    def _lock(descriptor: int, path: str) -> None:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(path) from None

    def _probe(self, path: str) -> None:
        """Refuse a log or index that another live owner holds (its file was replaced)."""
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            self._lock(descriptor, self._path)
        finally:
            os.close(descriptor)  # no connection is open yet: no SQLite lock to lose

    def _require_owner(self, descriptor: int) -> None:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held exclusively: by the group's supervisor
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        raise Unavailable(
            f"{self._path} is not held by a ces-eval server: it was removed or replaced since "
            "the group's supervisor opened it"
        )

    def opened(self, *, wal: bool, identity: int = 0) -> None:
        """Record the log and index as the storage's connections opened them (in WAL mode:
        they keep both open until the storage closes, so SQLite never replaces them), and the
        database header as it is now in the file. ``identity``: the database's
        ``user_version``, as SQLite reads it (the header in the file may still hold the value
        before it, until a checkpoint copies page 1 there)."""
        if wal:
            for what, path in (
                ("write-ahead log", self._log_path),
                ("shared-memory index", self._index_path),
            ):
                try:
                    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    raise FilesChanged(f"the {what} {path} was removed while opening") from None
                self._descriptors[path] = descriptor
                if self._owner:
                    self._lock(descriptor, self._path)
                status = os.fstat(descriptor)
                self._expected.append((what, path, _identity(status)))
                if path == self._index_path:
                    self._index_size = status.st_size
        if self._database is not None:
            header = os.pread(self._database, _HEADER_BYTES, 0)
            if len(header) == _HEADER_BYTES:  # else no page was ever written: nothing to keep
                self._fixed = b"".join(header[part] for part in _FIXED)
                self._identity = identity.to_bytes(4, "big") if identity else header[_IDENTITY]
                self._identities = frozenset({header[_IDENTITY], self._identity})
        self.check()

    # -- checking --------------------------------------------------------------------------

    def check(self, *, within: float = 0.0) -> None:
        """Raise :class:`FilesChanged` unless the path still names the files opened (and the
        index can still be written in place); logs when that starts and when it ends.
        ``within``: pass at once if a check passed less than that many seconds ago."""
        now = time.monotonic()
        if now - self._passed < within:
            return
        problem = self._problem()
        if (problem is not None) != self._changed:
            self._note(problem)
        if problem is not None:
            self._passed = -float("inf")
            raise FilesChanged(problem)
        self._passed = now

    def _note(self, problem: str | None) -> None:
        """Log once when the files stop being the ones opened, and once when they are again."""
        with self._transition:
            if (problem is not None) == self._changed:
                return  # another thread noted it
            self._changed = problem is not None
        if problem is None:
            _log.warning("the files of %s are again the ones the server opened", self._path)
        else:
            _log.error("%s; every call answers UNAVAILABLE", problem)

    def _problem(self) -> str | None:
        for what, path, expected in self._expected:
            try:
                status = os.stat(path)
            except FileNotFoundError:
                return f"the {what} {path} was removed or moved away while the server had it open"
            except OSError as error:
                return f"the {what} {path} cannot be checked: {error.strerror}"
            if _identity(status) != expected:
                return f"the {what} {path} was replaced while the server had it open"
            if path == self._index_path and status.st_size < self._index_size:
                return f"the {what} {path} was truncated while the server had it mapped"
        return self._header_problem() or self._index_problem()

    def _header_problem(self) -> str | None:
        """Whether the database file now holds another database (see the module's docstring)."""
        if not self._fixed or self._database is None:
            return None
        try:
            header = os.pread(self._database, _HEADER_BYTES, 0)
        except OSError as error:
            return f"the database file {self._path} cannot be read: {error.strerror}"
        identity = header[_IDENTITY]
        if (
            len(header) < _HEADER_BYTES
            or b"".join(header[part] for part in _FIXED) != self._fixed
            or identity not in self._identities
        ):
            return (
                f"the database file {self._path} was overwritten while the server had it open "
                "(its header is not this database's)"
            )
        if identity == self._identity and len(self._identities) > 1:
            # A checkpoint brought the identity into the file: the value before it (the header
            # when opened) is no longer this database's.
            self._identities = frozenset({identity})
        return None

    def index_header(self) -> bytes | None:
        """The index's header as it is now (one ``pread`` through the descriptor held since
        :meth:`opened`: no other descriptor is opened, whose closing would drop SQLite's
        locks), or None when there is none to read (not in WAL mode, or cut short). Every
        commit of any connection rewrites it, so while it reads the same, nothing was committed;
        its two copies differ while a commit is writing it."""
        index = self._descriptors.get(self._index_path)
        if index is None:
            return None
        try:
            header = os.pread(index, _INDEX_HEADER_BYTES, 0)
        except OSError:
            return None
        if len(header) < _INDEX_HEADER_BYTES:
            return None
        return header

    def overwritten(self) -> bool:
        """Whether the database file holds another database now: its connections must not
        close (the last one would checkpoint this database's log into the other's pages)."""
        return self._database is not None and self._header_problem() is not None

    def _index_problem(self) -> str | None:
        index = self._descriptors.get(self._index_path)
        if index is None or not self._flags_readable:
            return None
        try:
            answer = fcntl.ioctl(index, _FS_IOC_GETFLAGS, bytes(8))
        except OSError:
            self._flags_readable = False  # the file system has no such flags (tmpfs before 6.0)
            return None
        if int.from_bytes(answer[:4], sys.byteorder) & (_FS_IMMUTABLE_FL | _FS_APPEND_FL):
            return (
                f"the shared-memory index {self._index_path} was made immutable or append-only "
                "(chattr): SQLite cannot write it"
            )
        return None

    # -- closing ---------------------------------------------------------------------------

    def closable(self) -> bool:
        """Whether SQLite may close its connections: the last one checkpoints, which writes to
        the index through its mapping, and an index made immutable or cut short since it was
        mapped would end the process with SIGBUS."""
        index = self._descriptors.get(self._index_path)
        if index is None:
            return True
        return os.fstat(index).st_size >= self._index_size and self._index_problem() is None

    def moved(self) -> bool:
        """Whether the owner's database file is no longer at the path but still has a name
        elsewhere (moved, or another file renamed over the path while it has a second link):
        SQLite skips its final checkpoint, which the storage then runs itself."""
        return (
            self._owner
            and self._database is not None
            and bool(self._expected)
            and not _names(self._path, self._expected[0][2])
            and os.fstat(self._database).st_nlink > 0
        )

    def close(self, *, settled: bool = True) -> None:
        """Close the descriptors (releasing the locks), after every connection of the file.
        The owner of a database that is no longer at the path first removes its log and index
        from the path while they are still its own, unless not ``settled`` (a moved
        database's checkpoint failed: the log still holds its last writes); so does the owner
        of a database overwritten in place (its log belongs to no file any more, and replayed
        into the new content it would corrupt it)."""
        if self._owner and self._expected:
            database, *rest = self._expected
            gone = settled and not _names(self._path, database[2])
            if gone or self.overwritten():  # the path holds another database, or none
                for what, path, expected in rest:
                    if _names(path, expected):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
                        _log.warning("removed the %s %s of a database no longer there", what, path)
        for descriptor in (*self._descriptors.values(), self._database):
            if descriptor is not None:
                os.close(descriptor)
        self._descriptors.clear()
        self._database = None
        self._expected = []
