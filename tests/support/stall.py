"""Whether the server stays responsive while something heavy runs in it: a prober in a process
of its own asks ``/healthz`` and gRPC Health in turn, 20 ms apart, and records how long each
answer took.

The prober is not a thread of the test: whatever the test process does meanwhile (a real agent
in one of its threads writing a large answer, the test reading one) holds that process's
interpreter and would be counted against the server. Its cyclic garbage collector is off, so a
collection never lands inside a probe either.

Use::

    with probing(server) as probes:
        ...  # the attack, to its end
    assert probes.slow(0.100) == []
"""

from __future__ import annotations

import gc
import json
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

if TYPE_CHECKING:
    from ces_eval.testing.server import RunningServer

__all__ = ["HEALTH_BOUND", "Probes", "probing"]

HEALTH_BOUND = 0.100  # seconds: every probe answers within this (docs/security.md)
_INTERVAL = 0.02  # seconds between two probes
_ANSWER_TIMEOUT = 120  # seconds: a client timeout, not a latency assertion


@dataclass
class Probes:
    """Each probe's latency in seconds, ``(surface, seconds)``, once the block ended."""

    latencies: list[tuple[str, float]] = field(default_factory=list)

    @property
    def slowest(self) -> float:
        return max((seconds for _, seconds in self.latencies), default=0.0)

    def slow(self, bound: float = HEALTH_BOUND) -> list[str]:
        """The probes slower than ``bound``, as ``"surface: N ms"``."""
        return [f"{s}: {t * 1000:.0f} ms" for s, t in self.latencies if t > bound]

    def line(self) -> str:
        return f"{len(self.latencies)} probes, slowest {self.slowest * 1000:.0f} ms"


@contextmanager
def probing(server: RunningServer) -> Iterator[Probes]:
    """Probe ``server`` from another process while the block runs (see the module). The
    prober's first probes are answered before the block begins, so its start-up is never
    measured; a failed probe (not 200 / SERVING) fails the block."""
    with subprocess.Popen(
        [sys.executable, __file__, server.http_base, server.grpc_target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as prober:
        assert prober.stdin is not None and prober.stdout is not None
        try:
            assert prober.stdout.readline().strip() == "ready", "the prober did not start"
            probes = Probes()
            yield probes
        finally:
            prober.stdin.close()  # the prober's signal to stop and report
            report = prober.stdout.read()
            prober.wait(timeout=_ANSWER_TIMEOUT)
    assert prober.returncode == 0, f"a probe failed: {report}"
    probes.latencies = [(surface, seconds) for surface, seconds in json.loads(report)]


def _probe(http_base: str, grpc_target: str) -> None:
    """The prober's process: probe until stdin closes, then print every latency as JSON."""
    gc.disable()
    latencies: list[tuple[str, float]] = []
    ask = health_pb2.HealthCheckRequest()
    watch = selectors.DefaultSelector()
    watch.register(sys.stdin, selectors.EVENT_READ)
    with (
        httpx.Client(base_url=http_base, timeout=_ANSWER_TIMEOUT) as http,
        grpc.insecure_channel(grpc_target) as channel,
    ):
        health = health_pb2_grpc.HealthStub(channel)
        assert http.get("/healthz").status_code == 200  # connections open before measuring
        health.Check(ask, timeout=_ANSWER_TIMEOUT)
        print("ready", flush=True)
        while not watch.select(timeout=_INTERVAL):  # stdin readable: closed by the test
            begun = time.monotonic()
            status = http.get("/healthz").status_code
            latencies.append(("healthz", time.monotonic() - begun))
            if status != 200:
                sys.exit(f"/healthz answered {status}")
            begun = time.monotonic()
            answer = health.Check(ask, timeout=_ANSWER_TIMEOUT)
            latencies.append(("grpc-health", time.monotonic() - begun))
            if answer.status != health_pb2.HealthCheckResponse.SERVING:
                sys.exit(f"gRPC Health answered {answer.status}")
    print(json.dumps(latencies))


if __name__ == "__main__":
    _probe(sys.argv[1], sys.argv[2])
