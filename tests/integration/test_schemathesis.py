"""schemathesis drives every operation of ``/openapi.json`` against the real server.

Checks: no 5xx, status codes and content types as documented, every response body valid against
the document. The document lists only the operations the REST surface serves
(``rest.served_bindings``): a method the core does not implement yet answers 501 by design and
is not in it, so nothing needs excluding.

The runs are independent schemathesis processes against their own servers, and each spends most
of its time generating requests (one core), so the module starts every run its selected tests
need at once and each test then waits for its own: on two cores the runs take about half the
time they take one after another. The open server's run over every operation is the longest, so
it is split by service into two processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from ces_eval.contract import openapi
from ces_eval.core.service import implements
from ces_eval.surfaces.rest import served_bindings
from ces_eval.testing.server import RunningServer, start_server
from tests.support.tokens import ALICE, BOB, guarded_server

# Examples schemathesis generates per operation, by run: the open server's conformance over
# every operation (170: both services) gets the most; behind tokens, where the same handlers
# answer, fewer suffice, and a foreign token's 403 is decided before anything of the request is
# read. Schemathesis spends about half a second building each operation's strategies whatever
# the count, and its coverage phase (boundary and negative cases of every schema keyword) grows
# with the size of the messages (the AgentService's are large), so the runs behind tokens leave
# out the AgentService's operations, whose authorization the access tests check method by
# method (tests/integration/test_access.py).
CONFORMANCE_EXAMPLES = 12
OWNER_EXAMPLES = 10
FOREIGN_EXAMPLES = 5
AGENT_SERVICE = "AgentService"
_TIMEOUT = 900.0

CONFORMANCE = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance"
)


def _unserved_operation_ids() -> list[str]:
    """Operations of the served document whose method the core does not implement: none."""
    return [
        f"{binding.method.containing_service.name}_{binding.method.name}"
        for binding in served_bindings()
        if not implements(binding.method)
    ]


@dataclass
class _Run:
    """One schemathesis process over the served operations of the services it selects: only
    ``AgentService`` (``agent_service`` True), or every other (False), or all (None)."""

    server: RunningServer
    output: Path
    process: subprocess.Popen[bytes]
    agent_service: bool | None
    env: dict[str, str] = field(default_factory=dict)

    def finish(self) -> str:
        """Wait for the run; assert it passed and tested every operation it selected; its
        report."""
        try:
            self.process.wait(timeout=_TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        report = self.output.read_text(encoding="utf-8", errors="replace")
        assert self.process.returncode == 0, report[-6000:]
        tested = re.search(r"Tested: (\d+)", report)
        assert tested is not None, report[-2000:]
        expected = [
            binding
            for binding in served_bindings()
            if self.agent_service is None
            or (binding.method.containing_service.name == AGENT_SERVICE) == self.agent_service
        ]
        assert int(tested.group(1)) == len(expected)
        assert "Traceback" not in self.server.output()
        return report


def _launch(
    server: RunningServer,
    output: Path,
    checks: str,
    examples: int,
    token: str | None = None,
    *,
    agent_service: bool | None = None,
    **env: str,
) -> _Run:
    """Start schemathesis over the served operations ``agent_service`` selects (:class:`_Run`),
    its report written to ``output``."""
    assert _unserved_operation_ids() == []
    operations = sum(len(item) for item in openapi.committed_openapi()["paths"].values())
    assert operations == len(served_bindings())
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.http_base}/openapi.json",
        "--url",
        server.http_base,
        "--checks",
        checks,
        "--max-examples",
        str(examples),
        "--generation-database",
        "none",
        "--seed",
        "160",
    ]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    if agent_service is not None:
        command += ["--include-tag" if agent_service else "--exclude-tag", AGENT_SERVICE]
    environment = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks", **env}
    with output.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=environment)
    return _Run(server, output, process, agent_service, env)


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, list[_Run]]]:
    """The schemathesis runs the module's selected tests need (each names its group with
    :func:`_needs`), by group, all started at once."""
    selected = {
        getattr(item.function, _GROUP, None)
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.module is request.module
    }
    folder = tmp_path_factory.mktemp("schemathesis")
    started: dict[str, list[_Run]] = {}
    with contextlib.ExitStack() as stack:
        if _CONFORMANCE_TEST in selected:
            open_server = start_server(folder / "open.db")
            stack.callback(open_server.kill)
            started[_CONFORMANCE_TEST] = [
                _launch(
                    open_server,
                    folder / f"conformance-{part}.txt",
                    CONFORMANCE,
                    CONFORMANCE_EXAMPLES,
                    agent_service=part == AGENT_SERVICE,
                )
                for part in (AGENT_SERVICE, "others")
            ]
        if selected & {_OWNER_TEST, _FOREIGN_TEST}:
            (folder / "guarded").mkdir()
            guarded = stack.enter_context(guarded_server(folder / "guarded"))
            started[_OWNER_TEST] = [
                _launch(
                    guarded,
                    folder / "owner.txt",
                    f"{CONFORMANCE},record_status",
                    OWNER_EXAMPLES,
                    ALICE,
                    agent_service=False,
                    CES_EVAL_ST_PROJECT="proj-a",
                    CES_EVAL_ST_STATUS_LOG=str(folder / "statuses.txt"),
                )
            ]
            started[_FOREIGN_TEST] = [
                _launch(
                    guarded,
                    folder / "foreign.txt",
                    "only_expected_status",
                    FOREIGN_EXAMPLES,
                    BOB,
                    agent_service=False,
                    CES_EVAL_ST_PROJECT="proj-a",
                    CES_EVAL_ST_ONLY_STATUS="403",
                )
            ]
        try:
            yield started
        finally:
            _stop(started)  # before the servers go


# The groups of runs, each started once the first selected test needs it.
_CONFORMANCE_TEST, _OWNER_TEST, _FOREIGN_TEST = "conformance", "owner", "foreign"
_GROUP = "schemathesis_group"  # the attribute :func:`_needs` sets on a test
_Test = TypeVar("_Test", bound=Callable[..., None])


def _needs(group: str) -> Callable[[_Test], _Test]:
    """Marks a test as reading the runs of ``group`` (the fixture starts only those)."""

    def marked(test: _Test) -> _Test:
        setattr(test, _GROUP, group)
        return test

    return marked


def _stop(started: dict[str, list[_Run]]) -> None:
    for run in (run for group in started.values() for run in group):
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()


@_needs(_CONFORMANCE_TEST)
def test_schemathesis_finds_no_server_errors_and_no_schema_violations(
    runs: dict[str, list[_Run]],
) -> None:
    for run in runs[_CONFORMANCE_TEST]:
        run.finish()


@_needs(_OWNER_TEST)
def test_schemathesis_with_the_owners_token_finds_no_server_errors(
    runs: dict[str, list[_Run]],
) -> None:
    """Every generated request addresses proj-a with alice's token: the checks of the open
    server hold behind authentication too."""
    (run,) = runs[_OWNER_TEST]
    run.finish()
    seen = Counter(
        int(line) for line in Path(run.env["CES_EVAL_ST_STATUS_LOG"]).read_text().split()
    )
    assert seen[401] == 0
    assert seen[200] > 0, seen  # the token worked: requests reached proj-a's data


@_needs(_FOREIGN_TEST)
def test_schemathesis_with_a_foreign_token_meets_only_403(runs: dict[str, list[_Run]]) -> None:
    """Every generated request addresses proj-a with bob's token (proj-b): whatever the path
    variables, query and body hold, the answer is 403 and never anything else."""
    (run,) = runs[_FOREIGN_TEST]
    run.finish()
