"""The run engine's throughput: results produced per second by one RunEvaluation, scripted
(:func:`measure_engine`) and against a local agent (:func:`measure_agent`).

``ces-eval serve`` (pinned to the server's core, as the other measurements) gets ``evaluations``
of the data sets' realistic golden evaluations (bench/data.py: ~5 KB, six turns) through gRPC
CreateEvaluation; then one RunEvaluation of all of them with ``run_count`` ``repetitions`` runs
to its end. The time is from the call to the operation done (polled with GetOperation every
10 ms), so it holds every result's play, its storage with the run's progress and the
evaluations' derived fields, and the conversations. The run is then checked: COMPLETED, with
``progress`` counting every result and every result stored once.

Against an agent (docs/agents.md, "Concurrency"): a local agent (bench/agent.py, its own
process, pinned to the other core) answers each call after ``delay`` seconds; runs of
``goldens`` single-turn goldens, then of as many 3-turn goldens (STABLE: a session per turn,
one after another), at the endpoint's default concurrency N, each as a ratio of the ideal time
ceil(goldens / N) x turns x delay; then the results per second of ``goldens`` x 5 single-turn
repetitions against an agent answering at once; then the scale: one run of ``scale_sessions``
(:data:`SCALE_SESSIONS` by default: 100 goldens x 100) against that agent, with the server's peak
RSS over the run (VmHWM, reset before it) beside its RSS before, so that what the run costs in
memory shows: bounded means it does not grow with the run's size.

    python -m bench.engine [--database URL] [--evaluations 200] [--repetitions 5] [--agent]
                           [--server-cpu 0] [--agent-cpu 1]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.longrunning import operations_pb2

from bench import data
from bench.servers import pinned, serve_command, start
from ces_eval.core.resources.agent_endpoints import DEFAULT_SESSIONS
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["measure_agent", "measure_engine"]

_SERVICE = "/google.cloud.ces.v1beta.EvaluationService"
_EMULATOR = "/ces_eval.emulator.v1.EmulatorService"
_POLL = 0.01  # seconds between two looks at the operation
AGENT_DELAY = 0.25  # seconds the local agent takes to answer each call
SCALE_SESSIONS = 10_000  # the largest run (limits.MAX_RUN_RESULTS)


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
            seconds, run = _timed_run(channel, app, names, repetitions)
    finally:
        code = server.stop()
    total = evaluations * repetitions
    checked = _checked(run, total)
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


def _timed_run(
    channel: grpc.Channel, app: str, names: list[str], repetitions: int
) -> tuple[float, evaluation_pb2.EvaluationRun]:
    """RunEvaluation of ``names`` x ``repetitions`` to its end: its seconds (from the call to
    the operation seen done) and the run."""
    request = evaluation_pb2.RunEvaluationRequest(app=app, evaluations=names, run_count=repetitions)
    started = time.monotonic()
    operation = _call(channel, f"{_SERVICE}/RunEvaluation", request, operations_pb2.Operation)
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
    return seconds, run


def _checked(run: evaluation_pb2.EvaluationRun, total: int) -> bool:
    """``run`` COMPLETED, its progress counting ``total`` results, each listed once."""
    progress = run.progress
    return (
        run.state == evaluation_pb2.EvaluationRun.COMPLETED
        and progress.total_count == progress.completed_count == total
        and len(set(run.evaluation_results)) == total
    )


@contextmanager
def _local_agent(delay: float, cpu: int | None) -> Iterator[str]:
    """bench/agent.py answering after ``delay`` seconds, pinned to ``cpu``: its URL."""
    command = pinned(cpu, [sys.executable, "-m", "bench.agent", "--delay", str(delay)])
    process = subprocess.Popen(command, stdout=subprocess.PIPE)
    try:
        line = process.stdout.readline() if process.stdout is not None else b""
        if not line.strip().isdigit():
            raise SystemExit("bench: the local agent did not start")
        port = int(line)
        yield f"http://127.0.0.1:{port}/run"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _goldens(channel: grpc.Channel, app: str, count: int, turns: int) -> list[str]:
    """``count`` goldens of ``turns`` turns each (a user text, the agent's expected answer)
    created in ``app``: their names."""
    names = []
    for index in range(count):
        evaluation = evaluation_pb2.Evaluation(display_name=f"Golden {index}")
        for turn_index in range(turns):
            turn = evaluation.golden.turns.add()
            turn.steps.add().user_input.text = f"Hello, turn {turn_index + 1}"
            turn.steps.add().expectation.agent_response.chunks.add().text = "Hello!"
        created = _call(
            channel,
            f"{_SERVICE}/CreateEvaluation",
            service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation),
            evaluation_pb2.Evaluation,
        )
        names.append(created.name)
    return names


def _agent_run(
    channel: grpc.Channel, app: str, uri: str, *, goldens: int, turns: int, repetitions: int
) -> dict[str, Any]:
    """One run of ``goldens`` goldens of ``turns`` turns x ``repetitions`` in ``app``, played
    against the agent at ``uri`` at the endpoint's default concurrency: its numbers."""
    endpoint = emulator_pb2.AgentEndpoint(name=f"{app}/agentEndpoint", uri=uri)
    _call(
        channel,
        f"{_EMULATOR}/UpdateAgentEndpoint",
        emulator_pb2.UpdateAgentEndpointRequest(agent_endpoint=endpoint),
        emulator_pb2.AgentEndpoint,
    )
    names = _goldens(channel, app, goldens, turns)
    seconds, run = _timed_run(channel, app, names, repetitions)
    total = goldens * repetitions
    errors = run.progress.error_count
    return {
        "goldens": goldens,
        "turns": turns,
        "repetitions": repetitions,
        "sessions": total,
        "seconds": round(seconds, 3),
        "results_per_s": round(total / seconds, 1),
        "run_checked": _checked(run, total) and errors == 0,
    }


def measure_agent(
    url: str,
    work: Path,
    *,
    goldens: int = 200,
    scale_sessions: int = SCALE_SESSIONS,
    server_cpu: int | None = None,
    agent_cpu: int | None = None,
    label: str = "engine-agent",
) -> dict[str, Any]:
    """Runs against a local agent on the database ``url`` (see the module): their numbers,
    each delayed run with its ideal time and its ratio to it."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    apps = f"projects/bench/locations/us-central1/apps/agent-{stamp}"
    command = pinned(server_cpu, serve_command(url, work / "exports", "--scheduler", "off"))
    server = start(label, command, work / f"{label}.log")
    sessions = DEFAULT_SESSIONS
    found: dict[str, Any] = {"concurrency": sessions, "agent_delay_s": AGENT_DELAY}
    try:
        with grpc.insecure_channel(server.grpc_target) as channel:
            with _local_agent(AGENT_DELAY, agent_cpu) as uri:
                for key, turns in (("single_turn", 1), ("three_turns", 3)):
                    measured = _agent_run(
                        channel, f"{apps}-{turns}", uri, goldens=goldens, turns=turns, repetitions=1
                    )
                    ideal = math.ceil(goldens / sessions) * turns * AGENT_DELAY
                    measured["ideal_seconds"] = ideal
                    measured["ratio_to_ideal"] = round(ideal / measured["seconds"], 3)
                    found[key] = measured
            with _local_agent(0.0, agent_cpu) as uri:
                found["zero_latency"] = _agent_run(
                    channel, f"{apps}-fast", uri, goldens=goldens, turns=1, repetitions=5
                )
                before = server.memory_mb("VmRSS")
                peak_reset = server.reset_peak()
                scale = _agent_run(
                    channel,
                    f"{apps}-scale",
                    uri,
                    goldens=100,
                    turns=1,
                    repetitions=max(1, scale_sessions // 100),
                )
                scale["rss_before_mb"] = before
                scale["peak_rss_mb"] = server.memory_mb("VmHWM") if peak_reset else None
                scale["rss_after_mb"] = server.memory_mb("VmRSS")
                found["scale"] = scale
    finally:
        found["server_exit"] = server.stop()
    found["server_log_problems"] = server.log_problems()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--database", default="", help="database URL (default: a new SQLite file)")
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--agent", action="store_true", help="also the runs against a local agent")
    parser.add_argument("--server-cpu", type=int, help="pin ces-eval serve to this CPU")
    parser.add_argument("--agent-cpu", type=int, help="pin the local agent to this CPU")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ces-eval-engine-") as folder:
        work = Path(folder)
        url = args.database or f"sqlite:///{work / 'engine.db'}"
        found = measure_engine(
            url,
            work,
            evaluations=args.evaluations,
            repetitions=args.repetitions,
            server_cpu=args.server_cpu,
        )
        if args.agent:
            agent_url = args.database or f"sqlite:///{work / 'agent.db'}"
            found["agent"] = measure_agent(
                agent_url,
                work,
                goldens=args.evaluations,
                server_cpu=args.server_cpu,
                agent_cpu=args.agent_cpu,
            )
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
