"""Which metrics a result computes: ``EvaluationMetricsConfig`` resolved per metric
(docs/semantics.md, "Evaluation runs", metrics config).

Each metric is governed by one message of the config; the published client documents every
one of them alike: "To disable the metric, set the message but do not set the ``enable_*``
field to true (or explicitly set it to false). To unset the configuration and fall back to the
default behavior, omit the message entirely." The default is to compute the metric. So a level
that holds the metric's message decides it (its ``enable_*`` flag), and a level that does not
falls through to the next one, most specific first:

1. the expectation's own override, for the two metrics an ``agent_response`` expectation can
   override (``agent_response_semantic_similarity_metrics_config_override``,
   ``agent_response_hallucination_metrics_config_override``);
2. the evaluation's ``evaluation_metrics_config_override``;
3. the app's ``evaluation_settings.metrics_config``;
4. the default: computed.

The messages and what they govern (:class:`Metric`): ``golden_metrics_config``'s
``semantic_similarity_metrics_config`` (the semantic similarity of agent responses: the turn's
and the deprecated per-expectation one), ``tool_correctness_metrics_config`` (turn level: the
turn's overall tool invocation), ``step_tool_correctness_metrics_config`` (step level: each tool
call expectation's parameter correctness); ``scenario_metrics_config``'s
``user_goal_met_metrics_config`` (the scenario's user goal satisfaction) and
``expectations_met_metrics_config`` (the scenario expectations' outcomes). Hallucination has no
message of its own at levels 2-3: only an expectation can switch it off.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_config_pb2, evaluation_pb2

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SEMANTIC_COMPARISONS", "Metric", "Switches", "of_settings"]

_Config = evaluation_config_pb2.EvaluationMetricsConfig
_Expectation = evaluation_pb2.Evaluation.GoldenExpectation
# Agent responses compared this way are judged by the semantic similarity score.
SEMANTIC_COMPARISONS = frozenset({_Config.COMPARISON_TYPE_UNSPECIFIED, _Config.SEMANTIC_SIMILARITY})


def of_settings(
    settings: evaluation_config_pb2.EvaluationSettings | None,
) -> _Config | None:
    """An app's metrics config, from its ``evaluation_settings`` (None: it sets none)."""
    if settings is None or not settings.HasField("metrics_config"):
        return None
    return settings.metrics_config


class Metric(enum.Enum):
    """A metric an EvaluationMetricsConfig switches: where its message is (the group of the
    config, the message, its ``enable_*`` flag)."""

    SEMANTIC_SIMILARITY = (
        "golden_metrics_config",
        "semantic_similarity_metrics_config",
        "enable_semantic_similarity_metrics",
    )
    TOOL_CORRECTNESS = (
        "golden_metrics_config",
        "tool_correctness_metrics_config",
        "enable_tool_correctness_metrics",
    )
    STEP_TOOL_CORRECTNESS = (
        "golden_metrics_config",
        "step_tool_correctness_metrics_config",
        "enable_tool_correctness_metrics",
    )
    USER_GOAL_MET = (
        "scenario_metrics_config",
        "user_goal_met_metrics_config",
        "enable_user_goal_met_metrics",
    )
    EXPECTATIONS_MET = (
        "scenario_metrics_config",
        "expectations_met_metrics_config",
        "enable_expectations_met_metrics",
    )

    def decided_by(self, config: _Config) -> bool | None:
        """What ``config`` says of this metric: None when it does not hold its message."""
        group_name, message_name, flag = self.value
        group = getattr(config, group_name)
        if not group.HasField(message_name):
            return None
        return bool(getattr(getattr(group, message_name), flag))


@dataclass(frozen=True)
class Switches:
    """The metrics configs in force for one evaluation, most specific first (levels 2-3 of the
    module; an expectation's own override is read from the expectation)."""

    levels: tuple[_Config, ...] = ()

    @classmethod
    def of(cls, evaluation: evaluation_pb2.Evaluation, app: _Config | None) -> Switches:
        """The evaluation's override, then the app's config (``app``; None: the app sets
        none)."""
        levels = []
        if evaluation.HasField("evaluation_metrics_config_override"):
            levels.append(evaluation.evaluation_metrics_config_override)
        if app is not None:
            levels.append(app)
        return cls(tuple(levels))

    def enabled(self, metric: Metric) -> bool:
        """Whether ``metric`` is computed, by the first level that holds its message."""
        for level in self.levels:
            decided = metric.decided_by(level)
            if decided is not None:
                return decided
        return True

    def similarity(self, expectation: _Expectation) -> bool:
        """Whether an agent response expectation takes part in semantic similarity."""
        if expectation.HasField("agent_response_semantic_similarity_metrics_config_override"):
            override = expectation.agent_response_semantic_similarity_metrics_config_override
            return override.enable_semantic_similarity_metrics
        return self.enabled(Metric.SEMANTIC_SIMILARITY)

    @staticmethod
    def hallucination(expectation: _Expectation) -> bool:
        """Whether an agent response expectation asks for hallucination (only its own
        override can switch it off)."""
        if expectation.HasField("agent_response_hallucination_metrics_config_override"):
            override = expectation.agent_response_hallucination_metrics_config_override
            return override.enable_hallucination_metrics
        return True

    def turn_similarity(self, expectations: Sequence[_Expectation]) -> bool:
        """Whether a golden turn's semantic similarity is computed: for at least one of its
        agent response expectations (``expectations`` may hold others), or, in a turn without
        any, as levels 2-3 say."""
        answers = [e for e in expectations if e.WhichOneof("condition") == "agent_response"]
        if not answers:
            return self.enabled(Metric.SEMANTIC_SIMILARITY)
        return any(self.similarity(answer) for answer in answers)

    def turn_hallucination(self, expectations: Sequence[_Expectation]) -> bool:
        """Whether a golden turn's hallucination is computed: unless every one of its agent
        response expectations (at least one) switches it off."""
        answers = [e for e in expectations if e.WhichOneof("condition") == "agent_response"]
        return not answers or any(self.hallucination(answer) for answer in answers)

    def judges(self, expectation: _Expectation) -> bool:
        """Whether some computed metric judges ``expectation``: a tool call's step or turn
        tool correctness, an agent response's semantic similarity (when it is compared by
        it); every other kind is judged as recorded."""
        condition = expectation.WhichOneof("condition")
        if condition == "tool_call":
            return self.enabled(Metric.STEP_TOOL_CORRECTNESS) or self.enabled(
                Metric.TOOL_CORRECTNESS
            )
        if condition == "agent_response" and expectation.comparison_type in SEMANTIC_COMPARISONS:
            return self.similarity(expectation)
        return True
