"""Responses held as their protobuf wire bytes: no work per read that a write did once.

The storage keeps every resource as the bytes it is served as (``data``, and for an evaluation
the ``derived`` blob and its etag beside it: serialized messages merge when concatenated). A Get
or a List page is therefore assembled from those bytes without parsing them: an
:class:`Encoded` response. The gRPC surface sends :attr:`Encoded.data` as it is; the REST
surface renders each item's JSON once, remembered by its bytes
(:class:`ces_eval.transcoding.rendering.JsonRenderer`), and joins a page's; whoever needs the
message asks :meth:`Encoded.message`.

A repeated message field on the wire is, per element, its tag, the element's length as a
varint and the element's bytes, in any order with the other fields, so a page is its items so
encoded followed by the rest of the response serialized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from google.protobuf.message import Message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from google.protobuf import descriptor

__all__ = ["Encoded", "Page", "Response", "message_of", "varint"]

_LENGTH_DELIMITED = 2


def varint(value: int) -> bytes:
    """``value`` (not negative) as a protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Page:
    """What a List response held as :class:`Encoded` is made of: the repeated ``field`` of its
    items, the items' own encodings (their message type is the field's), and ``rest``, the
    response without them (its ``next_page_token``)."""

    field: descriptor.FieldDescriptor
    items: Sequence[bytes]
    rest: Message

    @property
    def item_type(self) -> descriptor.Descriptor:
        """The items' message type."""
        item_type = self.field.message_type
        if item_type is None:
            raise TypeError(f"{self.field.full_name} is not a message field")
        return item_type


class Encoded:
    """A response message of type ``message_class`` as its wire bytes :attr:`data`; ``page``
    tells a List response's parts (None for any other message), whose bytes are joined only
    when a surface asks for them (REST renders a page from its items and never needs them)."""

    __slots__ = ("_data", "message_class", "page")

    def __init__(
        self, message_class: type[Message], data: bytes | None = None, page: Page | None = None
    ) -> None:
        if data is None and page is None:
            raise ValueError("an Encoded response needs its bytes or its page")
        self.message_class = message_class
        self.page = page
        self._data = data

    @classmethod
    def of_page(
        cls,
        message_class: type[Message],
        field: descriptor.FieldDescriptor,
        items: Sequence[bytes],
        rest: Message,
    ) -> Encoded:
        """The List response ``rest`` with ``items`` (encodings of ``field``'s message type) in
        its repeated ``field``, without parsing an item."""
        return cls(message_class, page=Page(field, items, rest))

    @property
    def data(self) -> bytes:
        """The message's wire bytes: a page's items, each as its tag, length and bytes, then
        the rest serialized (joined on first use)."""
        if self._data is None:
            page = self.page
            if page is None:  # pragma: no cover - __init__ allows no other state
                raise AssertionError("an Encoded response with neither bytes nor a page")
            tag = varint(page.field.number << 3 | _LENGTH_DELIMITED)
            parts: list[bytes] = []
            for item in page.items:
                parts += (tag, varint(len(item)), item)
            parts.append(page.rest.SerializeToString())
            self._data = b"".join(parts)
        return self._data

    @property
    def size(self) -> int:
        """About ``len(data)``, without joining a page (its items' tags and lengths left out)."""
        if self._data is not None or self.page is None:
            return len(self.data)
        return sum(map(len, self.page.items)) + self.page.rest.ByteSize()

    def message(self) -> Message:
        """The message these bytes encode (parsed on each call)."""
        return self.message_class.FromString(self.data)


# What an RPC of the core answers: a message, or one held as its bytes.
Response: TypeAlias = Message | Encoded


def message_of(response: Response) -> Message:
    """``response`` as a message (an :class:`Encoded` one parsed)."""
    return response.message() if isinstance(response, Encoded) else response
