"""``ces-eval describe`` and ``serve --help``: bindings, methods table, README options."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ces_eval.contract import schema
from ces_eval.methods import NEEDS_MODEL, SERVED, markdown_table
from tests.support import contract
from tests.support.standard_routes import standard_routes

pytestmark = pytest.mark.integration  # runs the ces-eval program as a subprocess


def _ces_eval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ces_eval.cli", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )


# The emulator's bindings: its custom methods' written out by hand, its standard methods' as
# AIP-127 and AIP-131..135 spell them from each resource's name pattern.
EMULATOR_BINDINGS = {
    "GET /emulator/v1/{name=projects/*/locations/*/apps/*/conversations/*} "
    "ces_eval.emulator.v1.EmulatorService.GetConversation",
    "GET /emulator/v1/{parent=projects/*/locations/*/apps/*}/conversations "
    "ces_eval.emulator.v1.EmulatorService.ListConversations",
    "POST /emulator/v1/{name=projects/*/locations/*/apps/*/outcomeRules/*}:release "
    "ces_eval.emulator.v1.EmulatorService.ReleaseOutcomeRule",
    "POST /emulator/v1/{name=projects/*}:reset ces_eval.emulator.v1.EmulatorService.ResetProject",
    "POST /emulator/v1/{name=projects/*/locations/*/apps/*/scheduledEvaluationRuns/*}:fire "
    "ces_eval.emulator.v1.EmulatorService.FireScheduledEvaluationRun",
    "POST /emulator/v1/{name=projects/*/clock}:advance "
    "ces_eval.emulator.v1.EmulatorService.AdvanceClock",
    "GET /emulator/v1/{name=projects/*/clock} ces_eval.emulator.v1.EmulatorService.GetProjectClock",
    "POST /emulator/v1/{parent=projects/*/locations/*/apps/*}:importEvaluations "
    "ces_eval.emulator.v1.EmulatorService.ImportEvaluations",
    "GET /emulator/v1/{name=projects/*/locations/*/apps/*/agentEndpoint} "
    "ces_eval.emulator.v1.EmulatorService.GetAgentEndpoint",
    "PATCH /emulator/v1/{agent_endpoint.name=projects/*/locations/*/apps/*/agentEndpoint} "
    "ces_eval.emulator.v1.EmulatorService.UpdateAgentEndpoint",
    *(
        f"POST /emulator/v1/{{parent=projects/*/locations/*/apps/*}}/agentRecordings:{verb} "
        f"ces_eval.emulator.v1.EmulatorService.{rpc}AgentRecordings"
        for verb, rpc in (("purge", "Purge"), ("export", "Export"), ("import", "Import"))
    ),
    *(
        f"{route.verb} {route.template} ces_eval.emulator.v1.EmulatorService.{route.rpc}"
        for route in standard_routes()
        if route.service == "EmulatorService"
    ),
}


@pytest.mark.external  # the official client's bindings (.venv-client)
def test_describe_lists_the_official_and_emulator_bindings() -> None:
    completed = _ces_eval("describe")
    lines = {" ".join(line.split()[:3]) for line in completed.stdout.splitlines()}
    expected = (
        {
            f"{http['method'].upper()} {http['uri']} google.cloud.ces.v1beta.{rpc}"
            for rpc, facts in contract.official().rpcs.items()
            for http in facts["http"]
        }
        | {
            f"{http['method'].upper()} {http['uri']} google.longrunning.Operations.{rpc}"
            for rpc, rules in contract.official().operations_http.items()
            for http in rules
        }
        | {
            f"{http['method'].upper()} {http['uri']} google.cloud.location.Locations.{rpc}"
            for rpc, rules in contract.official().locations_http.items()
            for http in rules
        }
        | EMULATOR_BINDINGS
    )
    assert lines == expected


def test_describe_markdown_prints_the_methods_table() -> None:
    completed = _ces_eval("describe", "--markdown")
    assert completed.stdout == markdown_table() + "\n"
    run_evaluation = (
        "| `google.cloud.ces.v1beta.EvaluationService/RunEvaluation` "
        "| `POST /v1beta/{app=projects/*/locations/*/apps/*}:runEvaluation` "
        "| `run_evaluation` | served |"
    )
    assert run_evaluation in completed.stdout.splitlines()
    official = [f"| `{m.path.lstrip('/')}` |" for m in schema.official_routes().methods]
    rows = [line for line in completed.stdout.splitlines() if line.startswith(tuple(official))]
    assert len(rows) == len(official)
    assert all(row.endswith((f"| {SERVED} |", f"| {NEEDS_MODEL} |")) for row in rows), rows
    generate = "| `google.cloud.ces.v1beta.AgentService/GenerateAppResource` |"
    assert any(r.startswith(generate) and r.endswith(f"| {NEEDS_MODEL} |") for r in rows)


def test_readme_lists_every_serve_option_with_its_variable() -> None:
    """README's "Server options" table has a row per flag of ``ces-eval serve --help``."""
    readme = (contract.ROOT / "README.md").read_text()
    table = readme.split("## Server options", 1)[1].split("\n\n**Start-up mistakes**", 1)[0]
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[2].strip(" `")
        for line in table.splitlines()
        if line.startswith("| `--")
    }
    help_text = _ces_eval("serve", "--help").stdout
    flags = {word for word in help_text.split() if word.startswith("--") and word != "--help"}
    flags = {flag.strip("[],") for flag in flags}
    assert set(rows) == flags
    for flag, variable in rows.items():
        assert variable == "CES_EVAL_" + flag[2:].upper().replace("-", "_")
