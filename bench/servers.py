"""Server processes of a benchmark run (ces-eval, the floor) and single calls to them."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.options import ROOT

__all__ = [
    "CpuMeter",
    "Process",
    "grpc_call",
    "grpc_frame",
    "http_call",
    "pinned",
    "start",
    "which",
]

_READY = re.compile(r"serving gRPC on (\S+):(\d+) and HTTP on http://(\S+):(\d+)")


def which(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise SystemExit(f"bench: {program} not found on PATH")
    return path


def pinned(cpu: int | None, command: list[str]) -> list[str]:
    return command if cpu is None else [which("taskset"), "-c", str(cpu), *command]


@dataclass
class Process:
    """A server process (ces-eval or the floor) started with its output in ``log``."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    grpc_target: str = ""
    http_base: str = ""

    def pids(self) -> list[int]:
        """The process and its descendants (workers)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
        found = [self.popen.pid]
        for pid in found:
            found.extend(children.get(pid, []))
        return found

    def reset_peak(self) -> bool:
        """Reset the peak RSS (VmHWM) of every process: writing 5 to clear_refs."""
        done = True
        for pid in self.pids():
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                done = False
        return done

    def memory_mb(self, key: str = "VmHWM") -> float:
        """``key`` of /proc/PID/status summed over the processes, in MiB."""
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith(f"{key}:"):
                        total += int(line.split()[1])
        return round(total / 1024, 1)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by the processes."""
        ticks = 0
        for pid in self.pids():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait(timeout=30)

    def log_problems(self) -> list[str]:
        """Error lines and tracebacks in the log (read line by line: with the request log on,
        the log holds one line per call)."""
        problems: list[str] = []
        with self.log.open(errors="replace") as lines:
            for line in lines:
                if "ERROR" in line or "Traceback" in line:
                    problems.append(line.rstrip("\n"))
                    if len(problems) == 20:
                        break
        return problems

    def count_lines(self, marker: str) -> int:
        """Lines of the log containing ``marker``."""
        with self.log.open(errors="replace") as lines:
            return sum(marker in line for line in lines)


def serve_command(url: str, exports: Path, *extra: str) -> list[str]:
    """``ces-eval serve`` on the database ``url`` on free local ports, exports to ``exports``,
    with ``extra`` flags."""
    return [
        sys.executable,
        "-m",
        "ces_eval.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--database",
        url,
        "--export-dir",
        str(exports),
        *extra,
    ]


def start(name: str, command: list[str], log: Path, timeout: float = 300) -> Process:
    """Start ``command``; wait for its ``serving gRPC on ... and HTTP on ...`` line and for
    ``GET /healthz`` to answer 200.

    stdout and stderr go to the file ``log``, never to a pipe: with the request log on, the
    server writes a line per call, and a pipe nobody reads would fill and block it. No
    ``CES_EVAL_*`` variable reaches the server (``ces-eval serve`` reads every flag from one):
    the command line alone configures it."""
    handle = log.open("wb")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CES_EVAL_")}
    popen = subprocess.Popen(
        command,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**environment, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    handle.close()
    process = Process(name, popen, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = _READY.search(log.read_text(errors="replace"))
        if match:
            process.grpc_target = f"{match.group(1)}:{match.group(2)}"
            process.http_base = f"http://{match.group(3)}:{match.group(4)}"
            break
        if popen.poll() is not None:
            raise SystemExit(f"bench: {name} exited:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    else:
        popen.kill()
        raise SystemExit(f"bench: {name} did not start:\n{log.read_text(errors='replace')}")
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(urllib.error.URLError, ConnectionError),
            urllib.request.urlopen(process.http_base + "/healthz", timeout=5) as answer,  # noqa: S310 - our own server
        ):
            if answer.status == 200:
                return process
        time.sleep(0.05)
    popen.kill()
    raise SystemExit(f"bench: {name} never became healthy:\n{log.read_text(errors='replace')}")


def grpc_call(target: str, method: str, body: bytes) -> bytes:
    """One unary call with raw bytes in and out."""
    with grpc.insecure_channel(target) as channel:
        answer: bytes = channel.unary_unary(method)(body, timeout=60)
        return answer


def http_call(base: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - our own server
        base + path,
        data=body,
        method="POST" if body is not None else "GET",
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - our own server
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def grpc_frame(message: bytes) -> bytes:
    """The gRPC length-prefixed message: the request body h2load sends."""
    return b"\x00" + struct.pack(">I", len(message)) + message


class CpuMeter:
    """How much CPU time processes other than ours (the server, the harness and the load
    generators it ran) used during a measurement: other work on the machine skews it."""

    def __init__(self, server: Process) -> None:
        self._server = server
        self._start = self._sample()
        self._wall = time.monotonic()

    def _sample(self) -> tuple[float, float, float, float, float]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal: interrupt work (much of it our own
        # loopback traffic) is charged to no process, so it is reported apart.
        busy = (fields[0] + fields[1] + fields[2]) / tick
        interrupts = (fields[5] + fields[6]) / tick
        steal = fields[7] / tick if len(fields) > 7 else 0.0
        own = os.times()
        ours = own.user + own.system + own.children_user + own.children_system
        return busy, interrupts, steal, ours, self._server.cpu_seconds()

    def stop(self) -> dict[str, float]:
        deltas = (b - a for a, b in zip(self._start, self._sample(), strict=True))
        busy, interrupts, steal, ours, server = deltas
        wall = time.monotonic() - self._wall
        other = max(0.0, busy - ours - server)
        cpus = len(os.sched_getaffinity(0)) or 1
        return {
            "server_cpu_s": round(server, 2),
            "load_generator_cpu_s": round(ours, 2),
            "interrupts_cpu_s": round(interrupts, 2),
            "other_cpu_s": round(other, 2),
            "steal_cpu_s": round(steal, 2),
            # Other processes and the hypervisor (steal), as a share of the CPUs we may use.
            "other_cpu_share": round((other + steal) / (wall * cpus), 3) if wall else 0.0,
        }
