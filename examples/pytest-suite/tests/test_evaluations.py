"""Golden evaluations of an order-status bot, kept next to the bot's code, run against a local
ces-eval through Google's own client. Every fixture of the plugin is used here."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import ces_v1beta

from ces_eval.testing import EmulatorError


def golden(display_name: str, tool: str) -> ces_v1beta.Evaluation:
    return ces_v1beta.Evaluation(
        display_name=display_name,
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        ces_v1beta.Evaluation.Step(
                            user_input=ces_v1beta.SessionInput(text="Where is my order 42?")
                        ),
                        ces_v1beta.Evaluation.Step(
                            expectation=ces_v1beta.Evaluation.GoldenExpectation(
                                tool_call=ces_v1beta.ToolCall(tool=tool, args={"order": 42})
                            )
                        ),
                    ]
                )
            ]
        ),
    )


def test_an_evaluation_round_trips_over_grpc(ces_client, ces_eval_project):
    app = ces_eval_project.app()
    created = ces_client.create_evaluation(
        parent=app, evaluation=golden("Order status", f"{app}/tools/lookup"), evaluation_id="status"
    )
    assert created.name == f"{app}/evaluations/status"
    assert ces_client.get_evaluation(name=created.name).display_name == "Order status"


def test_each_test_gets_an_empty_project_of_its_own(ces_rest_client, ces_eval_project):
    """The same evaluation ID as the test above, in another project: no conflict, no leftovers."""
    app = ces_eval_project.app()
    assert list(ces_rest_client.list_evaluations(parent=app)) == []
    ces_rest_client.create_evaluation(
        parent=app, evaluation=golden("Order status", f"{app}/tools/lookup"), evaluation_id="status"
    )
    assert [e.display_name for e in ces_rest_client.list_evaluations(parent=app)] == ["Order status"]


@pytest.mark.parametrize("form", ["dict", "proto-plus"])
def test_results_seeded_by_the_admin_are_read_by_the_client(
    ces_client, ces_eval_admin, ces_eval_project, form
):
    app = ces_eval_project.app()
    evaluation = ces_client.create_evaluation(
        parent=app, evaluation=golden("Refund", f"{app}/tools/refund")
    )
    if form == "dict":
        result = {"displayName": "seeded", "evaluationStatus": "PASS", "executionState": "COMPLETED"}
    else:
        result = ces_v1beta.EvaluationResult(
            display_name="seeded",
            evaluation_status=ces_v1beta.EvaluationResult.Outcome.PASS,
            execution_state=ces_v1beta.EvaluationResult.ExecutionState.COMPLETED,
        )
    seeded = ces_eval_admin.create_result(evaluation.name, result, result_id="r1")
    assert seeded["name"] == f"{evaluation.name}/results/r1"
    [read] = ces_client.list_evaluation_results(parent=evaluation.name)
    assert (read.display_name, read.evaluation_status) == ("seeded", 1)


def test_the_admin_reports_refusals_in_googles_error_model(ces_eval_admin, ces_eval_project):
    missing = f"{ces_eval_project.app()}/evaluations/none"
    with pytest.raises(EmulatorError) as refused:
        ces_eval_admin.create_result(missing, {"displayName": "orphan"})
    assert (refused.value.http_status, refused.value.status) == (404, "NOT_FOUND")


def test_a_missing_evaluation_is_not_found_on_both_transports(
    ces_client, ces_rest_client, ces_eval_project
):
    name = f"{ces_eval_project.app()}/evaluations/none"
    for client in (ces_client, ces_rest_client):
        with pytest.raises(exceptions.NotFound):
            client.get_evaluation(name=name)


def test_the_server_is_reachable_at_its_addresses(ces_eval_server):
    assert ces_eval_server.mcp_url == f"{ces_eval_server.http_url}/mcp"
    assert ces_eval_server.grpc_target.rsplit(":", 1)[1].isdigit()
