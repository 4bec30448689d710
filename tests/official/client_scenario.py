"""The contract scenario, driven by Google's official Python client against a running server.

Every step asserts what the official client observes. The emulator service (ours, absent from
the official client) seeds results and runs. The command line, the wiring and the reports are
harness.py's; the other scenarios borrow this one's golden evaluation and seeded result.
"""

from __future__ import annotations

import json

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.longrunning import operations_pb2
from google.protobuf import duration_pb2, field_mask_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import Wired, details_of, main, step  # type: ignore[import-not-found]

APP = "projects/demo-project/locations/us-central1/apps/support-bot"
RUN = APP + "/evaluationRuns/"
VERSION = APP + "/versions/"
TOOL = APP + "/tools/lookup-order"


def golden(display_name: str) -> ces_v1beta.Evaluation:
    return ces_v1beta.Evaluation(
        display_name=display_name,
        description="Order status golden",
        tags=["smoke", "orders"],
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        ces_v1beta.Evaluation.Step(
                            user_input=ces_v1beta.SessionInput(text="Where is my order 42?")
                        ),
                        ces_v1beta.Evaluation.Step(
                            expectation=ces_v1beta.Evaluation.GoldenExpectation(
                                tool_call=ces_v1beta.ToolCall(tool=TOOL, args={"order": 42})
                            )
                        ),
                    ]
                )
            ]
        ),
    )


def result(
    run: str, version: str, status: int, score: int, turn_s: int, tool_s: int, state: int = 2
) -> ces_v1beta.EvaluationResult:
    Outcome = ces_v1beta.EvaluationResult.Outcome
    outcome = Outcome.PASS if status == 1 else Outcome.FAIL
    return ces_v1beta.EvaluationResult(
        evaluation_run=RUN + run,
        app_version=VERSION + version,
        execution_state=state,
        evaluation_status=status if state == 2 else 0,
        golden_result=ces_v1beta.EvaluationResult.GoldenResult(
            turn_replay_results=[
                ces_v1beta.EvaluationResult.GoldenResult.TurnReplayResult(
                    semantic_similarity_result=ces_v1beta.EvaluationResult.SemanticSimilarityResult(
                        score=score
                    ),
                    turn_latency=duration_pb2.Duration(seconds=turn_s),
                    tool_call_latencies=[
                        ces_v1beta.EvaluationResult.ToolCallLatency(
                            tool=TOOL, execution_latency=duration_pb2.Duration(seconds=tool_s)
                        )
                    ],
                    expectation_outcome=[
                        ces_v1beta.EvaluationResult.GoldenExpectationOutcome(
                            expectation=ces_v1beta.Evaluation.GoldenExpectation(
                                tool_call=ces_v1beta.ToolCall(tool=TOOL)
                            ),
                            outcome=outcome,
                        )
                    ],
                )
            ]
        ),
    )


def scenario(wired: Wired) -> None:
    client, emulator = wired.client, wired.emulator

    # Create with and without an ID.
    first = client.create_evaluation(
        parent=APP, evaluation=golden("Order status"), evaluation_id="order-status"
    )
    assert first.name == APP + "/evaluations/order-status", first.name
    assert first.etag and first.create_time and first.created_by, first
    second = client.create_evaluation(parent=APP, evaluation=golden("Refund"))
    assert second.name.startswith(APP + "/evaluations/") and second.name != first.name
    third = client.create_evaluation(parent=APP, evaluation=golden("Cancel"))
    step("create", names=[first.name, second.name, third.name])

    try:
        client.create_evaluation(
            parent=APP, evaluation=golden("Other"), evaluation_id="order-status"
        )
        raise AssertionError("duplicate ID accepted")
    except exceptions.Conflict as error:  # REST: HTTP 409; gRPC: AlreadyExists
        duplicate_id = details_of(error)
    try:
        client.create_evaluation(parent=APP, evaluation=golden("Refund"))
        raise AssertionError("duplicate display name accepted")
    except exceptions.Conflict as error:  # REST: HTTP 409; gRPC: AlreadyExists
        duplicate_name = details_of(error) | {"message": error.message}
    step("duplicates", id=duplicate_id, display_name=duplicate_name)

    invalid = ces_v1beta.Evaluation(
        golden=ces_v1beta.Evaluation.Golden(turns=[ces_v1beta.Evaluation.GoldenTurn()])
    )
    try:
        client.create_evaluation(parent=APP, evaluation=invalid)
        raise AssertionError("invalid evaluation accepted")
    except exceptions.BadRequest as error:  # REST: HTTP 400; gRPC: InvalidArgument
        step("invalid", **details_of(error))

    got = client.get_evaluation(name=first.name)
    assert got.display_name == "Order status" and list(got.tags) == ["smoke", "orders"]
    step("get", etag=got.etag)

    pager = client.list_evaluations(
        request=ces_v1beta.ListEvaluationsRequest(parent=APP, page_size=1, order_by="name")
    )
    listed = [e.name for e in pager]
    pages = 0
    for _ in client.list_evaluations(
        request=ces_v1beta.ListEvaluationsRequest(parent=APP, page_size=1)
    ).pages:
        pages += 1
    step("list", names=listed, pages=pages)

    updated = client.update_evaluation(
        evaluation=ces_v1beta.Evaluation(name=first.name, description="Changed", display_name="x"),
        update_mask=field_mask_pb2.FieldMask(paths=["description"]),
    )
    assert updated.description == "Changed" and updated.display_name == "Order status"
    assert updated.etag != got.etag
    try:
        client.update_evaluation(
            evaluation=ces_v1beta.Evaluation(name=first.name, description="Again", etag=got.etag),
            update_mask=field_mask_pb2.FieldMask(paths=["description"]),
        )
        raise AssertionError("stale etag accepted")
    except exceptions.Conflict as error:  # REST: HTTP 409; gRPC: Aborted
        stale = details_of(error)
    step("update", etag=updated.etag, stale=stale)

    seeded = [
        emulator.create_result(first.name, result("run-1", "v1", 1, 4, 2, 1), "r1"),
        emulator.create_result(first.name, result("run-2", "v1", 2, 2, 4, 3), "r2"),
        emulator.create_result(first.name, result("run-2", "v2", 0, 0, 0, 0, state=1), "r3"),
        emulator.create_result(second.name, result("run-2", "v1", 1, 3, 1, 1), "r4"),
    ]
    step("seed", names=[r.name for r in seeded])

    across = client.list_evaluation_results(
        request=ces_v1beta.ListEvaluationResultsRequest(
            parent=APP + "/evaluations/-", filter=f'evaluation_run = "{RUN}run-2"', page_size=1
        )
    )
    step("list_results", names=sorted(r.name for r in across))

    with_metrics = client.get_evaluation(name=first.name)
    step(
        "derived",
        aggregated_metrics=ces_v1beta.AggregatedMetrics.to_dict(with_metrics.aggregated_metrics),
        evaluation_runs=list(with_metrics.evaluation_runs),
        last_completed_result=with_metrics.last_completed_result.name,
    )

    # Long-running operations: the official client polls them through its operations client.
    export = client.export_evaluations(
        request=ces_v1beta.ExportEvaluationsRequest(
            parent=APP,
            names=[first.name, APP + "/evaluations/missing"],
            include_evaluations=True,
            include_evaluation_results=True,
        )
    )
    exported = export.result(timeout=60)
    document = json.loads(exported.evaluations_content)
    step(
        "export",
        evaluations=[e["name"] for e in document["evaluations"]],
        results=sorted(r["name"] for r in document["evaluationResults"]),
        failed=sorted(exported.failed_evaluations),
        metadata=type(export.metadata).__name__,
    )
    to_file = client.export_evaluations(
        request=ces_v1beta.ExportEvaluationsRequest(
            parent=APP,
            names=[second.name],
            include_evaluations=True,
            export_options=ces_v1beta.ExportOptions(
                export_format=ces_v1beta.ExportOptions.ExportFormat.YAML,
                gcs_uri="gs://ces-exports/nightly",
            ),
        )
    ).result(timeout=60)
    step("export_file", uri=to_file.evaluations_uri, content=len(to_file.evaluations_content))
    results_export = client.export_evaluation_results(
        parent=first.name, names=[first.name + "/results/r1"]
    ).result(timeout=60)
    step(
        "export_results",
        results=[
            r["name"]
            for r in json.loads(results_export.evaluation_results_content)["evaluationResults"]
        ],
    )
    statuses = {}
    for result_id in ("r1", "r2"):
        run = client.run_evaluation_result_metrics(
            evaluation_result_id=f"{first.name}/results/{result_id}"
        )
        statuses[result_id] = ces_v1beta.EvaluationResult.Outcome(
            run.result(timeout=60).status
        ).name
    step("metrics", statuses=statuses)
    location = "/".join(APP.split("/")[:4])
    listed_operations = client.list_operations(
        request=operations_pb2.ListOperationsRequest(name=location)
    )
    names_listed = [o.name for o in listed_operations.operations]
    fetched = client.get_operation(request=operations_pb2.GetOperationRequest(name=names_listed[0]))
    client.cancel_operation(request=operations_pb2.CancelOperationRequest(name=names_listed[0]))
    client.delete_operation(request=operations_pb2.DeleteOperationRequest(name=names_listed[0]))
    try:
        client.get_operation(request=operations_pb2.GetOperationRequest(name=names_listed[0]))
        raise AssertionError("deleted operation still readable")
    except exceptions.NotFound:
        pass
    step("operations", count=len(names_listed), done=fetched.done, deleted=names_listed[0])

    try:
        client.delete_evaluation(
            request=ces_v1beta.DeleteEvaluationRequest(name=first.name, etag=got.etag)
        )
        raise AssertionError("delete with stale etag accepted")
    except exceptions.Conflict as error:  # REST: HTTP 409; gRPC: Aborted
        stale_delete = details_of(error)
    client.delete_evaluation(name=first.name)
    try:
        client.get_evaluation(name=first.name)
        raise AssertionError("deleted evaluation still readable")
    except exceptions.NotFound as error:
        gone = details_of(error) | {"message": error.message}
    try:
        client.get_evaluation_result(name=first.name + "/results/r1")
        raise AssertionError("result of a deleted evaluation still readable")
    except exceptions.NotFound:
        pass
    step("delete", stale=stale_delete, gone=gone)

    # RunEvaluation is served (its runs are engine_scenario.py's): a request naming neither
    # evaluations nor a dataset is refused by the method, with the field named (api_core puts
    # "POST <url>: " before a REST message).
    try:
        client.run_evaluation(request=ces_v1beta.RunEvaluationRequest(app=APP))
        raise AssertionError("a run of nothing accepted")
    except exceptions.BadRequest as error:  # gRPC: InvalidArgument, a subclass
        step(
            "run_refused",
            exception=type(error).__name__,
            message=error.message,
            **details_of(error),
        )


if __name__ == "__main__":
    main(scenario)
