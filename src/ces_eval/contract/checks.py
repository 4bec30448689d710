"""One validation plan per message type, applied in one walk (:class:`Checks`).

What a write is held to, field by field, comes from the descriptors and a few declared tables:
OUTPUT_ONLY fields are cleared from input (AIP-203: ignored, not rejected), REQUIRED fields are
enforced inside every message the caller set (:mod:`ces_eval.contract.fields` says what the
behaviours mean), some numeric fields lie within the ranges the seeds state, every field within
the request limits (:mod:`ces_eval.contract.limits`), and every value within what proto3 JSON can
render (:mod:`ces_eval.contract.json_safe`). A :class:`Checks` builds, once per message type, the
plan of what to do in a message of that type (the fields to clear, to bound, to judge, to descend
into) and walks a request once, doing all of it; the walk never enters a sub-tree where nothing
can be found (most of a large golden conversation).

Two policies: input as a caller writes it (``keep_output_only=False``: those fields are cleared
and held to nothing), and a resource as the emulator seeds it (``keep_output_only=True``: every
field stays and is held to the limits and JSON-safety).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ces_eval.contract import json_safe
from ces_eval.contract.fields import (
    OUTPUT_ONLY,
    REQUIRED,
    has_behavior,
    required_fields,
    target_of,
)
from ces_eval.contract.fields import own_required_violations as _own_required_violations
from ces_eval.contract.fields import subtree_has as _subtree_has
from ces_eval.contract.limits import MAX_VIOLATIONS, key_path
from ces_eval.errors import FieldViolation

if TYPE_CHECKING:
    from google.protobuf import descriptor
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
        _JSON_ONLY._inspect(payload, path, self, check_required=False)

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
        self, message: Message, path: str
    ) -> tuple[list[FieldViolation], list[FieldViolation]]:
        """Clear every OUTPUT_ONLY field of ``message`` in place (unless kept) and return its
        REQUIRED violations, and then its bounded fields out of range and its values JSON
        cannot render (in the order found) followed by the limits it exceeds, in one pass."""
        state = _Pass(
            walk=self._limits.walk(message) if self._limits is not None else None,
            numbers=self._renderable and json_safe.may_hold_non_finite(message),
        )
        with suppress(_Enough):
            self._inspect(message, path, state, check_required=self._required)
        required = list(dict.fromkeys(state.required))  # a oneof's violation comes once
        others = state.found + (state.walk.violations if state.walk is not None else [])
        return required[:MAX_VIOLATIONS], others[:MAX_VIOLATIONS]

    def _inspect(  # noqa: PLR0912 - one pass does five jobs; helpers would cost a call per message
        self, message: Message, path: str, state: _Pass, *, check_required: bool
    ) -> None:
        walk = state.walk
        if (state.required or state.found or (walk is not None and walk.violations)) and (
            state.full()
        ):
            raise _Enough
        # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
        descriptor_: descriptor.Descriptor = message.DESCRIPTOR  # type: ignore[assignment]
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
