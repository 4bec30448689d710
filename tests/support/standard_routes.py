"""The HTTP bindings of the standard methods the core serves, as AIP-127 and AIP-131..135 spell
them from the resource's name pattern alone (not from the HTTP rules the protos declare, which
the tests check against these).

Each service's routes start with its version (``/v1beta``, ``/emulator/v1``); then Create and
List bind the parent's pattern and the collection (``POST``, ``GET``), Get and Delete the
resource's (``GET``, ``DELETE``), Update the resource field's name (``PATCH``). The resources
and their methods come from the core's registry (:data:`ces_eval.core.service.RPCS`), so a new
resource's standard methods are expected without a line here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ces_eval.core.aip import standard
from ces_eval.core.service import RPCS

__all__ = ["StandardRoute", "standard_routes"]

# Each service's version prefix (AIP-127: the routes of a service start with its version).
PREFIXES = {
    "google.cloud.ces.v1beta.EvaluationService": "/v1beta",
    "google.cloud.ces.v1beta.AgentService": "/v1beta",
    "ces_eval.emulator.v1.EmulatorService": "/emulator/v1",
}
_VERBS = {"Create": "POST", "Get": "GET", "List": "GET", "Update": "PATCH", "Delete": "DELETE"}
_VARIABLE = re.compile(r"\{([a-z_]+)\}")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class StandardRoute:
    """One served standard method: its service's short name, its RPC, its HTTP verb, its
    HttpRule template (``{parent=projects/*/...}/collection``) and its OpenAPI path
    (``/projects/{project}/.../collection``)."""

    service: str
    rpc: str
    verb: str
    template: str
    path: str

    @property
    def operation_id(self) -> str:
        return f"{self.service}_{self.rpc}"


def standard_routes() -> list[StandardRoute]:
    """Every standard method the core serves, in the registry's order."""
    found = []
    for method_path, rpc in RPCS.items():
        if not isinstance(rpc, standard.StandardMethod):
            continue
        service = method_path[1:].split("/", 1)[0]
        prefix = PREFIXES[service]
        pattern = rpc.resource.pattern.pattern
        parent, collection, _ = pattern.rsplit("/", 2)
        if rpc.verb in ("Create", "List"):
            variable, bound, tail = "parent", parent, f"/{collection}"
        else:
            variable = f"{rpc.resource.field}.name" if rpc.verb == "Update" else "name"
            bound, tail = pattern, ""
        template = f"{prefix}/{{{variable}={_VARIABLE.sub('*', bound)}}}{tail}"
        path = prefix + "/" + _VARIABLE.sub(lambda m: f"{{{_camel(m.group(1))}}}", bound) + tail
        short = service.rsplit(".", 1)[1]
        found.append(StandardRoute(short, rpc.rpc, _VERBS[rpc.verb], template, path))
    return found
