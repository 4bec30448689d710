"""An app's agents, tools, toolsets, examples, guardrails and deployments through the core
(AgentService RPCs by name), over a real SQLite file: table-driven where the six behave alike
(IDs, ALREADY_EXISTS, NOT_FOUND naming the resource, masks, etags, filters, order_by, OUTPUT_ONLY
ignored), then what is theirs (references checked, delete guards and ``force``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import field_mask_pb2
from google.protobuf.message import Message

from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import (
    agent_pb2,
    agent_service_pb2,
    agent_transfers_pb2,
    app_pb2,
    app_version_pb2,
    client_function_pb2,
    common_pb2,
    deployment_pb2,
    example_pb2,
    guardrail_pb2,
    mcp_toolset_pb2,
    tool_pb2,
    toolset_pb2,
)
from tests.unit.test_core import APP, Harness, core, violations

__all__ = ["core"]  # the fixture, used by name

S = agent_service_pb2
OTHER_APP = "projects/p/locations/l/apps/b"


@dataclass(frozen=True)
class Kind:
    """One resource: its message's name (the RPCs' suffix), a valid body of a given display
    name, its filterable field with a value the body gives, whether display names are unique
    and whether its list has a filter."""

    name: str
    body: Callable[[str], Message]
    filter: str
    display_name_unique: bool = True
    listed_by_filter: bool = True

    @property
    def field(self) -> str:
        return "".join("_" + c.lower() if c.isupper() else c for c in self.name).lstrip("_")

    def request(self, verb: str, **fields: Any) -> Message:
        plural = "s" if verb == "List" else ""
        return getattr(S, f"{verb}{self.name}{plural}Request")(**fields)

    def method(self, verb: str) -> str:
        plural = "s" if verb == "List" else ""
        return f"{verb.lower()}_{self.field}{plural}"


def _tool(display_name: str) -> Message:
    return tool_pb2.Tool(
        client_function=client_function_pb2.ClientFunction(name=display_name),
        execution_type=tool_pb2.ExecutionType.SYNCHRONOUS,
        generated_summary="from the caller",
    )


KINDS = [
    Kind(
        "Agent",
        lambda d: agent_pb2.Agent(display_name=d, generated_summary="x", validation_errors=["x"]),
        'display_name = "{}"',
    ),
    Kind("Tool", _tool, 'execution_type = SYNCHRONOUS AND display_name = "{}"', False),
    Kind(
        "Toolset",
        lambda d: toolset_pb2.Toolset(
            display_name=d,
            mcp_toolset=mcp_toolset_pb2.McpToolset(server_address="https://mcp.example.com"),
        ),
        'display_name = "{}"',
        False,
    ),
    Kind(
        "Example",
        lambda d: example_pb2.Example(display_name=d, invalid=True),
        'display_name = "{}"',
    ),
    Kind(
        "Guardrail",
        lambda d: guardrail_pb2.Guardrail(display_name=d, enabled=True),
        'enabled = true AND display_name = "{}"',
    ),
    Kind(
        "Deployment",
        lambda d: deployment_pb2.Deployment(
            display_name=d, channel_profile=common_pb2.ChannelProfile()
        ),
        "",
        listed_by_filter=False,
    ),
]
each_kind = pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])


def make(core: Harness, kind: Kind, display_name: str, resource_id: str = "") -> Any:
    request = kind.request(
        "Create",
        parent=APP,
        **{f"{kind.field}_id": resource_id, kind.field: kind.body(display_name)},
    )
    return core.call(kind.method("Create"), request)


@each_kind
def test_create_names_stamps_and_ignores_output_only_fields(core: Harness, kind: Kind) -> None:
    created = make(core, kind, "One", "one")
    assert created.name == f"{APP}/{kind.field}s/one"
    assert created.etag and created.create_time == created.update_time
    for output_only in ("generated_summary", "validation_errors", "invalid"):
        if output_only in created.DESCRIPTOR.fields_by_name:
            assert not getattr(created, output_only)
    assert core.call(kind.method("Get"), kind.request("Get", name=created.name)) == created
    generated = make(core, kind, "Two")
    assert generated.name.startswith(f"{APP}/{kind.field}s/")
    assert generated.name != created.name


@each_kind
def test_taken_ids_and_display_names_and_bad_ids(core: Harness, kind: Kind) -> None:
    first = make(core, kind, "One", "one")
    taken = core.error(
        kind.method("Create"),
        kind.request(
            "Create", parent=APP, **{f"{kind.field}_id": "one", kind.field: kind.body("X")}
        ),
    )
    assert (taken.code, first.name in taken.message) == (Code.ALREADY_EXISTS, True)
    bad = core.error(
        kind.method("Create"),
        kind.request(
            "Create", parent=APP, **{f"{kind.field}_id": "Not_An_Id", kind.field: kind.body("Y")}
        ),
    )
    assert (bad.code, violations(bad)) == (Code.INVALID_ARGUMENT, [f"{kind.field}_id"])
    if kind.display_name_unique:
        again = core.error(
            kind.method("Create"),
            kind.request("Create", parent=APP, **{kind.field: kind.body("One")}),
        )
        assert again.code == Code.ALREADY_EXISTS
    else:
        make(core, kind, "One")  # a second of that display name


@each_kind
def test_missing_is_not_found_naming_the_resource(core: Harness, kind: Kind) -> None:
    name = f"{APP}/{kind.field}s/absent"
    for verb in ("Get", "Delete"):
        error = core.error(kind.method(verb), kind.request(verb, name=name))
        assert error.code == Code.NOT_FOUND
        assert error.resource == (f"ces.googleapis.com/{kind.name}", name)


@each_kind
def test_update_applies_the_mask_and_checks_the_etag(core: Harness, kind: Kind) -> None:
    created = make(core, kind, "One", "one")
    change = type(created)()
    change.CopyFrom(created)
    change.ClearField("create_time")
    if "description" in change.DESCRIPTOR.fields_by_name:
        change.description = "Described."
    path = "description" if "description" in change.DESCRIPTOR.fields_by_name else "display_name"
    if path == "display_name":
        change.display_name = "Renamed"
    if kind.name == "Tool":  # its display name is its function's
        change.client_function.name = "renamed"
        path = "client_function"
    mask = field_mask_pb2.FieldMask(paths=[path])
    updated = core.call(
        kind.method("Update"),
        kind.request("Update", **{kind.field: change, "update_mask": mask}),
    )
    assert updated.etag != created.etag and updated.create_time == created.create_time
    if kind.name == "Tool":
        assert updated.display_name == "renamed"
    stale = core.error(
        kind.method("Update"),
        kind.request("Update", **{kind.field: change, "update_mask": mask}),
    )  # change still carries the first etag
    assert stale.code == Code.ABORTED
    unknown = core.error(
        kind.method("Update"),
        kind.request(
            "Update",
            **{kind.field: updated, "update_mask": field_mask_pb2.FieldMask(paths=["nope"])},
        ),
    )
    assert (unknown.code, violations(unknown)) == (Code.INVALID_ARGUMENT, ["update_mask"])
    refused = core.error(
        kind.method("Delete"), kind.request("Delete", name=created.name, etag=created.etag)
    )
    assert refused.code == Code.ABORTED
    core.call(kind.method("Delete"), kind.request("Delete", name=created.name, etag=updated.etag))
    assert core.error(kind.method("Get"), kind.request("Get", name=created.name)).code == (
        Code.NOT_FOUND
    )


@each_kind
def test_list_orders_filters_and_pages(core: Harness, kind: Kind) -> None:
    for index in range(3):
        make(core, kind, f"item-{index}", f"item-{index}")
    ordered = core.call(kind.method("List"), kind.request("List", parent=APP, order_by="name desc"))
    items = getattr(ordered, f"{kind.field}s")
    assert [i.name.rsplit("/", 1)[1] for i in items] == ["item-2", "item-1", "item-0"]
    first = core.call(kind.method("List"), kind.request("List", parent=APP, page_size=2))
    assert len(getattr(first, f"{kind.field}s")) == 2 and first.next_page_token
    rest = core.call(
        kind.method("List"),
        kind.request("List", parent=APP, page_size=2, page_token=first.next_page_token),
    )
    assert len(getattr(rest, f"{kind.field}s")) == 1 and not rest.next_page_token
    other = core.call(kind.method("List"), kind.request("List", parent=OTHER_APP))
    assert not getattr(other, f"{kind.field}s")
    if kind.listed_by_filter:
        wanted = kind.filter.format("item-1")
        page = core.call(kind.method("List"), kind.request("List", parent=APP, filter=wanted))
        assert [i.display_name for i in getattr(page, f"{kind.field}s")] == ["item-1"]
        error = core.error(kind.method("List"), kind.request("List", parent=APP, filter="nope = 1"))
        assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, ["filter"])


# -- references ----------------------------------------------------------------------------------

KIND = {kind.name: kind for kind in KINDS}


def _agent(core: Harness, display_name: str, agent_id: str, **fields: Any) -> Any:
    request = S.CreateAgentRequest(
        parent=APP, agent_id=agent_id, agent=agent_pb2.Agent(display_name=display_name, **fields)
    )
    return core.call("create_agent", request)


def test_an_agent_names_only_existing_resources_of_its_app(core: Harness) -> None:
    tool = make(core, KIND["Tool"], "lookup", "lookup")
    toolset = make(core, KIND["Toolset"], "Mcp", "mcp")
    guardrail = make(core, KIND["Guardrail"], "Safe", "safe")
    error = core.error(
        "create_agent",
        S.CreateAgentRequest(
            parent=APP,
            agent=agent_pb2.Agent(
                display_name="Root",
                tools=[tool.name, f"{APP}/tools/absent", f"{OTHER_APP}/tools/lookup"],
                toolsets=[agent_pb2.Agent.AgentToolset(toolset=f"{APP}/toolsets/absent")],
                child_agents=[f"{APP}/agents/absent"],
                guardrails=["not a name"],
            ),
        ),
    )
    assert error.code == Code.INVALID_ARGUMENT
    assert violations(error) == [
        "agent.tools[1]",
        "agent.tools[2]",
        "agent.toolsets[0].toolset",
        "agent.child_agents[0]",
        "agent.guardrails[0]",
    ]
    child = _agent(core, "Child", "child")
    root = _agent(
        core,
        "Root",
        "root",
        tools=[tool.name],
        toolsets=[agent_pb2.Agent.AgentToolset(toolset=toolset.name, tool_ids=["a"])],
        child_agents=[child.name],
        guardrails=[guardrail.name],
    )
    assert list(root.tools) == [tool.name]
    for wanted in (f'tools:"{tool.name}"', 'tools:"lookup"', f'child_agents:"{child.name}"'):
        page = core.call("list_agents", S.ListAgentsRequest(parent=APP, filter=wanted))
        assert [agent.name for agent in page.agents] == [root.name], wanted
    change = agent_pb2.Agent(name=root.name, tools=[f"{APP}/tools/gone"])
    refused = core.error(
        "update_agent",
        S.UpdateAgentRequest(agent=change, update_mask=field_mask_pb2.FieldMask(paths=["tools"])),
    )
    assert violations(refused) == ["agent.tools[0]"]


def test_an_example_names_an_existing_entry_agent(core: Harness) -> None:
    error = core.error(
        "create_example",
        S.CreateExampleRequest(
            parent=APP,
            example=example_pb2.Example(display_name="E", entry_agent=f"{APP}/agents/absent"),
        ),
    )
    assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, ["example.entry_agent"])


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("Tool", "tools"),
        ("Toolset", "toolsets"),
        ("Guardrail", "guardrails"),
        ("Agent", "child_agents"),
    ],
)
def test_what_an_agent_names_is_deleted_only_with_force(
    core: Harness, kind: str, field: str
) -> None:
    named = (
        _agent(core, "Named", "named")
        if kind == "Agent"
        else make(core, KIND[kind], "named", "named")
    )
    kept = make(core, KIND["Tool"], "kept", "kept")
    references: dict[str, Any] = {
        "tools": {"tools": [named.name, kept.name]},
        "toolsets": {"toolsets": [agent_pb2.Agent.AgentToolset(toolset=named.name)]},
        "guardrails": {"guardrails": [named.name]},
        "child_agents": {"child_agents": [named.name]},
    }[field]
    root = _agent(core, "Root", "root", **references)
    method = KIND[kind].method("Delete")
    error = core.error(method, KIND[kind].request("Delete", name=named.name))
    assert (error.code, error.reason) == (Code.FAILED_PRECONDITION, "RESOURCE_IN_USE")
    assert f"{root.name} ({field})" in error.message
    core.call(method, KIND[kind].request("Delete", name=named.name, force=True))
    after = core.call("get_agent", S.GetAgentRequest(name=root.name))
    assert after.etag != root.etag
    if field == "tools":
        assert list(after.tools) == [kept.name]  # only the deleted one removed
    else:
        assert not getattr(after, field)


def test_an_agent_an_example_enters_by_is_deleted_only_with_force(core: Harness) -> None:
    agent = _agent(core, "Entry", "entry")
    example = core.call(
        "create_example",
        S.CreateExampleRequest(
            parent=APP, example=example_pb2.Example(display_name="E", entry_agent=agent.name)
        ),
    )
    error = core.error("delete_agent", S.DeleteAgentRequest(name=agent.name))
    assert example.name in error.message
    core.call("delete_agent", S.DeleteAgentRequest(name=agent.name, force=True))
    assert not core.call("get_example", S.GetExampleRequest(name=example.name)).entry_agent


def _changes(core: Harness, resource: str) -> list[Any]:
    """The changelog entries of ``resource``, newest first."""
    listed = core.call(
        "list_changelogs", S.ListChangelogsRequest(parent=APP, filter=f'resource = "{resource}"')
    )
    return list(listed.changelogs)


def test_what_the_app_names_is_deleted_only_with_force(core: Harness) -> None:
    root = _agent(core, "Root", "root")
    guardrail = make(core, KIND["Guardrail"], "Safe", "safe")
    kept = make(core, KIND["Guardrail"], "Kept", "kept")
    app = core.call(
        "update_app",
        S.UpdateAppRequest(
            app=app_pb2.App(name=APP, root_agent=root.name, guardrails=[guardrail.name, kept.name]),
            update_mask=field_mask_pb2.FieldMask(paths=["root_agent", "guardrails"]),
        ),
    )
    for method, request, field in (
        ("delete_agent", S.DeleteAgentRequest(name=root.name), "root_agent"),
        ("delete_guardrail", S.DeleteGuardrailRequest(name=guardrail.name), "guardrails"),
    ):
        error = core.error(method, request)
        assert (error.code, error.reason) == (Code.FAILED_PRECONDITION, "RESOURCE_IN_USE")
        assert f"{APP} ({field})" in error.message and "force" in error.message
    core.call("delete_guardrail", S.DeleteGuardrailRequest(name=guardrail.name, force=True))
    core.call("delete_agent", S.DeleteAgentRequest(name=root.name, force=True))
    after = core.call("get_app", S.GetAppRequest(name=APP))
    assert (after.root_agent, list(after.guardrails)) == ("", [kept.name])
    assert after.etag != app.etag
    # Each removal is the caller's update of the app, in its changelog.
    updates = [e for e in _changes(core, APP) if e.action == "Update"]
    assert [e.description for e in updates[:2]] == [
        "Updated App fields: root_agent.",
        "Updated App fields: guardrails.",
    ]
    assert updates[0].author == "me@example.com"


def test_an_agent_transfers_name_guard_its_delete(core: Harness) -> None:
    target = _agent(core, "Target", "target")
    rule = agent_transfers_pb2.TransferRule(
        child_agent=target.name,
        direction=agent_transfers_pb2.TransferRule.Direction.PARENT_TO_CHILD,
    )
    parent = _agent(core, "Parent", "parent", transfer_rules=[rule])
    guardrail = core.call(
        "create_guardrail",
        S.CreateGuardrailRequest(
            parent=APP,
            guardrail=guardrail_pb2.Guardrail(
                display_name="Hand over",
                action=common_pb2.TriggerAction(
                    transfer_agent=common_pb2.TriggerAction.TransferAgent(agent=target.name)
                ),
            ),
        ),
    )
    error = core.error("delete_agent", S.DeleteAgentRequest(name=target.name))
    assert f"{parent.name} (transfer_rules)" in error.message
    assert f"{guardrail.name} (action.transfer_agent.agent)" in error.message
    core.call("delete_agent", S.DeleteAgentRequest(name=target.name, force=True))
    assert not core.call("get_agent", S.GetAgentRequest(name=parent.name)).transfer_rules
    after = core.call("get_guardrail", S.GetGuardrailRequest(name=guardrail.name))
    assert not after.action.HasField("transfer_agent")
    assert [e.action for e in _changes(core, parent.name)] == ["Update", "Create"]


def test_a_version_a_deployment_serves_is_not_deleted(core: Harness) -> None:
    served = core.call(
        "create_app_version",
        S.CreateAppVersionRequest(
            parent=APP, app_version_id="v1", app_version=app_version_pb2.AppVersion()
        ),
    )
    trial = core.call(
        "create_app_version",
        S.CreateAppVersionRequest(
            parent=APP, app_version_id="v2", app_version=app_version_pb2.AppVersion()
        ),
    )
    unused = core.call(
        "create_app_version",
        S.CreateAppVersionRequest(
            parent=APP, app_version_id="v3", app_version=app_version_pb2.AppVersion()
        ),
    )
    body = KIND["Deployment"].body("Live")
    body.app_version = served.name
    body.experiment_config.version_release.traffic_allocations.add(app_version=trial.name)
    deployment = core.call(
        "create_deployment", S.CreateDeploymentRequest(parent=APP, deployment=body)
    )
    for version in (served, trial):
        error = core.error("delete_app_version", S.DeleteAppVersionRequest(name=version.name))
        assert (error.code, error.reason) == (Code.FAILED_PRECONDITION, "RESOURCE_IN_USE")
        assert f"{deployment.name} (app_version)" in error.message
        assert "force" not in error.message  # DeleteAppVersionRequest has none
    core.call("delete_app_version", S.DeleteAppVersionRequest(name=unused.name))
    core.call("delete_deployment", S.DeleteDeploymentRequest(name=deployment.name))
    core.call("delete_app_version", S.DeleteAppVersionRequest(name=served.name))


def test_transfers_and_deployed_versions_name_existing_resources(core: Harness) -> None:
    absent_agent, absent_version = f"{APP}/agents/absent", f"{APP}/versions/absent"
    rule = agent_transfers_pb2.TransferRule(
        child_agent=absent_agent,
        direction=agent_transfers_pb2.TransferRule.Direction.PARENT_TO_CHILD,
    )
    refused = core.error(
        "create_agent",
        S.CreateAgentRequest(
            parent=APP, agent=agent_pb2.Agent(display_name="A", transfer_rules=[rule])
        ),
    )
    assert violations(refused) == ["agent.transfer_rules[0].child_agent"]
    action = common_pb2.TriggerAction(
        transfer_agent=common_pb2.TriggerAction.TransferAgent(agent=absent_agent)
    )
    refused = core.error(
        "create_guardrail",
        S.CreateGuardrailRequest(
            parent=APP, guardrail=guardrail_pb2.Guardrail(display_name="G", action=action)
        ),
    )
    assert violations(refused) == ["guardrail.action.transfer_agent.agent"]
    body = KIND["Deployment"].body("Live")
    body.experiment_config.version_release.traffic_allocations.add(app_version=absent_version)
    refused = core.error(
        "create_deployment", S.CreateDeploymentRequest(parent=APP, deployment=body)
    )
    assert violations(refused) == [
        "deployment.experiment_config.version_release.traffic_allocations[0].app_version"
    ]


def test_a_forced_delete_removes_the_references_in_its_own_transaction(
    core: Harness, tmp_path: Path
) -> None:
    """The referrers' rewrites and the delete are one transaction: a delete the database
    refuses leaves the references where they were."""
    tool = make(core, KIND["Tool"], "lookup", "lookup")
    root = _agent(core, "Root", "root", tools=[tool.name])
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        connection.execute(
            "CREATE TRIGGER refuse BEFORE DELETE ON tools "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    connection.close()
    with pytest.raises(sqlite3.IntegrityError, match="refused by the test"):
        core.call("delete_tool", S.DeleteToolRequest(name=tool.name, force=True))
    assert core.call("get_agent", S.GetAgentRequest(name=root.name)) == root
    assert [e.action for e in _changes(core, root.name)] == ["Create"]
