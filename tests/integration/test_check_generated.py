"""``make check-generated`` (``tools/generate.py --check``) on a copy of the generation inputs.

The copy holds what generation reads (protos/, buf.yaml, buf.gen.yaml, tools/) and the committed
generated/, with links to this checkout's .venv and node_modules (the plugins and buf). Unchanged,
the check passes: the committed tree is what the tools make. With a field added to a proto, it
fails and names every output that changed: the message module and its stub, the descriptor set,
the OpenAPI document and the MCP tool schemas; generated/ itself is left as committed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.contract import CLIENT_PYTHON

ROOT = Path(__file__).resolve().parents[2]
EVALUATION_PROTO = Path("protos/google/cloud/ces/v1beta/evaluation.proto")
STALE = "generated/ is stale: run `make generate` and commit"


def _copy_inputs(tree: Path) -> None:
    for folder in ("protos", "tools", "generated"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("buf.yaml", "buf.gen.yaml"):
        shutil.copy2(ROOT / name, tree / name)
    (tree / ".venv").symlink_to(Path(sys.prefix))  # this interpreter's virtual environment
    (tree / "node_modules").symlink_to((ROOT / "node_modules").resolve())


def _check(tree: Path) -> subprocess.CompletedProcess[str]:
    if not CLIENT_PYTHON.exists():
        pytest.fail(f"{CLIENT_PYTHON} is missing: `make setup` builds it", pytrace=False)
    return subprocess.run(
        [
            sys.executable,
            str(tree / "tools" / "generate.py"),
            "--check",
            "--client-python",
            str(CLIENT_PYTHON),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    copy.mkdir()
    _copy_inputs(copy)
    return copy


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_committed_tree_is_what_generation_makes(tree: Path) -> None:
    done = _check(tree)
    assert done.returncode == 0, done.stderr
    assert "stale" not in done.stderr


def test_a_changed_proto_fails_the_check_naming_each_changed_file(tree: Path) -> None:
    committed = _files(tree / "generated")
    proto = tree / EVALUATION_PROTO
    text = proto.read_text(encoding="utf-8")
    anchor = "message Evaluation {\n"
    assert anchor in text
    proto.write_text(
        text.replace(
            anchor,
            f"{anchor}  // A note for reviewers, added by the test.\n  string note = 99;\n",
            1,
        ),
        encoding="utf-8",
    )
    done = _check(tree)
    print(done.stderr)
    assert done.returncode == 1, done.stderr
    stale = {line for line in done.stderr.splitlines() if line.startswith("stale: ")}
    assert {
        "stale: differs: generated/descriptor_set.binpb",
        "stale: differs: generated/openapi.json",
        "stale: differs: generated/mcp_tools.json",
        "stale: differs: generated/google/cloud/ces/v1beta/evaluation_pb2.py",
        "stale: differs: generated/google/cloud/ces/v1beta/evaluation_pb2.pyi",
    } <= stale
    assert "stale: differs: generated/official_routes.json" not in stale
    assert done.stderr.rstrip().endswith(STALE)
    assert _files(tree / "generated") == committed  # the check writes elsewhere


def test_a_removed_output_is_named(tree: Path) -> None:
    (tree / "generated" / "mcp_tools.json").unlink()
    done = _check(tree)
    assert done.returncode == 1
    assert "stale: missing from committed: generated/mcp_tools.json" in done.stderr.splitlines()
