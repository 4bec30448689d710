"""Evaluations played against the team's own agent (docs/agents.md), driven by Google's official
Python client: two goldens created, RunEvaluation, the operation awaited, the run and its
results read. The agent (tests/support/agent.py) is served and set as the app's agent endpoint
by the test before this script runs; it asks for ``get_weather`` with wrong arguments for
Berlin only.

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

from typing import Any

from google.cloud import ces_v1beta

# The scenarios run as scripts: their folder is on sys.path.
from harness import main, step  # type: ignore[import-not-found]

Result = ces_v1beta.EvaluationResult
TOOL = "projects/agent-project/locations/us-central1/apps/{app}/tools/get_weather"


def _text(text: str) -> ces_v1beta.Message:
    return ces_v1beta.Message(role="agent", chunks=[ces_v1beta.Chunk(text=text)])


def _golden(app: str, city: str, temperature: int) -> ces_v1beta.Evaluation:
    tool = TOOL.format(app=app.rsplit("/", 1)[-1])
    expect = ces_v1beta.Evaluation.GoldenExpectation
    step_of = ces_v1beta.Evaluation.Step
    return ces_v1beta.Evaluation(
        display_name=f"Weather in {city}",
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        step_of(user_input=ces_v1beta.SessionInput(text="Hi")),
                        step_of(
                            expectation=expect(
                                agent_response=_text("Hello! Ask me about the weather.")
                            )
                        ),
                    ]
                ),
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        step_of(
                            user_input=ces_v1beta.SessionInput(
                                text=f"What is the weather in {city}?"
                            )
                        ),
                        step_of(
                            expectation=expect(
                                tool_call=ces_v1beta.ToolCall(tool=tool, args={"city": city})
                            )
                        ),
                        step_of(
                            expectation=expect(
                                tool_response=ces_v1beta.ToolResponse(
                                    tool=tool,
                                    response={"city": city, "temperature": temperature},
                                )
                            )
                        ),
                        step_of(
                            expectation=expect(
                                agent_response=_text(f"It is {temperature} degrees in {city}.")
                            )
                        ),
                    ]
                ),
            ]
        ),
    )


def _outcomes(result: Result) -> list[list[dict[str, Any]]]:
    turns = []
    for turn in result.golden_result.turn_replay_results:
        turns.append(
            [
                {
                    "outcome": Result.Outcome(o.outcome).name,
                    "args": dict(o.observed_tool_call.args) if o.observed_tool_call else None,
                    "score": o.tool_invocation_result.parameter_correctness_score,
                }
                for o in turn.expectation_outcome
            ]
        )
    return turns


def scenario(client: Any, app: str) -> None:
    names = [
        client.create_evaluation(parent=app, evaluation=_golden(app, city, degrees)).name
        for city, degrees in (("Paris", 21), ("Berlin", 15))
    ]
    for method in ("STABLE", "NAIVE"):
        operation = client.run_evaluation(
            request={
                "app": app,
                "evaluations": names,
                "golden_run_method": method,
                "generate_latency_report": True,
            }
        )
        response = operation.result(timeout=60)
        run = client.get_evaluation_run(name=response.evaluation_run)
        results = list(
            client.list_evaluation_results(
                request={
                    "parent": f"{app}/evaluations/-",
                    "filter": f'evaluation_run = "{run.name}"',
                }
            )
        )
        by_city = {r.display_name.split(" Result")[0]: r for r in results}
        latencies = [
            turn.turn_latency.total_seconds()
            for r in results
            for turn in r.golden_result.turn_replay_results
        ]
        step(
            method.lower(),
            state=run.state.name,
            method=ces_v1beta.GoldenRunMethod(run.golden_run_method).name,
            progress={
                "total": run.progress.total_count,
                "passed": run.progress.passed_count,
                "failed": run.progress.failed_count,
                "errors": run.progress.error_count,
            },
            status={city: Result.Outcome(r.evaluation_status).name for city, r in by_city.items()},
            outcomes={city: _outcomes(r) for city, r in by_city.items()},
            latencies_positive=all(seconds > 0 for seconds in latencies) and len(latencies) == 4,
        )


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.app("agent-project")))
