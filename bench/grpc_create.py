"""Load client for gRPC CreateEvaluation: every request needs its own display name.

h2load repeats one request body, and CreateEvaluation refuses a second evaluation with the same
display name in an app (ALREADY_EXISTS), so creates over gRPC are driven by this small
``grpc.aio`` client instead. Bodies are pre-serialized: a fixed prefix (parent and a ~5 KB
golden evaluation) followed by a small per-request tail setting ``evaluation_id`` and
``evaluation.display_name`` (protobuf merges the repeated ``evaluation`` field), so the client
spends its time on calls, not on serialization; it never parses responses. It runs
``connections`` channels (separate TCP connections) with ``streams`` calls in flight on each,
for ``warmup`` then ``duration`` seconds, and prints one JSON object: counts, requests/s and
latency percentiles of the measured phase. The ids of every call answered OK (warm-up too) go
to ``acked`` (one per line), so the harness can check that each acknowledged write is stored.
Its ceiling is measured the same way against the floor server (bench/floor.py).

    python -m bench.grpc_create SPEC.json    # keys: target, prefix_file, parent,
                                             # id_prefix, connections, streams, duration,
                                             # warmup, acked
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

__all__ = ["main", "percentile"]

METHOD = "/google.cloud.ces.v1beta.EvaluationService/CreateEvaluation"


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, round(fraction * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _tail(id_prefix: str, index: int) -> bytes:
    return service_pb2.CreateEvaluationRequest(
        evaluation_id=f"{id_prefix}-{index}",
        evaluation=evaluation_pb2.Evaluation(display_name=f"Bench create {id_prefix} {index}"),
    ).SerializeToString()


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    prefix = Path(spec["prefix_file"]).read_bytes()
    id_prefix = spec["id_prefix"]
    channels = [
        grpc.aio.insecure_channel(spec["target"], options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(spec["connections"])
    ]
    calls = [channel.unary_unary(METHOD) for channel in channels]  # bytes in, bytes out
    counter = iter(range(10**12))
    acked: list[str] = []
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    measured = 0
    started = time.monotonic()
    measure_from = started + spec["warmup"]
    stop_at = measure_from + spec["duration"]

    async def worker(call: Any) -> None:  # noqa: ANN401 - grpc ships no types
        nonlocal measured
        while True:
            now = time.monotonic()
            if now >= stop_at:
                return
            index = next(counter)
            body = prefix + _tail(id_prefix, index)
            begin = time.perf_counter()
            try:
                await call(body, timeout=30)
                code = "OK"
            except grpc.aio.AioRpcError as error:
                code = error.code().name
            elapsed = time.perf_counter() - begin
            if code == "OK":
                acked.append(f"{id_prefix}-{index}")
            if now >= measure_from:
                measured += 1
                if code == "OK":
                    latencies.append(elapsed)
                else:
                    errors[code] += 1

    for channel in channels:
        await channel.channel_ready()
    workers = [worker(call) for call in calls for _ in range(spec["streams"])]
    measure_started = time.monotonic()
    await asyncio.gather(*workers)
    elapsed = time.monotonic() - max(measure_from, measure_started)
    for channel in channels:
        await channel.close()
    Path(spec["acked"]).write_text("".join(f"{name}\n" for name in acked))
    latencies.sort()
    return {
        "requests": measured,
        "succeeded": len(latencies),
        "errors": sum(errors.values()),
        "error_codes": dict(errors),
        "duration_s": elapsed,
        "requests_per_s": measured / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "acked_total": len(acked),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.grpc_create SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    print(json.dumps(asyncio.run(run(spec))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
