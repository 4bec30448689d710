"""Asking an MCP server for its tools within bounds (src/ces_eval/core/io/mcp_servers.py;
docs/tools.md, "A toolset's tools"): a refused address is never connected to, an answer past
the byte bound and a server that never answers end the exchange, on real HTTP servers in
threads. (The listing itself is tested against a real ces-eval's /mcp in
tests/integration/test_official_tools.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ces_eval.core.aip.ports import AgentUnreachable, AgentUnreadable
from ces_eval.core.io.mcp_servers import McpClients


class _Hostile(BaseHTTPRequestHandler):
    """/large answers 4 MiB of JSON-looking bytes; /slow answers nothing for a minute."""

    calls: list[str] = []  # noqa: RUF012 - shared by the handler's instances on purpose

    def do_POST(self) -> None:
        self.calls.append(self.path)
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/slow"):
            time.sleep(60)
            return
        data = b'{"jsonrpc": "2.0", "id": 0, "result": "' + b"x" * (4 * 2**20) + b'"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _list(url: str, *, timeout: float = 5, refused: bool = False) -> Any:
    clients = McpClients()
    return asyncio.run(clients.list_tools(url, timeout, 1024 * 1024, lambda a, p: refused))


def test_a_refused_address_is_never_called(hostile: str) -> None:
    _Hostile.calls.clear()
    with pytest.raises(AgentUnreachable):
        _list(f"{hostile}/large", refused=True)
    assert _Hostile.calls == []


def test_an_answer_past_the_bound_is_cut_off(hostile: str) -> None:
    with pytest.raises(AgentUnreadable):
        _list(f"{hostile}/large")


def test_a_server_that_never_answers_ends_at_the_deadline(hostile: str) -> None:
    with pytest.raises(TimeoutError):
        _list(f"{hostile}/slow", timeout=1)
