"""Every request limit, named once, and the descriptor-driven checker that applies them.

The values are documented in ``docs/security.md`` (section "Limits"), one row each. Request
size is enforced by the surfaces (:data:`MAX_REQUEST_BYTES`: REST and MCP bodies, gRPC
messages), message nesting by protobuf's parsers (:data:`MAX_MESSAGE_NESTING`), page size by
:mod:`ces_eval.core.pages`, and the field limits below by :class:`Limits` on everything a
caller writes: inside the one validation pass for evaluations (CreateEvaluation, the merged
result of UpdateEvaluation; :class:`ces_eval.core.fields.InputRules` calls
:meth:`Walk.fields` on each message it visits), standalone (:func:`check`) for
CreateEvaluationResult and each evaluation and result of ImportEvaluations.

The walk is generic, driven by descriptors: string fields (and Struct keys and string values)
longer than :data:`MAX_STRING_CHARS`, repeated fields and maps with more than
:data:`MAX_REPEATED` / :data:`MAX_MAP_ENTRIES` entries, ``google.protobuf.Struct`` /
``Value`` / ``ListValue`` trees nested deeper than :data:`MAX_STRUCT_DEPTH` or holding more
than :data:`MAX_STRUCT_ENTRIES` entries in all. Only the limits the seeds state name a field
(:data:`SEED_COUNTS`, :data:`SEED_LENGTHS`). Each problem is a
:class:`~ces_eval.errors.FieldViolation` with its exact path in the notation of every other
violation (proto names, ``turns[3]``, map keys quoted: ``args.fields["a"].struct_value``; a
key longer than 128 characters is shown cut, ending in ``…``) and reason ``TOO_LONG``,
``TOO_MANY`` or ``TOO_DEEP``.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import descriptor

from ces_eval.errors import FieldViolation
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

if TYPE_CHECKING:
    from google.protobuf import struct_pb2
    from google.protobuf.message import Message

__all__ = [
    "LIMITS",
    "MAX_DISPLAY_NAME",
    "MAX_GOLDEN_TURNS",
    "MAX_MAP_ENTRIES",
    "MAX_MESSAGE_NESTING",
    "MAX_PAGE_SIZE",
    "MAX_REPEATED",
    "MAX_REQUEST_BYTES",
    "MAX_SCENARIO_TURNS",
    "MAX_STRING_CHARS",
    "MAX_STRUCT_DEPTH",
    "MAX_STRUCT_ENTRIES",
    "MAX_VIOLATIONS",
    "SEED_COUNTS",
    "SEED_LENGTHS",
    "FieldRules",
    "Limits",
    "Rules",
    "Walk",
    "check",
    "key_path",
    "shown",
]

# -- the limits ----------------------------------------------------------------------------------

# One REST or MCP request body, one gRPC request message (413 / RESOURCE_EXHAUSTED beyond).
MAX_REQUEST_BYTES = 10 * 1024 * 1024
# AIP-158: larger page sizes are coerced down to it, negative ones are INVALID_ARGUMENT.
MAX_PAGE_SIZE = 1000
# Message levels in one request, as protobuf's parsers allow: its binary parser stops there by
# itself (gRPC: INVALID_ARGUMENT, MALFORMED_REQUEST), REST bodies are parsed with it as
# json_format's max_recursion_depth. In JSON a Struct and each Value in it count one level each.
MAX_MESSAGE_NESTING = 100
# Struct / ListValue levels (a Struct field holding only scalars is 1 level). Chosen below what
# protobuf's binary parser accepts (MAX_MESSAGE_NESTING; a Struct level costs 3: Struct, map
# entry, Value) at the deepest Struct of any request, so a gRPC caller going one level too deep
# gets this limit's answer, with the path, rather than an unlocated parse failure.
MAX_STRUCT_DEPTH = 24
# Struct fields plus ListValue elements, counted over one evaluation or result.
MAX_STRUCT_ENTRIES = 10_000
# Characters (code points) of any string field, Struct key or Struct string value.
MAX_STRING_CHARS = 262_144
# Elements of any repeated field, and entries of any map, without a stated limit of its own.
MAX_REPEATED = 1_000
MAX_MAP_ENTRIES = 1_000
# Stated by the seeds (reference pages 001/003): "At most 100 turns are allowed".
MAX_GOLDEN_TURNS = 100
# Evaluation.Scenario.max_turns: "At most 100" (a range, checked by validation).
MAX_SCENARIO_TURNS = 100
MAX_DISPLAY_NAME = 512
# Violations reported for one request: enough to fix a request, bounded so that a hostile one
# cannot make the error itself huge.
MAX_VIOLATIONS = 100

# (message type, field) → the element count or length the seeds state for that field.
SEED_COUNTS: Mapping[tuple[str, str], int] = {
    (evaluation_pb2.Evaluation.Golden.DESCRIPTOR.full_name, "turns"): MAX_GOLDEN_TURNS,
}
SEED_LENGTHS: Mapping[tuple[str, str], int] = {
    (evaluation_pb2.Evaluation.DESCRIPTOR.full_name, "display_name"): MAX_DISPLAY_NAME,
}

# -- the checker ---------------------------------------------------------------------------------

_STRUCT = "google.protobuf.Struct"
_VALUE = "google.protobuf.Value"
_LIST = "google.protobuf.ListValue"
_NESTED = frozenset({"struct_value", "list_value"})
_KEY_SHOWN = 128  # characters of a map key shown in a path before it is cut

# What one field holds; a repeated field or map also names what each element holds.
_SCALAR, _STRING, _MESSAGE, _STRUCT_KIND, _VALUE_KIND, _LIST_KIND, _REPEATED, _MAP = range(8)
_WELL_KNOWN = {_STRUCT: _STRUCT_KIND, _VALUE: _VALUE_KIND, _LIST: _LIST_KIND}

# kind, limit (characters or entries), element kind, field name, map key kind
_Rule = tuple[int, int, int, str, int]


def shown(text: str) -> str:
    """``text`` as an error quotes it: cut after :data:`_KEY_SHOWN` characters, marked "…"."""
    return text if len(text) <= _KEY_SHOWN else text[:_KEY_SHOWN] + "…"


def key_path(key: object) -> str:
    """A map key as a path suffix: ``["a"]`` (JSON-quoted, long keys cut), ``[7]``."""
    if isinstance(key, str):
        if len(key) <= _KEY_SHOWN and key.isprintable() and '"' not in key and "\\" not in key:
            return f'["{key}"]'
        shown = json.dumps(key[:_KEY_SHOWN], ensure_ascii=False)
        return f'[{shown[:-1]}…"]' if len(key) > _KEY_SHOWN else f"[{shown}]"
    return f"[{key}]"


def _element_kind(
    field: descriptor.FieldDescriptor, matters: dict[descriptor.Descriptor, bool]
) -> int:
    """What one value of ``field`` holds (for a map: its value), ignoring repetition."""
    message_type = field.message_type
    if message_type is None:
        return _STRING if field.type == descriptor.FieldDescriptor.TYPE_STRING else _SCALAR
    special = _WELL_KNOWN.get(message_type.full_name)
    if special is not None:
        return special
    return _MESSAGE if _matters(message_type, matters) else _SCALAR


def _matters(message_type: descriptor.Descriptor, memo: dict[descriptor.Descriptor, bool]) -> bool:
    """Whether a message of this type can break a limit (holds a string, a repeated field, a
    map or a Struct somewhere): Timestamp, Duration and the like are not walked."""
    known = memo.get(message_type)
    if known is not None:
        return known
    memo[message_type] = True  # while a recursive type is being decided: walk it, to be safe
    found = False
    for field in message_type.fields:
        if field.is_repeated or field.type == descriptor.FieldDescriptor.TYPE_STRING:
            found = True
        elif field.message_type is not None:
            found = field.message_type.full_name in _WELL_KNOWN or _matters(
                field.message_type, memo
            )
        if found:
            break
    memo[message_type] = found
    return found


FieldRules = dict[descriptor.FieldDescriptor, _Rule]
# What a walk checks in one message type: [0] when the whole message is too small to hold a
# string over MAX_STRING_CHARS (the common case: only counts, Structs and the seeds' lengths
# are left, so most types have nothing to check), [1] otherwise. Index with Walk.large.
Rules = tuple[FieldRules, FieldRules]


def _small(rule: _Rule) -> _Rule | None:
    """``rule`` for a message too small to hold a string over :data:`MAX_STRING_CHARS`."""
    kind, limit, element, name, key_kind = rule
    if kind == _STRING:
        return rule if limit < MAX_STRING_CHARS else None
    if kind in (_REPEATED, _MAP):
        return (
            kind,
            limit,
            _SCALAR if element == _STRING else element,
            name,
            _SCALAR if key_kind == _STRING else key_kind,
        )
    return rule


class Limits:
    """The limits as one checker: generic limits for every field, plus ``counts`` and
    ``lengths`` ((message type, field) → limit) for the fields with a stated limit of their
    own. Per-type rules (which fields to look at and how) are built once, on first use."""

    def __init__(
        self,
        counts: Mapping[tuple[str, str], int] = SEED_COUNTS,
        lengths: Mapping[tuple[str, str], int] = SEED_LENGTHS,
    ) -> None:
        self._counts = dict(counts)
        self._lengths = dict(lengths)
        self._rules: dict[descriptor.Descriptor, Rules] = {}
        self._matters: dict[descriptor.Descriptor, bool] = {}

    def rules(
        self,
        message_type: descriptor.Descriptor,
        skip: Container[str] = (),
        driven: Container[str] = (),
    ) -> Rules:
        """What a walk checks in a message of ``message_type``, ignoring the fields named in
        ``skip``. Sub-messages of the fields named in ``driven`` are left to a caller that
        walks them itself (only the element counts of those fields are checked here)."""
        rules: FieldRules = {}
        for field in message_type.fields:
            name = field.name
            if name in skip:
                continue
            own = (message_type.full_name, name)
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                key_kind = _element_kind(entry.fields_by_name["key"], self._matters)
                kind = _element_kind(entry.fields_by_name["value"], self._matters)
                if kind == _MESSAGE and name in driven:
                    kind = _SCALAR
                limit = self._counts.get(own, MAX_MAP_ENTRIES)
                rules[field] = (_MAP, limit, kind, name, key_kind)
                continue
            kind = _element_kind(field, self._matters)
            if kind == _MESSAGE and name in driven:
                kind = _SCALAR
            if field.is_repeated:
                rules[field] = (_REPEATED, self._counts.get(own, MAX_REPEATED), kind, name, 0)
            elif kind == _STRING:
                rules[field] = (kind, self._lengths.get(own, MAX_STRING_CHARS), 0, name, 0)
            elif kind != _SCALAR:
                rules[field] = (kind, 0, 0, name, 0)
        small = {field: kept for field, rule in rules.items() if (kept := _small(rule))}
        return small, rules

    def rules_of(self, message_type: descriptor.Descriptor) -> Rules:
        """:meth:`rules` for a whole walk of ``message_type``, built once."""
        rules = self._rules.get(message_type)
        if rules is None:
            rules = self._rules[message_type] = self.rules(message_type)
        return rules

    def walk(self, message: Message) -> Walk:
        """A new pass over ``message``: :meth:`Walk.message` walks it all; a caller that walks
        it itself calls :meth:`Walk.fields` on every message it visits."""
        return Walk(self, message.ByteSize())

    def check(self, message: Message, path: str) -> list[FieldViolation]:
        """The violations of every limit in ``message`` (at most :data:`MAX_VIOLATIONS`), with
        paths starting at ``path``; empty when it is within them all."""
        walk = self.walk(message)
        walk.message(message, path)
        return walk.violations


class Walk:
    """One pass over one message: the violations found (at most :data:`MAX_VIOLATIONS`) and
    the Struct entries counted so far.

    ``size`` is the message's encoded size, an upper bound that spares most of the work on
    the common small message: a string of n characters takes at least n bytes, a Struct entry
    or list element at least 2, so below :data:`MAX_STRING_CHARS` bytes no string needs
    measuring (only the seeds' shorter limits) and below twice :data:`MAX_STRUCT_ENTRIES`
    nothing is counted. The depth of a Struct is bounded without walking it, from its encoding
    (:meth:`shallow`).
    """

    __slots__ = ("count_entries", "entries", "large", "limits", "measure_strings", "violations")

    def __init__(self, limits: Limits, size: int) -> None:
        self.limits = limits
        self.violations: list[FieldViolation] = []
        self.entries = 0
        self.count_entries = size > 2 * MAX_STRUCT_ENTRIES
        self.measure_strings = size > MAX_STRING_CHARS
        self.large = int(self.measure_strings)  # which of a type's Rules apply

    def report(self, path: str, description: str, reason: str) -> None:
        if len(self.violations) < MAX_VIOLATIONS:
            self.violations.append(FieldViolation(path, description, reason))

    def too_long(self, path: str, text: str, limit: int) -> None:
        self.report(path, f"At most {limit} characters; got {len(text)}.", "TOO_LONG")

    def message(self, message: Message, path: str) -> None:
        # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
        rules = self.limits.rules_of(cast("descriptor.Descriptor", message.DESCRIPTOR))
        if rules[self.large]:
            self.fields(rules[self.large], message.ListFields(), path)

    def fields(
        self,
        rules: FieldRules,
        present: Iterable[tuple[descriptor.FieldDescriptor, Any]],
        path: str,
    ) -> None:
        """Check the set fields ``present`` (a message's ListFields()) against ``rules``."""
        for field, value in present:
            rule = rules.get(field)
            if rule is None:
                continue
            kind, limit, element, name, key_kind = rule
            if kind == _STRING:
                if len(value) > limit:
                    self.too_long(f"{path}.{name}", value, limit)
            elif kind == _MESSAGE:
                self.message(value, f"{path}.{name}")
            elif kind in (_REPEATED, _MAP):
                if len(value) > limit:
                    self.report(
                        f"{path}.{name}", f"At most {limit} entries; got {len(value)}.", "TOO_MANY"
                    )
                elif kind == _MAP:
                    self.entries_of(value, key_kind, element, f"{path}.{name}")
                elif element != _SCALAR:
                    for index, item in enumerate(value):
                        self.item(element, item, f"{path}.{name}[{index}]")
            else:
                self.item(kind, value, f"{path}.{name}")

    def entries_of(
        self,
        entries: Mapping[Any, Any],
        key_kind: int,
        element: int,
        path: str,
    ) -> None:
        """The keys and values of a map."""
        for key, item in entries.items():
            if key_kind == _STRING and len(key) > MAX_STRING_CHARS:
                self.too_long(f"{path}{key_path(key)}", key, MAX_STRING_CHARS)
            if element != _SCALAR:
                self.item(element, item, f"{path}{key_path(key)}")

    def item(self, kind: int, value: object, path: str) -> None:
        """One value of a field (or element of a repeated field, or map value) of ``kind``."""
        if kind == _STRING:
            if len(cast("str", value)) > MAX_STRING_CHARS:
                self.too_long(path, cast("str", value), MAX_STRING_CHARS)
        elif kind == _MESSAGE:
            self.message(cast("Message", value), path)
        elif kind == _STRUCT_KIND:
            self.struct(cast("struct_pb2.Struct", value), path, 1)
        elif kind == _LIST_KIND:
            self.list(cast("struct_pb2.ListValue", value), path, 1)
        elif kind == _VALUE_KIND:
            self.value(cast("struct_pb2.Value", value), path, 0)

    def shallow(self, container: Message, depth: int) -> bool:
        """Whether nothing inside ``container`` (a Struct or ListValue at ``depth``) can break
        a limit, so it need not be walked. Every Struct or ListValue nested in it is a Value's
        ``struct_value`` (field 5) or ``list_value`` (field 6), whose one-byte tags (0x2A,
        0x32) then occur in its encoding: their count bounds how deep it nests."""
        if self.count_entries or self.measure_strings:
            return False
        encoded = container.SerializeToString()
        return encoded.count(b"\x2a") + encoded.count(b"\x32") <= MAX_STRUCT_DEPTH - depth

    def deeper(self, path: str, depth: int) -> bool:
        """Whether a Struct or ListValue at ``depth`` is one level too many (reported)."""
        if depth <= MAX_STRUCT_DEPTH:
            return False
        self.report(
            path,
            f"Structs and lists may nest at most {MAX_STRUCT_DEPTH} deep; this is level {depth}.",
            "TOO_DEEP",
        )
        return True

    def count(self, path: str, added: int) -> bool:
        """Add ``added`` Struct entries; whether the total just went over the limit (reported
        once, where it happened: nothing further is counted or walked)."""
        if not self.count_entries:
            return False
        before = self.entries
        self.entries = before + added
        if self.entries <= MAX_STRUCT_ENTRIES:
            return False
        if before <= MAX_STRUCT_ENTRIES:
            self.report(
                path,
                f"Structs and lists may hold at most {MAX_STRUCT_ENTRIES} fields and elements "
                "in all; the total passes it here.",
                "TOO_MANY",
            )
        return True

    def struct(self, struct: struct_pb2.Struct, path: str, depth: int) -> None:
        fields = struct.fields
        if self.deeper(path, depth) or self.count(path, len(fields)) or self.shallow(struct, depth):
            return
        measure = self.measure_strings
        for key, value in fields.items():
            # Paths are built only for what is reported or walked further.
            if measure and len(key) > MAX_STRING_CHARS:
                self.too_long(f"{path}.fields{key_path(key)}", key, MAX_STRING_CHARS)
            kind = value.WhichOneof("kind")
            if kind in _NESTED or (measure and kind == "string_value"):
                self.value(value, f"{path}.fields{key_path(key)}", depth)

    def list(self, values: struct_pb2.ListValue, path: str, depth: int) -> None:
        elements = values.values
        if self.deeper(path, depth) or self.count(path, len(elements)):
            return
        if self.shallow(values, depth):
            return
        measure = self.measure_strings
        for index, value in enumerate(elements):
            kind = value.WhichOneof("kind")
            if kind in _NESTED or (measure and kind == "string_value"):
                self.value(value, f"{path}.values[{index}]", depth)

    def value(self, value: struct_pb2.Value, path: str, depth: int) -> None:
        """A Value inside a container at ``depth`` (0 for a Value field of a message)."""
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            if len(value.string_value) > MAX_STRING_CHARS:
                self.too_long(f"{path}.string_value", value.string_value, MAX_STRING_CHARS)
        elif kind == "struct_value":
            self.struct(value.struct_value, f"{path}.struct_value", depth + 1)
        elif kind == "list_value":
            self.list(value.list_value, f"{path}.list_value", depth + 1)


LIMITS = Limits()  # the generic limits and the seeds' ones


def check(message: Message, path: str) -> list[FieldViolation]:
    """The limit violations of ``message`` (see :class:`Limits`), paths starting at ``path``."""
    return LIMITS.check(message, path)
