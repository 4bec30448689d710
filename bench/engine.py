"""The run engine's throughput: results produced per second by one RunEvaluation.

``ces-eval serve`` (pinned to the server's core, as the other measurements) gets ``evaluations``
of the data sets' realistic golden evaluations (bench/data.py: ~5 KB, six turns) through gRPC
CreateEvaluation; then one RunEvaluation of all of them with ``run_count`` ``repetitions`` runs
to its end. The time is from the call to the operation done (polled with GetOperation every
10 ms), so it holds every result's play, its storage with the run's progress and the
evaluations' derived fields, and the conversations. The run is then checked: COMPLETED, with
``progress`` counting every result and every result stored once.

    python -m bench.engine [--database URL] [--evaluations 200] [--repetitions 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from google.longrunning import operations_pb2

from bench import data
from bench.servers import pinned, serve_command, start
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

__all__ = ["measure_engine"]

_SERVICE = "/google.cloud.ces.v1beta.EvaluationService"
_POLL = 0.01  # seconds between two looks at the operation


def _call(channel: grpc.Channel, method: str, request: Any, response: type[Any]) -> Any:  # noqa: ANN401 - any message
    stub = channel.unary_unary(
        method,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    return stub(request, timeout=120)


def measure_engine(
    url: str,
    work: Path,
    *,
    evaluations: int = 200,
    repetitions: int = 5,
    server_cpu: int | None = None,
    label: str = "engine",
) -> dict[str, Any]:
    """One run of ``evaluations`` x ``repetitions`` on the database ``url``: its numbers."""
    app = f"projects/bench/locations/us-central1/apps/engine-{time.strftime('%Y%m%d%H%M%S')}"
    data_set = data.DataSet(app, evaluations, 1)
    command = pinned(server_cpu, serve_command(url, work / "exports", "--scheduler", "off"))
    server = start(label, command, work / f"{label}.log")
    try:
        with grpc.insecure_channel(server.grpc_target) as channel:
            names = []
            for index in range(evaluations):
                evaluation = evaluation_pb2.Evaluation()
                evaluation.CopyFrom(data.evaluation(data_set, index))
                for output in ("name", "etag", "create_time", "update_time"):
                    evaluation.ClearField(output)
                created = _call(
                    channel,
                    f"{_SERVICE}/CreateEvaluation",
                    service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation),
                    evaluation_pb2.Evaluation,
                )
                names.append(created.name)
            request = evaluation_pb2.RunEvaluationRequest(
                app=app, evaluations=names, run_count=repetitions
            )
            started = time.monotonic()
            operation = _call(
                channel, f"{_SERVICE}/RunEvaluation", request, operations_pb2.Operation
            )
            while not operation.done:
                time.sleep(_POLL)
                operation = _call(
                    channel,
                    "/google.longrunning.Operations/GetOperation",
                    operations_pb2.GetOperationRequest(name=operation.name),
                    operations_pb2.Operation,
                )
            seconds = time.monotonic() - started
            if operation.HasField("error"):
                raise SystemExit(f"bench: the run failed: {operation.error}")
            response = service_pb2.RunEvaluationResponse()
            operation.response.Unpack(response)
            run = _call(
                channel,
                f"{_SERVICE}/GetEvaluationRun",
                service_pb2.GetEvaluationRunRequest(name=response.evaluation_run),
                evaluation_pb2.EvaluationRun,
            )
    finally:
        code = server.stop()
    total = evaluations * repetitions
    progress = run.progress
    checked = (
        run.state == evaluation_pb2.EvaluationRun.COMPLETED
        and progress.total_count == progress.completed_count == total
        and len(set(run.evaluation_results)) == total
    )
    return {
        "database": url.split(":", 1)[0],
        "evaluations": evaluations,
        "repetitions": repetitions,
        "results": total,
        "seconds": round(seconds, 3),
        "results_per_s": round(total / seconds, 1),
        "run_checked": checked,
        "server_exit": code,
        "server_log_problems": server.log_problems(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--database", default="", help="database URL (default: a new SQLite file)")
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ces-eval-engine-") as folder:
        work = Path(folder)
        url = args.database or f"sqlite:///{work / 'engine.db'}"
        found = measure_engine(
            url, work, evaluations=args.evaluations, repetitions=args.repetitions
        )
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
