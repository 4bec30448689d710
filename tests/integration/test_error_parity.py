"""One error, three surfaces: every error kind the server produces, provoked over gRPC, REST and
MCP of one running server, comes back alike (issue 16, item 8).

Each row of :data:`CASES` provokes one error kind with real components: a bad field, a missing
resource, a stale etag, no token, a body over the limit, SQLite's write lock held by another
program, a row written undecodable into the server's own database file, its file removed, ... The
same method is called on every surface the row names, and each answer is reduced to what must
agree (:class:`Seen`): the canonical code, the ErrorInfo reason and domain, the metadata *keys*
(values may name the surface), the kinds of details in their order and the BadRequest field
paths; REST and MCP also agree on the HTTP status. How each surface carries an error:

* gRPC: the status code, and a ``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer;
* REST: Google's JSON error envelope, ``{"error": {"code", "message", "status", "details"}}``;
* MCP: a ``tools/call`` result with ``isError`` whose text is that envelope or, for refusals at
  the HTTP boundary (authentication, body size, admission, browser guard), a JSON-RPC error
  whose ``data`` is the envelope's error object.

A surface that cannot express a row's call is left out of the row, which says why; a surface
whose refusal carries no details by design is listed in the row's ``bare`` (with why) and agrees
on the code alone. A row showing a drift between surfaces not fixed yet is ``xfail(strict=True)``:
the fix makes it pass, which fails the run until the mark goes. A second test keeps the table
in step with docs/semantics.md: every documented reason has a row, or a line of
:data:`ONE_SURFACE` saying why it exists on one surface only.

Servers, each shared by its rows: ``open`` (SQLite, no authentication), ``guarded``
(``--auth-tokens``), ``strained`` (``--max-concurrent-requests 1``); the row that removes the
database file gets a server of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.api import annotations_pb2
from google.protobuf import descriptor, json_format
from google.protobuf.message import Message
from google.rpc import status_pb2

from ces_eval.errors import DOMAIN, Code
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_service_pb2,
    evaluation_pb2,
    session_service_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.testing import Emulator
from ces_eval.testing.server import RunningServer, start_server
from tests.support import contract
from tests.support.agent import Agent
from tests.support.load import golden_evaluation
from tests.support.mcp import ACCEPT, tool_call
from tests.support.tokens import ALICE, BOB, READER, write_token_file

SURFACES = ("grpc", "rest", "mcp")
APP = "projects/parity/locations/l/apps/a"
BROKEN_APP = "projects/parity/locations/l/apps/broken"  # the undecodable row; no row lists it
GUARDED_APP = "projects/proj-a/locations/us/apps/app"  # alice's project (tests/support/tokens)
MISSING = f"{APP}/evaluations/missing"
FORGED = "not-a-valid-token-at-all"  # in no token file
OVER = 11 * 1024 * 1024  # bytes: past the 10 MiB request limit of every surface
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
_VARIABLE = re.compile(r"\{([a-z_.]+)(?:=[^}]*)?\}")
_SERVICES = (
    service_pb2.DESCRIPTOR.services_by_name["EvaluationService"],
    agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"],
    session_service_pb2.DESCRIPTOR.services_by_name["SessionService"],
)
# An app whose agent endpoint answers HTTP 500 (the test agent's /fail).
FAILING_AGENT_APP = "projects/parity/locations/l/apps/failing-agent"


# -- what a surface said -------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One surface's error reduced to what every surface must agree on; ``reason`` and
    ``domain`` are empty when no ErrorInfo came. ``http`` (REST and MCP only) is compared
    between the HTTP surfaces alone."""

    code: str
    reason: str = ""
    domain: str = ""
    metadata_keys: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    http: int | None = field(default=None, compare=False)


def _reduced(code: str, error: Mapping[str, Any], http: int | None) -> Seen:
    """The :class:`Seen` of an error object in the JSON form of ``google.rpc.Status``."""
    details: list[dict[str, Any]] = list(error.get("details", ()))
    infos = [d for d in details if d["@type"] == ERROR_INFO]
    assert len(infos) <= 1, details  # AIP-193: one ErrorInfo per error
    info = infos[0] if infos else {}
    return Seen(
        code=code,
        reason=info.get("reason", ""),
        domain=info.get("domain", ""),
        metadata_keys=tuple(sorted(info.get("metadata", {}))),
        details=tuple(d["@type"].rsplit(".", 1)[-1] for d in details),
        fields=tuple(
            v["field"]
            for d in details
            if d["@type"] == BAD_REQUEST
            for v in d.get("fieldViolations", ())
        ),
        http=http,
    )


def _envelope_error(response: httpx.Response) -> dict[str, Any]:
    """A REST answer's error object: Google's envelope, whose code is the HTTP status."""
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert error["code"] == response.status_code, body
    return error


def _mcp_error(response: httpx.Response) -> dict[str, Any]:
    """An MCP answer's error object: inside an ``isError`` tool result (HTTP 200), or the
    ``data`` of a JSON-RPC error (id null) for a refusal at the HTTP boundary."""
    body = response.json()
    if response.status_code == 200:
        result = body["result"]
        assert result["isError"] is True, body
        [block] = result["content"]
        envelope = json.loads(block["text"])
        assert set(envelope) == {"error"}, envelope
        error: dict[str, Any] = envelope["error"]
        return error
    assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", None, -32000), body
    error = body["error"]["data"]
    assert error["code"] == response.status_code, body
    return error


# -- one server, three surfaces ------------------------------------------------------------------


def _bearer(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


@dataclass
class World:
    """A running server, one client per surface, and the names of what its rows need."""

    server: RunningServer
    channel: grpc.Channel
    http: httpx.Client
    names: dict[str, str] = field(default_factory=dict)

    def grpc(self, path: str, request: bytes, token: str | None, timeout: float) -> Seen:
        """The error of the gRPC call ``path`` with the serialized ``request``."""
        call = self.channel.unary_unary(path)  # bytes in, bytes out
        metadata = list(_bearer(token).items()) or None
        try:
            call(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            code = error.code()
            trailers = dict(error.trailing_metadata() or ())
            if "grpc-status-details-bin" not in trailers:
                return Seen(code.name)
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            assert status.code == code.value[0], (status, code)
            return _reduced(code.name, json_format.MessageToDict(status), None)
        raise AssertionError(f"{path} succeeded over gRPC")

    def rest(
        self,
        verb: str,
        path: str,
        params: Mapping[str, str],
        body: Any,
        headers: Mapping[str, str],
    ) -> Seen:
        """The error of a REST request with ``body`` as JSON (none when None)."""
        content = None if body is None else json.dumps(body).encode()
        response = self.http.request(
            verb,
            path,
            params=params,
            content=content,
            headers={"content-type": "application/json", **headers} if content else headers,
        )
        assert response.status_code >= 400, f"{verb} {path}: {response.text[:300]}"
        error = _envelope_error(response)
        return _reduced(error["status"], error, response.status_code)

    def mcp(self, tool: str, arguments: Mapping[str, Any], headers: Mapping[str, str]) -> Seen:
        """The error of ``tools/call`` of ``tool``, sent as the reference pages' curl call does
        (no ``initialize`` first: the server is stateless)."""
        response = self.http.post(
            "/mcp",
            content=json.dumps(tool_call(tool, arguments)).encode(),
            headers={"accept": ACCEPT, "content-type": "application/json", **headers},
        )
        error = _mcp_error(response)
        return _reduced(error["status"], error, error["code"])


@contextlib.contextmanager
def _serving(server: RunningServer) -> Iterator[World]:
    world = _client(server)
    try:
        yield world
    finally:
        world.channel.close()
        world.http.close()
        server.kill()


def _create(world: World, parent: str, eid: str, token: str | None = None) -> str:
    created = world.http.post(
        f"/v1beta/{parent}/evaluations",
        params={"evaluationId": eid},
        json=json_format.MessageToDict(golden_evaluation(eid)),
        headers=_bearer(token),
    )
    assert created.status_code == 200, created.text
    name: str = created.json()["name"]
    return name


def _named_tool(world: World) -> str:
    """A tool of APP that an agent names (its delete is refused without force)."""
    tool = world.http.post(f"/v1beta/{APP}/tools", json={"clientFunction": {"name": "lookup"}})
    assert tool.status_code == 200, tool.text
    name: str = tool.json()["name"]
    agent = world.http.post(f"/v1beta/{APP}/agents", json={"displayName": "Root", "tools": [name]})
    assert agent.status_code == 200, agent.text
    return name


def _seed_linked(database: Path) -> str:
    """An evaluation that belongs to an evaluation dataset, written through the storage layer
    before the server opens the file: ``evaluation_datasets`` is output only (datasets own the
    link), so no API call sets it."""
    linked = golden_evaluation("linked")
    linked.name = f"{APP}/evaluations/linked"
    linked.etag = "etag-linked"
    linked.evaluation_datasets.append(f"{APP}/evaluationDatasets/d")
    linked.create_time.FromSeconds(1_700_000_000)
    linked.update_time.FromSeconds(1_700_000_000)
    storage = SqliteStorage(database)

    async def write() -> None:
        await storage.open()
        try:
            await storage.import_bundle([linked], [])
        finally:
            await storage.close()

    asyncio.run(write())
    return linked.name


def _break_row(database: Path, name: str) -> None:
    """Overwrite the stored evaluation ``name`` with bytes protobuf cannot parse (a truncated
    varint), as a file damaged on disk holds: the server must answer INTERNAL, not crash or
    leak the parser's message. Written by another connection, as any other program would."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        changed = connection.execute(
            "UPDATE evaluations SET data = X'FFFFFFFF' WHERE name = ?", (name,)
        ).rowcount
        connection.commit()
    assert changed == 1


def _plant_link(world: World) -> None:
    """A bucket in the export folder that is a symbolic link leading outside it."""
    outside = world.server.database.parent / "outside"
    outside.mkdir()
    world.server.export_dir.mkdir(parents=True, exist_ok=True)
    (world.server.export_dir / "linked-bucket").symlink_to(outside)


@pytest.fixture(scope="module")
def open_world(tmp_path_factory: pytest.TempPathFactory, agent: Agent) -> Iterator[World]:
    """The server as most run it: SQLite, no authentication."""
    database = tmp_path_factory.mktemp("parity-open") / "ces-eval.db"
    linked = _seed_linked(database)
    with _serving(start_server(database)) as world:
        world.names["linked"] = linked
        world.names["existing"] = _create(world, APP, "existing")
        world.names["undecodable"] = _create(world, BROKEN_APP, "undecodable")
        _break_row(database, world.names["undecodable"])
        _plant_link(world)
        world.names["named tool"] = _named_tool(world)
        Emulator(world.server.http_base).set_agent(FAILING_AGENT_APP, f"{agent.url}/fail")
        yield world


@pytest.fixture(scope="module")
def guarded_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """``--auth-tokens`` with the principals of tests/support/tokens.py."""
    folder = tmp_path_factory.mktemp("parity-guarded")
    tokens = write_token_file(folder / "tokens.json")
    with _serving(start_server(folder / "ces-eval.db", "--auth-tokens", str(tokens))) as world:
        world.names["alices"] = _create(world, GUARDED_APP, "alices", ALICE)
        yield world


@pytest.fixture(scope="module")
def strained_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One call in flight per surface at most."""
    database = tmp_path_factory.mktemp("parity-strained") / "ces-eval.db"
    with _serving(start_server(database, "--max-concurrent-requests", "1")) as world:
        yield world


@pytest.fixture
def removed_world(tmp_path: Path) -> Iterator[World]:
    """A server whose database file was removed while it ran: it answers UNAVAILABLE from then
    on, so it serves this row alone."""
    database = tmp_path / "ces-eval.db"
    with _serving(start_server(database)) as world:
        _create(world, APP, "before")
        database.unlink()
        # A read checks the files only when the last check is older than a few milliseconds
        # (storage/sqlite.py): wait until the server has noticed, as /healthz shows.
        deadline = time.monotonic() + 30
        while world.http.get("/healthz").status_code == 200:
            assert time.monotonic() < deadline, "the server never noticed its file removed"
            time.sleep(0.01)
        yield world


# -- provoking -----------------------------------------------------------------------------------

Provoke = Callable[[World], Seen]
Request = Callable[[World], Message]


def _method(request: Message) -> tuple[str, descriptor.MethodDescriptor]:
    """The service (full name) and method that take ``request``."""
    return next(
        (service.full_name, method)
        for service in _SERVICES
        for method in service.methods
        if method.input_type == request.DESCRIPTOR
    )


def _tool(method: str) -> str:
    """The MCP tool of an RPC: its name in snake case (``GetEvaluation`` → ``get_evaluation``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()


def _query_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _rest_form(request: Message) -> tuple[str, str, dict[str, str], Any]:
    """(verb, path, query, body) of ``request`` by its method's ``google.api.http`` rule: path
    variables from the request, the body field (or every other field, ``*``) as JSON, the
    remaining set fields as query parameters by their JSON names (google/api/http.proto)."""
    _, method = _method(request)
    rule = method.GetOptions().Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    fields = request.DESCRIPTOR.fields_by_name
    used = set()

    def variable(match: re.Match[str]) -> str:
        path = match.group(1)
        used.add(fields[path.split(".")[0]].json_name)
        value: Any = request
        for part in path.split("."):
            value = getattr(value, part)
        return str(value)

    path = _VARIABLE.sub(variable, getattr(rule, verb))
    as_json = json_format.MessageToDict(request)
    if rule.body == "*":
        return verb.upper(), path, {}, {k: v for k, v in as_json.items() if k not in used}
    body = None
    if rule.body:
        used.add(fields[rule.body].json_name)
        body = as_json.get(fields[rule.body].json_name, {})
    query = {k: _query_value(v) for k, v in as_json.items() if k not in used}
    return verb.upper(), path, query, body


def same(
    request: Request,
    *,
    token: str | None = None,
    surfaces: tuple[str, ...] = SURFACES,
    headers: Mapping[str, str] | None = None,
    deadline: float = 30,
) -> dict[str, Provoke]:
    """One call of the method ``request`` is for on each of ``surfaces``, rendered from the
    method's descriptor: gRPC by its path, REST by its HTTP rule, MCP by its tool. ``token``
    goes as a bearer token on every surface; ``headers`` on the HTTP surfaces; ``deadline``
    (seconds) is the gRPC deadline."""
    extra = {**_bearer(token), **(headers or {})}

    def over_grpc(world: World) -> Seen:
        message = request(world)
        service, method = _method(message)
        path = f"/{service}/{method.name}"
        return world.grpc(path, message.SerializeToString(), token, deadline)

    def over_rest(world: World) -> Seen:
        return world.rest(*_rest_form(request(world)), headers=extra)

    def over_mcp(world: World) -> Seen:
        message = request(world)
        _, method = _method(message)
        return world.mcp(_tool(method.name), json_format.MessageToDict(message), extra)

    calls = {"grpc": over_grpc, "rest": over_rest, "mcp": over_mcp}
    return {surface: calls[surface] for surface in surfaces}


def _get(name: str) -> Request:
    return lambda world: service_pb2.GetEvaluationRequest(name=world.names.get(name, name))


def _create_request(evaluation: evaluation_pb2.Evaluation, eid: str = "") -> Request:
    return lambda world: service_pb2.CreateEvaluationRequest(
        parent=APP, evaluation_id=eid, evaluation=evaluation
    )


def _oversized() -> evaluation_pb2.Evaluation:
    evaluation = golden_evaluation("oversized")
    evaluation.description = "d" * OVER
    return evaluation


@contextlib.contextmanager
def _write_lock(world: World) -> Iterator[None]:
    """SQLite's write lock on the server's file, held by this process (a backup, a slow disk):
    every write of the server waits for it; reads do not (WAL)."""
    connection = sqlite3.connect(world.server.database, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
        connection.execute("ROLLBACK")
    finally:
        connection.close()


@contextlib.contextmanager
def _saturated(world: World) -> Iterator[None]:
    """Each surface's one slot taken by a write waiting for the write lock, on a client of its
    own; the writes finish once the row is done and the lock released."""
    holders = {
        surface: (call, _client(world.server))
        for surface, call in same(
            _create_request(golden_evaluation("held"), "held"), deadline=60
        ).items()
    }
    try:
        with ThreadPoolExecutor(len(holders)) as pool:
            with _write_lock(world):
                waiting = [pool.submit(_outcome, *holder) for holder in holders.values()]
                yield
            for future in waiting:
                future.result()
    finally:
        for _, client in holders.values():
            client.channel.close()
            client.http.close()


def _client(server: RunningServer) -> World:
    return World(
        server,
        grpc.insecure_channel(server.grpc_target),
        httpx.Client(base_url=server.http_base, timeout=60),
    )


def _outcome(call: Provoke, world: World) -> None:
    """``call``, whatever it answers: one of the held creates succeeds, the others find its
    name taken."""
    with contextlib.suppress(AssertionError):
        call(world)


def _once_refused(calls: Mapping[str, Provoke]) -> dict[str, Provoke]:
    """``calls`` repeated (a read answering NOT_FOUND while admitted) until the surface refuses
    it: the holders of :func:`_saturated` reach the server on their own schedule."""

    def repeated(call: Provoke) -> Provoke:
        def until(world: World) -> Seen:
            deadline = time.monotonic() + 30
            while True:
                seen = call(world)
                if seen.code != "NOT_FOUND" or time.monotonic() > deadline:
                    return seen
                time.sleep(0.02)

        return until

    return {surface: repeated(call) for surface, call in calls.items()}


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One error kind: the ``code`` and ErrorInfo ``reason`` every surface in ``calls`` must
    answer, on the server ``world`` (a fixture), while ``during`` holds (if given). ``bare``:
    surfaces whose refusal carries no details by design, and why. ``drift``: why the surfaces
    disagree today (the row is then a strict xfail). ``http``: the HTTP status of REST and MCP
    where it is not the code's own (errors.Code; 413, 415 and 421 are deliberate)."""

    id: str
    code: str
    reason: str
    calls: Mapping[str, Provoke]
    world: str = "open_world"
    during: Callable[[World], AbstractContextManager[None]] | None = None
    bare: Mapping[str, str] = field(default_factory=dict)
    drift: str = ""
    http: int | None = None


def _guarded(
    name: str, code: str, reason: str, token: str | None, request: Request | None = None
) -> Case:
    """A row of the ``--auth-tokens`` server: ``request`` (reading alice's evaluation) sent
    with ``token`` (none: no credentials) on every surface."""
    calls = same(request or _get("alices"), token=token)
    return Case(name, code, reason, calls, world="guarded_world")


def _from_a_page(name: str, code: str, reason: str, http: int, headers: Mapping[str, str]) -> Case:
    """A row of the HTTP port's browser guard (docs/security.md): a create sent with
    ``headers`` as a web page could send it, refused with HTTP status ``http`` on REST and MCP
    alike. gRPC is out of a page's reach, so out of the row."""
    request = _create_request(golden_evaluation(name))
    calls = same(request, surfaces=("rest", "mcp"), headers=headers)
    return Case(name, code, reason, calls, http=http)


CASES = [
    Case(
        "agent-failed",
        "UNAVAILABLE",
        "AGENT_FAILED",
        same(
            lambda world: session_service_pb2.RunSessionRequest(
                config={"session": f"{FAILING_AGENT_APP}/sessions/s"}, inputs=[{"text": "hi"}]
            )
        ),
    ),
    Case(
        "invalid-name",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        same(_get(f"{APP}/evaluations/Not_An_Id")),
    ),
    Case(
        "invalid-field",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        same(_create_request(evaluation_pb2.Evaluation(golden=golden_evaluation("g").golden))),
    ),
    Case(
        "invalid-fields-past-the-types",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        same(_create_request(evaluation_pb2.Evaluation(description="neither name nor inputs"))),
    ),
    Case(
        "empty-evaluation",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        same(_create_request(evaluation_pb2.Evaluation())),
    ),
    Case("not-found", "NOT_FOUND", "RESOURCE_NOT_FOUND", same(_get(MISSING))),
    Case(
        "already-exists",
        "ALREADY_EXISTS",
        "RESOURCE_ALREADY_EXISTS",
        same(_create_request(golden_evaluation("another display name"), "existing")),
    ),
    Case(
        "etag-mismatch",
        "ABORTED",
        "ETAG_MISMATCH",
        same(
            lambda world: service_pb2.DeleteEvaluationRequest(
                name=world.names["existing"], etag="stale"
            )
        ),
    ),
    Case(
        "in-use",
        "FAILED_PRECONDITION",
        "EVALUATION_IN_USE",
        same(lambda world: service_pb2.DeleteEvaluationRequest(name=world.names["linked"])),
    ),
    Case(
        "named-by-agents",
        "FAILED_PRECONDITION",
        "RESOURCE_IN_USE",
        same(lambda world: agent_service_pb2.DeleteToolRequest(name=world.names["named tool"])),
    ),
    Case(
        "needs-a-model",
        "FAILED_PRECONDITION",
        "MODEL_NOT_CONFIGURED",
        same(lambda world: agent_service_pb2.GenerateAppResourceRequest(parent=APP)),
    ),
    Case(
        "export-path-refused",
        "PERMISSION_DENIED",
        "EXPORT_PATH_REFUSED",
        same(
            lambda world: service_pb2.ExportEvaluationsRequest(
                parent=APP,
                names=[world.names["existing"]],
                include_evaluations=True,
                export_options=service_pb2.ExportOptions(gcs_uri="gs://linked-bucket/out"),
            )
        ),
    ),
    Case(
        "request-too-large",
        "RESOURCE_EXHAUSTED",
        "REQUEST_BODY_TOO_LARGE",
        same(_create_request(_oversized())),
        http=413,
        bare={
            "grpc": "grpc refuses a message over grpc.max_receive_message_length itself, "
            "before any handler runs (server.py)"
        },
    ),
    # X-Server-Timeout is REST's system parameter (docs/semantics.md, Errors); MCP has none.
    Case(
        "deadline-exceeded",
        "DEADLINE_EXCEEDED",
        "DEADLINE_EXCEEDED",
        same(
            _create_request(golden_evaluation("late")),
            surfaces=("grpc", "rest"),
            headers={"x-server-timeout": "0.3"},
            deadline=0.3,
        ),
        during=_write_lock,
        bare={"grpc": "the client's deadline ends a gRPC call, with no details (grpc's own)"},
    ),
    Case("internal", "INTERNAL", "INTERNAL", same(_get("undecodable"))),
    Case(
        "database-unavailable",
        "UNAVAILABLE",
        "DATABASE_UNAVAILABLE",
        same(_get(MISSING)),
        world="removed_world",
    ),
    Case(
        "too-many-requests",
        "RESOURCE_EXHAUSTED",
        "TOO_MANY_REQUESTS",
        _once_refused(same(_get(MISSING))),
        world="strained_world",
        during=_saturated,
    ),
    _guarded("credentials-missing", "UNAUTHENTICATED", "CREDENTIALS_MISSING", None),
    _guarded("token-invalid", "UNAUTHENTICATED", "ACCESS_TOKEN_INVALID", FORGED),
    _guarded("foreign-project", "PERMISSION_DENIED", "IAM_PERMISSION_DENIED", BOB),
    _guarded(
        "read-only-token-writes",
        "PERMISSION_DENIED",
        "IAM_PERMISSION_DENIED",
        READER,
        lambda world: service_pb2.DeleteEvaluationRequest(name=world.names["alices"]),
    ),
    _from_a_page(
        "host-not-allowed", "PERMISSION_DENIED", "HOST_NOT_ALLOWED", 421, {"host": "evil.example"}
    ),
    _from_a_page(
        "origin-not-allowed",
        "PERMISSION_DENIED",
        "ORIGIN_NOT_ALLOWED",
        403,
        {"origin": "http://evil.example"},
    ),
    _from_a_page(
        "unsupported-content-type",
        "INVALID_ARGUMENT",
        "UNSUPPORTED_CONTENT_TYPE",
        415,
        {"content-type": "text/plain"},
    ),
]

# Reasons of docs/semantics.md's error table that no row provokes on two surfaces, and why.
ONE_SURFACE = {
    "MALFORMED_REQUEST": "gRPC only: bytes that are no serialized request message; REST and MCP "
    "parse JSON, whose errors are INVALID_ARGUMENT and JSON-RPC parse errors",
    "CLIENT_DISCONNECTED": "nobody receives it: the REST client went away",
    "EXPORT_WRITE_FAILED": "an operation's error, read back by GetOperation, not a call's",
    "RESPONSE_TOO_LARGE": "an operation's error (tests/unit/test_operation_bounds.py), read back "
    "by GetOperation, not a call's",
    "RESOURCE_DELETED": "a RunEvaluation operation's error (tests/unit/test_running.py), read "
    "back by GetOperation, not a call's",
    "METHOD_NOT_IMPLEMENTED": "gRPC only: a method path no service of ours declares (every "
    "official method is served; tests/integration/test_unimplemented.py). REST answers a path "
    "no route binds 404 PATH_NOT_FOUND, and MCP an unknown tool a JSON-RPC error",
}


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=case.drift)] if case.drift else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_every_surface_answers_the_same_error(case: Case, request: pytest.FixtureRequest) -> None:
    world: World = request.getfixturevalue(case.world)
    with case.during(world) if case.during is not None else contextlib.nullcontext():
        seen = {surface: call(world) for surface, call in case.calls.items()}
    for surface, answer in seen.items():
        assert answer.code == case.code, (surface, seen)
        if surface in case.bare:
            assert answer == Seen(case.code), (surface, seen)  # still bare: update the row
        else:
            assert (answer.reason, answer.domain) == (case.reason, DOMAIN), (surface, seen)
            assert answer.details[0] == "ErrorInfo", (surface, seen)
    full = {surface: answer for surface, answer in seen.items() if surface not in case.bare}
    assert len(set(full.values())) == 1, full
    statuses = {surface: answer.http for surface, answer in seen.items() if answer.http}
    expected = case.http or Code[case.code].http_status
    assert set(statuses.values()) <= {expected}, statuses


def _documented_reasons() -> set[str]:
    text = (contract.ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    table = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.MULTILINE))


def test_every_documented_error_kind_has_a_row() -> None:
    documented = _documented_reasons()
    rows = {case.reason for case in CASES}
    assert documented - rows - set(ONE_SURFACE) == set()
    assert set(ONE_SURFACE) <= documented - rows  # no stale entry
    for case in CASES:
        assert len(case.calls) >= 2, case.id  # parity needs two surfaces at least
