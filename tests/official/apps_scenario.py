"""An app around its evaluations, driven by Google's official Python client (AgentService and
EvaluationService) against a running server.

The client creates an app with thresholds, a persona and evaluation settings (CreateApp, a
long-running operation), its tools and an agent naming them, and a version; reads and lists them;
then runs a golden and a scenario (RunEvaluation): the golden's result follows the app's
thresholds (a scripted similarity of 3 fails under the app's 4), the scenario plays the app's
persona. It reads the changelog, exports the app, imports it into a new app, and deletes both
apps (long-running), after which their evaluations are gone. The app is the transport's own
(harness.py's Wired.app), so both transports can run against one server.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.protobuf import field_mask_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import Wired, main, refused, step  # type: ignore[import-not-found]

Thresholds = ces_v1beta.EvaluationMetricsThresholds
Result = ces_v1beta.EvaluationResult


def _thresholds(similarity: int) -> Thresholds:
    levels = Thresholds.GoldenEvaluationMetricsThresholds
    golden = levels(
        turn_level_metrics_thresholds=levels.TurnLevelMetricsThresholds(
            semantic_similarity_success_threshold=similarity
        )
    )
    return Thresholds(golden_evaluation_metrics_thresholds=golden)


def _golden(display_name: str) -> ces_v1beta.Evaluation:
    Step = ces_v1beta.Evaluation.Step
    return ces_v1beta.Evaluation(
        display_name=display_name,
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        Step(user_input=ces_v1beta.SessionInput(text="Where is order 42?")),
                        Step(
                            expectation=ces_v1beta.Evaluation.GoldenExpectation(
                                agent_response=ces_v1beta.Message(
                                    role="agent", chunks=[ces_v1beta.Chunk(text="It shipped.")]
                                )
                            )
                        ),
                    ]
                )
            ]
        ),
    )


def _scenario(display_name: str) -> ces_v1beta.Evaluation:
    answer = ces_v1beta.Message(role="agent", chunks=[ces_v1beta.Chunk(text="It shipped.")])
    expected = ces_v1beta.Evaluation.ScenarioExpectation(agent_response=answer)
    return ces_v1beta.Evaluation(
        display_name=display_name,
        scenario=ces_v1beta.Evaluation.Scenario(
            task="Ask about order 42.", rubrics=["Polite."], scenario_expectations=[expected]
        ),
    )


def _run(wired: Wired, app: str, evaluations: list[str], **fields: Any) -> list[Result]:
    operation = wired.client.run_evaluation(
        request=ces_v1beta.RunEvaluationRequest(app=app, evaluations=evaluations, **fields)
    )
    response = operation.result(timeout=60)
    run = wired.client.get_evaluation_run(name=response.evaluation_run)
    assert run.state == ces_v1beta.EvaluationRun.EvaluationRunState.COMPLETED, run
    listed = wired.client.list_evaluation_results(
        request={"parent": f"{app}/evaluations/-", "filter": f'evaluation_run = "{run.name}"'}
    )
    return list(listed)


def scenario(wired: Wired) -> None:
    agents = wired.agents
    app_id = f"apps-{wired.transport}"
    location = "projects/apps-project/locations/us-central1"
    app = f"{location}/apps/{app_id}"
    persona = ces_v1beta.EvaluationPersona(
        name=f"{app}/evaluationPersonas/hurried", display_name="Hurried", personality="Brief."
    )
    created = agents.create_app(
        parent=location,
        app_id=app_id,
        app=ces_v1beta.App(
            display_name="Support",
            evaluation_metrics_thresholds=_thresholds(4),
            evaluation_personas=[persona],
            evaluation_settings=ces_v1beta.EvaluationSettings(
                golden_run_method=ces_v1beta.GoldenRunMethod.NAIVE
            ),
        ),
    ).result(timeout=60)
    assert created.name == app and created.etag, created
    again = refused(
        lambda: agents.create_app(
            parent=location, app_id=app_id, app=ces_v1beta.App(display_name="Again")
        ),
        exceptions.Conflict,  # REST: api_core's class of HTTP 409
    )
    step("create_app", app=created.name, again=again["reason"])

    tool = agents.create_tool(
        parent=app,
        tool_id="lookup",
        tool=ces_v1beta.Tool(
            python_function=ces_v1beta.PythonFunction(
                name="lookup_order", python_code="def lookup_order(order):\n  return order\n"
            )
        ),
    )
    agent = agents.create_agent(
        parent=app,
        agent_id="root",
        agent=ces_v1beta.Agent(
            display_name="Root", instruction="Help with orders.", tools=[tool.name]
        ),
    )
    updated = agents.update_app(
        app=ces_v1beta.App(name=app, root_agent=agent.name),
        update_mask=field_mask_pb2.FieldMask(paths=["root_agent"]),
    )
    tools = [t.name for t in agents.list_tools(parent=app)]
    listed = [a.name for a in agents.list_agents(parent=app)]
    missing_tool = refused(
        lambda: agents.create_agent(
            parent=app,
            agent=ces_v1beta.Agent(display_name="Broken", tools=[f"{app}/tools/none"]),
        ),
        exceptions.BadRequest,  # REST: api_core's class of HTTP 400
    )
    step(
        "resources",
        tools=tools,
        agents=listed,
        tool_display_name=tool.display_name,
        root_agent=updated.root_agent,
        missing_tool=missing_tool["violations"],
    )

    version = agents.create_app_version(
        parent=app, app_version=ces_v1beta.AppVersion(display_name="Release 1")
    )
    step(
        "version",
        version=version.name,
        snapshot_tools=[t.name for t in version.snapshot.tools],
        snapshot_agents=[a.name for a in version.snapshot.agents],
    )

    golden = wired.client.create_evaluation(parent=app, evaluation=_golden("Order"))
    simulated = wired.client.create_evaluation(parent=app, evaluation=_scenario("Asks"))
    wired.emulator.create_outcome_rule(
        app, {"outcome": "PASS", "semanticSimilarityScore": 3, "evaluation": golden.name}
    )
    (judged,) = _run(wired, app, [golden.name])
    played = _run(wired, app, [simulated.name], run_count=1)
    versions = sorted({r.app_version for r in wired.client.list_evaluation_runs(parent=app)})
    recorded = judged.evaluation_metrics_thresholds.golden_evaluation_metrics_thresholds
    step(
        "run",
        status=Result.Outcome(judged.evaluation_status).name,
        recorded=recorded.turn_level_metrics_thresholds.semantic_similarity_success_threshold,
        golden_run_method=ces_v1beta.GoldenRunMethod(judged.golden_run_method).name,
        personas=[r.persona.display_name for r in played],
        versions=versions,
    )

    changes = list(agents.list_changelogs(parent=app))
    step(
        "changelog",
        actions=[(c.action, c.resource_type) for c in reversed(changes)],
        numbers=sorted(c.sequence_number for c in changes),
    )

    exported = agents.export_app(
        request={"name": app, "export_format": ces_v1beta.ExportAppRequest.ExportFormat.JSON}
    ).result(timeout=60)
    copy_id = f"copy-{wired.transport}"
    imported = agents.import_app(
        request={"parent": location, "app_id": copy_id, "app_content": exported.app_content}
    ).result(timeout=60)
    copy = agents.get_app(name=imported.name)
    step(
        "import",
        app=imported.name,
        warnings=list(imported.warnings),
        root_agent=copy.root_agent,
        tools=[t.name for t in agents.list_tools(parent=imported.name)],
    )

    # The same app as YAML files in a zip archive at an object of the export folder, and back.
    yaml = ces_v1beta.ExportAppRequest.ExportFormat.YAML
    uri = f"gs://apps/{wired.transport}/app.zip"
    stored = agents.export_app(request={"name": app, "export_format": yaml, "gcs_uri": uri}).result(
        timeout=60
    )
    from_file = agents.import_app(
        request={"parent": location, "app_id": f"file-{wired.transport}", "gcs_uri": uri}
    ).result(timeout=60)
    step(
        "file",
        uri=stored.app_uri,
        app=from_file.name,
        tools=[t.name for t in agents.list_tools(parent=from_file.name)],
    )

    for name in (app, imported.name, from_file.name):
        agents.delete_app(name=name).result(timeout=60)
    gone = refused(lambda: agents.get_app(name=app), exceptions.NotFound)
    evaluation_gone = refused(
        lambda: wired.client.get_evaluation(name=golden.name), exceptions.NotFound
    )
    step("delete", app=gone["reason"], evaluation=evaluation_gone["reason"])


if __name__ == "__main__":
    main(scenario)
