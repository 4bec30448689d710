"""Input validation of evaluations and results: field behaviours, the ranges the seeds state,
the request limits (:mod:`ces_eval.contract.limits`) and the size of what a write stores.

Every problem in one request is reported together, as the field violations of a single
``google.rpc.BadRequest`` (AIP-193), so a caller can fix them all at once: up to
:data:`limits.MAX_VIOLATIONS` of them, where every check stops. A request over a count limit
(a repeated field, map or Struct with too many entries, reason ``TOO_MANY``) is the exception: it
is refused with those alone, as the surfaces refuse a large one before decoding it
(:mod:`ces_eval.contract.limits`, "counts, before anything else").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.contract import checks, limits
from ces_eval.contract.limits import MAX_GOLDEN_TURNS, MAX_SCENARIO_TURNS
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "MAX_GOLDEN_TURNS",
    "MAX_SCENARIO_TURNS",
    "counts_first",
    "evaluation_violations",
    "raise_if_invalid",
    "resource_violations",
    "seeded_violations",
    "with_size",
]

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


# What a caller writes: OUTPUT_ONLY cleared, REQUIRED, the ranges, the limits and JSON-safety.
_INPUT = checks.Checks(_RANGES, limits.LIMITS)
# What the emulator seeds (results): every field kept, held to REQUIRED, limits, JSON-safety.
_SEEDED = checks.Checks(limits=limits.LIMITS, keep_output_only=True)


def evaluation_violations(evaluation: evaluation_pb2.Evaluation, path: str) -> list[FieldViolation]:
    """Violations of an Evaluation as written by a caller: REQUIRED fields, the ranges, the
    limits (the count limits alone when exceeded: :func:`counts_first`) and the values proto3
    JSON could not render; clears its OUTPUT_ONLY fields in the same pass (AIP-203: ignored,
    not rejected)."""
    violations = resource_violations(evaluation, path)
    if any(v.reason == "TOO_MANY" for v in violations):
        return violations
    if evaluation.WhichOneof("inputs") is None:
        violations.append(
            FieldViolation(f"{path}.inputs", "Set either golden or scenario.", "REQUIRED")
        )
    return violations


def resource_violations(message: Message, path: str) -> list[FieldViolation]:
    """Violations of any resource as written by a caller (the rules of :func:`evaluation_violations`
    without the evaluation's own): REQUIRED fields, the ranges, the limits (the count limits
    alone when exceeded) and JSON-safety; clears its OUTPUT_ONLY fields in the same pass."""
    violations, others = _INPUT.inspect(message, path)
    if any(v.reason == "TOO_MANY" for v in others):
        return counts_first(others)
    return violations + others


def seeded_violations(message: Message, path: str) -> list[FieldViolation]:
    """Violations of a resource the emulator seeds whole (output-only fields included): the
    count limits alone when exceeded, else REQUIRED fields, the values JSON could not render and
    the other limits, in one pass."""
    required, others = _SEEDED.inspect(message, path)
    if any(v.reason == "TOO_MANY" for v in others):
        return counts_first(others)
    return required + others


def counts_first(violations: list[FieldViolation]) -> list[FieldViolation]:
    """``violations``, or only those of the count limits when there are any (see above)."""
    counts = [v for v in violations if v.reason == "TOO_MANY"]
    return counts[: limits.MAX_COUNT_VIOLATIONS] if counts else violations


def with_size(
    violations: list[FieldViolation], message: Message, path: str
) -> list[FieldViolation]:
    """``violations`` of ``message`` (the resource a write stores, exactly as it will be served:
    named, stamped, with its derived fields) and its size limit
    (:func:`limits.size_violations`). The size is measured only on a resource within every
    other limit: a string too long or a container with too many entries is what makes it
    large, and is reported by itself."""
    if any(v.reason in _LIMIT_REASONS for v in violations):
        return violations
    return violations + limits.size_violations(message, path)


_LIMIT_REASONS = frozenset({"TOO_MANY", "TOO_LONG", "TOO_DEEP"})
_PROBLEMS_IN_MESSAGE = 5


def raise_if_invalid(violations: list[FieldViolation], what: str) -> None:
    """INVALID_ARGUMENT listing ``violations``: the first :data:`limits.MAX_VIOLATIONS` in the
    BadRequest and the first few in the message, which counts them ("at least" once the checks
    stopped counting), so that a request with thousands of problems does not get an error of
    thousands of lines."""
    if violations:
        count = len(violations)
        listed = "; ".join(f"{v.field}: {v.description}" for v in violations[:_PROBLEMS_IN_MESSAGE])
        more = count - _PROBLEMS_IN_MESSAGE
        counted = f"at least {count}" if count >= limits.MAX_VIOLATIONS else str(count)
        raise ServiceError.invalid_argument(
            f"The {what} is invalid ({counted} problem{'s' if count > 1 else ''}): {listed}"
            + (f"; and {more} more" if more > 0 else ""),
            violations[: limits.MAX_VIOLATIONS],
        )
