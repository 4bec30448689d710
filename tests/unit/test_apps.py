"""Apps in the core over a real SQLite file (src/ces_eval/core/resources/apps.py): the App
resource, apps before use (implicit, adopted by CreateApp, or NOT_FOUND with ``require_apps``),
locked apps, and DeleteApp deleting what the app holds."""

from __future__ import annotations

import io
import json
import sqlite3
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import field_mask_pb2

from ces_eval.core.aip import names, pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.resources.apps import IMPLICIT
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import agent_pb2 as agent_pb2_
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2 as agent_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    app_pb2,
    app_version_pb2,
    common_pb2,
    deployment_pb2,
    evaluation_config_pb2,
    evaluation_pb2,
    guardrail_pb2,
    tool_pb2,
)
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit import test_official_routes as official_routes
from tests.unit import test_running as running
from tests.unit.test_core import APP, Harness

Rule = emulator_pb2.OutcomeRule
Result = evaluation_pb2.EvaluationResult

LOCATION = APP.rsplit("/apps/", 1)[0]


class Apps(Harness):
    def __init__(self, path: Path, *, require_apps: bool = False) -> None:
        super().__init__(path)
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(require_apps=require_apps),
        )

    def finished(self, operation: operations_pb2.Operation) -> operations_pb2.Operation:
        done = self.run(self.core.context.runner.wait(operation.name, timeout=30))
        assert done is not None and done.done, done
        return done

    def create_app(self, app_id: str, **fields: Any) -> app_pb2.App:
        operation = self.call(
            "create_app",
            agent_pb2.CreateAppRequest(parent=LOCATION, app_id=app_id, app=app_pb2.App(**fields)),
        )
        done = self.finished(operation)
        assert done.HasField("response"), done
        app = app_pb2.App()
        done.response.Unpack(app)
        return app

    def create_lookup_tool(self) -> tool_pb2.Tool:
        """The tool ``{APP}/tools/lookup``, a python function."""
        request = agent_pb2.CreateToolRequest(
            parent=APP,
            tool_id="lookup",
            tool=tool_pb2.Tool(python_function={"name": "lookup", "python_code": "pass"}),
        )
        return self.call("create_tool", request)  # type: ignore[no-any-return]

    def get_app(self, name: str = APP) -> app_pb2.App:
        return self.call("get_app", agent_pb2.GetAppRequest(name=name))  # type: ignore[no-any-return]

    def app_names(self) -> list[str]:
        listed = self.call("list_apps", agent_pb2.ListAppsRequest(parent=LOCATION))
        return [app.name for app in listed.apps]


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Apps]:
    harness = Apps(tmp_path / "db.sqlite")
    yield harness
    harness.close()


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[Apps]:
    harness = Apps(tmp_path / "db.sqlite", require_apps=True)
    yield harness
    harness.close()


def test_create_app_is_long_running_and_stores_the_app(core: Apps) -> None:
    thresholds = evaluation_config_pb2.EvaluationMetricsThresholds()
    thresholds.golden_evaluation_metrics_thresholds.turn_level_metrics_thresholds.semantic_similarity_success_threshold = 4  # noqa: E501
    app = core.create_app(
        "support",
        display_name="Support",
        evaluation_metrics_thresholds=thresholds,
        deployment_count=7,  # output only: never taken from input
    )
    assert app.name == f"{LOCATION}/apps/support"
    assert app.display_name == "Support"
    assert app.etag and app.HasField("create_time")
    assert app.deployment_count == 0
    assert core.get_app(app.name) == app
    assert core.app_names() == [app.name]
    again = core.error(
        "create_app",
        agent_pb2.CreateAppRequest(
            parent=LOCATION, app_id="support", app=app_pb2.App(display_name="Again")
        ),
    )
    assert again.code is Code.ALREADY_EXISTS


def test_an_app_used_before_it_is_created_exists_with_defaults(core: Apps) -> None:
    assert core.error("get_app", agent_pb2.GetAppRequest(name=APP)).code is Code.NOT_FOUND
    core.call("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP))  # a read
    assert core.app_names() == []
    core.create("First")  # a create in the app
    app = core.get_app()
    assert app.display_name == APP.rsplit("/", 1)[1]
    assert dict(app.metadata) == {IMPLICIT: "true"}
    assert not app.HasField("evaluation_metrics_thresholds")
    assert core.app_names() == [APP]
    # An invalid CreateApp of its ID changes nothing (no display name: INVALID_ARGUMENT).
    invalid = core.error(
        "create_app",
        agent_pb2.CreateAppRequest(parent=LOCATION, app_id=APP.rsplit("/", 1)[1], app={}),
    )
    assert invalid.code is Code.INVALID_ARGUMENT
    assert core.get_app() == app
    # CreateApp of its ID adopts it: the app is the caller's, its evaluations stay.
    adopted = core.create_app(APP.rsplit("/", 1)[1], display_name="Adopted")
    assert adopted.display_name == "Adopted" and not adopted.metadata
    listed = core.call("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP))
    assert [e.display_name for e in listed.evaluations] == ["First"]


def test_require_apps_makes_a_missing_app_not_found_everywhere(strict: Apps) -> None:
    for method, request in (
        ("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP)),
        (
            "create_evaluation",
            service_pb2.CreateEvaluationRequest(parent=APP, evaluation={"display_name": "x"}),
        ),
        ("get_evaluation", service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/e")),
    ):
        error = strict.error(method, request)
        assert error.code is Code.NOT_FOUND, method
        assert error.resource == ("ces.googleapis.com/App", APP), method
    assert strict.app_names() == []
    strict.create_app(APP.rsplit("/", 1)[1], display_name="Made")
    assert strict.create("Now").name.startswith(APP + "/evaluations/")


def test_a_locked_app_refuses_changes_until_unlocked(core: Apps) -> None:
    core.create("Kept", "kept")
    app = core.get_app()
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, locked=True),
            update_mask=field_mask_pb2.FieldMask(paths=["locked"]),
        ),
    )
    refused = core.error(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation={"display_name": "x"}),
    )
    assert refused.code is Code.FAILED_PRECONDITION
    assert refused.reason == "APP_LOCKED"
    deleted = core.error(
        "delete_evaluation", service_pb2.DeleteEvaluationRequest(name=f"{APP}/evaluations/kept")
    )
    assert deleted.reason == "APP_LOCKED"
    renamed = core.error(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, display_name="Renamed"),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
        ),
    )
    assert renamed.reason == "APP_LOCKED"
    assert core.error("delete_app", agent_pb2.DeleteAppRequest(name=APP)).reason == "APP_LOCKED"
    # Reads go on; unlocking lets changes through again.
    core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/kept"))
    unlocked = core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, locked=False),
            update_mask=field_mask_pb2.FieldMask(paths=["locked"]),
        ),
    )
    assert not unlocked.locked and unlocked.etag != app.etag
    core.create("Again")


def test_delete_app_deletes_what_it_holds_and_nothing_else(core: Apps) -> None:
    kept = core.create("Kept")
    other_app = f"{LOCATION}/apps/other"
    other = core.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(parent=other_app, evaluation=kept),
    )
    core.seed(kept.name, "r1")
    stale = core.error("delete_app", agent_pb2.DeleteAppRequest(name=APP, etag="stale"))
    assert stale.code is Code.ABORTED
    done = core.finished(core.call("delete_app", agent_pb2.DeleteAppRequest(name=APP)))
    assert done.HasField("response"), done
    assert core.app_names() == [other_app]
    missing = core.error("get_evaluation", service_pb2.GetEvaluationRequest(name=kept.name))
    assert missing.code is Code.NOT_FOUND
    core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=other.name))
    gone = core.error("delete_app", agent_pb2.DeleteAppRequest(name=APP))
    assert gone.code is Code.NOT_FOUND


def changelog(core: Apps, **fields: Any) -> list[Any]:
    listed = core.call("list_changelogs", agent_pb2.ListChangelogsRequest(parent=APP, **fields))
    return list(listed.changelogs)


def test_every_change_of_the_app_is_in_its_changelog(core: Apps) -> None:
    created = core.create_app("a", display_name="First")
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, display_name="Second", description="d"),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name", "description"]),
        ),
    )
    entries = changelog(core)  # newest first
    assert [(e.action, e.sequence_number) for e in entries] == [("Update", 2), ("Create", 1)]
    update, create = entries
    assert create.author == "me@example.com" and create.resource == created.name
    assert create.resource_type == "App" and not create.HasField("original_resource")
    assert create.new_resource["displayName"] == "First"
    assert update.original_resource["displayName"] == "First"
    assert update.new_resource["displayName"] == "Second"
    assert update.description == "Updated App fields: display_name, description."
    assert update.name == f"{APP}/changelogs/change-2"
    assert core.call("get_changelog", agent_pb2.GetChangelogRequest(name=update.name)) == update
    assert [e.action for e in changelog(core, filter='action = "Create"')] == ["Create"]
    assert [e.sequence_number for e in changelog(core, order_by="create_time")] == [2, 1]


def test_a_version_snapshots_the_app_and_restores_it(core: Apps) -> None:
    core.create_app("a", display_name="Original", description="before")
    version = core.call(
        "create_app_version",
        agent_pb2.CreateAppVersionRequest(
            parent=APP,
            app_version_id="v1",
            app_version=app_version_pb2.AppVersion(display_name="V1", creator="someone-else"),
        ),
    )
    assert version.name == f"{APP}/versions/v1"
    assert version.creator == "me@example.com"
    assert version.snapshot.app.display_name == "Original"
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, display_name="Changed"),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
        ),
    )
    missing = core.error(
        "restore_app_version", agent_pb2.RestoreAppVersionRequest(name=f"{APP}/versions/none")
    )
    assert missing.code is Code.NOT_FOUND
    done = core.finished(
        core.call("restore_app_version", agent_pb2.RestoreAppVersionRequest(name=version.name))
    )
    assert done.HasField("response"), done
    restored = core.get_app()
    assert restored.display_name == "Original" and restored.description == "before"
    assert [e.action for e in changelog(core)][:2] == ["Restore", "Update"]
    listed = core.call("list_app_versions", agent_pb2.ListAppVersionsRequest(parent=APP))
    assert [v.name for v in listed.app_versions] == [version.name]


def _thresholds(similarity: int) -> evaluation_config_pb2.EvaluationMetricsThresholds:
    thresholds = evaluation_config_pb2.EvaluationMetricsThresholds()
    golden = thresholds.golden_evaluation_metrics_thresholds
    golden.turn_level_metrics_thresholds.semantic_similarity_success_threshold = similarity
    return thresholds


def _answered(core: Apps) -> evaluation_pb2.Evaluation:
    """A golden whose one turn expects an answer (judged by semantic similarity)."""
    evaluation = evaluation_pb2.Evaluation(display_name="Order")
    turn = evaluation.golden.turns.add()
    turn.steps.add().user_input.text = "Where is order 42?"
    turn.steps.add().expectation.agent_response.chunks.add().text = "It has shipped."
    return core.call(  # type: ignore[no-any-return]
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    )


def test_a_run_follows_its_apps_thresholds_settings_and_version(core: Apps) -> None:
    evaluation = _answered(core)
    running._rule(core, outcome=Rule.PASS, semantic_similarity_score=3)
    # Without app thresholds a similarity of 3 passes (the documented default threshold: 3).
    _, (default,) = running._completed(core, evaluations=[evaluation.name])
    assert default.evaluation_status == Result.PASS
    assert not default.HasField("evaluation_metrics_thresholds")
    settings = evaluation_config_pb2.EvaluationSettings(
        golden_run_method=common_pb2.NAIVE,
        golden_evaluation_tool_call_behaviour=common_pb2.FAKE,
    )
    core.create_app(
        "a",
        display_name="Strict",
        evaluation_metrics_thresholds=_thresholds(4),
        evaluation_settings=settings,
    )
    version = core.call(
        "create_app_version",
        agent_pb2.CreateAppVersionRequest(
            parent=APP, app_version=app_version_pb2.AppVersion(display_name="Release 1")
        ),
    )
    run, (strict,) = running._completed(core, evaluations=[evaluation.name])
    assert strict.evaluation_status == Result.FAIL
    assert strict.evaluation_metrics_thresholds == _thresholds(4)
    assert run.golden_run_method == common_pb2.NAIVE
    assert strict.config.tool_call_behaviour == common_pb2.FAKE
    assert (run.app_version, run.app_version_display_name) == (version.name, "Release 1")
    # The evaluation's own override is closer than the app's.
    core.call(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=evaluation_pb2.Evaluation(
                name=evaluation.name, evaluation_metrics_threshold_override=_thresholds(3)
            ),
            update_mask=field_mask_pb2.FieldMask(paths=["evaluation_metrics_threshold_override"]),
        ),
    )
    # A request's own choice wins over the app's setting.
    run, (overridden,) = running._completed(
        core, evaluations=[evaluation.name], golden_run_method=common_pb2.STABLE
    )
    assert overridden.evaluation_status == Result.PASS
    assert run.golden_run_method == common_pb2.STABLE


def test_scenarios_play_the_apps_personas(core: Apps) -> None:
    scenario = running._scenario(core, "Ask")
    default = f"{APP}/evaluationPersonas/default"
    _, results = running._completed(core, evaluations=[scenario.name], run_count=1)
    assert [r.persona.name for r in results] == [default]
    personas = [
        evaluation_config_pb2.EvaluationPersona(
            name=f"{APP}/evaluationPersonas/alice", display_name="Alice", personality="Calm"
        ),
        evaluation_config_pb2.EvaluationPersona(
            name="bob", display_name="Bob", personality="In a hurry"
        ),
    ]
    core.create_app("a", display_name="App", evaluation_personas=personas)
    _, results = running._completed(core, evaluations=[scenario.name], run_count=1)
    assert [(r.persona.display_name, r.persona.personality) for r in results] == [("Alice", "Calm")]
    config = evaluation_pb2.PersonaRunConfig(persona=f"{APP}/evaluationPersonas/bob", task_count=2)
    _, results = running._completed(core, evaluations=[scenario.name], persona_run_configs=[config])
    assert [r.persona.display_name for r in results] == ["Bob", "Bob"]
    unknown = core.error(
        "run_evaluation",
        evaluation_pb2.RunEvaluationRequest(
            app=APP,
            evaluations=[scenario.name],
            persona_run_configs=[evaluation_pb2.PersonaRunConfig(persona=default)],
        ),
    )
    assert unknown.code is Code.NOT_FOUND
    assert default in unknown.message


def _export(core: Apps, name: str = APP, **fields: Any) -> agent_pb2.ExportAppResponse:
    done = core.finished(
        core.call(
            "export_app",
            agent_pb2.ExportAppRequest(
                name=name, export_format=agent_pb2.ExportAppRequest.JSON, **fields
            ),
        )
    )
    assert done.HasField("response"), done
    response = agent_pb2.ExportAppResponse()
    done.response.Unpack(response)
    return response


def _import(core: Apps, **fields: Any) -> agent_pb2.ImportAppResponse:
    done = core.finished(
        core.call("import_app", agent_pb2.ImportAppRequest(parent=LOCATION, **fields))
    )
    assert done.HasField("response"), done
    response = agent_pb2.ImportAppResponse()
    done.response.Unpack(response)
    return response


def test_an_exported_app_imports_into_a_new_app_and_exports_the_same(core: Apps) -> None:
    core.create_app("a", display_name="Support", evaluation_metrics_thresholds=_thresholds(4))
    tool = core.create_lookup_tool()
    core.call(
        "create_agent",
        agent_pb2.CreateAgentRequest(
            parent=APP,
            agent_id="root",
            agent=agent_pb2_.Agent(display_name="Root", tools=[tool.name]),
        ),
    )
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, root_agent=f"{APP}/agents/root"),
            update_mask=field_mask_pb2.FieldMask(paths=["root_agent"]),
        ),
    )
    exported = _export(core).app_content
    with zipfile.ZipFile(io.BytesIO(exported)) as archive:
        assert archive.namelist() == ["agents/root.json", "app.json", "tools/lookup.json"]
        settings = json.loads(archive.read("app.json"))
        agent = json.loads(archive.read("agents/root.json"))
    assert settings["rootAgent"] == "agents/root"  # relative to the app
    assert agent["tools"] == ["tools/lookup"]
    assert "name" not in settings and "etag" not in settings
    imported = _import(core, app_content=exported, app_id="copy", display_name="Copy")
    copy = core.get_app(imported.name)
    assert imported.name == f"{LOCATION}/apps/copy" and not imported.warnings
    assert copy.display_name == "Copy" and copy.root_agent == f"{copy.name}/agents/root"
    assert copy.evaluation_metrics_thresholds == _thresholds(4)
    copied = core.call("get_agent", agent_pb2.GetAgentRequest(name=f"{copy.name}/agents/root"))
    assert list(copied.tools) == [f"{copy.name}/tools/lookup"]
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=copy.name, display_name="Support"),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
        ),
    )
    assert _export(core, copy.name).app_content == exported


def test_an_import_refuses_what_it_cannot_read_and_warns_of_bad_entries(core: Apps) -> None:
    error = core.error(
        "import_app", agent_pb2.ImportAppRequest(parent=LOCATION, app_content=b"not a zip")
    )
    assert error.code is Code.INVALID_ARGUMENT and error.violations[0].field == "app_content"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("app.json", '{"displayName": "Ok"}')
        archive.writestr("tools/broken.json", '{"noSuchField": 1}')
        archive.writestr("notes.txt", "hello")
        archive.writestr("tools/huge.json", "{" + " " * (8 * 1024 * 1024) + "}")
    too_large = core.error(
        "import_app", agent_pb2.ImportAppRequest(parent=LOCATION, app_content=out.getvalue())
    )
    assert "larger than" in too_large.message  # read no further than the bound
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("app.json", '{"displayName": "Ok"}')
        archive.writestr("tools/broken.json", '{"noSuchField": 1}')
        archive.writestr("notes.txt", "hello")
    response = _import(core, app_content=out.getvalue(), app_id="ok")
    assert [w.split(":", 1)[0] for w in response.warnings] == ["tools/broken.json", "notes.txt"]
    assert core.get_app(response.name).display_name == "Ok"
    # An existing app keeps its display name, and a locked one is refused.
    taken = core.error(
        "import_app",
        agent_pb2.ImportAppRequest(
            parent=LOCATION, app_id="ok", display_name="New", app_content=out.getvalue()
        ),
    )
    assert taken.violations[0].field == "display_name"


def test_an_apps_root_agent_and_guardrails_must_be_stored_resources_of_it(core: Apps) -> None:
    refused = core.error(
        "create_app",
        agent_pb2.CreateAppRequest(
            parent=LOCATION,
            app_id="a",
            app=app_pb2.App(
                display_name="A",
                root_agent=f"{APP}/agents/none",
                guardrails=[f"{LOCATION}/apps/other/guardrails/g", f"{APP}/tools/t"],
            ),
        ),
    )
    assert refused.code is Code.INVALID_ARGUMENT
    assert [v.field for v in refused.violations] == [
        "app.root_agent",
        "app.guardrails[0]",
        "app.guardrails[1]",
    ]
    assert core.app_names() == []


def test_an_evaluations_tools_follow_the_apps_tools_once_it_has_any(core: Apps) -> None:
    def golden(tool: str) -> evaluation_pb2.Evaluation:
        evaluation = evaluation_pb2.Evaluation(display_name=tool.rsplit("/", 1)[-1])
        turn = evaluation.golden.turns.add()
        turn.steps.add().user_input.text = "Where is order 42?"
        turn.steps.add().expectation.tool_call.tool = tool
        return evaluation

    def create(tool: str) -> Any:
        request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=golden(tool))
        return core.call("create_evaluation", request)

    create(f"{APP}/tools/anything")  # an app without tools: any name
    core.create_lookup_tool()
    create(f"{APP}/tools/lookup")
    request = service_pb2.CreateEvaluationRequest(
        parent=APP, evaluation=golden(f"{APP}/tools/missing")
    )
    refused = core.error("create_evaluation", request)
    assert refused.code is Code.INVALID_ARGUMENT
    assert [v.field for v in refused.violations] == [
        "evaluation.golden.turns[0].steps[1].expectation.tool_call.tool"
    ]
    assert refused.violations[0].reason == "NOT_FOUND"
    # What the app has is learnt once a second, and forgotten at once by a change of it: with
    # its one tool deleted, any name goes again, within the same second.
    core.call("delete_tool", agent_pb2.DeleteToolRequest(name=f"{APP}/tools/lookup"))
    create(f"{APP}/tools/missing")


def test_an_import_over_an_app_leaves_out_what_a_kept_display_name_holds(core: Apps) -> None:
    target = f"{LOCATION}/apps/kept"
    core.create_app("kept", display_name="Kept")
    core.call(
        "create_agent",
        agent_pb2.CreateAgentRequest(
            parent=target, agent_id="other", agent=agent_pb2_.Agent(display_name="Root")
        ),
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("app.json", '{"displayName": "Kept"}')
        archive.writestr("agents/root.json", '{"displayName": "Root"}')
        archive.writestr("agents/second.json", '{"displayName": "Second"}')
    response = _import(core, app_content=out.getvalue(), app_id="kept")
    assert response.warnings == [
        f"{target}/agents/root: its display name is {target}/agents/other's; left out."
    ]
    listed = core.call("list_agents", agent_pb2.ListAgentsRequest(parent=target, order_by="name"))
    assert [a.name.rsplit("/", 1)[1] for a in listed.agents] == ["other", "second"]


def test_the_app_of_a_name() -> None:
    assert names.app_of(f"{APP}/evaluations/e/results/r") == APP
    assert names.app_of(APP) == APP
    assert names.app_of(f"{LOCATION}/operations/o") == ""
    assert names.app_of("projects/p") == ""


def test_deployment_count_is_counted_when_read_never_stored(core: Apps) -> None:
    core.create_app("a", display_name="A")
    other = core.create_app("b", display_name="B")

    def deploy(deployment_id: str) -> Any:
        body = deployment_pb2.Deployment(
            display_name=deployment_id, channel_profile=common_pb2.ChannelProfile()
        )
        request = agent_pb2.CreateDeploymentRequest(
            parent=APP, deployment_id=deployment_id, deployment=body
        )
        return core.call("create_deployment", request)

    deployments = [deploy("web"), deploy("phone")]
    assert core.get_app().deployment_count == 2
    listed = core.call("list_apps", agent_pb2.ListAppsRequest(parent=LOCATION, order_by="name"))
    assert [(a.name, a.deployment_count) for a in listed.apps] == [(APP, 2), (other.name, 0)]
    updated = core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, description="d", deployment_count=9),
            update_mask=field_mask_pb2.FieldMask(paths=["description"]),
        ),
    )
    assert updated.deployment_count == 2  # counted, not the caller's
    version = core.call(
        "create_app_version",
        agent_pb2.CreateAppVersionRequest(parent=APP, app_version=app_version_pb2.AppVersion()),
    )
    assert not version.snapshot.app.deployment_count  # what the app's row holds: no count
    for deployment in deployments:
        core.call("delete_deployment", agent_pb2.DeleteDeploymentRequest(name=deployment.name))
    assert core.get_app().deployment_count == 0  # nothing stored by the update above
    core.finished(
        core.call("restore_app_version", agent_pb2.RestoreAppVersionRequest(name=version.name))
    )
    assert core.get_app().deployment_count == 0


def test_an_adopted_app_answers_the_deployments_it_held(core: Apps) -> None:
    body = deployment_pb2.Deployment(
        display_name="Web", channel_profile=common_pb2.ChannelProfile()
    )
    core.call("create_deployment", agent_pb2.CreateDeploymentRequest(parent=APP, deployment=body))
    assert IMPLICIT in core.get_app().metadata
    adopted = core.create_app(APP.rsplit("/", 1)[1], display_name="Adopted")
    assert adopted.deployment_count == 1 == core.get_app().deployment_count


def test_changelogs_filter_as_list_changelogs_request_documents(core: Apps) -> None:
    """Each example of ListChangelogsRequest.filter: ``:`` a case-insensitive partial match on
    string fields, ``=`` exact, ``resource_name`` the stored ``resource``."""
    core.create_app("a", display_name="A")
    core.call(
        "create_agent",
        agent_pb2.CreateAgentRequest(
            parent=APP, agent_id="my-agent", agent=agent_pb2_.Agent(display_name="Mine")
        ),
    )
    core.create_lookup_tool()
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, description="d"),
            update_mask=field_mask_pb2.FieldMask(paths=["description"]),
        ),
    )

    def found(text: str) -> list[tuple[str, str]]:
        return [(e.action, e.resource_type) for e in changelog(core, filter=text)]

    every = found("")
    assert every == [("Update", "App"), ("Create", "Tool"), ("Create", "Agent"), ("Create", "App")]
    middle = changelog(core)[1].create_time.ToJsonString()
    assert found("action:update") == [("Update", "App")]
    assert found("action:UPD") == [("Update", "App")]
    assert found('action="Create"') == every[1:]
    assert found('action="create"') == []  # "=" is exact
    assert found("resource_type:agent") == [("Create", "Agent")]
    assert found("resource_name:my-agent") == [("Create", "Agent")]
    assert found("resourceName:MY-AGENT") == [("Create", "Agent")]
    assert found(f'resource_name="{APP}"') == [("Update", "App"), ("Create", "App")]
    assert found("author:me@example.com") == every
    assert found("author:ME@EXAMPLE") == every
    assert found(f'create_time > "{middle}"') == every[:1]
    assert found(f'create_time <= "{middle}" AND resource_type:tool') == [("Create", "Tool")]


def _refuse_guardrails(path: Path, refused: bool) -> None:
    """Make the database itself refuse (or accept again) every new guardrail row: a fault of
    the write, injected in the real file by another connection, as another program could."""
    with sqlite3.connect(path) as connection:
        if refused:
            connection.execute(
                "CREATE TRIGGER refuse_guardrails BEFORE INSERT ON guardrails "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        else:
            connection.execute("DROP TRIGGER refuse_guardrails")
    connection.close()


def test_a_restore_or_import_that_fails_leaves_nothing_half_written(
    core: Apps, tmp_path: Path
) -> None:
    core.create_app("a", display_name="Original")

    def create(method: str, field: str, resource_id: str, body: Any) -> Any:
        request_class = getattr(agent_pb2, f"Create{type(body).__name__}Request")
        request = request_class(parent=APP, **{f"{field}_id": resource_id, field: body})
        return core.call(method, request)

    create("create_agent", "agent", "root", agent_pb2_.Agent(display_name="Root"))
    create("create_guardrail", "guardrail", "safe", guardrail_pb2.Guardrail(display_name="Safe"))
    version = core.call(
        "create_app_version",
        agent_pb2.CreateAppVersionRequest(parent=APP, app_version=app_version_pb2.AppVersion()),
    )
    archive = _export(core).app_content
    core.call(
        "update_app",
        agent_pb2.UpdateAppRequest(
            app=app_pb2.App(name=APP, display_name="Changed"),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
        ),
    )
    core.call("delete_agent", agent_pb2.DeleteAgentRequest(name=f"{APP}/agents/root"))
    core.call("delete_guardrail", agent_pb2.DeleteGuardrailRequest(name=f"{APP}/guardrails/safe"))

    def state() -> tuple[str, list[str], list[str]]:
        agents = core.call("list_agents", agent_pb2.ListAgentsRequest(parent=APP)).agents
        guardrails = core.call(
            "list_guardrails", agent_pb2.ListGuardrailsRequest(parent=APP)
        ).guardrails
        return (
            core.get_app().display_name,
            [a.display_name for a in agents],
            [g.display_name for g in guardrails],
        )

    changed = state()
    assert changed == ("Changed", [], [])
    path = tmp_path / "db.sqlite"
    _refuse_guardrails(path, refused=True)
    restore = agent_pb2.RestoreAppVersionRequest(name=version.name)
    failed = core.finished(core.call("restore_app_version", restore))
    assert failed.HasField("error"), failed
    assert state() == changed  # not the app's settings, nor its agents
    failed = core.finished(
        core.call(
            "import_app",
            agent_pb2.ImportAppRequest(
                parent=LOCATION,
                app_id="a",
                app_content=archive,
                import_options=agent_pb2.ImportAppRequest.ImportOptions(
                    conflict_resolution_strategy=_OVERWRITE
                ),
            ),
        )
    )
    assert failed.HasField("error"), failed
    assert state() == changed
    _refuse_guardrails(path, refused=False)
    core.finished(core.call("restore_app_version", restore))
    assert state() == ("Original", ["Root"], ["Safe"])


_OVERWRITE = agent_pb2.ImportAppRequest.ImportOptions.ConflictResolutionStrategy.OVERWRITE


def test_a_written_back_app_may_swap_display_names(core: Apps) -> None:
    """Restore and import write in one transaction, every row written over deleted first: two
    resources exchanging their display names is no conflict."""
    target = f"{LOCATION}/apps/swap"
    core.create_app("swap", display_name="Swap")
    for agent_id, shown in (("x", "First"), ("y", "Second")):
        core.call(
            "create_agent",
            agent_pb2.CreateAgentRequest(
                parent=target, agent_id=agent_id, agent=agent_pb2_.Agent(display_name=shown)
            ),
        )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("app.json", '{"displayName": "Swap"}')
        archive.writestr("agents/x.json", '{"displayName": "Second"}')
        archive.writestr("agents/y.json", '{"displayName": "First"}')
    response = _import(core, app_content=out.getvalue(), app_id="swap")
    assert not response.warnings
    listed = core.call("list_agents", agent_pb2.ListAgentsRequest(parent=target, order_by="name"))
    assert [a.display_name for a in listed.agents] == ["Second", "First"]


def test_deployment_count_over_rest_from_the_stored_bytes(tmp_path: Path) -> None:
    """GetApp and ListApps answer stored bytes (the count appended): REST renders them so."""

    async def scenario(client: Any) -> None:
        created = await client.post(
            f"/v1beta/{LOCATION}/apps", params={"appId": "a"}, json={"displayName": "A"}
        )
        assert created.status_code == 200, created.text
        for deployment_id in ("web", "phone"):
            response = await client.post(
                f"/v1beta/{APP}/deployments",
                params={"deploymentId": deployment_id},
                json={"displayName": deployment_id, "channelProfile": {}},
            )
            assert response.status_code == 200, response.text
        for _ in range(2):  # the second answered from what the first read kept
            got = await client.get(f"/v1beta/{APP}")
            assert got.json()["deploymentCount"] == 2, got.text
            listed = await client.get(f"/v1beta/{LOCATION}/apps")
            assert [a.get("deploymentCount") for a in listed.json()["apps"]] == [2]

    official_routes.run(tmp_path, scenario)
