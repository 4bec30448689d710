"""The ``ces-eval`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
from pathlib import Path

from ces_eval import __version__, schema
from ces_eval.server import ServerConfig, preflight, serve

__all__ = ["main"]


def _describe(_: argparse.Namespace) -> int:
    """Print every method with its HTTP binding, as read from the descriptors."""
    for binding in schema.http_bindings():
        body = f"  body={binding.body}" if binding.body else ""
        print(f"{binding.verb:6} {binding.template}  {binding.method.full_name}{body}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    several = args.workers > 1 or args.worker_of is not None
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s"
        + ("[%(process)d]" if several else "")
        + ": %(message)s",
    )
    config = ServerConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        database=args.database,
        export_dir=Path(args.export_dir),
        operation_lease=args.operation_lease,
        auth_tokens=Path(args.auth_tokens) if args.auth_tokens else None,
        allow_unauthenticated=args.allow_unauthenticated,
        max_concurrent_requests=args.max_concurrent_requests,
    )
    if args.workers > 1 and args.worker_of is None:
        # Checked before any worker starts: a refusal must not become a restart loop.
        _, problem = preflight(config)
        if problem is not None:
            print(f"ces-eval: {problem}", file=sys.stderr, flush=True)
            return 2
    if args.worker_of is not None:  # started by a supervisor (below), never by hand
        return asyncio.run(serve(config, worker_of=socket.socket(fileno=args.worker_of)))
    if args.workers > 1:
        # Imported here: a single-process server does not need the supervisor.
        from ces_eval.workers import supervise  # noqa: PLC0415

        return asyncio.run(supervise(config, args.workers))
    return asyncio.run(serve(config))


def _worker_count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError("must be between 1 and 256")
    if value > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise argparse.ArgumentTypeError("needs SO_REUSEPORT, which this system lacks")
    return value


def _request_limit(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000000")
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not 0.3 <= value <= 86_400:
        raise argparse.ArgumentTypeError("must be between 0.3 and 86400 seconds")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ces-eval",
        description="Local server for Google's CES EvaluationService (google.cloud.ces.v1beta).",
    )
    parser.add_argument("--version", action="version", version=f"ces-eval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", help="list the methods and their HTTP bindings")
    describe.set_defaults(run=_describe)
    defaults = ServerConfig()
    serve_parser = commands.add_parser("serve", help="run the gRPC and HTTP server")
    serve_parser.add_argument("--host", default=defaults.host, help="address to bind")
    serve_parser.add_argument("--grpc-port", type=int, default=defaults.grpc_port)
    serve_parser.add_argument("--http-port", type=int, default=defaults.http_port)
    serve_parser.add_argument(
        "--database",
        default=defaults.database,
        help="database URL: sqlite:///./data/ces-eval.db (default), or "
        "postgresql://user:password@host:port/database shared by several replicas",
    )
    serve_parser.add_argument(
        "--export-dir",
        default=str(defaults.export_dir),
        help="folder standing in for Cloud Storage: gs://bucket/path is <export-dir>/bucket/path",
    )
    serve_parser.add_argument(
        "--operation-lease",
        type=_positive_seconds,
        default=defaults.operation_lease,
        metavar="SECONDS",
        help="how long a long-running operation outlives a replica that stopped renewing it "
        "(renewed every third of this; default %(default)s)",
    )
    serve_parser.add_argument(
        "--workers",
        type=_worker_count,
        default=1,
        metavar="N",
        help="serve from N worker processes sharing both ports (SO_REUSEPORT; Linux spreads "
        "connections over them) under one supervisor; default 1: a single process",
    )
    serve_parser.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="require a bearer token on every call; FILE maps each token to the projects it may "
        "use, read-only or read-write (docs/security.md)",
    )
    serve_parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a non-loopback --host without --auth-tokens (anyone who can connect may "
        "read and change every project)",
    )
    serve_parser.add_argument(
        "--max-concurrent-requests",
        type=_request_limit,
        default=defaults.max_concurrent_requests,
        metavar="N",
        help="calls each surface (gRPC, REST, MCP) serves at once, per process; one more is "
        "refused at once with RESOURCE_EXHAUSTED (HTTP 429, Retry-After); default %(default)s",
    )
    serve_parser.add_argument("--worker-of", type=int, help=argparse.SUPPRESS)
    serve_parser.set_defaults(run=_serve)
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
