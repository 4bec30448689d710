"""The web view's pages other than a result's, in process: the ``/ui`` app and REST as ``serve``
wires them (server._surfaces) over a real SQLite file, through httpx's ASGI transport. An app is
seeded through the emulator's REST methods (runs and results as a run would have written them):
breadcrumbs lead back from every page, an evaluation's last run says ERROR when it errored, the
search and run filters answer what the API's filters answer (and refuse what they refuse), two
runs are compared by the rule ``ces-eval run --baseline`` uses, and a page reloads itself only
while a run it shows is queued or running. With tokens, every link and form keeps the reader's
``?access_token=`` and another project's pages are refused."""

from __future__ import annotations

import asyncio
import datetime
import html
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.access import Tokens
from ces_eval.core.aip import pages
from ces_eval.core.service import Core
from ces_eval.errors import ServiceError
from ces_eval.filtering import Comparator, Restriction, parse
from ces_eval.server import ServerConfig, _surfaces
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.surfaces.http_app import BodyLimit
from ces_eval.surfaces.web_forms import EvaluationSearch, RunFilter, compared_runs, quoted
from ces_eval.surfaces.web_ui import CONTENT_SECURITY_POLICY
from tests.support.tokens import ALICE, BOB, write_token_file

APP = "projects/proj-a/locations/l/apps/shop"
RUNS = f"{APP}/evaluationRuns"
TODAY = datetime.datetime.now(datetime.UTC).date()
# Each evaluation: its tags and its outcome in runs r1 and r2 (None: not in that run).
EVALUATIONS = {
    "refund": ("Refund of 7", ["billing"], "FAIL", "PASS"),  # newly passing
    "status": ("Status of 42", ["orders"], "PASS", "ERROR"),  # newly failing: an error fails
    "cancel": ("Cancel an order", ["orders"], "PASS", None),  # only in A
    "fresh": ("Fresh flow", ["new"], None, "FAIL"),  # only in B
    "broken": ("Broken invoice", ["billing"], "FAIL", "FAIL"),  # still failing
    "greet": ('Greeting "hello"', ["orders"], "PASS", "PASS"),  # still passing
}


@dataclass
class Site:
    """The web view and REST of one seeded database."""

    ui: httpx.AsyncClient
    rest: httpx.AsyncClient

    async def page(self, path: str, **params: str) -> httpx.Response:
        return await self.ui.get(f"/ui/{path}", params=params)


@asynccontextmanager
async def served(database: Path, tokens: Tokens | None = None) -> AsyncIterator[Site]:
    storage = SqliteStorage(database)
    await storage.open()
    core = Core(storage, pages.PageTokens(await storage.secret()))
    _, rest, _, ui = _surfaces(ServerConfig(), core, tokens, None)
    base = "http://127.0.0.1:8080"
    try:
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=ui), base_url=base) as pages_,
            httpx.AsyncClient(transport=httpx.ASGITransport(BodyLimit(rest)), base_url=base) as api,
        ):
            yield Site(pages_, api)
    finally:
        await storage.close()


async def _seed(site: Site, headers: dict[str, str] | None = None) -> None:
    """The evaluations above, runs r1 and r2 with their results, r3 RUNNING and r4 ERROR."""

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await site.rest.post(path, json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        created: dict[str, Any] = answer.json()
        return created

    for key, (title, tags, _, _) in EVALUATIONS.items():
        golden = {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]}
        body = {"displayName": title, "tags": tags, "golden": golden}
        await post(f"/v1beta/{APP}/evaluations?evaluationId={key}", body)
    for index, run_id in enumerate(("r1", "r2"), start=2):
        outcomes = {k: v[index] for k, v in EVALUATIONS.items() if v[index] is not None}
        counts = {"PASS": "passedCount", "FAIL": "failedCount", "ERROR": "errorCount"}
        run = {
            "displayName": f"Nightly {run_id}",
            "state": "COMPLETED",
            "progress": {
                "totalCount": len(outcomes),
                "completedCount": sum(o != "ERROR" for o in outcomes.values()),
                **{
                    counts[o]: sum(v == o for v in outcomes.values())
                    for o in set(outcomes.values())
                },
            },
            "evaluationRunSummaries": {
                f"{APP}/evaluations/{k}": {counts[o]: 1} for k, o in outcomes.items()
            },
        }
        await post(f"/emulator/v1/{APP}/evaluationRuns?evaluationRunId={run_id}", run)
        for key, outcome in outcomes.items():
            result: dict[str, Any] = {
                "displayName": f"{key} in {run_id}",
                "evaluationRun": f"{RUNS}/{run_id}",
            }
            if outcome == "ERROR":
                result["executionState"] = "ERROR"
                result["errorInfo"] = {
                    "errorType": "RUNTIME_FAILURE",
                    "errorMessage": "The agent hung up.",
                }
            else:
                result |= {"executionState": "COMPLETED", "evaluationStatus": outcome}
            await post(f"/emulator/v1/{APP}/evaluations/{key}/results", result)
    running = {"displayName": "Still going", "state": "RUNNING", "progress": {"totalCount": 3}}
    await post(f"/emulator/v1/{APP}/evaluationRuns?evaluationRunId=r3", running)
    errored = {
        "displayName": "Stopped",
        "state": "ERROR",
        "errorInfo": {"errorType": "RUNTIME_FAILURE", "errorMessage": "The server stopped."},
    }
    await post(f"/emulator/v1/{APP}/evaluationRuns?evaluationRunId=r4", errored)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding the seeded app, made once; each test reads a copy."""
    database = tmp_path_factory.mktemp("web-pages") / "seeded.db"

    async def main() -> None:
        async with served(database) as site:
            await _seed(site)

    asyncio.run(main())
    return database


def visit(seeded: Path, tmp_path: Path, scenario: Callable[[Site], Awaitable[None]]) -> None:
    copy = tmp_path / "pages.db"
    shutil.copy(seeded, copy)

    async def main() -> None:
        async with served(copy) as site:
            await scenario(site)

    asyncio.run(main())


def _ok(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text[-2000:]
    return answer.text


def _crumbs(page: str) -> list[tuple[str, str | None]]:
    """The breadcrumb trail: each step's label and link (None for the page itself)."""
    nav = re.search(r'<nav class="crumbs"[^>]*>(.*?)</nav>', page, re.DOTALL)
    assert nav is not None
    steps = re.findall(
        r'<a href="([^"]*)">([^<]*)</a>|<span aria-current="page">([^<]*)</span>', nav[1]
    )
    return [
        (html.unescape(label or current), html.unescape(href) if href else None)
        for href, label, current in steps
    ]


def _table(page: str, table_id: str) -> list[str]:
    """The rows of the table ``table_id`` (after its header), each as its text."""
    found = re.search(rf'<table[^>]*id="{table_id}"[^>]*>(.*?)</table>', page, re.DOTALL)
    if found is None:
        return []
    rows = re.findall(r"<tr>(.*?)</tr>", found[1], re.DOTALL)[1:]
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for row in rows]


def _refreshes(page: str) -> bool:
    return '<meta http-equiv="refresh"' in page


def test_every_page_leads_back_to_its_app_and_apps(seeded: Path, tmp_path: Path) -> None:
    async def scenario(site: Site) -> None:
        app = ("App shop", f"/ui/{APP}")
        expected = {
            APP: [("Apps", "/ui"), ("App shop", None)],
            f"{APP}/evaluations": [("Apps", "/ui"), app, ("Evaluations", None)],
            RUNS: [("Apps", "/ui"), app, ("Runs", None)],
            f"{APP}/evaluations/refund": [
                ("Apps", "/ui"),
                app,
                ("Evaluations", f"/ui/{APP}/evaluations"),
                ("Refund of 7", None),
            ],
            f"{RUNS}/r1": [("Apps", "/ui"), app, ("Runs", f"/ui/{RUNS}"), ("Nightly r1", None)],
            f"{APP}/compare": [("Apps", "/ui"), app, ("Runs", f"/ui/{RUNS}"), ("Compare", None)],
        }
        for path, trail in expected.items():
            answer = await site.page(path)
            assert _crumbs(_ok(answer)) == trail, path
            assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert answer.headers["referrer-policy"] == "no-referrer"
        # A page that is not there still leads back.
        missing = await site.page(f"{APP}/evaluations/nothing")
        assert missing.status_code == 404
        assert _crumbs(missing.text)[:2] == [("Apps", "/ui"), app]
        # A run's results lead to their evaluations; an evaluation's results to their runs.
        run = _ok(await site.page(f"{RUNS}/r1"))
        assert f'href="/ui/{APP}/evaluations/refund"' in run
        assert any(row.startswith("refund in r1 Refund of 7 ") for row in _table(run, "results"))
        evaluation = _ok(await site.page(f"{APP}/evaluations/refund"))
        assert f'href="/ui/{RUNS}/r1"' in evaluation and f'href="/ui/{RUNS}/r2"' in evaluation
        rows = _table(evaluation, "results")
        assert [row.split(" 20", 1)[0] for row in rows] == [
            "refund in r2 Nightly r2",
            "refund in r1 Nightly r1",
        ]  # newest first, each with its run's name

    visit(seeded, tmp_path, scenario)


def test_an_evaluations_last_run_is_its_outcome_there_errors_included(
    seeded: Path, tmp_path: Path
) -> None:
    """Status of 42 passed in r1 and errored in r2: its last run is ERROR (its newest
    completed result, which the page showed before, passed)."""

    async def scenario(site: Site) -> None:
        app = _ok(await site.page(APP))
        rows = dict(row.split(" golden ", 1) for row in _table(app, "evaluations"))
        assert rows["Status of 42"] == "orders ERROR"
        assert rows["Refund of 7"] == "billing PASSED"
        assert rows["Cancel an order"] == "orders PASSED"  # its last run is r1
        assert rows["Fresh flow"] == "new FAILED"
        assert f'<a href="/ui/{RUNS}/r2"><span class="ERROR">ERROR</span></a>' in app
        read = await site.rest.get(f"/v1beta/{APP}/evaluations/status")
        assert read.json()["lastCompletedResult"]["evaluationStatus"] == "PASS"

        run = _ok(await site.page(f"{RUNS}/r2"))
        errored = [row for row in _table(run, "results") if "status in r2" in row]
        assert len(errored) == 1
        assert "ERROR RUNTIME_FAILURE: The agent hung up." in errored[0]
        stopped = _ok(await site.page(f"{RUNS}/r4"))
        assert 'id="state">ERROR<' in stopped
        assert re.search(r'id="run-error">RUNTIME_FAILURE: The server stopped.<', stopped)

    visit(seeded, tmp_path, scenario)


def _names(page: str, table_id: str = "evaluations") -> list[str]:
    return [row.split(" golden ", 1)[0] for row in _table(page, table_id)]


def test_evaluations_are_searched_by_name_and_tag_through_the_apis_filter(
    seeded: Path, tmp_path: Path
) -> None:
    async def scenario(site: Site) -> None:
        where = f"{APP}/evaluations"
        everything = _names(_ok(await site.page(where)))
        assert len(everything) == len(EVALUATIONS)
        assert _names(_ok(await site.page(where, q="Refund"))) == ["Refund of 7"]
        assert _names(_ok(await site.page(where, q="order"))) == ["Cancel an order"]
        assert _names(_ok(await site.page(where, q="broken"))) == ["Broken invoice"]  # the ID
        assert _names(_ok(await site.page(where, q='"hello"'))) == ['Greeting "hello"']
        orders = _names(_ok(await site.page(where, tag="orders")))
        assert orders == ["Cancel an order", 'Greeting "hello"', "Status of 42"]
        assert _names(_ok(await site.page(where, q="Status", tag="billing"))) == []
        assert _names(_ok(await site.page(where, q=r"\ OR name:*"))) == []  # text, not filter
        found = _ok(await site.page(where, q="Refund", tag="billing"))
        assert 'name="q" value="Refund"' in found and 'name="tag" value="billing"' in found
        # What the page shows is what the API's own filter shows.
        listed = await site.rest.get(
            f"/v1beta/{where}", params={"evaluationFilter": 'tags:"orders"'}
        )
        assert sorted(e["displayName"] for e in listed.json()["evaluations"]) == orders

        refused = await site.page(where, tag="x" * 257)
        assert refused.status_code == 400 and "INVALID_ARGUMENT" in refused.text

    visit(seeded, tmp_path, scenario)


def _runs(page: str) -> list[str]:
    return [row.split(" 20", 1)[0] for row in _table(page, "runs")]


def test_runs_are_filtered_by_state_tag_and_day(seeded: Path, tmp_path: Path) -> None:
    async def scenario(site: Site) -> None:
        newest_first = ["Stopped", "Still going", "Nightly r2", "Nightly r1"]
        assert _runs(_ok(await site.page(RUNS))) == newest_first
        assert _runs(_ok(await site.page(RUNS, state="RUNNING"))) == ["Still going"]
        assert _runs(_ok(await site.page(RUNS, state="COMPLETED"))) == newest_first[2:]
        # A tag's runs: those that produced a result of an evaluation with the tag.
        assert _runs(_ok(await site.page(RUNS, tag="new"))) == ["Nightly r2"]
        assert _runs(_ok(await site.page(RUNS, tag="orders"))) == newest_first[2:]
        assert _runs(_ok(await site.page(RUNS, tag="none-such"))) == []
        day = TODAY.isoformat()
        before = (TODAY - datetime.timedelta(days=1)).isoformat()
        after = (TODAY + datetime.timedelta(days=1)).isoformat()
        assert _runs(_ok(await site.page(RUNS, **{"from": day, "to": day}))) == newest_first
        assert _runs(_ok(await site.page(RUNS, to=before))) == []
        assert _runs(_ok(await site.page(RUNS, **{"from": after}))) == []
        both = _ok(await site.page(RUNS, state="COMPLETED", tag="new", **{"from": day}))
        assert _runs(both) == ["Nightly r2"]
        assert "<option selected>COMPLETED</option>" in both
        assert f'name="from" value="{day}"' in both

        for params in ({"state": "DONE"}, {"from": "07/12/2026"}, {"from": after, "to": day}):
            refused = await site.page(RUNS, **params)
            assert refused.status_code == 400, params
            assert "INVALID_ARGUMENT" in refused.text

    visit(seeded, tmp_path, scenario)


def test_two_runs_are_compared_evaluation_by_evaluation(seeded: Path, tmp_path: Path) -> None:
    async def scenario(site: Site) -> None:
        page = _ok(await site.page(f"{APP}/compare", a="r1", b="r2"))
        assert _table(page, "table-NEWLY_FAILING") == ["Status of 42 PASSED ERROR"]
        assert _table(page, "table-NEWLY_PASSING") == ["Refund of 7 FAILED PASSED"]
        assert _table(page, "table-STILL_FAILING") == ["Broken invoice FAILED FAILED"]
        assert _table(page, "table-STILL_PASSING") == ['Greeting "hello" PASSED PASSED']
        assert _table(page, "table-NEW") == ["Fresh flow – FAILED"]
        assert _table(page, "table-GONE") == ["Cancel an order PASSED –"]
        assert [row.split(" ")[0] for row in _table(page, "pair")] == ["A", "B"]
        assert f'href="/ui/{APP}/evaluations/status"' in page
        # The other way round, what newly failed newly passes.
        back = _ok(await site.page(f"{APP}/compare", a=f"{RUNS}/r2", b="r1"))
        assert _table(back, "table-NEWLY_PASSING") == ["Status of 42 ERROR PASSED"]
        assert _table(back, "table-GONE") == ["Fresh flow FAILED –"]
        # Without both runs, the page offers the choice; a run page links to its comparison
        # with the run before it; the runs page picks two.
        choose = _ok(await site.page(f"{APP}/compare"))
        assert "Pick the two runs" in choose and choose.count('<option value="r1"') == 2
        r2 = _ok(await site.page(f"{RUNS}/r2"))
        assert f'href="/ui/{APP}/compare?a=r1&amp;b=r2"' in r2
        assert 'id="compare-previous"' not in _ok(await site.page(f"{RUNS}/r1"))
        runs = _ok(await site.page(RUNS))
        assert f'action="/ui/{APP}/compare"' in runs and 'name="a" value="r1"' in runs

        missing = await site.page(f"{APP}/compare", a="r1", b="r9")
        assert missing.status_code == 404 and "r9" in missing.text
        other = await site.page(f"{APP}/compare", a="r1", b="projects/x/locations/l/apps/y/r")
        assert other.status_code == 400 and "INVALID_ARGUMENT" in other.text

    visit(seeded, tmp_path, scenario)


def test_a_page_reloads_itself_only_while_a_run_it_shows_is_going(
    seeded: Path, tmp_path: Path
) -> None:
    async def scenario(site: Site) -> None:
        going = _ok(await site.page(f"{RUNS}/r3"))
        assert '<meta http-equiv="refresh" content="5">' in going and 'id="live"' in going
        for done in (f"{RUNS}/r1", f"{RUNS}/r4", f"{APP}/evaluations/refund"):
            assert not _refreshes(_ok(await site.page(done))), done
        assert _refreshes(_ok(await site.page(APP)))  # r3 is among its runs
        assert _refreshes(_ok(await site.page(RUNS, state="RUNNING")))
        assert not _refreshes(_ok(await site.page(RUNS, state="COMPLETED")))
        assert not _refreshes(_ok(await site.page(f"{APP}/compare", a="r1", b="r2")))
        assert _refreshes(_ok(await site.page(f"{APP}/compare", a="r1", b="r3")))

    visit(seeded, tmp_path, scenario)


def test_links_and_forms_keep_the_token_and_projects_stay_apart(tmp_path: Path) -> None:
    tokens = Tokens.load(write_token_file(tmp_path / "tokens.json"))

    async def main() -> None:
        async with served(tmp_path / "guarded.db", tokens) as site:
            await _seed(site, {"Authorization": f"Bearer {ALICE}"})
            for path, params in (
                (APP, {}),
                (f"{APP}/evaluations", {"tag": "orders"}),
                (RUNS, {}),
                (f"{APP}/compare", {"a": "r1", "b": "r2"}),
                (f"{APP}/evaluations/status", {}),
                (f"{RUNS}/r2", {}),
            ):
                page = _ok(await site.page(path, access_token=ALICE, **params))
                links = [html.unescape(h) for h in re.findall(r'href="([^"#]*)"', page)]
                assert links and all(f"access_token={ALICE}" in link for link in links), path
                forms = page.count("<form")
                assert page.count(f'name="access_token" value="{ALICE}"') == forms, path
            denied = await site.page(APP, access_token=BOB)
            assert denied.status_code == 403 and "PERMISSION_DENIED" in denied.text
            denied = await site.page(f"{APP}/compare", access_token=BOB, a="r1", b="r2")
            assert denied.status_code == 403
            assert (await site.page(RUNS)).status_code == 401

    asyncio.run(main())


# -- the forms' parameters as filters ----------------------------------------------------------


@given(st.text(max_size=40))
def test_a_forms_text_is_one_string_literal_whatever_it_holds(text: str) -> None:
    """Quotes, backslashes, AIP-160's words and wildcards stay text; what a filter cannot
    hold (a NUL, a lone surrogate) is refused as the form's field."""
    given = text.strip()
    try:
        search = EvaluationSearch.of([("tag", text)])
    except ServiceError as refused:
        assert not given.isprintable()
        assert [v.field for v in refused.violations] == ["tag"]
        return
    expected = Restriction("tags", Comparator.HAS, given, quoted=True) if given else None
    assert parse(search.filter()) == expected
    assert quoted(given) in search.filter() or not given


def test_the_forms_make_the_filters_the_api_documents() -> None:
    search = EvaluationSearch.of([("q", " Refund "), ("tag", "billing"), ("access_token", "t")])
    assert search.filter() == '(display_name:"Refund" OR name:"Refund") AND tags:"billing"'
    assert search.params() == {"q": "Refund", "tag": "billing"}
    assert EvaluationSearch.of([]).filter() == "" and not EvaluationSearch.of([])
    runs = RunFilter.of([("state", "ERROR"), ("from", "2026-12-01"), ("to", "2026-12-07")])
    assert runs.filter() == (
        'state = ERROR AND create_time >= "2026-12-01T00:00:00Z"'
        ' AND create_time < "2026-12-08T00:00:00Z"'
    )
    assert RunFilter.of([("tag", "smoke")]).filter() == ""  # a run has no tags: joined
    assert compared_runs([("a", "r1")], APP) is None
    assert compared_runs([("a", "r1"), ("b", f"{RUNS}/r2")], APP) == (f"{RUNS}/r1", f"{RUNS}/r2")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ([("state", "EVALUATION_RUN_STATE_UNSPECIFIED")], "state"),
        ([("state", "completed")], "state"),
        ([("from", "2026-13-01")], "from"),
        ([("from", "20261201")], "from"),
        ([("to", "2026-W49")], "to"),
        ([("from", "2026-12-08"), ("to", "2026-12-07")], "to"),
        ([("tag", "x" * 257)], "tag"),
        ([("tag", "a\nb")], "tag"),
    ],
)
def test_a_bad_run_filter_is_refused_naming_its_parameter(
    params: list[tuple[str, str]], field: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        RunFilter.of(params)
    assert refused.value.code.name == "INVALID_ARGUMENT"
    assert [v.field for v in refused.value.violations] == [field]
    assert len(refused.value.message) < 400


@pytest.mark.parametrize("value", ["R1", "r1/..", "projects/x/locations/l/apps/y/evaluationRuns/r"])
def test_a_compared_run_must_be_one_of_the_app(value: str) -> None:
    with pytest.raises(ServiceError) as refused:
        compared_runs([("a", "r1"), ("b", value)], APP)
    assert [v.field for v in refused.value.violations] == ["b"]


def test_the_comparisons_form_shows_the_pair_compared_however_old(tmp_path: Path) -> None:
    """The form offers the 100 newest runs, and the two compared when they are older."""

    async def main() -> None:
        async with served(tmp_path / "many.db") as site:
            for index in range(101):
                run = {"displayName": f"Run {index}", "state": "COMPLETED"}
                created = await site.rest.post(
                    f"/emulator/v1/{APP}/evaluationRuns?evaluationRunId=run-{index}", json=run
                )
                assert created.status_code == 200, created.text
            page = _ok(await site.page(f"{APP}/compare", a="run-0", b="run-0"))
            assert page.count('<option value="run-0" selected>') == 2
            assert page.count('<option value="run-0"') == 2  # offered once in each list
            assert page.count("<option ") == 2 * 101
            assert "Neither run has a judged evaluation yet." in page

    asyncio.run(main())
