"""``ces-eval run``: select evaluations, run them on a server, wait, report, and gate (the
steps, options and exit statuses: docs/gate.md).

Exit status 0 when the gate holds, 1 when it fails, 2 when the run could not be done (bad
arguments or baseline, a server unreachable or refusing, a run ending ERROR or CANCELLED, an
interrupt), each with one line on stderr. SIGINT (Ctrl-C) or SIGTERM while the run plays cancels
it on the server (CancelOperation): a CI job stopped halfway does not leave it running.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ces_eval.gate import _github, _junit, _report, _terminal
from ces_eval.gate._client import Client, adc_token_source
from ces_eval.gate._errors import NOT_DONE, RunNotDone
from ces_eval.gate._selection import APP_NAME, RunOptions, Selection, qualify, request_body, select
from ces_eval.gate._verdict import decide, summarize

__all__ = ["run"]

_TERMINAL = ("COMPLETED", "ERROR", "CANCELLED")
_FIRST_POLL = 0.1  # seconds; each wait is half as long again, up to _LAST_POLL
_LAST_POLL = 5.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _say(message: str) -> None:
    print(f"ces-eval run: {message}", file=sys.stderr, flush=True)


def _checked(args: argparse.Namespace) -> tuple[Selection, RunOptions]:
    """The selection and run options of ``args``, every combination checked before anything
    starts."""
    if not APP_NAME.fullmatch(args.app):
        raise RunNotDone(f"--app {args.app!r}: give projects/P/locations/L/apps/A")
    selection = Selection(args.evaluations, args.tags, args.display_name_prefix, args.dataset)
    selection.check()
    options = RunOptions(
        run_count=args.run_count,
        golden_run_method=args.golden_run_method or "",
        personas=args.personas,
        task_count=args.task_count,
        display_name=args.run_display_name,
        app_version=args.app_version,
        channel=args.channel or "",
        tool_call_behaviour=args.tool_call_behaviour or "",
        latency_report=args.latency_report,
        skip_unchanged=args.skip_unchanged,
        loss_report=args.loss_report,
    )
    options.check()
    if args.fail_on == "regression" and not args.baseline:
        raise RunNotDone("--fail-on regression compares with a --baseline; give one")
    if args.max_failures is not None and args.max_failures < 0:
        raise RunNotDone("--max-failures must be 0 or more")
    if args.server is None:
        if args.ca_file:
            raise RunNotDone("--ca-file is for an https:// --server; the local server is http://")
    elif args.seed:
        raise RunNotDone("--seed seeds the local server; with --server, seed that server")
    return selection, options


@contextlib.contextmanager
def _local_server(seed: str | None) -> Iterator[str]:
    """A throw-away ``ces-eval serve`` on a fresh SQLite file in a temporary folder (the pytest
    plugin's harness), seeded with ``seed``; its REST URL. Stopped, and the folder removed, at
    the end."""
    from ces_eval.testing.server import (  # noqa: PLC0415 - only without --server
        ServerStartError,
        start_server,
    )

    if seed and not Path(seed).is_file():
        raise RunNotDone(f"--seed {seed}: no such file")
    with tempfile.TemporaryDirectory(prefix="ces-eval-run-") as folder:
        extra = ["--seed", str(Path(seed).resolve())] if seed else []
        try:
            server = start_server(Path(folder) / "ces-eval.db", *extra)
        except ServerStartError as error:
            raise RunNotDone(f"the local server did not start: {error.reason}") from None
        try:
            yield server.http_base
        finally:
            server.stop()


def _token(args: argparse.Namespace) -> Callable[[], str] | None:
    """The bearer token to send: ``--token``, else ``CES_EVAL_TOKEN`` (the local server too is
    given it: it reads the ``CES_EVAL_*`` variables as ``serve`` does, ``CES_EVAL_AUTH_TOKENS``
    included), else Application Default Credentials for an ``https://`` server."""
    given = args.token or os.environ.get("CES_EVAL_TOKEN")
    if given:
        return lambda: given
    if str(args.server).startswith("https://"):
        return adc_token_source()
    return None


def _wait(
    client: Client,
    operation: Mapping[str, Any],
    progress: _terminal.Progress,
    interrupts: Interrupts,
) -> dict[str, Any]:
    """Poll the RunEvaluation operation until done, then its run until terminal (with backoff);
    the run. ``progress`` is shown meanwhile; a signal ends the wait (:class:`_Interrupted`)."""
    run_name = str(operation.get("metadata", {}).get("evaluationRun", ""))
    delay = _FIRST_POLL
    while not operation.get("done"):
        if run_name and progress.shown:
            progress.update(client.call("GET", run_name, retry=True))
        if interrupts.sleep(delay):
            raise _Interrupted
        delay = min(delay * 1.5, _LAST_POLL)
        operation = client.call("GET", str(operation["name"]), retry=True)
        run_name = run_name or str(operation.get("metadata", {}).get("evaluationRun", ""))
    run_name = run_name or str(operation.get("response", {}).get("evaluationRun", ""))
    if not run_name:
        error = operation.get("error", {})
        raise RunNotDone(
            f"the run did not start: {error.get('code', '?')} {error.get('message', '')}".rstrip()
        )
    delay = _FIRST_POLL
    while True:
        run = client.call("GET", run_name, retry=True)
        progress.update(run)
        if run.get("state") in _TERMINAL:
            return run
        if interrupts.sleep(delay):
            raise _Interrupted
        delay = min(delay * 1.5, _LAST_POLL)


class Interrupts:
    """SIGINT and SIGTERM while the command runs: the first is noted (:meth:`check` and
    :meth:`sleep` see it), so that the run can be cancelled once the call under way has ended
    (each is bounded by its timeout); a second stops the command at once, a KeyboardInterrupt.
    Handlers are installed in the main thread only (where signals are delivered), and the ones
    before are put back at the end."""

    def __init__(self) -> None:
        self.noted = threading.Event()
        self.signal = ""
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self.previous = {
                signum: signal.signal(signum, self._handle)
                for signum in (signal.SIGINT, signal.SIGTERM)
            }
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.noted.is_set():
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        self.noted.set()

    def check(self) -> None:
        """Stop here, before the run starts, if a signal came."""
        if self.noted.is_set():
            raise RunNotDone(f"interrupted by {self.signal}; stopped before the run started")

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if a signal comes; whether one came."""
        return self.noted.wait(seconds)


class _Interrupted(Exception):
    """A signal came while the run played."""


def _play(
    client: Client,
    server: str,
    args: argparse.Namespace,
    *,
    chosen_by: tuple[Selection, RunOptions],
    baseline: Mapping[str, Any] | None,
    started: str,
    interrupts: Interrupts,
) -> dict[str, Any]:
    """Select, run, wait and read the results: the report, its gate decided. A signal before
    the run starts stops there; while it plays, it cancels the run."""
    selection, options = chosen_by
    interrupts.check()
    app = client.call("GET", args.app)
    listed = list(client.pages(f"{args.app}/evaluations", "evaluations"))
    dataset = None
    if selection.dataset:
        dataset = client.call(
            "GET", qualify(args.app, "evaluationDatasets", selection.dataset, "--dataset")
        )
    chosen = select(args.app, selection, listed, dataset)
    body = request_body(args.app, selection, chosen, options)
    interrupts.check()
    operation = client.call("POST", f"{args.app}:runEvaluation", body=body)
    progress = _terminal.Progress(sys.stderr)
    try:
        run = _wait(client, operation, progress, interrupts)
    except _Interrupted:
        progress.close()
        with contextlib.suppress(RunNotDone):
            client.call("POST", f"{operation['name']}:cancel", body={})
        run_name = operation.get("metadata", {}).get("evaluationRun", operation["name"])
        raise RunNotDone(f"interrupted by {interrupts.signal}; cancelled {run_name}") from None
    progress.close()
    results = list(
        client.pages(
            f"{args.app}/evaluations/-/results",
            "evaluationResults",
            {"filter": f'evaluation_run = "{run["name"]}"'},
        )
    )
    summary = summarize(chosen, results)
    report: dict[str, Any] = {
        "kind": _report.KIND,
        "version": _report.VERSION,
        "server": server,
        "app": app,
        "startTime": started,
        "endTime": _now(),
        "options": body,
        "evaluations": chosen,
        "runs": [{"run": run, "results": results}],
        "summary": summary,
    }
    if baseline is not None:
        report["baseline"] = _report.compare(summary["evaluations"], baseline, args.baseline)
    report["gate"] = decide(
        summary["evaluations"],
        args.fail_on,
        args.max_failures,
        run_state=str(run.get("state", "")),
    )
    return report


def _write(
    report: Mapping[str, Any],
    args: argparse.Namespace,
    baseline: Mapping[str, Any] | None,
) -> None:
    """Every output asked for: the files, the GitHub ones, the summary on stdout."""
    if args.json:
        _report.write_json(report, Path(args.json))
    if args.junit:
        _report.write_text(Path(args.junit), _junit.junit(report), "--junit")
    if args.html:
        # Imported here: its templates are read only when a page is asked for.
        from ces_eval.report.html import render_report  # noqa: PLC0415

        _report.write_text(Path(args.html), render_report(report, baseline), "--html")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        try:
            with Path(summary_file).open("a", encoding="utf-8") as stream:
                stream.write(_github.step_summary(report))
        except OSError as error:
            raise RunNotDone(f"GITHUB_STEP_SUMMARY {summary_file}: {error.strerror}") from None
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in _github.error_commands(report):
            print(line)
    width = shutil.get_terminal_size((120, 24)).columns
    for line in _terminal.summary(report, width):
        print(line)
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Run ``ces-eval run`` with the parsed ``args``; its exit status."""
    started = _now()
    try:
        with Interrupts() as interrupts:
            return _run(args, started, interrupts)
    except KeyboardInterrupt:  # a second signal, or one before ours were installed
        _say("interrupted; stopped")
        return NOT_DONE


def _run(args: argparse.Namespace, started: str, interrupts: Interrupts) -> int:
    try:
        chosen_by = _checked(args)  # before any server starts
        baseline = _report.read_baseline(Path(args.baseline), args.app) if args.baseline else None
        with contextlib.ExitStack() as stack:
            server = args.server or stack.enter_context(_local_server(args.seed))
            client = Client(server, _token(args), args.ca_file)
            stack.callback(client.close)
            report = _play(
                client,
                server,
                args,
                chosen_by=chosen_by,
                baseline=baseline,
                started=started,
                interrupts=interrupts,
            )
        _write(report, args, baseline)
    except RunNotDone as error:
        _say(str(error))
        return NOT_DONE
    gate = report["gate"]
    state = report["runs"][0]["run"].get("state")
    if state != "COMPLETED":
        why = report["runs"][0]["run"].get("errorInfo", {}).get("errorMessage", "")
        _say(f"the run ended {state}" + (f": {why}" if why else ""))
        return NOT_DONE
    return 0 if gate["held"] else 1
