"""``ces-eval describe`` lists every binding the descriptors declare."""

from __future__ import annotations

import subprocess
import sys

from ces_eval.methods import markdown_table
from tests.support import contract

EMULATOR_BINDINGS = {
    "POST /emulator/v1/{parent=projects/*/locations/*/apps/*/evaluations/*}/results "
    "ces_eval.emulator.v1.EmulatorService.CreateEvaluationResult",
    "POST /emulator/v1/{name=projects/*}:reset ces_eval.emulator.v1.EmulatorService.ResetProject",
    "POST /emulator/v1/{parent=projects/*/locations/*/apps/*}:importEvaluations "
    "ces_eval.emulator.v1.EmulatorService.ImportEvaluations",
}


def test_describe_lists_the_official_and_emulator_bindings() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ces_eval.cli", "describe"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = {" ".join(line.split()[:3]) for line in completed.stdout.splitlines()}
    expected = (
        {
            f"{http['method'].upper()} {http['uri']} {contract.SERVICE}.{rpc}"
            for rpc, facts in contract.official().rpcs.items()
            for http in facts["http"]
        }
        | {
            f"{http['method'].upper()} {http['uri']} google.longrunning.Operations.{rpc}"
            for rpc, rules in contract.official().operations_http.items()
            for http in rules
        }
        | EMULATOR_BINDINGS
    )
    assert lines == expected


def test_describe_markdown_prints_the_methods_table() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "ces_eval.cli", "describe", "--markdown"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.stdout == markdown_table() + "\n"
    assert "| `google.cloud.ces.v1beta.EvaluationService/RunEvaluation` |" in completed.stdout
