"""What recording and replaying cost a run against the team's own agent (docs/agents.md,
"Record and replay"): the same run of ``evaluations`` two-turn goldens (``repetitions`` times
each, a judge call per golden) against a local agent answering at once, in two apps of one
``ces-eval serve``: one plays without recording, the other records every exchange, alternately
twice (the second recording replaces the first); then the recorded app replays with the agent
stopped. Each run is timed from RunEvaluation to its operation done (polled every 10 ms).
Reported as ratios measured in the same run, over the faster plain run: recorded (new rows),
recorded again (replacing rows) and replayed. Every run is checked to give the same outcomes.

    python -m bench.recording [--database URL] [--evaluations 100] [--repetitions 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.servers import pinned, serve_command, start
from ces_eval.testing import Emulator

__all__ = ["measure_recording"]

_POLL = 0.01


def _answer(request: dict[str, Any]) -> bytes:
    """The agent: a tool call for a question, the weather for its response, a greeting else;
    a judge's word-for-word score."""
    if "kind" in request:
        return b'{"semanticSimilarity": 4, "hallucination": 1, "explanation": "ok"}'
    session = request.get("config", {}).get("session", "")
    app = session.split("/sessions/", 1)[0]
    for given in request.get("inputs", []):
        if "toolResponses" in given:
            return b'{"outputs": [{"text": "It is 21 degrees.", "turnCompleted": true}]}'
        if "weather" in given.get("text", ""):
            call = {"id": "c1", "tool": f"{app}/tools/get_weather", "args": {"city": "Paris"}}
            return json.dumps({"outputs": [{"toolCalls": {"toolCalls": [call]}}]}).encode()
    return b'{"outputs": [{"text": "Hello!", "turnCompleted": true}]}'


@contextmanager
def _agent() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: ANN401
            return

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            body = _answer(json.loads(self.rfile.read(size) or b"{}"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _golden(app: str, index: int) -> dict[str, Any]:
    tool = f"{app}/tools/get_weather"
    return {
        "displayName": f"Weather {index}",
        "golden": {
            "turns": [
                {"steps": [{"userInput": {"text": f"Hi, I am user {index}"}}]},
                {
                    "steps": [
                        {"userInput": {"text": "What is the weather in Paris?"}},
                        {"expectation": {"toolCall": {"tool": tool, "args": {"city": "Paris"}}}},
                        {
                            "expectation": {
                                "toolResponse": {"tool": tool, "response": {"temperature": 21}}
                            }
                        },
                        {
                            "expectation": {
                                "agentResponse": {
                                    "role": "agent",
                                    "chunks": [{"text": "It is 21 degrees."}],
                                }
                            }
                        },
                    ]
                },
            ]
        },
    }


def _timed_run(
    emulator: Emulator, app: str, names: list[str], repetitions: int
) -> tuple[float, list[str]]:
    """One run of ``names`` to its end: seconds, and its results' outcomes (sorted)."""
    body = {"app": app, "evaluations": names, "runCount": repetitions}
    started = time.monotonic()
    operation = emulator._call("POST", f"/v1beta/{app}:runEvaluation", body)
    while not operation.get("done"):
        time.sleep(_POLL)
        operation = emulator._call("GET", f"/v1beta/{operation['name']}")
    seconds = time.monotonic() - started
    if "error" in operation:
        raise SystemExit(f"bench: the run failed: {operation['error']}")
    run = emulator._call("GET", f"/v1beta/{operation['response']['evaluationRun']}")
    outcomes = []
    for name in run.get("evaluationResults", []):
        result = emulator._call("GET", f"/v1beta/{name}")
        outcomes.append(f"{result['executionState']} {result.get('evaluationStatus', '')}")
    return seconds, sorted(outcomes)


def measure_recording(
    url: str, work: Path, *, evaluations: int = 100, repetitions: int = 2
) -> dict[str, Any]:
    """The three runs (see the module) on the database ``url``: their numbers."""
    command = pinned(None, serve_command(url, work / "exports", "--scheduler", "off"))
    server = start("recording", command, work / "recording.log")
    emulator = Emulator(server.http_base, timeout=300)
    seconds: dict[str, float] = {}
    outcomes: dict[str, list[str]] = {}
    try:
        with _agent() as agent:
            apps = {}
            for mode in ("", "RECORD"):
                app = f"projects/bench/locations/us/apps/rec-{mode.lower() or 'plain'}"
                names = [
                    emulator._call("POST", f"/v1beta/{app}/evaluations", _golden(app, index))[
                        "name"
                    ]
                    for index in range(evaluations)
                ]
                emulator.set_agent(
                    app, agent + "/agent", judge_uri=agent + "/judge", recording_mode=mode
                )
                apps[mode] = (app, names)
            # Alternated, so that neither gains from the other's warming up; the second
            # recording replaces the first's (each exchange's row is read, then rewritten).
            for label, mode in (
                ("plain", ""),
                ("recorded", "RECORD"),
                ("plain again", ""),
                ("recorded again", "RECORD"),
            ):
                app, names = apps[mode]
                seconds[label], outcomes[label] = _timed_run(emulator, app, names, repetitions)
        # The agent is stopped: the recorded app replays.
        app, names = apps["RECORD"]
        emulator.set_agent(
            app, agent + "/agent", judge_uri=agent + "/judge", recording_mode="REPLAY"
        )
        seconds["replayed"], outcomes["replayed"] = _timed_run(emulator, app, names, repetitions)
        recordings = len(emulator.agent_recordings(app))
    finally:
        code = server.stop()
    plain = min(seconds["plain"], seconds["plain again"])
    return {
        "database": url.split(":", 1)[0],
        "results": evaluations * repetitions,
        "recordings": recordings,
        "seconds": {label: round(value, 3) for label, value in seconds.items()},
        "recorded_over_plain": round(seconds["recorded"] / plain, 3),
        "recorded_again_over_plain": round(seconds["recorded again"] / plain, 3),
        "replayed_over_plain": round(seconds["replayed"] / plain, 3),
        "replay_checked": len({tuple(found) for found in outcomes.values()}) == 1,
        "server_exit": code,
        "server_log_problems": server.log_problems(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recording", description=__doc__)
    parser.add_argument("--database", default="", help="database URL (default: a new SQLite file)")
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ces-eval-recording-") as folder:
        work = Path(folder)
        url = args.database or f"sqlite:///{work / 'recording.db'}"
        found = measure_recording(
            url, work, evaluations=args.evaluations, repetitions=args.repetitions
        )
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
