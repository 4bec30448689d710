"""pip install ces-eval google-cloud-ces pytest, then pytest: a server starts for the session."""

from google.cloud import ces_v1beta


def test_my_golden_fails_when_the_tool_gets_other_arguments(
    ces_client, ces_eval_admin, ces_eval_project
):
    app = ces_eval_project.app("support-bot")  # a fresh project for this test, reset after it
    step = ces_v1beta.Evaluation.Step
    golden = ces_v1beta.Evaluation(
        display_name="Order status",
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        step(user_input=ces_v1beta.SessionInput(text="Where is order 42?")),
                        step(
                            expectation=ces_v1beta.Evaluation.GoldenExpectation(
                                tool_call=ces_v1beta.ToolCall(
                                    tool=f"{app}/tools/lookup", args={"order": 42}
                                )
                            )
                        ),
                    ]
                )
            ]
        ),
    )
    evaluation = ces_client.create_evaluation(parent=app, evaluation=golden)
    # Script what the local run engine observes: the tool called for another order.
    ces_eval_admin.create_outcome_rule(
        app,
        {"evaluation": evaluation.name, "outcome": "FAIL", "observed": {"toolArgs": {"order": 8}}},
    )
    operation = ces_client.run_evaluation(request={"app": app, "evaluations": [evaluation.name]})
    run = ces_client.get_evaluation_run(name=operation.result(timeout=60).evaluation_run)
    assert (run.state.name, run.progress.failed_count) == ("COMPLETED", 1)
