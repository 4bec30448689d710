"""An app's agents, tools, toolsets, examples, guardrails and deployments (AgentService): their
declarations over the generic standard methods (Create, Get, List, Update, Delete) and generic
tables, the references they make to each other and the deletes those references refuse.

Each is kept in a generic table declared here, served by the generic standard methods: the
descriptors' field rules (REQUIRED fields, OUTPUT_ONLY fields such as ``generated_summary``,
``validation_errors`` and an example's ``invalid`` never taken from input), AIP-122 IDs,
AIP-154 etags, masks, AIP-160 filters on the columns below, ``order_by`` name, create_time or
update_time. A tool's ``display_name`` is output-only: the name of the tool its ``tool_type``
sets (``python_function.name`` ...).

References (docs/semantics.md, "Agents, tools and the app's other resources") never leave the
app and are checked where they are written: an agent's ``tools``, ``toolsets[].toolset``,
``child_agents`` and ``guardrails``, an example's ``entry_agent``. What an agent or example
names is not deleted (FAILED_PRECONDITION naming who names it) unless the delete request sets
``force``: then the references are removed from them first (each a write of its own, before
the delete), as the delete requests' comments say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ces_eval.core.aip import names, standard
from ces_eval.core.aip.retry import Changed
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.resources import changelogs, versions
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_pb2,
    deployment_pb2,
    example_pb2,
    guardrail_pb2,
    tool_pb2,
    toolset_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import EtagMismatch, ListQuery, Missing, OrderBy, SortKey
from ces_eval.storage.tables import Table

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["AGENTS", "DEPLOYMENTS", "EXAMPLES", "GUARDRAILS", "RPCS", "TOOLS", "TOOLSETS"]

Agent = agent_pb2.Agent
Tool = tool_pb2.Tool


def _derive_tool(tool: Tool, previous: Tool | None, stamp: timestamp_pb2.Timestamp) -> None:
    """A tool's display name: the name of the tool its ``tool_type`` sets (empty when none)."""
    kind = tool.WhichOneof("tool_type")
    tool.display_name = str(getattr(getattr(tool, kind), "name", "")) if kind else ""


def _resource(table: Table[Any], **policy: Any) -> standard.Resource[Any]:  # noqa: ANN401
    """The declaration of a resource of an app kept in ``table``, its changes in the app's
    changelog."""
    return standard.Resource(
        message=table.message,
        parent=names.APP,
        store=standard.Store.of(table),
        journal=changelogs.record,
        **policy,
    )


def _table(name: str, message: type[Message], *filterable: str, unique: bool = True) -> Table[Any]:
    return tables.declare(Table(name, message, filterable, unique_display_name=unique))


# Display names are unique within the app where the descriptors require one: a tool's is
# derived (two tools of one function name may exist), a toolset's optional.
_TOOLS = _table("tools", Tool, "execution_type", unique=False)
_TOOLSETS = _table("toolsets", toolset_pb2.Toolset, "execution_type", unique=False)
_GUARDRAILS = _table("guardrails", guardrail_pb2.Guardrail, "enabled")
_AGENTS = _table("agents", Agent, "tools", "child_agents", "guardrails")
_EXAMPLES = _table("examples", example_pb2.Example, "entry_agent")
_DEPLOYMENTS = _table("deployments", deployment_pb2.Deployment, "app_version")


# -- references ----------------------------------------------------------------------------------


async def _verify_agent(context: Context, agent: Agent) -> list[FieldViolation]:
    """An agent's tools, toolsets, child agents and guardrails exist in its app."""
    app = tables.parent_of(agent.name)
    check = partial(standard.references, context, parent=app)
    found = await check(TOOLS, agent.tools, "agent.tools")
    for index, toolset in enumerate(agent.toolsets):
        path = f"agent.toolsets[{index}].toolset"
        found += await check(TOOLSETS, [toolset.toolset], path, repeated=False)
    found += await check(AGENTS, agent.child_agents, "agent.child_agents")
    found += await check(GUARDRAILS, agent.guardrails, "agent.guardrails")
    return found


async def _verify_example(context: Context, example: example_pb2.Example) -> list[FieldViolation]:
    """An example's entry agent, when set, exists in its app."""
    if not example.entry_agent:
        return []
    app = tables.parent_of(example.name)
    path = "example.entry_agent"
    return await standard.references(
        context, AGENTS, [example.entry_agent], path, app, repeated=False
    )


@dataclass(frozen=True)
class _Referrer:
    """Resources of ``table`` that name another in ``field``: the names one holds
    (``named``) and how one stops naming a given name (``drop``)."""

    table: Table[Any]
    field: str
    named: Callable[[Any], Sequence[str]]
    drop: Callable[[Any, str], None]


def _without(field: str) -> Callable[[Any, str], None]:
    """Drop a name from the repeated string ``field``."""

    def drop(message: Any, name: str) -> None:  # noqa: ANN401 - any referring message
        kept = [value for value in getattr(message, field) if value != name]
        message.ClearField(field)
        getattr(message, field).extend(kept)

    return drop


def _list_referrer(table: Table[Any], field: str) -> _Referrer:
    return _Referrer(table, field, lambda message: getattr(message, field), _without(field))


def _drop_toolset(agent: Agent, name: str) -> None:
    kept = [toolset for toolset in agent.toolsets if toolset.toolset != name]
    agent.ClearField("toolsets")
    agent.toolsets.extend(kept)


def _drop_entry_agent(example: example_pb2.Example, name: str) -> None:
    example.entry_agent = ""


# How many of the resources naming one a refused delete lists.
_LISTED = 10
_PAGE = 500


async def _of_app(context: Context, table: Table[Any], app: str) -> list[Any]:
    """Every resource of ``table`` in ``app``, by name."""
    found: list[Any] = []
    after = None
    while True:
        query = ListQuery(
            parent=app, order=OrderBy(SortKey.NAME, descending=False), limit=_PAGE, after=after
        )
        page = await context.storage.list_rows(table, query)
        found += [table.parse(data) if isinstance(data, bytes) else data for data, _ in page]
        if len(page) < _PAGE:
            return found
        after = page[-1][1]


def _guard(*referrers: _Referrer) -> Callable[[Context, Any, Message], Any]:
    """A delete guard: a resource that ``referrers`` name is not deleted without ``force``
    (FAILED_PRECONDITION naming them); with it, they stop naming it first."""

    async def guard(context: Context, current: Any, request: Message) -> None:  # noqa: ANN401
        name = current.name
        app = tables.parent_of(name)
        naming: list[tuple[_Referrer, Any]] = []
        for referrer in referrers:
            naming += [
                (referrer, message)
                for message in await _of_app(context, referrer.table, app)
                if name in referrer.named(message)
            ]
        if not naming:
            return
        if not getattr(request, "force", False):
            listed = [f"{message.name} ({referrer.field})" for referrer, message in naming]
            more = ", ..." if len(listed) > _LISTED else ""
            kind = names.of(type(current)).type
            raise ServiceError(
                Code.FAILED_PRECONDITION,
                f"{name} is named by {', '.join(listed[:_LISTED])}{more}; remove it from them "
                "first or delete with force.",
                "RESOURCE_IN_USE",
                {"resource": name},
                resource=(kind, name),
            )
        for referrer, message in naming:
            await _forget(context, referrer, message, name)

    return guard


async def _forget(context: Context, referrer: _Referrer, message: Any, name: str) -> None:  # noqa: ANN401
    """``message`` (a stored referrer) rewritten without ``name``; a concurrent change
    of it reruns the delete's round (Changed)."""
    expected = message.etag
    referrer.drop(message, name)
    message.update_time.CopyFrom(now())
    message.etag = new_etag()
    try:
        await context.storage.replace_row(referrer.table, message, expected)
    except (EtagMismatch, Missing) as changed:
        raise Changed from changed


_TOOLSETS_NAMED = _Referrer(
    _AGENTS, "toolsets", lambda agent: [t.toolset for t in agent.toolsets], _drop_toolset
)
_ENTRY_AGENT = _Referrer(_EXAMPLES, "entry_agent", lambda e: [e.entry_agent], _drop_entry_agent)
TOOLS = _resource(_TOOLS, derive=_derive_tool, guard=_guard(_list_referrer(_AGENTS, "tools")))
TOOLSETS = _resource(_TOOLSETS, guard=_guard(_TOOLSETS_NAMED))
GUARDRAILS = _resource(_GUARDRAILS, guard=_guard(_list_referrer(_AGENTS, "guardrails")))
AGENTS = _resource(
    _AGENTS,
    verify=_verify_agent,
    guard=_guard(_list_referrer(_AGENTS, "child_agents"), _ENTRY_AGENT),
)
EXAMPLES = _resource(_EXAMPLES, verify=_verify_example)


async def _verify_deployment(
    context: Context, deployment: deployment_pb2.Deployment
) -> list[FieldViolation]:
    """A deployment's ``app_version`` names a stored version of its app."""
    if not deployment.app_version:
        return []
    return await standard.references(
        context,
        versions.VERSIONS,
        [deployment.app_version],
        "deployment.app_version",
        tables.parent_of(deployment.name),
        repeated=False,
    )


DEPLOYMENTS = _resource(  # ListDeploymentsRequest has no filter
    _DEPLOYMENTS, filters=(), verify=_verify_deployment
)

RPCS: dict[str, Rpc] = {
    rpc: method
    for resource in (AGENTS, EXAMPLES, TOOLS, GUARDRAILS, DEPLOYMENTS, TOOLSETS)
    for rpc, method in standard.methods(
        resource, "Create", "Get", "List", "Update", "Delete"
    ).items()
}
