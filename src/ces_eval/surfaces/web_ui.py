"""The web view at ``/ui``: apps, their evaluations (searched by name and tag), datasets and runs
(filtered by state, tag and day), a run's results, two runs compared, a result as the
conversation it was (rendered by :mod:`ces_eval.report.render`, as the HTML report of
``ces-eval run`` renders it), and pass rates by day (docs/web-ui.md). Every page has a
breadcrumb trail back to the pages above it (:func:`_crumbs`); a page showing a queued or
running run reloads itself until it is done (:func:`_refresh`).

Read-only and server-rendered (Jinja2 templates in ``web/``, charts drawn as SVG on the server by
pygal and shown as ``data:`` images): no script runs in the page and nothing is fetched from
elsewhere, so it works offline. Its forms are plain GETs, read into the API's own list
filters (:mod:`ces_eval.surfaces.web_forms`).
Every page reads through the same handlers and boundary steps as the API (tokens, per-project
authorization, in-flight limits): a browser presents a token as REST does, in ``Authorization``
or as ``?access_token=`` (kept in the page's links and forms). What a page shows is what the
official client would read.

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
import datetime
import functools
import hashlib
import math
import re
import sys
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
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
    evaluation_config_pb2,
    evaluation_pb2,
    tool_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.logs import CALL_KEY, Call
from ces_eval.offload import off_loop
from ces_eval.report import compare, render
from ces_eval.surfaces.asgi import credentials, send_body
from ces_eval.surfaces.boundary import Boundary, Inputs
from ces_eval.surfaces.web_forms import (
    RUN_STATES,
    EvaluationSearch,
    RunFilter,
    compared_runs,
    quoted,
)
from ces_eval.transcoding import printer

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.message import Message
    from google.protobuf.timestamp_pb2 import Timestamp
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
_ErrorType = evaluation_config_pb2.EvaluationErrorInfo.ErrorType


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
_RUN_FIELDS = ("name", "display_name", "state", "progress", "create_time", "error_info", "error")
_RUN_ROW = _keep(_Run.DESCRIPTOR, dict.fromkeys(_RUN_FIELDS))
_RUN_COMPARED = _keep(_Run.DESCRIPTOR, dict.fromkeys((*_RUN_FIELDS, "evaluation_run_summaries")))
_RUN_NAME = _keep(_Run.DESCRIPTOR, {"name": None})
_RUN_TITLE = _keep(_Run.DESCRIPTOR, dict.fromkeys(("name", "display_name")))
# A result as lists show it (_RESULT_ROW is what the result page reads of its own).
_RESULT_FIELDS = (
    "name",
    "display_name",
    "evaluation_run",
    "evaluation_status",
    "execution_state",
    "create_time",
    "error_info",
)
_RESULT_LISTED = _keep(
    _R.DESCRIPTOR, {**dict.fromkeys(_RESULT_FIELDS), "error": {"code": None, "message": None}}
)
_Dataset = evaluation_pb2.EvaluationDataset
_DATASET_ROW = _keep(_Dataset.DESCRIPTOR, dict.fromkeys(("display_name", "evaluations")))
_EVALUATION_ROW = _keep(
    _E.DESCRIPTOR,
    {
        "name": None,
        "display_name": None,
        "description": None,
        "tags": None,
        "golden": {},  # kept empty: which of them is set
        "scenario": {},
    },
)
# An evaluation as lists show it: with its newest results, of which only their outcome.
_EVALUATION_LISTED = _keep(
    _E.DESCRIPTOR,
    {
        "name": None,
        "display_name": None,
        "tags": None,
        "golden": {},
        "scenario": {},
        "last_ten_results": dict.fromkeys(_RESULT_FIELDS),
    },
)
_TAGGED = _keep(_E.DESCRIPTOR, dict.fromkeys(("name", "evaluation_runs")))
_EVALUATION_TITLE = _keep(_E.DESCRIPTOR, dict.fromkeys(("name", "display_name")))
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


def _pass_rate_chart(points: list[tuple[datetime.date, float]], title: str) -> str:
    """An SVG line of pass rates (0 to 100 %) by day, oldest first, the days on the x axis
    at their distance in time (a run's ID says nothing of when it ran); "" for none."""
    if not points:
        return ""
    pygal = _pygal()
    style = pygal.style.Style(
        background="white",
        plot_background="white",
        colors=("#1a73e8",),
        font_family="system-ui, sans-serif",
    )
    chart = pygal.DateLine(
        style=style,
        width=720,
        height=260,
        range=(0, 100),
        show_legend=False,
        x_label_rotation=20,
        dots_size=4,
        x_value_formatter=datetime.date.isoformat,
        js=[],  # no script from elsewhere: the page works offline
        disable_xml_declaration=True,
        explicit_size=True,
    )
    chart.title = title
    days = [day for day, _ in points]
    if len(days) == 1:  # a day either side, so that the one day stands in the middle
        days = [days[0] - _ONE_DAY, days[0], days[0] + _ONE_DAY]
    if len(days) <= _DAYS_LABELLED:  # each day its label; more are left to pygal's ticks
        chart.x_labels = days
    chart.add("pass rate", [(day, round(rate * 100, 1)) for day, rate in points])
    svg: str = chart.render(is_unicode=True)
    # pygal writes its settings for its tooltip script into the SVG; that script is not loaded
    # (js=[] above), so they are dropped: the page runs no script at all.
    return _SCRIPT.sub("", svg)


_DAYS_LABELLED = 14
_ONE_DAY = datetime.timedelta(days=1)


def _crumbs(path: str, labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """The trail of the page at ``path`` (under /ui): each page above it, as a label and the
    resource name its page is at; ``labels`` gives display names of those resources."""
    parts = path.split("/") if path else []
    trail = [("Apps", "")]
    if len(parts) < 6 or parts[4] != "apps":
        return trail
    app = "/".join(parts[:6])
    trail.append((f"App {parts[5]}", app))
    if len(parts) >= 7:
        collection = _COLLECTIONS.get(parts[6])
        if collection is not None:
            trail.append((collection, f"{app}/{parts[6]}"))
        elif parts[6] == "compare":
            trail += [("Runs", f"{app}/evaluationRuns"), ("Compare", f"{app}/compare")]
    if len(parts) >= 8:
        name = "/".join(parts[:8])
        trail.append((labels.get(name) or parts[7], name))
    if len(parts) >= 10:
        name = "/".join(parts[:10])
        trail.append((labels.get(name) or f"Result {parts[9]}", name))
    return trail


_COLLECTIONS = {"evaluations": "Evaluations", "evaluationRuns": "Runs"}


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

        def link(name: str, query: Mapping[str, str] | None = None) -> str:
            """The link to ``name``'s page with ``query``, the token kept."""
            given = {**(query or {}), **({"access_token": token} if token else {})}
            where = f"{UI_PATH}/{name}" if name else UI_PATH
            return where + (f"?{urllib.parse.urlencode(given)}" if given else "")

        def paged(name: str, number: int) -> str:
            """The link to page ``number`` of ``name``'s page, the token kept."""
            return f"{UI_PATH}/{name}?page={number}" + (f"&{kept}" if kept else "")

        if isinstance(outcome, ServiceError):
            status = outcome.code.http_status
            page = _Page("error.html", {"error": outcome, "status": status})
        else:
            status, page = 200, outcome
        template = self._templates[page.template]
        values = {"refresh": None, "more": False, **page.values}
        values |= {"ui": UI_PATH, "suffix": suffix, "style": _STYLE, "token": token}
        values |= {"percent": _percent, "paged": paged, "link": link}
        values["crumbs"] = _crumbs(path, page.values.get("labels", {}))
        html = await off_loop(page.heavy, template.render, values)
        await send_body(send, status, _HTML, html.encode(), _HEADERS, line=line)

    async def _call(
        self, method: str, request: Message, caller: Caller, service: str = _SERVICE
    ) -> Response:
        return await self._handlers[service + method](request, caller)

    async def _page(  # noqa: PLR0911 - one return per kind of page
        self, path: str, caller: Caller, params: list[tuple[str, str]]
    ) -> _Page:
        parts = path.split("/") if path else []
        if not parts:
            return await self._index(caller)
        app = "/".join(parts[:6])
        if len(parts) == 6 and parts[4] == "apps":
            return await self._app(app, caller)
        if len(parts) == 7 and parts[4] == "apps":
            if parts[6] == "evaluations":
                return await self._evaluations(app, caller, EvaluationSearch.of(params))
            if parts[6] == "evaluationRuns":
                return await self._runs(app, caller, RunFilter.of(params))
            if parts[6] == "compare":
                return await self._compare(app, caller, compared_runs(params, app))
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

    async def _list_evaluations(
        self, app: str, caller: Caller, evaluation_filter: str = "", *, recent: bool = False
    ) -> Response:
        """The app's evaluations matching ``evaluation_filter``; with ``recent``, each with its
        newest results (``last_ten_results``), what its last run's outcome is read from."""
        request = service_pb2.ListEvaluationsRequest(
            parent=app,
            page_size=_LISTED,
            evaluation_filter=evaluation_filter,
            last_ten_results=recent,
        )
        return await self._call("ListEvaluations", request, caller)

    async def _list_runs(self, app: str, caller: Caller, run_filter: str = "") -> Response:
        """The app's runs matching ``run_filter``, newest first."""
        request = service_pb2.ListEvaluationRunsRequest(
            parent=app, page_size=_LISTED, order_by="create_time desc", filter=run_filter
        )
        return await self._call("ListEvaluationRuns", request, caller)

    async def _app(self, app: str, caller: Caller) -> _Page:
        evaluations = await self._list_evaluations(app, caller, recent=True)
        datasets = await self._call(
            "ListEvaluationDatasets",
            service_pb2.ListEvaluationDatasetsRequest(parent=app, page_size=_LISTED),
            caller,
        )
        runs = await self._list_runs(app, caller)
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

    async def _evaluations(self, app: str, caller: Caller, search: EvaluationSearch) -> _Page:
        evaluations = await self._list_evaluations(app, caller, search.filter(), recent=True)
        heavy = _heavy(evaluations)
        rows = await off_loop(heavy, _evaluation_rows, evaluations)
        values = {"app": app, "search": search, "evaluations": rows}
        return _Page("evaluations.html", values | _more(evaluations), heavy)

    async def _runs(self, app: str, caller: Caller, run_filter: RunFilter) -> _Page:
        runs = await self._list_runs(app, caller, run_filter.filter())
        tagged: set[str] | None = None
        if run_filter.tag:
            # A run has no tags: it is one of the tag's when it produced a result of an
            # evaluation with the tag, which that evaluation's evaluation_runs lists.
            evaluations = await self._list_evaluations(
                app, caller, f"tags:{quoted(run_filter.tag)}"
            )
            tagged = await off_loop(_heavy(evaluations), _runs_of, evaluations)
        heavy = _heavy(runs)
        rows = await off_loop(heavy, _run_rows, runs)
        if tagged is not None:
            rows = [row for row in rows if row["name"] in tagged]
        values = {
            "app": app,
            "filter": run_filter,
            "states": RUN_STATES,
            "runs": rows,
            "chart": _chart(_run_points(rows), "Pass rate of these runs by day (%)"),
            "refresh": _refresh(rows),
        }
        return _Page("runs.html", values | _more(runs), heavy)

    async def _compare(self, app: str, caller: Caller, pair: tuple[str, str] | None) -> _Page:
        runs = await self._list_runs(app, caller)
        choices = await off_loop(_heavy(runs), _run_rows, runs)
        values: dict[str, Any] = {"app": app, "choices": choices[:_CHOICES], "pair": None}
        if pair is None:
            return _Page("compare.html", values | {"refresh": None})
        both = [
            await self._call(
                "GetEvaluationRun", service_pb2.GetEvaluationRunRequest(name=name), caller
            )
            for name in pair
        ]
        evaluations = await self._list_evaluations(app, caller)
        heavy = _heavy(*both, evaluations)
        values |= await off_loop(heavy, _compare_values, both, evaluations)
        # The form shows the pair compared, even when it is older than the runs it offers.
        offered = {run["name"] for run in values["choices"]}
        for run in values["pair"]:
            if run["name"] not in offered:
                values["choices"].append(run)
                offered.add(run["name"])
        return _Page("compare.html", values, heavy)

    async def _evaluation(self, name: str, caller: Caller) -> _Page:
        evaluation = await self._call(
            "GetEvaluation", service_pb2.GetEvaluationRequest(name=name), caller
        )
        results = await self._call(
            "ListEvaluationResults",
            service_pb2.ListEvaluationResultsRequest(
                parent=name, page_size=_LISTED, order_by="create_time desc"
            ),
            caller,
        )
        runs = await self._list_runs(name.rsplit("/evaluations/", 1)[0], caller)
        heavy = _heavy(evaluation, results, runs)
        values = await off_loop(heavy, _evaluation_values, evaluation, results)
        values["titles"] = await off_loop(heavy, _titles, runs, "evaluation_runs")
        return _Page("evaluation.html", values | _more(results), heavy)

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
                filter=f"evaluation_run = {quoted(name)}",
            ),
            caller,
        )
        evaluations = await self._list_evaluations(app, caller)
        heavy = _heavy(run, results, evaluations)
        values = await off_loop(heavy, _run_values, run, results)
        values["titles"] = await off_loop(heavy, _titles, evaluations, "evaluations")
        values["previous"] = await self._previous(app, values["run"]["started"], caller)
        return _Page("run.html", values | {"app": app} | _more(results), heavy)

    async def _previous(self, app: str, started: str, caller: Caller) -> str:
        """The run of ``app`` before one created at ``started`` (the newest created before
        it), which its page offers to compare with; "" when there is none."""
        if not started:
            return ""
        before = await self._call(
            "ListEvaluationRuns",
            service_pb2.ListEvaluationRunsRequest(
                parent=app,
                page_size=1,
                order_by="create_time desc",
                filter=f"create_time < {quoted(started)}",
            ),
            caller,
        )
        found = _items(before, "evaluation_runs")
        return _Run.FromString(_slim(found[0], _RUN_NAME)).name if found else ""

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
_RECENT_RUNS = 20  # runs the app's page lists (its runs page lists them all)
_CHOICES = 100  # runs the comparison's form offers, newest first
_REFRESH_SECONDS = 5  # how often a page showing a queued or running run reloads itself
_ACTIVE = frozenset({"QUEUED", "RUNNING"})


def _more(response: Response) -> dict[str, bool]:
    """``more``: the list holds more than the page shows (the API's next page)."""
    if not isinstance(response, Encoded):
        return {"more": bool(getattr(response, "next_page_token", ""))}
    if response.page is not None:
        return {"more": bool(getattr(response.page.rest, "next_page_token", ""))}
    token = response.message_class.DESCRIPTOR.fields_by_name["next_page_token"].number
    return {"more": any(n == token and a < b for n, _, a, b in limits.wire_fields(response.data))}


def _refresh(runs: list[dict[str, Any]]) -> int | None:
    """Seconds after which a page showing ``runs`` reloads: while one of them is queued or
    running, so that the page follows it; None once all are done."""
    return _REFRESH_SECONDS if any(run["state"] in _ACTIVE for run in runs) else None


def _app_values(app: str, lists: Mapping[str, Response]) -> dict[str, Any]:
    """An app's page from its lists (:data:`_APP_LISTS`)."""

    def rows(field: str, keep: _Keep, kind: type[Message]) -> list[Any]:
        return _rows(lists[field], field, keep, kind)

    runs = _run_rows(lists["evaluation_runs"])
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
        "evaluations": _evaluation_rows(lists["evaluations"]),
        "more_evaluations": _more(lists["evaluations"])["more"],
        "datasets": [
            {"display_name": d.display_name, "count": len(d.evaluations)}
            for d in rows("evaluation_datasets", _DATASET_ROW, _Dataset)
        ],
        "runs": runs[:_RECENT_RUNS],
        "run_count": len(runs),
        "more_runs": _more(lists["evaluation_runs"])["more"] or len(runs) > _RECENT_RUNS,
        "chart": _chart(_run_points(runs), "Pass rate of the app's runs by day (%)"),
        "refresh": _refresh(runs),
        "search": EvaluationSearch(),
        "filter": RunFilter(),
        "states": RUN_STATES,
    }


def _evaluation_rows(response: Response) -> list[dict[str, Any]]:
    """The rows of a ListEvaluations answer (with ``last_ten_results``), by display name."""
    listed = _rows(response, "evaluations", _EVALUATION_LISTED, _E)
    return [
        {
            "name": e.name,
            "display_name": e.display_name,
            "kind": e.WhichOneof("inputs") or _NONE,
            "tags": list(e.tags),
            "last": _last_outcome(e.last_ten_results),
        }
        for e in sorted(listed, key=lambda e: (e.display_name, e.name))
    ]


def _last_outcome(recent: Sequence[evaluation_pb2.EvaluationResult]) -> dict[str, str]:
    """What an evaluation's latest run made of it, from its newest results (newest first):
    the status of that run's results of it by the rule comparisons use (ERROR before FAILED
    before PASSED: :func:`ces_eval.report.compare.results_status`), or, when none has an
    outcome yet, the newest one's state (RUNNING, CANCELLED). Before: the newest *completed*
    result, which showed PASS for an evaluation whose latest run ended in ERROR."""
    if not recent:
        return {"status": _NONE, "run": "", "result": ""}
    newest = recent[0]
    run = newest.evaluation_run
    same = [r for r in recent if r.evaluation_run == run] if run else [newest]
    status = compare.results_status(cast("dict[str, Any]", printer.to_dict(r)) for r in same)
    return {
        "status": status or str(_listed_result(newest)["outcome"]),
        "run": run,
        "result": newest.name,
    }


def _day(stamp: Timestamp) -> datetime.date | None:
    return stamp.ToDatetime(datetime.UTC).date() if stamp.seconds or stamp.nanos else None


def _when(stamp: Timestamp) -> str:
    """A time as pages show it: to the second, UTC."""
    if not (stamp.seconds or stamp.nanos):
        return _NONE
    return stamp.ToDatetime(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _titles(response: Response, field: str) -> dict[str, str]:
    """The display names of the items of a List answer's ``field`` (evaluations or runs), by
    name: what pages show for a name."""
    kind, keep = (_E, _EVALUATION_TITLE) if field == "evaluations" else (_Run, _RUN_TITLE)
    return {item.name: item.display_name for item in _rows(response, field, keep, kind)}


def _runs_of(evaluations: Response) -> set[str]:
    """The runs that produced a result of the evaluations a ListEvaluations answer holds."""
    rows = _rows(evaluations, "evaluations", _TAGGED, _E)
    return {run for evaluation in rows for run in evaluation.evaluation_runs}


def _run_rows(response: Response) -> list[dict[str, Any]]:
    return [_run_row(run) for run in _rows(response, "evaluation_runs", _RUN_ROW, _Run)]


def _run_points(runs: list[dict[str, Any]]) -> list[tuple[datetime.date, int, int]]:
    return [(run["day"], run["passed"], run["judged"]) for run in runs if run["day"]]


def _chart(points: Iterable[tuple[datetime.date, int, int]], title: str) -> str:
    """The base64 of a pass-rate chart (:func:`_pass_rate_chart`) over ``points`` (a day, the
    results that passed, the results judged), summed by day; "" when nothing was judged."""
    by_day: dict[datetime.date, list[int]] = {}
    for day, passed, judged in points:
        tally = by_day.setdefault(day, [0, 0])
        tally[0] += passed
        tally[1] += judged
    rates = [(day, passed / judged) for day, (passed, judged) in by_day.items() if judged]
    svg = _pass_rate_chart(sorted(rates), title)
    return base64.b64encode(svg.encode()).decode() if svg else ""


def _evaluation_values(evaluation: Response, results: Response) -> dict[str, Any]:
    shown = _E.FromString(_slim(_encoding(evaluation), _EVALUATION_ROW))
    listed = _rows(results, "evaluation_results", _RESULT_LISTED, _R)
    rows = [_listed_result(r) for r in listed]
    points = [
        (day, row["outcome"] == "PASS", 1)
        for row, result in zip(rows, listed, strict=True)
        if row["outcome"] in _JUDGED and (day := _day(result.create_time)) is not None
    ]
    return {
        "evaluation": shown,
        "kind": shown.WhichOneof("inputs") or _NONE,
        "tags": list(shown.tags),
        "chart": _chart(points, "Pass rate by day (%)"),
        "results": rows,
        "labels": {shown.name: shown.display_name},
    }


def _run_values(run: Response, results: Response) -> dict[str, Any]:
    shown = _run_row(_Run.FromString(_slim(_encoding(run), _RUN_ROW)))
    rows = [_listed_result(r) for r in _rows(results, "evaluation_results", _RESULT_LISTED, _R)]
    return {
        "run": shown,
        "results": rows,
        "refresh": _refresh([shown]),
        "labels": {shown["name"]: shown["display_name"]},
    }


def _compare_values(both: list[Response], evaluations: Response) -> dict[str, Any]:
    """Two runs side by side: each evaluation of either, by what became of it from the first
    run to the second (:func:`ces_eval.report.compare.change`), from each run's
    ``evaluation_run_summaries``."""
    runs = [_Run.FromString(_slim(_encoding(r), _RUN_COMPARED)) for r in both]
    titles = _titles(evaluations, "evaluations")
    statuses = [
        {
            name: compare.summary_status(cast("dict[str, Any]", printer.to_dict(summary)))
            for name, summary in run.evaluation_run_summaries.items()
        }
        for run in runs
    ]
    groups: dict[str, list[dict[str, Any]]] = {change: [] for change in compare.CHANGES}
    either = statuses[0].keys() | statuses[1].keys()
    for name in sorted(either, key=lambda n: (titles.get(n, n), n)):
        before, after = statuses[0].get(name), statuses[1].get(name)
        change = compare.change(before, after)
        if change is not None:
            groups[change].append(
                {
                    "name": name,
                    "display_name": titles.get(name) or name.rsplit("/", 1)[1],
                    "a": before or _NONE,
                    "b": after or _NONE,
                }
            )
    rows = [_run_row(run) for run in runs]
    return {
        "pair": rows,
        "groups": [(change, _CHANGE_TITLES[change], groups[change]) for change in compare.CHANGES],
        "refresh": _refresh(rows),
    }


_CHANGE_TITLES = {
    "NEWLY_FAILING": "Newly failing",
    "NEWLY_PASSING": "Newly passing",
    "STILL_FAILING": "Still failing",
    "STILL_PASSING": "Still passing",
    "NEW": "Only in B",
    "GONE": "Only in A",
}
_JUDGED = frozenset({"PASS", "FAIL", "ERROR"})


def _run_row(run: evaluation_pb2.EvaluationRun) -> dict[str, Any]:
    progress = run.progress
    judged = progress.passed_count + progress.failed_count + progress.error_count
    total = progress.total_count
    done = progress.completed_count + progress.error_count + progress.cancelled_count
    error = ""
    if run.HasField("error_info"):
        info = run.error_info
        error = f"{_named(_ErrorType, info.error_type)}: {info.error_message}"
    elif run.error.code or run.error.message:
        error = run.error.message or f"code {run.error.code}"
    return {
        "name": run.name,
        "id": run.name.rsplit("/", 1)[1],
        "display_name": run.display_name or run.name.rsplit("/", 1)[1],
        "state": _named(_State, run.state),
        "started": run.create_time.ToJsonString() if run.HasField("create_time") else "",
        "when": _when(run.create_time),
        "day": _day(run.create_time),
        "error": limits.cut(error, _SHOWN_CHARS),
        "done": done,
        "total": total,
        "passed": progress.passed_count,
        "failed": progress.failed_count,
        "errors": progress.error_count,
        "judged": judged,
        # Errors count against the pass rate, as they fail a gate (report/compare.py).
        "pass_rate": _pass_rate(progress.passed_count, judged),
    }


def _listed_result(result: evaluation_pb2.EvaluationResult) -> dict[str, Any]:
    """A result as a list shows it: its outcome is ERROR, CANCELLED or RUNNING when its
    execution says so (its evaluation_status is then unset), else PASS or FAIL; an error
    with its reason."""
    execution = _named(_Execution, result.execution_state)
    if execution in ("ERROR", "CANCELLED", "RUNNING"):
        outcome = execution
    elif result.evaluation_status:
        outcome = _named(_Outcome, result.evaluation_status)
    else:
        outcome = _NONE
    error = ""
    if result.HasField("error_info"):
        info = result.error_info
        error = f"{_named(_ErrorType, info.error_type)}: {info.error_message}"
    elif result.error.message:
        error = result.error.message
    return {
        "name": result.name,
        "display_name": result.display_name or result.name.rsplit("/", 1)[1],
        "evaluation": result.name.rsplit("/results/", 1)[0],
        "run": result.evaluation_run,
        "outcome": outcome,
        "when": _when(result.create_time),
        "error": limits.cut(error, _SHOWN_CHARS),
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
