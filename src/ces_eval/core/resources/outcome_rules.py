"""Outcome rules: the emulator's scripted outcomes of the run engine (docs/semantics.md,
"Scripted outcomes"), declared as a resource of an app and served by the generic standard
methods (Create, Get, List, Delete) plus ReleaseOutcomeRule, which ends a rule's hold.

A rule matches an evaluation when every selector it sets matches (``evaluation`` by resource
name or ID, ``evaluation_display_name``, ``tag``, and ``repetition`` for one repetition of a
run); one that sets none matches every evaluation of its app. The newest matching rule that
sets an outcome decides what the engine observes (:func:`deciding`), the longest delay of the
matching rules applies (:func:`delay`), and every matching rule with an unreleased hold holds
(:func:`holding`). Rules live in a generic table (:data:`ces_eval.storage.tables.OUTCOME_RULES`),
so a project reset clears them with everything else.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.retry import Changed, rewrite
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import EtagMismatch, ListQuery, Missing, OrderBy, SortKey

if TYPE_CHECKING:
    from collections.abc import Sequence

    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

__all__ = ["RPCS", "RULES", "Rule", "deciding", "delay", "holding", "matches", "of_app"]

Rule = emulator_pb2.OutcomeRule
_MAX_DELAY_SECONDS = 600  # a scripted delay longer than this is a mistake, not a test
# The scored fields and the range each must lie in (inclusive).
_RANGES: dict[str, tuple[float, float]] = {
    "semantic_similarity_score": (0, 4),
    "tool_invocation_score": (0.0, 1.0),
    "hallucination_score": (-1, 1),
    "repetition": (0, 2**31 - 1),
    "turn": (0, 2**31 - 1),
    "expectation": (0, 2**31 - 1),
}


def _rules(rule: Rule, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """The descriptors' rules, the ranges of the scores and positions, a delay of at most ten
    minutes, and the fields that mean something only for one outcome."""
    # The error an ERROR outcome gives is the rule's input, though CES marks the fields of
    # EvaluationErrorInfo output-only (in a result): kept as the emulator's seeds keep them.
    error = emulator_pb2.OutcomeRule().error_info
    error.CopyFrom(rule.error_info)
    violations = validation.resource_violations(rule, path)
    if rule.HasField("error_info"):
        rule.error_info.CopyFrom(error)
        violations += validation.seeded_violations(rule.error_info, f"{path}.error_info")
    given: Message = rule  # the fields below are named at run time
    for field, (low, high) in _RANGES.items():
        if given.HasField(field) and not low <= getattr(rule, field) <= high:
            violations.append(
                FieldViolation(f"{path}.{field}", f"Must be between {low} and {high}.")
            )
    for field in ("delay", "turn_latency"):
        if given.HasField(field):
            seconds = getattr(rule, field).ToNanoseconds() / 1e9
            if not 0 <= seconds <= _MAX_DELAY_SECONDS:
                violations.append(
                    FieldViolation(
                        f"{path}.{field}", f"Must be between 0 and {_MAX_DELAY_SECONDS} seconds."
                    )
                )
    if rule.HasField("error_info") and rule.outcome != Rule.ERROR:
        violations.append(FieldViolation(f"{path}.error_info", "Set only for an ERROR outcome."))
    fail_only = ("observed", "turn", "expectation")
    for field in fail_only:
        if given.HasField(field) and rule.outcome != Rule.FAIL:
            violations.append(FieldViolation(f"{path}.{field}", "Set only for a FAIL outcome."))
    return violations


RULES = standard.Resource(
    message=Rule,
    parent=names.APP,
    store=standard.Store.of(tables.OUTCOME_RULES, updatable=False),  # only released
    rules=_rules,
)


def matches(rule: Rule, evaluation: evaluation_pb2.Evaluation, repetition: int) -> bool:
    """Whether ``rule`` applies to ``repetition`` of ``evaluation`` (see the module)."""
    if rule.evaluation and rule.evaluation not in (
        evaluation.name,
        evaluation.name.rsplit("/", 1)[-1],
    ):
        return False
    if rule.evaluation_display_name and rule.evaluation_display_name != evaluation.display_name:
        return False
    if rule.tag and rule.tag not in evaluation.tags:
        return False
    return not rule.HasField("repetition") or rule.repetition == repetition


def deciding(
    rules: Sequence[Rule], evaluation: evaluation_pb2.Evaluation, repetition: int
) -> Rule | None:
    """The rule that decides what ``repetition`` of ``evaluation`` observes: the newest
    matching one that sets an outcome (``rules`` oldest first), or None for the default."""
    for rule in reversed(rules):
        if rule.outcome != Rule.OUTCOME_UNSPECIFIED and matches(rule, evaluation, repetition):
            return rule
    return None


def delay(rules: Sequence[Rule], evaluation: evaluation_pb2.Evaluation, repetition: int) -> float:
    """How long (seconds) the engine waits before producing this repetition's result: the
    longest delay of the matching rules, 0 when none sets one."""
    return max(
        (
            rule.delay.ToNanoseconds() / 1e9
            for rule in rules
            if rule.HasField("delay") and matches(rule, evaluation, repetition)
        ),
        default=0.0,
    )


def holding(
    rules: Sequence[Rule], evaluations: Sequence[evaluation_pb2.Evaluation], hold: int
) -> Rule | None:
    """The first unreleased rule with this ``hold`` matching any repetition of any of
    ``evaluations`` (a repetition selector is ignored: a hold applies to the whole run)."""
    for rule in rules:
        if rule.hold != hold or rule.released:
            continue
        for evaluation in evaluations:
            probe = Rule()
            probe.CopyFrom(rule)
            probe.ClearField("repetition")
            if matches(probe, evaluation, 0):
                return rule
    return None


async def of_app(context: Context, app: str) -> list[Rule]:
    """Every rule of ``app``, oldest first."""
    found: list[Rule] = []
    after = None
    while True:
        page = await context.storage.list_rows(
            tables.OUTCOME_RULES,
            ListQuery(
                parent=app,
                order=OrderBy(SortKey.CREATE_TIME, descending=False),
                limit=500,
                after=after,
            ),
        )
        found += [Rule.FromString(data) for data, _ in page]
        if len(page) < 500:
            return found
        after = page[-1][1]


async def release_outcome_rule(
    context: Context, request: emulator_pb2.ReleaseOutcomeRuleRequest, caller: Caller
) -> Rule:
    """End the rule's hold (idempotent: a released rule is answered as it is)."""

    async def round_() -> Rule:
        rule = await standard.get(context, RULES, request.name)
        if rule.released:
            return rule
        expected = rule.etag
        rule.released = True
        rule.update_time.CopyFrom(now())
        rule.etag = new_etag()
        try:
            await context.storage.replace_row(tables.OUTCOME_RULES, rule, expected)
        except EtagMismatch as mismatch:
            raise Changed from mismatch  # changed meanwhile: read it again
        except Missing as missing:
            raise ServiceError.not_found(RULES.pattern.type, request.name) from missing
        return rule

    return await rewrite(
        round_, partial(ServiceError.aborted_etag, RULES.pattern.type, request.name)
    )


RPCS: dict[str, Rpc] = {
    **standard.methods(RULES, "Create", "Get", "List", "Delete"),
    "ReleaseOutcomeRule": release_outcome_rule,
}
