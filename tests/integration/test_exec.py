"""``ces-eval exec [serve options] -- COMMAND``, the real program (docs/exec.md): the command runs
beside a server started for it, sees CES_EVAL_URL and CES_EVAL_GRPC and reaches the server over
REST and gRPC; the server is seeded and configured by serve's own options (flags and
variables); exec exits with the command's status (128+N for a signal) and only once the server
has stopped; SIGINT and SIGTERM reach the command; a missing command, a bad option or a server
that does not start is one line and exit status 2, a command not found 127, as shells answer."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_startup import unreachable_postgresql

WAIT = 120.0  # seconds: a bound on waiting for a server's start and stop, never a measurement
APP = "projects/exec/locations/us-central1/apps/orders"
EXEC = [sys.executable, "-m", "ces_eval.cli", "exec", "--log-level", "warning"]

# The command of the first test: what it saw, over both surfaces, printed as one JSON object.
SEES = f"""
import json, os, urllib.request
import grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as pb
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2_grpc as rpc
url, target = os.environ["CES_EVAL_URL"], os.environ["CES_EVAL_GRPC"]
with urllib.request.urlopen(url + "/v1beta/{APP}/evaluations") as answer:
    rest = sorted(item["name"] for item in json.load(answer)["evaluations"])
with urllib.request.urlopen(url + "/v1beta/projects/exec/locations") as answer:
    locations = sorted(item["locationId"] for item in json.load(answer)["locations"])
with grpc.insecure_channel(target) as channel:
    request = pb.ListEvaluationsRequest(parent="{APP}")
    listed = rpc.EvaluationServiceStub(channel).ListEvaluations(request)
print(json.dumps({{"url": url, "grpc": target, "rest": rest, "locations": locations,
                  "grpc_names": sorted(item.name for item in listed.evaluations)}}))
"""


def _seed(folder: Path, *ids: str) -> Path:
    seed = folder / "seed.json"
    evaluations = [
        {
            "name": f"{APP}/evaluations/{evaluation_id}",
            "displayName": evaluation_id.title(),
            "golden": {"turns": [{"steps": [{"userInput": {"text": "Where is order 42?"}}]}]},
        }
        for evaluation_id in ids
    ]
    seed.write_text(json.dumps({"format": "ces-eval.export/v1", "evaluations": evaluations}))
    return seed


def _exec(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXEC, *argv],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def _closed(address: str) -> bool:
    """Whether nothing accepts connections at ``address`` (host:port, or an http:// URL)."""
    host, _, port = address.removeprefix("http://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def test_the_command_reaches_the_seeded_server_over_rest_and_grpc_which_stops_after_it(
    tmp_path: Path,
) -> None:
    seed = _seed(tmp_path, "status", "refund")
    done = _exec("--seed", str(seed), "--locations", "lunar-1", "--", sys.executable, "-c", SEES)
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    names = [f"{APP}/evaluations/refund", f"{APP}/evaluations/status"]
    assert seen["rest"] == names
    assert seen["grpc_names"] == names
    assert "lunar-1" in seen["locations"]  # serve's options reach the server
    # exec answered only once the server had stopped: both ports are closed already.
    assert _closed(seen["url"])
    assert _closed(seen["grpc"])
    # The server's output went to stderr, each line marked, its ready line among them.
    marked = [line for line in done.stderr.splitlines() if line.startswith("[ces-eval serve] ")]
    assert any(f"HTTP on {seen['url']}" in line for line in marked), done.stderr


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),
    ],
    ids=["status-3", "SIGTERM"],
)
def test_exec_exits_with_the_commands_status(script: str, status: int) -> None:
    done = _exec("--", sys.executable, "-c", script)
    assert done.returncode == status, done.stderr


def test_the_database_is_throw_away_unless_the_flag_or_its_variable_names_one(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'kept.db'}"
    create = (
        "import json, os, urllib.request; urllib.request.urlopen(urllib.request.Request("
        f"os.environ['CES_EVAL_URL'] + '/v1beta/{APP}/evaluations?evaluationId=kept', "
        "data=json.dumps({'displayName': 'Kept', 'golden': {'turns': [{'steps': "
        "[{'userInput': {'text': 'Hi'}}]}]}}).encode(), "
        "headers={'Content-Type': 'application/json'}))"
    )
    count = (
        "import json, os, urllib.request; print(len(json.load(urllib.request.urlopen("
        f"os.environ['CES_EVAL_URL'] + '/v1beta/{APP}/evaluations')).get('evaluations', [])))"
    )
    assert _exec("--database", database, "--", sys.executable, "-c", create).returncode == 0
    kept = _exec("--", sys.executable, "-c", count, env={"CES_EVAL_DATABASE": database})
    assert (kept.returncode, kept.stdout.strip()) == (0, "1"), kept.stderr
    fresh = _exec("--", sys.executable, "-c", count)
    assert (fresh.returncode, fresh.stdout.strip()) == (0, "0"), fresh.stderr


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_exec_reaches_the_command_and_the_server_stops_after_it(
    sent: signal.Signals,
) -> None:
    # The command answers the signal by exiting with 100+N, once it said it was ready.
    script = (
        "import signal, sys\n"
        "for n in (signal.SIGINT, signal.SIGTERM):\n"
        "    signal.signal(n, lambda n, _: sys.exit(100 + n))\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    signal.pause()\n"
    )
    process = subprocess.Popen(
        [*EXEC, "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal reaches exec alone, as kill(1) would send it
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        process.send_signal(sent)
        _, err = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 100 + sent, err
    # The server served until the command was done, then stopped with its drain (its last
    # line comes after the command's end).
    assert err.splitlines()[-1] == "[ces-eval serve] ces-eval stopped", err


@pytest.mark.parametrize(
    ("argv", "env", "status", "says"),
    [
        ([], {}, 2, "no COMMAND to run: ces-eval exec [serve options] -- COMMAND"),
        (["--"], {}, 2, "no COMMAND to run"),
        (["--grpc-port", "x", "--", "true"], {}, 2, "argument --grpc-port: 'x' is not a port"),
        (["--", "true"], {"CES_EVAL_HTTP_PORT": "x"}, 2, "CES_EVAL_HTTP_PORT: 'x' is not a port"),
        (["--no-such-option", "--", "true"], {}, 2, "unrecognized arguments: --no-such-option"),
        (["--", "no-such-command-here"], {}, 127, "no-such-command-here: command not found"),
        (["--", "/"], {}, 126, "/: cannot run it: not an executable file"),
    ],
    ids=["no-command", "nothing-after-dashes", "bad-flag", "bad-variable", "unknown", "127", "126"],
)
def test_what_cannot_run_is_one_line_and_a_shells_status(
    argv: list[str], env: dict[str, str], status: int, says: str
) -> None:
    done = _exec(*argv, env=env)
    assert done.returncode == status
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    # argparse's own refusal of an unknown option names the program, as for serve.
    assert done.stderr.startswith(
        "ces-eval: " if status == 2 and "unrecognized" in says else "ces-eval exec: "
    )
    assert says in done.stderr


def test_a_server_that_does_not_start_is_one_line_naming_why(tmp_path: Path) -> None:
    done = _exec("--seed", str(tmp_path / "missing.json"), "--", "true")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ces-eval exec: the server did not start: --seed: ")
    assert "missing.json" in lines[0]


def test_a_signal_before_the_command_started_stops_exec_with_its_status() -> None:
    """SIGINT while the server starts (it waits on a PostgreSQL that never answers): one line,
    exit status 130, and no command run."""
    with unreachable_postgresql("stalled") as stalled:
        url = f"postgresql://ces@127.0.0.1:{stalled.port}/ces"
        process = subprocess.Popen(
            [*EXEC, "--database", url, "--", sys.executable, "-c", "print('ran')"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + WAIT
            while not stalled.accepted:  # the server is connecting: exec waits for it
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.02)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=WAIT)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 128 + signal.SIGINT, err
    assert out == ""
    assert err == "ces-eval exec: interrupted by SIGINT before the command started\n"


def test_the_pytest_plugin_uses_the_server_exec_started(tmp_path: Path) -> None:
    """``ces-eval exec -- pytest``: the plugin's ``ces_eval_server`` is exec's server (it starts
    none of its own), seeded as exec was told."""
    seed = _seed(tmp_path, "status")
    (tmp_path / "test_suite.py").write_text(
        "import json, os, urllib.request\n\n\n"
        "def test_uses_exec_server(ces_eval_server):\n"
        "    assert ces_eval_server.http_url == os.environ['CES_EVAL_URL']\n"
        "    assert ces_eval_server.grpc_target == os.environ['CES_EVAL_GRPC']\n"
        f"    url = ces_eval_server.http_url + '/v1beta/{APP}/evaluations'\n"
        "    with urllib.request.urlopen(url) as answer:\n"
        "        assert len(json.load(answer)['evaluations']) == 1\n"
    )
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    done = _exec("--seed", str(seed), "--", *pytest_argv, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


# Run in a process of its own (forking the test process, with its threads, is not safe): exec
# under a pseudo-terminal, then Ctrl-C typed once the command is ready. Prints what the terminal
# showed, then exec's exit status.
_AT_A_TERMINAL = """
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
seen = b""
while b"ready" not in seen:
    seen += os.read(fd, 1024)
os.write(fd, b"\\x03")
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:  # the terminal's other side closed: exec has exited
        break
    if not chunk:
        break
    seen += chunk
_, status = os.waitpid(pid, 0)
print(seen.decode(errors="replace"))
print("exit", os.waitstatus_to_exitcode(status))
"""


def test_ctrl_c_at_a_terminal_reaches_the_command_once_and_not_the_server() -> None:
    """The terminal sends Ctrl-C's SIGINT to its foreground group, exec and the command: the
    command gets it (once: exec sends none after it, and one sent at once would be merged into
    it by the kernel anyway), and the server, in a session of its own, keeps serving until the
    command is done: the command reaches it after Ctrl-C, then exits with 100 + the SIGINTs it
    took (each as it came, with sigwaitinfo, waiting a second for another)."""
    script = (
        "import os, signal, sys, urllib.request\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # counted, not handled\n"
        "print('ready', flush=True)\n"
        "signal.sigwaitinfo({signal.SIGINT})\n"
        "got = 1\n"
        "while signal.sigtimedwait({signal.SIGINT}, 1) is not None:\n"
        "    got += 1\n"
        "with urllib.request.urlopen(os.environ['CES_EVAL_URL'] + '/healthz') as answer:\n"
        "    print('server', answer.status, flush=True)\n"
        "sys.exit(100 + got)\n"
    )
    argv = [*EXEC[1:], "--", sys.executable, "-c", script]
    done = subprocess.run(
        [sys.executable, "-c", _AT_A_TERMINAL, *argv],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = done.stdout.splitlines()
    assert shown[-1] == "exit 101", done.stdout
    assert "server 200" in done.stdout
    stopped = [line for line in shown if line.strip() == "[ces-eval serve] ces-eval stopped"]
    assert len(stopped) == 1, done.stdout
