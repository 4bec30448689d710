"""Answers a surface keeps by the request as it arrived (core/aip/context.py AnswerKeeper): the REST
transcoder and the gRPC dispatcher as ``serve`` wires them (server._surfaces), over a real
SQLite file, a real grpc.aio server and the ASGI app through httpx. A repeated read is answered
without calling the core, and never older than the database, whoever wrote to it; nothing is
kept for a server with tokens, where each call is authorized."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from ces_eval.access import Caller, Handler, Tokens
from ces_eval.core.aip import pages
from ces_eval.core.service import Core
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.server import ServerConfig, _surfaces
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.surfaces.http_app import BodyLimit
from tests.support.elsewhere import rename_evaluation
from tests.support.tokens import ALICE, BOB, write_token_file

APP = "projects/proj-a/locations/l/apps/a"
NAME = f"{APP}/evaluations/kept"
SERVICE = "/google.cloud.ces.v1beta.EvaluationService"
GET = f"{SERVICE}/GetEvaluation"
LIST = f"{SERVICE}/ListEvaluationResults"


@dataclass
class Served:
    """Both surfaces over one core, and how often each core method was called."""

    rest: httpx.AsyncClient
    channel: grpc.aio.Channel
    path: Path
    calls: dict[str, int] = field(default_factory=dict)

    async def grpc(self, method: str, request: Any, answer: type[Any]) -> Any:
        call = self.channel.unary_unary(
            method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=answer.FromString,
        )
        return await call(request)

    def count(self, method: str) -> int:
        return self.calls.get(method, 0)


@asynccontextmanager
async def served(tmp_path: Path, tokens: Tokens | None = None) -> AsyncIterator[Served]:
    path = tmp_path / "db.sqlite"
    storage = SqliteStorage(path)
    await storage.open()
    core = Core(storage, pages.PageTokens(await storage.secret()))
    calls: dict[str, int] = {}
    original = Core.handler

    def counting(self: Core, method: str) -> Handler:
        """The core's handler of ``method``, counting its calls."""
        handler = original(self, method)

        async def call(request: Any, caller: Caller) -> Any:
            calls[method] = calls.get(method, 0) + 1
            return await handler(request, caller)

        return call

    with pytest.MonkeyPatch.context() as patch:  # the handlers _surfaces takes from the core
        patch.setattr(Core, "handler", counting)
        dispatcher, rest, _, _ = _surfaces(ServerConfig(), core, tokens, None)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((dispatcher,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    transport = httpx.ASGITransport(app=BodyLimit(rest))
    try:
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            yield Served(client, channel, path, calls)
    finally:
        await server.stop(None)
        await storage.close()


def run(tmp_path: Path, scenario: Callable[[Served], Awaitable[None]]) -> None:
    async def main() -> None:
        async with served(tmp_path) as both:
            created = await both.rest.post(
                f"/v1beta/{APP}/evaluations?evaluationId=kept",
                json={
                    "displayName": "First",
                    "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
                },
            )
            assert created.status_code == 200, created.text
            await scenario(both)

    asyncio.run(main())


def test_a_repeated_rest_get_is_answered_without_the_core_until_anyone_writes(
    tmp_path: Path,
) -> None:
    async def scenario(both: Served) -> None:
        url = f"/v1beta/{NAME}"
        first = await both.rest.get(url)
        assert first.json()["displayName"] == "First"
        again = await both.rest.get(url)
        assert again.content == first.content
        assert both.count(GET) == 1  # the second came from what REST kept
        ints = await both.rest.get(url, params={"$alt": "json;enum-encoding=int"})
        assert both.count(GET) == 2  # another query: another answer
        assert ints.json()["name"] == NAME

        patched = await both.rest.patch(
            url, params={"updateMask": "displayName"}, json={"displayName": "Second"}
        )
        assert patched.status_code == 200, patched.text
        assert (await both.rest.get(url)).json()["displayName"] == "Second"  # this server wrote

        await asyncio.to_thread(rename_evaluation, both.path, NAME, "Elsewhere")
        assert (await both.rest.get(url)).json()["displayName"] == "Elsewhere"  # another program

        missing = await both.rest.get(f"/v1beta/{APP}/evaluations/later")
        assert missing.status_code == 404  # refusals are not kept
        created = await both.rest.post(
            f"/v1beta/{APP}/evaluations?evaluationId=later",
            json={"displayName": "Later", "golden": {"turns": [{"steps": [{}]}]}},
        )
        assert created.status_code == 200, created.text
        assert (await both.rest.get(f"/v1beta/{APP}/evaluations/later")).status_code == 200

    run(tmp_path, scenario)


def test_a_repeated_grpc_read_is_answered_without_the_core_until_anyone_writes(
    tmp_path: Path,
) -> None:
    async def scenario(both: Served) -> None:
        get = service_pb2.GetEvaluationRequest(name=NAME)
        first = await both.grpc(GET, get, evaluation_pb2.Evaluation)
        assert first.display_name == "First"
        assert await both.grpc(GET, get, evaluation_pb2.Evaluation) == first
        assert both.count(GET) == 1
        seeded = await both.rest.post(f"/emulator/v1/{NAME}/results", json={"displayName": "r1"})
        assert seeded.status_code == 200, seeded.text
        listing = service_pb2.ListEvaluationResultsRequest(parent=f"{APP}/evaluations/-")
        answer = service_pb2.ListEvaluationResultsResponse
        page = await both.grpc(LIST, listing, answer)
        assert [r.display_name for r in page.evaluation_results] == ["r1"]
        assert await both.grpc(LIST, listing, answer) == page
        assert both.count(LIST) == 1

        await asyncio.to_thread(rename_evaluation, both.path, NAME, "Elsewhere")
        assert (await both.grpc(GET, get, evaluation_pb2.Evaluation)).display_name == "Elsewhere"
        assert await both.grpc(LIST, listing, answer) == page  # read again: the same results
        assert both.count(GET) == 2
        assert both.count(LIST) == 2

        # Another method's request of the same bytes (parent and name are both field 1) is
        # another read.
        same_bytes = service_pb2.ListEvaluationResultsRequest(parent=NAME)
        assert same_bytes.SerializeToString() == get.SerializeToString()
        results = await both.grpc(LIST, same_bytes, answer)
        assert [r.display_name for r in results.evaluation_results] == ["r1"]

    run(tmp_path, scenario)


def test_with_tokens_every_read_is_authorized_and_nothing_is_kept(tmp_path: Path) -> None:
    tokens = Tokens.load(write_token_file(tmp_path / "tokens.json"))

    async def main() -> None:
        async with served(tmp_path, tokens) as both:
            alice = {"authorization": f"Bearer {ALICE}"}
            created = await both.rest.post(
                f"/v1beta/{APP}/evaluations?evaluationId=kept",
                headers=alice,
                json={"displayName": "First", "golden": {"turns": [{"steps": [{}]}]}},
            )
            assert created.status_code == 200, created.text
            url = f"/v1beta/{NAME}"
            for _ in range(2):
                assert (await both.rest.get(url, headers=alice)).status_code == 200
            assert both.count(GET) == 2
            refused = await both.rest.get(url, headers={"authorization": f"Bearer {BOB}"})
            assert refused.status_code == 403  # bob's projects do not include proj-a

    asyncio.run(main())
