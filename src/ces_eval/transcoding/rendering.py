"""Proto3 JSON rendering of response messages, remembered by content.

Rendering a few kilobytes of protobuf as JSON costs far more than answering the request
otherwise does, while the same resource (same bytes) is often read again and again (a CI fleet
polling one evaluation, a page re-read). Renderings are therefore kept in a bounded LRU map keyed
by the message type, its deterministic binary serialization and the enum encoding: equal keys mean
equal messages, so a cached rendering is always exactly what rendering would produce now.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["JsonRenderer"]


class JsonRenderer:
    """``render(message, int_enums)`` → compact UTF-8 JSON bytes, cached up to ``max_bytes``
    (keys and values counted)."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._max_bytes = max_bytes
        self._used = 0
        self._entries: OrderedDict[tuple[str, bytes, bool], bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _render(message: Message, int_enums: bool) -> bytes:
        document: Any = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()

    def render(self, message: Message, int_enums: bool) -> bytes:
        key = (
            message.DESCRIPTOR.full_name,
            message.SerializeToString(deterministic=True),
            int_enums,
        )
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return cached
        rendered = self._render(message, int_enums)
        size = len(key[1]) + len(rendered)
        if size > self._max_bytes // 8:
            return rendered  # too large to be worth a slot
        with self._lock:
            self.misses += 1
            if key not in self._entries:
                self._entries[key] = rendered
                self._used += size
                while self._used > self._max_bytes:
                    (_, old_bytes, _), old = self._entries.popitem(last=False)
                    self._used -= len(old_bytes) + len(old)
        return rendered
