"""The REST router (transcoding/router.py): routes grouped by the number of path segments they
match, answering exactly what one scan over every route, ours first, would answer."""

from __future__ import annotations

import pytest

from ces_eval.surfaces.rest import served_bindings
from ces_eval.transcoding.router import Route, Router, UnservedRoute

VERBS = ("GET", "POST", "PATCH", "DELETE", "PUT")


def _scanned(
    router: Router, verb: str, raw_path: str
) -> tuple[Route, dict[str, str]] | UnservedRoute | list[str]:
    """The router's contract without its grouping: of every route, ours first, those whose
    template matches (one without a custom verb never matches a last segment holding a ":");
    the first of them bound to ``verb``, else their verbs in order."""
    custom = ":" in raw_path.rsplit("/", 1)[-1]
    matching = [
        (entry, variables)
        for entry in (*router.routes, *router.unserved)
        if not (custom and entry.template.verb is None)
        and (variables := entry.template.match(raw_path)) is not None
    ]
    for entry, variables in matching:
        if entry.binding.verb == verb:
            return (entry, variables) if isinstance(entry, Route) else entry
    return list(dict.fromkeys(entry.binding.verb for entry, _ in matching))


def _paths(router: Router) -> list[str]:
    """A path of every route's template, and variants next to it: a segment more, one less,
    an escaped letter, a verb changed, a trailing slash."""
    found: list[str] = []
    for entry in (*router.routes, *router.unserved):
        template = entry.template
        # Each variable's own shape, its wildcards filled in.
        values = {}
        for field_path, segments in template.layout():
            if field_path is not None:
                values[field_path] = "/".join("x" if s in {"*", "**"} else s for s in segments)
        path = template.expand(values)
        found += [path, path + "/extra", path.rsplit("/", 1)[0], path + "/", "/%76" + path[2:]]
        if template.verb is not None:
            found.append(path.rsplit(":", 1)[0] + ":unknownVerb")
    return [*found, "/", "", "nothing", "/v1beta", "/v1beta/projects/p/locations/l/apps/a/x/y"]


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(served_bindings())


def test_every_route_is_found_by_its_own_path(router: Router) -> None:
    for entry in router.routes:
        path = _paths(Router([entry.binding], unserved=[]))[0]
        resolved = router.resolve(entry.binding.verb, path)
        assert isinstance(resolved, tuple), (entry.binding.template, path)
        assert resolved[0].path == entry.path


@pytest.mark.parametrize("verb", VERBS)
def test_resolution_is_the_scan_over_every_route_in_order(router: Router, verb: str) -> None:
    paths = _paths(router)
    assert len(paths) > 100
    for path in paths:
        assert router.resolve(verb, path) == _scanned(router, verb, path), (verb, path)
