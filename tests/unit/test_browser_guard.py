"""Web pages must not drive a local server (issue 15, item 2): :class:`BrowserGuard` in process,
around a tiny app and through :func:`build_app`, the ``--allow-host`` / ``--allow-origin``
options and the MCP body limit's refusal (item 10)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from ces_eval.cli import parse
from ces_eval.contract.limits import MAX_REQUEST_BYTES
from ces_eval.server import ServerConfig
from ces_eval.surfaces.asgi import BODY_KEY
from ces_eval.surfaces.http_app import (
    BodyLimit,
    BrowserGuard,
    BrowserRules,
    build_app,
    host_name,
    origin_key,
)
from ces_eval.workers import _Group

PORT = 18080
BASE = f"http://127.0.0.1:{PORT}"
JSON = {"content-type": "application/json"}
PROXY = "ces.internal"
PARTNER = "http://app.example:3000"


async def tiny(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers 200 with the request's method and body: the one BodyLimit read, as the surfaces
    take it, or (mounted without BodyLimit) the one it reads itself."""
    body = scope.get(BODY_KEY)
    if body is None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
    answer = json.dumps({"method": scope["method"], "body": body.decode()}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-app", b"1")]})
    await send({"type": "http.response.body", "body": answer})


def guard(**rules: Any) -> BrowserGuard:
    return BrowserGuard(tiny, BrowserRules(**rules))


def send(
    app: Any,
    method: str,
    path: str = "/v1beta/x",
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
    base: str = BASE,
) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as client:
            return await client.request(method, path, headers=headers, content=content)

    return asyncio.run(main())


def raw(app: Any, scope: dict[str, Any]) -> tuple[int, dict[bytes, bytes]]:
    """``app`` called with ``scope`` as given (no Host added, any ``server``)."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def record(message: Message) -> None:
        sent.append(message)

    full = {
        "type": "http",
        "method": "GET",
        "path": "/v1beta/x",
        "scheme": "http",
        "headers": [],
        "server": ("127.0.0.1", PORT),
        "client": ("127.0.0.1", 50000),
        **scope,
    }
    asyncio.run(app(full, receive, record))
    return sent[0]["status"], dict(sent[0]["headers"])


def reason(response: httpx.Response, jsonrpc: bool = False) -> str:
    """The ErrorInfo reason of a refusal, checking its whole shape."""
    body = response.json()
    if jsonrpc:
        assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", None, -32000)
        error = body["error"]["data"]
        assert body["error"]["message"] == error["message"]
    else:
        assert set(body) == {"error"}
        error = body["error"]
    assert error["code"] == response.status_code
    [info] = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "ces.googleapis.com"
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    assert "access-control-allow-origin" not in response.headers
    return f"{error['status']} {info['reason']}"


# -- Host ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        f"127.0.0.1:{PORT}",
        f"localhost:{PORT}",
        f"LOCALHOST.:{PORT}",
        f"[::1]:{PORT}",
        f"[0:0:0:0:0:0:0:1]:{PORT}",
        f"{socket.gethostname()}:{PORT}",
        f"{socket.getfqdn()}:{PORT}",
        f"{PROXY}:{PORT}",
        PROXY,  # --allow-host names pass on any port
        f"{PROXY}:9000",
        f"CES.Internal:{PORT}",
        f"10.1.2.3:{PORT}",  # --host
    ],
)
def test_a_host_of_this_server_passes(host: str) -> None:
    app = guard(host="10.1.2.3", allow_host=(PROXY,))
    response = send(app, "GET", headers={"host": host})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "host",
    [
        f"evil.example:{PORT}",
        "evil.example",
        f"localhost:{PORT + 1}",  # another port than the one the connection reached
        "localhost",  # port 80
        f"127.0.0.1:{PORT}.evil.example",
        f"localhost.evil.example:{PORT}",
        f"::1:{PORT}",  # IPv6 without brackets
        f"[::1]x:{PORT}",
        f"localhost:{PORT}:{PORT}",
        "localhost:99999",
        "",
        f"local host:{PORT}",
        f"ces.internal.evil.example:{PORT}",
    ],
)
def test_another_host_is_421(host: str) -> None:
    response = send(guard(allow_host=(PROXY,)), "GET", headers={"host": host})
    assert response.status_code == 421, response.text
    assert reason(response) == "PERMISSION_DENIED HOST_NOT_ALLOWED"


def test_the_address_the_connection_reached_passes() -> None:
    """A wildcard bind reached by any of its addresses: the connection's local address."""
    app = guard(host="0.0.0.0")  # noqa: S104 - the wildcard bind under test
    for address in ("192.0.2.7", "127.0.1.1"):
        reached = send(
            app, "GET", headers={"host": f"{address}:{PORT}"}, base=f"http://{address}:{PORT}"
        )
        assert reached.status_code == 200, reached.text
        other = send(
            app, "GET", headers={"host": f"192.0.2.8:{PORT}"}, base=f"http://{address}:{PORT}"
        )
        assert other.status_code == 421
    # As the ready line prints it: the wildcard address itself is no name a page can use.
    assert send(app, "GET", headers={"host": f"0.0.0.0:{PORT}"}).status_code == 200


def test_several_host_headers_are_421() -> None:
    host = f"localhost:{PORT}".encode()
    status, _ = raw(guard(), {"headers": [(b"host", host), (b"host", b"evil.example")]})
    assert status == 421


def test_without_host_the_request_passes() -> None:
    """HTTP/1.0 has no Host; browsers always send one, so its absence is no page's request."""
    assert raw(guard(), {"headers": []})[0] == 200
    assert raw(guard(), {"headers": [], "client": ("192.0.2.9", 4000)})[0] == 200


def test_without_a_local_address_names_pass_on_any_port() -> None:
    """A Unix socket has no ``server``: names still count, ports cannot be compared."""
    status, _ = raw(guard(), {"headers": [(b"host", b"localhost:1234")], "server": None})
    assert status == 200
    status, _ = raw(guard(), {"headers": [(b"host", b"evil.example")], "server": None})
    assert status == 421


# -- Origin ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "origin",
    [
        BASE,
        f"http://localhost:{PORT}",
        f"https://localhost:{PORT}",
        f"http://[::1]:{PORT}",
        PARTNER,
        "HTTP://APP.example:3000",
        "https://secure.example",  # listed as https://secure.example:443
        f"http://{PROXY}",
    ],
)
def test_an_allowed_origin_gets_cors_headers(origin: str) -> None:
    app = guard(allow_origin=(PARTNER, "https://secure.example:443"), allow_host=(PROXY,))
    response = send(app, "POST", headers={"origin": origin, **JSON}, content=b"{}")
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["vary"] == "Origin"
    assert response.headers["x-app"] == "1"  # the app's own headers stay


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",
        f"http://localhost:{PORT + 1}",
        "http://app.example:3001",
        "https://app.example:3000",
        "http://app.example:3000/path",
        f"ftp://localhost:{PORT}",
        "file://",
        "",
        "*",
    ],
)
def test_another_origin_is_403(origin: str) -> None:
    app = guard(allow_origin=(PARTNER,))
    for method in ("GET", "POST"):
        response = send(app, method, headers={"origin": origin, **JSON}, content=b"{}")
        assert response.status_code == 403, response.text
        assert reason(response) == "PERMISSION_DENIED ORIGIN_NOT_ALLOWED"


def test_without_origin_no_cors_headers_are_added() -> None:
    response = send(guard(allow_origin=(PARTNER,)), "GET")
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    assert "vary" not in response.headers


# -- preflight -------------------------------------------------------------------------------------


def preflight(app: Any, origin: str, host: str | None = None) -> httpx.Response:
    headers = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, authorization",
    }
    return send(app, "OPTIONS", headers={**headers, **({"host": host} if host else {})})


def test_a_preflight_from_an_allowed_origin_is_204() -> None:
    response = preflight(guard(allow_origin=(PARTNER,)), PARTNER)
    assert response.status_code == 204
    assert response.content == b""
    assert response.headers["access-control-allow-origin"] == PARTNER
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed = {h.strip() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "authorization", "x-goog-api-client", "mcp-protocol-version"} <= allowed
    assert response.headers["access-control-max-age"] == "600"
    assert response.headers["vary"] == "Origin"
    assert "x-app" not in response.headers  # answered by the guard, not the app


def test_a_preflight_from_another_origin_is_403_and_with_another_host_421() -> None:
    app = guard(allow_origin=(PARTNER,))
    refused = preflight(app, "http://evil.example")
    assert refused.status_code == 403
    assert reason(refused) == "PERMISSION_DENIED ORIGIN_NOT_ALLOWED"
    rebound = preflight(app, PARTNER, host=f"evil.example:{PORT}")
    assert rebound.status_code == 421


def test_options_without_request_method_goes_to_the_app() -> None:
    response = send(guard(allow_origin=(PARTNER,)), "OPTIONS", headers={"origin": PARTNER})
    assert response.json()["method"] == "OPTIONS"
    assert response.headers["access-control-allow-origin"] == PARTNER


# -- Content-Type ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "content_type", "content"),
    [
        ("POST", "text/plain", b"{}"),
        ("POST", "text/plain;charset=UTF-8", b"{}"),
        ("POST", "application/x-www-form-urlencoded", b"a=1"),
        ("POST", "multipart/form-data; boundary=x", b"--x--"),
        ("POST", None, b"{}"),
        ("POST", None, None),  # a body-less POST: browsers send it without preflight
        ("POST", "application/jsonp", b"{}"),
        ("POST", "application/merge-patch+json", b"{}"),
        ("PATCH", "text/plain", b"{}"),
        ("PATCH", None, b"{}"),
        ("DELETE", "text/plain", None),
        ("DELETE", None, b"{}"),
        ("PUT", "text/plain", b"{}"),
    ],
)
def test_a_write_that_is_not_json_is_415(
    method: str, content_type: str | None, content: bytes | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = send(guard(), method, headers=headers, content=content)
    assert response.status_code == 415, response.text
    assert reason(response) == "INVALID_ARGUMENT UNSUPPORTED_CONTENT_TYPE"
    info = response.json()["error"]["details"][0]
    assert info["metadata"] == {
        "contentType": content_type or "none",
        "expected": "application/json",
    }


@pytest.mark.parametrize(
    ("method", "content_type", "content"),
    [
        ("POST", "application/json", b"{}"),
        ("POST", "application/json; charset=utf-8", b"{}"),
        ("POST", "Application/JSON", b"{}"),
        ("PATCH", "application/json", b"{}"),
        ("DELETE", "application/json", None),  # Google's clients send it even on DELETE
        ("DELETE", None, None),  # curl -X DELETE
        ("GET", "text/plain", None),
        ("GET", None, None),
        ("HEAD", None, None),
    ],
)
def test_json_writes_and_reads_pass(
    method: str, content_type: str | None, content: bytes | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = send(guard(), method, headers=headers, content=content)
    assert response.status_code == 200, response.text
    if method != "HEAD":
        assert response.json() == {"method": method, "body": (content or b"").decode()}


# -- build_app: every path, and /mcp's JSON-RPC refusals -------------------------------------------


async def _ready() -> str | None:
    return None


def app_with_mcp(**rules: Any) -> Any:
    return build_app(_ready, rest=tiny, mcp=tiny, browser=BrowserRules(**rules))


@pytest.mark.parametrize("path", ["/healthz", "/mcp", "/v1beta/projects/p", "/openapi.json"])
def test_build_app_guards_every_path(path: str) -> None:
    app = app_with_mcp()
    response = send(app, "GET", path, headers={"host": f"evil.example:{PORT}"})
    assert response.status_code == 421
    assert reason(response, jsonrpc=path == "/mcp") == "PERMISSION_DENIED HOST_NOT_ALLOWED"


def test_mcp_refusals_are_json_rpc_errors_carrying_googles_error() -> None:
    app = app_with_mcp()
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
    origin = send(app, "POST", "/mcp", {"origin": "http://evil.example", **JSON}, body)
    assert origin.status_code == 403
    assert reason(origin, jsonrpc=True) == "PERMISSION_DENIED ORIGIN_NOT_ALLOWED"
    plain = send(app, "POST", "/mcp", {"content-type": "text/plain"}, body)
    assert plain.status_code == 415
    assert reason(plain, jsonrpc=True) == "INVALID_ARGUMENT UNSUPPORTED_CONTENT_TYPE"
    served = send(app, "POST", "/mcp", JSON, body)
    assert served.status_code == 200
    assert json.loads(served.json()["body"])["method"] == "tools/list"


def test_the_mcp_body_limit_answers_a_json_rpc_error_with_googles_error() -> None:
    limit = BodyLimit(tiny, 10, jsonrpc=True)
    refused = send(limit, "POST", "/mcp", JSON, b"x" * 11)
    assert refused.status_code == 413
    assert reason(refused, jsonrpc=True) == "RESOURCE_EXHAUSTED REQUEST_BODY_TOO_LARGE"
    assert send(limit, "POST", "/mcp", JSON, b"x" * 10).status_code == 200
    rest = send(BodyLimit(tiny, 10), "POST", "/v1beta/x", JSON, b"x" * 11)
    assert reason(rest) == "RESOURCE_EXHAUSTED REQUEST_BODY_TOO_LARGE"


def test_build_app_limits_mcp_bodies_to_our_limit() -> None:
    app = app_with_mcp()
    at_limit = send(app, "POST", "/mcp", JSON, b" " * MAX_REQUEST_BYTES)
    assert at_limit.status_code == 200
    over = send(app, "POST", "/mcp", JSON, b" " * (MAX_REQUEST_BYTES + 1))
    assert over.status_code == 413
    assert reason(over, jsonrpc=True) == "RESOURCE_EXHAUSTED REQUEST_BODY_TOO_LARGE"


def test_lifespan_passes_through() -> None:
    entered: list[bool] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        entered.append(scope["type"] == "lifespan")

    async def nothing() -> Message:
        return {"type": "lifespan.shutdown"}

    async def drop(message: Message) -> None:
        return None

    asyncio.run(BrowserGuard(app, BrowserRules())({"type": "lifespan"}, nothing, drop))
    assert entered == [True]


# -- names and origins as the rules compare them ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("LocalHost.", "localhost"),
        ("::1", "[::1]"),
        ("[0::1]", "[::1]"),
        ("0.0.0.0", "0.0.0.0"),  # noqa: S104 - a name, not a bind
        ("my_host-1.example", "my_host-1.example"),
        ("a:80", None),
        ("http://a", None),
        ("a/b", None),
        ("", None),
        ("[nope]", None),
    ],
)
def test_host_name(text: str, expected: str | None) -> None:
    assert host_name(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://a.example", "http://a.example:80"),
        ("HTTPS://A.example", "https://a.example:443"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("http://a.example:8080/", None),
        ("null", None),
        ("*", None),
        ("a.example", None),
        ("ws://a.example", None),
    ],
)
def test_origin_key(text: str, expected: str | None) -> None:
    assert origin_key(text) == expected


@given(st.text(max_size=40))
def test_names_and_origins_never_raise_and_are_fixed_points(text: str) -> None:
    name = host_name(text)
    assert name is None or host_name(name) == name
    key = origin_key(text)
    assert key is None or origin_key(key) == key


@given(st.text(alphabet="ab.:[]1-%", max_size=20))
def test_any_host_header_is_answered_200_or_421(text: str) -> None:
    status, _ = raw(guard(), {"headers": [(b"host", text.encode())]})
    assert status in {200, 421}


def test_bad_rules_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match="not a host name"):
        guard(allow_host=("a:80",))
    with pytest.raises(ValueError, match="'null'"):
        guard(allow_origin=("null",))


# -- the options -----------------------------------------------------------------------------------


def test_the_options_add_up_from_flags_or_come_from_the_variable() -> None:
    environ = {"CES_EVAL_ALLOW_HOST": "a.example, b.example", "CES_EVAL_ALLOW_ORIGIN": PARTNER}
    args = parse(["serve"], environ)
    assert (args.allow_host, args.allow_origin) == (("a.example", "b.example"), (PARTNER,))
    args = parse(["serve", "--allow-host", "c.example", "--allow-host", "d,e"], environ)
    assert args.allow_host == ["c.example", "d", "e"]  # the flags replace the variable
    assert args.allow_origin == (PARTNER,)
    assert parse(["serve"], {}).allow_host == ServerConfig().allow_host == ()


@pytest.mark.parametrize(
    ("option", "text", "why"),
    [
        ("allow-host", "a.example:80", "is not a host name"),
        ("allow-host", "http://a.example", "is not a host name"),
        ("allow-origin", "*", "would let any web page call the server"),
        ("allow-origin", "null", "would let any web page call the server"),
        ("allow-origin", "a.example", "is not an origin"),
        ("allow-origin", "http://a.example/app", "is not an origin"),
    ],
)
def test_a_bad_entry_is_one_line(
    capsys: pytest.CaptureFixture[str], option: str, text: str, why: str
) -> None:
    variable = "CES_EVAL_" + option.upper().replace("-", "_")
    for argv, environ in ([["serve", f"--{option}", text], {}], [["serve"], {variable: text}]):
        with pytest.raises(SystemExit) as raised:
            parse(argv, environ)
        assert raised.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert why in err


def test_workers_get_the_same_rules() -> None:
    config = ServerConfig(allow_host=("a.example", "b.example"), allow_origin=(PARTNER,))
    arguments = _Group(config, 2)._arguments(7)
    args = parse(["serve", *arguments], {})
    assert tuple(args.allow_host) == config.allow_host
    assert tuple(args.allow_origin) == config.allow_origin
    plain = _Group(ServerConfig(), 2)._arguments(7)
    assert "--allow-host" not in plain
    assert "--allow-origin" not in plain
