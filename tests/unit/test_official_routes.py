"""The official client's routes (``generated/official_routes.json``) on REST, in process.

Every official route is served: the router over the bindings of the methods the core implements
(as ``serve`` builds it) resolves each official template to its own method, and none answers 501.
The 501 machinery stays for a core without a method (one our descriptors declare before the core
implements it, or an official one they do not declare): over the core's handlers minus one
method (RunEvaluation here), that method's official routes answer 501 UNIMPLEMENTED naming it,
before anything is read, authorized or parsed. Our own routes are unaffected; 404 stays for
paths nobody binds. The unserved set is recomputed here from the raw JSON, our descriptors and
the core's registry, independently of ``schema.unserved_bindings`` and ``rest.served_bindings``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.access import Handler, Tokens, authorized, authorized_streams
from ces_eval.contract import openapi, schema
from ces_eval.contract.limits import MAX_REQUEST_BYTES
from ces_eval.core.aip import pages
from ces_eval.core.service import RPCS, Core, handlers, stream_handlers
from ces_eval.storage.sqlite import SqliteStorage
from ces_eval.surfaces.boundary import Boundary
from ces_eval.surfaces.http_app import BodyLimit
from ces_eval.surfaces.rest import Transcoder, served_bindings
from ces_eval.transcoding.router import Router, UnservedRoute
from tests.support.contract import CLIENT_PYTHON
from tests.support.tokens import ALICE, write_token_file

ROOT = Path(__file__).resolve().parents[2]
JSON_FILE = ROOT / "generated" / "official_routes.json"
EVALUATION_SERVICE = "google.cloud.ces.v1beta.EvaluationService"
APP = "/v1beta/projects/p/locations/l/apps/a"
RUN_EVALUATION = "google.cloud.ces.v1beta.EvaluationService/RunEvaluation"
# The answers of a route bound to no method (404), or bound to others only (405).
ROUTING_REASONS = {"PATH_NOT_FOUND", "METHOD_NOT_ALLOWED"}
_VARIABLE = re.compile(r"\{([^}=]+)(?:=([^}]*))?\}")


def sample_path(template: str) -> str:
    """A request path matching ``template``: each variable's pattern with sample segments."""

    def fill(match: re.Match[str]) -> str:
        pattern = match.group(2) or "*"
        return pattern.replace("**", "x/y").replace("*", "x")

    return _VARIABLE.sub(fill, template)


def official_unserved(implemented: Collection[str] = RPCS) -> list[tuple[str, str, str, str]]:
    """(gRPC path, verb, template, body) of every official binding whose method is not served:
    our descriptors do not bind it, or they do but ``implemented`` (default: the core's
    registry) lacks it. Read from the committed JSON itself."""
    document = json.loads(JSON_FILE.read_text(encoding="utf-8"))
    ours = {
        f"/{b.method.containing_service.full_name}/{b.method.name}" for b in schema.http_bindings()
    }
    served = ours & set(implemented)
    return sorted(
        (m["path"], h["verb"], h["template"], h["body"])
        for m in document["methods"]
        if m["path"] not in served
        for h in m["http"]
    )


def declared_unserved() -> set[str]:
    """gRPC paths of the methods our descriptors declare and the core does not implement."""
    return {path for path in schema.methods() if path not in RPCS}


def bindings_without(path: str) -> tuple[schema.HttpBinding, ...]:
    """The served bindings of a core that lacks the method at gRPC path ``path``."""
    return tuple(b for b in served_bindings() if schema.method_path(b.method) != path)


def operation_id(path: str) -> str:
    """The OpenAPI operationId of the method at gRPC path ``path``: ``<Service>_<Method>``
    (openapi.py)."""
    return "_".join(path.lstrip("/").rsplit(".", 1)[1].split("/"))


def error_info(body: dict[str, Any]) -> dict[str, Any]:
    infos = [d for d in body["error"]["details"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert len(infos) == 1, body
    info: dict[str, Any] = infos[0]
    return info


def assert_unimplemented(response: httpx.Response, method: str) -> None:
    assert response.status_code == 501, response.text
    body = response.json()
    assert body["error"]["code"] == 501
    assert body["error"]["status"] == "UNIMPLEMENTED"
    assert body["error"]["message"] == f"Method {method} is not implemented by ces-eval."
    info = error_info(body)
    assert info["reason"] == "METHOD_NOT_IMPLEMENTED"
    assert info["domain"] == "ces.googleapis.com"
    assert info["metadata"] == {"method": method}


def assert_served(response: httpx.Response, where: object) -> None:
    """``response`` came from the method its route names: no 501, and no routing refusal."""
    assert response.status_code != 501, (where, response.text)
    if response.status_code >= 400:
        assert error_info(response.json())["reason"] not in ROUTING_REASONS, (where, response.text)


@asynccontextmanager
async def rest_client(
    tmp_path: Path, tokens: Tokens | None = None, without: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The REST surface as ``serve`` builds it: the router over the served bindings, the core's
    handlers over a real SQLite file. ``without``: the gRPC path of a method the core is taken
    to lack (its bindings leave the router and its handler the handlers), as a method declared
    before it is implemented."""
    storage = SqliteStorage(tmp_path / "ces-eval.db")
    await storage.open()
    try:
        core = Core(storage, pages.PageTokens(await storage.secret()))
        implementations: Mapping[str, Handler] = {
            path: handler for path, handler in handlers(core).items() if path != without
        }
        streams = stream_handlers(core)
        app = BodyLimit(
            Transcoder(
                Router(served_bindings() if without is None else bindings_without(without)),
                implementations if tokens is None else authorized(implementations),
                Boundary("rest", tokens=tokens),
                streams=streams if tokens is None else authorized_streams(streams),
            )
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
    finally:
        await storage.close()


def run(
    tmp_path: Path,
    scenario: Callable[[httpx.AsyncClient], Awaitable[None]],
    without: str | None = None,
) -> None:
    async def main() -> None:
        async with rest_client(tmp_path, without=without) as client:
            await scenario(client)

    asyncio.run(main())


# -- the loader ------------------------------------------------------------------------------


def test_loader_reads_every_official_method() -> None:
    routes = schema.official_routes()
    document = json.loads(JSON_FILE.read_text(encoding="utf-8"))
    assert routes.client == f"google-cloud-ces {document['client']['version']}"
    assert [m.path for m in routes.methods] == sorted(m.path for m in routes.methods)
    by_service: dict[str, set[str]] = {}
    for method in routes.methods:
        assert method.path == f"/{method.service}/{method.name}"
        assert all(b.path == method.path for b in method.bindings)
        by_service.setdefault(method.service, set()).add(method.name)
    assert len(by_service.pop(EVALUATION_SERVICE)) == 35
    assert len(by_service.pop("google.cloud.ces.v1beta.AgentService")) == 51
    assert by_service == {
        "google.cloud.ces.v1beta.SessionService": {
            "RunSession",
            "StreamRunSession",
            "BidiRunSession",
        },
        "google.cloud.ces.v1beta.ToolService": {
            "ExecuteTool",
            "RetrieveToolSchema",
            "RetrieveTools",
        },
        "google.cloud.ces.v1beta.WidgetService": {"GenerateChatToken"},
        "google.cloud.location.Locations": {"GetLocation", "ListLocations"},
        "google.longrunning.Operations": {
            "GetOperation",
            "ListOperations",
            "DeleteOperation",
            "CancelOperation",
        },
    }
    run_evaluation = next(m for m in routes.methods if m.name == "RunEvaluation")
    assert run_evaluation.client_method == "run_evaluation"
    assert [(b.verb, b.template, b.body) for b in run_evaluation.bindings] == [
        ("POST", "/v1beta/{app=projects/*/locations/*/apps/*}:runEvaluation", "*")
    ]


def test_the_file_is_package_data_beside_the_descriptor_set() -> None:
    """Loaded with importlib.resources from ces_eval.generated (what a wheel ships)."""
    packaged = resources.files("ces_eval.generated").joinpath(schema.OFFICIAL_ROUTES)
    assert packaged.read_text("utf-8") == JSON_FILE.read_text(encoding="utf-8")


def test_every_official_route_is_served() -> None:
    """The product's acceptance: no official method is left unserved, and each official
    template resolves, through the router ``serve`` builds, to a route of its own method."""
    assert official_unserved() == []
    assert schema.unserved_bindings(served_bindings()) == ()
    router = Router(served_bindings())
    assert router.unserved == ()
    official = schema.official_routes().methods
    assert {method.path for method in official} <= set(RPCS)
    assert not declared_unserved() & {method.path for method in official}
    for method in official:
        if method.name == "BidiRunSession":  # gRPC only, as Google declares it
            assert not method.bindings
            continue
        assert method.bindings, method.path
        for binding in method.bindings:
            resolved = router.resolve(binding.verb, sample_path(binding.template))
            assert isinstance(resolved, tuple), (binding, resolved)
            assert resolved[0].path == method.path, binding
    served = {route.path for route in router.routes}
    assert {f"/{RUN_EVALUATION}", f"/{EVALUATION_SERVICE}/GenerateEvaluation"} <= served
    assert "/google.cloud.location.Locations/GetLocation" in served


def test_unserved_set_is_official_minus_ours_for_a_core_without_a_method() -> None:
    """For a core lacking any one official method, the three computations of its unserved set
    (the raw JSON here, ``schema.unserved_bindings``, the router's) agree: that method's
    official bindings, and nothing else."""
    for method in schema.official_routes().methods:
        expected = official_unserved(set(RPCS) - {method.path})
        assert expected == sorted((b.path, b.verb, b.template, b.body) for b in method.bindings)
        without = bindings_without(method.path)
        unserved = sorted(
            (b.path, b.verb, b.template, b.body) for b in schema.unserved_bindings(without)
        )
        assert unserved == expected
        router = Router(without)
        compiled = sorted(
            (u.binding.path, u.binding.verb, u.binding.template, u.binding.body)
            for u in router.unserved
        )
        assert compiled == expected
        assert method.path not in {route.path for route in router.routes}


def test_a_method_the_official_client_lacks_has_no_official_route() -> None:
    """Without one of our own methods (the emulator's ResetProject) no official route is left
    unbound: nothing answers 501, its path is merely unknown (404, below)."""
    reset = "/ces_eval.emulator.v1.EmulatorService/ResetProject"
    assert reset in {schema.method_path(b.method) for b in served_bindings()}
    assert official_unserved(set(RPCS) - {reset}) == []
    assert schema.unserved_bindings(bindings_without(reset)) == ()


def test_served_bindings_are_ours_of_implemented_methods() -> None:
    served = served_bindings()
    assert served
    assert {schema.method_path(b.method) for b in served} <= set(RPCS)
    assert [b for b in schema.http_bindings() if schema.method_path(b.method) in RPCS] == list(
        served
    )
    # Every binding our descriptors give an official method is served.
    official = {method.path for method in schema.official_routes().methods}
    assert {b for b in schema.http_bindings() if schema.method_path(b.method) in official} <= set(
        served
    )


def test_a_method_leaves_the_unserved_set_once_our_bindings_bind_it() -> None:
    ours = schema.http_bindings()
    without_get = [b for b in ours if b.method.name != "GetEvaluation"]
    unserved = {b.path for b in schema.unserved_bindings(without_get)}
    assert f"/{EVALUATION_SERVICE}/GetEvaluation" in unserved
    assert f"/{EVALUATION_SERVICE}/GetEvaluation" not in {
        b.path for b in schema.unserved_bindings(ours)
    }


def test_without_a_method_its_official_templates_resolve_to_unserved_routes() -> None:
    for method in schema.official_routes().methods:
        router = Router(bindings_without(method.path))
        for binding in method.bindings:
            resolved = router.resolve(binding.verb, sample_path(binding.template))
            assert isinstance(resolved, UnservedRoute), (binding, resolved)
            assert resolved.path == method.path


def test_openapi_lists_every_official_route() -> None:
    document = openapi.committed_openapi()
    assert document == openapi.build_openapi(served_bindings())
    operations = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    # BidiRunSession has no HTTP binding (gRPC only), hence no operation.
    official = {
        operation_id(method.path) for method in schema.official_routes().methods if method.bindings
    }
    assert {"EvaluationService_RunEvaluation", "Locations_GetLocation"} <= official
    assert official <= operations
    assert [p for p in document["paths"] if p.endswith(":runEvaluation")]
    assert [p for p in document["paths"] if p.endswith(":generateEvaluation")]
    # The document is of the served bindings: a method the core lacked would not be listed.
    lacking = openapi.build_openapi(bindings_without(f"/{RUN_EVALUATION}"))
    assert not [p for p in lacking["paths"] if p.endswith(":runEvaluation")]


# -- generation -------------------------------------------------------------------------------


def generate_tool() -> Any:
    """tools/generate.py as a module (tools/ is a folder of scripts, not a package)."""
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("generate")


@pytest.mark.external  # the official client (.venv-client)
def test_committed_json_is_what_the_client_says(tmp_path: Path) -> None:
    """What ``make check-generated`` compares: the tool's output, byte for byte."""
    generate = generate_tool()
    fresh = tmp_path / schema.OFFICIAL_ROUTES
    generate.write_official_routes(fresh, CLIENT_PYTHON)
    assert fresh.read_bytes() == JSON_FILE.read_bytes(), "run `make generate` and commit"


def test_check_reports_a_stale_json(tmp_path: Path) -> None:
    generate = generate_tool()
    committed, fresh = tmp_path / "committed", tmp_path / "fresh"
    for folder in (committed, fresh):
        folder.mkdir()
        (folder / schema.OFFICIAL_ROUTES).write_bytes(JSON_FILE.read_bytes())
    assert generate._differences(committed, fresh) == []
    document = json.loads(JSON_FILE.read_text(encoding="utf-8"))
    document["methods"].pop()
    (committed / schema.OFFICIAL_ROUTES).write_text(json.dumps(document, indent=1))
    assert generate._differences(committed, fresh) == [f"differs: {schema.OFFICIAL_ROUTES}"]


def test_generate_says_when_the_client_environment_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate = generate_tool()
    missing = tmp_path / "no-venv" / "bin" / "python"
    assert generate.main(["--check", "--client-python", str(missing)]) == 2
    assert f"{missing} is missing" in capsys.readouterr().err


# -- through the ASGI app ---------------------------------------------------------------------


def test_every_official_route_answers_from_its_method(tmp_path: Path) -> None:
    """Each official route, called with a sample path (and an empty body where it takes one),
    reaches its method: an answer or the method's own error, never 501, 404 PATH_NOT_FOUND or
    405. RunEvaluation validates the request (it names neither evaluations nor a dataset)."""

    async def scenario(client: httpx.AsyncClient) -> None:
        run_evaluation = await client.post(f"{APP}:runEvaluation", json={})
        assert run_evaluation.status_code == 400, run_evaluation.text
        details = run_evaluation.json()["error"]["details"]
        violations = [d for d in details if d["@type"].endswith("google.rpc.BadRequest")]
        assert [v["field"] for v in violations[0]["fieldViolations"]] == ["evaluations"]
        for method in schema.official_routes().methods:
            for binding in method.bindings:
                body = {} if binding.body else None
                response = await client.request(
                    binding.verb, sample_path(binding.template), json=body
                )
                assert_served(response, (method.path, binding.verb, binding.template))

    run(tmp_path, scenario)


def test_routes_of_a_method_the_core_lacks_answer_501_naming_it(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        assert_unimplemented(await client.post(f"{APP}:runEvaluation", json={}), RUN_EVALUATION)
        served = await client.post(f"{APP}/conversations/c:generateEvaluation", json={})
        assert served.status_code == 404  # served: the conversation is not stored
        assert error_info(served.json())["reason"] == "RESOURCE_NOT_FOUND"
        unserved = official_unserved(set(RPCS) - {f"/{RUN_EVALUATION}"})
        assert unserved
        for path, verb, template, _ in unserved:
            response = await client.request(verb, sample_path(template))
            assert_unimplemented(response, path.lstrip("/"))

    run(tmp_path, scenario, without=f"/{RUN_EVALUATION}")


def test_unserved_routes_answer_before_the_body_is_read(tmp_path: Path) -> None:
    """Nothing is parsed for a method we do not serve: a malformed body, a large one within
    the limit, or an unknown query parameter, still gets 501 (not 400)."""

    async def scenario(client: httpx.AsyncClient) -> None:
        url = f"{APP}:runEvaluation"
        assert_unimplemented(await client.post(url, content=b"{not json"), RUN_EVALUATION)
        # Bodies are bounded before routing (BodyLimit, in front of the surface as in serve):
        # an oversized one is 413 whatever its route, and no body the limit lets through is
        # parsed for an unserved method.
        too_large = await client.post(url, content=b" " * (MAX_REQUEST_BYTES + 1))
        assert too_large.status_code == 413
        assert error_info(too_large.json())["reason"] == "REQUEST_BODY_TOO_LARGE"
        at_limit = b" " * MAX_REQUEST_BYTES
        assert_unimplemented(await client.post(url, content=at_limit), RUN_EVALUATION)
        assert_unimplemented(await client.post(url + "?bogus=1", json={}), RUN_EVALUATION)

    run(tmp_path, scenario, without=f"/{RUN_EVALUATION}")


def test_routed_methods_without_a_handler_answer_501_before_the_body(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A router over every binding our descriptors declare routes RunEvaluation to its
    method; over handlers lacking it, the Transcoder answers 501 before authorizing or
    parsing anything. No BodyLimit is mounted, so reading the body fails (INTERNAL, the
    wiring fault :func:`ces_eval.surfaces.asgi.body_of` refuses): the 501 shows nothing was
    read, where the same requests over every handler reach the method and fail so."""

    async def answers(implementations: Mapping[str, Handler]) -> list[httpx.Response]:
        app = Transcoder(Router(schema.http_bindings()), implementations)
        transport = httpx.ASGITransport(app=app)
        url = f"{APP}:runEvaluation"
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [
                await client.post(url, content=b"{not json"),
                await client.post(url + "?bogus=1", json={"unknownField": 1}),
            ]

    async def main() -> None:
        storage = SqliteStorage(tmp_path / "ces-eval.db")
        await storage.open()
        try:
            core = Core(storage, pages.PageTokens(await storage.secret()))
            every = handlers(core)
            lacking = {path: h for path, h in every.items() if path != f"/{RUN_EVALUATION}"}
            for response in await answers(lacking):
                assert_unimplemented(response, RUN_EVALUATION)
            assert not caplog.records
            for response in await answers(every):
                assert response.status_code == 500, response.text
                assert error_info(response.json())["reason"] == "INTERNAL"
            faults = [r for r in caplog.records if r.exc_info is not None]
            assert len(faults) == 2
            assert all("behind BodyLimit" in str(r.exc_info[1]) for r in faults if r.exc_info)
        finally:
            await storage.close()

    with caplog.at_level(logging.ERROR, logger="ces_eval.surfaces.boundary"):
        asyncio.run(main())


@pytest.mark.parametrize("without", [None, f"/{RUN_EVALUATION}"], ids=["served", "lacking"])
def test_wrong_verb_is_405_with_its_verbs(tmp_path: Path, without: str | None) -> None:
    """A served path and the official path of a method the core lacks answer a wrong verb
    alike."""

    async def scenario(client: httpx.AsyncClient) -> None:
        wrong = await client.get(f"{APP}:runEvaluation")
        assert wrong.status_code == 405
        assert wrong.headers["allow"] == "POST"
        assert error_info(wrong.json())["reason"] == "METHOD_NOT_ALLOWED"

        location = await client.delete("/v1beta/projects/p/locations/l")
        assert location.status_code == 405
        assert location.headers["allow"] == "GET"

        run_resource = await client.post(f"{APP}/evaluationRuns/r", json={})
        assert run_resource.status_code == 405
        assert set(run_resource.headers["allow"].split(", ")) == {"GET", "DELETE"}

    run(tmp_path, scenario, without=without)


def test_served_routes_and_unknown_paths_are_unaffected(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        created = await client.post(
            f"{APP}/evaluations?evaluationId=e1",
            json={
                "displayName": "E1",
                "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
            },
        )
        assert created.status_code == 200, created.text
        fetched = await client.get(f"{APP}/evaluations/e1")
        assert fetched.status_code == 200
        assert fetched.json()["displayName"] == "E1"

        missing = await client.get(f"{APP}/evaluations/nope")
        assert missing.status_code == 404
        assert error_info(missing.json())["reason"] == "RESOURCE_NOT_FOUND"

        wrong = await client.put(f"{APP}/evaluations/e1", json={})
        assert wrong.status_code == 405
        assert wrong.headers["allow"] == "GET, PATCH, DELETE"

        operations = await client.get("/v1beta/projects/p/locations/l/operations")
        assert operations.status_code == 200, operations.text

        # A path or custom verb nobody binds is 404 PATH_NOT_FOUND in Google's envelope, not
        # 501: no method is named.
        for verb, path in (("GET", f"{APP}/widgets"), ("POST", f"{APP}:noSuchMethod")):
            nowhere = await client.request(verb, path, json={} if verb == "POST" else None)
            assert nowhere.status_code == 404
            body = nowhere.json()
            assert set(body) == {"error"}
            assert (body["error"]["code"], body["error"]["status"]) == (404, "NOT_FOUND")
            assert body["error"]["message"] == f"No API method is bound to {verb} {path}."
            info = error_info(body)
            assert (info["reason"], info["domain"]) == ("PATH_NOT_FOUND", "ces.googleapis.com")
            assert info["metadata"] == {"method": verb, "path": path}

    run(tmp_path, scenario)


def test_unserved_routes_authenticate_first(tmp_path: Path) -> None:
    """With --auth-tokens a caller must authenticate before learning anything; per-project
    authorization does not apply to a method the core lacks (no method descriptor names the
    resource fields), so an authenticated caller of another project also gets 501. Served,
    RunEvaluation authorizes per project."""
    tokens = Tokens.load(write_token_file(tmp_path / "tokens.json"))
    headers = {"Authorization": f"Bearer {ALICE}"}
    own = "/v1beta/projects/proj-a/locations/l/apps/a:runEvaluation"
    foreign = "/v1beta/projects/proj-b/locations/l/apps/a:runEvaluation"

    async def main() -> None:
        async with rest_client(tmp_path, tokens, without=f"/{RUN_EVALUATION}") as client:
            anonymous = await client.post(f"{APP}:runEvaluation", json={})
            assert anonymous.status_code == 401
            assert "www-authenticate" in anonymous.headers
            assert_unimplemented(await client.post(own, json={}, headers=headers), RUN_EVALUATION)
            assert_unimplemented(
                await client.post(foreign, json={}, headers=headers), RUN_EVALUATION
            )
            wrong_verb = await client.delete(foreign, headers=headers)
            assert wrong_verb.status_code == 405

        async with rest_client(tmp_path, tokens) as client:
            anonymous = await client.post(f"{APP}:runEvaluation", json={})
            assert anonymous.status_code == 401
            mine = await client.post(own, json={}, headers=headers)
            assert mine.status_code == 400, mine.text  # served: the request is validated
            refused = await client.post(foreign, json={}, headers=headers)
            assert refused.status_code == 403, refused.text
            assert error_info(refused.json())["reason"] == "IAM_PERMISSION_DENIED"
            wrong_verb = await client.delete(foreign, headers=headers)
            assert wrong_verb.status_code == 403  # a wrong verb on a foreign resource

    asyncio.run(main())


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            "/v1beta/{app=projects/*/locations/*/apps/*}:runEvaluation",
            "/v1beta/projects/x/locations/x/apps/x:runEvaluation",
        ),
        ("/v1beta/{name=projects/*}/locations", "/v1beta/projects/x/locations"),
        ("/v1/{name}", "/v1/x"),
        ("/v1/{name=files/**}", "/v1/files/x/y"),
    ],
)
def test_sample_path(template: str, expected: str) -> None:
    assert sample_path(template) == expected
