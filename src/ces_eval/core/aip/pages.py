"""List paging (AIP-158) and ordering (AIP-132).

A page holds at most ``page_size`` items and at most
:data:`~ces_eval.contract.limits.MAX_PAGE_BYTES` of them (:func:`fill`): it ends early, with a
next_page_token, rather than grow past what a client receives in one message (AIP-158 lets a
page hold fewer items than asked).

Page tokens are opaque to callers: a signed, base64url-encoded cursor (the last row's sort value
and name) plus a digest of the query that produced it. A token only works with the same parent,
filters and order; anything else, or a token that was altered, is INVALID_ARGUMENT. Signing uses a
secret kept in the database, so tokens survive restarts and work on every replica.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ces_eval.contract.limits import MAX_PAGE_BYTES, MAX_PAGE_SIZE
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.storage.base import Cursor, OrderBy, SortKey

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "ITEM_FRAMING",
    "MAX_PAGE_SIZE",
    "PageTokens",
    "fill",
    "order_by",
    "page_size",
]

DEFAULT_PAGE_SIZE = 50
# The seeds: "name" ascending, "create_time"/"update_time" descending, default update_time.
_DEFAULT_DIRECTION = {SortKey.NAME: False, SortKey.CREATE_TIME: True, SortKey.UPDATE_TIME: True}
_MAX_TOKEN = 2048
# What one element of a repeated message field adds to its message besides its own bytes: the
# tag (2 bytes up to field 2047) and the length (4 bytes below 256 MiB). An upper bound, so
# that a page's count never falls below the stored bytes the storage measured.
ITEM_FRAMING = 6


def page_size(requested: int, field: str = "page_size") -> int:
    """AIP-158: 0 means the default; larger than the maximum is coerced down; negative fails."""
    if requested < 0:
        raise ServiceError.invalid_argument(
            f"{field} must not be negative.", [FieldViolation(field, "Must not be negative.")]
        )
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    return min(requested, MAX_PAGE_SIZE)


def fill(sizes: Iterable[int], limit: int, budget: int = MAX_PAGE_BYTES) -> int:
    """How many items, of ``sizes`` bytes each in page order, one page holds: at most
    ``limit``; the first always (an item is never larger than the budget, unless it was
    stored before the limit existed: it is then a page of its own); then each while the
    items so far, with :data:`ITEM_FRAMING` each, stay within ``budget``.

    The storage stops reading rows by the same budget on stored bytes
    (:attr:`~ces_eval.storage.base.ListQuery.max_bytes`), counting no framing: an item it
    returned after the ones that fit never fits here, so "fewer items than rows" is exactly
    "more rows follow"."""
    taken = total = 0
    for size in sizes:
        total += size + ITEM_FRAMING
        if taken == limit or (taken and total > budget):
            break
        taken += 1
    return taken


_NO_ORDERS: Mapping[str, bool] = {}


def order_by(text: str, field: str = "order_by", more: Mapping[str, bool] = _NO_ORDERS) -> OrderBy:
    """Parse an AIP-132 order_by naming one of name, create_time, update_time, or of the
    collection's own orders ``more`` (field → whether it sorts descending by default).

    A bare field takes its documented direction; ``asc``/``desc`` may override it.
    """
    parts = text.replace(",", " , ").split()
    if not parts:
        return OrderBy(SortKey.UPDATE_TIME, descending=True)
    # order_by field → (key, descending by default)
    known: dict[str, tuple[SortKey | str, bool]] = {
        **{key.value: (key, down) for key, down in _DEFAULT_DIRECTION.items()},
        **{name: (name, down) for name, down in more.items()},
    }
    allowed = ", ".join(known)
    found = known.get(parts[0])
    problem = ""
    if found is None:
        problem = f"Cannot order by {parts[0]!r}; use one of {allowed}."
    elif len(parts) > 2 or (len(parts) == 2 and parts[1].lower() not in {"asc", "desc"}):
        problem = f"Order by one field ({allowed}), optionally followed by asc or desc."
    if problem or found is None:
        raise ServiceError.invalid_argument(problem, [FieldViolation(field, problem)])
    key, default = found
    descending = default if len(parts) == 1 else parts[1].lower() == "desc"
    return OrderBy(key, descending)


@dataclass(frozen=True)
class PageTokens:
    """Issues and checks page tokens with a per-database secret."""

    secret: bytes

    def _digest(self, query: str) -> str:
        return hashlib.sha256(query.encode()).hexdigest()[:24]

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self.secret, payload, hashlib.sha256).digest()[:16]

    def encode(self, query: str, cursor: Cursor) -> str:
        payload = json.dumps(
            {"q": self._digest(query), "v": cursor.value, "n": cursor.name}, separators=(",", ":")
        ).encode()
        token = base64.urlsafe_b64encode(payload + self._sign(payload)).decode()
        return token.rstrip("=")

    def decode(self, token: str, query: str, field: str = "page_token") -> Cursor:
        def invalid(problem: str) -> ServiceError:
            return ServiceError.invalid_argument(
                f"{field} is invalid: {problem}", [FieldViolation(field, problem)]
            )

        if len(token) > _MAX_TOKEN:
            raise invalid("it is not a token this server issued.")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError) as error:
            raise invalid("it is not a token this server issued.") from error
        payload, signature = raw[:-16], raw[-16:]
        if len(raw) <= 16 or not hmac.compare_digest(signature, self._sign(payload)):
            raise invalid("it is not a token this server issued.")
        data = json.loads(payload)
        if data.get("q") != self._digest(query):
            raise invalid(
                "it was issued for a different query; parent, filter and order_by must not "
                "change between pages."
            )
        value = data.get("v")
        name = data.get("n")
        if not isinstance(value, str | int) or not isinstance(name, str):
            raise invalid("it is not a token this server issued.")
        return Cursor(value, name)
