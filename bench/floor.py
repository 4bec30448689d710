"""The floors: the fastest a Python server in ces-eval's shape can answer the same calls.

One process, one event loop, like ``ces-eval serve``: a bare ``grpc.aio`` server whose one
generic handler answers each known method path with fixed, pre-serialized bytes (no parsing, no
storage), and a bare Starlette app under uvicorn with its standard extras, as a user would
serve one (uvloop's event loop, httptools' parser; the floor refuses to start without them)
answering fixed JSON bytes on fixed paths (query strings ignored). The bytes are real
responses of the server under test, captured by the harness, so both sides move the same
payloads.

    python -m bench.floor SPEC.json

SPEC: ``{"grpc": {"/pkg.Service/Method": "file.bin", ...},
"http": [{"method": "GET", "path": "/v1beta/...", "file": "file.json", "status": 200}, ...]}``
(files relative to the spec's folder). Prints ``floor serving gRPC on HOST:PORT and HTTP on
http://HOST:PORT`` on stderr once both listen; SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["main"]

_JSON = "application/json; charset=utf-8"


class _FixedAnswers(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    """Answers each known method path with its bytes; unknown paths are left to gRPC
    (UNIMPLEMENTED)."""

    def __init__(self, answers: dict[str, bytes]) -> None:
        self._handlers = {path: self._handler(answer) for path, answer in answers.items()}

    @staticmethod
    def _handler(answer: bytes) -> grpc.RpcMethodHandler:
        async def behavior(request: bytes, context: Any) -> bytes:  # noqa: ANN401 - grpc untyped
            return answer

        # No (de)serializers: the request stays bytes, the answer goes out as it is.
        return grpc.unary_unary_rpc_method_handler(behavior)

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:  # noqa: ANN401
        return self._handlers.get(str(handler_call_details.method))


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers, as in ces-eval's server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _endpoint(body: bytes, status: int) -> Callable[[Request], Awaitable[Response]]:
    async def answer(request: Request) -> Response:
        if request.method in {"POST", "PATCH", "PUT"}:
            await request.body()  # read what was sent, as a real handler must
        return Response(body, status_code=status, headers={"content-type": _JSON})

    return answer


def _app(spec: dict[str, Any], folder: Path) -> Starlette:
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "SERVING"})

    routes = [Route("/healthz", healthz, methods=["GET"])]
    for item in spec.get("http", []):
        body = (folder / item["file"]).read_bytes()
        routes.append(
            Route(item["path"], _endpoint(body, item.get("status", 200)), methods=[item["method"]])
        )
    return Starlette(routes=routes)


async def serve(spec_path: Path, host: str = "127.0.0.1") -> int:
    spec = json.loads(spec_path.read_text())
    folder = spec_path.parent
    answers = {path: (folder / name).read_bytes() for path, name in spec.get("grpc", {}).items()}
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_FixedAnswers(answers),))
    grpc_port = server.add_insecure_port(f"{host}:0")
    await server.start()
    http = _Uvicorn(
        uvicorn.Config(_app(spec, folder), host=host, port=0, log_level="warning", http="httptools")
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
        http_task.result()
        return 1
    http_port = http.servers[0].sockets[0].getsockname()[1]
    print(
        f"floor serving gRPC on {host}:{grpc_port} and HTTP on http://{host}:{http_port}",
        file=sys.stderr,
        flush=True,
    )
    await stop.wait()
    await server.stop(1)
    http.should_exit = True
    await http_task
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.floor SPEC.json", file=sys.stderr)
        return 2
    # uvloop's loop, as ``uvicorn --loop uvloop`` runs (uvicorn's Config.loop applies only to
    # uvicorn.run, not to a server started on a loop of one's own).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(Path(args[0])))


if __name__ == "__main__":
    sys.exit(main())
