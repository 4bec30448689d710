"""The contract scenario, driven by Google's official Python client against a running server.

Runs in the official client's own environment (``.venv-client``), never beside ``ces_eval``
(GUIDE §2). Usage: ``client_scenario.py grpc HOST:PORT DESCRIPTOR_SET`` or
``client_scenario.py rest http://HOST:PORT``. Several comma-separated targets (replicas sharing
one database) are called in turn, one call each. Every step asserts what the official client
observes; the script prints one JSON line per step and exits non-zero on the first failure. The
emulator service (ours, absent from the official client) is called over gRPC with messages built
from our descriptor set loaded into a private DescriptorPool, or over its REST binding.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

import grpc
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import grpc as grpc_transport
from google.longrunning import operations_pb2
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
)
from google.rpc import error_details_pb2

APP = "projects/demo-project/locations/us-central1/apps/support-bot"
RUN = APP + "/evaluationRuns/"
VERSION = APP + "/versions/"
TOOL = APP + "/tools/lookup-order"


def step(name: str, **facts: Any) -> None:
    print(json.dumps({"step": name, **facts}, default=str), flush=True)


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


class Emulator:
    """ces_eval.emulator.v1.EmulatorService over a raw channel, messages from our descriptors."""

    def __init__(self, channel: grpc.Channel, descriptor_set: str) -> None:
        files = descriptor_pb2.FileDescriptorSet()
        with open(descriptor_set, "rb") as handle:
            files.ParseFromString(handle.read())
        self._pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            self._pool.Add(file)
        self._channel = channel

    def _seed(self, kind: type[Any], parent: str, message: Any, resource_id: str) -> Any:
        """EmulatorService.Create<kind> of ``message`` (an official client message)."""
        name = kind.__name__
        request_type = message_factory.GetMessageClass(
            self._pool.FindMessageTypeByName(f"ces_eval.emulator.v1.Create{name}Request")
        )
        field = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
        request = request_type(parent=parent, **{f"{field}_id": resource_id})
        getattr(request, field).MergeFromString(kind.serialize(message))
        call = self._channel.unary_unary(
            f"/ces_eval.emulator.v1.EmulatorService/Create{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=kind.deserialize,
        )
        return call(request, timeout=30)

    def create_result(
        self, parent: str, result: ces_v1beta.EvaluationResult, result_id: str = ""
    ) -> ces_v1beta.EvaluationResult:
        return self._seed(ces_v1beta.EvaluationResult, parent, result, result_id)

    def create_run(
        self, parent: str, run: ces_v1beta.EvaluationRun, run_id: str = ""
    ) -> ces_v1beta.EvaluationRun:
        return self._seed(ces_v1beta.EvaluationRun, parent, run, run_id)

    def create_conversation(
        self, parent: str, conversation: ces_v1beta.Conversation, conversation_id: str = ""
    ) -> ces_v1beta.Conversation:
        return self._seed(ces_v1beta.Conversation, parent, conversation, conversation_id)

    def _call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """EmulatorService.``method`` of a request given as proto3 JSON; the answer as JSON
        (outcome rules are no official client message)."""
        service = self._pool.FindServiceByName("ces_eval.emulator.v1.EmulatorService")
        found = service.FindMethodByName(method)
        request_message = json_format.ParseDict(
            request, message_factory.GetMessageClass(found.input_type)()
        )
        response_class = message_factory.GetMessageClass(found.output_type)
        call = self._channel.unary_unary(
            f"/ces_eval.emulator.v1.EmulatorService/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        return json_format.MessageToDict(call(request_message, timeout=30))

    def create_outcome_rule(self, parent: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self._call("CreateOutcomeRule", {"parent": parent, "outcomeRule": rule})

    def release_outcome_rule(self, name: str) -> dict[str, Any]:
        return self._call("ReleaseOutcomeRule", {"name": name})

    def delete_outcome_rule(self, name: str) -> None:
        self._call("DeleteOutcomeRule", {"name": name})

    def advance_clock(self, project: str, seconds: int) -> dict[str, Any]:
        return self._call("AdvanceClock", {"name": f"{project}/clock", "by": f"{seconds}s"})


class RestEmulator:
    """The emulator's REST bindings: POST /emulator/v1/{parent}/results?evaluationResultId=,
    POST /emulator/v1/{parent}/evaluationRuns?evaluationRunId=,
    POST /emulator/v1/{parent}/conversations?conversationId=."""

    def __init__(self, base: str) -> None:
        self._base = base

    def _seed(self, kind: type[Any], url: str, message: Any) -> Any:
        request = urllib.request.Request(
            url,
            data=kind.to_json(message).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return kind.from_json(response.read(), ignore_unknown_fields=False)

    def create_result(
        self, parent: str, result: ces_v1beta.EvaluationResult, result_id: str = ""
    ) -> ces_v1beta.EvaluationResult:
        url = f"{self._base}/emulator/v1/{parent}/results?evaluationResultId={result_id}"
        return self._seed(ces_v1beta.EvaluationResult, url, result)

    def create_run(
        self, parent: str, run: ces_v1beta.EvaluationRun, run_id: str = ""
    ) -> ces_v1beta.EvaluationRun:
        url = f"{self._base}/emulator/v1/{parent}/evaluationRuns?evaluationRunId={run_id}"
        return self._seed(ces_v1beta.EvaluationRun, url, run)

    def create_conversation(
        self, parent: str, conversation: ces_v1beta.Conversation, conversation_id: str = ""
    ) -> ces_v1beta.Conversation:
        url = f"{self._base}/emulator/v1/{parent}/conversations?conversationId={conversation_id}"
        return self._seed(ces_v1beta.Conversation, url, conversation)

    def _json(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    def create_outcome_rule(self, parent: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{self._base}/emulator/v1/{parent}/outcomeRules", rule)

    def release_outcome_rule(self, name: str) -> dict[str, Any]:
        return self._json("POST", f"{self._base}/emulator/v1/{name}:release", {})

    def delete_outcome_rule(self, name: str) -> None:
        self._json("DELETE", f"{self._base}/emulator/v1/{name}", None)

    def advance_clock(self, project: str, seconds: int) -> dict[str, Any]:
        url = f"{self._base}/emulator/v1/{project}/clock:advance"
        return self._json("POST", url, {"by": f"{seconds}s"})


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


def details_of(error: exceptions.GoogleAPICallError) -> dict[str, Any]:
    """What api_core parsed from the error: ErrorInfo reason and domain, BadRequest fields.

    Over REST api_core picks the exception class from the HTTP status (409 is Conflict for both
    ALREADY_EXISTS and ABORTED), exactly as against Google's own front end.
    """
    found: dict[str, Any] = {"reason": error.reason, "domain": error.domain, "violations": []}
    for detail in error.details:
        if isinstance(detail, error_details_pb2.BadRequest):  # gRPC: unpacked messages
            found["violations"] = [v.field for v in detail.field_violations]
        elif isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.BadRequest"):
            found["violations"] = [v["field"] for v in detail["fieldViolations"]]  # REST: JSON
    return found


class RoundRobin:
    """Each method call goes to the next of several equivalent objects (replicas' clients)."""

    def __init__(self, targets: list[Any]) -> None:
        self._targets = targets
        self._next = 0

    def __getattr__(self, name: str) -> Any:
        target = self._targets[self._next % len(self._targets)]
        self._next += 1
        return getattr(target, name)


def wiring(transport: str, targets: str, descriptor_set: str = "") -> tuple[Any, Any]:
    """The official client and our emulator's client of ``targets`` over ``transport``
    (``grpc``: ``HOST:PORT`` and our descriptor set; ``rest``: ``http://HOST:PORT``); several
    comma-separated targets (replicas sharing one database) are called in turn, one call each."""
    clients: list[ces_v1beta.EvaluationServiceClient] = []
    emulators: list[Emulator | RestEmulator] = []
    for target in targets.split(","):
        if transport == "grpc":
            channel = grpc.insecure_channel(target)
            clients.append(
                ces_v1beta.EvaluationServiceClient(
                    transport=grpc_transport.EvaluationServiceGrpcTransport(channel=channel)
                )
            )
            emulators.append(Emulator(channel, descriptor_set))
        else:
            clients.append(
                ces_v1beta.EvaluationServiceClient(
                    transport="rest",
                    client_options={"api_endpoint": target},
                    credentials=AnonymousCredentials(),
                )
            )
            emulators.append(RestEmulator(target))
    if len(clients) == 1:
        return clients[0], emulators[0]
    return RoundRobin(clients), RoundRobin(emulators)


def refused(call: Any, kind: type[exceptions.GoogleAPICallError]) -> dict[str, Any]:
    """What api_core parsed from the error of ``call()``, which must raise ``kind``."""
    try:
        call()
    except kind as error:
        return details_of(error)
    raise AssertionError(f"expected {kind.__name__}")


def main(transport: str, targets: str, descriptor_set: str = "") -> int:
    client, emulator = wiring(transport, targets, descriptor_set)

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
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
