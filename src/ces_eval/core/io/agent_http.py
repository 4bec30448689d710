"""The run engine's HTTP calls to the team's agent, judge and simulator, over httpx: the
implementation of :class:`~ces_eval.core.aip.ports.AgentHttp` the server runs with.

Every connection resolves its host itself and goes only to addresses the engine's rule does not
refuse (:class:`_Connector`), so that a name cannot resolve to an allowed address when checked
and to a refused one when connected. No proxy, no redirect and no certificate setting comes from
the environment; httpx's errors become the port's kinds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import select
import socket
import ssl
import sys
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from ces_eval.core.aip.ports import AgentUnreachable, AgentUnreadable, AgentUntrusted

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

__all__ = ["HttpxAgents"]

# httpcore imports sniffio on every request to learn its event loop's library
# (httpcore._synchronization.current_async_library), and takes asyncio when it is not installed;
# it is no dependency of ours, and each failed import searches sys.path again: a fifth of the
# engine's time per call against an agent that answers at once (bench/engine.py). Marked
# missing here, the import fails at once, with the same outcome.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]  # None: "not importable"


class _Connector(httpcore.AsyncNetworkBackend):
    """A session's connections: the host is resolved here, at each connection, and the
    connection goes to the addresses found, none of which ``refused`` names; no second
    resolution in between could name another. A refusal is a ConnectError, as a closed
    port's."""

    def __init__(self, refused: Callable[[str, int], bool]) -> None:
        self._refused = refused
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError):
            raise httpcore.ConnectError("unresolved") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        if any(self._refused(address, port) for address in addresses):
            raise httpcore.ConnectError("refused")
        failure = httpcore.ConnectError("no address")
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as error:
                failure = error
            else:
                return _Stream(stream)
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("refused")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream(httpcore.AsyncNetworkStream):
    """A connection whose socket is looked up once. httpcore's pool asks whether each idle
    connection was closed by its peer (readable) before it gives one a request, and AnyIO
    builds every attribute of the socket (a getpeername call among them) for each question:
    a seventh of the engine's time per call at 16 sessions (bench/engine.py)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:  # noqa: ANN401 - the base's
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


def _readable(sock: socket.socket | None) -> bool:
    """Whether ``sock`` has something to read, or is gone (httpcore then drops the idle
    connection: its peer closed it)."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


@functools.cache
def _verified(ca_file: Path | None) -> ssl.SSLContext:
    """The TLS settings of https calls: certificates verified against ``ca_file``'s
    authorities, or the default set (certifi's). Made once per process (loading the CA
    certificates takes ~40 ms, on the event loop)."""
    if ca_file is not None:
        return ssl.create_default_context(cafile=str(ca_file))
    return httpx.create_ssl_context(trust_env=False)


def _unverified(error: BaseException) -> bool:
    """Whether ``error`` came of a certificate that failed verification (httpx and httpcore
    raise their ConnectError from ssl's error)."""
    seen: BaseException | None = error
    for _ in range(8):  # the chain is httpx's, httpcore's, then ssl's
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """httpx's errors as the port's: a timeout first (httpx's is a transport error too), then
    one kind for every way of getting no HTTP answer, then what could not be read."""
    try:
        yield
    except httpx.TimeoutException:
        raise TimeoutError from None
    except httpx.ConnectError as error:
        if _unverified(error):
            raise AgentUntrusted from None
        raise AgentUnreachable from None
    except (httpx.TransportError, httpx.InvalidURL, UnicodeError):
        raise AgentUnreachable from None
    except httpx.HTTPError:
        raise AgentUnreadable from None


class _Answer:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    def header(self, name: str) -> str:
        value: str = self._response.headers.get(name, "")
        return value

    async def chunks(self) -> AsyncIterator[bytes]:
        with _translated():
            async for chunk in self._response.aiter_raw():
                yield chunk


class _Session:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    @contextlib.asynccontextmanager
    async def post(
        self, uri: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[_Answer]:
        with _translated():
            request = self._client.build_request("POST", uri, content=body, headers=headers)
            response = await self._client.send(request, stream=True)
        try:
            yield _Answer(response)
        finally:
            await response.aclose()

    async def close(self) -> None:
        await self._client.aclose()


class HttpxAgents:
    """:class:`~ces_eval.core.aip.ports.AgentHttp` over httpx; https verified against the
    authorities of ``ca_file`` (``--agent-ca-file``), else the default set."""

    def __init__(self, ca_file: Path | None = None) -> None:
        self._ca_file = ca_file

    def session(
        self, uris: Sequence[str], timeout: float, refused: Callable[[str, int], bool]
    ) -> _Session:
        https = any(uri.lower().startswith("https:") for uri in uris)
        tls = _verified(self._ca_file) if https else None
        # The transport's own pool is replaced at once below (httpx takes no network backend of
        # its own): ``verify`` given, it loads no certificates for it.
        transport = httpx.AsyncHTTPTransport(verify=tls or False, trust_env=False)
        # Ours, with httpx's defaults otherwise (httpx.AsyncHTTPTransport.__init__); without a
        # context (no https URL), httpcore would make a verifying one itself.
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_Connector(refused),
        )
        client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            trust_env=False,
            timeout=httpx.Timeout(timeout),
        )
        return _Session(client)
