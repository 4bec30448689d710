"""The server-maintained fields of an Evaluation, derived from its stored results.

``Evaluation.aggregated_metrics``, ``Evaluation.evaluation_runs`` and
``Evaluation.last_completed_result`` are OUTPUT_ONLY: the server recomputes them from the
evaluation's EvaluationResults. The reference pages only name the fields ("the metrics of this
evaluation aggregated over all of its runs", "grouped by app version ID", "average semantic
similarity score, from 0 to 4", ...); the rules below are our reading of them.

Which results count
    Only results whose ``execution_state`` is COMPLETED contribute to ``aggregated_metrics`` and
    are candidates for ``last_completed_result``. Every result with a non-empty
    ``evaluation_run`` contributes to ``evaluation_runs``, whatever its state.

Grouping (``AggregatedMetrics.metrics_by_app_version``)
    Completed results are grouped by app version ID: the last path segment of
    ``EvaluationResult.app_version`` (``projects/p/locations/l/apps/a/versions/v1`` -> ``v1``).
    Results with an empty ``app_version`` ran against the draft app and group under the ID ``""``.
    There is one MetricsByAppVersion per group that has at least one completed result (even if
    that result reports no metrics), sorted by ``app_version_id``.

``pass_count`` / ``fail_count``
    The number of completed results in the group whose ``evaluation_status`` is PASS / FAIL;
    other statuses count towards neither.

``tool_metrics``
    One ToolMetrics per tool, sorted by ``tool``, counting PASS and FAIL outcomes of tool-call
    expectations (any other outcome, e.g. SKIPPED or unspecified, is not counted):

    * golden results: every ``GoldenExpectationOutcome`` of every ``TurnReplayResult`` whose
      expectation's ``condition`` is ``tool_call``, counted by the outcome's ``outcome``;
    * scenario results: every ``ScenarioExpectationOutcome`` whose expectation is a
      ``tool_expectation``, counted by its ``outcome``.

    The tool is named by the expected ToolCall's ``tool_identifier``: the ``tool`` resource name,
    or ``"<toolset>/<tool_id>"`` for a ``toolset_tool`` (just ``"<toolset>"`` when ``tool_id`` is
    empty). An expectation whose ToolCall names no tool (no identifier, an empty ``tool`` or an
    empty ``toolset``) is not counted.

``semantic_similarity_metrics``
    Zero or one element: the average of every golden ``TurnReplayResult.semantic_similarity_result
    .score`` that is set (proto3 ``optional``) and within the documented range 0..4; absent when
    there is none. Scores are integers, so the sum is exact and the mean is the correctly
    rounded quotient, stored as a 32-bit float.

``hallucination_metrics``
    Zero or one element: the average of every hallucination score that is set and within
    [0, 1]: golden ``TurnReplayResult.hallucination_result`` and every scenario
    ``ScenarioResult.hallucination_result``. The score -1 ("no claim to assess") is excluded.

``tool_call_latency_metrics``
    One element per tool, sorted by ``tool``: the average ``execution_latency`` of the
    ToolCallLatency entries naming that tool (golden ``TurnReplayResult.tool_call_latencies``
    and scenario ``ScenarioResult.tool_call_latencies``). Entries with an empty ``tool`` or an
    unset ``execution_latency`` are skipped. Averages use exact integer nanoseconds: the sum
    of the latencies divided by their count with floor division, i.e. a fractional nanosecond is
    dropped (rounded towards negative infinity), never computed through floats.

``turn_latency_metrics``
    Zero or one element: the average of every golden ``TurnReplayResult.turn_latency`` that is
    set, with the same integer-nanosecond floor division.

``metrics_by_turn``
    Golden results only. ``turn_index`` is the position of the TurnReplayResult in
    ``GoldenResult.turn_replay_results`` (0-based); each MetricsByTurn holds the same five metric
    kinds restricted to that turn of every golden result in the group. Turns with nothing to
    report are omitted; the rest are sorted by ``turn_index``.

``evaluation_runs``
    The distinct non-empty ``evaluation_run`` values, most recent run first: runs are ordered by
    the latest ``create_time`` of their results (descending), ties broken by run name
    (ascending).

``last_completed_result``
    A copy of the newest COMPLETED result, by ``create_time`` and then ``name`` (the larger
    wins); remaining ties go to the larger deterministic serialization, so the choice never
    depends on input order. None when no result is completed.

``derive`` is a pure function without I/O: its output depends only on the multiset of input
results, never on their order, and the input messages are not modified.

Incremental upkeep
    Every number behind ``aggregated_metrics`` is a sum or a count of integers, so a result's
    share of them is a *tally* (:func:`contribution`: counter name -> integer), and the metrics
    of an evaluation are rendered from the sum of its results' tallies (:func:`render_tally`).
    Storage keeps that sum per evaluation and adds or subtracts one result's tally per write,
    so a write costs the same however many results the evaluation has. ``derive`` itself is the
    rendering of the summed tallies, so both paths give identical metrics.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from google.protobuf import duration_pb2

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

if TYPE_CHECKING:
    from collections.abc import Iterable

    from google.protobuf import timestamp_pb2

    from ces_eval.generated.google.cloud.ces.v1beta import content_pb2

__all__ = [
    "FIELDS",
    "Derived",
    "Tally",
    "add_tally",
    "contribution",
    "derive",
    "render_tally",
]

Tally = dict[str, int]
# The Evaluation fields the server derives from its results (stored apart from the rest).
FIELDS: tuple[Literal["aggregated_metrics", "evaluation_runs", "last_completed_result"], ...] = (
    "aggregated_metrics",
    "evaluation_runs",
    "last_completed_result",
)

_Result = evaluation_pb2.EvaluationResult
_Metrics = evaluation_pb2.AggregatedMetrics

_SEMANTIC_SIMILARITY_RANGE = range(5)  # 0..4
_HALLUCINATION_RANGE = range(2)  # 0..1; -1 means "not applicable"


@dataclass(frozen=True)
class Derived:
    """The derived, OUTPUT_ONLY fields of an Evaluation."""

    aggregated_metrics: evaluation_pb2.AggregatedMetrics
    # Distinct non-empty EvaluationResult.evaluation_run values, most recent run first.
    evaluation_runs: list[str]
    # The newest result whose execution_state is COMPLETED, or None.
    last_completed_result: evaluation_pb2.EvaluationResult | None


@dataclass
class _Mean:
    """An exact running sum of integers and how many there were."""

    total: int = 0
    count: int = 0

    def add(self, value: int) -> None:
        self.total += value
        self.count += 1

    def duration(self) -> duration_pb2.Duration:
        """The mean of nanosecond values as a Duration, fractional nanoseconds floored."""
        average = duration_pb2.Duration()
        average.FromNanoseconds(self.total // self.count)
        return average


@dataclass
class _Accumulator:
    """Running totals of the five metric kinds, for one app version or one turn."""

    tool_pass: Counter[str] = field(default_factory=Counter)
    tool_fail: Counter[str] = field(default_factory=Counter)
    semantic_similarity: _Mean = field(default_factory=_Mean)
    hallucination: _Mean = field(default_factory=_Mean)
    tool_call_latency: dict[str, _Mean] = field(default_factory=dict)
    turn_latency: _Mean = field(default_factory=_Mean)

    def is_empty(self) -> bool:
        return not (
            self.tool_pass
            or self.tool_fail
            or self.semantic_similarity.count
            or self.hallucination.count
            or self.tool_call_latency
            or self.turn_latency.count
        )

    def add_tool_outcome(self, tool: str | None, outcome: _Result.Outcome.ValueType) -> None:
        if tool is None:
            return
        if outcome == _Result.PASS:
            self.tool_pass[tool] += 1
        elif outcome == _Result.FAIL:
            self.tool_fail[tool] += 1

    def add_hallucination(self, result: _Result.HallucinationResult) -> None:
        if result.HasField("score") and result.score in _HALLUCINATION_RANGE:
            self.hallucination.add(result.score)

    def add_tool_call_latencies(self, latencies: Iterable[_Result.ToolCallLatency]) -> None:
        for latency in latencies:
            if latency.tool and latency.HasField("execution_latency"):
                mean = self.tool_call_latency.setdefault(latency.tool, _Mean())
                mean.add(latency.execution_latency.ToNanoseconds())

    def add_turn(self, turn: _Result.GoldenResult.TurnReplayResult) -> None:
        for outcome in turn.expectation_outcome:
            if outcome.expectation.WhichOneof("condition") == "tool_call":
                self.add_tool_outcome(_tool_name(outcome.expectation.tool_call), outcome.outcome)
        similarity = turn.semantic_similarity_result
        if similarity.HasField("score") and similarity.score in _SEMANTIC_SIMILARITY_RANGE:
            self.semantic_similarity.add(similarity.score)
        self.add_hallucination(turn.hallucination_result)
        self.add_tool_call_latencies(turn.tool_call_latencies)
        if turn.HasField("turn_latency"):
            self.turn_latency.add(turn.turn_latency.ToNanoseconds())

    def add_scenario(self, scenario: _Result.ScenarioResult) -> None:
        for outcome in scenario.expectation_outcomes:
            if outcome.expectation.WhichOneof("expectation") == "tool_expectation":
                expected = outcome.expectation.tool_expectation.expected_tool_call
                self.add_tool_outcome(_tool_name(expected), outcome.outcome)
        for hallucination in scenario.hallucination_result:
            self.add_hallucination(hallucination)
        self.add_tool_call_latencies(scenario.tool_call_latencies)

    def fill(self, target: _Metrics.MetricsByAppVersion | _Metrics.MetricsByTurn) -> None:
        """Writes the five metric kinds into a MetricsByAppVersion or MetricsByTurn."""
        for tool in sorted(self.tool_pass.keys() | self.tool_fail.keys()):
            target.tool_metrics.add(
                tool=tool, pass_count=self.tool_pass[tool], fail_count=self.tool_fail[tool]
            )
        if self.semantic_similarity.count:
            mean = self.semantic_similarity
            target.semantic_similarity_metrics.add(score=mean.total / mean.count)
        if self.hallucination.count:
            mean = self.hallucination
            target.hallucination_metrics.add(score=mean.total / mean.count)
        for tool in sorted(self.tool_call_latency):
            target.tool_call_latency_metrics.add(
                tool=tool, average_latency=self.tool_call_latency[tool].duration()
            )
        if self.turn_latency.count:
            target.turn_latency_metrics.add(average_latency=self.turn_latency.duration())


@dataclass
class _AppVersionGroup:
    """Running totals of the completed results that ran against one app version."""

    metrics: _Accumulator = field(default_factory=_Accumulator)
    turns: dict[int, _Accumulator] = field(default_factory=dict)
    pass_count: int = 0
    fail_count: int = 0

    def add(self, result: _Result) -> None:
        if result.evaluation_status == _Result.PASS:
            self.pass_count += 1
        elif result.evaluation_status == _Result.FAIL:
            self.fail_count += 1
        kind = result.WhichOneof("result")
        if kind == "golden_result":
            for index, turn in enumerate(result.golden_result.turn_replay_results):
                self.metrics.add_turn(turn)
                self.turns.setdefault(index, _Accumulator()).add_turn(turn)
        elif kind == "scenario_result":
            self.metrics.add_scenario(result.scenario_result)

    def message(self, app_version_id: str) -> _Metrics.MetricsByAppVersion:
        group = _Metrics.MetricsByAppVersion(
            app_version_id=app_version_id,
            pass_count=self.pass_count,
            fail_count=self.fail_count,
        )
        self.metrics.fill(group)
        for index in sorted(self.turns):
            turn = self.turns[index]
            if not turn.is_empty():
                turn.fill(group.metrics_by_turn.add(turn_index=index))
        return group


def _tool_name(call: content_pb2.ToolCall) -> str | None:
    """The name a tool-call expectation is counted under, or None when it names no tool."""
    kind = call.WhichOneof("tool_identifier")
    if kind == "tool":
        return call.tool or None
    if kind == "toolset_tool":
        toolset_tool = call.toolset_tool
        if not toolset_tool.toolset:
            return None
        if not toolset_tool.tool_id:
            return toolset_tool.toolset
        return f"{toolset_tool.toolset}/{toolset_tool.tool_id}"
    return None


def _app_version_id(app_version: str) -> str:
    """The last path segment of an app version resource name; "" (the draft app) stays ""."""
    return app_version.rsplit("/", 1)[-1]


def _nanos(timestamp: timestamp_pb2.Timestamp) -> int:
    return timestamp.seconds * 1_000_000_000 + timestamp.nanos


@functools.lru_cache(maxsize=65_536)  # the same few keys for every result of an evaluation
def _key(group: str, turn: int | None, kind: str, tool: str = "") -> str:
    return json.dumps([group, turn, kind, tool], ensure_ascii=False, separators=(",", ":"))


def _mean_entries(
    out: Counter[str], group: str, turn: int | None, kind: str, mean: _Mean, *, tool: str = ""
) -> None:
    if mean.count:
        out[_key(group, turn, kind + ".total", tool)] += mean.total
        out[_key(group, turn, kind + ".count", tool)] += mean.count


def _flatten_accumulator(
    out: Counter[str], group: str, turn: int | None, metrics: _Accumulator
) -> None:
    for tool, count in metrics.tool_pass.items():
        out[_key(group, turn, "tool.pass", tool)] += count
    for tool, count in metrics.tool_fail.items():
        out[_key(group, turn, "tool.fail", tool)] += count
    _mean_entries(out, group, turn, "similarity", metrics.semantic_similarity)
    _mean_entries(out, group, turn, "hallucination", metrics.hallucination)
    for tool, mean in metrics.tool_call_latency.items():
        _mean_entries(out, group, turn, "tool_latency", mean, tool=tool)
    _mean_entries(out, group, turn, "turn_latency", metrics.turn_latency)


def contribution(result: _Result) -> Tally:
    """What ``result`` adds to its evaluation's metrics tally (nothing unless COMPLETED)."""
    if result.execution_state != _Result.COMPLETED:
        return {}
    group_id = _app_version_id(result.app_version)
    group = _AppVersionGroup()
    group.add(result)
    out: Counter[str] = Counter({_key(group_id, None, "results"): 1})
    out[_key(group_id, None, "pass")] += group.pass_count
    out[_key(group_id, None, "fail")] += group.fail_count
    _flatten_accumulator(out, group_id, None, group.metrics)
    for index, turn in group.turns.items():
        _flatten_accumulator(out, group_id, index, turn)
    return {name: value for name, value in out.items() if value}


def add_tally(total: Tally, change: Mapping[str, int], sign: int = 1) -> None:
    """``total += sign * change`` in place; counters that reach zero are removed."""
    for name, value in change.items():
        updated = total.get(name, 0) + sign * value
        if updated:
            total[name] = updated
        else:
            total.pop(name, None)


def _accumulator(groups: dict[str, _AppVersionGroup], group: str, turn: int | None) -> _Accumulator:
    target = groups.setdefault(group, _AppVersionGroup())
    return target.metrics if turn is None else target.turns.setdefault(turn, _Accumulator())


def _mean(metrics: _Accumulator, kind: str, tool: str) -> _Mean:
    if kind == "tool_latency":
        return metrics.tool_call_latency.setdefault(tool, _Mean())
    means = {
        "similarity": metrics.semantic_similarity,
        "hallucination": metrics.hallucination,
        "turn_latency": metrics.turn_latency,
    }
    return means[kind]


def render_tally(tally: Mapping[str, int]) -> _Metrics:
    """The AggregatedMetrics of an evaluation whose results' tallies sum to ``tally``."""
    groups: dict[str, _AppVersionGroup] = {}
    present: set[str] = set()
    for name, value in tally.items():
        group, turn, kind, tool = json.loads(name)
        if kind == "results":
            present.add(group)
            groups.setdefault(group, _AppVersionGroup())
        elif kind in ("pass", "fail"):
            target = groups.setdefault(group, _AppVersionGroup())
            setattr(target, f"{kind}_count", value)
        elif kind.startswith("tool."):
            metrics = _accumulator(groups, group, turn)
            counter = metrics.tool_pass if kind == "tool.pass" else metrics.tool_fail
            counter[tool] = value
        else:
            measure, part = kind.rsplit(".", 1)
            setattr(_mean(_accumulator(groups, group, turn), measure, tool), part, value)
    return _Metrics(
        metrics_by_app_version=[groups[version].message(version) for version in sorted(present)]
    )


def _aggregate(completed: list[_Result]) -> _Metrics:
    total: Tally = {}
    for result in completed:
        add_tally(total, contribution(result))
    return render_tally(total)


def _evaluation_runs(results: list[_Result]) -> list[str]:
    latest: dict[str, int] = {}
    for result in results:
        if result.evaluation_run:
            created = _nanos(result.create_time)
            latest[result.evaluation_run] = max(created, latest.get(result.evaluation_run, created))
    return sorted(latest, key=lambda run: (-latest[run], run))


def _last_completed(completed: list[_Result]) -> _Result | None:
    if not completed:
        return None
    newest = max(
        completed,
        key=lambda result: (
            _nanos(result.create_time),
            result.name,
            result.SerializeToString(deterministic=True),
        ),
    )
    copy = _Result()
    copy.CopyFrom(newest)
    return copy


def derive(results: Iterable[evaluation_pb2.EvaluationResult]) -> Derived:
    """Computes the derived fields of an Evaluation from all of its stored results."""
    stored = list(results)
    completed = [result for result in stored if result.execution_state == _Result.COMPLETED]
    return Derived(
        aggregated_metrics=_aggregate(completed),
        evaluation_runs=_evaluation_runs(stored),
        last_completed_result=_last_completed(completed),
    )
