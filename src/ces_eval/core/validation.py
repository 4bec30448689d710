"""Input validation of evaluations and results: field behaviours plus the limits the seeds state.

Every problem in one request is reported together, as the field violations of a single
``google.rpc.BadRequest`` (AIP-193), so a caller can fix them all at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from ces_eval.core import fields
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.message import Message

__all__ = ["MAX_GOLDEN_TURNS", "MAX_SCENARIO_TURNS", "raise_if_invalid", "validate_evaluation"]

MAX_GOLDEN_TURNS = 100  # "at most 100 turns" (Evaluation.Golden.turns, seeds 001/003)
MAX_SCENARIO_TURNS = 100  # Evaluation.Scenario.max_turns: "at most 100" (seeds 001/003)
MAX_DISPLAY_NAME = 512

_Thresholds = evaluation_config_pb2.EvaluationMetricsThresholds.GoldenEvaluationMetricsThresholds
# (message, field) → inclusive range, from the seeds' descriptions of the thresholds.
_RANGES: dict[tuple[str, str], tuple[float, float]] = {
    (
        _Thresholds.TurnLevelMetricsThresholds.DESCRIPTOR.full_name,
        "semantic_similarity_success_threshold",
    ): (0, 4),
    (
        _Thresholds.TurnLevelMetricsThresholds.DESCRIPTOR.full_name,
        "overall_tool_invocation_correctness_threshold",
    ): (0, 1),
    (
        _Thresholds.ExpectationLevelMetricsThresholds.DESCRIPTOR.full_name,
        "tool_invocation_parameter_correctness_threshold",
    ): (0, 1),
    (evaluation_pb2.Evaluation.Scenario.DESCRIPTOR.full_name, "max_turns"): (0, MAX_SCENARIO_TURNS),
}


_RANGED_TYPES = frozenset(message for message, _ in _RANGES)


def _reaches_ranged(
    message_descriptor: Descriptor, seen: frozenset[Descriptor] = frozenset()
) -> bool:
    """Whether a message of this type can contain (or be) one with a bounded field."""
    if message_descriptor.full_name in _RANGED_TYPES:
        return True
    if message_descriptor in seen or message_descriptor.full_name.startswith("google.protobuf."):
        return False
    seen = seen | {message_descriptor}
    return any(
        field.message_type is not None
        and not field.message_type.GetOptions().map_entry
        and _reaches_ranged(field.message_type, seen)
        for field in message_descriptor.fields
    )


_reaches = cache(_reaches_ranged)


def _walk(message: Message, path: str) -> Iterator[tuple[Message, str]]:
    """``message`` and its sub-messages that can hold a bounded field, with their paths."""
    yield message, path
    for field, value in message.ListFields():
        if (
            field.message_type is None
            or field.message_type.GetOptions().map_entry
            or not _reaches(field.message_type)
        ):
            continue
        if field.is_repeated:
            for index, item in enumerate(value):
                yield from _walk(item, f"{path}.{field.name}[{index}]")
        else:
            yield from _walk(value, f"{path}.{field.name}")


def _range_violations(message: Message, path: str) -> list[FieldViolation]:
    found: list[FieldViolation] = []
    for node, node_path in _walk(message, path):
        for field, value in node.ListFields():
            bounds = _RANGES.get((node.DESCRIPTOR.full_name, field.name))
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                found.append(
                    FieldViolation(
                        f"{node_path}.{field.name}",
                        f"Must be between {bounds[0]:g} and {bounds[1]:g}; got {value:g}.",
                        "OUT_OF_RANGE",
                    )
                )
    return found


def validate_evaluation(evaluation: evaluation_pb2.Evaluation, path: str) -> list[FieldViolation]:
    """Violations of an Evaluation as written by a caller (output-only fields already cleared)."""
    violations = fields.required_violations(evaluation, path)
    if evaluation.WhichOneof("inputs") is None:
        violations.append(
            FieldViolation(f"{path}.inputs", "Set either golden or scenario.", "REQUIRED")
        )
    if len(evaluation.golden.turns) > MAX_GOLDEN_TURNS:
        violations.append(
            FieldViolation(
                f"{path}.golden.turns",
                f"At most {MAX_GOLDEN_TURNS} turns; got {len(evaluation.golden.turns)}.",
                "TOO_MANY",
            )
        )
    if len(evaluation.display_name) > MAX_DISPLAY_NAME:
        violations.append(
            FieldViolation(
                f"{path}.display_name", f"At most {MAX_DISPLAY_NAME} characters.", "TOO_LONG"
            )
        )
    return violations + _range_violations(evaluation, path)


def raise_if_invalid(violations: list[FieldViolation], what: str) -> None:
    if violations:
        count = len(violations)
        raise ServiceError.invalid_argument(
            f"The {what} is invalid ({count} problem{'s' if count > 1 else ''}): "
            + "; ".join(f"{v.field}: {v.description}" for v in violations),
            violations,
        )
