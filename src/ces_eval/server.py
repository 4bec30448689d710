"""``ces-eval serve``: the gRPC and HTTP (REST, health) listeners over one core and one database.

Start-up order: open the database (migrations), bind gRPC (EvaluationService, EmulatorService,
grpc.health.v1, server reflection), start the HTTP listener; ``/healthz`` turns 200 only when
both accept and the database answers. SIGTERM or SIGINT stops accepting, drains in-flight calls
(bounded grace period), stops this process's running operations (they end UNAVAILABLE), closes
the database and returns normally (exit status 0). Operations a crashed process left running are
marked failed at the next start (SQLite) or when their lease runs out (PostgreSQL replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ces_eval import openapi, schema
from ces_eval import storage as storage_backends
from ces_eval.core import exchange, pages
from ces_eval.core.operations import OperationRunner
from ces_eval.core.service import DEFAULT_EXPORT_ROOT, Core, handlers
from ces_eval.storage.base import InUse, Unavailable
from ces_eval.surfaces.grpc_api import Dispatcher
from ces_eval.surfaces.http_app import build_app
from ces_eval.surfaces.mcp_tools import build_endpoint
from ces_eval.transcoding.app import Transcoder
from ces_eval.transcoding.router import Router

__all__ = ["ServerConfig", "serve"]

_log = logging.getLogger("ces_eval")
DRAIN_SECONDS = 10.0
HEALTH_PING_SECONDS = 2.0


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    http_port: int = 8080
    database: str = "sqlite:///./data/ces-eval.db"
    export_dir: Path = DEFAULT_EXPORT_ROOT
    operation_lease: float = 30.0


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: :func:`serve` owns SIGTERM/SIGINT and stops
    both listeners together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _hint(config: ServerConfig, grpc_port: int) -> str:
    return (
        "official Python client over gRPC: EvaluationServiceClient(transport="
        "EvaluationServiceGrpcTransport(channel=grpc.insecure_channel("
        f"'{config.host}:{grpc_port}')))"
    )


async def _start_grpc(
    config: ServerConfig, dispatcher: Dispatcher
) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The gRPC listener: our services, grpc.health.v1 (SERVING) and reflection."""
    server = grpc.aio.server()
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*dispatcher.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    server.add_generic_rpc_handlers((dispatcher,))
    grpc_port = server.add_insecure_port(f"{config.host}:{config.grpc_port}")
    if grpc_port == 0:
        raise OSError(f"cannot bind gRPC to {config.host}:{config.grpc_port}")
    await server.start()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, grpc_port


async def serve(config: ServerConfig) -> int:
    database = storage_backends.from_url(config.database)
    try:
        await database.open()
    except (InUse, Unavailable) as error:
        print(f"ces-eval: cannot open the database: {error}", file=sys.stderr, flush=True)
        return 1
    runner = OperationRunner(database, lease=config.operation_lease)
    await runner.recover()
    if swept := exchange.sweep_temporary(config.export_dir):
        _log.warning("removed %d partial export file(s) of interrupted operations", swept)
    core = Core(database, pages.PageTokens(await database.secret()), runner, config.export_dir)
    implementations = handlers(core)
    dispatcher = Dispatcher(implementations)
    rest = Transcoder(Router(schema.http_bindings()), implementations)
    mcp = build_endpoint(implementations)
    if config.http_port:
        mcp.allow(config.host, config.http_port)

    server, health_servicer, grpc_port = await _start_grpc(config, dispatcher)

    draining = asyncio.Event()

    async def ready() -> str | None:
        if not http.started:
            return "starting"
        if draining.is_set():
            return "draining"
        try:
            await asyncio.wait_for(database.ping(), HEALTH_PING_SECONDS)
        except (Unavailable, TimeoutError):
            return "database unavailable"
        return None

    http = _Uvicorn(
        uvicorn.Config(
            build_app(
                ready,
                rest=rest,
                openapi=openapi.build_openapi(),
                mcp=mcp.app,
                lifespan=lambda _app: mcp.manager.run(),
            ),
            host=config.host,
            port=config.http_port,
            log_level="warning",
            lifespan="on",
        )
    )
    http_task = asyncio.create_task(http.serve())

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    while not http.started and not http_task.done():
        await asyncio.sleep(0.01)
    if http_task.done():
        await server.stop(None)
        await database.close()
        http_task.result()  # raises the bind error
        return 1
    http_port = http.servers[0].sockets[0].getsockname()[1] if http.servers else config.http_port
    mcp.allow(config.host, http_port)
    print(
        f"ces-eval serving gRPC on {config.host}:{grpc_port} and HTTP on "
        f"http://{config.host}:{http_port} (database {config.database})\n"
        f"  {_hint(config, grpc_port)}",
        file=sys.stderr,
        flush=True,
    )

    await stop.wait()
    draining.set()
    for name in ["", *dispatcher.service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.stop(DRAIN_SECONDS)
    http.should_exit = True
    await http_task
    await runner.shutdown()
    await database.close()
    print("ces-eval stopped", file=sys.stderr, flush=True)
    return 0
