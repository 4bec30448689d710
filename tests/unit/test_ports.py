"""The core's I/O ports (src/ces_eval/core/aip/ports.py): the core reaches ``gs://`` objects only
through the context's :class:`ObjectStore` and the team's agent only through its
:class:`AgentHttp`, so a second implementation, here ones that keep objects and answers in
memory, serves exports, imports and runs with no edit of the core, and neither the export folder
nor the network is touched."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ces_eval.core.aip.ports import (
    AgentHttp,
    AgentUnreachable,
    HttpAnswer,
    HttpSession,
    ObjectError,
    ObjectLocation,
    ObjectMissing,
    ObjectStore,
    ObjectTooLarge,
    PathRefused,
)
from ces_eval.core.engine import agents, outcomes
from ces_eval.core.engine.backoff import BACKOFF, Backoff
from ces_eval.core.io.agent_http import HttpxAgents
from ces_eval.core.io.objects import ExportFolder
from ces_eval.core.resources.agent_endpoints import Endpoint
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.support.agent import golden_play
from tests.unit.test_imports import APP, Importer, Request, _export


@dataclass(frozen=True)
class _Spot:
    uri: str

    def child(self, name: str) -> _Spot:
        return _Spot(f"{self.uri}/{name}")


@dataclass
class MemoryBucket:
    """Objects in a dict by URI; a URI under ``gs://refused/`` is refused as a link would be."""

    objects: dict[str, bytes] = field(default_factory=dict)

    def locate(self, gcs_uri: str, namespace: str) -> ObjectLocation:
        if not gcs_uri.startswith("gs://") or len(gcs_uri) == len("gs://"):
            raise ObjectError(f"expected a gs:// URI, got {gcs_uri!r}")
        return _Spot(gcs_uri.rstrip("/"))

    def probe(self, location: ObjectLocation) -> None:
        self._check(location)

    def read(self, location: ObjectLocation, limit: int) -> bytes:
        self._check(location)
        if location.uri not in self.objects:
            raise ObjectMissing(location.uri)
        data = self.objects[location.uri]
        if len(data) > limit:
            raise ObjectTooLarge(f"{len(data)} bytes", limit=limit)
        return data

    def write(self, location: ObjectLocation, data: bytes, owner: str) -> None:
        self._check(location)
        self.objects[location.uri] = data

    def remove(self, location: ObjectLocation) -> bool:
        self._check(location)
        return self.objects.pop(location.uri, None) is not None

    @staticmethod
    def _check(location: ObjectLocation) -> None:
        if location.uri.startswith("gs://refused/"):
            raise PathRefused(f"{location.uri} passes through a link", link=True)


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[tuple[Importer, MemoryBucket]]:
    harness = Importer(tmp_path / "db.sqlite", tmp_path / "exports")
    store = MemoryBucket()
    objects: ObjectStore = store  # the Protocol is all the core asks of it
    harness.core.context = dataclasses.replace(harness.core.context, objects=objects)
    yield harness, store
    harness.close()
    assert not (tmp_path / "exports").exists()  # the export folder was never used


def test_the_server_runs_with_the_export_folder(tmp_path: Path) -> None:
    harness = Importer(tmp_path / "db.sqlite", tmp_path / "exports")
    try:
        assert harness.core.context.objects == ExportFolder(tmp_path / "exports")
        assert isinstance(harness.core.context.agents, HttpxAgents)
    finally:
        harness.close()


def test_an_export_and_its_import_go_through_the_store(
    bucket: tuple[Importer, MemoryBucket],
) -> None:
    core, store = bucket
    core.create("One", "e1")
    uri = _export(core, "gs://bucket/exports")
    assert list(store.objects) == [uri]
    assert b"One" in store.objects[uri]
    core.call(
        "delete_evaluation", service_pb2.DeleteEvaluationRequest(name=f"{APP}/evaluations/e1")
    )
    response = core.imported(Request(parent=APP, gcs_uri=uri))
    assert [e.display_name for e in response.evaluations] == ["One"]


def test_the_stores_refusals_are_the_apis_errors(bucket: tuple[Importer, MemoryBucket]) -> None:
    core, store = bucket

    def refusal(uri: str) -> ServiceError:
        with pytest.raises(ServiceError) as caught:
            core.call("import_evaluations", Request(parent=APP, gcs_uri=uri))
        return caught.value

    assert refusal("gs://b/x").code == Code.NOT_FOUND
    store.objects["gs://b/big"] = b" " * (11 * 1024 * 1024)
    large = refusal("gs://b/big")
    assert large.code == Code.INVALID_ARGUMENT and "fewer evaluations" in large.message
    assert refusal("gs://refused/x").code == Code.PERMISSION_DENIED
    assert refusal("not-a-uri").code == Code.INVALID_ARGUMENT
    with pytest.raises(ServiceError) as refused:
        core.call(
            "export_evaluations",
            service_pb2.ExportEvaluationsRequest(
                parent=APP,
                names=[f"{APP}/evaluations/none"],
                include_evaluations=True,
                export_options=service_pb2.ExportOptions(gcs_uri="gs://refused/x"),
            ),
        )
    assert refused.value.code == Code.PERMISSION_DENIED


@dataclass
class _Answer:
    body: bytes
    status: int = 200

    def header(self, name: str) -> str:
        return "application/json" if name.lower() == "content-type" else ""

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.body


@dataclass
class ScriptedAgent:
    """An agent's answers from a function of what was posted; ``sessions`` records what each
    session was opened with."""

    answer: Callable[[str, dict[str, object]], bytes]
    sessions: list[tuple[Sequence[str], float, Callable[[str, int], bool]]] = field(
        default_factory=list
    )
    posted: list[tuple[str, Mapping[str, str]]] = field(default_factory=list)

    def session(
        self, uris: Sequence[str], timeout: float, refused: Callable[[str, int], bool]
    ) -> HttpSession:
        self.sessions.append((uris, timeout, refused))
        return self

    @contextlib.asynccontextmanager
    async def post(
        self, uri: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[HttpAnswer]:
        self.posted.append((uri, headers))
        yield _Answer(self.answer(uri, json.loads(body)))

    async def close(self) -> None:
        pass


_QUICK = Backoff(base=BACKOFF.base / 1000, cap=BACKOFF.cap / 1000)


def _play(http: AgentHttp, server_ports: tuple[int, ...] = ()) -> outcomes.Played:
    given = golden_play("Where is my refund?")
    endpoint = Endpoint(
        uri="http://agent.example/run",
        headers={"Authorization": "Bearer t"},
        timeout=5.0,
        max_response_bytes=2**20,
        judge_uri="",
        simulator_uri="",
        server_ports=server_ports,
    )

    async def play() -> outcomes.Played:
        # Back-offs a thousand times shorter than the server's: a push back is tried again.
        agent = agents.Agent(endpoint, ("agent.example",), http, backoff=_QUICK)
        try:
            return await agent.play(given, 0)
        finally:
            await agent.close()

    return asyncio.run(play())


def test_the_agent_is_played_through_the_port() -> None:
    def answer(uri: str, request: dict[str, object]) -> bytes:
        assert uri == "http://agent.example/run"
        assert "Where is my refund?" in json.dumps(request)
        return json.dumps({"outputs": [{"text": "It is on its way."}]}).encode()

    http = ScriptedAgent(answer)
    played = _play(http, server_ports=(50051, 8080))
    assert played.result.execution_state == evaluation_pb2.EvaluationResult.COMPLETED
    assert "It is on its way." in str(played.conversation)
    [(uris, timeout, refused)] = http.sessions
    assert uris[0] == "http://agent.example/run" and timeout == 5.0
    # The engine's rule goes with the session: the server's own ports on this machine refused.
    assert refused("127.0.0.1", 8080) and refused("::1", 50051)
    assert not refused("127.0.0.1", 9000) and not refused("192.0.2.7", 8080)
    [(_, headers)] = http.posted
    assert headers["Authorization"] == "Bearer t" and headers["accept-encoding"] == "identity"


def test_the_ports_errors_are_the_results_errors() -> None:
    def unreachable(uri: str, request: dict[str, object]) -> bytes:
        raise AgentUnreachable

    http = ScriptedAgent(unreachable)
    played = _play(http)
    assert played.result.execution_state == evaluation_pb2.EvaluationResult.ERROR
    assert "could not be reached (no HTTP answer)" in played.result.error_info.error_message
    assert len(http.posted) == BACKOFF.attempts  # no HTTP answer is a push back
