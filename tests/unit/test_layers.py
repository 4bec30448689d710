"""The import contracts of ``make lint`` (pyproject's ``[tool.importlinter]``) hold for the tree,
and they fail on an import that climbs a layer: checked on a copy of the package with one such
import added, so a contract that could never break would show here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_tree_keeps_every_import_contract() -> None:
    result = _lint(ROOT / "src", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " broken" not in result.stdout.replace("0 broken", "")


@pytest.mark.parametrize(
    ("module", "climbing_import", "contract"),
    [
        ("transcoding/router.py", "import ces_eval.core.service", "libraries (contract"),
        ("core/aip/pages.py", "import ces_eval.surfaces.rest", "program -> surfaces -> core"),
        ("storage/base.py", "import ces_eval.core.aip.names", "program -> surfaces -> core"),
        ("access/tokens.py", "import ces_eval.core.aip.names", "access imports no"),
        ("surfaces/mcp_tools.py", "import ces_eval.surfaces.rest", "gRPC, REST, MCP and the web"),
        ("core/resources/results.py", "import ces_eval.core.engine.rerun", "core wings"),
        ("core/engine/running.py", "import ces_eval.core.exchange.media", "core wings"),
        ("core/aip/names.py", "import ces_eval.core.resources.runs", "core wings"),
        ("core/exchange/imports.py", "import ces_eval.core.io.objects", "the core reaches core.io"),
        ("core/io/objects.py", "import ces_eval.core.exchange.errors", "core.io implements"),
        ("options.py", "import ces_eval.core.aip.names", "boundary helpers import no"),
        ("config.py", "import ces_eval.server", "program -> surfaces -> core"),
        ("report/render.py", "import ces_eval.transcoding.printer", "ces_eval.report works on"),
        ("gate/_client.py", "import ces_eval.core.service", "ces_eval.gate is a REST client"),
    ],
)
def test_an_import_that_climbs_a_layer_breaks_its_contract(
    tmp_path: Path, module: str, climbing_import: str, contract: str
) -> None:
    shutil.copytree(ROOT / "src" / "ces_eval", tmp_path / "src" / "ces_eval")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "ces_eval" / module
    target.write_text(target.read_text() + f"\n{climbing_import}\n")
    result = _lint(tmp_path / "src", tmp_path)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout
