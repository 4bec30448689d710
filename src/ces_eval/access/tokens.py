"""The token table of ``serve --auth-tokens FILE`` (docs/security.md): loading and checking the
file, and looking a presented bearer token up by its digest.

Each token in the file names a principal, the projects it may reach (``"*"``: every project) and
whether it may write. Only SHA-256 digests are kept in memory.
"""

from __future__ import annotations

import hashlib
import re
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from pathlib import Path

    from ces_eval.access.chat_tokens import ChatTokens

__all__ = [
    "ALL_PROJECTS",
    "MIN_TOKEN_LENGTH",
    "Principal",
    "TokenFileError",
    "Tokens",
    "bearer",
]

ALL_PROJECTS = "*"
MIN_TOKEN_LENGTH = 16
_SCHEME = "bearer"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ACCESS = {"read-write": True, "read-only": False}
_ENTRY_KEYS = {"name", "token", "token_sha256", "projects", "access"}


class TokenFileError(ValueError):
    """The token file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name (recorded as created_by / last_updated_by), the
    projects it may reach and whether it may write; ``session``: for a chat token's principal
    (:mod:`ces_eval.access.chat_tokens`), the one session whose session methods it may call
    (and nothing else), and ``deployment`` the deployment it was issued for."""

    name: str
    projects: frozenset[str]
    writable: bool
    session: str = ""
    deployment: str = ""

    def may(self, project: str, *, write: bool) -> bool:
        if write and not self.writable:
            return False
        return ALL_PROJECTS in self.projects or project in self.projects


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(value: str | None) -> str | None:
    """The token of an ``Authorization`` value ``Bearer <token>`` (scheme case-insensitive, per
    RFC 6750); None when absent or of another scheme."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != _SCHEME or not token.strip():
        return None
    return token.strip()


class Tokens:
    """The token table of ``--auth-tokens``: SHA-256 of each token → its principal. Only
    digests are kept in memory, and a presented token is looked up by its digest."""

    def __init__(self, principals: dict[str, Principal]) -> None:
        self._by_digest = principals
        # The server's chat tokens (GenerateChatToken), set once the database's secret is
        # known (ces_eval.server): a bearer token of that form is checked there.
        self.chat: ChatTokens | None = None

    def __len__(self) -> int:
        return len(self._by_digest)

    @classmethod
    def load(cls, path: Path) -> Tokens:
        """Read and check the token file (YAML or JSON, docs/security.md)."""
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise TokenFileError(f"{path}: {error.strerror}") from error
        except UnicodeDecodeError as error:
            raise TokenFileError(f"{path}: not UTF-8 text") from error
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise TokenFileError(f"{path}: not valid YAML/JSON: {_yaml_problem(error)}") from error
        tokens = cls.parse(document, str(path))
        plain = any(isinstance(e, dict) and "token" in e for e in document["tokens"])
        if plain and mode & (stat.S_IRWXG | stat.S_IRWXO):
            # Plain tokens readable by others: refuse rather than serve with leaked secrets.
            raise TokenFileError(
                f"{path}: holds plain tokens and is accessible to group or others; "
                "chmod 600 it, or store token_sha256 digests instead"
            )
        return tokens

    @classmethod
    def parse(cls, document: Any, where: str = "token file") -> Tokens:  # noqa: ANN401 - parsed YAML
        if not isinstance(document, dict) or set(document) != {"tokens"}:
            raise TokenFileError(f"{where}: expected a mapping with one key, tokens")
        entries = document["tokens"]
        if not isinstance(entries, list) or not entries:
            raise TokenFileError(f"{where}: tokens must be a non-empty list")
        principals: dict[str, Principal] = {}
        names: set[str] = set()
        for index, entry in enumerate(entries):
            at = f"{where}: tokens[{index}]"
            digest, principal = _entry(entry, at)
            if digest in principals:
                raise TokenFileError(f"{at}: the same token appears twice")
            if principal.name in names:
                raise TokenFileError(f"{at}: name {principal.name!r} appears twice")
            names.add(principal.name)
            principals[digest] = principal
        return cls(principals)

    def authenticate(self, credential: str | None, *, presented: bool) -> Principal:
        """The principal of ``credential`` (a bearer token), or UNAUTHENTICATED. ``presented``:
        whether the caller sent credentials at all (a missing and a wrong token read differently,
        as RFC 6750 distinguishes them)."""
        if credential is not None:
            principal = self._by_digest.get(_digest(credential))
            if principal is None and self.chat is not None:
                principal = self.chat.principal(credential)
            if principal is not None:
                return principal
        if not presented:
            raise ServiceError(
                Code.UNAUTHENTICATED,
                "The request has no credentials; send Authorization: Bearer <token>.",
                "CREDENTIALS_MISSING",
            )
        raise ServiceError(
            Code.UNAUTHENTICATED,
            "The request's credentials are not valid.",
            "ACCESS_TOKEN_INVALID",
        )


def _yaml_problem(error: yaml.YAMLError) -> str:
    """The parser's complaint on one line, with where it was found."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{error.problem}{where}"
    return " ".join(str(error).split())


def _entry(entry: Any, at: str) -> tuple[str, Principal]:  # noqa: ANN401 - parsed YAML
    if not isinstance(entry, dict):
        raise TokenFileError(f"{at}: expected a mapping")
    unknown = sorted(set(entry) - _ENTRY_KEYS, key=str)
    if unknown:
        raise TokenFileError(f"{at}: unknown key(s) {', '.join(map(str, unknown))}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TokenFileError(f"{at}: name is required (it is recorded as created_by)")
    token, hashed = entry.get("token"), entry.get("token_sha256")
    if (token is None) == (hashed is None):
        raise TokenFileError(f"{at}: set exactly one of token and token_sha256")
    if token is not None:
        if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH or token != token.strip():
            raise TokenFileError(
                f"{at}: token must be a string of at least {MIN_TOKEN_LENGTH} characters "
                "without surrounding spaces"
            )
        digest = _digest(token)
    else:
        if not isinstance(hashed, str) or not _SHA256.fullmatch(hashed.lower()):
            raise TokenFileError(f"{at}: token_sha256 must be 64 hexadecimal digits")
        digest = hashed.lower()
    projects = entry.get("projects")
    if (
        not isinstance(projects, list)
        or not projects
        or not all(isinstance(p, str) and p and "/" not in p for p in projects)
    ):
        raise TokenFileError(f'{at}: projects must be a non-empty list of project IDs, or ["*"]')
    access = entry.get("access", "read-write")
    if access not in _ACCESS:
        raise TokenFileError(f"{at}: access must be read-write or read-only")
    return digest, Principal(name.strip(), frozenset(projects), _ACCESS[access])
