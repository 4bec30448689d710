"""The package as users get it, not as the editable checkout pretends it is.

``python -m build`` on a copy of the git-tracked tree (the wheel is built from the sdist, so the
sdist must hold what the wheel needs); every tracked file under ``src/ces_eval`` and ``generated/``
(mapped in as ``ces_eval.generated``) in both; the wheel installed into a fresh virtual environment
outside the checkout serves gRPC and REST from there.
Then the developer entry points: ``make serve`` installs the package alone, ``make test`` the
whole toolchain, and npm runs only the install scripts package.json reviewed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import start_server
from tests.support.load import golden_evaluation

# git lists the tracked tree, make prints its recipes, npm installs the JavaScript toolchain.
pytestmark = pytest.mark.external

REPO = Path(__file__).resolve().parents[2]
# Where each folder of the package sits in the checkout and in the wheel (pyproject.toml's
# package-dir): src/ces_eval is ces_eval, generated/ is ces_eval.generated.
PACKAGE_FOLDERS = {"src/ces_eval/": "ces_eval/", "generated/": "ces_eval/generated/"}
APP = "projects/p/locations/l/apps/a"
# The commands below install packages (pip, npm) and build: minutes on a cold cache, seconds warm.
INSTALL_TIMEOUT = 900


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would let the checkout or the dev .venv leak into a child:
    PYTHONPATH, an activated virtual environment, and an outer make's flags (make unit runs us)."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **extra}


def _run(command: list[str], cwd: Path, timeout: float = INSTALL_TIMEOUT) -> str:
    """``command``'s stdout and stderr together; the test fails with them when it fails."""
    done = subprocess.run(
        command,
        cwd=cwd,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n{done.stdout}"
    return done.stdout


def _tracked_files() -> list[str]:
    """The files git tracks, plus those it would track (new, not ignored): the working tree as
    the next commit has it, so a change in progress is built whole. On CI, exactly the tracked
    files."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO)
    # A tracked file deleted in the working tree (a change in progress) is not shipped.
    return sorted({p for p in listed.split("\0") if p and (REPO / p).is_file()})


def _copy_tracked_tree(destination: Path) -> list[str]:
    """Those files, as they are in the working tree, copied to ``destination``: builds and make
    runs there never touch the checkout (no build/, *.egg-info or .venv in it) and never see its
    ignored files."""
    tracked = _tracked_files()
    for relative in tracked:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, target)
    return tracked


@dataclass(frozen=True)
class Built:
    tree: Path
    tracked: list[str]
    sdist: Path
    wheel: Path
    log: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tree = tmp_path_factory.mktemp("tree")
    tracked = _copy_tracked_tree(tree)
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    log = _run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], tree)
    print(f"\npython -m build: {time.monotonic() - started:.1f} s")
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Built(tree, tracked, sdist, wheel, log)


def test_build_prints_no_deprecation_warnings(built: Built) -> None:
    # setuptools announces removals as SetuptoolsDeprecationWarning ("... is deprecated").
    deprecated = [line for line in built.log.splitlines() if "deprecat" in line.lower()]
    assert not deprecated, "\n".join(deprecated)


def test_sdist_and_wheel_hold_every_tracked_file_of_the_package(built: Built) -> None:
    package = [p for p in built.tracked if p.startswith(tuple(PACKAGE_FOLDERS))]
    # The files the server reads at run time, so an empty or misread listing cannot pass.
    assert {
        "src/ces_eval/py.typed",
        "generated/descriptor_set.binpb",
        "generated/official_routes.json",
        "generated/openapi.json",
        "generated/google/cloud/ces/v1beta/evaluation_pb2.pyi",
        "src/ces_eval/storage/migrations/sqlite/0001_initial.sql",
        "src/ces_eval/storage/migrations/postgresql/0001_initial.sql",
    } <= set(package)
    with tarfile.open(built.sdist) as archive:
        # Every member sits under "ces_eval-<version>/".
        in_sdist = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()}
    with zipfile.ZipFile(built.wheel) as archive:
        in_wheel = {name for name in archive.namelist() if not name.endswith("/")}
    data = sorted(p for p in package if not p.endswith(".py"))
    folders = " and ".join(PACKAGE_FOLDERS)
    print(f"\n{len(package)} tracked files under {folders}, {len(data)} of them not Python:")
    print("\n".join(f"  {p}" for p in data))
    print(f"{built.sdist.name}: {len(in_sdist)} files; {built.wheel.name}: {len(in_wheel)} files:")
    print("\n".join(f"  {name}" for name in sorted(in_wheel)))
    assert [p for p in package if p not in in_sdist] == []
    assert [p for p in package if _in_wheel(p) not in in_wheel] == []
    assert [name for name in in_wheel if name.endswith((".pyc", ".pyo"))] == []


def _in_wheel(tracked: str) -> str:
    """The wheel's name of a tracked file of the package."""
    folder = next(f for f in PACKAGE_FOLDERS if tracked.startswith(f))
    return PACKAGE_FOLDERS[folder] + tracked.removeprefix(folder)


@pytest.fixture
def installed(built: Built, tmp_path: Path) -> Path:
    """A fresh virtual environment outside the checkout with the wheel installed (its
    dependencies from the package index or pip's cache); the environment's folder."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    venv = tmp_path / "venv"
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    log = _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            str(built.wheel),
        ],
        tmp_path,
    )
    print(f"\nvenv + pip install {built.wheel.name}: {time.monotonic() - started:.1f} s")
    print(log.strip().splitlines()[-1])
    return venv


def test_installed_wheel_serves_grpc_and_rest(installed: Path, tmp_path: Path) -> None:
    located = _run(
        [str(installed / "bin" / "python"), "-c", "import ces_eval; print(ces_eval.__file__)"],
        tmp_path,
    )
    module = Path(located.strip()).resolve()
    print(f"ces_eval imported from {module}")
    assert module.is_relative_to(installed.resolve())
    assert not module.is_relative_to(REPO)
    stubs = _run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2 as m;"
            " print(m.__file__)",
        ],
        tmp_path,
    )
    assert (
        Path(stubs.strip()).resolve().parent == module.parent / "generated/google/cloud/ces/v1beta"
    )

    started = time.monotonic()
    served = start_server(
        tmp_path / "x.db",
        program=[str(installed / "bin" / "ces-eval")],
        cwd=tmp_path,
        base_env=_clean_env(),
    )
    try:
        print(f"healthy {time.monotonic() - started:.1f} s after start")
        with (
            httpx.Client(base_url=served.http_base, timeout=10) as http,
            grpc.insecure_channel(served.grpc_target) as channel,
        ):
            stub = service_grpc.EvaluationServiceStub(channel)
            created = stub.CreateEvaluation(
                service_pb2.CreateEvaluationRequest(
                    parent=APP,
                    evaluation_id="from-grpc",
                    evaluation=golden_evaluation("From gRPC"),
                ),
                timeout=10,
            )
            assert created.name == f"{APP}/evaluations/from-grpc"
            over_rest = http.get(f"/v1beta/{created.name}")
            assert over_rest.status_code == 200, over_rest.text
            assert over_rest.json()["displayName"] == "From gRPC"
            again = stub.GetEvaluation(
                service_pb2.GetEvaluationRequest(name=created.name), timeout=10
            )
            assert again == created

            posted = http.post(
                f"/v1beta/{APP}/evaluations",
                params={"evaluationId": "from-rest"},
                json={
                    "displayName": "From REST",
                    "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
                },
            )
            assert posted.status_code == 200, posted.text
            document = http.get("/openapi.json")  # generated/openapi.json, as package data
            assert document.status_code == 200
            assert document.json() == json.loads((REPO / "generated" / "openapi.json").read_text())
            over_grpc = stub.GetEvaluation(
                service_pb2.GetEvaluationRequest(name=posted.json()["name"]), timeout=10
            )
            assert over_grpc.name == f"{APP}/evaluations/from-rest"
            assert over_grpc.display_name == "From REST"
        code = served.stop()
    finally:
        served.kill()
        print(served.output())
    assert code == 0
    assert "ces-eval stopped" in served.output()


def _official_client() -> str:
    """The pinned requirement of Google's client (the Makefile's OFFICIAL_CLIENT)."""
    found = re.search(r"^OFFICIAL_CLIENT := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert found is not None
    return found.group(1)


def _suite_outcome(output: str) -> dict[str, int]:
    """pytest's closing counts (``7 passed, 1 skipped in 3.2s``) by outcome."""
    last = output.strip().splitlines()[-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", last) if word != "in"}


def test_a_users_suite_runs_the_plugin_beside_googles_client(
    installed: Path, tmp_path: Path
) -> None:
    """examples/pytest-suite as a team has it: the wheel, Google's client, pytest and
    pytest-xdist in one environment; every fixture of the plugin, two workers, first on servers
    the plugin starts, then on one already running (--ces-eval-url, --ces-eval-grpc)."""
    python = str(installed / "bin" / "python")
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
          _official_client(), "pytest", "pytest-xdist"], tmp_path)  # fmt: skip
    suite = tmp_path / "suite"
    shutil.copytree(REPO / "examples" / "pytest-suite", suite)
    expected = {"passed": 8}  # every test of examples/pytest-suite, none skipped
    command = [python, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"]
    assert _suite_outcome(_run(command, suite)) == expected
    running = start_server(
        tmp_path / "running.db",
        program=[str(installed / "bin" / "ces-eval")],
        cwd=tmp_path,
        base_env=_clean_env(),
    )
    try:
        given = ["--ces-eval-url", running.http_base, "--ces-eval-grpc", running.grpc_target]
        assert _suite_outcome(_run([*command, *given], suite)) == expected
        # Each test's project was reset after it: a reset of all finds nothing left.
        reset = httpx.post(f"{running.http_base}/emulator/v1/projects/-:reset", json={}).json()
        counts = [*reset.pop("deletedResources").values(), *reset.values()]
        assert {int(count) for count in counts} == {0}, reset
    finally:
        running.kill()


def _make_n(tree: Path, target: str) -> list[str]:
    """The commands ``make <target>`` would run in ``tree``, which has no .venv, .venv-client
    or node_modules, so every install step is printed."""
    assert not (tree / ".venv").exists()
    printed = _run(["make", "-n", target], tree, timeout=60)
    print(f"\nmake -n {target}:\n{printed}")
    return printed.splitlines()


def _installed_by_pip(commands: list[str]) -> set[str]:
    """The requirements (or ``.``-style project paths) every ``pip install`` line names; none
    of those lines may be quiet (a long install shows its progress)."""
    named: set[str] = set()
    for command in commands:
        words = shlex.split(command)
        if "pip" in words and "install" in words:
            options = words[words.index("install") + 1 :]
            assert not {"-q", "--quiet"} & set(options), command
            named |= {w for w in options if not w.startswith("-")}
    return named


def test_make_serve_installs_the_package_alone(built: Built) -> None:
    commands = _make_n(built.tree, "serve")
    assert _installed_by_pip(commands) == {"pip", "."}
    assert [c for c in commands if re.search(r"\[dev\]|npm|\bbuf\b|\.venv-client", c)] == []
    assert commands[-1] == ".venv/bin/ces-eval serve"


def test_make_test_installs_the_whole_toolchain(built: Built) -> None:
    commands = _make_n(built.tree, "test")
    assert {".[dev]", "google-cloud-ces==0.7.2"} <= _installed_by_pip(commands)
    assert any(c.startswith("npm ci") for c in commands)
    assert any(".venv-client" in c for c in commands)


def test_npm_runs_only_reviewed_install_scripts(tmp_path: Path) -> None:
    # --strict-allow-scripts fails the install for any dependency whose install script
    # package.json's allowScripts neither allows nor denies (npm 11).
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(REPO / name, tmp_path / name)
    log = _run(["npm", "ci", "--no-audit", "--no-fund", "--strict-allow-scripts"], tmp_path)
    print(f"\nnpm ci:\n{log}")
    assert "install-scripts" not in log
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["@bufbuild/buf"]
    version = _run([str(tmp_path / "node_modules" / ".bin" / "buf"), "--version"], tmp_path)
    assert version.strip() == pinned
