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
``child_agents``, ``transfer_rules[].child_agent`` and ``guardrails``, an example's
``entry_agent``, a guardrail's ``action.transfer_agent.agent``. What the app, an agent, an
example or a guardrail names is not deleted (FAILED_PRECONDITION naming who names it) unless
the delete request sets ``force``: then the references are removed from them first, as the
delete requests' comments say (:mod:`.in_use`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ces_eval.core.aip import names, standard
from ces_eval.core.resources import changelogs, in_use, versions
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_pb2,
    app_pb2,
    deployment_pb2,
    example_pb2,
    guardrail_pb2,
    tool_pb2,
    toolset_pb2,
)
from ces_eval.storage import tables
from ces_eval.storage.base import ListQuery, OrderBy, SortKey
from ces_eval.storage.tables import Table

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.errors import FieldViolation

__all__ = [
    "AGENTS",
    "DEPLOYMENTS",
    "EXAMPLES",
    "GUARDRAILS",
    "RPCS",
    "TOOLS",
    "TOOLSETS",
    "tool_kinds",
]

Agent = agent_pb2.Agent
Tool = tool_pb2.Tool


def _derive_tool(tool: Tool, previous: Tool | None, stamp: timestamp_pb2.Timestamp) -> None:
    """A tool's display name: the name of the tool its ``tool_type`` sets (empty when none)."""
    kind = tool.WhichOneof("tool_type")
    tool.display_name = str(getattr(getattr(tool, kind), "name", "")) if kind else ""


def _resource(
    table: Table[Any],
    journal: standard.Journal[Any] = changelogs.record,
    **policy: Any,  # noqa: ANN401
) -> standard.Resource[Any]:
    """The declaration of a resource of an app kept in ``table``, its changes in the app's
    changelog (by ``journal``)."""
    return standard.Resource(
        message=table.message,
        parent=names.APP,
        store=standard.Store.of(table),
        journal=journal,
        **policy,
    )


# Whether an app has tools, and whether it has toolsets (in Context.recent, trusted for its
# second): an evaluation's tool and toolset names are checked only against a kind its app has
# (docs/semantics.md, "Agents, tools and the app's other resources"), and most apps have
# neither, so a create or update of an evaluation reads this instead of the two tables. A
# create or delete of a tool or toolset in this process forgets it at once.
_TOOL_KINDS = "app-tool-kinds"


async def tool_kinds(context: Context, app: str) -> tuple[bool, bool]:
    """Whether ``app`` has (tools, toolsets) (learnt within the last second)."""
    key = (_TOOL_KINDS, app)
    known = context.recent.get(key)
    if isinstance(known, tuple):
        return known[0], known[1]
    first = ListQuery(parent=app, order=OrderBy(SortKey.NAME, descending=False), limit=1)
    found = (
        bool(await context.storage.list_rows(_TOOLS, first)),
        bool(await context.storage.list_rows(_TOOLSETS, first)),
    )
    context.recent.put(key, found)
    return found


async def _journal_of_tools(
    context: Context, action: str, before: Message | None, after: Message | None, caller: Caller
) -> None:
    """The changelog's entry; and what :func:`tool_kinds` knew of the app is forgotten."""
    await changelogs.record(context, action, before, after, caller)
    changed = after if after is not None else before
    if changed is not None and action != "Update":
        context.recent.drop((_TOOL_KINDS, names.app_of(getattr(changed, "name"))))  # noqa: B009


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
    for index, rule in enumerate(agent.transfer_rules):
        path = f"agent.transfer_rules[{index}].child_agent"
        found += await check(AGENTS, [rule.child_agent], path, repeated=False)
    found += await check(GUARDRAILS, agent.guardrails, "agent.guardrails")
    return found


async def _verify_guardrail(
    context: Context, guardrail: guardrail_pb2.Guardrail
) -> list[FieldViolation]:
    """The agent a guardrail's action transfers to, when it has one, exists in its app."""
    named = _transfer_target(guardrail)
    if not named:
        return []
    path = "guardrail.action.transfer_agent.agent"
    app = tables.parent_of(guardrail.name)
    return await standard.references(context, AGENTS, named, path, app, repeated=False)


async def _verify_example(context: Context, example: example_pb2.Example) -> list[FieldViolation]:
    """An example's entry agent, when set, exists in its app."""
    if not example.entry_agent:
        return []
    app = tables.parent_of(example.name)
    path = "example.entry_agent"
    return await standard.references(
        context, AGENTS, [example.entry_agent], path, app, repeated=False
    )


def _drop_toolset(agent: Agent, name: str) -> None:
    kept = [toolset for toolset in agent.toolsets if toolset.toolset != name]
    agent.ClearField("toolsets")
    agent.toolsets.extend(kept)


def _drop_transfer_rules(agent: Agent, name: str) -> None:
    kept = [rule for rule in agent.transfer_rules if rule.child_agent != name]
    agent.ClearField("transfer_rules")
    agent.transfer_rules.extend(kept)


def _drop_entry_agent(example: example_pb2.Example, name: str) -> None:
    example.entry_agent = ""


def _drop_root_agent(app: app_pb2.App, name: str) -> None:
    app.root_agent = ""


def _transfer_target(guardrail: guardrail_pb2.Guardrail) -> list[str]:
    action = guardrail.action
    return [action.transfer_agent.agent] if action.HasField("transfer_agent") else []


def _drop_transfer(guardrail: guardrail_pb2.Guardrail, name: str) -> None:
    guardrail.action.ClearField("transfer_agent")


# Who names each kind: what its delete guard looks for (in_use).
_TOOLSETS_NAMED = in_use.Referrer(
    Agent, "toolsets", lambda agent: [t.toolset for t in agent.toolsets], _drop_toolset
)
_TRANSFER_RULES = in_use.Referrer(
    Agent,
    "transfer_rules",
    lambda agent: [rule.child_agent for rule in agent.transfer_rules],
    _drop_transfer_rules,
)
_ENTRY_AGENT = in_use.Referrer(
    example_pb2.Example, "entry_agent", lambda e: [e.entry_agent], _drop_entry_agent
)
_TRANSFER_ACTION = in_use.Referrer(
    guardrail_pb2.Guardrail, "action.transfer_agent.agent", _transfer_target, _drop_transfer
)
_ROOT_AGENT = in_use.Referrer(
    app_pb2.App, "root_agent", lambda app: [app.root_agent], _drop_root_agent, app=True
)
TOOLS = _resource(
    _TOOLS,
    _journal_of_tools,
    derive=_derive_tool,
    guard=in_use.guard(in_use.listed_in(Agent, "tools")),
)
TOOLSETS = _resource(_TOOLSETS, _journal_of_tools, guard=in_use.guard(_TOOLSETS_NAMED))
GUARDRAILS = _resource(
    _GUARDRAILS,
    verify=_verify_guardrail,
    guard=in_use.guard(
        in_use.listed_in(app_pb2.App, "guardrails", app=True),
        in_use.listed_in(Agent, "guardrails"),
    ),
)
AGENTS = _resource(
    _AGENTS,
    verify=_verify_agent,
    guard=in_use.guard(
        _ROOT_AGENT,
        in_use.listed_in(Agent, "child_agents"),
        _TRANSFER_RULES,
        _ENTRY_AGENT,
        _TRANSFER_ACTION,
    ),
)
EXAMPLES = _resource(_EXAMPLES, verify=_verify_example)


async def _verify_deployment(
    context: Context, deployment: deployment_pb2.Deployment
) -> list[FieldViolation]:
    """A deployment's ``app_version``, and each version its experiment sends traffic to,
    names a stored version of its app."""
    release = "deployment.experiment_config.version_release"
    named = [("deployment.app_version", deployment.app_version)] if deployment.app_version else []
    named += [
        (f"{release}.traffic_allocations[{index}].app_version", allocation.app_version)
        for index, allocation in enumerate(
            deployment.experiment_config.version_release.traffic_allocations
        )
        if allocation.app_version
    ]
    app = tables.parent_of(deployment.name)
    found: list[FieldViolation] = []
    for path, version in named:
        found += await standard.references(
            context, versions.VERSIONS, [version], path, app, repeated=False
        )
    return found


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
