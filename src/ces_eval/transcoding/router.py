"""Routes built once at start from every ``google.api.http`` binding of the services.

Each binding's template is parsed and compiled (a bad template stops the server at start with the
template and the reason). Resolution answers a method and the path variables, or the methods the
path allows (405), or nothing (404).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf import message_factory

from ces_eval.transcoding.templates import PathTemplate, TemplateError, parse_template

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval import schema

__all__ = ["Route", "Router"]


@dataclass(frozen=True)
class Route:
    """One HTTP binding: verb, compiled template, the method and its message classes."""

    binding: schema.HttpBinding
    template: PathTemplate
    request_class: type[Message]

    @property
    def path(self) -> str:
        """gRPC-style method path, the key of the core's handlers."""
        method = self.binding.method
        return f"/{method.containing_service.full_name}/{method.name}"


class Router:
    def __init__(self, bindings: Sequence[schema.HttpBinding]) -> None:
        routes: list[Route] = []
        for binding in bindings:
            try:
                template = parse_template(binding.template)
            except TemplateError as error:
                raise TemplateError(
                    binding.template, f"{binding.method.full_name} ({binding.verb}): {error.reason}"
                ) from error
            request_class = message_factory.GetMessageClass(binding.method.input_type)
            routes.append(Route(binding, template, request_class))
        self.routes = tuple(routes)

    def resolve(self, verb: str, raw_path: str) -> tuple[Route, dict[str, str]] | list[str]:
        """The route and variables for ``verb raw_path``, else the verbs its path allows
        (empty when no binding has this path)."""
        allowed: list[str] = []
        for route in self.routes:
            variables = route.template.match(raw_path)
            if variables is None:
                continue
            if route.binding.verb == verb:
                return route, variables
            if route.binding.verb not in allowed:
                allowed.append(route.binding.verb)
        return allowed
