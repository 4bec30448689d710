"""An app's agent endpoint (docs/agents.md): where the run engine plays the app's evaluations
when the team brings its own agent (:mod:`ces_eval.core.engine.agents`). A singleton of the app
(AIP-156): GetAgentEndpoint answers the stored one, or an empty one (no agent) for an app that
never set it; UpdateAgentEndpoint sets it, with an update mask and an etag (AIP-134, AIP-154).
It lives in a generic table (:data:`ces_eval.storage.tables.AGENT_ENDPOINTS`; the get and the
update of every singleton: :mod:`ces_eval.core.aip.singletons`), so a project
reset clears it.

Every URL's host must be loopback or one the server allows (``--agent-allow-hosts``), checked
when the endpoint is set and again before every call; no URL may reach the server's own
listeners (:func:`reaches_server`: its gRPC and HTTP ports at any address of this machine),
checked when the endpoint is set and, on the addresses its host resolves to then, at every
connection. The headers (tokens) are stored but never answered: ``header_names`` lists them;
their values are visible ASCII (what HTTP/1.1 sends as is), and no violation repeats one.
``max_concurrent_sessions`` is how many sessions a run plays at once (docs/agents.md,
"Concurrency"): :data:`DEFAULT_SESSIONS` when 0, at most :data:`MAX_SESSIONS`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ces_eval.core.aip import singletons
from ces_eval.errors import FieldViolation
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.storage import tables

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = [
    "RPCS",
    "Endpoint",
    "header_refusal",
    "host_refusal",
    "of_app",
    "own_port_refusal",
    "reaches_server",
]

AgentEndpoint = emulator_pb2.AgentEndpoint
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_TIMEOUT_SECONDS = 600.0
DEFAULT_MAX_RESPONSE_BYTES = 4 * 2**20
MAX_RESPONSE_BYTES = 64 * 2**20
# Sessions one run plays against the agent at once (docs/agents.md, "Concurrency"): when
# max_concurrent_sessions is 0, and at most.
DEFAULT_SESSIONS = 16
MAX_SESSIONS = 64
# RFC 9110 field names (tokens); values of visible ASCII characters, spaces and tabs only: the
# HTTP client sends header values as ASCII (RFC 9110's obs-text, 0x80-0xFF, it cannot encode).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
# Which this server's listeners are, as one URL names them: its ports at addresses of this
# machine (see reaches_server).
_DEFAULT_PORTS = {"http": 80, "https": 443}
_MANAGED_HEADERS = frozenset({"content-type", "content-length", "host", "transfer-encoding"})


@dataclass(frozen=True)
class Endpoint:
    """An app's agent endpoint as the engine calls it (headers included)."""

    uri: str
    headers: Mapping[str, str]
    timeout: float
    max_response_bytes: int
    judge_uri: str
    simulator_uri: str
    # Sessions a run plays at once, at most (fewer while the agent pushes back).
    max_concurrent_sessions: int = DEFAULT_SESSIONS
    # The server's own listening ports, which no call may reach (reaches_server).
    server_ports: tuple[int, ...] = ()
    # Whether calls are recorded or replayed (docs/agents.md, "Record and replay").
    recording_mode: AgentEndpoint.RecordingMode.ValueType = AgentEndpoint.RECORDING_MODE_UNSPECIFIED


def host_refusal(uri: str, allowed: Sequence[str]) -> str | None:
    """Why ``uri`` may not be called (None: it may): an http or https URL without credentials
    whose host is loopback (``localhost``, 127.0.0.0/8, ::1) or one of ``allowed``."""
    try:
        parts = urllib.parse.urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as error:
        return f"Not a URL: {error}."
    host = (parts.hostname or "").lower()
    problem = None
    if any(character.isspace() or not character.isprintable() for character in uri):
        # urlsplit drops tabs and line breaks (WHATWG); the HTTP client refuses them.
        problem = "Must not hold whitespace or control characters."
    elif parts.scheme not in ("http", "https"):
        problem = "Must be an http or https URL."
    elif parts.username is not None or parts.password is not None:
        problem = "Must not carry credentials; give them in headers."
    elif not host:
        problem = "Must name a host."
    elif not (_loopback(host) or host in {name.lower() for name in allowed}):
        problem = (
            f"The host {host} is neither loopback nor allowed by the server's --agent-allow-hosts."
        )
    return problem


def header_refusal(value: str) -> str | None:
    """Why a header value cannot be sent (None: it can); never repeats the value, a secret."""
    if _HEADER_VALUE.fullmatch(value):
        return None
    return "The value holds a character other than visible ASCII, a space or a tab."


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _of_this_machine(text: str) -> bool:
    """Whether ``text`` is an address of this machine: loopback, the unspecified address (which
    connects to this machine), or one a socket can be bound to (an address of one of its
    interfaces, whatever name the machine or ``--host`` gives it)."""
    address = _address(text)
    if address is None:
        return False
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def reaches_server(address: str, port: int, own_ports: Collection[int]) -> bool:
    """Whether a connection to ``address`` and ``port`` could reach this server's own
    listeners (``own_ports``, its gRPC and HTTP ports): the port is one of them and the address
    is this machine's. Refused for agents, judges and simulators whatever the address's name
    (docs/agents.md, "Safety")."""
    return port in own_ports and _of_this_machine(address)


async def own_port_refusal(uri: str, own_ports: Collection[int]) -> str | None:
    """Why ``uri`` may not be called because it reaches this server (see
    :func:`reaches_server`) at one of the addresses its host resolves to now; None when it does
    not, or cannot be resolved now (each connection checks again)."""
    if not own_ports:
        return None
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)
        host = parts.hostname or ""
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (ValueError, OSError, UnicodeError):
        return None
    if any(reaches_server(str(info[4][0]), port, own_ports) for info in found):
        return "Names this server's own port; the agent, judge and simulator are other programs."
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint_name(app: str) -> str:
    return f"{app}/agentEndpoint"


async def of_app(context: Context, app: str) -> Endpoint | None:
    """The agent ``app``'s runs play against, None when it has none (scripted outcomes)."""
    stored = await context.storage.get_row(tables.AGENT_ENDPOINTS, _endpoint_name(app))
    if stored is None or not stored.uri:
        return None
    timeout = DEFAULT_TIMEOUT_SECONDS
    if stored.HasField("timeout"):
        timeout = stored.timeout.ToNanoseconds() / 1e9
    return Endpoint(
        uri=stored.uri,
        headers=dict(stored.headers),
        timeout=timeout,
        max_response_bytes=stored.max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES,
        judge_uri=stored.judge_uri,
        simulator_uri=stored.simulator_uri,
        max_concurrent_sessions=stored.max_concurrent_sessions or DEFAULT_SESSIONS,
        server_ports=context.settings.own_ports,
        recording_mode=stored.recording_mode,
    )


def _answered(endpoint: AgentEndpoint) -> AgentEndpoint:
    """``endpoint`` as answered: the headers' names only."""
    answer = AgentEndpoint()
    answer.CopyFrom(endpoint)
    answer.header_names[:] = sorted(endpoint.headers)
    answer.ClearField("headers")
    return answer


def _violations(endpoint: AgentEndpoint, allowed: tuple[str, ...]) -> list[FieldViolation]:
    path = "agent_endpoint"
    found: list[FieldViolation] = []
    for field in ("uri", "judge_uri", "simulator_uri"):
        value = getattr(endpoint, field)
        refusal = host_refusal(value, allowed) if value else None
        if refusal is not None:
            found.append(FieldViolation(f"{path}.{field}", refusal, "URL_NOT_ALLOWED"))
    if (endpoint.judge_uri or endpoint.simulator_uri) and not endpoint.uri:
        field = "judge_uri" if endpoint.judge_uri else "simulator_uri"
        found.append(FieldViolation(f"{path}.{field}", "Set only with a uri (an agent)."))
    for name, value in endpoint.headers.items():
        where = f"{path}.headers[{name!r}]"
        if not _HEADER_NAME.fullmatch(name):
            found.append(FieldViolation(where, "Not an HTTP header name."))
        elif name.lower() in _MANAGED_HEADERS:
            found.append(FieldViolation(where, "Set by the server for every call."))
        refusal = header_refusal(value)
        if refusal is not None:  # the value is a secret: the violation does not repeat it
            found.append(FieldViolation(where, refusal))
    if endpoint.HasField("timeout"):
        seconds = endpoint.timeout.ToNanoseconds() / 1e9
        if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
            found.append(
                FieldViolation(
                    f"{path}.timeout",
                    f"Must be more than 0 and at most {MAX_TIMEOUT_SECONDS:g} seconds.",
                )
            )
    if not 0 <= endpoint.max_response_bytes <= MAX_RESPONSE_BYTES:
        found.append(
            FieldViolation(
                f"{path}.max_response_bytes", f"Must be between 0 and {MAX_RESPONSE_BYTES}."
            )
        )
    if not 0 <= endpoint.max_concurrent_sessions <= MAX_SESSIONS:
        found.append(
            FieldViolation(
                f"{path}.max_concurrent_sessions",
                f"Must be between 0 ({DEFAULT_SESSIONS} sessions) and {MAX_SESSIONS}; got "
                f"{endpoint.max_concurrent_sessions}.",
                "OUT_OF_RANGE",
            )
        )
    return found


async def get_agent_endpoint(
    context: Context, request: emulator_pb2.GetAgentEndpointRequest, caller: Caller
) -> AgentEndpoint:
    return _answered(await singletons.get(context, tables.AGENT_ENDPOINTS, request.name))


async def update_agent_endpoint(
    context: Context, request: emulator_pb2.UpdateAgentEndpointRequest, caller: Caller
) -> AgentEndpoint:
    allowed = context.settings.agent_allow_hosts

    async def check(updated: AgentEndpoint) -> list[FieldViolation]:
        violations = _violations(updated, allowed)
        for field in ("uri", "judge_uri", "simulator_uri"):
            value = getattr(updated, field)
            if not value or host_refusal(value, allowed) is not None:
                continue  # nothing to call, or refused already
            refusal = await own_port_refusal(value, context.settings.own_ports)
            if refusal is not None:
                found = FieldViolation(f"agent_endpoint.{field}", refusal, "URL_NOT_ALLOWED")
                violations.append(found)
        return violations

    updated = await singletons.update(
        context, tables.AGENT_ENDPOINTS, request, "agent_endpoint", check
    )
    return _answered(updated)


RPCS: dict[str, Rpc] = {
    "GetAgentEndpoint": get_agent_endpoint,
    "UpdateAgentEndpoint": update_agent_endpoint,
}
