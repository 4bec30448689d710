"""One rendering of an evaluation result: the conversation it was, as a chat.

A result (``EvaluationResult`` REST JSON) is shown with its evaluation (``Evaluation`` REST
JSON, for a golden's user inputs, its tags and its thresholds) as people read a conversation:
each turn's user inputs, then what the agent was expected to do beside what it did (tool calls
with the tool's full resource name and their arguments folded, answers, transfers), the
difference highlighted (a word diff of answers, a line diff of arguments; equal parts plain),
each score against the threshold that judged it, the turn's latencies, and an ERROR result's
``error_info`` reason and message. The web view (``/ui``, which converts its messages with
``ces_eval.transcoding.printer``) and ``ces-eval run --html`` (which holds REST JSON) render
through :func:`render_result`, with the same markup and :data:`STYLESHEET`.

Proto3 JSON omits every default, so any field may be absent; nothing here assumes one is set.
The thresholds shown are resolved as docs/semantics.md ("What is observed") and the engine do:
an expectation's or turn's override, then the evaluation's, then what the run recorded on the
result, then the defaults (semantic similarity 3 of 4, tool invocation scores 1.0,
hallucination not counted). Templates are Jinja2 with autoescaping on: an agent's answer is
text, never markup.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

__all__ = [
    "STYLESHEET",
    "TEXT_LIMIT",
    "cut",
    "diff",
    "environment",
    "render_latency_report",
    "render_result",
    "render_view",
    "result_status",
    "result_view",
]

_HERE = Path(__file__).parent
STYLESHEET = (_HERE / "style.css").read_text(encoding="utf-8")
"""The CSS of a rendered result (every rule under ``.result`` or ``.latency``): inlined by the
HTML report, appended to the web view's stylesheet."""

TEXT_LIMIT = 4_000
"""Characters of one expected or observed text shown before it is cut (:func:`cut`): a field may
hold 262,144 characters, and a page stays readable and small. The API serves them whole."""

_Json = Mapping[str, Any]
_NO_DATA: _Json = {}
# The defaults of EvaluationMetricsThresholds (docs/semantics.md, "What is observed").
_SEMANTIC_SIMILARITY_DEFAULT = 3
_TOOL_INVOCATION_DEFAULT = 1.0
_ENABLED = "ENABLED"
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")
# google.rpc.Code names, for the deprecated ``error`` (a google.rpc.Status) of old results.
_CODES = (
    *("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND"),
    *("ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"),
    *("ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"),
    "UNAUTHENTICATED",
)
_NONE = "\N{EN DASH}"  # shown for no value
_BETWEEN = " \N{EN DASH} "  # between a label and its explanation


def environment(*more: Path) -> jinja2.Environment:
    """A Jinja2 environment over this package's templates (and the folders ``more``), with
    autoescaping on and undefined values refused."""
    loader = jinja2.FileSystemLoader([_HERE / "templates", *more])
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined)


_TEMPLATES = environment()


def cut(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` within ``limit`` characters, the cut said."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


# -- the outcome of a result -------------------------------------------------------------------


def result_status(result: _Json) -> str:
    """What became of ``result`` in one word: PASS, FAIL or SKIPPED once it executed; ERROR,
    CANCELLED, RUNNING or QUEUED otherwise; UNKNOWN when neither field says (never
    ``OUTCOME_UNSPECIFIED``: an ERROR result has no ``evaluation_status``)."""
    state = _text(result.get("executionState"))
    status = _text(result.get("evaluationStatus"))
    if state in ("ERROR", "CANCELLED", "RUNNING", "QUEUED"):
        return state
    if status in ("PASS", "FAIL", "SKIPPED"):
        return status
    if result.get("errorInfo") or result.get("error"):
        return "ERROR"
    return "UNKNOWN"


def _error(info: object, status: object = None) -> dict[str, str] | None:
    """An ``EvaluationErrorInfo`` (or, for old results, the deprecated ``google.rpc.Status``)
    as its reason and messages; None when neither is there."""
    if isinstance(info, Mapping) and info:
        return {
            "reason": _text(info.get("errorType")) or "ERROR_TYPE_UNSPECIFIED",
            "message": _text(info.get("errorMessage")),
            "user_message": _text(info.get("userFacingErrorMessage")),
            "session": _text(info.get("sessionId")),
        }
    if isinstance(status, Mapping) and status:
        code = status.get("code", 0)
        reason = _CODES[code] if isinstance(code, int) and 0 <= code < len(_CODES) else str(code)
        return {
            "reason": reason,
            "message": _text(status.get("message")),
            "user_message": "",
            "session": "",
        }
    return None


# -- diffs -------------------------------------------------------------------------------------

_Segments = list[tuple[bool, str]]  # (changed, text), in order


def diff(expected: str, observed: str, *, lines: bool = False) -> tuple[_Segments, _Segments]:
    """``expected`` and ``observed`` cut into segments, each marked changed or equal: by words
    (and the spaces and punctuation between them), or by ``lines``. Runs of the same kind are
    merged, so equal parts come out as plain text."""
    tokens_a = expected.splitlines(keepends=True) if lines else _TOKENS.findall(expected)
    tokens_b = observed.splitlines(keepends=True) if lines else _TOKENS.findall(observed)
    left: _Segments = []
    right: _Segments = []
    matcher = difflib.SequenceMatcher(None, tokens_a, tokens_b, autojunk=False)
    for operation, a1, a2, b1, b2 in matcher.get_opcodes():
        changed = operation != "equal"
        for side, tokens in ((left, tokens_a[a1:a2]), (right, tokens_b[b1:b2])):
            for token in tokens:
                # A changed line is marked without its line break.
                body = token.rstrip("\n") if changed else token
                _append(side, changed, body)
                _append(side, False, token[len(body) :])
    return _joined(left), _joined(right)


def _joined(segments: _Segments) -> _Segments:
    """``segments`` with the spaces between two changed ones counted as changed: "<del>on
    Monday</del>" reads better than each word marked alone."""
    joined: _Segments = []
    for index, (changed, text) in enumerate(segments):
        between = 0 < index < len(segments) - 1 and segments[index + 1][0]
        _append(joined, changed or (between and joined[-1][0] and not text.strip()), text)
    return joined


def _append(segments: _Segments, changed: bool, text: str) -> None:
    if not text:
        return
    if segments and segments[-1][0] == changed:
        segments[-1] = (changed, segments[-1][1] + text)
    else:
        segments.append((changed, text))


# -- what an expectation holds, as text -----------------------------------------------------------


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _number(value: object) -> str:
    """A score as people read it: 4, 0.75, 1 (JSON may give 1.0, or "NaN" as a string)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"{value:g}"
    return _text(value)


def _json_text(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _duration(value: object) -> str:
    """A proto3 JSON Duration ("0.952s") in milliseconds or seconds; as given when it is not
    one."""
    text = _text(value)
    try:
        seconds = float(text.removesuffix("s"))
    except ValueError:
        return text
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _message_text(message: object) -> str:
    """A ``Message``'s text chunks joined; other chunks (payloads, images, ...) as JSON."""
    if not isinstance(message, Mapping):
        return ""
    parts = []
    for chunk in message.get("chunks") or []:
        if not isinstance(chunk, Mapping):
            continue
        if "text" in chunk or "transcript" in chunk:
            parts.append(_text(chunk.get("text", chunk.get("transcript"))))
        elif chunk:
            parts.append(_json_text(dict(chunk)))
    return "\n".join(parts)


def _tool_name(call: object) -> str:
    """The full name of the tool a ``ToolCall`` or ``ToolResponse`` names (a tool's resource
    name, or a toolset's with the tool's ID)."""
    if not isinstance(call, Mapping):
        return ""
    if call.get("tool"):
        return _text(call["tool"])
    toolset = call.get("toolsetTool")
    if isinstance(toolset, Mapping):
        return f"{_text(toolset.get('toolset'))} · {_text(toolset.get('toolId'))}".strip(" ·")
    return _text(call.get("displayName"))


def _compact(value: object, limit: int = 100) -> str:
    """One line of JSON, cut: the summary of folded arguments."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# What each kind of expectation and observation holds: its label, and its fields in
# GoldenExpectation, GoldenExpectationOutcome and ScenarioExpectation(Outcome).
_GOLDEN_KINDS: tuple[tuple[str, str, str], ...] = (
    # (kind, expectation field, observation field)
    ("tool_call", "toolCall", "observedToolCall"),
    ("tool_response", "toolResponse", "observedToolResponse"),
    ("agent_response", "agentResponse", "observedAgentResponse"),
    ("agent_transfer", "agentTransfer", "observedAgentTransfer"),
    ("updated_variables", "updatedVariables", ""),
    ("mock_tool_response", "mockToolResponse", ""),
    ("no_tool_calls", "noToolCalls", ""),
)
_LABELS = {
    "tool_call": "Tool call",
    "tool_response": "Tool response",
    "agent_response": "Agent answer",
    "agent_transfer": "Transfer",
    "updated_variables": "Updated variables",
    "mock_tool_response": "Mocked tool response",
    "no_tool_calls": "No tool calls",
    "payload": "Custom payload",
    "none": "Expectation",
}


def _side(kind: str, value: object, limit: int) -> dict[str, str] | None:
    """One side (expected or observed) of an expectation of ``kind``: the tool it names, its
    text (an answer's words, or pretty JSON of arguments and values) and the one-line summary
    shown while folded; None when there is no ``value``."""
    if value is None:
        return None
    tool = ""
    if kind in ("tool_call", "tool_response", "mock_tool_response"):
        tool = _tool_name(value)
        body = (
            value.get("args" if kind == "tool_call" else "response")
            if isinstance(value, Mapping)
            else value
        )
        body = {} if body is None else body
        return {"tool": tool, "text": cut(_json_text(body), limit), "summary": _compact(body)}
    if kind == "agent_response":
        text = _message_text(value)
        return {"tool": "", "text": cut(text, limit), "summary": ""}
    if kind == "agent_transfer" and isinstance(value, Mapping):
        target = _text(value.get("targetAgent"))
        shown = _text(value.get("displayName"))
        text = f"{target} ({shown})" if shown and shown != target else target
        return {"tool": "", "text": cut(text, limit), "summary": ""}
    if kind == "no_tool_calls":
        return {"tool": "", "text": "no tool is called", "summary": ""}
    return {"tool": "", "text": cut(_json_text(value), limit), "summary": _compact(value)}


def _golden_kind(expectation: _Json, outcome: _Json) -> tuple[str, object, object]:
    """The kind of a golden expectation, what was expected and what was observed."""
    for kind, expected_field, observed_field in _GOLDEN_KINDS:
        if expected_field in expectation:
            observed = outcome.get(observed_field) if observed_field else None
            return kind, expectation[expected_field], observed
    for kind, _, observed_field in _GOLDEN_KINDS:  # an observation without its expectation
        if observed_field and observed_field in outcome:
            return kind, None, outcome[observed_field]
    if "observedPayload" in outcome:
        return "payload", None, outcome["observedPayload"]
    return "none", None, None


def _item(
    kind: str,
    expected: object,
    observed: object,
    outcome: str,
    limit: int,
    *,
    note: str = "",
    scores: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """One expectation beside its observation: both sides, their diff, its outcome."""
    left = _side(kind, expected, limit)
    right = _side(kind, observed, limit)
    lines = kind not in ("agent_response", "agent_transfer", "no_tool_calls")
    if left is not None and right is not None:
        expected_segments, observed_segments = diff(left["text"], right["text"], lines=lines)
    else:
        expected_segments = [(False, left["text"])] if left and left["text"] else []
        observed_segments = [(False, right["text"])] if right and right["text"] else []
    tool_changed = bool(left and right and left["tool"] != right["tool"])
    return {
        "kind": kind,
        "label": _LABELS[kind],
        "outcome": outcome,
        "note": cut(note, limit),
        "expected": left,
        "observed": right,
        "expected_segments": expected_segments,
        "observed_segments": observed_segments,
        "tool_changed": tool_changed,
        # Arguments and values are folded, and unfolded where they did not match.
        "folded": lines and outcome != "FAIL",
        "scores": list(scores),
    }


def _score(
    name: str, score: object, threshold: str, outcome: object, explanation: object = ""
) -> dict[str, str]:
    return {
        "name": name,
        "score": _number(score) if score is not None else _NONE,
        "threshold": threshold,
        "outcome": _text(outcome),
        "explanation": _text(explanation),
    }


# -- thresholds ----------------------------------------------------------------------------------


def _golden_thresholds(thresholds: object) -> tuple[_Json, _Json, str]:
    """A ``EvaluationMetricsThresholds``' golden turn level, expectation level and golden
    hallucination behaviour."""
    if not isinstance(thresholds, Mapping):
        return _NO_DATA, _NO_DATA, ""
    golden = thresholds.get("goldenEvaluationMetricsThresholds") or _NO_DATA
    behaviour = _text(
        thresholds.get("goldenHallucinationMetricBehavior")
        or thresholds.get("hallucinationMetricBehavior")
    )
    return (
        golden.get("turnLevelMetricsThresholds") or _NO_DATA,
        golden.get("expectationLevelMetricsThresholds") or _NO_DATA,
        behaviour,
    )


def _first(levels: Sequence[_Json], field: str, default: object) -> object:
    for level in levels:
        if field in level:
            return level[field]
    return default


# -- the view of a result ----------------------------------------------------------------------


def _user_inputs(turn: _Json) -> list[dict[str, str]]:
    """What the user said or sent in a golden turn, and the transfers it scripts."""
    shown = []
    for step in turn.get("steps") or []:
        if not isinstance(step, Mapping):
            continue
        if isinstance(given := step.get("userInput"), Mapping):
            if "text" in given or "dtmf" in given:
                text = _text(given.get("text", given.get("dtmf")))
            elif isinstance(event := given.get("event"), Mapping):
                text = f"event {_text(event.get('event'))}"
            elif "audio" in given or "image" in given or "blob" in given:
                text = "(audio, image or file input)"
            else:
                text = _json_text({k: v for k, v in given.items() if k != "willContinue"})
            shown.append({"role": "user", "text": cut(text)})
        elif isinstance(transfer := step.get("agentTransfer"), Mapping):
            text = f"transfer to {_text(transfer.get('targetAgent'))}"
            shown.append({"role": "transfer", "text": text})
    return shown


def _golden_turn(
    number: int,
    turn: _Json,
    *,
    golden_turn: _Json,
    levels: Sequence[_Json],
    behaviours: list[str],
    limit: int,
) -> dict[str, Any]:
    """One replayed golden turn: its user inputs, expectations and scores."""
    turn_levels = [golden_turn.get("turnLevelMetricsThresholdsOverride") or _NO_DATA, *levels[0::2]]
    expectation_levels = list(levels[1::2])
    behaviour = _text(golden_turn.get("hallucinationMetricBehaviorOverride")) or next(
        (b for b in behaviours if b), ""
    )
    items = []
    for outcome in turn.get("expectationOutcome") or []:
        if not isinstance(outcome, Mapping):
            continue
        expectation = outcome.get("expectation") or _NO_DATA
        kind, expected, observed = _golden_kind(expectation, outcome)
        scores = []
        invocation = outcome.get("toolInvocationResult")
        if isinstance(invocation, Mapping):
            own = expectation.get("expectationLevelMetricsThresholdsOverride") or _NO_DATA
            threshold = _first(
                [own, *expectation_levels],
                "toolInvocationParameterCorrectnessThreshold",
                _TOOL_INVOCATION_DEFAULT,
            )
            scores.append(
                _score(
                    "Parameter correctness",
                    invocation.get("parameterCorrectnessScore"),
                    f"≥ {_number(threshold)}",
                    invocation.get("outcome"),
                    invocation.get("explanation"),
                )
            )
        similarity = outcome.get("semanticSimilarityResult")  # deprecated, kept when set
        if isinstance(similarity, Mapping):
            scores.append(_similarity(similarity, turn_levels))
        status = _text(outcome.get("outcome"))
        if expectation.get("skipEvaluation"):
            status = status or "SKIPPED"
        items.append(
            _item(
                kind,
                expected,
                observed,
                status,
                limit,
                note=_text(expectation.get("note")),
                scores=scores,
            )
        )
    scores = []
    if isinstance(similarity := turn.get("semanticSimilarityResult"), Mapping):
        scores.append(_similarity(similarity, turn_levels))
    if isinstance(overall := turn.get("overallToolInvocationResult"), Mapping):
        threshold = _first(
            turn_levels, "overallToolInvocationCorrectnessThreshold", _TOOL_INVOCATION_DEFAULT
        )
        scores.append(
            _score(
                "Tool invocation",
                overall.get("toolInvocationScore"),
                f"≥ {_number(threshold)}",
                overall.get("outcome"),
            )
        )
    if "toolOrderedInvocationScore" in turn:
        scores.append(
            _score("Tools in order", turn["toolOrderedInvocationScore"], "not judged", "")
        )
    if isinstance(hallucination := turn.get("hallucinationResult"), Mapping):
        scores.append(_hallucination(hallucination, behaviour == _ENABLED))
    return {
        "number": number,
        "part": "",
        "inputs": _user_inputs(golden_turn),
        "outcomes": items,
        "scores": scores,
        "latency": _duration(turn["turnLatency"]) if "turnLatency" in turn else "",
        "tools": _latencies(turn),
        "error": _error(turn.get("errorInfo")),
    }


def _similarity(similarity: _Json, turn_levels: Sequence[_Json]) -> dict[str, str]:
    threshold = _first(
        turn_levels, "semanticSimilaritySuccessThreshold", _SEMANTIC_SIMILARITY_DEFAULT
    )
    label = _text(similarity.get("label"))
    explanation = _BETWEEN.join(p for p in (label, _text(similarity.get("explanation"))) if p)
    return _score(
        "Semantic similarity",
        similarity.get("score"),
        f"≥ {_number(threshold)} of 4",
        similarity.get("outcome"),
        explanation,
    )


def _hallucination(hallucination: _Json, counted: bool) -> dict[str, str]:
    """A hallucination score: 1 justified, 0 not justified (a FAIL when the metric counts),
    -1 nothing to assess (docs/semantics.md, the engine's rerun rules)."""
    score = hallucination.get("score")
    outcome = ""
    if counted and isinstance(score, int) and score in (0, 1):
        outcome = "PASS" if score == 1 else "FAIL"
    label = _text(hallucination.get("label"))
    explanation = _BETWEEN.join(p for p in (label, _text(hallucination.get("explanation"))) if p)
    threshold = "1 justified, counts" if counted else "1 justified, not counted"
    return _score("Hallucination", score, threshold, outcome, explanation)


def _latencies(holder: _Json) -> list[dict[str, str]]:
    """Each tool call's latency (``tool_call_latencies``) and each span's."""
    shown = []
    for call in holder.get("toolCallLatencies") or []:
        if isinstance(call, Mapping):
            shown.append(
                {
                    "what": _text(call.get("tool") or call.get("displayName")),
                    "latency": _duration(call.get("executionLatency", "")),
                }
            )
    for span in holder.get("spanLatencies") or []:
        if isinstance(span, Mapping):
            identifier = span.get("resource") or span.get("model") or span.get("callback")
            what = _text(identifier or span.get("displayName"))
            kind = _text(span.get("type"))
            shown.append(
                {
                    "what": f"{kind.lower()} {what}".strip(),
                    "latency": _duration(span.get("executionLatency", "")),
                }
            )
    return shown


def _scenario(result: _Json, evaluation: _Json, limit: int) -> dict[str, Any]:
    """A scenario result: its task and facts, expectations, rubrics and verdicts."""
    scenario = result.get("scenarioResult") or _NO_DATA
    task = _text(scenario.get("task")) or _text(
        (evaluation.get("scenario") or _NO_DATA).get("task")
    )
    items = []
    for outcome in scenario.get("expectationOutcomes") or []:
        if not isinstance(outcome, Mapping):
            continue
        expectation = outcome.get("expectation") or _NO_DATA
        observed_call = outcome.get("observedToolCall")
        if "toolExpectation" in expectation or isinstance(observed_call, Mapping):
            tool = expectation.get("toolExpectation") or _NO_DATA
            observed = observed_call.get("toolCall") if isinstance(observed_call, Mapping) else None
            items.append(
                _item(
                    "tool_call",
                    tool.get("expectedToolCall"),
                    observed,
                    _text(outcome.get("outcome")),
                    limit,
                )
            )
        else:
            items.append(
                _item(
                    "agent_response",
                    expectation.get("agentResponse"),
                    outcome.get("observedAgentResponse"),
                    _text(outcome.get("outcome")),
                    limit,
                )
            )
    scores = [
        _score(
            f"Rubric: {cut(_text(rubric.get('rubric')), 200)}",
            rubric.get("score"),
            "of 1",
            "",
            rubric.get("scoreExplanation"),
        )
        for rubric in scenario.get("rubricOutcomes") or []
        if isinstance(rubric, Mapping)
    ]
    for name, field in (
        ("User goal", "userGoalSatisfactionResult"),
        ("Task completion", "taskCompletionResult"),
    ):
        if isinstance(verdict := scenario.get(field), Mapping):
            label = _text(verdict.get("label"))
            explanation = _BETWEEN.join(p for p in (label, _text(verdict.get("explanation"))) if p)
            scores.append(_score(name, verdict.get("score"), "", "", explanation))
    thresholds = result.get("evaluationMetricsThresholds") or _NO_DATA
    override = evaluation.get("evaluationMetricsThresholdOverride") or _NO_DATA
    behaviour = _text(
        override.get("scenarioHallucinationMetricBehavior")
        or thresholds.get("scenarioHallucinationMetricBehavior")
    )
    for index, hallucination in enumerate(scenario.get("hallucinationResult") or []):
        if isinstance(hallucination, Mapping):
            shown = _hallucination(hallucination, behaviour == _ENABLED)
            shown["name"] = f"Hallucination, turn {index + 1}"
            scores.append(shown)
    verdicts = [
        (name, "yes" if scenario[field] else "no")
        for name, field in (
            ("All expectations met", "allExpectationsSatisfied"),
            ("Task completed", "taskCompleted"),
        )
        if field in scenario
    ]
    milestones = [
        {
            "goal": cut(_text((m.get("milestone") or _NO_DATA).get("goal")), 400),
            "status": _text(m.get("status")) or "MILESTONE_STATUS_UNSPECIFIED",
            "justification": cut(_text(m.get("justification")), 400),
        }
        for m in scenario.get("milestoneResults") or []
        if isinstance(m, Mapping)
    ]
    facts = [
        f"{_text(f.get('name'))}: {_text(f.get('value'))}"
        for f in scenario.get("userFacts") or []
        if isinstance(f, Mapping)
    ]
    return {
        "task": cut(task, limit),
        "facts": facts,
        "outcomes": items,
        "scores": scores,
        "verdicts": verdicts,
        "milestones": milestones,
        "tools": _latencies(scenario),
    }


def result_view(
    result: _Json,
    evaluation: _Json | None = None,
    *,
    first_turn: int = 1,
    limit: int = TEXT_LIMIT,
) -> dict[str, Any]:
    """What :func:`render_view` shows of ``result``: plain values only (strings, lists, dicts).

    ``evaluation`` is the result's evaluation (its golden's user inputs and thresholds, its
    tags), or None when it is not at hand (deleted, or not read): the result alone is shown.
    The result's ``turnReplayResults`` and the evaluation's ``golden.turns`` are the turns from
    number ``first_turn`` on, in step (a page of a large result holds only its own turns)."""
    evaluation = evaluation or _NO_DATA
    name = _text(result.get("name"))
    status = result_status(result)
    golden_evaluation = evaluation.get("golden") or _NO_DATA
    golden_turns = [t for t in golden_evaluation.get("turns") or [] if isinstance(t, Mapping)]
    own = _golden_thresholds(evaluation.get("evaluationMetricsThresholdOverride"))
    recorded = _golden_thresholds(result.get("evaluationMetricsThresholds"))
    # Turn and expectation levels, most specific first: the evaluation's, then the result's.
    levels = [own[0], own[1], recorded[0], recorded[1]]
    behaviours = [own[2], recorded[2]]
    turns = []
    golden = result.get("goldenResult") or _NO_DATA
    for index, turn in enumerate(golden.get("turnReplayResults") or []):
        if isinstance(turn, Mapping):
            golden_turn = golden_turns[index] if index < len(golden_turns) else _NO_DATA
            turns.append(
                _golden_turn(
                    first_turn + index,
                    turn,
                    golden_turn=golden_turn,
                    levels=levels,
                    behaviours=behaviours,
                    limit=limit,
                )
            )
    criteria = [
        {
            "name": _text(c.get("evaluationExpectation")),
            "prompt": cut(_text(c.get("prompt")), limit),
            "outcome": _text(c.get("outcome")),
            "explanation": cut(_text(c.get("explanation")), limit),
        }
        for holder in (golden, result.get("scenarioResult") or _NO_DATA)
        for c in holder.get("evaluationExpectationResults") or []
        if isinstance(c, Mapping)
    ]
    persona = result.get("persona")
    return {
        "name": name,
        "display_name": _text(result.get("displayName")) or name.rsplit("/", 1)[-1],
        # The evaluation's ID and the result's: unique within a report of several runs.
        "anchor": "result-" + re.sub(r"[^A-Za-z0-9_-]", "-", "-".join(name.split("/")[7::2])),
        "status": status,
        "evaluation": name.rsplit("/results/", 1)[0] if "/results/" in name else "",
        "evaluation_display_name": _text(evaluation.get("displayName")),
        "tags": [_text(t) for t in evaluation.get("tags") or []],
        "run": _text(result.get("evaluationRun")),
        "created": _text(result.get("createTime")),
        "persona": _text(persona.get("displayName") or persona.get("name"))
        if isinstance(persona, Mapping)
        else "",
        "error": _error(result.get("errorInfo"), result.get("error"))
        or (
            {
                "reason": "no error details recorded",
                "message": "",
                "user_message": "",
                "session": "",
            }
            if status == "ERROR"
            else None
        ),
        "turns": turns,
        "scenario": _scenario(result, evaluation, limit) if "scenarioResult" in result else None,
        "criteria": criteria,
        "outcome_metadata": _text(result.get("outcomeMetadata")),
    }


def render_view(
    view: Mapping[str, Any], *, heading: int = 2, head: bool = True
) -> markupsafe.Markup:
    """The HTML of a :func:`result_view`: a ``<section class="result">`` whose turn headings
    are ``<h{heading}>``; without its status and title line when not ``head`` (a page whose
    own heading says them)."""
    template = _TEMPLATES.get_template("result.html")
    return markupsafe.Markup(template.render(view=view, heading=heading, head=head))  # noqa: S704 - autoescaped


def render_result(
    result: _Json,
    evaluation: _Json | None = None,
    *,
    heading: int = 2,
    limit: int = TEXT_LIMIT,
) -> markupsafe.Markup:
    """``result`` (with its ``evaluation``) as HTML: :func:`result_view`, then
    :func:`render_view`."""
    return render_view(result_view(result, evaluation, limit=limit), heading=heading)


def render_latency_report(report: object) -> markupsafe.Markup:
    """A run's ``LatencyReport`` as a table (p50, p90, p99 and calls of each tool, callback,
    guardrail and model); empty when there is none."""
    if not isinstance(report, Mapping) or not report:
        return markupsafe.Markup("")
    rows = []
    for kind, field, label in (
        ("Tool", "toolLatencies", "toolDisplayName"),
        ("Callback", "callbackLatencies", "stage"),
        ("Guardrail", "guardrailLatencies", "guardrailDisplayName"),
        ("Model", "llmCallLatencies", "model"),
    ):
        for entry in report.get(field) or []:
            if not isinstance(entry, Mapping):
                continue
            name = _tool_name(entry) if kind == "Tool" else _text(entry.get("guardrail"))
            metrics = entry.get("latencyMetrics") or _NO_DATA
            rows.append(
                {
                    "kind": kind,
                    "what": name or _text(entry.get(label)),
                    "label": _text(entry.get(label)),
                    "p50": _duration(metrics.get("p50Latency", "")),
                    "p90": _duration(metrics.get("p90Latency", "")),
                    "p99": _duration(metrics.get("p99Latency", "")),
                    "calls": _number(metrics.get("callCount", 0)),
                }
            )
    template = _TEMPLATES.get_template("latency.html")
    sessions = _number(report.get("sessionCount", 0))
    return markupsafe.Markup(template.render(rows=rows, sessions=sessions))  # noqa: S704
