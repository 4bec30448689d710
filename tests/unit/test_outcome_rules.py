"""Outcome rules (docs/semantics.md, "Scripted outcomes"): their field rules, which evaluations
and repetitions a rule matches, which rule decides, which holds, and ReleaseOutcomeRule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from google.protobuf import duration_pb2

from ces_eval.core.resources import outcome_rules
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from tests.unit.test_core import APP, Harness

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

Rule = emulator_pb2.OutcomeRule


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def _create(core: Harness, rule_id: str = "", **fields: Any) -> Rule:
    return core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(
            parent=APP, outcome_rule_id=rule_id, outcome_rule=Rule(**fields)
        ),
    )


def _refused(core: Harness, **fields: Any) -> list[str]:
    error = core.error(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(parent=APP, outcome_rule=Rule(**fields)),
    )
    assert error.code is Code.INVALID_ARGUMENT
    return [violation.field for violation in error.violations]


def test_a_rule_is_stored_with_its_name_times_and_etag(core: Harness) -> None:
    rule = _create(core, "r1", outcome=Rule.FAIL, tag="smoke", turn=2)
    assert rule.name == f"{APP}/outcomeRules/r1"
    assert rule.create_time == rule.update_time
    assert rule.etag
    assert not rule.released
    got = core.call("get_outcome_rule", emulator_pb2.GetOutcomeRuleRequest(name=rule.name))
    assert got == rule


@pytest.mark.parametrize(
    ("fields", "violated"),
    [
        ({"outcome": Rule.PASS, "semantic_similarity_score": 5}, "semantic_similarity_score"),
        ({"outcome": Rule.FAIL, "tool_invocation_score": 1.5}, "tool_invocation_score"),
        ({"outcome": Rule.FAIL, "hallucination_score": -2}, "hallucination_score"),
        ({"delay": duration_pb2.Duration(seconds=601)}, "delay"),
        ({"turn_latency": duration_pb2.Duration(seconds=-1)}, "turn_latency"),
        ({"outcome": Rule.FAIL, "error_info": {"error_message": "x"}}, "error_info"),
        ({"outcome": Rule.PASS, "turn": 1}, "turn"),
        ({"outcome": Rule.ERROR, "expectation": 0}, "expectation"),
        ({"outcome": Rule.PASS, "observed": {"text": "other"}}, "observed"),
    ],
)
def test_field_rules(core: Harness, fields: dict[str, Any], violated: str) -> None:
    assert _refused(core, **fields) == [f"outcome_rule.{violated}"]


def test_the_newest_matching_rule_decides(core: Harness) -> None:
    evaluation = evaluation_pb2.Evaluation(
        name=f"{APP}/evaluations/e1", display_name="Checkout", tags=["smoke"]
    )
    other = evaluation_pb2.Evaluation(name=f"{APP}/evaluations/e2", display_name="Other")
    everything = _create(core, "any", outcome=Rule.PASS)
    by_tag = _create(core, "tag", outcome=Rule.FAIL, tag="smoke")
    by_id = _create(core, "id", outcome=Rule.ERROR, evaluation="e1", repetition=2)
    by_name = _create(core, "name", outcome=Rule.FAIL, evaluation_display_name="Other")
    rules = core.run(outcome_rules.of_app(core.core.context, APP))
    assert [r.name for r in rules] == [everything.name, by_tag.name, by_id.name, by_name.name]
    assert outcome_rules.deciding(rules, evaluation, 1) == by_tag
    assert outcome_rules.deciding(rules, evaluation, 2) == by_id
    assert outcome_rules.deciding(rules, other, 2) == by_name
    assert outcome_rules.deciding(rules[:1], other, 0) == everything
    assert outcome_rules.deciding([], other, 0) is None
    by_full_name = _create(core, outcome=Rule.FAIL, evaluation=evaluation.name)
    assert outcome_rules.matches(by_full_name, evaluation, 0)
    assert not outcome_rules.matches(by_full_name, other, 0)


def test_a_hold_applies_to_every_repetition_until_released(core: Harness) -> None:
    evaluation = evaluation_pb2.Evaluation(name=f"{APP}/evaluations/e1", tags=["slow"])
    queued = _create(core, "q", hold=Rule.QUEUED, tag="slow", repetition=3)
    _create(core, "unrelated", hold=Rule.RUNNING, tag="fast")
    rules = core.run(outcome_rules.of_app(core.core.context, APP))
    assert outcome_rules.holding(rules, [evaluation], Rule.QUEUED) == queued
    assert outcome_rules.holding(rules, [evaluation], Rule.RUNNING) is None
    released = core.call(
        "release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=queued.name)
    )
    assert released.released
    assert released.etag != queued.etag
    again = core.call(
        "release_outcome_rule", emulator_pb2.ReleaseOutcomeRuleRequest(name=queued.name)
    )
    assert again == released  # idempotent
    rules = core.run(outcome_rules.of_app(core.core.context, APP))
    assert outcome_rules.holding(rules, [evaluation], Rule.QUEUED) is None


def test_release_of_a_missing_rule_is_not_found(core: Harness) -> None:
    error = core.error(
        "release_outcome_rule",
        emulator_pb2.ReleaseOutcomeRuleRequest(name=f"{APP}/outcomeRules/none"),
    )
    assert error.code is Code.NOT_FOUND


def test_rules_list_and_delete(core: Harness) -> None:
    first = _create(core, "a", outcome=Rule.FAIL, tag="x")
    _create(core, "b", outcome=Rule.PASS)
    listed = core.call(
        "list_outcome_rules", emulator_pb2.ListOutcomeRulesRequest(parent=APP, filter='tag="x"')
    )
    assert [r.name for r in listed.outcome_rules] == [first.name]
    core.call("delete_outcome_rule", emulator_pb2.DeleteOutcomeRuleRequest(name=first.name))
    listed = core.call("list_outcome_rules", emulator_pb2.ListOutcomeRulesRequest(parent=APP))
    assert [r.name for r in listed.outcome_rules] == [f"{APP}/outcomeRules/b"]
