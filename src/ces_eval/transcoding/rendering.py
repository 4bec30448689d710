"""Proto3 JSON rendering of response messages, in pieces, remembered by content.

**In pieces.** ``json.dumps`` (C) holds the interpreter for as long as it runs: ~60 ms for the
largest evaluation the limits allow (2.8 MB of JSON), in which no other thread, the event loop's
included, runs. :func:`encode` therefore gives json.dumps one small message at a time
(:data:`PIECE_BYTES` of protobuf encoding at most, well under a millisecond) and joins the
pieces in Python; the result is exactly ``json.dumps(MessageToDict(message))``.

**Remembered.** Rendering a few kilobytes of protobuf as JSON costs far more than answering the
request otherwise does, while the same resource (same bytes) is often read again and again (a CI
fleet polling one evaluation, a page re-read). Renderings are therefore kept in a bounded LRU map
keyed by the message type, its deterministic binary serialization and the enum encoding: equal
keys mean equal messages, so a cached rendering is always exactly what rendering would produce
now.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor, field_mask_pb2, json_format

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["COMPACT", "PIECE_BYTES", "JsonRenderer", "encode"]

# A message encoding at most this large is rendered by one json.dumps call (~0.3 ms).
PIECE_BYTES = 16 * 1024
COMPACT = (",", ":")
# Rendered by json_format in a form of their own (a Struct as an object, a Timestamp as a
# string): always one piece.
_SPECIAL_PACKAGE = "google.protobuf"


def _whole(message: Message, int_enums: bool, separators: tuple[str, str]) -> str:
    document: Any = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
    return json.dumps(document, ensure_ascii=False, separators=separators)


def _is_map(field: descriptor.FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def encode(
    message: Message,
    int_enums: bool = False,
    separators: tuple[str, str] = COMPACT,
    size: int | None = None,
    piece: int = PIECE_BYTES,
) -> str:
    """``json.dumps(MessageToDict(message, use_integers_for_enums=int_enums),
    ensure_ascii=False, separators=separators)``, built from pieces of at most about
    :data:`PIECE_BYTES` each (see the module's docstring); ``size``: ``message.ByteSize()``
    when the caller knows it; ``piece``: the size of a piece.

    A message is one piece when it is small, a well-known type (json_format renders each in a
    form of its own) or holds a map: a map's order is its table's, which a copy would not
    keep. Otherwise each field is a piece of its own: messages one by one, anything else
    rendered by json_format alone in a copy of the message holding just that field."""
    fields = message.ListFields()
    if (
        (message.ByteSize() if size is None else size) <= piece
        or message.DESCRIPTOR.file.package == _SPECIAL_PACKAGE
        or any(_is_map(field) for field, _ in fields)
    ):
        return _whole(message, int_enums, separators)
    item, key = separators
    members: list[str] = []
    for field, value in fields:
        if field.message_type is None:
            part = type(message)()
            field_mask_pb2.FieldMask(paths=[field.name]).MergeMessage(message, part)
            members.append(_whole(part, int_enums, separators)[1:-1])  # without the braces
            continue
        name = json.dumps(field.json_name, ensure_ascii=False) + key
        if field.is_repeated:
            elements = [encode(element, int_enums, separators, None, piece) for element in value]
            members.append(name + "[" + item.join(elements) + "]")
        else:
            members.append(name + encode(value, int_enums, separators, None, piece))
    return "{" + item.join(members) + "}"


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
    def _render(message: Message, int_enums: bool, size: int) -> bytes:
        return encode(message, int_enums, COMPACT, size).encode()

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
        rendered = self._render(message, int_enums, len(key[1]))
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
