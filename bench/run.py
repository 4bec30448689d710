"""``make bench``: ces-eval against its floors, on one machine, in one run.

    python -m bench.run [--large 1000000] [--small 1000] [--duration 10] [--warmup 2]
                        [--connections 8] [--streams 4] [--deep-page 50] [--workers N]
                        [--log-repeats 5] [--database URL] [--output bench/results] ...

Steps (see bench/README.md for the details and the reasoning):

1. load generators: ``bench/tools.sh ensure`` (h2load, wrk, taskset; installed as root);
2. two data sets, SMALL and LARGE results, written straight into SQLite files (bench/data.py);
3. for each data set, ``ces-eval serve`` (its default request log on) pinned to one core; on
   the other core h2load (gRPC), wrk (REST) and bench/grpc_create.py (gRPC creates) drive
   GetEvaluation, ListEvaluationResults (page_size 100, filter on one evaluation run; the
   first page and a deep page) and CreateEvaluation;
4. the floors (bench/floor.py): a bare grpc.aio server and a bare Starlette/uvicorn app
   replaying the real responses' bytes, under the same load;
5. after the creates, every acknowledged create is looked up in the database;
6. the run engine: results produced per second by one RunEvaluation of 200 evaluations x 5
   (bench/engine.py), on SQLite and on PostgreSQL; runs against a local agent answering in
   250 ms (single-turn and 3-turn goldens, as ratios of the ideal concurrent time) and in 0 s;
7. the request log's cost: the same reads against two ces-eval servers on the SMALL data, the
   request log on (the default, as in step 3) and off, alternated, ``--log-repeats`` rounds;
8. ``<output>/latest.json`` (every number) and ``<output>/latest.md`` (tables and targets).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from bench import data
from bench.engine import measure_agent, measure_engine
from bench.loadgen import grpc_creates, h2load, wrk
from bench.options import BENCH, ROOT, Options
from bench.report import (
    markdown,
    ratios,
    request_log_ratios,
    request_log_summary,
    targets,
    write_reports,
)
from bench.servers import (
    CpuMeter,
    Process,
    grpc_call,
    http_call,
    pinned,
    serve_command,
    start,
    which,
)
from ces_eval import storage as storage_backends
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import Cursor, ListQuery, OrderBy, SortKey
from tests.support.postgres import PostgresCluster, PostgresStartFailed, PostgresUnavailable

__all__ = ["SCENARIOS", "Options", "main", "run"]

SERVICE = "/google.cloud.ces.v1beta.EvaluationService"
GET = f"{SERVICE}/GetEvaluation"
LIST = f"{SERVICE}/ListEvaluationResults"
CREATE = f"{SERVICE}/CreateEvaluation"
PROJECT = "projects/bench/locations/us-central1"
_ANSWERS: dict[str, Any] = {
    GET: evaluation_pb2.Evaluation,
    LIST: service_pb2.ListEvaluationResultsResponse,
}
PAGE_SIZE = 100
FILTER_RUN = 3

# Scenario names: <what>-<surface>; the data set (small, large, floor) is a separate key. The
# floor has no list-deep scenarios: it answers one fixed page.
SCENARIOS = (
    "get-grpc",
    "get-rest",
    "list-first-grpc",
    "list-first-rest",
    "list-deep-grpc",
    "list-deep-rest",
    "create-grpc",
    "create-rest",
)


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- tools and machine ---------------------------------------------------------------------------


def ensure_tools(install: bool) -> None:
    """h2load, wrk and taskset on PATH, installed by bench/tools.sh when allowed."""
    command = [str(BENCH / "tools.sh"), "ensure" if install else "check"]
    if subprocess.run(command, check=False).returncode != 0:
        raise SystemExit("bench: load generators missing (see the message above)")


def _version(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=False, timeout=10)
    except OSError:
        return "missing"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError):
        memory = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    commit = subprocess.run(
        [which("git"), "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu_count": os.cpu_count(),
        "cpus_available": sorted(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "grpcio": _package("grpcio"),
        "protobuf": _package("protobuf"),
        "uvicorn": _package("uvicorn"),
        "starlette": _package("starlette"),
        "h11": _package("h11"),
        # uvicorn's defaults pick httptools and uvloop when installed, h11 and asyncio if not.
        "httptools": _package("httptools"),
        "uvloop": _package("uvloop"),
        "h2load": _version(["h2load", "--version"]),
        "wrk": _version(["wrk", "-v"]).split(" [", 1)[0],
        "commit": commit,
    }


# -- one data set against ces-eval ----------------------------------------------------------------


@dataclass
class Calls:
    """The requests of the scenarios and the real answers, captured once per server."""

    get_body: bytes = b""
    get_answer: bytes = b""
    get_path: str = ""
    get_json: bytes = b""
    list_body: bytes = b""
    list_answer: bytes = b""
    list_path: str = ""
    list_json: bytes = b""
    deep_body: bytes = b""
    deep_answer: bytes = b""
    deep_path: str = ""
    deep_page: int = 1
    pages_walked: int = 1
    create_parent: str = ""
    create_evaluation: bytes = b""
    create_answer: bytes = b""
    create_json: bytes = b""
    create_template: str = ""
    probes: list[str] = field(default_factory=list)


def _list_request(app: str, token: str = "") -> service_pb2.ListEvaluationResultsRequest:
    return service_pb2.ListEvaluationResultsRequest(
        parent=f"{app}/evaluations/-",
        page_size=PAGE_SIZE,
        filter=f'evaluation_run = "{app}/evaluationRuns/run-{FILTER_RUN}"',
        page_token=token,
    )


def _list_path(request: service_pb2.ListEvaluationResultsRequest) -> str:
    query = {"filter": request.filter, "pageSize": str(request.page_size)}
    if request.page_token:
        query["pageToken"] = request.page_token
    return f"/v1beta/{request.parent}/results?{urllib.parse.urlencode(query)}"


def _expect_ok(status: int, body: bytes, what: str) -> bytes:
    if status != 200:
        raise SystemExit(f"bench: {what} answered {status}: {body[:2000]!r}")
    return body


def capture_reads(server: Process, data_set: data.DataSet) -> Calls:
    """The GetEvaluation and first-page requests, each sent once, with their real answers."""
    calls = Calls()
    target, base = server.grpc_target, server.http_base
    name = data_set.evaluation_name(data_set.evaluations // 2)
    calls.get_body = service_pb2.GetEvaluationRequest(name=name).SerializeToString()
    calls.get_answer = grpc_call(target, GET, calls.get_body)
    calls.get_path = f"/v1beta/{name}"
    calls.get_json = _expect_ok(*http_call(base, calls.get_path), "REST GetEvaluation")

    first = _list_request(data_set.app)
    calls.list_body = first.SerializeToString()
    calls.list_answer = grpc_call(target, LIST, calls.list_body)
    calls.list_path = _list_path(first)
    calls.list_json = _expect_ok(*http_call(base, calls.list_path), "REST list")
    page = service_pb2.ListEvaluationResultsResponse.FromString(calls.list_answer)
    if len(page.evaluation_results) != min(PAGE_SIZE, data_set.matching(FILTER_RUN)):
        raise SystemExit(f"bench: the first page has {len(page.evaluation_results)} results")
    return calls


def capture(server: Process, data_set: data.DataSet, create_app: str, deep_page: int) -> Calls:
    """The scenarios' requests, each sent once, with their real answers."""
    calls = capture_reads(server, data_set)
    target, base = server.grpc_target, server.http_base
    first = _list_request(data_set.app)
    page = service_pb2.ListEvaluationResultsResponse.FromString(calls.list_answer)
    # Walk to page ``deep_page`` (or the last page) with real next_page_tokens.
    deep, deep_answer, number = first, calls.list_answer, 1
    while number < deep_page and page.next_page_token:
        deep = _list_request(data_set.app, page.next_page_token)
        deep_answer = grpc_call(target, LIST, deep.SerializeToString())
        page = service_pb2.ListEvaluationResultsResponse.FromString(deep_answer)
        number += 1
    calls.deep_body, calls.deep_answer, calls.deep_page = (
        deep.SerializeToString(),
        deep_answer,
        number,
    )
    calls.deep_path = _list_path(deep)
    _expect_ok(*http_call(base, calls.deep_path), "REST deep list")

    # Creates: a golden evaluation as a caller writes it (no output-only fields).
    evaluation = data.evaluation(data_set, 0)
    for output_only in (
        "name",
        "create_time",
        "update_time",
        "created_by",
        "last_updated_by",
        "etag",
    ):
        evaluation.ClearField(output_only)
    evaluation.ClearField("display_name")
    calls.create_parent = create_app
    calls.create_evaluation = evaluation.SerializeToString()
    probe = service_pb2.CreateEvaluationRequest(
        parent=create_app,
        evaluation_id="probe-grpc",
        evaluation=evaluation_pb2.Evaluation(display_name="Bench probe gRPC"),
    )
    probe.evaluation.MergeFrom(evaluation)
    calls.create_answer = grpc_call(target, CREATE, probe.SerializeToString())
    document = json_format.MessageToDict(evaluation)
    document["displayName"] = "__DISPLAY_NAME__"
    calls.create_template = json.dumps(document)
    rest_probe = calls.create_template.replace("__DISPLAY_NAME__", "Bench probe REST").encode()
    calls.create_json = _expect_ok(
        *http_call(base, f"/v1beta/{create_app}/evaluations?evaluationId=probe-rest", rest_probe),
        "REST CreateEvaluation",
    )
    calls.probes = [f"{create_app}/evaluations/probe-grpc", f"{create_app}/evaluations/probe-rest"]
    return calls


def _same_answer(server: Process, method: str, body: bytes, answer: bytes) -> bool:
    """The call still answers ``answer``: compared as messages, since map entries (Struct
    fields) may be serialized in another order by another process (--workers)."""
    kind = _ANSWERS[method]
    return bool(
        kind.FromString(grpc_call(server.grpc_target, method, body)) == kind.FromString(answer)
    )


def _reads(
    options: Options, server: Process, calls: Calls, label: str, work: Path
) -> dict[str, Any]:
    """The read scenarios against ``server``, by name: each a function measuring it. The gRPC
    ones check the answer before and after (h2load sees no gRPC status)."""
    grpc_url = f"http://{server.grpc_target}"
    base = server.http_base

    def checked_grpc(method: str, body: bytes, answer: bytes, name: str) -> dict[str, Any]:
        before = _same_answer(server, method, body, answer)
        result = h2load(
            options, grpc_url + method, body, answer, work=work, label=f"{label}-{name}"
        )
        after = _same_answer(server, method, body, answer)
        result["answer_checked"] = before and after
        if not (before and after):
            result["errors"] += 1
            result["error_detail"]["answer_changed"] = 1
        return result

    return {
        "get-grpc": lambda: checked_grpc(GET, calls.get_body, calls.get_answer, "get"),
        "get-rest": lambda: wrk(options, base + calls.get_path),
        "list-first-grpc": lambda: checked_grpc(LIST, calls.list_body, calls.list_answer, "list"),
        "list-first-rest": lambda: wrk(options, base + calls.list_path),
        "list-deep-grpc": lambda: checked_grpc(LIST, calls.deep_body, calls.deep_answer, "deep"),
        "list-deep-rest": lambda: wrk(options, base + calls.deep_path),
    }


def measure(
    options: Options,
    server: Process,
    calls: Calls,
    set_name: str,
    work: Path,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every scenario against ``server`` (ces-eval or the floor); returns the scenarios and the
    names of the evaluations whose create was acknowledged."""
    scenarios: list[dict[str, Any]] = []
    acked: list[str] = []
    base = server.http_base
    creates = work / f"{set_name}-creates"
    creates.mkdir(exist_ok=True)
    template = work / f"{set_name}-create.json"
    template.write_text(calls.create_template)
    create_path = f"/v1beta/{calls.create_parent}/evaluations"

    for scenario, action in _reads(options, server, calls, set_name, work).items():
        if set_name == "floor" and scenario.startswith("list-deep"):
            continue  # the floor answers one fixed page: first and deep are the same to it
        scenarios.append(_one(options, server, scenario, set_name, action))

    def grpc_create() -> dict[str, Any]:
        numbers, ids = grpc_creates(
            options,
            server.grpc_target,
            calls.create_parent,
            calls.create_evaluation,
            work=work,
            label=f"{set_name}-g",
        )
        acked.extend(f"{calls.create_parent}/evaluations/{i}" for i in ids)
        return numbers

    def rest_create() -> dict[str, Any]:
        result = wrk(
            options,
            base,
            BENCH / "wrk" / "create.lua",
            create_path,
            str(template),
            str(creates),
            f"{set_name[0]}r",
        )
        names = [n for f in sorted(creates.glob("acked-*.txt")) for n in f.read_text().split()]
        result["acknowledged"] = len(names)
        acked.extend(names)
        return result

    scenarios.append(_one(options, server, "create-grpc", set_name, grpc_create))
    scenarios.append(_one(options, server, "create-rest", set_name, rest_create))
    return scenarios, acked


def _one(
    options: Options,
    server: Process,
    scenario: str,
    set_name: str,
    action: Any,  # noqa: ANN401
) -> dict[str, Any]:
    _log(f"{set_name}: {scenario} ({options.warmup:g} s warm-up, {options.duration:g} s)")
    scoped = server.reset_peak()
    meter = CpuMeter(server)
    result: dict[str, Any] = action()
    result["cpu"] = meter.stop()
    result.update(
        scenario=scenario,
        data_set=set_name,
        surface=scenario.rsplit("-", 1)[1],
        peak_rss_mb=server.memory_mb("VmHWM"),
        peak_rss_scope="scenario" if scoped else "process lifetime",
    )
    if server.popen.poll() is not None:
        raise SystemExit(f"bench: {server.name} died during {scenario}; see {server.log}")
    _log(
        f"  {result['requests_per_s']:,.0f} req/s, p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms, errors {result['errors']}, other processes "
        f"{result['cpu']['other_cpu_share']:.0%} of the CPUs"
    )
    return result


# -- durability -----------------------------------------------------------------------------------


async def _stored_names(url: str, parent: str) -> set[str]:
    database = storage_backends.from_url(url)
    await database.open()
    names: set[str] = set()
    try:
        after: Cursor | None = None
        while True:
            rows = await database.list_evaluations(
                ListQuery(
                    parent=parent, order=OrderBy(SortKey.NAME, False), limit=1000, after=after
                )
            )
            names.update(evaluation.name for evaluation, _ in rows)
            if len(rows) < 1000:
                return names
            after = rows[-1][1]
    finally:
        await database.close()


def durability(url: str, parent: str, acked: list[str]) -> dict[str, Any]:
    """Every acknowledged create is stored (read back through the storage layer after the
    server stopped)."""
    stored = asyncio.run(_stored_names(url, parent))
    missing = sorted(set(acked) - stored)
    return {
        "app": parent,
        "acknowledged": len(set(acked)),
        "stored": len(stored),
        "missing": len(missing),
        "missing_names": missing[:50],
        "stored_not_acknowledged": len(stored - set(acked)),
        "ok": not missing and len(stored) >= len(set(acked)),
    }


# -- the run --------------------------------------------------------------------------------------


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _serve_command(options: Options, url: str, exports: Path, log_level: str = "info") -> list[str]:
    """``ces-eval serve`` on ``url``. ``--log-level info`` and ``--log-format text`` are the
    defaults, what users run (a request line per call, on stderr); passed anyway so that the
    flags, not the environment, say so (bench/servers.py starts no server with CES_EVAL_*)."""
    command = serve_command(url, exports, "--log-level", log_level, "--log-format", "text")
    if options.workers is not None:
        command += ["--workers", str(options.workers)]
    return pinned(options.server_cpu, command)


def _cpus(options: Options) -> None:
    """Server on one core, load generator on another, unless ``--unpinned`` (both free to use
    every core: how ``--workers N`` scaling is measured on a machine with few cores)."""
    available = sorted(os.sched_getaffinity(0))
    if options.unpinned:
        options.server_cpu = options.client_cpu = None
        return
    if options.server_cpu is None and options.client_cpu is None and len(available) >= 2:
        options.server_cpu, options.client_cpu = available[0], available[1]


def load(options: Options, work: Path, set_name: str, data_set: data.DataSet) -> dict[str, Any]:
    """Store ``data_set``; returns where and how long it took."""
    info: dict[str, Any] = {
        "app": data_set.app,
        "results": data_set.results,
        "evaluations": data_set.evaluations,
        "results_per_evaluation": data_set.per_evaluation,
        "runs": data.RUNS,
        "evaluation_bytes": len(data.evaluation(data_set, 0).SerializeToString()),
        "result_bytes": [
            len(data.result(data_set, 0, r).SerializeToString()) for r in range(data.TEMPLATES)
        ],
    }
    started = time.monotonic()
    if options.database is None:
        path = work / f"{set_name}.db"
        url = f"sqlite:///{path}"
        data.load_direct(path, data_set, progress=True)
        info["method"] = "direct sqlite3 executemany (bench/data.py load_direct)"
    else:
        url = options.database
        if data.stored(url, data_set):
            info["method"] = "already stored (reused)"
        elif url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            data.load_direct(path, data_set, progress=True)
            info["method"] = "direct sqlite3 executemany (bench/data.py load_direct)"
        else:
            data.load_via_storage(url, data_set)
            info["method"] = "Storage.import_bundle per evaluation"
    info["load_s"] = round(time.monotonic() - started, 2)
    info["url"] = url
    if url.startswith("sqlite:///"):
        info["disk_bytes"] = _size(Path(url.removeprefix("sqlite:///")))
    _log(
        f"{set_name}: {data_set.results:,} results in {data_set.evaluations:,} evaluations "
        f"loaded in {info['load_s']:.1f} s ({info['method']})"
        + (f", {info['disk_bytes'] / 2**30:.2f} GiB on disk" if "disk_bytes" in info else "")
    )
    return info


def ces_eval(
    options: Options,
    work: Path,
    set_name: str,
    data_set: data.DataSet,
    *,
    report: dict[str, Any],
    run_id: str,
) -> Calls:
    """Every scenario against ces-eval on ``data_set`` (default request log: on), then the
    durability check; the numbers join ``report``. Returns the captured calls."""
    url = report["data_sets"][set_name]["url"]
    exports = work / "exports"
    started = time.monotonic()
    server = start(
        f"ces-eval ({set_name})",
        _serve_command(options, url, exports),
        work / f"server-{set_name}.log",
    )
    info = report["data_sets"][set_name]
    info["server_start_s"] = round(time.monotonic() - started, 2)
    info["server_rss_at_start_mb"] = server.memory_mb("VmRSS")
    create_app = f"{PROJECT}/apps/create-{set_name}-{run_id}"
    try:
        calls = capture(server, data_set, create_app, options.deep_page)
        info["get_answer_bytes"] = len(calls.get_answer)
        info["list_answer_bytes"] = len(calls.list_answer)
        info["deep_page"] = calls.deep_page
        scenarios, acked = measure(options, server, calls, set_name, work)
        report["scenarios"] += scenarios
        info["server_log_problems"] = server.log_problems()
    finally:
        code = server.stop()
    info["server_exit"] = code
    info["server_log_level"] = "info"
    info["request_log_lines"] = server.count_lines(ACCESS_MARKER)
    report["durability"][set_name] = durability(url, create_app, [*calls.probes, *acked])
    _log(f"{set_name}: durability {report['durability'][set_name]}")
    return calls


def run(options: Options) -> dict[str, Any]:
    """The whole benchmark; writes the reports and returns the JSON report."""
    ensure_tools(options.install)
    _cpus(options)
    run_id = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    if options.workdir is not None:
        options.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ces-eval-bench-", dir=options.workdir))
    _log(f"work folder {work}")
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "options": {
            **{k: v for k, v in asdict(options).items() if k not in {"output", "workdir"}},
            "page_size": PAGE_SIZE,
            "filter": f'evaluation_run = "<app>/evaluationRuns/run-{FILTER_RUN}"',
        },
        "data_sets": {},
        "scenarios": [],
        "durability": {},
    }
    try:
        sets = {
            "small": data.DataSet(f"{PROJECT}/apps/small", options.small, options.per_evaluation),
            "large": data.DataSet(f"{PROJECT}/apps/large", options.large, options.per_evaluation),
        }
        _check_disk(options, work)
        for set_name, data_set in sets.items():
            report["data_sets"][set_name] = load(options, work, set_name, data_set)
        captured: Calls | None = None
        for set_name, data_set in sets.items():
            captured = ces_eval(options, work, set_name, data_set, report=report, run_id=run_id)
        assert captured is not None
        report["engine"] = engine(options, work)
        report["floor"] = floor(options, captured, work, report)
        report["ratios"] = ratios(report["scenarios"])
        if options.log_repeats > 0:
            report["request_log"] = request_log_cost(options, work, sets["small"])
            report["ratios"].update(request_log_ratios(report["request_log"]))
        report["targets"] = targets(report)
    finally:
        if options.keep:
            _log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    write_reports(report, options.output)
    return report


def engine(options: Options, work: Path) -> dict[str, Any]:
    """The run engine's results per second (bench/engine.py) on a fresh SQLite file and on
    PostgreSQL: ``--database`` when it names one, else a local server started for it
    (tests/support/postgres.py), or the reason there is none."""
    found: dict[str, Any] = {}
    folder = work / "engine"
    folder.mkdir()
    measured = partial(
        measure_engine,
        evaluations=options.engine_evaluations,
        repetitions=options.engine_repetitions,
        server_cpu=options.server_cpu,
    )
    found["sqlite"] = measured(f"sqlite:///{folder / 'engine.db'}", folder)
    _log(f"engine on SQLite: {found['sqlite']['results_per_s']} results/s")
    agent = found["agent"] = measure_agent(
        f"sqlite:///{folder / 'agent.db'}",
        folder,
        goldens=options.engine_evaluations,
        scale_sessions=options.scale_sessions,
        server_cpu=options.server_cpu,
        agent_cpu=options.client_cpu,
    )
    _log(
        f"engine against a {agent['agent_delay_s']} s agent at {agent['concurrency']} sessions: "
        f"{agent['single_turn']['ratio_to_ideal']}x ideal (1 turn), "
        f"{agent['three_turns']['ratio_to_ideal']}x (3 turns); against a 0 s agent "
        f"{agent['zero_latency']['results_per_s']} results/s"
    )
    scale = agent["scale"]
    _log(
        f"a run of {scale['sessions']} sessions against a 0 s agent: {scale['seconds']} s, "
        f"server RSS {scale['rss_before_mb']} MiB before, peak {scale['peak_rss_mb']} MiB"
    )
    if options.database is not None and options.database.startswith("postgresql"):
        found["postgresql"] = measured(options.database, folder, label="engine-pg")
    else:
        try:
            with PostgresCluster.from_environment() as cluster:
                url = cluster.create_database()
                found["postgresql"] = measured(url, folder, label="engine-pg")
        except (PostgresUnavailable, PostgresStartFailed) as missing:
            found["postgresql"] = {"skipped": str(missing)}
    pg = found["postgresql"]
    _log(f"engine on PostgreSQL: {pg.get('results_per_s', pg.get('skipped'))}")
    return found


def _check_disk(options: Options, work: Path) -> None:
    """Refuse early when the data sets cannot fit (about 10 KB per result on disk)."""
    if options.database is not None and not options.database.startswith("sqlite:///"):
        return
    needed = (options.large + options.small) * 12_000 + 2**30
    free = shutil.disk_usage(work).free
    if free < needed:
        raise SystemExit(
            f"bench: {work} has {free / 2**30:.1f} GiB free; the data sets need about "
            f"{needed / 2**30:.1f} GiB (use --large to scale down or --workdir elsewhere)"
        )


def floor(options: Options, calls: Calls, work: Path, report: dict[str, Any]) -> dict[str, Any]:
    """The floor server replaying ``calls``' answers (the last data set's), under the same
    scenarios; its scenarios join ``report``."""
    folder = work / "floor"
    folder.mkdir()
    files = {
        "get.bin": calls.get_answer,
        "list.bin": calls.list_answer,
        "create.bin": calls.create_answer,
        "get.json": calls.get_json,
        "list.json": calls.list_json,
        "create.json": calls.create_json,
    }
    for name, content in files.items():
        (folder / name).write_bytes(content)
    create_path = f"/v1beta/{calls.create_parent}/evaluations"
    spec = {
        "grpc": {GET: "get.bin", LIST: "list.bin", CREATE: "create.bin"},
        "http": [
            {"method": "GET", "path": calls.get_path, "file": "get.json"},
            {"method": "GET", "path": calls.list_path.split("?", 1)[0], "file": "list.json"},
            {"method": "POST", "path": create_path, "file": "create.json"},
        ],
    }
    (folder / "spec.json").write_text(json.dumps(spec))
    server = start(
        "floor",
        pinned(
            options.server_cpu, [sys.executable, "-m", "bench.floor", str(folder / "spec.json")]
        ),
        work / "floor.log",
    )
    try:
        scenarios, acked = measure(options, server, calls, "floor", work)
    finally:
        server.stop()
    report["scenarios"] += scenarios
    return {"answers_from": "large", "create_answers": len(acked)}


# -- the request log's cost -----------------------------------------------------------------------

# What a request line carries in the text format (``... INFO ces_eval.access: grpc ...``; with
# --workers the logger name is followed by ``[pid]``).
ACCESS_MARKER = " ces_eval.access"
# The reads measured with the request log on and off; their answers are the same on both.
LOG_WORKLOADS = ("get-grpc", "get-rest", "list-first-rest")
# --log-level info: the default, a request line per call; warning: no request log at all.
LOG_LEVELS = {"on": "info", "off": "warning"}


def _log_databases(options: Options, work: Path, data_set: data.DataSet) -> dict[str, str]:
    """A database per server of the pair, holding ``data_set``: two SQLite files written by
    the same loader (SQLite admits one server per file), or the ``--database`` itself when it
    is a server database (the pair only reads)."""
    if options.database is not None and not options.database.startswith("sqlite:///"):
        return dict.fromkeys(LOG_LEVELS, options.database)
    urls: dict[str, str] = {}
    for mode in LOG_LEVELS:
        path = work / f"log-{mode}.db"
        data.load_direct(path, data_set)
        urls[mode] = f"sqlite:///{path}"
    return urls


def _same_reads(on: Calls, off: Calls) -> None:
    """Both servers answer the workloads alike (the same data, the same requests)."""
    same = (
        on.get_path == off.get_path
        and on.list_path == off.list_path
        and evaluation_pb2.Evaluation.FromString(on.get_answer)
        == evaluation_pb2.Evaluation.FromString(off.get_answer)
        and json.loads(on.get_json) == json.loads(off.get_json)
        and json.loads(on.list_json) == json.loads(off.list_json)
    )
    if not same:
        raise SystemExit("bench: the log-on and log-off servers answer the reads differently")


def request_log_cost(options: Options, work: Path, data_set: data.DataSet) -> dict[str, Any]:
    """The request log's cost: :data:`LOG_WORKLOADS` against two ces-eval servers on the same
    data, one with the default request log (``--log-level info``), one without
    (``--log-level warning``). Both run at once, pinned to the server core (the idle one
    waits); each workload is measured on one right after the other, ``--log-repeats`` times,
    the order flipped every round (on/off, off/on, ...) so drift favours neither."""
    _log(f"request log: {data_set.results:,} results on two servers, log on and off")
    urls = _log_databases(options, work, data_set)
    servers: dict[str, Process] = {}
    info: dict[str, Any] = {
        "data_set": "small",
        "workloads": list(LOG_WORKLOADS),
        "repeats": options.log_repeats,
        "levels": dict(LOG_LEVELS),
        "servers": {},
        "runs": [],
    }
    try:
        for mode, level in LOG_LEVELS.items():
            started = time.monotonic()
            servers[mode] = start(
                f"ces-eval (request log {mode})",
                _serve_command(options, urls[mode], work / f"exports-log-{mode}", level),
                work / f"server-log-{mode}.log",
            )
            info["servers"][mode] = {
                "log_level": level,
                "database": urls[mode] if options.database else "fresh SQLite file",
                "server_start_s": round(time.monotonic() - started, 2),
            }
        calls = {mode: capture_reads(server, data_set) for mode, server in servers.items()}
        _same_reads(calls["on"], calls["off"])
        reads = {
            mode: _reads(options, server, calls[mode], f"log-{mode}", work)
            for mode, server in servers.items()
        }
        for repeat in range(options.log_repeats):
            order = ("on", "off") if repeat % 2 == 0 else ("off", "on")
            for workload in LOG_WORKLOADS:
                for mode in order:
                    result = _one(
                        options, servers[mode], workload, f"log-{mode}", reads[mode][workload]
                    )
                    result.update(request_log=mode, repeat=repeat)
                    info["runs"].append(result)
        for mode, server in servers.items():
            info["servers"][mode]["server_log_problems"] = server.log_problems()
    finally:
        for mode, server in servers.items():
            info["servers"][mode]["server_exit"] = server.stop()
    for mode, server in servers.items():
        info["servers"][mode]["request_log_lines"] = server.count_lines(ACCESS_MARKER)
    _check_request_log(info)
    info.update(request_log_summary(info["runs"], LOG_WORKLOADS))
    for row in info["summary"]:
        _log(
            f"request log: {row['workload']} on/off {row['ratio']:.3f} "
            f"(runs {', '.join(f'{r:.3f}' for r in row['ratios'])})"
        )
    return info


def _check_request_log(info: dict[str, Any]) -> None:
    """The log-on server wrote a request line per call at least (warm-ups add more); the
    log-off server none: otherwise the pair does not measure the request log."""
    requests = {
        mode: sum(r["requests"] for r in info["runs"] if r["request_log"] == mode)
        for mode in LOG_LEVELS
    }
    on, off = (
        info["servers"]["on"]["request_log_lines"],
        info["servers"]["off"]["request_log_lines"],
    )
    if on < requests["on"] or off:
        raise SystemExit(
            f"bench: the log-on server wrote {on:,} request lines for {requests['on']:,} "
            f"measured requests, the log-off server {off:,} (expected none)"
        )


def _options(argv: list[str] | None) -> Options:
    defaults = Options()
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description="Benchmark ces-eval against its floors."
    )
    parser.add_argument("--large", type=int, default=defaults.large, help="results in LARGE")
    parser.add_argument("--small", type=int, default=defaults.small, help="results in SMALL")
    parser.add_argument("--per-evaluation", type=int, default=defaults.per_evaluation)
    parser.add_argument("--duration", type=float, default=defaults.duration, help="seconds")
    parser.add_argument("--warmup", type=float, default=defaults.warmup, help="seconds")
    parser.add_argument("--connections", type=int, default=defaults.connections)
    parser.add_argument(
        "--streams", type=int, default=defaults.streams, help="gRPC streams per connection"
    )
    parser.add_argument(
        "--deep-page", type=int, default=defaults.deep_page, help="page number of the deep list"
    )
    parser.add_argument("--workers", type=int, help="passed to ces-eval serve --workers")
    parser.add_argument(
        "--log-repeats",
        type=int,
        default=defaults.log_repeats,
        help="request log cost: on/off measurement pairs per workload (0: not measured)",
    )
    parser.add_argument(
        "--engine-evaluations",
        type=int,
        default=defaults.engine_evaluations,
        help="the run engine's measurement: evaluations in the run",
    )
    parser.add_argument(
        "--engine-repetitions",
        type=int,
        default=defaults.engine_repetitions,
        help="the run engine's measurement: run_count",
    )
    parser.add_argument(
        "--scale-sessions",
        type=int,
        default=defaults.scale_sessions,
        help="the run engine's largest run against a 0 s agent: sessions (a multiple of 100)",
    )
    parser.add_argument(
        "--database",
        help="run ces-eval on this database URL (both data sets in it, in their own apps; "
        "loaded unless already there) instead of fresh SQLite files",
    )
    parser.add_argument("--output", type=Path, default=defaults.output)
    parser.add_argument("--workdir", type=Path, help="parent of the temporary work folder")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--no-install", dest="install", action="store_false", help="never apt-get install"
    )
    parser.add_argument("--server-cpu", type=int)
    parser.add_argument("--client-cpu", type=int)
    parser.add_argument(
        "--unpinned", action="store_true", help="pin neither the server nor the load generator"
    )
    args = parser.parse_args(argv)
    return Options(**vars(args))


def main(argv: list[str] | None = None) -> int:
    report = run(_options(argv))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
