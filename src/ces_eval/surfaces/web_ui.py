"""The web view at ``/ui``: apps, their evaluations, datasets and runs, a run's results, a
result's turns (expected beside observed), and each evaluation's pass rate over its runs.

Read-only and server-rendered (Jinja2 templates in ``web/``, charts drawn as SVG on the server by
pygal): no script runs in the page and nothing is fetched from elsewhere, so it works offline.
Every page reads through the same handlers and boundary steps as the API (tokens, per-project
authorization, in-flight limits): a browser presents a token as REST does, in ``Authorization``
or as ``?access_token=`` (kept in the page's links). What a page shows is what the official
client would read.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from ces_eval.access.authorization import project_of
from ces_eval.contract.encoded import message_of
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.logs import CALL_KEY, Call
from ces_eval.surfaces.asgi import credentials, send_body
from ces_eval.surfaces.boundary import Boundary, Inputs
from ces_eval.transcoding import printer

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from starlette.types import Receive, Scope, Send

    from ces_eval.access import Caller, Handler

__all__ = ["UI_PATH", "WebView"]

UI_PATH = "/ui"
_SERVICE = "/google.cloud.ces.v1beta.EvaluationService/"
_HTML = b"text/html; charset=utf-8"
_NO_STORE = [(b"cache-control", b"no-store")]
_LISTED = 1000  # items a page lists of each collection (the API's largest page)
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("web")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_NONE = "\N{EN DASH}"  # shown for nothing
_SCRIPT = re.compile(r"<script\b.*?</script>", re.DOTALL)
_Outcome = evaluation_pb2.EvaluationResult.Outcome
_State = evaluation_pb2.EvaluationRun.EvaluationRunState
_Execution = evaluation_pb2.EvaluationResult.ExecutionState


def _named(enum: Any, number: int) -> str:  # noqa: ANN401 - a generated enum wrapper
    """An enum value's name; its number when the enum has none for it (open enums)."""
    try:
        name: str = enum.Name(number)
    except ValueError:
        return str(number)
    return name


@functools.cache
def _pygal() -> Any:  # noqa: ANN401 - the pygal module (untyped)
    """pygal, imported on the first chart. Its import appends a finder to ``sys.meta_path``
    that only has the ``find_module`` method Python 3.12 no longer calls (3.11 warns each time
    it falls back to it, on every later import); ces-eval uses none of the plugins it serves,
    so finders without ``find_spec`` are dropped again."""
    import pygal  # noqa: PLC0415 - see above

    sys.meta_path[:] = [finder for finder in sys.meta_path if hasattr(finder, "find_spec")]
    return pygal


@dataclass(frozen=True)
class _Page:
    template: str
    values: dict[str, Any]


def _pass_rate(passed: int, finished: int) -> float | None:
    return passed / finished if finished else None


def _percent(rate: float | None) -> str:
    return _NONE if rate is None else f"{rate:.0%}"


def _json(message: Message) -> str:
    return json.dumps(printer.to_dict(message), indent=2, ensure_ascii=False)


def _pass_rate_chart(points: list[tuple[str, float]]) -> str:
    """An SVG line of pass rates (0 to 100 %) over runs, oldest first; "" for none."""
    if not points:
        return ""
    pygal = _pygal()
    style = pygal.style.Style(
        background="white",
        plot_background="white",
        colors=("#1a73e8",),
        font_family="system-ui, sans-serif",
    )
    chart = pygal.Line(
        style=style,
        width=720,
        height=260,
        range=(0, 100),
        show_legend=False,
        x_label_rotation=20,
        js=[],  # no script from elsewhere: the page works offline
        disable_xml_declaration=True,
        explicit_size=True,
    )
    chart.title = "Pass rate over runs (%)"
    chart.x_labels = [label for label, _ in points]
    chart.add("pass rate", [round(rate * 100, 1) for _, rate in points])
    svg: str = chart.render(is_unicode=True)
    # pygal writes its settings for its tooltip script into the SVG; that script is not loaded
    # (js=[] above), so they are dropped: the page runs no script at all.
    return _SCRIPT.sub("", svg)


class WebView:
    """The ``/ui`` pages over the core's ``handlers``, each request through ``boundary``;
    ``apps`` lists the apps that hold an evaluation (the index)."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        boundary: Boundary,
        apps: Callable[[], Awaitable[list[str]]],
    ) -> None:
        self._handlers = handlers
        self._boundary = boundary
        self._apps = apps

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            answer = b"The web view only reads.\n"
            await send_body(send, 405, b"text/plain", answer, [(b"allow", b"GET")])
            return
        path = scope["path"].removeprefix(UI_PATH).strip("/")
        params = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        token = next((value for key, value in params if key == "access_token"), "")

        def inputs() -> Inputs:
            authorization, user = credentials(scope, params)
            return Inputs(authorization, user, None)

        async def work(caller: Caller) -> _Page:
            return await self._page(path, caller)

        line: Call | None = scope.get(CALL_KEY)  # logs.HttpRequestLog: the request line
        outcome = await self._boundary.serve(f"GET {scope['path']}", inputs, work, line=line)
        suffix = f"?access_token={urllib.parse.quote(token)}" if token else ""
        if isinstance(outcome, ServiceError):
            status = outcome.code.http_status
            page = _Page("error.html", {"error": outcome, "status": status})
        else:
            status, page = 200, outcome
        html = _TEMPLATES.get_template(page.template).render(
            **page.values, ui=UI_PATH, suffix=suffix, percent=_percent
        )
        await send_body(send, status, _HTML, html.encode(), _NO_STORE, line=line)

    async def _call(self, method: str, request: Message, caller: Caller) -> Any:  # noqa: ANN401 - the method's response message
        return message_of(await self._handlers[_SERVICE + method](request, caller))

    async def _page(self, path: str, caller: Caller) -> _Page:
        parts = path.split("/") if path else []
        if not parts:
            return await self._index(caller)
        if len(parts) == 6 and parts[4] == "apps":
            return await self._app(path, caller)
        if len(parts) == 8 and parts[6] == "evaluations":
            return await self._evaluation(path, caller)
        if len(parts) == 8 and parts[6] == "evaluationRuns":
            return await self._run(path, caller)
        if len(parts) == 10 and parts[6] == "evaluations" and parts[8] == "results":
            return await self._result(path, caller)
        raise ServiceError.not_found("page", f"{UI_PATH}/{path}")

    async def _index(self, caller: Caller) -> _Page:
        principal = caller.principal
        apps = [
            app
            for app in await self._apps()
            if principal is None or principal.may(project_of(app) or "", write=False)
        ]
        return _Page("index.html", {"apps": apps})

    async def _app(self, app: str, caller: Caller) -> _Page:
        evaluations = await self._call(
            "ListEvaluations",
            service_pb2.ListEvaluationsRequest(parent=app, page_size=_LISTED),
            caller,
        )
        datasets = await self._call(
            "ListEvaluationDatasets",
            service_pb2.ListEvaluationDatasetsRequest(parent=app, page_size=_LISTED),
            caller,
        )
        runs = await self._call(
            "ListEvaluationRuns",
            service_pb2.ListEvaluationRunsRequest(
                parent=app, page_size=_LISTED, order_by="create_time desc"
            ),
            caller,
        )
        return _Page(
            "app.html",
            {
                "app": app,
                "evaluations": [
                    {
                        "name": e.name,
                        "display_name": e.display_name,
                        "kind": e.WhichOneof("inputs") or _NONE,
                        "last": _named(_Outcome, e.last_completed_result.evaluation_status)
                        if e.HasField("last_completed_result")
                        else _NONE,
                    }
                    for e in sorted(evaluations.evaluations, key=lambda e: e.display_name)
                ],
                "datasets": [
                    {"display_name": d.display_name, "count": len(d.evaluations)}
                    for d in datasets.evaluation_datasets
                ],
                "runs": [_run_row(run) for run in runs.evaluation_runs],
            },
        )

    async def _evaluation(self, name: str, caller: Caller) -> _Page:
        evaluation = await self._call(
            "GetEvaluation", service_pb2.GetEvaluationRequest(name=name), caller
        )
        results = await self._call(
            "ListEvaluationResults",
            service_pb2.ListEvaluationResultsRequest(
                parent=name, page_size=_LISTED, order_by="create_time"
            ),
            caller,
        )
        by_run: dict[str, list[int]] = {}  # run → [passed, finished], first seen first
        for result in results.evaluation_results:
            if result.evaluation_run and result.evaluation_status != _Outcome.OUTCOME_UNSPECIFIED:
                tally = by_run.setdefault(result.evaluation_run, [0, 0])
                tally[0] += result.evaluation_status == _Outcome.PASS
                tally[1] += 1
        points = [
            (run.rsplit("/", 1)[1], rate)
            for run, (passed, finished) in by_run.items()
            if (rate := _pass_rate(passed, finished)) is not None and math.isfinite(rate)
        ]
        return _Page(
            "evaluation.html",
            {
                "evaluation": evaluation,
                "kind": evaluation.WhichOneof("inputs") or _NONE,
                "chart": _pass_rate_chart(points),
                "results": [_result_row(r) for r in results.evaluation_results],
            },
        )

    async def _run(self, name: str, caller: Caller) -> _Page:
        run = await self._call(
            "GetEvaluationRun", service_pb2.GetEvaluationRunRequest(name=name), caller
        )
        app = name.rsplit("/evaluationRuns/", 1)[0]
        results = await self._call(
            "ListEvaluationResults",
            service_pb2.ListEvaluationResultsRequest(
                parent=f"{app}/evaluations/-",
                page_size=_LISTED,
                filter=f'evaluation_run = "{name}"',
            ),
            caller,
        )
        return _Page(
            "run.html",
            {
                "run": _run_row(run),
                "results": [_result_row(r) for r in results.evaluation_results],
            },
        )

    async def _result(self, name: str, caller: Caller) -> _Page:
        result = await self._call(
            "GetEvaluationResult", service_pb2.GetEvaluationResultRequest(name=name), caller
        )
        turns = []
        for index, turn in enumerate(result.golden_result.turn_replay_results):
            outcomes = []
            for outcome in turn.expectation_outcome:
                observed = {
                    field.json_name: printer.to_dict(value)
                    for field, value in outcome.ListFields()
                    if field.name.startswith("observed_")
                }
                outcomes.append(
                    {
                        "outcome": _named(_Outcome, outcome.outcome),
                        "expected": _json(outcome.expectation),
                        "observed": json.dumps(observed, indent=2, ensure_ascii=False),
                    }
                )
            turns.append({"index": index + 1, "outcomes": outcomes})
        return _Page("result.html", {"result": _result_row(result), "turns": turns})


def _run_row(run: evaluation_pb2.EvaluationRun) -> dict[str, Any]:
    progress = run.progress
    finished = progress.passed_count + progress.failed_count
    total = progress.total_count
    done = progress.completed_count + progress.error_count + progress.cancelled_count
    return {
        "name": run.name,
        "display_name": run.display_name or run.name.rsplit("/", 1)[1],
        "state": _named(_State, run.state),
        "done": done,
        "total": total,
        "progress": round(100 * done / total) if total else 0,
        "pass_rate": _pass_rate(progress.passed_count, finished),
    }


def _result_row(result: evaluation_pb2.EvaluationResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "display_name": result.display_name or result.name.rsplit("/", 1)[1],
        "evaluation": result.name.rsplit("/results/", 1)[0],
        "run": result.evaluation_run,
        "status": _named(_Outcome, result.evaluation_status),
        "state": _named(_Execution, result.execution_state),
    }
