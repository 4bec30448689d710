"""Who may call what: bearer tokens from ``serve --auth-tokens FILE`` (docs/security.md).

Each token in the file names a principal, the projects it may reach (``"*"``: every project) and
whether it may write. The surfaces only *authenticate*: they hand the ``Authorization: Bearer …``
value (gRPC metadata, HTTP header, or REST's ``access_token`` system parameter) to
:meth:`Tokens.authenticate`, which answers a :class:`Principal` or UNAUTHENTICATED. The core
*authorizes* every call in one place (:func:`authorize`, wrapped around each handler by
:func:`ces_eval.core.service.handlers`), before any validation or storage access: a request is
allowed only when every resource name it addresses lies in a project the principal may use, with
the access (read or write) the method needs. A refusal is PERMISSION_DENIED in the form Google's
front ends use ("… (or it may not exist)"), identical whether the resource exists or not, so a
foreign token learns nothing.

Which fields address resources, and whether a method writes, is read from the descriptors: the
variables of the method's ``google.api.http`` templates (``{parent=projects/*/…}``,
``{evaluation.name=…}``), or its ``name``/``parent`` field when it has no HTTP binding
(WaitOperation); a method is read-only exactly when it is bound to GET or has no binding.
"""

from __future__ import annotations

import hashlib
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml

from ces_eval import schema
from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from google.protobuf import descriptor
    from google.protobuf.message import Message

__all__ = [
    "ALL_PROJECTS",
    "MIN_TOKEN_LENGTH",
    "MethodAccess",
    "Principal",
    "TokenFileError",
    "Tokens",
    "authorize",
    "authorize_json",
    "authorize_values",
    "bearer",
    "method_access",
]

ALL_PROJECTS = "*"
MIN_TOKEN_LENGTH = 16
_SCHEME = "bearer"
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)")
_PROJECT = re.compile(r"projects/([^/]+)(?:/|$)")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ACCESS = {"read-write": True, "read-only": False}
_ENTRY_KEYS = {"name", "token", "token_sha256", "projects", "access"}


class TokenFileError(ValueError):
    """The token file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its name (recorded as created_by / last_updated_by), the
    projects it may reach and whether it may write."""

    name: str
    projects: frozenset[str]
    writable: bool

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


@dataclass(frozen=True)
class MethodAccess:
    """What a method touches: the request fields naming resources, and whether it writes."""

    fields: tuple[tuple[str, ...], ...]
    write: bool


@cache
def method_access(method: descriptor.MethodDescriptor) -> MethodAccess:
    bindings = [b for b in schema.http_bindings() if b.method is method]
    paths: dict[tuple[str, ...], None] = {}
    for binding in bindings:
        for variable in _VARIABLE.findall(binding.template):
            paths[tuple(variable.split("."))] = None
    if not paths:
        for candidate in ("name", "parent"):
            if candidate in method.input_type.fields_by_name:
                paths[(candidate,)] = None
    write = any(binding.verb != "GET" for binding in bindings)
    return MethodAccess(tuple(paths), write)


def _value(request: Message, path: tuple[str, ...]) -> str:
    current: Any = request
    for part in path:
        current = getattr(current, part)
    return str(current)


def _json_value(arguments: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The value at ``path`` (proto names) of proto3 JSON ``arguments``, which may spell each
    key by its proto or JSON name; "" when absent or not a string."""
    current: Any = arguments
    for part in path:
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part, current.get(_camel(part)))
    return current if isinstance(current, str) else ""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def authorize(principal: Principal, method: descriptor.MethodDescriptor, request: Message) -> None:
    """PERMISSION_DENIED unless ``principal`` may use every project ``request`` addresses with the
    access ``method`` needs. Runs before validation: a name without a project is denied too, so a
    restricted token gets the same answer for every resource outside its projects."""
    _check(principal, method, lambda path: _value(request, path))


def authorize_values(
    principal: Principal, method: descriptor.MethodDescriptor, values: Mapping[str, str]
) -> None:
    """:func:`authorize` from a REST route's path variables (dotted field path → value), before
    the body or query is read: a foreign token gets 403 whatever else the request holds."""
    _check(principal, method, lambda path: values.get(".".join(path), ""))


def authorize_json(
    principal: Principal, method: descriptor.MethodDescriptor, arguments: Mapping[str, Any]
) -> None:
    """:func:`authorize` from proto3 JSON arguments (MCP ``tools/call``), before they are
    validated."""
    _check(principal, method, lambda path: _json_value(arguments, path))


def _check(
    principal: Principal,
    method: descriptor.MethodDescriptor,
    value_of: Callable[[tuple[str, ...]], str],
) -> None:
    needs = method_access(method)
    for path in needs.fields:
        value = value_of(path)
        match = _PROJECT.match(value)
        if match is None:
            if ALL_PROJECTS in principal.projects and (principal.writable or not needs.write):
                continue
            raise _denied(method, value)
        if not principal.may(match.group(1), write=needs.write):
            raise _denied(method, value)


def _denied(method: descriptor.MethodDescriptor, resource: str) -> ServiceError:
    permission = f"ces.{method.containing_service.name}.{method.name}"
    shown = resource if len(resource) <= 512 else resource[:512] + "…"
    return ServiceError(
        Code.PERMISSION_DENIED,
        f"Permission {permission!r} denied on resource {shown!r} (or it may not exist).",
        "IAM_PERMISSION_DENIED",
        {"permission": permission, "resource": shown},
    )
