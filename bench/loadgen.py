"""The load generators: h2load (gRPC), wrk (REST) and bench/grpc_create.py (gRPC creates).

Each runs pinned to the client core for a fixed duration after a warm-up and returns one
scenario's numbers: requests, requests/s, p50/p99 latency (ms), errors with their kinds.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.options import BENCH, ROOT, Options
from bench.servers import grpc_frame, pinned, which
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

__all__ = ["grpc_creates", "h2load", "wrk"]

# What a successful gRPC answer carries besides its message, at least: the 5-byte length
# prefix (frame headers add more; header blocks are counted apart by h2load).
_GRPC_PREFIX = 5


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def _number(pattern: str, text: str, cast: type = int) -> Any:  # noqa: ANN401 - int or float
    match = re.search(pattern, text)
    if match is None:
        raise ValueError(f"no {pattern!r} in load generator output:\n{text}")
    return cast(match.group(1))


def h2load(
    options: Options, url: str, body: bytes, expected: bytes, *, work: Path, label: str
) -> dict[str, Any]:
    """h2load POSTing one gRPC request; ``expected`` is the answer every call must carry.

    h2load sees HTTP statuses only, and gRPC errors arrive with status 200 (the gRPC status is
    in trailers). An error answer carries no message, so the bytes received tell: fewer than
    (5 + len(expected)) per request means some calls failed; they are counted in
    ``grpc_short_answers``. The same call is also checked once before and once after the run
    (``answer_checked``)."""
    body_file = work / f"{label}.req"
    body_file.write_bytes(grpc_frame(body))
    log_file = work / f"{label}.h2load.log"
    command = [
        which("h2load"),
        "-t",
        "1",
        "-c",
        str(options.connections),
        "-m",
        str(options.streams),
        "-D",
        f"{options.duration:g}",
        "-d",
        str(body_file),
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        "--log-file",
        str(log_file),
    ]
    if options.warmup > 0:
        command += ["--warm-up-time", f"{options.warmup:g}"]
    out = subprocess.run(
        pinned(options.client_cpu, [*command, url]),
        capture_output=True,
        text=True,
        check=False,
        timeout=options.duration + options.warmup + 120,
    )
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise SystemExit(f"bench: h2load failed ({out.returncode}):\n{text}")
    requests = _number(r"requests: (\d+) total", text)
    done = _number(r"(\d+) done", text)
    failed = _number(r"(\d+) failed", text)
    errored = _number(r"(\d+) errored", text)
    timeout = _number(r"(\d+) timeout", text)
    ok_status = _number(r"status codes: (\d+) 2xx", text)
    total = _number(r"traffic: \S+ \((\d+)\) total", text)
    headers = _number(r"total, \S+ \((\d+)\) headers", text)
    per_answer = (total - headers) / done if done else 0.0
    short = max(0, math.ceil(done - (total - headers) / (_GRPC_PREFIX + len(expected))))
    latencies = sorted(
        int(line.split("\t")[2]) / 1000
        for line in log_file.read_text().splitlines()
        if line.count("\t") >= 2
    )
    # A stream whose headers arrived just before the duration ended counts in the 2xx column but
    # not as done, and one whose headers arrived during the warm-up (whose counts h2load drops)
    # and whose body after it counts as done but in no status column: a page of 600 KB takes
    # long enough after its headers for that to be seen. Neither is an error. A call that did
    # fail answers no message, so it is short (below) whatever its status: a difference no
    # larger than the streams in flight, with no short answer, is the warm-up's edge.
    unseen = max(0, done - ok_status)
    edge = options.warmup > 0 and short == 0 and unseen <= options.concurrency
    non_2xx = 0 if edge else unseen
    return {
        "tool": "h2load",
        "requests": done,
        "requests_per_s": _number(r"finished in \S+, ([\d.]+) req/s", text, float),
        "p50_ms": round(_percentile(latencies, 0.50), 3),
        "p99_ms": round(_percentile(latencies, 0.99), 3),
        "errors": failed + errored + timeout + non_2xx + short,
        "error_detail": {
            "failed": failed,
            "errored": errored,
            "timeout": timeout,
            "non_2xx": non_2xx,
            "status_unseen_at_warm_up_edge": unseen - non_2xx,
            "grpc_short_answers": short,
            "not_done": requests - done,
        },
        "bytes_per_answer": round(per_answer, 1),
        "answer_bytes": len(expected),
        "duration_s": options.duration,
        "concurrency": options.concurrency,
    }


def _wrk_json(text: str) -> dict[str, Any]:
    for line in text.splitlines():
        if line.startswith("BENCH-JSON "):
            parsed: dict[str, Any] = json.loads(line.removeprefix("BENCH-JSON "))
            return parsed
    raise ValueError(f"no BENCH-JSON line in wrk output:\n{text}")


def _wrk_run(options: Options, seconds: float, script: Path, url: str, *args: str) -> str:
    command = [
        which("wrk"),
        "-t1",
        f"-c{options.concurrency}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    if args:
        command += ["--", *args]
    out = subprocess.run(
        pinned(options.client_cpu, command),
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + 120,
    )
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise SystemExit(f"bench: wrk failed ({out.returncode}):\n{text}")
    return text


def wrk(options: Options, url: str, script: Path | None = None, *args: str) -> dict[str, Any]:
    """wrk (HTTP/1.1) on ``url``: a warm-up run, then the measured one. ``script`` (with
    ``args``) builds the requests; the default reports only."""
    script = script or BENCH / "wrk" / "report.lua"
    warm_args = [*args[:-1], args[-1] + "w"] if args else []  # warm-up: own id prefix
    if options.warmup > 0:
        _wrk_run(options, options.warmup, script, url, *warm_args)
    result = _wrk_json(_wrk_run(options, options.duration, script, url, *args))
    seconds = result["duration_us"] / 1e6
    errors = {key: result[key] for key in ("connect", "read", "write", "status", "timeout")}
    return {
        "tool": "wrk",
        "requests": result["requests"],
        "requests_per_s": round(result["requests"] / seconds, 2) if seconds else 0.0,
        "p50_ms": round(result["p50_us"] / 1000, 3),
        "p99_ms": round(result["p99_us"] / 1000, 3),
        "errors": sum(errors.values()),
        "error_detail": {"non_2xx" if k == "status" else k: v for k, v in errors.items()},
        "bytes_per_answer": round(result["bytes"] / result["requests"], 1)
        if result["requests"]
        else 0.0,
        "duration_s": round(seconds, 3),
        "concurrency": options.concurrency,
    }


def grpc_creates(
    options: Options, target: str, parent: str, evaluation: bytes, *, work: Path, label: str
) -> tuple[dict[str, Any], list[str]]:
    """bench/grpc_create.py against ``target``; returns the numbers and the acknowledged ids."""
    prefix = service_pb2.CreateEvaluationRequest(parent=parent).SerializeToString()
    prefix += service_pb2.CreateEvaluationRequest(
        evaluation=evaluation_pb2.Evaluation.FromString(evaluation)
    ).SerializeToString()
    prefix_file = work / f"{label}.prefix"
    prefix_file.write_bytes(prefix)
    acked = work / f"{label}.acked"
    spec = {
        "target": target,
        "prefix_file": str(prefix_file),
        "id_prefix": label,
        "connections": options.connections,
        "streams": options.streams,
        "duration": options.duration,
        "warmup": options.warmup,
        "acked": str(acked),
    }
    spec_file = work / f"{label}.json"
    spec_file.write_text(json.dumps(spec))
    out = subprocess.run(
        pinned(options.client_cpu, [sys.executable, "-m", "bench.grpc_create", str(spec_file)]),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=options.duration + options.warmup + 300,
    )
    if out.returncode != 0:
        raise SystemExit(f"bench: gRPC create client failed:\n{out.stdout}{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    numbers = {
        "tool": "bench/grpc_create.py",
        "requests": result["requests"],
        "requests_per_s": round(result["requests_per_s"], 2),
        "p50_ms": round(result["p50_ms"], 3),
        "p99_ms": round(result["p99_ms"], 3),
        "errors": result["errors"],
        "error_detail": result["error_codes"],
        "duration_s": round(result["duration_s"], 3),
        "concurrency": options.concurrency,
        "acknowledged": result["acked_total"],
    }
    return numbers, acked.read_text().split()
