"""The flags of ``ces-eval run`` (docs/gate.md, "Options"). Standard library only: the command
line is parsed before anything heavier is imported (cli.py's docstring says why)."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments"]

_GOLDEN_RUN_METHODS = ("STABLE", "NAIVE")
_CHANNELS = ("TEXT", "AUDIO")
_TOOL_CALL_BEHAVIOURS = ("REAL", "FAKE")


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ces-eval run`` to ``parser``."""
    what = parser.add_argument_group("what runs (all of the app's evaluations when no criterion)")
    what.add_argument(
        "--app", required=True, help="the app: projects/P/locations/L/apps/A (required)"
    )
    what.add_argument(
        "--evaluation",
        dest="evaluations",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME",
        help="these evaluations (IDs or full names)",
    )
    what.add_argument(
        "--tag",
        dest="tags",
        nargs="+",
        action="extend",
        default=[],
        metavar="TAG",
        help="the evaluations carrying any of these tags",
    )
    what.add_argument(
        "--display-name-prefix",
        default="",
        metavar="P",
        help="the evaluations whose display name starts with P",
    )
    what.add_argument(
        "--dataset", default="", metavar="NAME", help="the evaluations of this dataset (ID or name)"
    )
    how = parser.add_argument_group("run options (RunEvaluationRequest fields)")
    how.add_argument("--run-count", type=_count, metavar="N", help="runs of each evaluation")
    how.add_argument(
        "--golden-run-method", choices=_GOLDEN_RUN_METHODS, help="how goldens are replayed"
    )
    how.add_argument(
        "--persona",
        dest="personas",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME",
        help="scenarios run with these personas (IDs or names): persona_run_configs",
    )
    how.add_argument("--task-count", type=_count, metavar="N", help="scenario runs per --persona")
    how.add_argument("--run-display-name", default="", metavar="TEXT", help="the run's name")
    how.add_argument("--app-version", default="", metavar="NAME", help="the app version to run")
    how.add_argument("--channel", choices=_CHANNELS, help="config.evaluation_channel")
    how.add_argument(
        "--tool-call-behaviour", choices=_TOOL_CALL_BEHAVIOURS, help="config.tool_call_behaviour"
    )
    how.add_argument("--latency-report", action="store_true", help="generate_latency_report: true")
    how.add_argument(
        "--skip-unchanged",
        action="store_true",
        help="reuse the results of evaluations unchanged since (run caching SKIP_IF_UNCHANGED)",
    )
    how.add_argument(
        "--loss-report", action="store_true", help="optimization_config.generate_loss_report"
    )
    where = parser.add_argument_group("where (default: a throw-away local server)")
    where.add_argument("--server", metavar="URL", help="a server's REST URL, http:// or https://")
    where.add_argument(
        "--token", metavar="TOKEN", help="bearer token (default: $CES_EVAL_TOKEN, then ADC)"
    )
    where.add_argument(
        "--ca-file", metavar="FILE", help="trust the server's certificate from this PEM file"
    )
    where.add_argument(
        "--seed", metavar="FILE", help="the local server's serve --seed (an export document)"
    )
    reports = parser.add_argument_group("reports")
    reports.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    reports.add_argument("--json", metavar="FILE", help="write the report (JSON) here")
    reports.add_argument("--html", metavar="FILE", help="write the HTML report here")
    gate = parser.add_argument_group("the gate")
    gate.add_argument("--baseline", metavar="FILE", help="a previous --json report to compare with")
    gate.add_argument(
        "--fail-on",
        choices=("any", "regression"),
        default="any",
        help="what fails the gate: any failing evaluation (default), or newly failing ones",
    )
    gate.add_argument(
        "--max-failures",
        type=_count,
        metavar="N",
        help="the gate holds with up to N failing evaluations (default 0)",
    )
