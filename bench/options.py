"""Options of a benchmark run, shared by the harness modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["BENCH", "ROOT", "Options"]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass
class Options:
    """``python -m bench.run --help`` describes each."""

    large: int = 1_000_000
    small: int = 1_000
    per_evaluation: int = 1_000
    duration: float = 10.0
    warmup: float = 2.0
    connections: int = 8
    streams: int = 4
    deep_page: int = 50
    workers: int | None = None
    log_repeats: int = 5
    # The run engine's measurement: one run of this many evaluations x repetitions.
    engine_evaluations: int = 200
    engine_repetitions: int = 5
    # The largest run against a 0 s agent, whose peak RSS is reported (limits.MAX_RUN_RESULTS).
    scale_sessions: int = 10_000
    database: str | None = None
    output: Path = BENCH / "results"
    workdir: Path | None = None
    keep: bool = False
    install: bool = True
    server_cpu: int | None = None
    client_cpu: int | None = None
    unpinned: bool = False

    @property
    def concurrency(self) -> int:
        """Calls in flight: connections x streams over gRPC, as many connections over REST
        (HTTP/1.1 carries one call at a time per connection)."""
        return self.connections * self.streams
