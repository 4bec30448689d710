"""A small real agent for the run engine's bring-your-own-agent mode (docs/agents.md): an HTTP
server in a thread of the test process speaking CES's session JSON (RunSessionRequest in,
RunSessionResponse out), with a deterministic bug and paths that misbehave.

``POST /agent``: a weather agent. A user text naming a city ("weather in Paris") asks for the
tool ``get_weather`` of the session's app with ``{"city": CITY}``; the tool's response is
answered "It is {temperature} degrees in {city}." The bug: for Berlin it also sends ``"units":
"fahrenheit"``. A text saying "goodbye" is answered "Goodbye!" and the end of the session (an
``endSession`` output). A text without a city is answered "Hello! Ask me about the weather."
Each request is recorded (path, session, whether it had context, its whole config, its
Authorization header, its inputs, and a simulator's or judge's execution mode and conversation).
An event (a scenario the agent starts) is answered with that greeting too. Each ``/agent`` call
waits :attr:`Agent.delay` seconds first (0: none), or :attr:`Agent.slow` when a user text says
"wait", and the agent counts the most calls it answered at once (:attr:`Agent.most_at_once`: the
run's concurrency). A call still waiting when the agent stops answers then.

``/judge`` is a judge and ``/simulator`` a user simulator (docs/agents.md), both
deterministic; ``/judge-wrong`` a judge answering a similarity out of range. ``/slow`` answers
after :attr:`Agent.slow` seconds; ``/fail`` HTTP 500; ``/huge`` 2 MB of
JSON; ``/malformed`` text that is not JSON; ``/shape`` JSON that is no RunSessionResponse;
``/redirect`` a 302 to ``/agent``.

Back-pressure (docs/agents.md, "Back-pressure"): ``/push-back?status=S&times=N&retry-after=R
&then=P`` pushes back the first N calls made to that very URL (every one when ``times`` is
absent) and answers the next ones as path P does (``/agent`` when absent): with HTTP S (503
when absent; ``Retry-After: R`` when given) or, for ``status=reset``, by resetting the
connection without an answer. Each URL counts its own calls (:attr:`Agent.calls`): give each
test its own, with a ``key`` parameter say.

Hostile paths (tests/integration/test_agent_attacks.py), each answering bytes built once, so
that the agent's own work (in the test process) stays cheap: ``/long`` one text of 4.1 MB;
``/huge-text`` one of 60 MB (under the largest answer limit, 64 MiB);
``/many-calls`` 40,000 tool calls in one answer; ``/spans`` a trace of 400,000 spans (11 MB);
``/bulky`` 15 texts of 260,000 characters (3.9 MB, under the default 4 MiB answer limit);
``/judge-huge`` a judge's similarity that is an array of 4 MB; ``/nested-args`` a tool call
whose arguments nest 31 levels deep (more than any write accepts); ``/deep`` JSON nested
100,000 deep; ``/echo`` HTTP 500 repeating the request's Authorization header (once whole,
once across the 200th character); ``/echo-ok`` a 200 whose text repeats it (an answer no
recording may keep).
"""

from __future__ import annotations

import collections
import json
import re
import socket
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from ces_eval.core.aip.stamps import now
from ces_eval.core.engine import outcomes
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.testing import Emulator, EmulatorError

if TYPE_CHECKING:
    from ces_eval.testing.server import RunningServer
    from tests.support.tls import Certificates

TOOL = "{app}/tools/get_weather"  # of the app whose session it is
_CITY = re.compile(r"weather in (\w+)", re.IGNORECASE)


@dataclass
class Agent:
    """The running agent: its base URL and what it was sent."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    slow: float = 3.0
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    # Seconds each /agent call takes before it answers (sessions then overlap), and the most
    # /agent calls it was answering at once.
    delay: float = 0.0
    most_at_once: int = 0
    at_once: int = 0
    connections: int = 0  # accepted (and, over TLS, shaken hands)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Set when the agent stops: a call still waiting (``/slow``, a user text saying "wait")
    # answers then.
    released: threading.Event = field(default_factory=threading.Event, repr=False)

    def count(self, path: str) -> int:
        """How many calls ``path`` (with its query) was sent."""
        with self.lock:
            return self.calls[path]

    def _wait(self, seconds: float) -> None:
        self.released.wait(seconds)


def _outputs(session: str, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for given in inputs:
        if "toolResponses" in given:
            [response] = given["toolResponses"]["toolResponses"]
            weather = response["response"]
            degrees = weather["temperature"]  # a JSON number: 21.0 is said 21
            degrees = int(degrees) if float(degrees).is_integer() else degrees
            text = f"It is {degrees} degrees in {weather['city']}."
            # Its trace: the tool ran for 25 ms (a span naming the tool).
            tool = TOOL.format(app=session.split("/sessions/", maxsplit=1)[0])
            span = {
                "name": "get_weather",
                "attributes": {"tool": tool},
                "startTime": "2026-01-01T00:00:00Z",
                "endTime": "2026-01-01T00:00:00.025Z",
            }
            trace = {"rootSpan": {"name": "turn", "childSpans": [span]}}
            return [{"text": text, "turnCompleted": True, "diagnosticInfo": trace}]
        text = given.get("text", "")
        if "goodbye" in text.lower():
            return [{"text": "Goodbye!"}, {"endSession": {}, "turnCompleted": True}]
        found = _CITY.search(text)
        if found is not None:
            args: dict[str, Any] = {"city": found.group(1)}
            if found.group(1) == "Berlin":  # the bug
                args["units"] = "fahrenheit"
            tool = TOOL.format(app=session.split("/sessions/", maxsplit=1)[0])
            call = {"id": f"call-{found.group(1)}", "tool": tool, "args": args}
            return [{"toolCalls": {"toolCalls": [call]}}]
    return [{"text": "Hello! Ask me about the weather.", "turnCompleted": True}]


def _judged(request: dict[str, Any]) -> dict[str, Any]:
    """The judge: a turn's answer is similar (4) when it says exactly what was expected, else 1,
    and unjustified (0) when it claims sunshine; a rubric is met when a temperature was given."""
    if request.get("kind") == "RUBRIC":
        texts = [
            chunk.get("text", "")
            for message in request.get("conversation", [])
            for chunk in message.get("chunks", [])
        ]
        met = any("degrees" in text for text in texts)
        return {"score": 1.0 if met else 0.0, "explanation": "A temperature was given."}
    same = request.get("expected", "").casefold() == request.get("observed", "").casefold()
    claims = "sunny" in request.get("observed", "")
    return {
        "semanticSimilarity": 4 if same else 1,
        "hallucination": 0 if claims else 1,
        "explanation": "Compared word for word.",
    }


def _simulated(request: dict[str, Any]) -> dict[str, Any]:
    """The user simulator: asks for the weather in the scenario's city, and is done once the
    agent gave a temperature (or after two answers)."""
    conversation = request.get("conversation", [])
    agent_texts = [
        chunk.get("text", "")
        for message in conversation
        if message.get("role") == "agent"
        for chunk in message.get("chunks", [])
    ]
    if any("degrees" in text for text in agent_texts):
        return {"done": True, "userGoalSatisfied": True, "taskCompleted": True}
    if len(agent_texts) >= 2:
        return {"done": True, "userGoalSatisfied": False, "explanation": "No temperature."}
    found = _CITY.search(request.get("scenario", {}).get("task", ""))
    city = found.group(1) if found else "Nowhere"
    return {"userInput": {"text": f"What is the weather in {city}?"}}


LONG_TEXT_CHARS = 4_100_000
MANY_CALLS = 40_000
SPANS = 400_000
BULKY_TEXTS, BULKY_CHARS = 15, 260_000
DEEP = 100_000


def _nested_args() -> object:
    args: dict[str, Any] = {"leaf": 1}
    for _ in range(30):
        args = {"inner": args}
    call = {"id": "nested", "tool": "tools/nested", "args": args}
    return {"outputs": [{"toolCalls": {"toolCalls": [call]}}]}


def _spans() -> object:
    spans = [{"name": f"span-{index:012d}"} for index in range(SPANS)]
    trace = {"rootSpan": {"name": "turn", "childSpans": spans}}
    return {"outputs": [{"text": "Hi", "diagnosticInfo": trace}]}


# The hostile paths' answers (see the module), as JSON documents.
_HOSTILE: dict[str, Callable[[], object]] = {
    "/long": lambda: {"outputs": [{"text": ("lorem " * LONG_TEXT_CHARS)[:LONG_TEXT_CHARS]}]},
    "/huge-text": lambda: {"outputs": [{"text": "lorem " * 10_000_000}]},
    "/many-calls": lambda: {
        "outputs": [{"toolCalls": {"toolCalls": [{"tool": "tools/elsewhere"}] * MANY_CALLS}}]
    },
    "/spans": _spans,
    "/bulky": lambda: {"outputs": [{"text": ("ipsum " * BULKY_CHARS)[:BULKY_CHARS]}] * BULKY_TEXTS},
    "/judge-huge": lambda: {"semanticSimilarity": [10**39] * 99_000},
    "/nested-args": _nested_args,
}


@cache
def _hostile(path: str) -> bytes:
    """The prebuilt answer of a hostile path (see the module)."""
    if path == "/deep":
        return b'{"outputs": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    return json.dumps(_HOSTILE[path]()).encode()


def _handler(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def setup(self) -> None:
            with agent.lock:
                agent.connections += 1
            super().setup()

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the caller gave up (a run cancelled): nobody reads the answer

        def _pushed_back(self) -> str | None:
            """A ``/push-back`` call (see the module): None once pushed back, else the path
            it is answered as."""
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            with agent.lock:
                agent.calls[self.path] += 1
                count = agent.calls[self.path]
            if "times" in query and count > int(query["times"][0]):
                return query.get("then", ["/agent"])[0]
            status = query.get("status", ["503"])[0]
            if status == "reset":  # closed at once, unanswered: a TCP reset (no linger)
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True
                return None
            body = b"busy, come back later"
            self.send_response(int(status))
            if "retry-after" in query:
                self.send_header("Retry-After", query["retry-after"][0])
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(size) or b"{}")
            config = request.get("config", {})
            agent.requests.append(
                {
                    "path": self.path,
                    "session": config.get("session", ""),
                    "context": len(config.get("historicalContexts", [])),
                    "config": config,
                    "authorization": self.headers.get("Authorization", ""),
                    "inputs": request.get("inputs", []),
                    "executionMode": request.get("executionMode"),
                    "conversation": request.get("conversation", []),
                }
            )
            path = self.path
            if path.startswith("/push-back"):
                then = self._pushed_back()
                if then is None:
                    return
                path = then
            if path == "/agent":
                with agent.lock:
                    agent.at_once += 1
                    agent.most_at_once = max(agent.most_at_once, agent.at_once)
                try:
                    texts = [given.get("text", "") for given in request.get("inputs", [])]
                    agent._wait(agent.slow if any("wait" in t for t in texts) else agent.delay)
                finally:
                    with agent.lock:
                        agent.at_once -= 1
                outputs = _outputs(config.get("session", ""), request.get("inputs", []))
                body = json.dumps({"outputs": outputs})
                self._send(200, body.encode())
            elif path == "/judge":
                self._send(200, json.dumps(_judged(request)).encode())
            elif path == "/judge-wrong":
                self._send(200, b'{"semanticSimilarity": 9}')
            elif path == "/simulator":
                self._send(200, json.dumps(_simulated(request)).encode())
            elif path == "/slow":
                agent._wait(agent.slow)
                self._send(200, b'{"outputs": []}')
            elif path == "/fail":
                self._send(500, b"the agent broke", "text/plain")
            elif path == "/huge":
                self._send(200, json.dumps({"outputs": [{"text": "x" * 2_000_000}]}).encode())
            elif path == "/malformed":
                self._send(200, b"this is not JSON {", "text/plain")
            elif path == "/shape":
                self._send(200, b'{"outputs": "not a list of outputs"}')
            elif path in _HOSTILE or path == "/deep":
                self._send(200, _hostile(path))
            elif path == "/echo":
                secret = self.headers.get("Authorization", "")
                echoed = f"authorization={secret}; " + "x" * (190 - 16 - len(secret)) + secret
                self._send(500, echoed.encode(), "text/plain")
            elif path == "/echo-ok":
                secret = self.headers.get("Authorization", "")
                body = json.dumps({"outputs": [{"text": f"Your token is {secret}."}]})
                self._send(200, body.encode())
            elif path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/agent")
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._send(404, b"no such path", "text/plain")

    return Handler


@contextmanager
def running_agent(tls: Certificates | None = None, *, keep_alive: bool = False) -> Iterator[Agent]:
    """The agent serving on a free loopback port until the block ends; over https with
    ``tls``'s server certificate when given; with HTTP/1.1 keep-alive when asked (else each
    answer closes its connection, HTTP/1.0)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Agent("")))
    scheme = "http"
    if tls is not None:
        server.socket = tls.server_context().wrap_socket(server.socket, server_side=True)
        scheme = "https"
    agent = Agent(f"{scheme}://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(agent)
    if keep_alive:
        server.RequestHandlerClass.protocol_version = "HTTP/1.1"
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-agent", daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def rest_call(server: RunningServer, method: str, path: str, body: object = None) -> Any:
    """One REST call to ``server``: its JSON answer (AssertionError for an HTTP error)."""
    request = urllib.request.Request(
        server.http_base + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{method} {path}: {error.code} {error.read()[:2000]!r}") from None


def run_evaluations(
    server: RunningServer, app: str, evaluations: list[str], **request: object
) -> tuple[Any, list[Any]]:
    """RunEvaluation of ``evaluations`` (with ``request``'s other fields) to its end: the run
    and its results."""
    return finished_run(server, start_run(server, app, evaluations, **request))


def start_run(server: RunningServer, app: str, evaluations: list[str], **request: object) -> Any:
    """RunEvaluation of ``evaluations`` (with ``request``'s other fields): its operation."""
    body = {"app": app, "evaluations": evaluations, **request}
    return rest_call(server, "POST", f"/v1beta/{app}:runEvaluation", body)


def finished_run(server: RunningServer, operation: Any) -> tuple[Any, list[Any]]:
    """The run of RunEvaluation's ``operation`` once ended, and its results."""
    done = Emulator(server.http_base).wait(operation, timeout=300)
    run = rest_call(server, "GET", f"/v1beta/{done['metadata']['evaluationRun']}")
    return run, [
        rest_call(server, "GET", f"/v1beta/{name}") for name in run.get("evaluationResults", [])
    ]


def refusal(server: RunningServer, app: str, endpoint: dict[str, Any]) -> EmulatorError:
    """UpdateAgentEndpoint's refusal of ``endpoint`` (INVALID_ARGUMENT); nothing is stored."""
    emulator = Emulator(server.http_base)
    try:
        emulator._call(
            "PATCH",
            f"/emulator/v1/{app}/agentEndpoint",
            {"name": f"{app}/agentEndpoint", **endpoint},
        )
    except EmulatorError as refused:
        assert refused.http_status == 400
        assert "uri" not in emulator.agent(app)  # nothing stored
        return refused
    raise AssertionError(f"{endpoint} was accepted")


def violation_fields(error: EmulatorError) -> list[str]:
    """The fields of ``error``'s BadRequest violations."""
    return [
        violation["field"]
        for detail in error.details
        for violation in detail.get("fieldViolations", [])
    ]


def golden_play(text: str) -> outcomes.Play:
    """The first repetition of a golden evaluation of one user turn saying ``text``, as the run
    engine hands it to the agent player."""
    evaluation = evaluation_pb2.Evaluation(name="projects/p/locations/l/apps/a/evaluations/e")
    evaluation.golden.turns.add().steps.add().user_input.text = text
    return outcomes.Play(
        evaluation=evaluation,
        repetition=0,
        rule=None,
        result_name=f"{evaluation.name}/results/r",
        conversation_name="projects/p/locations/l/apps/a/conversations/c",
        started=now(),
    )


def weather_golden(app: str, city: str, degrees: int, *, greeting: bool = False) -> dict[str, Any]:
    """A golden (as REST JSON) asking ``city``'s weather: the tool ``{app}/tools/get_weather``
    is called with the city and answers ``degrees``, which the agent then says; with
    ``greeting``, a turn saying "Hi" comes first. The test agent plays it as expected."""
    tool = f"{app}/tools/get_weather"
    steps: list[Any] = [
        {"userInput": {"text": f"What is the weather in {city}?"}},
        {"expectation": {"toolCall": {"tool": tool, "args": {"city": city}}}},
        {
            "expectation": {
                "toolResponse": {"tool": tool, "response": {"city": city, "temperature": degrees}}
            }
        },
        {
            "expectation": {
                "agentResponse": {
                    "role": "agent",
                    "chunks": [{"text": f"It is {degrees} degrees in {city}."}],
                }
            }
        },
    ]
    turns = [{"steps": [{"userInput": {"text": "Hi"}}]}] if greeting else []
    return {"displayName": f"Weather in {city}", "golden": {"turns": [*turns, {"steps": steps}]}}


# What differs between two runs of the same evaluations: names, times, the run, and the
# latencies of calls that a replay answers at once.
_ASIDE = frozenset({"name", "createTime", "displayName", "evaluationRun", "turnLatency"})


def compared_results(results: list[dict[str, Any]]) -> list[str]:
    """``results`` (as REST JSON) field by field, what differs between runs set aside
    (:data:`_ASIDE`, and the conversation each names), sorted: equal for two runs that played
    alike."""

    def kept(value: object) -> object:
        if isinstance(value, dict):
            return {
                key: kept(item)
                for key, item in value.items()
                if key not in _ASIDE and not (key == "conversation" and isinstance(item, str))
            }
        if isinstance(value, list):
            return [kept(item) for item in value]
        return value

    return sorted(json.dumps(kept(result), sort_keys=True) for result in results)
