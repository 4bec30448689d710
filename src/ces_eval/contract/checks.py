"""One validation plan per message type, applied in one walk (:class:`Checks`).

What a write is held to, field by field, comes from the descriptors and a few declared tables:
OUTPUT_ONLY fields are cleared from input (AIP-203: ignored, not rejected), REQUIRED fields are
enforced inside every message the caller set (:mod:`ces_eval.contract.fields` says what the
behaviours mean), some numeric fields lie within the ranges the seeds state, every field within
the request limits (:mod:`ces_eval.contract.limits`), and every value within what proto3 JSON can
render (:mod:`ces_eval.contract.json_safe`). A :class:`Checks` builds, once per message type, the
plan of what to do in a message of that type (the fields to clear, to bound, to judge, to descend
into) and walks a request once, doing all of it; the walk never enters a sub-tree where nothing
can be found (most of a large golden conversation). Each plan is also compiled into a function
of its own (see "compiled walks"), which walks every message the limits do not measure the
strings of.

Two policies: input as a caller writes it (``keep_output_only=False``: those fields are cleared
and held to nothing), and a resource as the emulator seeds it (``keep_output_only=True``: every
field stays and is held to the limits and JSON-safety).
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from google.protobuf import descriptor

from ces_eval.contract import json_safe, schema
from ces_eval.contract.fields import (
    ONEOF_REQUIRED,
    OUTPUT_ONLY,
    REQUIRED,
    REQUIRED_EMPTY,
    has_behavior,
    required_fields,
    target_of,
)
from ces_eval.contract.fields import own_required_violations as _own_required_violations
from ces_eval.contract.fields import subtree_has as _subtree_has
from ces_eval.contract.limits import MAX_VIOLATIONS, key_path, rule_form
from ces_eval.errors import FieldViolation

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.contract.limits import Limits, Rules, Walk

__all__ = ["Bounds", "Checks", "clear_output_only", "required_violations", "unrenderable"]

Bounds = dict[tuple[str, str], tuple[float, float]]

_SINGLE, _REPEATED, _MAP = range(3)
# A field's bounds, its judging (shape, whether a Struct type) and its descent (whether
# REQUIRED fields are below, shape); None where it does not apply.
_Action = tuple[tuple[float, float] | None, tuple[int, bool] | None, tuple[bool, int] | None]


def _shape(field: descriptor.FieldDescriptor) -> int:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        return _MAP
    return _REPEATED if field.is_repeated else _SINGLE


@dataclass(frozen=True)
class _Plan:
    """What the walk does in a message of one type: OUTPUT_ONLY fields to clear, what to do
    with each field that has anything to do (never OUTPUT_ONLY), by its descriptor as
    ListFields() gives it (its bounds; how json_safe judges it: shape, whether a Struct type;
    how to descend: whether its sub-tree holds REQUIRED fields to check, shape; each None
    where it does not apply), and what the request limits check here (empty: nothing)."""

    output_only: frozenset[str]
    actions: dict[descriptor.FieldDescriptor, _Action]
    limits: Rules
    required: bool = False  # whether the type has REQUIRED fields of its own


def _reaches(
    message_descriptor: descriptor.Descriptor,
    types: frozenset[str],
    seen: frozenset[descriptor.Descriptor],
) -> bool:
    if message_descriptor.full_name in types:
        return True
    if message_descriptor in seen or message_descriptor.full_name.startswith("google.protobuf."):
        return False
    seen = seen | {message_descriptor}
    return any(
        (target := target_of(f)) is not None and _reaches(target, types, seen)
        for f in message_descriptor.fields
    )


class _Enough(Exception):
    """A pass found :data:`MAX_VIOLATIONS` problems: the request is refused, nothing else of
    it needs looking at."""


@dataclass
class _Pass:
    """One walk's findings and what it knows of the whole message."""

    required: list[FieldViolation] = field(default_factory=list)
    found: list[FieldViolation] = field(default_factory=list)  # ranges and JSON-safety
    walk: Walk | None = None
    numbers: bool = False  # whether Struct trees may hold a non-finite number

    def payload(self, payload: Message, path: str) -> None:
        """The walk of an Any's payload: JSON-safety alone (its type is not the caller's)."""
        _JSON_ONLY._run(payload, path, self, check_required=False)

    def full(self) -> bool:
        limits = len(self.walk.violations) if self.walk is not None else 0
        return len(self.required) + len(self.found) + limits >= MAX_VIOLATIONS


class Checks:
    """One pass over a message (:meth:`inspect`) doing every check its type asks for, with
    plans built once per type:

    - ``bounds``: (message type, field) → inclusive range of some numeric fields;
    - ``limits``: the request limits, checked in the same pass (each message is listed once);
    - ``required``: REQUIRED fields enforced; ``renderable``: values JSON cannot render refused;
    - ``keep_output_only``: see the module's policies.

    The pass stops once it has found :data:`MAX_VIOLATIONS` problems, and never looks inside a
    repeated field or map over its count limit."""

    def __init__(
        self,
        bounds: Bounds | None = None,
        limits: Limits | None = None,
        *,
        required: bool = True,
        renderable: bool = True,
        keep_output_only: bool = False,
    ) -> None:
        self._limits = limits
        self._bounds = dict(bounds or {})
        self._required = required
        self._renderable = renderable
        self._keep = keep_output_only
        self._reached = frozenset(message for message, _ in self._bounds) | (
            json_safe.TYPES if renderable else frozenset()
        )
        self._plans: dict[descriptor.Descriptor, _Plan] = {}
        self._visitors: dict[descriptor.Descriptor, _Visit] = {}

    def _plan(self, message_descriptor: descriptor.Descriptor) -> _Plan:
        plan = self._plans.get(message_descriptor)
        if plan is not None:
            return plan
        descend: dict[str, tuple[bool, int]] = {}
        judged: dict[str, tuple[int, bool]] = {}
        for f in message_descriptor.fields:
            target = target_of(f)
            if target is None:
                continue
            if self._renderable and target.full_name in json_safe.TYPES:
                judged[f.name] = (_shape(f), target.full_name in json_safe.STRUCTS)
            if target.full_name.startswith("google.protobuf."):
                continue
            required = (
                self._required
                and not has_behavior(f, OUTPUT_ONLY)
                and _subtree_has(target, REQUIRED)
            )
            if (
                required
                or (not self._keep and _subtree_has(target, OUTPUT_ONLY))
                or _reaches(target, self._reached, frozenset())
            ):
                descend[f.name] = (required, _shape(f))
        output_only = (
            frozenset()
            if self._keep
            else frozenset(
                f.name for f in message_descriptor.fields if has_behavior(f, OUTPUT_ONLY)
            )
        )
        bounded = {
            name: bounds
            for (message, name), bounds in self._bounds.items()
            if message == message_descriptor.full_name
        }
        plan = _Plan(
            output_only=output_only,
            actions={
                f: (bounded.get(f.name), judged.get(f.name), descend.get(f.name))
                for f in message_descriptor.fields
                if f.name not in output_only
                and (f.name in bounded or f.name in judged or f.name in descend)
            },
            limits=self._limits.rules(message_descriptor, output_only, frozenset(descend))
            if self._limits is not None
            else ({}, {}),
            required=bool(required_fields(message_descriptor)),
        )

        self._plans[message_descriptor] = plan
        return plan

    def inspect(
        self, message: Message, path: str, *, compiled: bool = True
    ) -> tuple[list[FieldViolation], list[FieldViolation]]:
        """Clear every OUTPUT_ONLY field of ``message`` in place (unless kept) and return its
        REQUIRED violations, and then its bounded fields out of range and its values JSON
        cannot render (in the order found) followed by the limits it exceeds, in one pass.
        ``compiled`` false: by the general walk alone (the reference of the compiled ones)."""
        state = _Pass(
            walk=self._limits.walk(message) if self._limits is not None else None,
            numbers=self._renderable and json_safe.may_hold_non_finite(message),
        )
        with suppress(_Enough):
            if compiled:
                self._run(message, path, state, check_required=self._required)
            else:
                self._inspect(message, path, state, check_required=self._required)
        required = list(dict.fromkeys(state.required))  # a oneof's violation comes once
        others = state.found + (state.walk.violations if state.walk is not None else [])
        return required[:MAX_VIOLATIONS], others[:MAX_VIOLATIONS]

    def _run(self, message: Message, path: str, state: _Pass, *, check_required: bool) -> None:
        """The walk of ``message``: compiled (:meth:`_visitor`) unless it is large enough for
        the limits to measure its strings, which the plans' general walk does."""
        if state.walk is not None and state.walk.large:
            self._inspect(message, path, state, check_required=check_required)
            return
        descriptor_ = schema.descriptor_of(message)
        visit = self._visitors.get(descriptor_) or self._visitor(descriptor_)
        visit(message, path, state, check_required)

    def _visitor(self, message_descriptor: descriptor.Descriptor) -> _Visit:
        """The compiled walk of a message of this type (see "compiled walks"), built once with
        those of every type it descends into."""
        visit = self._visitors.get(message_descriptor)
        if visit is None:
            compiled = _compile(self._plan(message_descriptor), message_descriptor, self._visitors)
            visit = self._visitors[message_descriptor] = compiled.visit
            for child in compiled.children:
                self._visitor(child)
        return visit

    def _inspect(  # noqa: PLR0912 - one pass does five jobs; helpers would cost a call per message
        self, message: Message, path: str, state: _Pass, *, check_required: bool
    ) -> None:
        walk = state.walk
        if (state.required or state.found or (walk is not None and walk.violations)) and (
            state.full()
        ):
            raise _Enough
        # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
        descriptor_ = schema.descriptor_of(message)
        plan = self._plans.get(descriptor_) or self._plan(descriptor_)
        present = message.ListFields()
        if plan.output_only:
            for f, _ in present:
                if f.name in plan.output_only:
                    message.ClearField(f.name)
        if check_required and plan.required:
            state.required += _own_required_violations(message, path)
        over: tuple[descriptor.FieldDescriptor, ...] = ()
        if walk is not None and plan.limits[walk.large]:
            over = walk.fields(plan.limits[walk.large], present, path)
        actions = plan.actions
        for f, value in present:
            action = actions.get(f)
            if action is None or (over and f in over):
                continue
            bounds, judged, below = action
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                state.found.append(
                    FieldViolation(
                        f"{path}.{f.name}",
                        f"Must be between {bounds[0]:g} and {bounds[1]:g}; got {value:g}.",
                        "OUT_OF_RANGE",
                    )
                )
            if judged is not None:
                if judged[1] and not state.numbers:
                    continue  # nothing to find in a Struct tree
                for item_path, item in _items(path, f.name, judged[0], value):
                    json_safe.check(
                        item,
                        item_path,
                        state.found,
                        numbers=state.numbers,
                        payload=state.payload,
                    )
                continue
            if below is None:
                continue
            check = check_required and below[0]
            shape = below[1]
            if shape == _SINGLE:
                self._inspect(value, f"{path}.{f.name}", state, check_required=check)
            elif shape == _REPEATED:
                prefix = f"{path}.{f.name}["
                for index, item in enumerate(value):
                    self._inspect(item, f"{prefix}{index}]", state, check_required=check)
            else:
                for item_path, item in _items(path, f.name, shape, value):
                    self._inspect(item, item_path, state, check_required=check)


def _items(path: str, name: str, shape: int, value: Any) -> Iterable[tuple[str, Message]]:  # noqa: ANN401 - a field's value: message, repeated field or map
    """The messages a field holds with their paths (``f``, ``f[2]``, ``f["k"]``)."""
    if shape == _MAP:
        return ((f"{path}.{name}{key_path(key)}", item) for key, item in value.items())
    if shape == _REPEATED:
        return ((f"{path}.{name}[{index}]", item) for index, item in enumerate(value))
    return ((f"{path}.{name}", value),)


# -- compiled walks -----------------------------------------------------------------------------
#
# The general walk (Checks._inspect) reads a message's set fields with ListFields(), which makes
# a Python object of every one of them (each string decoded), and looks each up in the plan.
# A compiled walk is one Python function per message type, written from its plan: it touches
# only the fields the plan names, each tested for presence the cheapest way (a length, a
# HasField), in the general walk's order: OUTPUT_ONLY fields cleared, REQUIRED fields checked,
# then the limits of every field, then each field's bounds, judging or descent. It serves every
# message too small for the limits to measure its strings (the limits' small rules); the
# general walk serves the rest, and is the reference the compiled walks are tested against.

_Visit = Callable[[Any, str, _Pass, bool], None]


@dataclass(frozen=True)
class _Compiled:
    visit: _Visit
    children: tuple[descriptor.Descriptor, ...]  # the message types it descends into


_FLOATS = (descriptor.FieldDescriptor.CPPTYPE_DOUBLE, descriptor.FieldDescriptor.CPPTYPE_FLOAT)


def _oneof(f: descriptor.FieldDescriptor) -> descriptor.OneofDescriptor | None:
    """The oneof ``f`` is one of several members of (not a proto3 ``optional``'s own)."""
    oneof = f.containing_oneof
    return oneof if oneof is not None and len(oneof.fields) > 1 else None


def _attribute(f: descriptor.FieldDescriptor) -> str:
    """The expression reading ``f`` of ``m``."""
    name = f.name
    plain = name.isidentifier() and not keyword.iskeyword(name)
    return f"m.{name}" if plain else f"getattr(m, {name!r})"


def _required(f: descriptor.FieldDescriptor) -> list[str]:
    """Lines reporting the REQUIRED field ``f`` when it is empty, as
    :func:`~ces_eval.contract.fields.own_required_violations` does (a oneof member by its
    oneof's case, read as :func:`_reading` reads it)."""
    oneof = _oneof(f)
    if oneof is not None:
        where, said, test = oneof.name, ONEOF_REQUIRED, f"case_{oneof.index} is None"
    elif f.has_presence and not f.is_repeated:
        where, said, test = f.name, REQUIRED_EMPTY, f"not m.HasField({f.name!r})"
    else:
        where, said, test = f.name, REQUIRED_EMPTY, f"not {_attribute(f)}"
    return [
        f"if {test}:",
        f'    state.required.append(FieldViolation(f"{{path}}.{where}", {said!r}, "REQUIRED"))',
    ]


def _reading(f: descriptor.FieldDescriptor, test: str = "") -> list[str]:
    """Lines reading ``f`` into ``v`` when it is set, as ListFields() says, and opening a block
    that runs then: a message is read only once known set (reading an unset one makes it), a
    oneof member by the oneof's case (read once per message, ``case_<oneof>``). ``test``: a
    further condition, tested first."""
    also = f"{test} and " if test else ""
    read = f"v = {_attribute(f)}"
    oneof = _oneof(f)
    if oneof is not None:
        return [f"if {also}case_{oneof.index} == {f.name!r}:", f"    {read}"]
    if f.has_presence and not f.is_repeated:
        return [f"if {also}m.HasField({f.name!r}):", f"    {read}"]
    if f.cpp_type in _FLOATS and not f.is_repeated:
        return [read, f"if {also}(v or copysign(1.0, v) < 0):"]  # -0.0 is set
    return [read, f"if {also}v:"]


def _each(shape: int, name: str, work: str) -> list[str]:
    """Lines doing ``work`` (a format of the item and its path) for each message a field's
    value ``v`` holds, as :func:`_items` gives them."""
    if shape == _SINGLE:
        return [work.format("v", f'f"{{path}}.{name}"')]
    if shape == _REPEATED:
        return [
            "for index, item in enumerate(v):",
            "    " + work.format("item", f'f"{{path}}.{name}[{{index}}]"'),
        ]
    return [
        "for key, item in v.items():",
        "    " + work.format("item", f'f"{{path}}.{name}{{key_path(key)}}"'),
    ]


def _compile(
    plan: _Plan,
    message_descriptor: descriptor.Descriptor,
    visitors: dict[descriptor.Descriptor, _Visit],
) -> _Compiled:
    """The compiled walk of ``message_descriptor`` by its ``plan``; ``visitors``: where the
    walks of the types it descends into are found when it runs."""
    names: dict[str, object] = {
        "Enough": _Enough,
        "FieldViolation": FieldViolation,
        "check_json": json_safe.check,
        "key_path": key_path,
        "copysign": math.copysign,
        "visitors": visitors,
    }

    def constant(value: object) -> str:
        name = f"c{len(names)}"
        names[name] = value
        return name

    head = [
        "def visit(m, path, state, check_required):",
        "    walk = state.walk",
        "    if (state.required or state.found or (walk is not None and walk.violations)) and (",
        "        state.full()",
        "    ):",
        "        raise Enough",
    ]
    body = [f"m.ClearField({name!r})" for name in sorted(plan.output_only)]
    required = required_fields(message_descriptor) if plan.required else ()
    oneofs = {
        oneof.index: oneof.name
        for f in (*required, *plan.limits[0], *plan.actions)
        if (oneof := _oneof(f)) is not None
    }
    body += [f"case_{index} = m.WhichOneof({name!r})" for index, name in sorted(oneofs.items())]
    if required:
        body += ["if check_required:", *("    " + line for f in required for line in _required(f))]
    over: dict[descriptor.FieldDescriptor, str] = {}
    limits: list[str] = []
    for f, rule in sorted(plan.limits[0].items(), key=lambda item: item[0].number):
        form, limit = rule_form(rule)
        if form in ("count", "length"):
            limits += [f"v = getattr(m, {f.name!r})", f"if len(v) > {limit}:"]
        else:
            limits += _reading(f)
        call = f"walk.field({constant(rule)}, v, path)"
        if f.is_repeated:
            over[f] = f"over{len(over)}"
            body.insert(0, f"{over[f]} = False")
            limits.append(f"    {over[f]} = {call}")
        else:
            limits.append(f"    {call}")
    if limits:
        body += ["if walk is not None:", *("    " + line for line in limits)]
    children: list[descriptor.Descriptor] = []
    for f, (bounds, judged, below) in sorted(plan.actions.items(), key=lambda item: item[0].number):
        name = f.name
        body += _reading(f, f"not {over[f]}" if f in over else "")
        work: list[str] = []
        if bounds is not None:
            low, high = bounds
            work += [
                f"if not {low!r} <= v <= {high!r}:",
                "    state.found.append(",
                "        FieldViolation(",
                f'            f"{{path}}.{name}",',
                f'            f"Must be between {low:g} and {high:g}; got {{v:g}}.",',
                '            "OUT_OF_RANGE",',
                "        )",
                "    )",
            ]
        if judged is not None:
            shape, is_struct = judged
            each = _each(
                shape,
                name,
                "check_json({}, {}, state.found, numbers=state.numbers, payload=state.payload)",
            )
            work += ["if state.numbers:", *("    " + line for line in each)] if is_struct else each
        elif below is not None:
            required_below, shape = below
            # A map's walk visits its values: the entry's value type, not the entry's.
            child = cast("descriptor.Descriptor", target_of(f))
            children.append(child)
            check = "check_required" if required_below else "False"
            walk_child = f"visitors[{constant(child)}]({{}}, {{}}, state, {check})"
            work += _each(shape, name, walk_child)
        body += ["    " + line for line in work or ["pass"]]
    source = "\n".join(head + ["    " + line for line in body]) + "\n"
    exec(compile(source, f"<checks of {message_descriptor.full_name}>", "exec"), names)  # noqa: S102 - code written here from descriptors
    return _Compiled(cast("_Visit", names["visit"]), tuple(children))


# JSON-safety alone, every field kept: an Any's payload, and :func:`unrenderable`.
_JSON_ONLY = Checks(required=False, keep_output_only=True)
_REQUIRED_ONLY = Checks(renderable=False, keep_output_only=True)
_CLEAR_ONLY = Checks(required=False, renderable=False)


def unrenderable(message: Message, path: str) -> list[FieldViolation]:
    """One violation per value in ``message`` (at ``path``) that proto3 JSON cannot render, up
    to :data:`MAX_VIOLATIONS`."""
    return _JSON_ONLY.inspect(message, path)[1]


def required_violations(message: Message, path: str) -> list[FieldViolation]:
    """One violation per REQUIRED field left empty in ``message`` or any sub-message it sets
    (the first :data:`MAX_VIOLATIONS`). Sub-trees marked OUTPUT_ONLY are not checked: the
    caller does not write them. A REQUIRED member of a oneof is satisfied by any member of
    that oneof."""
    return _REQUIRED_ONLY.inspect(message, path)[0]


def clear_output_only(message: Message) -> None:
    """Remove every OUTPUT_ONLY field from ``message`` and its sub-messages, in place."""
    _CLEAR_ONLY.inspect(message, "")
