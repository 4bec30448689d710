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

from google.api import resource_pb2
from google.protobuf import descriptor

from ces_eval.contract import checks, limits
from ces_eval.contract.limits import MAX_GOLDEN_TURNS, MAX_SCENARIO_TURNS
from ces_eval.core.aip import names
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
    "reference_violations",
    "resource_violations",
    "seeded_violations",
    "under",
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


def under(path: str, field: str) -> str:
    """The path of ``field`` within the message at ``path`` ("" for the request itself)."""
    return f"{path}.{field}" if path else field


def reference_violations(message: Message, path: str, app: str) -> list[FieldViolation]:
    """Violations of the resource names ``message`` holds (its string fields annotated with a
    ``google.api.resource_reference`` type this service knows, in every sub-message it sets):
    each must name a resource of that type within ``app``, the app itself for an App field.
    Whether the resource exists is for the caller to check."""
    found: list[FieldViolation] = []
    for field, value in message.ListFields():
        at = under(path, field.name)
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                continue
            items = enumerate(value) if field.is_repeated else [(-1, value)]
            for index, item in items:
                inner = f"{at}[{index}]" if index >= 0 else at
                found += reference_violations(item, inner, app)
            continue
        pattern = _referenced(field)
        if pattern is None:
            continue
        values = enumerate(value) if field.is_repeated else [(-1, value)]
        for index, name in values:
            problem = _outside(pattern, str(name), app)
            if problem:
                found.append(FieldViolation(f"{at}[{index}]" if index >= 0 else at, problem))
    return found


def _referenced(field: descriptor.FieldDescriptor) -> names.ResourcePattern | None:
    if field.type != descriptor.FieldDescriptor.TYPE_STRING:
        return None
    options = field.GetOptions()
    if not options.HasExtension(resource_pb2.resource_reference):
        return None
    return names.by_type(options.Extensions[resource_pb2.resource_reference].type)


def _outside(pattern: names.ResourcePattern, name: str, app: str) -> str:
    """Why ``name`` is no name of ``pattern`` within ``app`` ("" when it is one)."""
    if pattern == names.APP:
        return "" if name == app else f"Must be {app}, the app of this resource."
    shape = pattern.pattern.split("/", len(names.APP.variables) * 2)[-1]
    within = name.startswith(f"{app}/")
    # IDs below the app are held to the form only: whether one exists is the caller's check.
    if not within or pattern.violation(name, "", owned=0) is not None:
        return f"Must have the form {app}/{shape}, within this resource's app."
    return ""


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
