"""The official client's routes (``generated/official_routes.json``) on REST, in process.

Every official route this server does not serve yet answers 501 UNIMPLEMENTED naming the method,
through the real Transcoder over a real core on a temporary SQLite file; our own routes are
unaffected; 404 stays for paths nobody binds. A method is served when the core implements it:
one our descriptors declare but the core does not implement (RunEvaluation) is unserved like
one they do not declare (the Locations mixin).
The unserved set is recomputed here from the raw JSON, our descriptors and the core's registry,
independently of ``schema.unserved_bindings`` and ``rest.served_bindings``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from ces_eval.access import Tokens, authorized
from ces_eval.contract import openapi, schema
from ces_eval.contract.limits import MAX_REQUEST_BYTES
from ces_eval.core import pages
from ces_eval.core.service import RPCS, Core, handlers
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
_VARIABLE = re.compile(r"\{([^}=]+)(?:=([^}]*))?\}")


def sample_path(template: str) -> str:
    """A request path matching ``template``: each variable's pattern with sample segments."""

    def fill(match: re.Match[str]) -> str:
        pattern = match.group(2) or "*"
        return pattern.replace("**", "x/y").replace("*", "x")

    return _VARIABLE.sub(fill, template)


def official_unserved() -> list[tuple[str, str, str, str]]:
    """(gRPC path, verb, template, body) of every official binding whose method is not served:
    our descriptors do not bind it, or they do but the core's registry has no implementation
    for it. Read from the committed JSON itself."""
    document = json.loads(JSON_FILE.read_text(encoding="utf-8"))
    ours = {
        f"/{b.method.containing_service.full_name}/{b.method.name}" for b in schema.http_bindings()
    }
    served = ours & set(RPCS)
    return sorted(
        (m["path"], h["verb"], h["template"], h["body"])
        for m in document["methods"]
        if m["path"] not in served
        for h in m["http"]
    )


def declared_unserved() -> set[str]:
    """gRPC paths of the methods our descriptors declare and the core does not implement."""
    return {path for path in schema.methods() if path not in RPCS}


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


@asynccontextmanager
async def rest_client(
    tmp_path: Path, tokens: Tokens | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The REST surface as ``serve`` builds it: the router over our bindings, the core's
    handlers over a real SQLite file."""
    storage = SqliteStorage(tmp_path / "ces-eval.db")
    await storage.open()
    try:
        core = Core(storage, pages.PageTokens(await storage.secret()))
        app = BodyLimit(
            Transcoder(
                Router(served_bindings()),
                handlers(core) if tokens is None else authorized(handlers(core)),
                Boundary("rest", tokens=tokens),
            )
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
    finally:
        await storage.close()


def run(tmp_path: Path, scenario: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with rest_client(tmp_path) as client:
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
    assert by_service == {
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


def test_unserved_set_is_official_minus_ours() -> None:
    expected = official_unserved()
    assert expected, "every official method is served: drop the 501 routes"
    unserved = sorted(
        (b.path, b.verb, b.template, b.body) for b in schema.unserved_bindings(served_bindings())
    )
    assert unserved == expected
    router = Router(served_bindings())
    compiled = sorted(
        (u.binding.path, u.binding.verb, u.binding.template, u.binding.body)
        for u in router.unserved
    )
    assert compiled == expected
    served = {route.path for route in router.routes}
    assert not served & {path for path, *_ in expected}
    # RunEvaluation (declared, not implemented) is official, not served (yet); GenerateEvaluation
    # and the Locations mixin are served.
    assert f"/{RUN_EVALUATION}" in {path for path, *_ in expected}
    assert f"/{EVALUATION_SERVICE}/GenerateEvaluation" in served
    assert "/google.cloud.location.Locations/GetLocation" in served
    assert f"/{RUN_EVALUATION}" in declared_unserved()
    # Every declared method without an implementation is official, and so has 501 routes.
    assert declared_unserved() <= {path for path, *_ in expected}


def test_served_bindings_are_ours_of_implemented_methods() -> None:
    served = served_bindings()
    assert served
    assert {schema.method_path(b.method) for b in served} <= set(RPCS)
    assert [b for b in schema.http_bindings() if schema.method_path(b.method) in RPCS] == list(
        served
    )
    assert not {schema.method_path(b.method) for b in served} & declared_unserved()


def test_a_method_leaves_the_unserved_set_once_our_bindings_bind_it() -> None:
    ours = schema.http_bindings()
    without_get = [b for b in ours if b.method.name != "GetEvaluation"]
    unserved = {b.path for b in schema.unserved_bindings(without_get)}
    assert f"/{EVALUATION_SERVICE}/GetEvaluation" in unserved
    assert f"/{EVALUATION_SERVICE}/GetEvaluation" not in {
        b.path for b in schema.unserved_bindings(ours)
    }


def test_every_unserved_template_resolves_to_its_route() -> None:
    router = Router(served_bindings())
    for path, verb, template, _ in official_unserved():
        resolved = router.resolve(verb, sample_path(template))
        assert isinstance(resolved, UnservedRoute), (template, resolved)
        assert resolved.path == path


def test_openapi_lists_no_unserved_route() -> None:
    document = openapi.committed_openapi()
    assert document == openapi.build_openapi(served_bindings())
    operations = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    # operationId is ``<Service>_<Method>`` (openapi.py)
    unserved = {
        "_".join(path.lstrip("/").rsplit(".", 1)[1].split("/")) for path, *_ in official_unserved()
    }
    assert "EvaluationService_RunEvaluation" in unserved
    assert "EvaluationService_GenerateEvaluation" in operations
    assert "EvaluationService_CreateEvaluation" in operations
    assert not operations & unserved
    assert not [p for p in document["paths"] if p.endswith(":runEvaluation")]
    assert [p for p in document["paths"] if p.endswith(":generateEvaluation")]


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


def test_unserved_routes_answer_501_naming_the_method(tmp_path: Path) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        assert_unimplemented(await client.post(f"{APP}:runEvaluation", json={}), RUN_EVALUATION)
        served = await client.post(f"{APP}/conversations/c:generateEvaluation", json={})
        assert served.status_code == 404  # served: the conversation is not stored
        for path, verb, template, _ in official_unserved():
            response = await client.request(verb, sample_path(template))
            assert_unimplemented(response, path.lstrip("/"))

    run(tmp_path, scenario)


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

    run(tmp_path, scenario)


def test_declared_unserved_routes_answer_501_before_the_body_even_if_routed(
    tmp_path: Path,
) -> None:
    """A router over every binding our descriptors declare (not only the served ones, as
    ``serve`` builds it) routes RunEvaluation to its method; the Transcoder still answers 501
    before authorizing or parsing anything, since the core has no handler for it."""

    async def main() -> None:
        storage = SqliteStorage(tmp_path / "ces-eval.db")
        await storage.open()
        try:
            core = Core(storage, pages.PageTokens(await storage.secret()))
            app = Transcoder(Router(schema.http_bindings()), handlers(core))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                url = f"{APP}:runEvaluation"
                for response in (
                    await client.post(url, content=b"{not json"),
                    await client.post(url + "?bogus=1", json={"unknownField": 1}),
                ):
                    assert_unimplemented(response, RUN_EVALUATION)
        finally:
            await storage.close()

    asyncio.run(main())


def test_wrong_verb_on_an_unserved_path_is_405_with_its_verbs(tmp_path: Path) -> None:
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

    run(tmp_path, scenario)


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

        nowhere = await client.get(f"{APP}/widgets")
        assert nowhere.status_code == 404
        assert error_info(nowhere.json())["reason"] == "PATH_NOT_FOUND"

    run(tmp_path, scenario)


def test_unserved_routes_authenticate_first(tmp_path: Path) -> None:
    """With --auth-tokens a caller must authenticate before learning anything; per-project
    authorization does not apply (no method descriptor names the resource fields), so an
    authenticated caller of another project also gets 501."""
    tokens = Tokens.load(write_token_file(tmp_path / "tokens.json"))

    async def main() -> None:
        async with rest_client(tmp_path, tokens) as client:
            anonymous = await client.post(f"{APP}:runEvaluation", json={})
            assert anonymous.status_code == 401
            assert "www-authenticate" in anonymous.headers
            headers = {"Authorization": f"Bearer {ALICE}"}
            own = "/v1beta/projects/proj-a/locations/l/apps/a:runEvaluation"
            assert_unimplemented(await client.post(own, json={}, headers=headers), RUN_EVALUATION)
            foreign = "/v1beta/projects/proj-b/locations/l/apps/a:runEvaluation"
            assert_unimplemented(
                await client.post(foreign, json={}, headers=headers), RUN_EVALUATION
            )
            wrong_verb = await client.delete(foreign, headers=headers)
            assert wrong_verb.status_code == 405

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
