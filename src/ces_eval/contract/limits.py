"""Every request limit, named once, and the descriptor-driven checker that applies them.

The values are documented in ``docs/security.md`` (section "Limits"), one row each. Request
size is enforced by the surfaces (:data:`MAX_REQUEST_BYTES`: REST and MCP bodies, gRPC
messages), message nesting by protobuf's parsers (:data:`MAX_MESSAGE_NESTING`), page size by
:mod:`ces_eval.core.aip.pages`, what a read returns by :data:`MAX_RESOURCE_BYTES` (every write, on
the resource as it will be served: :func:`size_violations`) and :data:`MAX_PAGE_BYTES` (every
list page: :func:`ces_eval.core.aip.pages.fill`), and the field limits below by :class:`Limits` on
everything a caller writes: inside the one validation pass (:class:`ces_eval.contract.checks.Checks`
calls :meth:`Walk.fields` on each message it visits: CreateEvaluation, the merged result of
UpdateEvaluation, CreateEvaluationResult), standalone (:func:`check`) for each evaluation and
result of the emulator's ImportEvaluations.

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
import logging
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from google.api import field_behavior_pb2
from google.protobuf import descriptor, struct_pb2

from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

__all__ = [
    "CLIENT_RECEIVE_BYTES",
    "LIMITS",
    "MAX_APP_RECORDINGS",
    "MAX_DISPLAY_NAME",
    "MAX_GOLDEN_TURNS",
    "MAX_IMPORT_EVALUATIONS",
    "MAX_MAP_ENTRIES",
    "MAX_MESSAGE_NESTING",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_SIZE",
    "MAX_PROBLEM_CHARS",
    "MAX_RECORDINGS_FILE_BYTES",
    "MAX_REPEATED",
    "MAX_REQUEST_BYTES",
    "MAX_RESOURCE_BYTES",
    "MAX_SCENARIO_TURNS",
    "MAX_STRING_CHARS",
    "MAX_STRUCT_DEPTH",
    "MAX_STRUCT_ENTRIES",
    "MAX_TOOL_ANSWER_BYTES",
    "MAX_VIOLATIONS",
    "SEED_COUNTS",
    "SEED_LENGTHS",
    "STREAM_IDLE_SECONDS",
    "Count",
    "CountPlan",
    "FieldRules",
    "Limits",
    "Plan",
    "Rules",
    "Walk",
    "bound_operation",
    "bounded",
    "check",
    "cut",
    "key_path",
    "listed",
    "rule_form",
    "shown",
    "size_violations",
    "too_large",
    "too_many",
    "too_many_struct_entries",
    "wire_fields",
]

# -- the limits ----------------------------------------------------------------------------------

# One REST or MCP request body, one gRPC request message (413 / RESOURCE_EXHAUSTED beyond).
MAX_REQUEST_BYTES = 10 * 1024 * 1024
# AIP-158: larger page sizes are coerced down to it, negative ones are INVALID_ARGUMENT.
MAX_PAGE_SIZE = 1000
# What Google's client libraries accept in one response message by default: grpc's
# max_receive_message_length (Python, C++, Go, Java, Node: 4 MiB).
CLIENT_RECEIVE_BYTES = 4 * 1024 * 1024
# One evaluation, result or operation as it is served (binary protobuf, with its name, times,
# etag and the fields the server derives): every write is held to it, so a Get, and a List page
# of that one item, fits what the clients receive. The 64 KiB left over hold a response's
# envelope: a List item's tag and length, next_page_token (at most 2,048 characters).
MAX_RESOURCE_BYTES = CLIENT_RECEIVE_BYTES - 64 * 1024
# The items of one List page (each with its tag and length): a page ends before the item that
# would pass it, with a next_page_token, whatever page_size asked; it holds one item at least.
MAX_PAGE_BYTES = MAX_RESOURCE_BYTES
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
# Results one evaluation run produces at most (every repetition and persona task of each of its
# evaluations): the run lists them all, and must stay well within one message a client receives
# (gRPC clients take 4 MiB by default; 10,000 names of the longest IDs are about 3 MB, usual
# ones about 1.3 MB). The engine plays such a run with bounded memory (bench/engine.py, "scale").
MAX_RUN_RESULTS = 10_000
# Bytes one evaluation run stores at most: its results and the conversations they recorded, as
# stored (binary protobuf). RunEvaluation (and a schedule, when written) refuses a plan whose
# repetitions cannot fit, each estimated at what its result repeats of its evaluation (what a
# repetition stores is never less); the engine ends a run ERROR before the result that would
# pass it (docs/semantics.md, "Evaluation runs"). Without it, results within every other bound
# allow about 16 GB per run.
MAX_RUN_BYTES = 256 * 1024 * 1024
# Violations reported for one request: enough to fix a request, bounded so that a hostile one
# cannot make the error itself huge. Every check stops once it has found this many.
MAX_VIOLATIONS = 100
# A request with a container over its count limit is refused with the first few found, before
# anything else of it is checked (see "counts, before anything else" below).
MAX_COUNT_VIOLATIONS = 10
# Entries of any one container a request may carry at all, OUTPUT_ONLY fields included (they
# are ignored, not held to the limits above): decoding stops there, so no container of a hostile
# request is ever read whole.
MAX_DECODED_ENTRIES = 100_000
# What a caller is told of many problems at once (an import's error_messages and BadRequest):
# each problem's text, which may quote the input (a cell, a name), cut after this many
# characters, and at most MAX_VIOLATIONS problems, then how many more (:func:`listed`,
# :func:`bounded`). 101 of them, at 4 bytes a character at most, are about 400 KB: an answer
# or operation holding them stays well within MAX_RESOURCE_BYTES.
MAX_PROBLEM_CHARS = 1_000
# Evaluations one emulator ImportEvaluations imports at most: its answer names each of them
# (a name is 486 characters at most), and must stay within MAX_RESOURCE_BYTES.
MAX_IMPORT_EVALUATIONS = 8_000
# Recorded exchanges one app holds at most (docs/agents.md, "Record and replay"): each is one
# resource (MAX_RESOURCE_BYTES at most), so that an app's recordings stay within what a disk
# holds (a run of 10,000 three-turn sessions with a judge makes about 60,000).
MAX_APP_RECORDINGS = 100_000
# One file (or inline document) of recordings, ExportAgentRecordings and ImportAgentRecordings:
# it is built and read in memory. More are exported by filter (an evaluation, a run) per file.
MAX_RECORDINGS_FILE_BYTES = 64 * 1024 * 1024
# What ExecuteTool reads of an OpenAPI tool's answer, and of a tool's code's answer (docs/tools.md):
# its response then fits a client's 4 MiB receive limit with room to spare.
MAX_TOOL_ANSWER_BYTES = 1024 * 1024
# Seconds a bidirectional stream (BidiRunSession) may wait for its client's next message: then
# it is told go_away and closed, as on the server's drain, so that idle streams cannot hold the
# surface's in-flight slots (docs/sessions.md, "Streams").
STREAM_IDLE_SECONDS = 600.0

# -- work on the event loop (ces_eval.offload) ---------------------------------------------------

# A request whose encoding is larger than this (gRPC message, or the evaluation or result the
# core validates; JSON bodies: see ces_eval.transcoding.body.heavy) is decoded, checked and
# validated in a worker thread, and its response rendered there: the event loop, which answers
# every caller and the health checks, is held by no request for more than a few milliseconds.
# Smaller ones stay on the loop and pay no thread hop (~50 us).
LOOP_BYTES = 8 * 1024
# gRPC messages larger than this are held to the count limits on their encoding, before
# protobuf decodes them: its C decoder holds the interpreter for as long as it runs (up to
# ~20 ns a byte, ~5 ms here; 160 ms for 10 MiB of empty turns).
ENCODED_CHECK_BYTES = 256 * 1024


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
_log = logging.getLogger(__name__)

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
    field: descriptor.FieldDescriptor, matters: dict[tuple[descriptor.Descriptor, bool], bool]
) -> int:
    """What one value of ``field`` holds (for a map: its value), ignoring repetition."""
    message_type = field.message_type
    if message_type is None:
        return _STRING if field.type == descriptor.FieldDescriptor.TYPE_STRING else _SCALAR
    special = _WELL_KNOWN.get(message_type.full_name)
    if special is not None:
        return special
    return _MESSAGE if _holds(message_type, matters, strings=True) else _SCALAR


def _holds(
    message_type: descriptor.Descriptor,
    memo: dict[tuple[descriptor.Descriptor, bool], bool],
    *,
    strings: bool,
) -> bool:
    """Whether a message of this type can hold a repeated field, a map or a Struct somewhere,
    or with ``strings`` a string: whether a count pass, or with ``strings`` a checking walk,
    must enter it (Timestamp, Duration and the like are never walked)."""
    known = memo.get((message_type, strings))
    if known is not None:
        return known
    memo[message_type, strings] = True  # while a recursive type is being decided: walk it
    found = False
    for field in message_type.fields:
        if field.is_repeated or (strings and field.type == descriptor.FieldDescriptor.TYPE_STRING):
            found = True
        elif field.message_type is not None:
            found = field.message_type.full_name in _WELL_KNOWN or _holds(
                field.message_type, memo, strings=strings
            )
        if found:
            break
    memo[message_type, strings] = found
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


def _sized(rules: FieldRules) -> Rules:
    """``rules`` for a message too small to hold a long string, and as they are."""
    return {field: kept for field, rule in rules.items() if (kept := _small(rule))}, rules


def rule_form(rule: _Rule) -> tuple[str, int]:
    """What decides whether a field needs :meth:`Walk.field` under ``rule``: ``("count",
    limit)``, a repeated field or map whose entries need no look, only its count over limit;
    ``("length", limit)``, a string only over limit; ``("set", 0)``, anything else, whenever
    the field is set (compiled walks test that first, :mod:`ces_eval.contract.checks`)."""
    kind, limit, element, _, key_kind = rule
    if kind in (_REPEATED, _MAP) and element == _SCALAR and key_kind == _SCALAR:
        return "count", limit
    if kind == _STRING:
        return "length", limit
    return "set", 0


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
        self._plans: dict[descriptor.Descriptor, Plan] = {}
        self._holds: dict[tuple[descriptor.Descriptor, bool], bool] = {}

    def plan(self, message_type: descriptor.Descriptor) -> Plan:
        """The one plan of ``message_type``, compiled on first use: per field, what the
        checking walk (:class:`Walk`, :mod:`ces_eval.contract.checks`) and every count pass
        (decoded, encoded, JSON) look at."""
        plan = self._plans.get(message_type)
        if plan is None:
            plan = self._plans[message_type] = self._compile(message_type)
        return plan

    def _compile(self, message_type: descriptor.Descriptor) -> Plan:
        rules: FieldRules = {}
        counts: dict[int, Count] = {}
        for field in message_type.fields:
            name = field.name
            own = (message_type.full_name, name)
            behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
            output_only = field_behavior_pb2.OUTPUT_ONLY in behaviors
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                value = entry.fields_by_name["value"]
                key_kind = _element_kind(entry.fields_by_name["key"], self._holds)
                limit = self._counts.get(own, MAX_MAP_ENTRIES)
                rules[field] = (_MAP, limit, _element_kind(value, self._holds), name, key_kind)
                element, target = self._count_kind(value)
                counts[field.number] = (_MAP, limit, element, name, target, -1, output_only)
                continue
            kind = _element_kind(field, self._holds)
            if field.is_repeated:
                limit = self._counts.get(own, MAX_REPEATED)
                rules[field] = (_REPEATED, limit, kind, name, 0)
                element, target = self._count_kind(field)
                width = _packed_width(field)
                counts[field.number] = (
                    _REPEATED,
                    limit,
                    element,
                    name,
                    target,
                    width,
                    output_only,
                )
                continue
            if kind == _STRING:
                rules[field] = (kind, self._lengths.get(own, MAX_STRING_CHARS), 0, name, 0)
            elif kind != _SCALAR:
                rules[field] = (kind, 0, 0, name, 0)
            counted, target = self._count_kind(field)
            if counted != _SCALAR:
                counts[field.number] = (counted, 0, _SCALAR, name, target, -1, output_only)
        return Plan(_sized(rules), counts)

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
        for field, compiled in self.plan(message_type).rules[1].items():
            name = field.name
            if name in skip:
                continue
            kind, limit, element, _, key_kind = compiled
            if name in driven and kind == _MESSAGE:
                continue
            if name in driven and element == _MESSAGE:
                rules[field] = (kind, limit, _SCALAR, name, key_kind)
            else:
                rules[field] = compiled
        return _sized(rules)

    def rules_of(self, message_type: descriptor.Descriptor) -> Rules:
        """:meth:`rules` for a whole walk of ``message_type``."""
        return self.plan(message_type).rules

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

    def count_plan(self, message_type: descriptor.Descriptor) -> CountPlan:
        """What the count checks look at in a message of ``message_type``, by field number:
        repeated fields and maps with their limit, and the fields that lead to more (messages
        that can hold one, Structs)."""
        return self.plan(message_type).counts

    def _count_kind(
        self, field: descriptor.FieldDescriptor
    ) -> tuple[int, descriptor.Descriptor | None]:
        target = field.message_type
        if target is None:
            return _SCALAR, None
        special = _WELL_KNOWN.get(target.full_name)
        if special is not None:
            return special, target
        if _holds(target, self._holds, strings=False):
            return _MESSAGE, target
        return _SCALAR, None

    def counts(
        self, message: Message, path: str = "", size: int | None = None
    ) -> list[FieldViolation]:
        """The first few (:data:`MAX_COUNT_VIOLATIONS`) repeated fields, maps and Structs of
        the decoded ``message`` over their count limits, by ``len()`` before anything inside
        them is looked at; paths start at ``path`` ("" for a whole request). OUTPUT_ONLY fields
        are not counted (the core clears them). ``size``: the message's encoded size, when
        known; below twice :data:`MAX_STRUCT_ENTRIES` bytes no Struct total can pass it."""
        counter = _Counter(self, structs=size is None or size > 2 * MAX_STRUCT_ENTRIES, json=False)
        with suppress(_Stop):
            counter.message(None, message, path)
        return counter.violations

    def json_counts(
        self,
        message_type: descriptor.Descriptor,
        document: object,
        path: str = "",
        *,
        structs: bool = True,
    ) -> list[FieldViolation]:
        """:meth:`counts` for a request given as a JSON document (REST and MCP bodies), before
        anything else reads it. ``structs`` false: the document is too small for any Struct
        total to pass the limit (fewer JSON values than :data:`MAX_STRUCT_ENTRIES`)."""
        counter = _Counter(self, structs=structs, json=True)
        with suppress(_Stop):
            counter.message(message_type, document, path)
        return counter.violations

    def json_overflow(
        self,
        message_type: descriptor.Descriptor,
        steps: Iterable[str | int],
        path: str = "",
        *,
        is_object: bool,
    ) -> FieldViolation:
        """The violation for a JSON object (``is_object``) or array holding more than
        :data:`MAX_DECODED_ENTRIES` entries, which the JSON reader found at the keys and indexes
        ``steps`` of a request of ``message_type``: TOO_MANY at its field path."""
        where, kind, limit = _json_location(self, message_type, steps, path)
        if kind in (_REPEATED, _MAP):
            return too_many(where, limit, None)
        if kind == _VALUE_KIND:
            return too_many_struct_entries(
                where + (".struct_value" if is_object else ".list_value")
            )
        if kind in (_STRUCT_KIND, _LIST_KIND):
            return too_many_struct_entries(where)
        return too_many(where or "body", MAX_DECODED_ENTRIES, None)

    def encoded_counts(
        self, message_type: descriptor.Descriptor, data: bytes, path: str = ""
    ) -> list[FieldViolation]:
        """The first container over its count limit in ``data``, an encoded message of
        ``message_type``, found on the encoding itself (protobuf's decoder never sees a
        request over a count limit): one violation, whose description cannot give the total
        (counting stops at the limit), or none. Containers under an OUTPUT_ONLY field may
        hold :data:`MAX_DECODED_ENTRIES` each. Malformed encodings are left to the decoder."""
        try:
            _Encoded(self, data).message(
                self.count_plan(message_type), (0, len(data)), 1, relaxed=False
            )
        except _Found as found:
            return [found.violation(path)]
        except (_Stop, IndexError):
            pass
        return []


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
    ) -> tuple[descriptor.FieldDescriptor, ...]:
        """Check the set fields ``present`` (a message's ListFields()) against ``rules``; the
        repeated fields and maps over their count, which nothing should look inside."""
        over: tuple[descriptor.FieldDescriptor, ...] = ()
        for field, value in present:
            rule = rules.get(field)
            if rule is not None and self.field(rule, value, path):
                over += (field,)
        return over

    def field(self, rule: _Rule, value: Any, path: str) -> bool:  # noqa: ANN401 - by kind
        """Check the value of one set field against its ``rule`` (the field is ``path`` +
        ``.`` + the rule's name); whether it is a repeated field or map over its count."""
        kind, limit, element, name, key_kind = rule
        if kind == _STRING:
            if len(value) > limit:
                self.too_long(f"{path}.{name}", value, limit)
        elif kind == _MESSAGE:
            self.message(value, f"{path}.{name}")
        elif kind in (_REPEATED, _MAP):
            if len(value) > limit:
                violation = too_many(f"{path}.{name}", limit, len(value))
                self.report(violation.field, violation.description, violation.reason)
                return True
            if kind == _MAP:
                self.entries_of(value, key_kind, element, f"{path}.{name}")
            elif element != _SCALAR:
                for index, item in enumerate(value):
                    self.item(element, item, f"{path}.{name}[{index}]")
        else:
            self.item(kind, value, f"{path}.{name}")
        return False

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


# -- counts, before anything else ----------------------------------------------------------------
#
# A request with a container over its count limit is refused before any per-element work, on
# every surface: REST and MCP bodies as JSON (ces_eval.transcoding.body, with the plans below),
# gRPC messages on their encoding when large (:meth:`Limits.encoded_counts`, before protobuf
# decodes them) or right after decoding (:meth:`Limits.counts`). The refusal lists the first
# containers found over their limit (at most MAX_COUNT_VIOLATIONS; the encoding check stops at
# the first) and nothing else. OUTPUT_ONLY fields are ignored rather than limited (AIP-203), but
# their encoding is still bounded: every container under one holds at most MAX_DECODED_ENTRIES.

# kind, limit, element kind, field name, element message type (_MESSAGE), packed width
# (repeated scalars: 0 varint, 4 or 8 fixed, -1 not packable), output only
Count = tuple[int, int, int, str, "descriptor.Descriptor | None", int, bool]
CountPlan = Mapping[int, Count]  # field number → what is counted there


@dataclass(frozen=True, slots=True)
class Plan:
    """What every limit looks at in one message type (:meth:`Limits.plan`, compiled once):
    ``rules`` for the checking walk, by field; ``counts`` for the count passes, by number."""

    rules: Rules
    counts: CountPlan


_F = descriptor.FieldDescriptor
_FIXED32 = frozenset({_F.TYPE_FIXED32, _F.TYPE_SFIXED32, _F.TYPE_FLOAT})
_FIXED64 = frozenset({_F.TYPE_FIXED64, _F.TYPE_SFIXED64, _F.TYPE_DOUBLE})
_UNPACKABLE = frozenset({_F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE, _F.TYPE_GROUP})
_HIGH_BYTES = bytes(range(0x80, 0x100))


def _packed_width(field: descriptor.FieldDescriptor) -> int:
    if field.type in _UNPACKABLE:
        return -1
    return 4 if field.type in _FIXED32 else 8 if field.type in _FIXED64 else 0


def too_large(path: str, size: int, evaluation: str = "") -> FieldViolation:
    """``TOO_LARGE`` at ``path``: ``size`` bytes as served, over :data:`MAX_RESOURCE_BYTES`.
    ``evaluation``: the resource over the limit is that evaluation, which the result written
    at ``path`` would make so large (its last_completed_result, aggregated_metrics and
    evaluation_runs are derived from its results)."""
    limit = f"at most {MAX_RESOURCE_BYTES} bytes, so that every client can read it"
    if evaluation:
        description = (
            f"Storing it would make {evaluation}, with the fields derived from its results, "
            f"{size} bytes as served; {limit}."
        )
    else:
        description = (
            f"{size} bytes as served (binary protobuf, with its output-only and derived "
            f"fields); {limit}."
        )
    return FieldViolation(path, description[0].upper() + description[1:], "TOO_LARGE")


def size_violations(message: Message, path: str) -> list[FieldViolation]:
    """``[too_large(path, ...)]`` when ``message``, as it will be served, is larger than
    :data:`MAX_RESOURCE_BYTES`; empty otherwise. One ``ByteSize()`` (an encoding pass: in a
    worker thread for a large message, like the rest of its checks)."""
    size = message.ByteSize()
    return [too_large(path, size)] if size > MAX_RESOURCE_BYTES else []


def too_many(path: str, limit: int, got: int | None) -> FieldViolation:
    """``TOO_MANY`` at ``path``; ``got`` None when counting stopped at the limit."""
    counted = f"got {got}" if got is not None else "got more"
    return FieldViolation(path, f"At most {limit} entries; {counted}.", "TOO_MANY")


def cut(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """``text`` within ``limit`` characters as a problem quotes it: cut, and the cut said."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def listed(problems: Sequence[str], kind: str = "errors") -> list[str]:
    """``problems`` as an answer lists them: at most :data:`MAX_VIOLATIONS`, each
    :func:`cut`, then ``"… and N more errors."`` (``kind`` names them) when there are more."""
    shown = [cut(problem) for problem in problems[:MAX_VIOLATIONS]]
    if len(problems) > MAX_VIOLATIONS:
        shown.append(f"… and {len(problems) - MAX_VIOLATIONS} more {kind}.")
    return shown


def bounded(violations: Sequence[FieldViolation]) -> list[FieldViolation]:
    """``violations`` as an answer's BadRequest lists them: at most :data:`MAX_VIOLATIONS`
    (the error's message counts them all), each description :func:`cut` (the field paths are
    bounded where they are made: indexes, proto names and keys cut by :func:`key_path`)."""
    return [
        FieldViolation(v.field, cut(v.description), v.reason) for v in violations[:MAX_VIOLATIONS]
    ]


def bound_operation(operation: operations_pb2.Operation) -> None:
    """Hold a finished ``operation`` to :data:`MAX_RESOURCE_BYTES` before it is stored: the
    last resort behind each work's own bounds (an import's :func:`listed` problems and names),
    so that no operation is ever stored larger than every client reads. A response or error
    that would pass the bound is replaced by RESOURCE_EXHAUSTED, reason
    ``RESPONSE_TOO_LARGE`` (what a gRPC client would have been answered on reading it), and
    metadata that alone passes it by an empty message of its type (docs/semantics.md,
    "Errors")."""
    size = operation.ByteSize()
    if size <= MAX_RESOURCE_BYTES:
        return
    what = operation.WhichOneof("result") or "metadata"
    _log.warning("operation %s: its %s made it %d bytes; not stored", operation.name, what, size)
    error = ServiceError(
        Code.RESOURCE_EXHAUSTED,
        f"The operation's {what} would make it {size} bytes, more than the "
        f"{MAX_RESOURCE_BYTES} bytes every client reads; it was not kept.",
        "RESPONSE_TOO_LARGE",
        {"size": str(size), "limit": str(MAX_RESOURCE_BYTES)},
    )
    operation.error.CopyFrom(error.to_status())  # a response, if any, is cleared (a oneof)
    if operation.ByteSize() > MAX_RESOURCE_BYTES:
        operation.metadata.value = b""


def too_many_struct_entries(path: str) -> FieldViolation:
    """``TOO_MANY`` at the Struct or list where the request's total passes the limit."""
    return FieldViolation(
        path,
        f"Structs and lists may hold at most {MAX_STRUCT_ENTRIES} fields and elements in all; "
        "the total passes it here.",
        "TOO_MANY",
    )


class _Stop(Exception):
    """Counting is over: enough violations were found (or the encoding ended badly)."""


class _Found(Exception):
    """A container over its limit, found in an encoding; each enclosing level adds its step
    to ``steps`` (innermost first) on the way out, so no path is built before one is needed."""

    def __init__(self, limit: int, *, struct_total: bool) -> None:
        super().__init__()
        self.limit = limit
        self.struct_total = struct_total
        self.steps: list[str] = []

    def violation(self, path: str) -> FieldViolation:
        where = path + "".join(reversed(self.steps))
        where = where.removeprefix(".")
        if self.struct_total:
            return too_many_struct_entries(where)
        return too_many(where, self.limit, None)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it; IndexError past the end."""
    byte = data[at]
    if byte < 0x80:
        return byte, at + 1
    value, shift = byte & 0x7F, 7
    while True:
        at += 1
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
        if shift > 63:
            raise _Stop


class _Tally:
    """One count pass over one request: the violations found and the Struct entries counted.
    Raises :class:`_Stop` once there is nothing more worth reporting."""

    __slots__ = ("entries", "limits", "structs", "violations")

    def __init__(self, limits: Limits, *, structs: bool) -> None:
        self.limits = limits
        self.violations: list[FieldViolation] = []
        self.entries = 0
        self.structs = structs  # whether Struct entries can pass the limit at all (size)

    def report(self, violation: FieldViolation) -> None:
        self.violations.append(violation)
        if len(self.violations) >= MAX_COUNT_VIOLATIONS:
            raise _Stop

    def add_entries(self, path: str, added: int) -> None:
        """Count ``added`` Struct entries; once the total passes the limit, that is reported
        at ``path`` and counting ends (nothing inside would be worth reporting)."""
        self.entries += added
        if self.entries > MAX_STRUCT_ENTRIES:
            self.violations.append(too_many_struct_entries(path))
            raise _Stop


class _Encoded:
    """One count pass over an encoded request: raises :class:`_Found` at the first container
    over its limit. Spans are (start, end) offsets of a payload in ``data``."""

    __slots__ = ("data", "entries", "limits", "structs")

    def __init__(self, limits: Limits, data: bytes) -> None:
        self.limits = limits
        self.data = data
        self.entries = 0
        # Each Struct entry or list element takes at least 2 bytes.
        self.structs = len(data) > 2 * MAX_STRUCT_ENTRIES

    def message(self, plan: CountPlan, span: tuple[int, int], depth: int, *, relaxed: bool) -> None:
        """The fields of one message. ``relaxed``: under an OUTPUT_ONLY field, where every
        container may hold MAX_DECODED_ENTRIES. Messages nested deeper than protobuf's parser
        allows are left to it (it refuses them)."""
        if depth > MAX_MESSAGE_NESTING:
            return
        seen: dict[int, int] = {}
        for number, wire, first, last in _fields(self.data, *span):
            rule = plan.get(number)
            if rule is None:
                continue
            kind, limit, element, name, target, packed, output_only = rule
            inner = relaxed or output_only
            if kind not in (_REPEATED, _MAP):
                if wire == 2:
                    try:
                        self.item(kind, target, (first, last), depth, relaxed=inner)
                    except _Found as found:
                        found.steps.append(f".{name}")
                        raise
                continue
            index = seen.get(number, 0)
            seen[number] = index + self.occurrences(wire, packed, first, last)
            if seen[number] > (MAX_DECODED_ENTRIES if inner else limit):
                over = _Found(MAX_DECODED_ENTRIES if inner else limit, struct_total=False)
                over.steps.append(f".{name}")
                raise over
            if wire == 2 and element != _SCALAR:
                self.element(rule, index, (first, last), depth, relaxed=inner)

    def element(
        self, rule: Count, index: int, span: tuple[int, int], depth: int, *, relaxed: bool
    ) -> None:
        """Element ``index`` of a repeated field, or an entry of a map (its value, field 2)."""
        kind, _, element, name, target, _, _ = rule
        try:
            if kind == _REPEATED:
                self.item(element, target, span, depth, relaxed=relaxed)
                return
            for number, first, last in _delimited(self.data, *span):
                if number == 2:
                    self.item(element, target, (first, last), depth + 1, relaxed=relaxed)
        except _Found as found:
            key = f"[{index}]" if kind == _REPEATED else _entry_key(self.data, *span)
            found.steps.extend((key, f".{name}"))
            raise

    def occurrences(self, wire: int, packed: int, first: int, last: int) -> int:
        """Elements in one occurrence of a repeated field: one, or a packed run of scalars."""
        if wire != 2 or packed < 0:
            return 1
        if packed:
            return (last - first) // packed
        return len(self.data[first:last].translate(None, _HIGH_BYTES))  # varints' last bytes

    def item(
        self,
        kind: int,
        target: descriptor.Descriptor | None,
        span: tuple[int, int],
        depth: int,
        *,
        relaxed: bool,
    ) -> None:
        """One value of ``kind`` (a message, Struct, ListValue or Value) at ``span``."""
        if relaxed and kind in _STRUCT_TYPES:
            # Ignored, so not counted in the total: each container is bounded by itself.
            target, kind = _STRUCT_TYPES[kind], _MESSAGE
        if kind == _MESSAGE and target is not None:
            plan = self.limits.count_plan(target)
            if plan:
                self.message(plan, span, depth + 1, relaxed=relaxed)
        elif self.structs:
            if kind == _VALUE_KIND:
                self.value(span, depth + 1)
            elif kind in (_STRUCT_KIND, _LIST_KIND):
                self.container(span, depth + 1, struct=kind == _STRUCT_KIND)

    def container(self, span: tuple[int, int], depth: int, *, struct: bool) -> None:
        """A Struct (each entry is field 1, a map entry whose value is its field 2) or a
        ListValue (each element is field 1, a Value): its entries are added to the request's
        total first, then those holding more are entered, as :class:`Walk` does."""
        if depth > MAX_MESSAGE_NESTING:
            return
        data = self.data
        for number, _, _ in _delimited(data, *span):
            if number == 1:
                self.entries += 1
                if self.entries > MAX_STRUCT_ENTRIES:
                    raise _Found(MAX_STRUCT_ENTRIES, struct_total=True)
        index = -1
        for number, first, last in _delimited(data, *span):
            if number != 1:
                continue
            index += 1
            try:
                if not struct:
                    self.value((first, last), depth + 1)
                    continue
                for field, value_first, value_last in _delimited(data, first, last):
                    if field == 2:
                        self.value((value_first, value_last), depth + 2)
            except _Found as found:
                if struct:
                    found.steps.append(".fields" + _entry_key(data, first, last))
                else:
                    found.steps.append(f".values[{index}]")
                raise

    def value(self, span: tuple[int, int], depth: int) -> None:
        """A Value: only a struct_value (field 5) or list_value (field 6) holds more."""
        for number, first, last in _delimited(self.data, *span):
            if number in (5, 6):
                with _step(".struct_value" if number == 5 else ".list_value"):
                    self.container((first, last), depth + 1, struct=number == 5)


@contextmanager
def _step(step: str) -> Iterator[None]:
    """Add ``step`` to the path of a container found over its limit inside."""
    try:
        yield
    except _Found as found:
        found.steps.append(step)
        raise


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the message encoded in ``data[start:end]``: (number, wire type, start and
    end of the payload); raises :class:`_Stop` (or IndexError) where the encoding is broken,
    which only the decoder then judges."""
    at = start
    while at < end:
        tag = data[at]
        if tag < 0x80:
            at += 1
        else:
            tag, at = _varint(data, at)
        wire = tag & 7
        first = at
        if wire == 2:
            length = data[at]
            if length < 0x80:
                first = at = at + 1
            else:
                length, at = _varint(data, at)
                first = at
            at += length
        elif wire == 0:
            while data[at] >= 0x80:
                at += 1
            at += 1
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise _Stop  # groups: not proto3
        if at > end:
            raise _Stop
        yield tag >> 3, wire, first, at


def wire_fields(data: bytes, start: int = 0, end: int = -1) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the message encoded in ``data[start:end]`` (``end`` -1: to the end of
    ``data``), as the count pass reads them: (number, wire type, start and end of the payload),
    each field's encoding ending where the next begins. For a reader that needs a few fields
    of a large stored message without parsing all of it (the web view); ValueError where the
    encoding is broken."""
    try:
        yield from _fields(data, start, len(data) if end < 0 else end)
    except (_Stop, IndexError):
        raise ValueError("not a valid protobuf encoding") from None


def _delimited(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """The length-delimited fields of the message in ``data[start:end]``: (number, start and
    end of the payload)."""
    for number, wire, first, last in _fields(data, start, end):
        if wire == 2:
            yield number, first, last


def _entry_key(data: bytes, start: int, end: int) -> str:
    """The key (field 1) of the map entry encoded in ``data[start:end]`` as a path suffix."""
    for number, wire, first, last in _fields(data, start, end):
        if number == 1:
            if wire == 2:
                return key_path(data[first:last].decode(errors="replace"))
            return key_path(_varint(data, first)[0])
    return key_path("")


class _Counter(_Tally):
    """A count pass over a decoded message, or over a request as a JSON document (``json``:
    proto3 JSON, camelCase or proto field names, a Struct is an object, a ListValue an array,
    a Value either) for REST and MCP: the same walk, only the reading differs. A value of the
    wrong JSON type is passed over (the body check reports it)."""

    __slots__ = ("json",)

    def __init__(self, limits: Limits, *, structs: bool, json: bool) -> None:
        super().__init__(limits, structs=structs)
        self.json = json

    def _fields(
        self,
        message_type: descriptor.Descriptor,
        node: Any,  # noqa: ANN401 - a message, or a JSON value
        plan: CountPlan,
    ) -> Iterator[tuple[Count, Any]]:
        """The counted fields set in ``node``, each with its value; OUTPUT_ONLY ones are not
        counted (decoded already and cleared by the core, or bounded by the JSON reader)."""
        if not self.json:
            for field, value in node.ListFields():
                rule = plan.get(field.number)
                if rule is not None and not rule[6]:
                    yield rule, value
            return
        if not isinstance(node, dict):
            return
        names = _json_names(message_type)
        for key, value in node.items():
            field = names.get(key)
            rule = plan.get(field.number) if field is not None else None
            if rule is not None and not rule[6] and value is not None:
                yield rule, value

    def message(
        self,
        message_type: descriptor.Descriptor | None,
        node: Any,  # noqa: ANN401 - a message, or a JSON value
        path: str,
    ) -> None:
        """``node``, a message of ``message_type`` (None: a decoded message's own)."""
        if message_type is None:
            message_type = cast("descriptor.Descriptor", node.DESCRIPTOR)
        plan = self.limits.count_plan(message_type)
        if not plan:
            return
        for rule, value in self._fields(message_type, node, plan):
            kind, limit, element, name, target, _, _ = rule
            at = f"{path}.{name}" if path else name
            if kind not in (_MAP, _REPEATED):
                self.item(kind, target, value, at)
            elif self.json and not isinstance(value, dict if kind == _MAP else list):
                continue
            elif len(value) > limit:
                self.report(too_many(at, limit, len(value)))
            elif element != _SCALAR and kind == _MAP:
                for key, item in value.items():
                    self.item(element, target, item, f"{at}{key_path(key)}")
            elif element != _SCALAR:
                for index, item in enumerate(value):
                    self.item(element, target, item, f"{at}[{index}]")

    def item(
        self,
        kind: int,
        target: descriptor.Descriptor | None,
        value: Any,  # noqa: ANN401 - by kind
        path: str,
    ) -> None:
        if kind == _MESSAGE and target is not None:
            self.message(target if self.json else None, value, path)
        elif not self.structs:
            return
        elif kind == _VALUE_KIND:
            self.value(value, path)
        elif kind == _STRUCT_KIND:
            if not self.json or isinstance(value, dict):
                self.struct(value, path)
        elif kind == _LIST_KIND and (not self.json or isinstance(value, list)):
            self.list(value, path)

    def _inner(self, value: Any) -> tuple[bool, Any] | None:  # noqa: ANN401 - by representation
        """What a Value holds that can hold more: (whether a Struct, it), or None."""
        if self.json:
            if isinstance(value, dict):
                return True, value
            return (False, value) if isinstance(value, list) else None
        kind = value.WhichOneof("kind")
        if kind == "struct_value":
            return True, value.struct_value
        return (False, value.list_value) if kind == "list_value" else None

    def value(self, value: Any, path: str) -> None:  # noqa: ANN401 - by representation
        inner = self._inner(value)
        if inner is not None:
            self._held(inner, path)

    def _held(self, inner: tuple[bool, Any], path: str) -> None:
        """What a Value at ``path`` holds (:meth:`_inner`)."""
        struct, container = inner
        if struct:
            self.struct(container, f"{path}.struct_value")
        else:
            self.list(container, f"{path}.list_value")

    def struct(self, struct: Any, path: str) -> None:  # noqa: ANN401 - by representation
        fields: Mapping[str, Any] = struct if self.json else struct.fields
        self.add_entries(path, len(fields))
        for key, value in fields.items():
            inner = self._inner(value)
            if inner is not None:
                self._held(inner, f"{path}.fields{key_path(key)}")

    def list(self, values: Any, path: str) -> None:  # noqa: ANN401 - by representation
        elements: Sequence[Any] = values if self.json else values.values
        self.add_entries(path, len(elements))
        for index, value in enumerate(elements):
            inner = self._inner(value)
            if inner is not None:
                self._held(inner, f"{path}.values[{index}]")


@cache
def _json_names(message_type: descriptor.Descriptor) -> Mapping[str, descriptor.FieldDescriptor]:
    """A message's fields by the names proto3 JSON accepts: JSON (camelCase) and proto."""
    names = {field.name: field for field in message_type.fields}
    names.update((field.json_name, field) for field in message_type.fields)
    return names


def _json_location(
    limits: Limits, message_type: descriptor.Descriptor, steps: Iterable[str | int], path: str
) -> tuple[str, int, int]:
    """Where the JSON keys and indexes ``steps`` lead in a request of ``message_type``: the
    field path (proto names, Struct notation), the kind of what is there (_SCALAR once the
    steps leave the descriptors: an unknown field, say) and its count limit."""
    kind, limit, relaxed = _MESSAGE, MAX_DECODED_ENTRIES, False
    target: descriptor.Descriptor | None = message_type
    element, element_target = _SCALAR, target  # of a repeated field or map
    for step in steps:
        if kind == _MESSAGE and target is not None and isinstance(step, str):
            field = _json_names(target).get(step)
            path = f"{path}.{field.name if field else shown(step)}".removeprefix(".")
            rule = limits.count_plan(target).get(field.number) if field is not None else None
            if rule is None:
                kind, target = _SCALAR, None
                continue
            kind, limit, element, _, element_target, _, output_only = rule
            relaxed = relaxed or output_only
            limit = MAX_DECODED_ENTRIES if relaxed else limit
            target = element_target
        elif kind in (_REPEATED, _MAP):
            path += f"[{step}]" if kind == _REPEATED else key_path(step)
            kind, target = element, element_target
        elif kind == _STRUCT_KIND:
            path += f".fields{key_path(step)}"
            kind = _VALUE_KIND
        elif kind == _LIST_KIND:
            path += f".values[{step}]"
            kind = _VALUE_KIND
        elif kind == _VALUE_KIND:
            nested = f".struct_value.fields{key_path(step)}"
            path += nested if isinstance(step, str) else f".list_value.values[{step}]"
        else:
            path += f".{shown(step)}" if isinstance(step, str) else f"[{step}]"
            kind = _SCALAR
    return path, kind, limit


_STRUCT_TYPES = {
    _STRUCT_KIND: struct_pb2.Struct.DESCRIPTOR,
    _LIST_KIND: struct_pb2.ListValue.DESCRIPTOR,
    _VALUE_KIND: struct_pb2.Value.DESCRIPTOR,
}

LIMITS = Limits()  # the generic limits and the seeds' ones


def check(message: Message, path: str) -> list[FieldViolation]:
    """The limit violations of ``message`` (see :class:`Limits`), paths starting at ``path``."""
    return LIMITS.check(message, path)
