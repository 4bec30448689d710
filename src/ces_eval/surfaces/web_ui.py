"""The web view at ``/ui``: apps, their evaluations, datasets and runs, a run's results, a
result as the conversation it was (rendered by :mod:`ces_eval.report.render`, as the HTML report
of ``ces-eval run`` renders it), and each evaluation's pass rate over its runs.

Read-only and server-rendered (Jinja2 templates in ``web/``, charts drawn as SVG on the server by
pygal and shown as ``data:`` images): no script runs in the page and nothing is fetched from
elsewhere, so it works offline.
Every page reads through the same handlers and boundary steps as the API (tokens, per-project
authorization, in-flight limits): a browser presents a token as REST does, in ``Authorization``
or as ``?access_token=`` (kept in the page's links). What a page shows is what the official
client would read.

Every page stays small whatever the data holds: a result's outcomes are paged
(:data:`OUTCOMES_PER_PAGE`, ``?page=N``), long texts are cut, and only the fields a page shows
are parsed from the stored bytes (:func:`_slim`); a page built from a large answer is built and
rendered in a worker thread (:func:`ces_eval.offload.off_loop`), never on the event loop. Every
answer carries a strict Content-Security-Policy (:data:`CONTENT_SECURITY_POLICY`),
``Referrer-Policy: no-referrer`` and ``X-Content-Type-Options: nosniff`` (docs/security.md).
"""

from __future__ import annotations

import base64
import collections
import functools
import hashlib
import math
import re
import sys
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jinja2

from ces_eval.access.authorization import project_of
from ces_eval.contract import limits
from ces_eval.contract.encoded import Encoded, varint
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_pb2,
    agent_service_pb2,
    app_version_pb2,
    evaluation_pb2,
    tool_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.logs import CALL_KEY, Call
from ces_eval.offload import off_loop
from ces_eval.report import render
from ces_eval.surfaces.asgi import credentials, send_body
from ces_eval.surfaces.boundary import Boundary, Inputs
from ces_eval.transcoding import printer

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.message import Message
    from starlette.types import Receive, Scope, Send

    from ces_eval.access import Caller, Handler
    from ces_eval.contract.encoded import Response

__all__ = ["CONTENT_SECURITY_POLICY", "OUTCOMES_PER_PAGE", "UI_PATH", "WebView"]

UI_PATH = "/ui"
_SERVICE = "/google.cloud.ces.v1beta.EvaluationService/"
_AGENT_SERVICE = "/google.cloud.ces.v1beta.AgentService/"
_HTML = b"text/html; charset=utf-8"
_LISTED = 1000  # items a page lists of each collection (the API's largest page)
# Expectation outcomes one result page shows (a turn without any counts as one): a result may
# hold a million (1,000 turns of 1,000, within every write limit), which rendered whole made
# 225 MB of HTML. Pages are ?page=N, from 1.
OUTCOMES_PER_PAGE = 50
# Characters of one expected or observed block, and of a display name in a listing, shown
# before they are cut (limits.cut says how many more): a page stays small whatever a field
# holds (a string may hold 262,144 characters). The API serves them whole.
_SHOWN_CHARS = 4_000
_NAME_CHARS = 200
_WEB = Path(__file__).with_name("web")
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_WEB),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_TEMPLATES.filters["short"] = functools.partial(limits.cut, limit=_NAME_CHARS)
_TEMPLATES.filters["long"] = functools.partial(limits.cut, limit=_SHOWN_CHARS)
# The pages' one stylesheet (with the rendering of a result's, shared with the HTML report),
# inlined in each and allowed by its hash alone: every answer's
# Content-Security-Policy lets nothing else run or load (no script, no other style, no
# fetch, no frame, no form elsewhere); images only from the page's own data: URIs (the
# pass-rate chart's SVG). Links carry ?access_token=, so no Referer is ever sent.
_STYLE = (_WEB / "style.css").read_text(encoding="utf-8") + render.STYLESHEET
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]
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
    """A page to render: its template and values; ``heavy`` when it was built from answers
    too large for the event loop (:data:`limits.LOOP_BYTES`), so it is rendered off it too."""

    template: str
    values: dict[str, Any]
    heavy: bool = False


# -- reading only what a page shows ------------------------------------------------------------

# Field numbers kept of a message, each with what is kept of it (None: all of it).
_Keep = dict[int, "_Keep | None"]


def _keep(message_type: Descriptor, fields: Mapping[str, Any]) -> _Keep:
    """``fields`` (a name, with None or the fields kept of it) as field numbers."""
    kept: _Keep = {}
    for name, inner in fields.items():
        field = message_type.fields_by_name[name]
        nested = field.message_type
        if inner is None or nested is None:
            kept[field.number] = None
        else:
            kept[field.number] = _keep(nested, inner)
    return kept


def _slim(data: bytes, keep: _Keep, start: int = 0, end: int = -1) -> bytes:
    """The encoding ``data[start:end]`` with only the fields ``keep`` names: a page's rows
    need a few fields of messages that may hold a million others, which parsing whole holds
    the interpreter for tens of milliseconds (protobuf's parser never lets go of it)."""
    parts: list[bytes] = []
    begin = start
    for number, wire, first, last in limits.wire_fields(data, start, end):
        if number in keep:
            inner = keep[number]
            if inner is None or wire != 2:
                parts.append(data[begin:last])
            else:
                body = _slim(data, inner, first, last)
                parts += (varint(number << 3 | 2), varint(len(body)), body)
        begin = last
    return b"".join(parts)


def _encoding(response: Response) -> bytes:
    return response.data if isinstance(response, Encoded) else response.SerializeToString()


def _items(response: Response, field: str) -> list[bytes]:
    """The encodings of the elements of a List response's repeated ``field``."""
    if isinstance(response, Encoded) and response.page is not None:
        return list(response.page.items)
    data = _encoding(response)
    kind = response.message_class if isinstance(response, Encoded) else type(response)
    number = kind.DESCRIPTOR.fields_by_name[field].number
    return [data[a:b] for n, _, a, b in limits.wire_fields(data) if n == number]


def _heavy(*responses: Response) -> bool:
    return any(isinstance(r, Encoded) and r.size > limits.LOOP_BYTES for r in responses)


_E = evaluation_pb2.Evaluation
_R = evaluation_pb2.EvaluationResult
_Run = evaluation_pb2.EvaluationRun
_Turn = _R.GoldenResult.TurnReplayResult
_RESULT_ROW = _keep(
    _R.DESCRIPTOR,
    dict.fromkeys(
        ("name", "display_name", "evaluation_run", "evaluation_status", "execution_state")
    ),
)
_RUN_ROW = _keep(_Run.DESCRIPTOR, dict.fromkeys(("name", "display_name", "state", "progress")))
_Dataset = evaluation_pb2.EvaluationDataset
_DATASET_ROW = _keep(_Dataset.DESCRIPTOR, dict.fromkeys(("display_name", "evaluations")))
_EVALUATION_ROW = _keep(
    _E.DESCRIPTOR,
    {
        "name": None,
        "display_name": None,
        "description": None,
        "golden": {},  # kept empty: which of them is set
        "scenario": {},
        "last_completed_result": {"evaluation_status": None},
    },
)
_GOLDEN_RESULT = _R.DESCRIPTOR.fields_by_name["golden_result"].number
_Agent = agent_pb2.Agent
_AGENT_ROW = _keep(_Agent.DESCRIPTOR, dict.fromkeys(("name", "display_name")))
_Tool = tool_pb2.Tool
# A tool's kind is the member of its tool_type oneof it sets: each kept empty, to tell which.
_TOOL_ROW = _keep(
    _Tool.DESCRIPTOR,
    {
        "name": None,
        "display_name": None,
        **{f.name: {} for f in _Tool.DESCRIPTOR.oneofs_by_name["tool_type"].fields},
    },
)
_Version = app_version_pb2.AppVersion
# A version's snapshot (the whole app) is never read for its row.
_VERSION_ROW = _keep(
    _Version.DESCRIPTOR, dict.fromkeys(("name", "display_name", "create_time", "creator"))
)


def _rows(response: Response, field: str, keep: _Keep, kind: type[Message]) -> list[Any]:
    return [kind.FromString(_slim(item, keep)) for item in _items(response, field)]


_Turns = tuple[list[tuple[int, int]], list[int]]
_COUNTED: collections.OrderedDict[bytes, _Turns] = collections.OrderedDict()
_COUNTED_KEPT = 64  # results whose turns are kept counted (a few kB each)
_COUNTED_LOCK = threading.Lock()


def _turns(data: bytes) -> _Turns:
    """Where each turn of the result encoded in ``data`` is, and how many entries it makes on
    the pages (its outcomes, 1 without any). Counting parses every turn (~25 ms for a million
    outcomes), so the counts are kept for the next of its pages, by a digest of ``data``
    (never ``data`` itself: a result may be 4 MB)."""
    digest = hashlib.blake2b(data, digest_size=16).digest()
    with _COUNTED_LOCK:
        if (known := _COUNTED.get(digest)) is not None:
            _COUNTED.move_to_end(digest)
            return known
    spans = []
    for n, _, first, last in limits.wire_fields(data):
        if n == _GOLDEN_RESULT:
            turns = limits.wire_fields(data, first, last)  # turn_replay_results: field 1
            spans += [(a, b) for t, _, a, b in turns if t == 1]
    counts = [max(1, len(_Turn.FromString(data[a:b]).expectation_outcome)) for a, b in spans]
    with _COUNTED_LOCK:
        _COUNTED[digest] = (spans, counts)
        while len(_COUNTED) > _COUNTED_KEPT:
            _COUNTED.popitem(last=False)
    return spans, counts


# What a result's page reads of the result besides its golden turns (each parsed alone), and
# of its evaluation besides the golden turns on the page.
_RESULT_HEAD = _keep(
    _R.DESCRIPTOR,
    {f.name: None for f in _R.DESCRIPTOR.fields if f.name != "golden_result"}
    | {"golden_result": {}},  # kept empty: whether it is set
)
_EVALUATION_HEAD = _keep(
    _E.DESCRIPTOR,
    dict.fromkeys(
        ("name", "display_name", "tags", "evaluation_metrics_threshold_override", "scenario")
    ),
)
_GOLDEN = _E.DESCRIPTOR.fields_by_name["golden"].number
_GOLDEN_TURNS = _E.Golden.DESCRIPTOR.fields_by_name["turns"].number


def _golden_turns(data: bytes, first: int, last: int) -> list[Any]:
    """Turns ``first`` to ``last`` (from 0, inclusive) of the golden of the evaluation encoded
    in ``data``, each parsed alone."""
    turns: list[Any] = []
    index = 0
    for n, _, a, b in limits.wire_fields(data):
        if n != _GOLDEN:
            continue
        for t, _, c, d in limits.wire_fields(data, a, b):
            if t == _GOLDEN_TURNS:
                if first <= index <= last:
                    turns.append(_E.GoldenTurn.FromString(data[c:d]))
                index += 1
    return turns


def _result_page(data: bytes, number: int, evaluation: bytes | None = None) -> dict[str, Any]:
    """The values of page ``number`` of the result encoded in ``data`` (with its evaluation,
    encoded in ``evaluation``, when it is at hand): the turns whose outcomes fall on the page
    (:data:`OUTCOMES_PER_PAGE`, a turn without any counting as one), each parsed alone, with
    the golden turns they replayed, rendered by :func:`ces_eval.report.render.render_view`."""
    head = _R.FromString(_slim(data, _RESULT_HEAD))
    spans, counts = _turns(data)
    total = sum(counts)
    pages = max(1, math.ceil(total / OUTCOMES_PER_PAGE))
    if number > pages:
        raise ServiceError.not_found("page", f"page {number} of {head.name} ({pages} pages)")
    low, high = (number - 1) * OUTCOMES_PER_PAGE, number * OUTCOMES_PER_PAGE
    turns = []
    replayed = []  # the page's turns, each holding only its outcomes on the page
    before = 0  # entries of the turns before this one
    for index, ((a, b), count) in enumerate(zip(spans, counts, strict=True)):
        if before + count > low and before < high:
            first, last = max(low - before, 0), min(high - before, count)
            turn = _Turn.FromString(data[a:b])
            held = len(turn.expectation_outcome)
            del turn.expectation_outcome[last:]
            del turn.expectation_outcome[:first]
            replayed.append(turn)
            turns.append(
                {
                    "index": index + 1,
                    "first": first + 1,
                    "last": last,
                    "count": count if held else 0,
                }
            )
        before += count
    shown = _rest(head)
    if head.HasField("golden_result"):
        shown["goldenResult"] = {"turnReplayResults": [_rest(t) for t in replayed]}
    first_turn = turns[0]["index"] if turns else 1
    known: dict[str, Any] | None = None
    if evaluation is not None:
        known = _rest(_E.FromString(_slim(evaluation, _EVALUATION_HEAD)))
        golden = _golden_turns(evaluation, first_turn - 1, first_turn - 2 + len(turns))
        known["golden"] = {"turns": [_rest(t) for t in golden]}
    view = render.result_view(shown, known, first_turn=first_turn, limit=_SHOWN_CHARS)
    for meta, turn_view in zip(turns, view["turns"], strict=True):
        meta["outcomes"] = turn_view["outcomes"]
        if meta["count"] and (meta["first"] > 1 or meta["last"] < meta["count"]):
            turn_view["part"] = (
                f"outcomes {meta['first']}\N{EN DASH}{meta['last']} of {meta['count']}"
            )
    name = head.name
    return {
        "result": view,
        "rendered": render.render_view(view, heading=2, head=False),
        "app": name.split("/evaluations/", 1)[0],
        # Display names of the pages above, for a trail back to them.
        "labels": {view["evaluation"]: view["evaluation_display_name"], name: view["display_name"]},
        "turns": turns,
        "page": number,
        "pages": pages,
        "shown": (low + 1, min(high, total)),
        "total": total,
    }


def _page_number(params: list[tuple[str, str]]) -> int:
    """``?page=N`` (from 1; 1 when absent); INVALID_ARGUMENT for anything else."""
    text = next((value for key, value in params if key == "page"), "1")
    if not (len(text) <= 9 and text.isascii() and text.isdigit() and int(text) > 0):
        problem = "Must be a whole number from 1."
        raise ServiceError.invalid_argument(
            f"page {limits.shown(text)!r}: {problem}", [FieldViolation("page", problem)]
        )
    return int(text)


def _pass_rate(passed: int, finished: int) -> float | None:
    return passed / finished if finished else None


def _percent(rate: float | None) -> str:
    return _NONE if rate is None else f"{rate:.0%}"


def _rest(message: Message) -> dict[str, Any]:
    """``message`` as its REST JSON (what :mod:`ces_eval.report` reads)."""
    return cast("dict[str, Any]", printer.to_dict(message))


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
        # Compiled once, at start: a template's first compilation takes tens of milliseconds,
        # which the first page of its kind would otherwise spend on the event loop.
        self._templates = {
            name: _TEMPLATES.get_template(name)
            for name in _TEMPLATES.list_templates(extensions=["html"])
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            answer = b"The web view only reads.\n"
            headers = [*_HEADERS, (b"allow", b"GET")]
            await send_body(send, 405, b"text/plain", answer, headers)
            return
        path = scope["path"].removeprefix(UI_PATH).strip("/")
        params = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        token = next((value for key, value in params if key == "access_token"), "")

        def inputs() -> Inputs:
            authorization, user = credentials(scope, params)
            return Inputs(authorization, user, None)

        async def work(caller: Caller) -> _Page:
            return await self._page(path, caller, params)

        line: Call | None = scope.get(CALL_KEY)  # logs.HttpRequestLog: the request line
        outcome = await self._boundary.serve(f"GET {scope['path']}", inputs, work, line=line)
        kept = f"access_token={urllib.parse.quote(token)}" if token else ""
        suffix = f"?{kept}" if kept else ""

        def paged(name: str, number: int) -> str:
            """The link to page ``number`` of ``name``'s page, the token kept."""
            return f"{UI_PATH}/{name}?page={number}" + (f"&{kept}" if kept else "")

        if isinstance(outcome, ServiceError):
            status = outcome.code.http_status
            page = _Page("error.html", {"error": outcome, "status": status})
        else:
            status, page = 200, outcome
        template = self._templates[page.template]
        values = {**page.values, "ui": UI_PATH, "suffix": suffix, "style": _STYLE}
        values |= {"percent": _percent, "paged": paged}
        html = await off_loop(page.heavy, template.render, values)
        await send_body(send, status, _HTML, html.encode(), _HEADERS, line=line)

    async def _call(
        self, method: str, request: Message, caller: Caller, service: str = _SERVICE
    ) -> Response:
        return await self._handlers[service + method](request, caller)

    async def _page(self, path: str, caller: Caller, params: list[tuple[str, str]]) -> _Page:
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
            return await self._result(path, caller, _page_number(params))
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
        # What the AgentService keeps of the app, beside its evaluations.
        around = [
            await self._call(
                f"List{kind}",
                request(parent=app, page_size=_LISTED),
                caller,
                _AGENT_SERVICE,
            )
            for kind, request in (
                ("Agents", agent_service_pb2.ListAgentsRequest),
                ("Tools", agent_service_pb2.ListToolsRequest),
                ("AppVersions", agent_service_pb2.ListAppVersionsRequest),
            )
        ]
        lists = dict(zip(_APP_LISTS, (evaluations, datasets, runs, *around), strict=True))
        heavy = _heavy(*lists.values())
        values = await off_loop(heavy, _app_values, app, lists)
        return _Page("app.html", values, heavy)

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
        heavy = _heavy(evaluation, results)
        values = await off_loop(heavy, _evaluation_values, evaluation, results)
        return _Page("evaluation.html", values, heavy)

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
        heavy = _heavy(run, results)
        return _Page("run.html", await off_loop(heavy, _run_values, run, results), heavy)

    async def _result(self, name: str, caller: Caller, number: int) -> _Page:
        result = await self._call(
            "GetEvaluationResult", service_pb2.GetEvaluationResultRequest(name=name), caller
        )
        try:
            evaluation: Response | None = await self._call(
                "GetEvaluation",
                service_pb2.GetEvaluationRequest(name=name.rsplit("/results/", 1)[0]),
                caller,
            )
        except ServiceError as error:
            if error.code.name != "NOT_FOUND":
                raise
            evaluation = None  # deleted since: the result is shown alone
        heavy = _heavy(result) or (evaluation is not None and _heavy(evaluation))
        data = await off_loop(heavy, _encoding, result)
        given = None if evaluation is None else await off_loop(heavy, _encoding, evaluation)
        values = await off_loop(heavy, _result_page, data, number, given)
        return _Page("result.html", values, heavy)


# The lists an app's page reads, by the field of their List responses holding the items.
_APP_LISTS = (
    "evaluations",
    "evaluation_datasets",
    "evaluation_runs",
    "agents",
    "tools",
    "app_versions",
)


def _app_values(app: str, lists: Mapping[str, Response]) -> dict[str, Any]:
    """An app's page from its lists (:data:`_APP_LISTS`)."""

    def rows(field: str, keep: _Keep, kind: type[Message]) -> list[Any]:
        return _rows(lists[field], field, keep, kind)

    evaluation_rows = rows("evaluations", _EVALUATION_ROW, _E)
    return {
        "agents": [
            {"display_name": a.display_name, "id": a.name.rsplit("/", 1)[-1]}
            for a in rows("agents", _AGENT_ROW, _Agent)
        ],
        "tools": [
            {
                "display_name": t.display_name or _NONE,
                "id": t.name.rsplit("/", 1)[-1],
                "kind": t.WhichOneof("tool_type") or _NONE,
            }
            for t in rows("tools", _TOOL_ROW, _Tool)
        ],
        "versions": [
            {
                "display_name": v.display_name or v.name.rsplit("/", 1)[-1],
                "created": v.create_time.ToJsonString() if v.HasField("create_time") else _NONE,
                "creator": v.creator or _NONE,
            }
            for v in rows("app_versions", _VERSION_ROW, _Version)
        ],
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
            for e in sorted(evaluation_rows, key=lambda e: e.display_name)
        ],
        "datasets": [
            {"display_name": d.display_name, "count": len(d.evaluations)}
            for d in rows("evaluation_datasets", _DATASET_ROW, _Dataset)
        ],
        "runs": [_run_row(run) for run in rows("evaluation_runs", _RUN_ROW, _Run)],
    }


def _evaluation_values(evaluation: Response, results: Response) -> dict[str, Any]:
    shown = _E.FromString(_slim(_encoding(evaluation), _EVALUATION_ROW))
    rows = _rows(results, "evaluation_results", _RESULT_ROW, _R)
    by_run: dict[str, list[int]] = {}  # run → [passed, finished], first seen first
    for result in rows:
        if result.evaluation_run and result.evaluation_status != _Outcome.OUTCOME_UNSPECIFIED:
            tally = by_run.setdefault(result.evaluation_run, [0, 0])
            tally[0] += result.evaluation_status == _Outcome.PASS
            tally[1] += 1
    points = [
        (run.rsplit("/", 1)[1], rate)
        for run, (passed, finished) in by_run.items()
        if (rate := _pass_rate(passed, finished)) is not None and math.isfinite(rate)
    ]
    chart = _pass_rate_chart(points)
    return {
        "evaluation": shown,
        "kind": shown.WhichOneof("inputs") or _NONE,
        "chart": base64.b64encode(chart.encode()).decode() if chart else "",
        "results": [_result_row(r) for r in rows],
    }


def _run_values(run: Response, results: Response) -> dict[str, Any]:
    shown = _Run.FromString(_slim(_encoding(run), _RUN_ROW))
    rows = _rows(results, "evaluation_results", _RESULT_ROW, _R)
    return {"run": _run_row(shown), "results": [_result_row(r) for r in rows]}


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
