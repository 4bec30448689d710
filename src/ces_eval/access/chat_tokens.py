"""Chat tokens (WidgetService.GenerateChatToken; docs/security.md, "Chat tokens"): a bearer
token bound to one session (and the deployment it was asked for) until its expiry, which a
server with ``--auth-tokens`` accepts for the session methods of that session alone.

A token is ``cet1.<payload>.<signature>``: the payload the JSON object
``{"s": session, "d": deployment, "e": expiry in Unix seconds}`` in unpadded base64url, the
signature its HMAC-SHA256 (unpadded base64url) under a key derived from the database's secret
(the page tokens' key material, :mod:`ces_eval.core.aip.pages`), so every replica of one
database accepts every replica's tokens and a restart keeps them. Nothing is stored: a token
is good until it expires (it cannot be revoked but by a new database secret).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from ces_eval.access.tokens import Principal

__all__ = ["CHAT_TOKEN_SECONDS", "ChatToken", "ChatTokens"]

CHAT_TOKEN_SECONDS = 3600  # how long a chat token is accepted
_PREFIX = "cet1."
_LABEL = b"ces-eval chat tokens v1"
_MAX_CHARS = 4096  # a presented token longer than this is not one of ours


def _encoded(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _decoded(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class ChatToken:
    """A token issued: its text and when it expires (Unix seconds)."""

    token: str
    expires: int


class ChatTokens:
    """Issues and checks chat tokens under a key derived from ``secret`` (the database's)."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, _LABEL, hashlib.sha256).digest()

    def _signature(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def issue(
        self, session: str, deployment: str, *, seconds: int = CHAT_TOKEN_SECONDS
    ) -> ChatToken:
        """A token for ``session`` (of ``deployment``), good for ``seconds`` from now."""
        expires = int(time.time()) + seconds
        payload = json.dumps(
            {"s": session, "d": deployment, "e": expires}, separators=(",", ":")
        ).encode()
        token = f"{_PREFIX}{_encoded(payload)}.{_encoded(self._signature(payload))}"
        return ChatToken(token, expires)

    def principal(self, token: str) -> Principal | None:
        """The principal of ``token`` (its session's alone, allowed to write: a session
        records its conversation), None when it is no valid, unexpired chat token."""
        claims = self._claims(token)
        if claims is None:
            return None
        session, deployment, expires = claims.get("s"), claims.get("d", ""), claims.get("e")
        if not isinstance(session, str) or not isinstance(deployment, str):
            return None
        if not isinstance(expires, int) or expires <= time.time():
            return None
        project = session.split("/")[1] if session.startswith("projects/") else ""
        return Principal(
            f"chat-token:{session}",
            frozenset({project}),
            writable=True,
            session=session,
            deployment=deployment,
        )

    def _claims(self, token: str) -> dict[str, object] | None:
        """The signed claims of ``token``; None when it is not signed by this key."""
        if not token.startswith(_PREFIX) or len(token) > _MAX_CHARS:
            return None
        payload_text, _, signature_text = token[len(_PREFIX) :].partition(".")
        try:
            payload = _decoded(payload_text)
            signature = _decoded(signature_text)
            if not hmac.compare_digest(signature, self._signature(payload)):
                return None
            claims = json.loads(payload)
        except (binascii.Error, ValueError):
            return None
        return claims if isinstance(claims, dict) else None
