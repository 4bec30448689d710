"""Recomputing a stored EvaluationResult's outcomes (EvaluationService.RunEvaluationResultMetrics).

``runEvaluationResultMetrics`` "fuehrt Messwerte fuer ein vorhandenes Bewertungsergebnis aus"
(runs metrics for an existing evaluation result; seed 004). ces-eval has no LLM, so it never
re-scores anything: ``rerun`` takes the SCORES RECORDED in the result as they are and recomputes
every outcome that is derived from a score and a threshold, plus ``evaluation_status``, under the
thresholds in force now. Scores, labels, explanations, observations, latencies, errors and the
recorded ``evaluation_metrics_thresholds`` are copied unchanged. Seed files below are
``tests/seeds/<file>``; quotes are from the German (000, 004) and Spanish (003) pages, with
umlauts transliterated (ue for u-umlaut, ...) and typographic quotes dropped to keep the source
ASCII.

Thresholds in force (most specific wins, field by field)
    Every threshold is resolved on its own: the most specific level that SETS it wins (proto3
    ``optional`` presence for the numeric thresholds, a value other than ``*_UNSPECIFIED`` for
    the enums); a level that leaves a threshold unset falls through to the next one:

    1. ``GoldenExpectation.expectation_level_metrics_thresholds_override`` (expectation-level
       threshold only) of the expectation whose settings apply (see "Matching" below);
    2. ``GoldenTurn.turn_level_metrics_thresholds_override`` and
       ``GoldenTurn.hallucination_metric_behavior_override`` of ``evaluation.golden.turns[i]``,
       where ``i`` is the position of the TurnReplayResult in ``turn_replay_results``;
    3. ``Evaluation.evaluation_metrics_threshold_override``;
    4. ``EvaluationResult.evaluation_metrics_thresholds`` (what the run recorded);
    5. the documented defaults:

       * semantic similarity success threshold 3 on the 0..4 scale: "Muss eine Ganzzahl zwischen
         0 und 4 sein. Der Standardwert ist >= 3." (000, ``semanticSimilaritySuccessThreshold``;
         003: "El valor predeterminado es >= 3.");
       * tool invocation parameter correctness threshold 1.0: "Muss eine Gleitkommazahl zwischen
         0 und 1 sein. Der Standardwert ist 1,0." (000/003,
         ``toolInvocationParameterCorrectnessThreshold``);
       * overall tool invocation correctness threshold 1.0: same wording (000/003,
         ``overallToolInvocationCorrectnessThreshold``);
       * extra tool call behaviour FAIL: "Die Standardeinstellung ist FAIL." (000,
         ``extraToolCallBehavior``; 003: "El valor predeterminado es FAIL.");
       * hallucination behaviour DISABLED. The pages give no default (000 lists only
         ``HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED``, ``DISABLED``, ``ENABLED``); an
         unspecified behaviour is treated as DISABLED, i.e. hallucination never decides the
         outcome unless someone enabled it.

    For golden results the hallucination behaviour is looked up, at each of levels 2-4, first in
    ``golden_hallucination_metric_behavior`` and then in the deprecated
    ``hallucination_metric_behavior`` ("Nicht mehr unterstuetzt: Verwenden Sie stattdessen
    golden_hallucination_metric_behavior ... wird derzeit fuer Golden-Evaluierungen verwendet",
    000). Scenario results use ``scenario_hallucination_metric_behavior`` only (levels 3-4).
    ``ToolMatchingSettings`` exists only at levels 3-4. A level that does not exist (no
    ``golden`` input in the evaluation, fewer golden turns than replayed turns, no override
    message) is simply skipped.

Matching recorded expectations to the evaluation's expectations
    A GoldenExpectationOutcome embeds a copy of the expectation as it was when the run happened.
    The skip flag and the expectation-level threshold override are read from the CURRENT
    evaluation, so that editing them and rerunning has an effect: the expectations of golden
    turn ``i`` are its ``steps[*].expectation`` in order, and each recorded outcome (in order)
    takes the first not-yet-taken current expectation whose check is identical, i.e. whose
    ``condition`` oneof holds an equal value (``note``, ``skip_evaluation``, the overrides and
    ``comparison_type`` are settings, not identity, and are ignored for matching). When no
    current expectation matches (the evaluation was edited since, or is not a golden
    evaluation), the recorded expectation's own ``skip_evaluation`` and override apply.
    ``comparison_type`` is always read from the recorded expectation: it describes how the
    recorded outcome was obtained.

Golden results, per TurnReplayResult
    A comparison "score >= threshold" gives PASS, otherwise FAIL ("Wenn die Punktzahl dem
    Schwellenwert entspricht oder darueber liegt, ist das Ergebnis BESTANDEN. Andernfalls ist das
    Ergebnis FAIL.", 004, for the semantic similarity, the tool invocation and the overall tool
    invocation outcomes). An outcome whose score is not set keeps its recorded value. Float
    scores and thresholds are compared exactly as stored (32-bit floats, no epsilon).

    * ``semantic_similarity_result.outcome``: score vs the semantic similarity threshold.
    * ``overall_tool_invocation_result.outcome``: ``tool_invocation_score`` vs the overall tool
      invocation threshold. The deprecated ``TurnReplayResult.tool_invocation_score`` (a plain
      float whose 0 cannot be told from "unset") and ``tool_ordered_invocation_score`` (no
      threshold exists for it) are ignored.
    * Each GoldenExpectationOutcome:

      - ``observed_payload`` outcomes are SKIPPED: "Das Ergebnis ist immer SKIPPED." (000/004).
      - An outcome whose expectation has no ``condition`` but that carries an
        ``observed_tool_call`` records an EXTRA TOOL CALL: "ein Toolaufruf, der in der
        Ausfuehrung vorhanden ist, aber mit keinem Toolaufruf in der Golden Expectation
        uebereinstimmt" (000, ``ExtraToolCallBehavior``). This is the only way the stored data
        can show one: ``tool_call_latencies`` and ``span_latencies`` name executed tools, but not
        in a form that can be matched reliably against expected calls (toolset tools, repeated
        calls, mocked calls), so they are not used. Under FAIL ("Die Bewertung schlaegt fehl,
        wenn ein zusaetzlicher Toolaufruf erkannt wird.", 000) such an outcome becomes FAIL and
        therefore fails the turn; under ALLOW it becomes SKIPPED and is ignored. Extra tool calls
        that the run did not record as such an outcome cannot be detected.
      - ``tool_invocation_result.outcome`` (when ``parameter_correctness_score`` is set):
        score vs the tool invocation parameter correctness threshold. The deprecated
        per-expectation ``semantic_similarity_result.outcome`` (when its score is set): score vs
        the turn's semantic similarity threshold. Both are metrics and are recomputed even for
        skipped expectations ("Unabhaengig vom Verhalten wird der Messwert immer berechnet", 000,
        said of hallucination; applied to every metric here).
      - If the expectation in force has ``skip_evaluation`` ("Wenn true festgelegt ist, wird
        diese Erwartung nicht ausgewertet.", 000): ``outcome`` = SKIPPED.
      - ``tool_call`` expectations: ``outcome`` = the tool invocation outcome, when the score
        is set.
      - ``agent_response`` expectations compared by semantic similarity (``comparison_type``
        unspecified or SEMANTIC_SIMILARITY; "Das Standardverhalten ist SEMANTIC_SIMILARITY fuer
        Agent-Antworten und Toolaufrufe", 000, ``ComparisonType``): ``outcome`` = the turn's
        semantic similarity outcome when the turn's score is set, else the expectation's
        deprecated semantic similarity outcome when that score is set. EQUALS / CONTAINS
        comparisons are not score-based and keep their recorded outcome.
      - Every other kind (tool_response, agent_transfer, updated_variables,
        mock_tool_response, no_tool_calls), and any case above without a score, keeps its
        recorded outcome.

    * Hallucination: "Unabhaengig vom Verhalten wird der Messwert immer berechnet. Der
      Unterschied besteht darin, dass der Messwert bei Deaktivierung nicht zur Berechnung des
      Gesamtbewertungsergebnisses verwendet wird." (000, ``HallucinationMetricBehavior``). When
      the behaviour in force is ENABLED, the turn's hallucination score is a check. The score
      is read as documented: "Score 1: Justified Score 0: Not Justified Score -1: No Claim To
      Assess" (000/004, ``HallucinationResult.label``): 0 (a claim the agent could not justify,
      i.e. a hallucination) FAILS the check, 1 passes it, -1 or an unset score is no check.
      HallucinationResult has no outcome field, so nothing in the message changes; only
      ``evaluation_status`` is affected.

Scenario results
    ScenarioExpectation has no ``skip_evaluation`` and no thresholds, so every
    ``expectation_outcomes[*].outcome`` keeps its recorded value (a recorded SKIPPED stays
    SKIPPED and is not counted). ``all_expectations_satisfied`` ("Ob alle Erwartungen fuer diese
    Runde erfuellt wurden", 000) becomes true iff every PASS/FAIL expectation outcome is PASS;
    when no outcome is PASS or FAIL it keeps its recorded value (set or unset). Hallucination is
    judged per entry of ``hallucination_result`` as above, under
    ``scenario_hallucination_metric_behavior``. ``task_completion_result``,
    ``user_goal_satisfaction_result``, ``task_completed``, rubric and milestone results are
    copied unchanged (``task_completed`` folds in judgements that cannot be recomputed here).

Metrics switched off (EvaluationMetricsConfig, :mod:`ces_eval.core.engine.metrics_config`)
    The config in force is the expectation's own override, the evaluation's
    ``evaluation_metrics_config_override`` and the app's ``evaluation_settings.metrics_config``
    as they are NOW (no field of a result records it), metric by metric. A metric switched off
    is not computed: its result is cleared (score, label, explanation, outcome), so it is
    neither shown nor counted, and a check whose only metric is off is SKIPPED:

    * semantic similarity: the turn's ``semantic_similarity_result`` when every agent response
      expectation of the turn has it off (a turn without one: as the evaluation and the app
      say), each expectation's deprecated one, and an agent response expectation compared by
      it (``comparison_type`` unspecified or SEMANTIC_SIMILARITY) with it off is SKIPPED;
    * turn level tool correctness: the turn's ``overall_tool_invocation_result`` (and the
      deprecated ``tool_invocation_score``);
    * step level tool correctness: each ``tool_invocation_result``; tool call expectations are
      SKIPPED, and the turn's check is then held out only when every tool call expectation has
      ``skip_evaluation``;
    * hallucination: the turn's ``hallucination_result`` when every agent response expectation
      of the turn (at least one) switches it off. It counts only when it is computed AND the
      behaviour in force is ENABLED;
    * user goal met: the scenario's ``user_goal_satisfaction_result``;
    * expectations met: every scenario expectation outcome is SKIPPED and
      ``all_expectations_satisfied`` unset.

    A metric switched on again later comes back only with a new run: there is no score left to
    judge.

``evaluation_status``
    Recomputed only when ``execution_state`` is COMPLETED ("Wird nur ausgefuellt, wenn
    execution_state den Wert COMPLETE hat.", 000/004); otherwise it keeps its recorded value,
    although the outcome fields above are still recomputed from their scores. PASS means "alle
    Erwartungen erfuellt", FAIL "mindestens eine Erwartung nicht erfuellt" (004,
    ``EvaluationResult.Outcome``). The checks that count:

    * golden: every GoldenExpectationOutcome whose recomputed outcome is PASS or FAIL (SKIPPED
      and unspecified ones are not evaluated); each turn's semantic similarity and overall tool
      invocation outcome whose score is set, except that the semantic similarity check does not
      count in a turn whose agent_response expectations are all SKIPPED (at least one), nor the
      overall tool invocation check in a turn whose tool_call expectations are all SKIPPED (so
      skipping an expectation also removes the turn-level check that only exists for it); the
      hallucination check of every turn with ENABLED behaviour;
    * scenario: every PASS/FAIL expectation outcome; the hallucination checks under ENABLED
      behaviour; the user goal satisfaction score (0 "Nutzeraufgabe nicht erfuellt" fails; 1
      "Nutzeraufgabe erfuellt" and 2 "Reibungslose Uebergabe" pass; -1 or unset is no check,
      000), because the run's verdict on it stands and leaving it out would let a rerun with
      unchanged thresholds turn a failed scenario into a passed one;
    * both: every ``evaluation_expectation_results`` entry whose recorded outcome is PASS or
      FAIL (LLM judgements, kept as recorded).

    ``evaluation_status`` is PASS when at least one check counted and all passed, FAIL when any
    failed. When NOTHING counted (no result, or everything skipped or unscored), the recorded
    status is kept: there is no evidence to overrule the run.

``rerun`` is pure and deterministic: no I/O, the result and the evaluation are not modified,
and the returned message is a new one. Rerunning a rerun result with the same evaluation gives
the same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.core.engine.metrics_config import SEMANTIC_COMPARISONS, Metric, Switches
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DEFAULT_OVERALL_TOOL_INVOCATION_CORRECTNESS_THRESHOLD",
    "DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD",
    "DEFAULT_TOOL_INVOCATION_PARAMETER_CORRECTNESS_THRESHOLD",
    "rerun",
]

DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD = 3
DEFAULT_TOOL_INVOCATION_PARAMETER_CORRECTNESS_THRESHOLD = 1.0
DEFAULT_OVERALL_TOOL_INVOCATION_CORRECTNESS_THRESHOLD = 1.0

_Result = evaluation_pb2.EvaluationResult
_Evaluation = evaluation_pb2.Evaluation
_Thresholds = evaluation_config_pb2.EvaluationMetricsThresholds
_TurnLevel = _Thresholds.GoldenEvaluationMetricsThresholds.TurnLevelMetricsThresholds
_ExpectationLevel = _Thresholds.GoldenEvaluationMetricsThresholds.ExpectationLevelMetricsThresholds
_Config = evaluation_config_pb2.EvaluationMetricsConfig
# HallucinationResult.score: 1 justified, 0 not justified, -1 no claim to assess.
_JUSTIFIED, _NOT_JUSTIFIED = 1, 0
# UserGoalSatisfactionResult.score: 2 graceful handoff, 1 satisfied, 0 not satisfied, -1 unknown.
_USER_GOAL_PASS, _USER_GOAL_FAIL = frozenset({1, 2}), 0


@dataclass
class _Verdict:
    """The checks that decide evaluation_status: how many passed and how many failed."""

    passed: int = 0
    failed: int = 0

    def add(self, ok: bool) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def add_outcome(self, outcome: _Result.Outcome.ValueType) -> None:
        """Counts a PASS or FAIL outcome; SKIPPED and unspecified ones are not evaluated."""
        if outcome in (_Result.PASS, _Result.FAIL):
            self.add(outcome == _Result.PASS)

    def add_hallucination(self, result: _Result.HallucinationResult) -> None:
        if result.HasField("score") and result.score in (_JUSTIFIED, _NOT_JUSTIFIED):
            self.add(result.score == _JUSTIFIED)

    def status(self) -> _Result.Outcome.ValueType | None:
        """PASS or FAIL, or None when no check was evaluated."""
        if self.failed:
            return _Result.FAIL
        if self.passed:
            return _Result.PASS
        return None


@dataclass(frozen=True)
class _TurnRules:
    """The thresholds in force for one golden turn."""

    semantic_similarity_threshold: int
    overall_tool_invocation_threshold: float
    # Expectation-level thresholds of levels 3-4, most specific first; an expectation's own
    # override goes in front of them.
    expectation_levels: tuple[_ExpectationLevel, ...]
    hallucination: _Thresholds.HallucinationMetricBehavior.ValueType
    extra_tool_calls: _Thresholds.ToolMatchingSettings.ExtraToolCallBehavior.ValueType
    # The expectations of the matching GoldenTurn, in step order.
    expectations: tuple[_Evaluation.GoldenExpectation, ...]
    # The metrics computed (EvaluationMetricsConfig in force).
    switches: Switches


def _at_least(score: float, threshold: float) -> _Result.Outcome.ValueType:
    return _Result.PASS if score >= threshold else _Result.FAIL


def _semantic_similarity_threshold(levels: Sequence[_TurnLevel]) -> int:
    for level in levels:
        if level.HasField("semantic_similarity_success_threshold"):
            return level.semantic_similarity_success_threshold
    return DEFAULT_SEMANTIC_SIMILARITY_SUCCESS_THRESHOLD


def _overall_tool_invocation_threshold(levels: Sequence[_TurnLevel]) -> float:
    for level in levels:
        if level.HasField("overall_tool_invocation_correctness_threshold"):
            return level.overall_tool_invocation_correctness_threshold
    return DEFAULT_OVERALL_TOOL_INVOCATION_CORRECTNESS_THRESHOLD


def _parameter_threshold(levels: Sequence[_ExpectationLevel]) -> float:
    for level in levels:
        if level.HasField("tool_invocation_parameter_correctness_threshold"):
            return level.tool_invocation_parameter_correctness_threshold
    return DEFAULT_TOOL_INVOCATION_PARAMETER_CORRECTNESS_THRESHOLD


def _behavior(
    candidates: Sequence[_Thresholds.HallucinationMetricBehavior.ValueType],
) -> _Thresholds.HallucinationMetricBehavior.ValueType:
    """The first specified hallucination behaviour, DISABLED when none is."""
    for candidate in candidates:
        if candidate != _Thresholds.HALLUCINATION_METRIC_BEHAVIOR_UNSPECIFIED:
            return candidate
    return _Thresholds.DISABLED


def _golden_hallucination_candidates(
    thresholds: _Thresholds,
) -> list[_Thresholds.HallucinationMetricBehavior.ValueType]:
    return [
        thresholds.golden_hallucination_metric_behavior,
        thresholds.hallucination_metric_behavior,
    ]


def _extra_tool_call_behavior(
    sources: Sequence[_Thresholds],
) -> _Thresholds.ToolMatchingSettings.ExtraToolCallBehavior.ValueType:
    for source in sources:
        golden = source.golden_evaluation_metrics_thresholds
        behavior = golden.tool_matching_settings.extra_tool_call_behavior
        if behavior != _Thresholds.ToolMatchingSettings.EXTRA_TOOL_CALL_BEHAVIOR_UNSPECIFIED:
            return behavior
    return _Thresholds.ToolMatchingSettings.FAIL


def _golden_turn(evaluation: _Evaluation, index: int) -> _Evaluation.GoldenTurn | None:
    if evaluation.WhichOneof("inputs") != "golden":
        return None
    turns = evaluation.golden.turns
    return turns[index] if index < len(turns) else None


def _turn_rules(
    turn: _Evaluation.GoldenTurn | None, sources: Sequence[_Thresholds], switches: Switches
) -> _TurnRules:
    turn_levels = [
        source.golden_evaluation_metrics_thresholds.turn_level_metrics_thresholds
        for source in sources
    ]
    hallucination = [
        candidate for source in sources for candidate in _golden_hallucination_candidates(source)
    ]
    expectations: tuple[_Evaluation.GoldenExpectation, ...] = ()
    if turn is not None:
        turn_levels.insert(0, turn.turn_level_metrics_thresholds_override)
        hallucination.insert(0, turn.hallucination_metric_behavior_override)
        expectations = tuple(
            step.expectation for step in turn.steps if step.WhichOneof("step") == "expectation"
        )
    return _TurnRules(
        semantic_similarity_threshold=_semantic_similarity_threshold(turn_levels),
        overall_tool_invocation_threshold=_overall_tool_invocation_threshold(turn_levels),
        expectation_levels=tuple(
            source.golden_evaluation_metrics_thresholds.expectation_level_metrics_thresholds
            for source in sources
        ),
        hallucination=_behavior(hallucination),
        extra_tool_calls=_extra_tool_call_behavior(sources),
        expectations=expectations,
        switches=switches,
    )


def _check_only(expectation: _Evaluation.GoldenExpectation) -> _Evaluation.GoldenExpectation:
    """The expectation reduced to its check (the ``condition`` oneof), for matching."""
    check = _Evaluation.GoldenExpectation()
    check.CopyFrom(expectation)
    check.ClearField("note")
    check.ClearField("skip_evaluation")
    check.ClearField("expectation_level_metrics_thresholds_override")
    check.ClearField("agent_response_semantic_similarity_metrics_config_override")
    check.ClearField("agent_response_hallucination_metrics_config_override")
    check.ClearField("comparison_type")
    return check


def _expectations_in_force(
    outcomes: Sequence[_Result.GoldenExpectationOutcome],
    current: Sequence[_Evaluation.GoldenExpectation],
) -> list[_Evaluation.GoldenExpectation]:
    """For each outcome, the expectation whose skip flag and threshold override apply."""
    checks = [_check_only(expectation) for expectation in current]
    taken = [False] * len(current)
    in_force: list[_Evaluation.GoldenExpectation] = []
    for outcome in outcomes:
        chosen = outcome.expectation
        if outcome.expectation.WhichOneof("condition") is not None:
            recorded = _check_only(outcome.expectation)
            for index, check in enumerate(checks):
                if not taken[index] and check == recorded:
                    taken[index] = True
                    chosen = current[index]
                    break
        in_force.append(chosen)
    return in_force


def _switched_off(
    outcome: _Result.GoldenExpectationOutcome,
    in_force: _Evaluation.GoldenExpectation,
    switches: Switches,
) -> bool:
    """Clears the results of the metrics ``switches`` turn off in ``outcome`` (a metric
    switched off is not computed); True when its expectation's only check is one of them."""
    condition = outcome.expectation.WhichOneof("condition")
    if condition == "agent_response":
        similarity_on = switches.similarity(in_force)
    else:
        similarity_on = switches.enabled(Metric.SEMANTIC_SIMILARITY)
    if not similarity_on:
        outcome.ClearField("semantic_similarity_result")
    step_on = switches.enabled(Metric.STEP_TOOL_CORRECTNESS)
    if not step_on:
        outcome.ClearField("tool_invocation_result")
    if condition == "tool_call":
        return not step_on
    semantic = outcome.expectation.comparison_type in SEMANTIC_COMPARISONS
    return condition == "agent_response" and semantic and not similarity_on


def _rerun_expectation(
    outcome: _Result.GoldenExpectationOutcome,
    in_force: _Evaluation.GoldenExpectation,
    rules: _TurnRules,
    turn_similarity: _Result.Outcome.ValueType | None,
) -> None:
    """Recomputes one GoldenExpectationOutcome in place (``outcome`` is the new message)."""
    observed = outcome.WhichOneof("result")
    if observed == "observed_payload":
        outcome.outcome = _Result.SKIPPED
        return
    condition = outcome.expectation.WhichOneof("condition")
    if condition is None:
        if observed == "observed_tool_call":  # an extra tool call
            fail = rules.extra_tool_calls == _Thresholds.ToolMatchingSettings.FAIL
            outcome.outcome = _Result.FAIL if fail else _Result.SKIPPED
        return

    switched_off = _switched_off(outcome, in_force, rules.switches)
    tool_outcome: _Result.Outcome.ValueType | None = None
    tool = outcome.tool_invocation_result
    if tool.HasField("parameter_correctness_score"):
        levels = (in_force.expectation_level_metrics_thresholds_override, *rules.expectation_levels)
        tool_outcome = _at_least(tool.parameter_correctness_score, _parameter_threshold(levels))
        tool.outcome = tool_outcome

    own_similarity: _Result.Outcome.ValueType | None = None
    similarity = outcome.semantic_similarity_result
    if similarity.HasField("score"):  # deprecated per-expectation similarity
        own_similarity = _at_least(similarity.score, rules.semantic_similarity_threshold)
        similarity.outcome = own_similarity

    if in_force.skip_evaluation or switched_off:
        outcome.outcome = _Result.SKIPPED
    elif condition == "tool_call":
        if tool_outcome is not None:
            outcome.outcome = tool_outcome
    elif condition == "agent_response" and (
        outcome.expectation.comparison_type in SEMANTIC_COMPARISONS
    ):
        follow = turn_similarity if turn_similarity is not None else own_similarity
        if follow is not None:
            outcome.outcome = follow


def _all_skipped(outcomes: Sequence[_Result.GoldenExpectationOutcome], condition: str) -> bool:
    """True when the turn has expectations of this kind and every one of them is SKIPPED."""
    kind = [o for o in outcomes if o.expectation.WhichOneof("condition") == condition]
    return bool(kind) and all(o.outcome == _Result.SKIPPED for o in kind)


def _rerun_turn(
    turn: _Result.GoldenResult.TurnReplayResult, rules: _TurnRules, verdict: _Verdict
) -> None:
    outcomes = turn.expectation_outcome
    in_force = _expectations_in_force(outcomes, rules.expectations)
    switches = rules.switches
    if not switches.turn_similarity(in_force):
        turn.ClearField("semantic_similarity_result")
    if not switches.turn_hallucination(in_force):
        turn.ClearField("hallucination_result")
    if not switches.enabled(Metric.TOOL_CORRECTNESS):
        turn.ClearField("overall_tool_invocation_result")
        turn.ClearField("tool_invocation_score")

    similarity: _Result.Outcome.ValueType | None = None
    if turn.semantic_similarity_result.HasField("score"):
        similarity = _at_least(
            turn.semantic_similarity_result.score, rules.semantic_similarity_threshold
        )
        turn.semantic_similarity_result.outcome = similarity

    overall: _Result.Outcome.ValueType | None = None
    if turn.overall_tool_invocation_result.HasField("tool_invocation_score"):
        overall = _at_least(
            turn.overall_tool_invocation_result.tool_invocation_score,
            rules.overall_tool_invocation_threshold,
        )
        turn.overall_tool_invocation_result.outcome = overall

    for outcome, expectation in zip(outcomes, in_force, strict=True):
        _rerun_expectation(outcome, expectation, rules, similarity)
        verdict.add_outcome(outcome.outcome)

    if similarity is not None and not _all_skipped(outcomes, "agent_response"):
        verdict.add_outcome(similarity)
    if switches.enabled(Metric.STEP_TOOL_CORRECTNESS):
        tools_held_out = _all_skipped(outcomes, "tool_call")
    else:  # every tool call is SKIPPED: only the skip flags hold the turn's check out
        calls = [e for e in in_force if e.WhichOneof("condition") == "tool_call"]
        tools_held_out = bool(calls) and all(call.skip_evaluation for call in calls)
    if overall is not None and not tools_held_out:
        verdict.add_outcome(overall)
    if rules.hallucination == _Thresholds.ENABLED:
        verdict.add_hallucination(turn.hallucination_result)


def _add_expectation_results(
    results: Sequence[_Result.EvaluationExpectationResult], verdict: _Verdict
) -> None:
    for result in results:
        verdict.add_outcome(result.outcome)


def _rerun_golden(
    golden: _Result.GoldenResult,
    evaluation: _Evaluation,
    sources: Sequence[_Thresholds],
    switches: Switches,
    verdict: _Verdict,
) -> None:
    for index, turn in enumerate(golden.turn_replay_results):
        rules = _turn_rules(_golden_turn(evaluation, index), sources, switches)
        _rerun_turn(turn, rules, verdict)
    _add_expectation_results(golden.evaluation_expectation_results, verdict)


def _rerun_scenario(
    scenario: _Result.ScenarioResult,
    sources: Sequence[_Thresholds],
    switches: Switches,
    verdict: _Verdict,
) -> None:
    if not switches.enabled(Metric.EXPECTATIONS_MET):
        for expectation in scenario.expectation_outcomes:
            expectation.outcome = _Result.SKIPPED
        scenario.ClearField("all_expectations_satisfied")
    if not switches.enabled(Metric.USER_GOAL_MET):
        scenario.ClearField("user_goal_satisfaction_result")
    evaluated = [
        outcome.outcome
        for outcome in scenario.expectation_outcomes
        if outcome.outcome in (_Result.PASS, _Result.FAIL)
    ]
    for outcome in evaluated:
        verdict.add_outcome(outcome)
    if evaluated:
        scenario.all_expectations_satisfied = all(o == _Result.PASS for o in evaluated)

    behavior = _behavior([source.scenario_hallucination_metric_behavior for source in sources])
    if behavior == _Thresholds.ENABLED:
        for hallucination in scenario.hallucination_result:
            verdict.add_hallucination(hallucination)

    user_goal = scenario.user_goal_satisfaction_result
    if user_goal.HasField("score"):
        if user_goal.score in _USER_GOAL_PASS:
            verdict.add(True)
        elif user_goal.score == _USER_GOAL_FAIL:
            verdict.add(False)

    _add_expectation_results(scenario.evaluation_expectation_results, verdict)


def rerun(
    result: evaluation_pb2.EvaluationResult,
    evaluation: evaluation_pb2.Evaluation,
    metrics_config: _Config | None = None,
) -> evaluation_pb2.EvaluationResult:
    """Recomputes a stored result's outcomes from its recorded scores and today's thresholds.

    ``evaluation`` is the (current) evaluation the result belongs to; it supplies the threshold
    overrides, skip flags and metrics config overrides; ``metrics_config`` is the app's (None:
    it sets none). Returns a new EvaluationResult; no argument is modified.
    """
    rerun_result = _Result()
    rerun_result.CopyFrom(result)
    sources = (
        evaluation.evaluation_metrics_threshold_override,
        result.evaluation_metrics_thresholds,
    )
    switches = Switches.of(evaluation, metrics_config)
    verdict = _Verdict()
    kind = rerun_result.WhichOneof("result")
    if kind == "golden_result":
        _rerun_golden(rerun_result.golden_result, evaluation, sources, switches, verdict)
    elif kind == "scenario_result":
        _rerun_scenario(rerun_result.scenario_result, sources, switches, verdict)
    if rerun_result.execution_state == _Result.COMPLETED:
        status = verdict.status()
        if status is not None:
            rerun_result.evaluation_status = status
    return rerun_result
