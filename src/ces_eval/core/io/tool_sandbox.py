"""The team's Python code run apart from the server: the implementation of
:class:`~ces_eval.core.aip.ports.CodeRunner` (docs/tools.md, "Running the team's code").

Each call starts ``python -I -S`` (isolated: no environment variables read, no user or site
packages, the current folder not on the path) with an empty environment, in an empty temporary
folder of its own that is removed afterwards. Before the team's code is even compiled, the child
sets hard resource limits (CPU seconds, address space, no file may grow past 0 bytes, no core
file, few open files, no new process for an unprivileged user) and an audit hook (PEP 578) that
refuses sockets, processes and writes, so the code can neither reach the network nor leave
anything behind. The parent bounds the wall-clock time (the process group is killed) and what
the child prints, and reads the answer as JSON. At most :data:`SLOTS` children run at once per
server process; the rest wait, within their own wall-clock bound. None of it blocks the event
loop.

The audit hook is no security boundary against code written to escape it (PEP 578 says so); the
resource limits are. That is why the server runs no code at all unless started with
``--run-tool-fakes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ces_eval.core.aip.ports import CodeFailed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["SLOTS", "Bounds", "Sandbox"]

SLOTS = 4  # children running at once per server process
_MARK = b"\n\x1e ces-eval answer \x1e\n"  # precedes the answer on the child's stdout

# The child: limits first, then the hook, then the team's code. Standard library only (-S).
_CHILD = r"""
import json, os, resource, sys
bounds = json.loads(sys.argv[1])
def limit(kind, value):
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass
limit(resource.RLIMIT_CPU, bounds["cpu"])
limit(resource.RLIMIT_AS, bounds["memory"])
limit(resource.RLIMIT_FSIZE, 0)
limit(resource.RLIMIT_CORE, 0)
limit(resource.RLIMIT_NOFILE, 64)
if os.getuid() != 0:
    limit(resource.RLIMIT_NPROC, 0)
request = json.loads(sys.stdin.read())
sys.stdin.close()
out = os.fdopen(os.dup(1), "wb")
class Bounded:
    def __init__(self): self.size = 0
    def write(self, text):
        self.size += len(text)
        return len(text)
    def flush(self): pass
sys.stdout = sys.stderr = Bounded()
REFUSED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork",
           "os.spawn", "os.kill", "os.remove", "os.rename", "os.rmdir", "os.mkdir",
           "os.symlink", "os.link", "os.truncate", "os.chmod", "os.chown", "shutil.",
           "ctypes.", "pty.", "resource.setrlimit", "sys.addaudithook", "winreg.")
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def hook(event, args):
    if event.startswith(REFUSED):
        raise PermissionError(f"{event} is not allowed in a tool's code")
    if event == "open" and len(args) > 2:
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITES
        ):
            raise PermissionError("writing files is not allowed in a tool's code")
sys.addaudithook(hook)
class CallbackContext:
    def __init__(self, variables):
        self.variables = variables
        self.state = variables
def answer(value):
    out.write(MARK + json.dumps(value, allow_nan=False).encode())
    out.flush()
MARK = bytes.fromhex(bounds["mark"])
scope = {"__name__": "tool"}
try:
    exec(compile(request["code"], "<tool code>", "exec"), scope)
except BaseException as error:
    answer({"error": f"The code does not run: {type(error).__name__}: {error}"})
    raise SystemExit(0)
name = next((n for n in request["functions"] if callable(scope.get(n))), None)
if name is None:
    answer({})
    raise SystemExit(0)
variables = dict(request["call"].get("variables") or {})
try:
    if request["convention"] == "fake":
        context = CallbackContext(variables)
        value = scope[name](request["call"]["tool"], request["call"]["input"], context)
    else:
        value = scope[name](**request["call"]["input"])
except MemoryError:
    answer({"function": name, "error": "MemoryError: the code ran out of memory"})
    raise SystemExit(0)
except BaseException as error:
    answer({"function": name, "error": f"{type(error).__name__}: {error}"})
    raise SystemExit(0)
try:
    answer({"function": name, "value": value, "variables": variables})
except (TypeError, ValueError) as error:
    answer({"function": name, "error": f"The answer is not JSON: {error}"})
"""


@dataclass(frozen=True)
class Bounds:
    """What one call may use (docs/tools.md, "Running the team's code")."""

    cpu_seconds: int = 5
    memory_bytes: int = 256 * 2**20
    wall_seconds: float = 10.0
    output_bytes: int = 2**20


class Sandbox:
    """:class:`~ces_eval.core.aip.ports.CodeRunner` in child processes (see the module)."""

    def __init__(self, bounds: Bounds = Bounds(), slots: int = SLOTS) -> None:
        self._bounds = bounds
        self._slots = asyncio.Semaphore(slots)

    async def call(
        self,
        code: str,
        functions: Sequence[str],
        convention: str,
        call: Mapping[str, Any],
    ) -> Mapping[str, Any]:
        request = json.dumps(
            {"code": code, "functions": list(functions), "convention": convention, "call": call}
        ).encode()
        bounds = self._bounds
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bounds.wall_seconds
        try:
            async with asyncio.timeout(bounds.wall_seconds):
                await self._slots.acquire()
        except TimeoutError:
            raise CodeFailed(_late(bounds)) from None
        try:
            # The child is started and watched from a thread: subprocess.Popen starts it with
            # vfork, which runs no fork handler of the server's libraries (gRPC's crash the
            # child of a process whose threads are inside gRPC), and its pipes are read with
            # the deadline and the output bound there.
            seconds = max(deadline - loop.time(), 0.1)
            output, status = await asyncio.to_thread(_exchange, request, bounds, seconds)
        finally:
            self._slots.release()
        if output is None:
            raise CodeFailed(
                f"The code printed more than {bounds.output_bytes} bytes and was stopped."
            )
        if status is None:
            raise CodeFailed(_late(bounds))
        _, marked, answer = output.rpartition(_MARK)
        if not marked:
            raise CodeFailed(_death(status, bounds))
        try:
            loaded = json.loads(answer)
        except ValueError:
            raise CodeFailed("The code's answer could not be read.") from None
        if not isinstance(loaded, dict):
            raise CodeFailed("The code's answer could not be read.")
        return loaded


def _late(bounds: Bounds) -> str:
    return f"The code ran longer than {bounds.wall_seconds:g} seconds and was stopped."


def _exchange(request: bytes, bounds: Bounds, seconds: float) -> tuple[bytes | None, int | None]:
    """Run the child on ``request`` for at most ``seconds``: (its stdout, or None past the
    output bound; its exit status, or None when the deadline ended it). Blocking."""
    settings = json.dumps(
        {"cpu": bounds.cpu_seconds, "memory": bounds.memory_bytes, "mark": _MARK.hex()}
    )
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="ces-eval-tool-") as folder:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _CHILD, settings],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd=folder,
            start_new_session=True,
            close_fds=True,
        )
        try:
            output = _pipes(child, request, bounds.output_bytes, deadline)
            if output is _LATE:
                return b"", None
            if not isinstance(output, bytes):
                return None, None  # past the bound: killed below, never waited on
            try:  # a child may close its pipes and go on: the deadline still holds
                return output, child.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                return b"", None
        finally:
            _kill(child)
            child.wait()
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()


_LATE = object()


def _pipes(
    child: subprocess.Popen[bytes], request: bytes, limit: int, deadline: float
) -> bytes | object | None:
    """Write ``request`` to the child and read its stdout (and drain its stderr) until both
    end: the stdout, None once either passes ``limit`` bytes, :data:`_LATE` at the deadline."""
    assert child.stdin is not None
    assert child.stdout is not None
    assert child.stderr is not None
    pending = memoryview(request)
    sizes = {child.stdout.fileno(): 0, child.stderr.fileno(): 0}
    kept: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        os.set_blocking(child.stdin.fileno(), False)
        selector.register(child.stdin, selectors.EVENT_WRITE)
        selector.register(child.stdout, selectors.EVENT_READ)
        selector.register(child.stderr, selectors.EVENT_READ)
        while len(selector.get_map()) > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return _LATE
            for key, _ in selector.select(left):
                if key.fileobj is child.stdin:
                    try:
                        written = os.write(child.stdin.fileno(), pending[:65536])
                    except (BrokenPipeError, ConnectionResetError):
                        written = len(pending)  # the child ended: its status says why
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(child.stdin)
                        child.stdin.close()
                    continue
                fd = key.fd
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                sizes[fd] += len(chunk)
                if sizes[fd] > limit:
                    return None
                if fd == child.stdout.fileno():
                    kept.append(chunk)
    return b"".join(kept)


def _kill(child: subprocess.Popen[bytes]) -> None:
    """End the child and anything it started (its own process group)."""
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)


def _death(status: int, bounds: Bounds) -> str:
    """Why a child that gave no answer ended, as far as its status tells."""
    if status in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"The code used more than {bounds.cpu_seconds} seconds of CPU time and was stopped."
    if status == -signal.SIGXFSZ:
        return "The code wrote to a file, which a tool's code may not do."
    return f"The code ended without an answer (exit status {status})."
