"""What ``ces-eval run`` asks for: the evaluations it selects and the RunEvaluationRequest it
sends (docs/gate.md, "Selecting evaluations" and "Run options"). Pure: the evaluations come in
as the server listed them (REST JSON).

Criteria of different kinds narrow each other (an evaluation must match each kind given); the
values of one kind widen (any of the ``--tag`` values, any of the ``--evaluation`` names). A
dataset is run as the server keeps it: ``--dataset`` takes no other criterion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ces_eval.gate._errors import RunNotDone

__all__ = ["APP_NAME", "RunOptions", "Selection", "qualify", "request_body", "select"]

APP_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/apps/[^/]+")
_ID = re.compile(r"[^/]+")


def qualify(app: str, collection: str, value: str, flag: str) -> str:
    """``value`` as a full resource name of ``app``'s ``collection``: an ID is put under the app,
    a full name must be of the app (the server refuses others, RunEvaluation's checks in
    docs/semantics.md; refused here first, in one line)."""
    if _ID.fullmatch(value):
        return f"{app}/{collection}/{value}"
    prefix = f"{app}/{collection}/"
    if value.startswith(prefix) and _ID.fullmatch(value.removeprefix(prefix)):
        return value
    raise RunNotDone(f"{flag} {value!r} is neither an ID nor a name under {prefix}")


@dataclass(frozen=True)
class Selection:
    """``--evaluation``, ``--tag``, ``--display-name-prefix`` and ``--dataset``."""

    evaluations: Sequence[str] = ()
    tags: Sequence[str] = ()
    display_name_prefix: str = ""
    dataset: str = ""

    def check(self) -> None:
        """Refuse what cannot be asked for."""
        if self.dataset and (self.evaluations or self.tags or self.display_name_prefix):
            raise RunNotDone(
                "--dataset runs the dataset as the server keeps it; it takes no --evaluation, "
                "--tag or --display-name-prefix"
            )

    def describe(self) -> str:
        """The criteria in words, for the line that says nothing matched."""
        words = [f"--evaluation {name}" for name in self.evaluations]
        words += [f"--tag {tag}" for tag in self.tags]
        if self.display_name_prefix:
            words.append(f"--display-name-prefix {self.display_name_prefix!r}")
        return " ".join(words) or "(all)"


def select(
    app: str,
    selection: Selection,
    listed: Sequence[Mapping[str, Any]],
    dataset: Mapping[str, Any] | None = None,
) -> list[Mapping[str, Any]]:
    """The evaluations of ``listed`` (every evaluation of ``app``) that the run plays: those of
    ``dataset`` in its order, or those matching ``selection`` in the listed order. An
    ``--evaluation`` that names none of them, or a selection matching nothing, is refused."""
    by_name = {str(evaluation.get("name")): evaluation for evaluation in listed}
    if dataset is not None:
        names = [str(name) for name in dataset.get("evaluations", [])]
        missing = [name for name in names if name not in by_name]
        if missing:
            raise RunNotDone(f"the dataset {dataset.get('name')} lists missing {missing[0]}")
        if not names:
            raise RunNotDone(f"the dataset {dataset.get('name')} holds no evaluation")
        return [by_name[name] for name in names]
    wanted = [qualify(app, "evaluations", name, "--evaluation") for name in selection.evaluations]
    for name in wanted:
        if name not in by_name:
            raise RunNotDone(f"--evaluation {name}: no such evaluation")
    chosen = [
        evaluation
        for evaluation in listed
        if (not wanted or evaluation.get("name") in wanted)
        and (not selection.tags or set(selection.tags) & set(evaluation.get("tags", [])))
        and str(evaluation.get("displayName", "")).startswith(selection.display_name_prefix)
    ]
    if not chosen:
        raise RunNotDone(f"no evaluation of {app} matches {selection.describe()}")
    return chosen


@dataclass(frozen=True)
class RunOptions:
    """The RunEvaluationRequest fields ``ces-eval run`` sets, one flag each (docs/gate.md)."""

    run_count: int | None = None
    golden_run_method: str = ""
    personas: Sequence[str] = ()
    task_count: int | None = None
    display_name: str = ""
    app_version: str = ""
    channel: str = ""
    tool_call_behaviour: str = ""
    latency_report: bool = False
    skip_unchanged: bool = False
    loss_report: bool = False

    def check(self) -> None:
        """Refuse the combinations the server would refuse, or that would mean nothing."""
        if self.run_count is not None and self.run_count < 1:
            raise RunNotDone("--run-count must be at least 1")
        if self.task_count is not None:
            if not self.personas:
                raise RunNotDone("--task-count applies to a --persona; give one")
            if self.task_count < 1:
                raise RunNotDone("--task-count must be at least 1")


def request_body(
    app: str,
    selection: Selection,
    chosen: Sequence[Mapping[str, Any]],
    options: RunOptions,
) -> dict[str, Any]:
    """The RunEvaluationRequest as REST JSON (``POST /v1beta/{app}:runEvaluation``, body ``*``:
    the app is in the path): the dataset or the chosen evaluations, and the run options set."""
    body: dict[str, Any] = {}
    if selection.dataset:
        body["evaluationDataset"] = qualify(
            app, "evaluationDatasets", selection.dataset, "--dataset"
        )
    else:
        body["evaluations"] = [str(evaluation["name"]) for evaluation in chosen]
    return {**body, **_run_fields(app, options)}


def _run_fields(app: str, options: RunOptions) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if options.display_name:
        body["displayName"] = options.display_name
    if options.app_version:
        body["appVersion"] = qualify(app, "versions", options.app_version, "--app-version")
    config = {}
    if options.channel:
        config["evaluationChannel"] = options.channel
    if options.tool_call_behaviour:
        config["toolCallBehaviour"] = options.tool_call_behaviour
    if config:
        body["config"] = config
    if options.run_count is not None:
        body["runCount"] = options.run_count
    if options.personas:
        body["personaRunConfigs"] = [
            {
                "persona": qualify(app, "evaluationPersonas", persona, "--persona"),
                **({"taskCount": options.task_count} if options.task_count else {}),
            }
            for persona in options.personas
        ]
    if options.loss_report:
        body["optimizationConfig"] = {"generateLossReport": True}
    if options.golden_run_method:
        body["goldenRunMethod"] = options.golden_run_method
    if options.latency_report:
        body["generateLatencyReport"] = True
    if options.skip_unchanged:
        body["evaluationRunCachingSettings"] = {"runCachingMode": "SKIP_IF_UNCHANGED"}
    return body
