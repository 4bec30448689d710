"""The test tree and its markers (tests/README.md): which marks a test gets for its folder,
fixtures and parameters, and that the tree, pyproject.toml and the README agree on them."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.support import contract, markers

TESTS = contract.ROOT / "tests"
NONE: tuple[str, ...] = ()


@pytest.mark.parametrize(
    ("folder", "fixtures", "parameters", "written", "added"),
    [
        pytest.param("unit", ["tmp_path"], NONE, NONE, {"unit"}, id="unit-folder"),
        pytest.param("docs", NONE, NONE, NONE, {"unit"}, id="docs-folder"),
        pytest.param("integration", ["tmp_path"], NONE, NONE, {"integration"}, id="integration"),
        pytest.param(
            "contract", ["make_storage"], ["sqlite"], NONE, {"unit"}, id="contract-on-sqlite"
        ),
        pytest.param(
            "contract",
            ["make_storage"],
            ["postgresql"],
            NONE,
            {"postgres"},
            id="contract-on-postgresql",
        ),
        pytest.param(
            "contract",
            ["postgres_url", "postgres_cluster"],
            NONE,
            NONE,
            {"postgres"},
            id="contract-postgres-fixture",
        ),
        pytest.param(
            "integration",
            ["postgres_url"],
            NONE,
            NONE,
            {"integration", "postgres"},
            id="replicas-on-postgresql",
        ),
        pytest.param(
            "docs", ["module_server"], NONE, NONE, {"integration"}, id="docs-asking-the-server"
        ),
        pytest.param("unit", NONE, NONE, ["external"], set(), id="unit-folder-external"),
        pytest.param(
            "docs", NONE, NONE, ["integration"], set(), id="written-integration-not-repeated"
        ),
        pytest.param(
            "integration", NONE, NONE, ["external"], {"integration"}, id="integration-external"
        ),
        pytest.param(
            "unit", NONE, [3, None, ("postgresql",)], ["parametrize"], {"unit"}, id="other-params"
        ),
    ],
)
def test_marks_follow_folder_fixtures_and_parameters(
    folder: str,
    fixtures: list[str],
    parameters: list[object],
    written: list[str],
    added: set[str],
) -> None:
    assert markers.implied(folder, fixtures, parameters, written) == added


def test_a_folder_without_a_default_mark_is_refused() -> None:
    with pytest.raises(KeyError):
        markers.implied("test_loose.py", (), (), ())


def test_every_test_file_is_in_a_folder_with_a_default_mark() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []  # none loose in tests/
    folders = {p.parent.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")}
    assert folders == set(markers.FOLDERS)


def test_pyproject_registers_exactly_the_markers_and_refuses_others() -> None:
    pytest_options = tomllib.loads((contract.ROOT / "pyproject.toml").read_text())["tool"][
        "pytest"
    ]["ini_options"]
    registered = [line.split(":", 1)[0] for line in pytest_options["markers"]]
    assert registered == list(markers.MARKERS)
    assert "--strict-markers" in pytest_options["addopts"].split()


def test_readme_describes_every_folder_and_marker() -> None:
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    for folder in markers.FOLDERS:
        assert re.search(rf"^\| `{folder}/` \|", readme, re.MULTILINE), folder
    for marker in markers.MARKERS:
        assert re.search(rf"^\| `{marker}` \|", readme, re.MULTILINE), marker


def test_make_unit_and_make_integration_split_the_suite_between_them() -> None:
    """``make unit`` runs the tests marked ``unit`` and needs neither PostgreSQL nor a browser,
    ``make integration`` runs every other test, ``make test`` runs both: each test once."""
    makefile = (contract.ROOT / "Makefile").read_text(encoding="utf-8")
    rules = {
        target: (prerequisites.split(), recipe)
        for target, prerequisites, recipe in re.findall(
            r"^([\w-]+):([^=\n]*)\n(?:\t(.*))?$", makefile, re.MULTILINE
        )
    }
    assert rules["unit"][1] == "$(VENV)/bin/pytest -m unit"
    # Only a report of the slowest tests may be added: nothing that selects fewer.
    assert re.fullmatch(
        r'\$\(VENV\)/bin/pytest -m "not unit"( --durations=\d+)?', rules["integration"][1]
    )
    assert not {"postgres", "browser"} & set(rules["unit"][0])
    assert {"postgres", "browser"} <= set(rules["integration"][0])
    assert rules["test"][0][-2:] == ["unit", "integration"]
