"""The Locations mixin driven by Google's official Python client (``client.get_location``,
``client.list_locations``) against a server started with
``CES_EVAL_LOCATIONS=us-central1,europe-west1``.

Runs in the official client's own environment (``.venv-client``), never beside ``ces_eval``
(GUIDE §2). Usage: ``locations_scenario.py grpc HOST:PORT`` or ``locations_scenario.py rest
http://HOST:PORT``. Prints one JSON line per step and exits non-zero on the first failed
assertion.
"""

from __future__ import annotations

import sys
from typing import Any

import grpc

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import details_of, golden, step  # type: ignore[import-not-found]
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import grpc as grpc_transport
from google.cloud.location import locations_pb2


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


def main(transport: str, target: str) -> int:
    if transport == "grpc":
        channel = grpc.insecure_channel(target)
        client = ces_v1beta.EvaluationServiceClient(
            transport=grpc_transport.EvaluationServiceGrpcTransport(channel=channel)
        )
    else:
        client = ces_v1beta.EvaluationServiceClient(
            transport="rest",
            client_options={"api_endpoint": target},
            credentials=AnonymousCredentials(),
        )
    scenario(client, transport)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
