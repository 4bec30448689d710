"""The tools an MCP server offers, asked with the ``mcp`` SDK's client over Streamable HTTP:
the implementation of :class:`~ces_eval.core.aip.ports.McpServers` (docs/tools.md, "A toolset's
tools").

The SDK's HTTP client (httpx2) is given a connection pool of our own: each connection resolves
its host itself and goes to none of the addresses the caller's rule refuses (the agent
endpoints' rule: never this server's own ports, :func:`.agent_http.allowed_addresses`), and it
counts what it reads, so a server that answers more than the bound is cut off whatever the
framing. No proxy, redirect or setting comes from the environment; the whole exchange has one
deadline.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpcore2
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ces_eval.core.aip.ports import AgentUnreachable, AgentUnreadable
from ces_eval.core.io.agent_http import allowed_addresses, verified

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path

__all__ = ["McpClients"]

_PAGES = 20  # tools/list pages read at most


class _Budget:
    """Bytes all connections of one exchange may still read."""

    def __init__(self, limit: int) -> None:
        self.left = limit


class _Stream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream, budget: _Budget) -> None:
        self._inner = inner
        self._budget = budget

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._inner.read(max_bytes, timeout)
        self._budget.left -= len(data)
        if self._budget.left < 0:
            raise httpcore2.ReadError("answer too large")
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        started = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _Stream(started, self._budget)

    def get_extra_info(self, info: str) -> Any:  # noqa: ANN401 - the base's
        return self._inner.get_extra_info(info)


class _Connector(httpcore2.AsyncNetworkBackend):
    """Connections to allowed addresses only (as :class:`.agent_http._Connector`), counted
    against one budget."""

    def __init__(self, refused: Callable[[str, int], bool], budget: _Budget) -> None:
        self._refused = refused
        self._budget = budget
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await allowed_addresses(host, port, self._refused)
        if addresses is None:
            raise httpcore2.ConnectError("refused")
        failure = httpcore2.ConnectError("no address")
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore2.ConnectError as error:
                failure = error
            else:
                return _Stream(stream, self._budget)
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("refused")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class McpClients:
    """:class:`~ces_eval.core.aip.ports.McpServers` over the ``mcp`` SDK's client; https
    verified as agents are (``--agent-ca-file``)."""

    def __init__(self, ca_file: Path | None = None) -> None:
        self._ca_file = ca_file

    async def list_tools(
        self,
        url: str,
        timeout: float,
        limit: int,
        refused: Callable[[str, int], bool],
    ) -> list[Mapping[str, Any]]:
        budget = _Budget(limit)
        tls = verified(self._ca_file) if url.lower().startswith("https:") else None
        transport = httpx2.AsyncHTTPTransport(verify=tls or False, trust_env=False)
        transport._pool = httpcore2.AsyncConnectionPool(  # ours, as agent_http's
            ssl_context=tls, network_backend=_Connector(refused, budget)
        )
        http = httpx2.AsyncClient(
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            timeout=httpx2.Timeout(timeout),
        )
        found: list[Mapping[str, Any]] = []
        try:
            async with asyncio.timeout(timeout), http:
                connection = streamable_http_client(url, http_client=http, max_sse_event_size=limit)
                async with Client(connection) as client:
                    cursor: str | None = None
                    for _ in range(_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        found.extend(
                            json.loads(tool.model_dump_json(by_alias=True, exclude_none=True))
                            for tool in page.tools
                        )
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except Exception as error:  # every failure becomes one of the port's three kinds
            raise _translated(error, budget) from error
        return found


def _leaves(error: BaseException) -> list[BaseException]:
    """The errors inside ``error``: the SDK's task groups wrap them in ExceptionGroups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _translated(error: Exception, budget: _Budget) -> Exception:
    """``error`` as the port's kind: past the byte bound or unreadable, a timeout, or no
    answer."""
    leaves = _leaves(error)
    if budget.left < 0:
        return AgentUnreadable("the answer is larger than the bound")
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in leaves):
        return TimeoutError()
    if any(
        isinstance(leaf, httpx2.TransportError | httpcore2.ConnectError | OSError)
        for leaf in leaves
    ):
        return AgentUnreachable()
    return AgentUnreadable(str(leaves[0])[:200])
