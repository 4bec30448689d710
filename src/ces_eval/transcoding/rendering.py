"""Proto3 JSON rendering of response messages, in pieces, remembered by content.

**In pieces.** ``json.dumps`` (C) holds the interpreter for as long as it runs: ~60 ms for the
largest evaluation the limits allow (2.8 MB of JSON), in which no other thread, the event loop's
included, runs. :func:`encode` therefore gives json.dumps one small message at a time
(:data:`PIECE_BYTES` of protobuf encoding at most, well under a millisecond) and joins the
pieces in Python; the result is exactly ``json.dumps(MessageToDict(message))``. Each piece is
printed by :mod:`ces_eval.transcoding.printer`, json_format's output byte for byte at about
half its cost.

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
from typing import TYPE_CHECKING

from google.protobuf import descriptor, field_mask_pb2, message_factory

from ces_eval.transcoding import printer

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.contract.encoded import Encoded, Page

__all__ = ["COMPACT", "PIECE_BYTES", "JsonRenderer", "encode"]

# A message encoding at most this large is rendered by one json.dumps call (~0.3 ms).
PIECE_BYTES = 16 * 1024
COMPACT = (",", ":")
# Rendered by json_format in a form of their own (a Struct as an object, a Timestamp as a
# string): always one piece.
_SPECIAL_PACKAGE = "google.protobuf"


def _whole(message: Message, int_enums: bool, separators: tuple[str, str]) -> str:
    return printer.to_json(message, int_enums, separators)


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
    rendered alone in a copy of the message holding just that field."""
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
    (keys and values counted). :meth:`render_encoded` renders a response held as its wire
    bytes: by those bytes for a message, item by item for a List page (each item's rendering
    remembered by its own bytes, the page a join of them), so a page read again, or an item
    already read on another page or by Get, costs no rendering."""

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
        data = message.SerializeToString(deterministic=True)
        return self._bytes(type(message), data, int_enums, message)

    def _cached(self, key: tuple[str, bytes, bool]) -> bytes | None:
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return cached

    def _bytes(
        self,
        message_class: type[Message],
        data: bytes,
        int_enums: bool,
        message: Message | None = None,
    ) -> bytes:
        """The rendering of the ``message_class`` message whose wire bytes are ``data``
        (``message``: it parsed, when the caller has it)."""
        key = (message_class.DESCRIPTOR.full_name, data, int_enums)
        cached = self._cached(key)
        if cached is not None:
            return cached
        parsed = message_class.FromString(data) if message is None else message
        rendered = self._render(parsed, int_enums, len(data))
        size = len(data) + len(rendered)
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

    def cached_encoded(self, encoded: Encoded, int_enums: bool) -> bytes | None:
        """:meth:`render_encoded`'s answer when every rendering it needs is remembered (no
        parsing, no rendering: fit for the event loop), else None."""
        page = encoded.page
        if page is None:
            return self._cached(
                (encoded.message_class.DESCRIPTOR.full_name, encoded.data, int_enums)
            )
        name = page.item_type.full_name
        items = []
        for item in page.items:
            rendered = self._cached((name, item, int_enums))
            if rendered is None:
                return None
            items.append(rendered)
        return self._page(encoded, page, items, int_enums)

    def render_encoded(self, encoded: Encoded, int_enums: bool) -> bytes:
        """Exactly what :meth:`render` gives for ``encoded``'s message, from its bytes."""
        page = encoded.page
        if page is None:
            return self._bytes(encoded.message_class, encoded.data, int_enums)
        item_class = message_factory.GetMessageClass(page.item_type)
        items = [self._bytes(item_class, item, int_enums) for item in page.items]
        return self._page(encoded, page, items, int_enums)

    def _page(self, encoded: Encoded, page: Page, items: list[bytes], int_enums: bool) -> bytes:
        """A List page's JSON from its items' renderings. json_format writes fields in field
        number order: the items' member first when their field's number is below every other
        field set (every AIP-132 response), else the page is rendered as a message."""
        rest = page.rest.ListFields()
        if any(field.number < page.field.number for field, _ in rest):
            return self.render(encoded.message(), int_enums)
        # The rest (a page token) differs from page to page: rendered, never remembered.
        head = self._render(page.rest, int_enums, page.rest.ByteSize()) if rest else b"{}"
        if not items:
            return head
        # One join, one buffer: each concatenation of a page's megabyte would be a fresh
        # allocation to fault in.
        parts = [b'{"' + page.field.json_name.encode() + b'":[']
        for item in items:
            parts += (item, b",")
        parts[-1] = b"]}" if head == b"{}" else b"]," + head[1:]
        return b"".join(parts)
