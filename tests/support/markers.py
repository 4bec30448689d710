"""The markers a collected test gets for what it needs (tests/README.md, "Markers").

``pyproject.toml`` registers them; ``tests/conftest.py`` applies :func:`implied` to every test,
on top of the marks written on it, so that ``-m unit`` or ``-m "not external"`` selects by need
without each test spelling out what its folder, fixtures and parameters already say:

* the folder: ``tests/integration`` is ``integration``; the other folders are ``unit`` unless
  the test needs more;
* the fixtures: ``postgres_cluster`` or ``postgres_url`` (tests/conftest.py) make ``postgres``,
  ``server`` or ``module_server`` (the real server as a subprocess) ``integration``;
* the parameters: the backend ``postgresql`` of the storage contract suite makes ``postgres``.

What no folder, fixture or parameter shows (the official client's environment, node, curl,
chattr, ...) is written on the test as ``external``, or ``integration`` for a test that runs
``ces-eval`` itself.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["FOLDERS", "MARKERS", "implied"]

MARKERS = ("unit", "integration", "postgres", "external")
# Each folder of tests/ holding test files, and the mark its tests get by default.
FOLDERS = {
    "unit": "unit",
    "contract": "unit",
    "conformance": "unit",
    "docs": "unit",
    "integration": "integration",
}
_POSTGRES_FIXTURES = frozenset({"postgres_cluster", "postgres_url"})
_SERVER_FIXTURES = frozenset({"server", "module_server"})
_POSTGRES_PARAMETERS = frozenset({"postgresql"})
# A test carrying one of these needs more than this process: it is not a unit test.
_BEYOND_UNIT = frozenset({"integration", "postgres", "external"})


def implied(
    folder: str, fixtures: Collection[str], parameters: Iterable[object], written: Collection[str]
) -> set[str]:
    """The markers to add to a test of the ``folder`` of tests/ that uses ``fixtures`` (its
    closure) with ``parameters`` (its parametrized values) and carries the marks ``written``.
    Raises KeyError for a folder that :data:`FOLDERS` does not list."""
    default = FOLDERS[folder]
    marks: set[str] = set()
    if _POSTGRES_FIXTURES & set(fixtures) or any(
        isinstance(value, str) and value in _POSTGRES_PARAMETERS for value in parameters
    ):
        marks.add("postgres")
    if default == "integration" or _SERVER_FIXTURES & set(fixtures):
        marks.add("integration")
    if default == "unit" and not _BEYOND_UNIT & (marks | set(written)):
        marks.add("unit")
    return marks - set(written)
