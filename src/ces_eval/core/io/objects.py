"""The local stand-in for Cloud Storage: ``gs://`` URIs as files under the server's export root.

:func:`locate` maps ``gs://bucket/path`` to ``<export root>/[namespace/]bucket/path``;
:func:`write_atomically` writes an object so a reader never sees a half-written export,
:func:`read_object` reads one, :func:`remove` deletes one, :func:`probe` checks a folder before
an export starts, and none of them follows a symbolic link out of the export folder
(docs/security.md). A temporary file names its owner, so that only a finished operation's
leftovers are swept (:func:`sweep_temporary`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ces_eval.core.aip.ports import (
    ObjectError,
    ObjectLocation,
    ObjectMissing,
    ObjectTooLarge,
    PathRefused,
)

__all__ = [
    "OWNER_MAX",
    "ExportFolder",
    "NotRegular",
    "ObjectMissing",
    "ObjectPath",
    "ObjectTooLarge",
    "PathRefused",
    "locate",
    "probe",
    "read_object",
    "read_regular",
    "remove",
    "sweep_temporary",
    "temporary_owners",
    "write_atomically",
]

# The characters of Cloud Storage bucket names (lowercase letters, digits, "-", "_", "."; a letter
# or digit at both ends). Short names such as "b" are accepted: no bucket is created anywhere.
_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,220}[a-z0-9])?\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME_MAX = 255  # bytes in one file name on common file systems
_OBJECT_MAX = 1024  # bytes in a Cloud Storage object name


@dataclass(frozen=True)
class ObjectPath:
    """A ``gs://`` URI resolved under the export root.

    ``root`` is the operator's ``--export-dir`` and is trusted (it may itself be a symbolic
    link); ``parts`` are plain file names below it (a project's namespace folder first, with
    ``--auth-tokens``), each walked from its folder's descriptor without following links, so
    that no link planted in the export folder leads a read or a write outside it. ``uri`` is
    what errors name: never the local path."""

    uri: str
    root: Path
    parts: tuple[str, ...]
    namespaced: bool = False

    @property
    def path(self) -> Path:
        return self.root.joinpath(*self.parts)

    def child(self, name: str) -> ObjectPath:
        return ObjectPath(f"{self.uri}/{name}", self.root, (*self.parts, name), self.namespaced)

    def prefix(self, count: int) -> str:
        """The URI of the folder ``parts[:count]`` (the caller's words, not the local path)."""
        names = self.parts[int(self.namespaced) : count]
        return "gs://" + "/".join(names) if names else "the project's export folder"


def locate(gcs_uri: str, export_root: Path, namespace: str = "") -> ObjectPath:
    """``gs://bucket/a/b`` → ``export_root/[namespace/]bucket/a/b``; ``gs://bucket`` and one
    trailing ``/`` name the bucket or folder itself. Raises :class:`ObjectError` for other
    schemes, bucket names outside Cloud Storage's alphabet, empty, ``.`` or ``..`` segments,
    backslashes, control characters (NUL included) and names too long for Cloud Storage or the
    file system. Nothing is decoded: ``%2e%2e`` is a literal file name."""
    if not gcs_uri.startswith("gs://"):
        raise ObjectError(f"expected a gs:// URI, got {gcs_uri!r}")
    if _CONTROL.search(gcs_uri):
        raise ObjectError("the URI contains a control character")
    if _SURROGATE.search(gcs_uri):
        raise ObjectError("the URI is not valid Unicode")
    if "\\" in gcs_uri:
        raise ObjectError("the URI contains a backslash")
    bucket, _, name = gcs_uri.removeprefix("gs://").partition("/")
    if not bucket:
        raise ObjectError("the URI names no bucket")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ObjectError(f"{bucket!r} is not a valid bucket name")
    if len(name.encode("utf-8")) > _OBJECT_MAX:
        raise ObjectError(f"the object name is longer than {_OBJECT_MAX} bytes")
    segments = name.split("/")
    if segments[-1] == "":  # "gs://bucket", "gs://bucket/" and "gs://bucket/folder/"
        segments.pop()
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ObjectError(f"the object name has an empty, '.' or '..' segment: {name!r}")
        if len(segment.encode("utf-8")) > _NAME_MAX:
            raise ObjectError(f"a segment of the object name is longer than {_NAME_MAX} bytes")
    if namespace and (namespace in (".", "..") or "/" in namespace or "\x00" in namespace):
        raise ValueError(f"not a plain folder name: {namespace!r}")
    # Every part is now one plain file name, so the path cannot leave the root by its names;
    # the walk (_descend) keeps links from leaving it.
    parts = (*([namespace] if namespace else []), bucket, *segments)
    uri = "gs://" + "/".join([bucket, *segments])
    return ObjectPath(uri, export_root, tuple(parts), bool(namespace))


_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FOLDER_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW


def _refusal(folder: int, name: str, location: ObjectPath, count: int) -> PathRefused:
    """Why ``name`` in ``folder`` (``location.parts[count - 1]``) cannot be entered as a folder."""
    where = location.prefix(count)
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        link = False  # gone in between: say what the walk met
    if link:
        return PathRefused(
            f"{where} is a symbolic link in the export folder; ces-eval never follows links there.",
            link=True,
        )
    return PathRefused(f"{where} is an object, not a folder.", link=False)


def _open_root(root: Path, *, create: bool) -> int:
    """A descriptor of the export root, made (with its missing parents, each entry synced) when
    ``create``. The root is the operator's choice, so a link there is followed."""
    if create and not root.is_dir():
        missing = [p for p in (root, *root.parents) if not p.exists()]
        root.mkdir(parents=True, exist_ok=True)
        for new in reversed(missing):  # a new folder's entry lives in its parent
            _fsync_folder(new.parent)
    return os.open(root, _ROOT_FLAGS)


def _enter(folder: int, name: str, location: ObjectPath, count: int, *, create: bool) -> int:
    """A descriptor of the folder ``name`` in ``folder``, never through a link; made (and its
    entry synced) when missing and ``create``."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        if not create:
            raise ObjectMissing(f"{location.uri} not found") from None
    except OSError as error:
        # O_NOFOLLOW|O_DIRECTORY on a link gives ENOTDIR (ELOOP on some systems).
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refusal(folder, name, location, count) from None
        raise
    try:
        os.mkdir(name, 0o777, dir_fd=folder)
    except FileExistsError:
        pass  # made at the same moment by another export, or something else is there now
    else:
        os.fsync(folder)  # the new folder's entry is durable before anything goes inside
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refusal(folder, name, location, count) from None
        raise


def _descend(location: ObjectPath, count: int, *, create: bool) -> int:
    """A descriptor of the folder ``location.parts[:count]``, reached from the root one name at
    a time; raises :class:`PathRefused` at a link or a file on the way, :class:`ObjectMissing`
    at a missing folder unless ``create``."""
    try:
        current = _open_root(location.root, create=create)
    except FileNotFoundError:
        if create:
            raise
        raise ObjectMissing(f"{location.uri} not found") from None
    try:
        for index, name in enumerate(location.parts[:count]):
            inner = _enter(current, name, location, index + 1, create=create)
            os.close(current)
            current = inner
    except BaseException:
        os.close(current)
        raise
    return current


def probe(location: ObjectPath) -> None:
    """Refuse now the folder ``location`` that :func:`write_atomically` would refuse (a link
    or a file on its path); a folder that does not exist yet is fine."""
    with contextlib.suppress(ObjectMissing):
        os.close(_descend(location, len(location.parts), create=False))


def read_object(location: ObjectPath, limit: int) -> bytes:
    """The bytes of the regular file at ``location``, reached without following links, if it
    holds at most ``limit`` bytes. Raises :class:`ObjectMissing`, :class:`PathRefused`,
    :class:`ObjectTooLarge` (a larger file is refused by its size before any read, and one
    that grew meanwhile after ``limit + 1`` bytes: never held in memory whole) or OSError."""
    *_, name = location.parts
    folder = _descend(location, len(location.parts) - 1, create=False)
    try:
        # O_NONBLOCK: a FIFO planted here must not hang the read; regular files ignore it.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        descriptor_ = os.open(name, flags, dir_fd=folder)
    except FileNotFoundError:
        raise ObjectMissing(f"{location.uri} not found") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refusal(folder, name, location, len(location.parts)) from None
        raise
    finally:
        os.close(folder)
    try:
        return read_regular(descriptor_, limit)
    except NotRegular as refused:
        what = "a folder, not an object" if refused.kind == "folder" else "not a regular file"
        raise PathRefused(f"{location.uri} is {what}.", link=False) from None
    except ObjectTooLarge:
        raise ObjectTooLarge(
            f"{location.uri} is larger than {limit} bytes, the most one import reads.",
            limit=limit,
        ) from None


# What fstat may say a file is, when it is not a regular one (read_regular).
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISDIR, "folder"),
)


class NotRegular(ObjectError):
    """A file that is no regular file: ``kind`` says what it is ("FIFO", "folder", …)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"not a regular file ({kind})")
        self.kind = kind


def read_regular(descriptor: int, limit: int) -> bytes:
    """The bytes of the file open at ``descriptor`` (opened with O_NONBLOCK; closed here) if it
    is a regular file of at most ``limit`` bytes, else :class:`NotRegular` or
    :class:`ObjectTooLarge` (whose message gives the size). What ``fstat`` says refuses a
    FIFO, a device or a folder before a byte is read, and a file larger than ``limit``; one
    that grew since is read to ``limit + 1`` bytes only: never held in memory whole."""
    try:
        status = os.fstat(descriptor)
    except BaseException:
        os.close(descriptor)
        raise
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        kind = next((name for test, name in _SPECIAL_FILES if test(status.st_mode)), "special")
        raise NotRegular(kind)
    if status.st_size > limit:
        os.close(descriptor)
        raise ObjectTooLarge(f"{status.st_size} bytes", limit=limit)
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ObjectTooLarge(f"more than {limit} bytes", limit=limit)
    return data


def remove(location: ObjectPath) -> bool:
    """Delete the object at ``location``, reached without following links; False when there is
    none. A link there is refused (:class:`PathRefused`), as is a folder or a special file."""
    *_, name = location.parts
    try:
        folder = _descend(location, len(location.parts) - 1, create=False)
    except ObjectMissing:
        return False
    try:
        try:
            status = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(status.st_mode):
            raise _refusal(folder, name, location, len(location.parts))
        if not stat.S_ISREG(status.st_mode):
            raise PathRefused(f"{location.uri} is not an object.", link=False)
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile: gone either way
            os.unlink(name, dir_fd=folder)
        os.fsync(folder)
    finally:
        os.close(folder)
    return True


def _fsync_folder(folder: Path) -> None:
    descriptor_ = os.open(folder, _ROOT_FLAGS)
    try:
        os.fsync(descriptor_)
    finally:
        os.close(descriptor_)


def _write_all(descriptor_: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor_, view)
        view = view[written:]


# ``.ces-eval-<owner>+<random>.tmp``: the owner says who may remove the file once its writer is
# gone (see sweep_temporary); ``.ces-eval-<random>.tmp`` is an older version's, or an owner's
# that gave none.
_TEMPORARY = re.compile(r"\.ces-eval-(?:(?P<owner>[A-Za-z0-9._~+-]+)\+)?[0-9a-f]{16}\.tmp\Z")
_OWNER = re.compile(r"[A-Za-z0-9._~+-]{1,200}\Z")
OWNER_MAX = 200  # characters: the temporary file's name stays within _NAME_MAX bytes


def _temporary_name(owner: str) -> str:
    if owner and not _OWNER.match(owner):
        raise ValueError(f"not an owner for a temporary file's name: {owner!r}")
    return f".ces-eval-{owner}{'+' if owner else ''}{secrets.token_hex(8)}.tmp"


def write_atomically(location: ObjectPath, data: bytes, owner: str = "") -> None:
    """Replace the object at ``location`` with a file holding exactly ``data``: readers see the
    old file or the new one, never a part. Missing folders are created; no link on the path is
    followed (:class:`PathRefused`). The temporary file's name carries ``owner`` (at most
    :data:`OWNER_MAX` of ``[A-Za-z0-9._~+-]``) for :func:`sweep_temporary`. On failure the
    temporary file is removed, the target is left as it was, and the error propagates."""
    *_, name = location.parts
    folder = _descend(location, len(location.parts) - 1, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            temporary = _temporary_name(owner)
            try:
                descriptor_ = os.open(temporary, flags, 0o666, dir_fd=folder)
            except FileExistsError:
                continue
            break
        try:
            try:
                _write_all(descriptor_, data)
                os.fsync(descriptor_)
            finally:
                os.close(descriptor_)
            # A rename replaces a link at the target rather than writing through it; refusing
            # one tells the caller the path was not what they named.
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                    raise _refusal(folder, name, location, len(location.parts))
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):  # keep the original error
                os.unlink(temporary, dir_fd=folder)
            raise
        os.fsync(folder)
    finally:
        os.close(folder)


def _temporaries(export_root: Path) -> Iterator[tuple[int, str, str]]:
    """(folder descriptor, file name, owner) of every temporary file under ``export_root``;
    the walk never follows a link (os.fwalk checks each folder it enters is the one it
    listed). The descriptor is valid until the next item."""
    try:
        top = os.open(export_root, _ROOT_FLAGS)
    except OSError:
        return  # no export root yet: nothing was ever written
    try:
        for _, _, files, folder in os.fwalk(".", dir_fd=top):
            for name in files:
                if match := _TEMPORARY.match(name):
                    yield folder, name, match["owner"] or ""
    finally:
        os.close(top)


def temporary_owners(export_root: Path) -> set[str]:
    """The owners of the temporary files under ``export_root`` (``""``: none recorded)."""
    return {owner for _, _, owner in _temporaries(export_root)}


def sweep_temporary(export_root: Path, abandoned: Callable[[str], bool]) -> int:
    """Remove the temporary files under ``export_root`` whose owner is ``abandoned``: files an
    interrupted :func:`write_atomically` left (its process was killed mid-write). Only the
    caller can tell a dead owner from a live one; the count removed."""
    removed = 0
    for folder, name, owner in _temporaries(export_root):
        if abandoned(owner):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
                removed += 1
    return removed


@dataclass(frozen=True)
class ExportFolder:
    """The object store over the export folder ``root`` (the operator's ``--export-dir``):
    the implementation of :class:`~ces_eval.core.aip.ports.ObjectStore` the server runs with,
    over the functions above."""

    root: Path

    def locate(self, gcs_uri: str, namespace: str) -> ObjectPath:
        return locate(gcs_uri, self.root, namespace)

    def probe(self, location: ObjectLocation) -> None:
        probe(_ours(location))

    def read(self, location: ObjectLocation, limit: int) -> bytes:
        return read_object(_ours(location), limit)

    def write(self, location: ObjectLocation, data: bytes, owner: str) -> None:
        write_atomically(_ours(location), data, owner)

    def remove(self, location: ObjectLocation) -> bool:
        return remove(_ours(location))


def _ours(location: ObjectLocation) -> ObjectPath:
    """``location`` as this store made it; another store's location is a programming error."""
    if not isinstance(location, ObjectPath):
        raise TypeError(f"not a location in the export folder: {location.uri}")
    return location
