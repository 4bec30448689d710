"""Routes built once at start from every ``google.api.http`` binding of the services.

Each binding's template is parsed and compiled (a bad template stops the server at start with the
template and the reason). Resolution answers a method and the path variables, or an official route
this server does not serve yet (501), or the methods the path allows (405), or nothing (404).

The official routes come from Google's client (``schema.official_routes``): every binding of a
method whose gRPC path none of the router's bindings binds (the server's router has the bindings
of the methods the core implements, so a method declared but not implemented is among them).
They answer UNIMPLEMENTED naming the method, as gRPC does, rather than 404, which would read like a
missing resource. Our own routes come first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from google.protobuf import message_factory

from ces_eval.contract import schema
from ces_eval.contract.templates import PathTemplate, TemplateError, parse_template

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["Route", "Router", "UnservedRoute"]


@dataclass(frozen=True)
class Route:
    """One HTTP binding: verb, compiled template, the method and its message classes."""

    binding: schema.HttpBinding
    template: PathTemplate
    request_class: type[Message]

    @cached_property
    def path(self) -> str:
        """gRPC-style method path, the key of the core's handlers."""
        return schema.method_path(self.binding.method)


@dataclass(frozen=True)
class UnservedRoute:
    """An official binding of a method this server does not serve yet. It carries no method
    descriptor (our descriptors may not even declare the method), so nothing is parsed: it
    answers 501."""

    binding: schema.OfficialBinding
    template: PathTemplate

    @property
    def path(self) -> str:
        """The official method's gRPC path."""
        return self.binding.path


def _compile(template: str, method: str, verb: str) -> PathTemplate:
    try:
        return parse_template(template)
    except TemplateError as error:
        raise TemplateError(template, f"{method} ({verb}): {error.reason}") from error


class Router:
    def __init__(
        self,
        bindings: Sequence[schema.HttpBinding],
        unserved: Sequence[schema.OfficialBinding] | None = None,
    ) -> None:
        """``unserved``: the official bindings answering 501 (default: those of every official
        method that ``bindings`` does not bind,
        :func:`ces_eval.contract.schema.unserved_bindings`)."""
        routes: list[Route] = []
        for binding in bindings:
            template = _compile(binding.template, binding.method.full_name, binding.verb)
            request_class = message_factory.GetMessageClass(binding.method.input_type)
            routes.append(Route(binding, template, request_class))
        self.routes = tuple(routes)
        if unserved is None:
            unserved = schema.unserved_bindings(bindings)
        self.unserved = tuple(
            UnservedRoute(b, _compile(b.template, b.path.lstrip("/"), b.verb)) for b in unserved
        )

        # Every route, ours before the unserved (the order resolution answers in), by the
        # number of path segments it matches: a request is matched against those alone.
        entries: tuple[Route | UnservedRoute, ...] = (*self.routes, *self.unserved)
        self._longest = max((e.template.counts[0] for e in entries), default=0)
        self._fitting = {
            count: tuple(e for e in entries if _fits_count(e.template, count))
            for count in range(self._longest + 2)
        }

    def resolve(
        self, verb: str, raw_path: str
    ) -> tuple[Route, dict[str, str]] | UnservedRoute | list[str]:
        """The route and variables for ``verb raw_path``, else the unserved official route it
        names, else the verbs its path allows (empty when no binding has this path). Only the
        routes of the path's segment count whose literals it may hold are matched."""
        if not raw_path.startswith("/"):
            return []
        body = raw_path[1:]
        segments = body.split("/") if body else []
        # A ":" in the last segment starts a custom verb (http.proto), registered or not: a
        # template without a verb does not take it as data here, as Google's front ends route
        # (no resource ID of this API holds a ":"), so GET .../apps/a:runEvaluation is 405, not
        # a GetApp of "a:runEvaluation", and .../apps/a:noSuchMethod is 404.
        custom = bool(segments) and ":" in segments[-1]
        allowed: list[str] = []
        for entry in self._fitting[min(len(segments), self._longest + 1)]:
            template = entry.template
            if (custom and template.verb is None) or not template.fits(segments):
                continue
            variables = template.match(raw_path)
            if variables is None:
                continue
            if entry.binding.verb == verb:
                return (entry, variables) if isinstance(entry, Route) else entry
            if entry.binding.verb not in allowed:
                allowed.append(entry.binding.verb)
        return allowed


def _fits_count(template: PathTemplate, count: int) -> bool:
    """Whether a path of ``count`` segments may match ``template``."""
    fixed, more = template.counts
    return count >= fixed if more else count == fixed
