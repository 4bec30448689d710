"""A local agent for the run engine's measurements against an agent (bench/engine.py): an HTTP
server in a process of its own that answers every POST after a fixed delay with a small
RunSessionResponse (docs/agents.md, "The session shape"): one text, the turn completed.

It serves each connection in a thread of its own, with HTTP/1.1 keep-alive, so the engine's
concurrent sessions meet no queue here: N sessions at once take one delay, not N. It prints
its port on stdout once it listens.

    python -m bench.agent --delay 0.25
"""

from __future__ import annotations

import argparse
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ANSWER", "main"]

ANSWER = b'{"outputs": [{"text": "Hello!", "turnCompleted": true}]}'


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the engine's sessions may connect at once


def _handler(delay: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The head and the body go out in two writes: with Nagle's algorithm the body would
        # wait for the engine's delayed ACK of the head (40 ms), as no agent worth measuring
        # makes it wait.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: ANN401 - the base's
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if delay > 0:
                time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(ANSWER)))
            self.end_headers()
            self.wfile.write(ANSWER)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--delay", type=float, default=0.25, help="seconds before each answer")
    parser.add_argument("--port", type=int, default=0, help="0: a free one")
    args = parser.parse_args(argv)
    server = _Server(("127.0.0.1", args.port), _handler(args.delay))
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
