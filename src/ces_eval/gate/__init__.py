"""``ces-eval run``: the CI gate (docs/gate.md). Runs an app's evaluations on a server, waits
for them, writes JUnit, JSON and HTML reports and GitHub Actions outputs, compares with a
baseline, and answers with an exit status.

A client of the REST API only: it imports nothing generated and no part of the server
(pyproject.toml, contract ``gate``), so that it runs against any server speaking the
EvaluationService, hosted CES included. Without ``--server`` it starts a throw-away local one
through :mod:`ces_eval.testing.server`, as a subprocess.

:func:`add_arguments` is light (argparse only), for cli.py to build its parser with; :func:`run`
imports the rest when the command runs.
"""

from __future__ import annotations

import argparse

from ces_eval.gate.arguments import add_arguments

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    """Run ``ces-eval run`` with ``args`` (from :func:`add_arguments`); its exit status."""
    from ces_eval.gate._command import run as run_command  # noqa: PLC0415 - see the docstring

    return run_command(args)
