"""The Locations mixin in the core over a real SQLite file
(src/ces_eval/core/resources/locations.py): a project's locations are those its resources' names use
plus the configured ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud.location import locations_pb2

from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.service import Core
from ces_eval.errors import Code
from tests.unit.test_core import Harness

PROJECT = "projects/p"


class Located(Harness):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(locations=("us-central1", "europe-west1")),
        )

    def ids(self, **fields: object) -> list[str]:
        response = self.call(
            "list_locations", locations_pb2.ListLocationsRequest(name=PROJECT, **fields)
        )
        return [location.location_id for location in response.locations]


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Located]:
    harness = Located(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def test_locations_are_the_configured_and_the_used_ones(core: Located) -> None:
    assert core.ids() == ["europe-west1", "us-central1"]
    core.create("One", "e1")  # in projects/p/locations/l
    assert core.ids() == ["europe-west1", "l", "us-central1"]
    location = core.call(
        "get_location", locations_pb2.GetLocationRequest(name=f"{PROJECT}/locations/l")
    )
    assert location == locations_pb2.Location(
        name=f"{PROJECT}/locations/l", location_id="l", display_name="l"
    )
    other = core.call("list_locations", locations_pb2.ListLocationsRequest(name="projects/q"))
    assert [x.name for x in other.locations] == [
        "projects/q/locations/europe-west1",
        "projects/q/locations/us-central1",
    ]


def test_pages_and_filters(core: Located) -> None:
    core.create("One", "e1")
    first = core.call(
        "list_locations", locations_pb2.ListLocationsRequest(name=PROJECT, page_size=2)
    )
    assert [x.location_id for x in first.locations] == ["europe-west1", "l"]
    assert first.next_page_token
    rest = core.call(
        "list_locations",
        locations_pb2.ListLocationsRequest(
            name=PROJECT, page_size=2, page_token=first.next_page_token
        ),
    )
    assert [x.location_id for x in rest.locations] == ["us-central1"]
    assert not rest.next_page_token
    assert core.ids(filter='location_id = "l"') == ["l"]
    assert core.ids(filter='location_id != "l" AND NOT display_name:"europe"') == ["us-central1"]
    assert core.ids(filter='name:"west" OR location_id = l') == ["europe-west1", "l"]
    # A token belongs to the query that issued it.
    error = core.error(
        "list_locations",
        locations_pb2.ListLocationsRequest(
            name=PROJECT, page_size=2, page_token=first.next_page_token, filter="name:x"
        ),
    )
    assert error.code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("method", "request_", "code", "field"),
    [
        (
            "get_location",
            locations_pb2.GetLocationRequest(name=f"{PROJECT}/locations/mars"),
            Code.NOT_FOUND,
            "",
        ),
        (
            "get_location",
            locations_pb2.GetLocationRequest(name="locations/l"),
            Code.INVALID_ARGUMENT,
            "name",
        ),
        (
            "list_locations",
            locations_pb2.ListLocationsRequest(name="projects/p/locations"),
            Code.INVALID_ARGUMENT,
            "name",
        ),
        (
            "list_locations",
            locations_pb2.ListLocationsRequest(name=PROJECT, filter="labels.a = b"),
            Code.INVALID_ARGUMENT,
            "filter",
        ),
        (
            "list_locations",
            locations_pb2.ListLocationsRequest(name=PROJECT, filter="name > a"),
            Code.INVALID_ARGUMENT,
            "filter",
        ),
        (
            "list_locations",
            locations_pb2.ListLocationsRequest(name=PROJECT, page_size=-1),
            Code.INVALID_ARGUMENT,
            "page_size",
        ),
    ],
    ids=["unknown", "bad-name", "bad-project", "unknown-field", "ordering", "negative-page"],
)
def test_bad_requests(core: Located, method: str, request_: object, code: Code, field: str) -> None:
    error = core.error(method, request_)
    assert error.code is code
    assert [v.field for v in error.violations] == ([field] if field else [])
    if code is Code.NOT_FOUND:
        assert error.resource == ("locations.googleapis.com/Location", f"{PROJECT}/locations/mars")
