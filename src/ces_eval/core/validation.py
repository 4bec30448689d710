"""Input validation of evaluations and results: field behaviours, the ranges the seeds state
and the request limits (:mod:`ces_eval.core.limits`).

Every problem in one request is reported together, as the field violations of a single
``google.rpc.BadRequest`` (AIP-193), so a caller can fix them all at once.
"""

from __future__ import annotations

from ces_eval.core import fields, limits
from ces_eval.core.limits import MAX_GOLDEN_TURNS, MAX_SCENARIO_TURNS
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

__all__ = ["MAX_GOLDEN_TURNS", "MAX_SCENARIO_TURNS", "raise_if_invalid", "validate_evaluation"]

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


_INPUT = fields.InputRules(_RANGES, limits.LIMITS)


def validate_evaluation(evaluation: evaluation_pb2.Evaluation, path: str) -> list[FieldViolation]:
    """Violations of an Evaluation as written by a caller, limits included; clears its
    OUTPUT_ONLY fields in the same pass (AIP-203: ignored, not rejected)."""
    violations, out_of_range = _INPUT.inspect(evaluation, path)
    if evaluation.WhichOneof("inputs") is None:
        violations.append(
            FieldViolation(f"{path}.inputs", "Set either golden or scenario.", "REQUIRED")
        )
    return violations + out_of_range


_PROBLEMS_IN_MESSAGE = 5


def raise_if_invalid(violations: list[FieldViolation], what: str) -> None:
    """INVALID_ARGUMENT listing ``violations``: the first :data:`limits.MAX_VIOLATIONS` in the
    BadRequest and the first few in the message, which counts them all, so that a request with
    thousands of problems does not get an error of thousands of lines."""
    if violations:
        count = len(violations)
        listed = "; ".join(f"{v.field}: {v.description}" for v in violations[:_PROBLEMS_IN_MESSAGE])
        more = count - _PROBLEMS_IN_MESSAGE
        raise ServiceError.invalid_argument(
            f"The {what} is invalid ({count} problem{'s' if count > 1 else ''}): {listed}"
            + (f"; and {more} more" if more > 0 else ""),
            violations[: limits.MAX_VIOLATIONS],
        )
