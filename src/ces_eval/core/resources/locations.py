"""The google.cloud.location.Locations mixin: GetLocation and ListLocations.

A project's locations are every location its stored resources' names use (evaluations and
their results, the generic tables' resources, operations: :meth:`Storage.locations`) and the
locations the server is configured with (``ces-eval serve --locations us-central1,...``,
:attr:`Settings.locations`), sorted by ID. Nothing else is known of a location: its display name
is its ID, it has no labels or metadata.

ListLocations pages like every list (AIP-158, tokens bound to the query) and filters with
AIP-160 restrictions on ``name``, ``location_id`` and ``display_name`` (``=``, ``!=``, and
``:`` for a substring), joined by AND, OR and NOT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.cloud.location import locations_pb2

from ces_eval import filtering
from ces_eval.core.aip import names
from ces_eval.core.aip.pages import page_size
from ces_eval.core.aip.standard import filter_error, parse_filter
from ces_eval.errors import ServiceError
from ces_eval.storage.base import Cursor

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["LOCATION", "PROJECT", "RPCS"]

PROJECT = names.ResourcePattern("cloudresourcemanager.googleapis.com/Project", "projects/{project}")
LOCATION = names.ResourcePattern(
    "locations.googleapis.com/Location", "projects/{project}/locations/{location}"
)
_FIELDS = ("name", "location_id", "display_name")


async def _known(context: Context, project: str) -> list[str]:
    """The project's location IDs: used by its resources or configured, sorted."""
    used = await context.storage.locations(project)
    return sorted({*used, *context.settings.locations})


def _location(project: str, location_id: str) -> locations_pb2.Location:
    return locations_pb2.Location(
        name=f"projects/{project}/locations/{location_id}",
        location_id=location_id,
        display_name=location_id,
    )


def _matches(expr: filtering.Expr, location: locations_pb2.Location) -> bool:
    """Whether ``location`` satisfies the filter ``expr`` (fields checked by :func:`_check`)."""
    if isinstance(expr, filtering.And):
        return all(_matches(e, location) for e in expr.operands)
    if isinstance(expr, filtering.Or):
        return any(_matches(e, location) for e in expr.operands)
    if isinstance(expr, filtering.Not):
        return not _matches(expr.operand, location)
    if isinstance(expr, filtering.Global):
        return any(expr.value in str(getattr(location, f)) for f in _FIELDS)
    value = str(getattr(location, expr.path))
    return {
        filtering.Comparator.EQ: value == expr.value,
        filtering.Comparator.NE: value != expr.value,
    }.get(expr.comparator, expr.value in value)  # HAS: a substring


def _check(expr: filtering.Expr) -> None:
    """Refuse what the filter of locations cannot say: other fields, ordering comparators."""
    if isinstance(expr, filtering.And | filtering.Or):
        for operand in expr.operands:
            _check(operand)
    elif isinstance(expr, filtering.Not):
        _check(expr.operand)
    elif isinstance(expr, filtering.Restriction):
        if expr.path not in _FIELDS:
            raise filter_error(
                filtering.FilterError(
                    f"Unknown field {expr.path!r}; locations filter on {', '.join(_FIELDS)}",
                    expr.position,
                ),
                "filter",
            )
        if expr.comparator not in (
            filtering.Comparator.EQ,
            filtering.Comparator.NE,
            filtering.Comparator.HAS,
        ):
            raise filter_error(
                filtering.FilterError(
                    f"Locations compare with =, != or :, not {expr.comparator.value}",
                    expr.comparator_position,
                ),
                "filter",
            )


async def get_location(
    context: Context, request: locations_pb2.GetLocationRequest, caller: Caller
) -> locations_pb2.Location:
    parts = LOCATION.parse(request.name, "name", owned=0)
    if parts["location"] not in await _known(context, parts["project"]):
        raise ServiceError.not_found(LOCATION.type, request.name)
    return _location(parts["project"], parts["location"])


async def list_locations(
    context: Context, request: locations_pb2.ListLocationsRequest, caller: Caller
) -> locations_pb2.ListLocationsResponse:
    project = PROJECT.parse(request.name, "name", owned=0)["project"]
    size = page_size(request.page_size)
    expr = parse_filter(request.filter, "filter")
    if expr is not None:
        _check(expr)
    query_key = f"locations\x1f{request.name}\x1f{request.filter}"
    tokens = context.page_tokens
    after = tokens.decode(request.page_token, query_key).name if request.page_token else ""
    found = [
        location
        for location in (_location(project, i) for i in await _known(context, project))
        if location.location_id > after and (expr is None or _matches(expr, location))
    ]
    response = locations_pb2.ListLocationsResponse(locations=found[:size])
    if len(found) > size:
        last = found[size - 1].location_id
        response.next_page_token = tokens.encode(query_key, Cursor(last, last))
    return response


RPCS: dict[str, Rpc] = {"GetLocation": get_location, "ListLocations": list_locations}
