"""The Locations mixin driven by Google's official Python client (``client.get_location``,
``client.list_locations``) against a server started with
``CES_EVAL_LOCATIONS=us-central1,europe-west1``.

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions
from google.cloud.location import locations_pb2

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import golden  # type: ignore[import-not-found]
from harness import details_of, main, step  # type: ignore[import-not-found]


def _ids(client: Any, project: str, **fields: Any) -> list[str]:
    response = client.list_locations(
        request=locations_pb2.ListLocationsRequest(name=project, **fields)
    )
    return [location.location_id for location in response.locations]


def scenario(client: Any, transport: str) -> None:
    project = f"projects/locations-{transport}"
    assert _ids(client, project) == ["europe-west1", "us-central1"]
    client.create_evaluation(
        parent=f"{project}/locations/asia-east1/apps/a", evaluation=golden("Somewhere")
    )
    assert _ids(client, project) == ["asia-east1", "europe-west1", "us-central1"]
    assert _ids(client, project, filter='location_id = "asia-east1"') == ["asia-east1"]
    paged = client.list_locations(
        request=locations_pb2.ListLocationsRequest(name=project, page_size=2)
    )
    assert [x.location_id for x in paged.locations] == ["asia-east1", "europe-west1"]
    assert paged.next_page_token
    step("list", locations=_ids(client, project))
    location = client.get_location(
        request=locations_pb2.GetLocationRequest(name=f"{project}/locations/asia-east1")
    )
    assert location.name == f"{project}/locations/asia-east1"
    assert location.location_id == "asia-east1"
    step("get", location=location.name)
    try:
        client.get_location(
            request=locations_pb2.GetLocationRequest(name=f"{project}/locations/moon")
        )
    except exceptions.NotFound as error:
        step("unknown", **details_of(error))
    else:
        raise AssertionError("a location nothing uses was found")


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.transport))
