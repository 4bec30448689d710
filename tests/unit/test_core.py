"""The service core called in process over a real SQLite file: AIP semantics, table-driven."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import field_mask_pb2

from ces_eval.access import Caller
from ces_eval.core.aip import pages
from ces_eval.core.service import Core
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import tables
from ces_eval.storage.sqlite import SqliteStorage

APP = "projects/p/locations/l/apps/a"
ME = Caller("me@example.com")
EMULATOR_IMPORT = "/ces_eval.emulator.v1.EmulatorService/ImportEvaluations"
Result = evaluation_pb2.EvaluationResult


class Harness:
    """A Core over a temporary database, with a private event loop for synchronous tests."""

    def __init__(self, path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.storage = SqliteStorage(path)
        self.run(self.storage.open())
        self.core = Core(self.storage, pages.PageTokens(self.run(self.storage.secret())))

    def run(self, awaitable: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(awaitable)

    def call(self, method: str, request: Any, caller: Caller = ME) -> Any:
        # By snake_case name, or by gRPC path where two services share the name
        # (EMULATOR_IMPORT: the emulator's ImportEvaluations).
        handler: Callable[[Any, Caller], Awaitable[Any]] = (
            self.core.handler(method) if method.startswith("/") else getattr(self.core, method)
        )
        return self.run(handler(request, caller))

    def error(self, method: str, request: Any) -> ServiceError:
        with pytest.raises(ServiceError) as raised:
            self.call(method, request)
        return raised.value

    def close(self) -> None:
        # Work still running (a run a test left held) stops first, as at a server's stop.
        self.run(self.core.context.runner.shutdown())
        self.run(self.storage.close())
        self.loop.close()

    def create(self, display_name: str, evaluation_id: str = "", **fields: Any) -> Any:
        return self.call(
            "create_evaluation",
            service_pb2.CreateEvaluationRequest(
                parent=APP, evaluation_id=evaluation_id, evaluation=golden(display_name, **fields)
            ),
        )

    def seed(self, evaluation: str, result_id: str, **fields: Any) -> Any:
        return self.call(
            "create_evaluation_result",
            emulator_pb2.CreateEvaluationResultRequest(
                parent=evaluation,
                evaluation_result_id=result_id,
                evaluation_result=Result(**fields),
            ),
        )


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def golden(display_name: str, **fields: Any) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(display_name=display_name, **fields)
    message.golden.turns.add().steps.add().user_input.text = "hi"
    return message


def violations(error: ServiceError) -> list[str]:
    return [v.field for v in error.violations]


# -- create ------------------------------------------------------------------------------------


def test_create_sets_server_fields_and_ignores_output_only_input(core: Harness) -> None:
    incoming = golden("One", name=f"{APP}/evaluations/ignored", etag="mine", created_by="x")
    incoming.create_time.seconds = 5
    incoming.aggregated_metrics.metrics_by_app_version.add().pass_count = 9
    created = core.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation_id="one", evaluation=incoming),
    )
    assert created.name == f"{APP}/evaluations/one"
    assert created.created_by == created.last_updated_by == ME.user
    assert created.create_time.seconds > 5
    assert created.create_time == created.update_time
    assert created.etag not in {"", "mine"}
    assert not created.HasField("aggregated_metrics")
    stored = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=created.name))
    assert stored == created


def test_server_assigned_ids_follow_aip_122(core: Harness) -> None:
    names = {core.create(f"E{i}").name for i in range(5)}
    assert len(names) == 5
    for name in names:
        identifier = name.rsplit("/", 1)[1]
        assert identifier[0].isalpha()
        assert identifier == identifier.lower()


def _with(**kwargs: Any) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(display_name="x")
    for path, value in kwargs.items():
        target: Any = message
        *parents, leaf = path.split("__")
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return message


def _many_turns(count: int) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(display_name="x")
    for _ in range(count):
        message.golden.turns.add().steps.add().user_input.text = "t"
    return message


def _thresholds(similarity: int, tool: float) -> evaluation_pb2.Evaluation:
    message = _many_turns(1)
    turn = message.golden.turns[0].turn_level_metrics_thresholds_override
    turn.semantic_similarity_success_threshold = similarity
    turn.overall_tool_invocation_correctness_threshold = tool
    return message


def _scenario(max_turns: int = 5, **overrides: Any) -> evaluation_pb2.Evaluation:
    message = evaluation_pb2.Evaluation(display_name="x")
    message.scenario.task = overrides.get("task", "Cancel my order")
    message.scenario.rubrics.extend(overrides.get("rubrics", ["polite"]))
    if overrides.get("expectation", True):
        message.scenario.scenario_expectations.add().agent_response.role = "agent"
    message.scenario.max_turns = max_turns
    return message


@pytest.mark.parametrize(
    ("parent", "evaluation_id", "evaluation", "fields"),
    [
        ("apps/a", "", _many_turns(1), ["parent"]),
        (APP + "/", "", _many_turns(1), ["parent"]),
        (APP, "Upper", _many_turns(1), ["evaluation_id"]),
        (APP, "ends-", _many_turns(1), ["evaluation_id"]),
        (APP, "1st", _many_turns(1), ["evaluation_id"]),
        (APP, "", evaluation_pb2.Evaluation(), ["evaluation.display_name", "evaluation.inputs"]),
        (APP, "", _many_turns(101), ["evaluation.golden.turns"]),
        (
            APP,
            "",
            _thresholds(5, 1.5),
            [
                "evaluation.golden.turns[0].turn_level_metrics_thresholds_override."
                "semantic_similarity_success_threshold",
                "evaluation.golden.turns[0].turn_level_metrics_thresholds_override."
                "overall_tool_invocation_correctness_threshold",
            ],
        ),
        (APP, "", _scenario(max_turns=101), ["evaluation.scenario.max_turns"]),
        (
            APP,
            "",
            _scenario(task="", rubrics=[], expectation=False),
            [
                "evaluation.scenario.task",
                "evaluation.scenario.rubrics",
                "evaluation.scenario.scenario_expectations",
            ],
        ),
    ],
)
def test_create_rejects_invalid_input_listing_every_violation(
    core: Harness,
    parent: str,
    evaluation_id: str,
    evaluation: evaluation_pb2.Evaluation,
    fields: list[str],
) -> None:
    error = core.error(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(
            parent=parent, evaluation_id=evaluation_id, evaluation=evaluation
        ),
    )
    assert error.code is Code.INVALID_ARGUMENT
    assert violations(error) == fields
    assert error.details()[0].TypeName() == "google.rpc.ErrorInfo"


def test_valid_boundaries_are_accepted(core: Harness) -> None:
    for index, evaluation in enumerate([_many_turns(100), _thresholds(4, 1.0), _scenario(100)]):
        evaluation.display_name = f"ok{index}"
        core.call(
            "create_evaluation",
            service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation),
        )


def test_duplicates_are_already_exists(core: Harness) -> None:
    first = core.create("One", "one")
    by_id = core.error(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(
            parent=APP, evaluation_id="one", evaluation=golden("Two")
        ),
    )
    assert by_id.code is Code.ALREADY_EXISTS
    assert by_id.resource == ("ces.googleapis.com/Evaluation", first.name)
    by_display_name = core.error(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation=golden("One")),
    )
    assert by_display_name.code is Code.ALREADY_EXISTS
    assert first.name in by_display_name.message
    # Display names are unique per app only.
    core.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(
            parent="projects/p/locations/l/apps/other", evaluation=golden("One")
        ),
    )


# -- get / list --------------------------------------------------------------------------------


def test_get_missing_names_the_resource(core: Harness) -> None:
    error = core.error(
        "get_evaluation", service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/x")
    )
    assert error.code is Code.NOT_FOUND
    assert f"{APP}/evaluations/x" in error.message
    assert error.reason == "RESOURCE_NOT_FOUND"


def _list(core: Harness, **fields: Any) -> Any:
    return core.call("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP, **fields))


def test_list_pages_orders_and_filters(core: Harness) -> None:
    for index, tags in enumerate([["a"], ["a", "b"], ["b"], []]):
        core.create(f"E{index}", f"e{index}", tags=tags)
    by_update = _list(core)
    assert [e.display_name for e in by_update.evaluations] == ["E3", "E2", "E1", "E0"]
    by_name = _list(core, order_by="name")
    assert [e.display_name for e in by_name.evaluations] == ["E0", "E1", "E2", "E3"]
    asc = _list(core, order_by="create_time asc")
    assert [e.display_name for e in asc.evaluations] == ["E0", "E1", "E2", "E3"]
    tagged = _list(core, evaluation_filter='tags:"b" AND NOT display_name = "E2"', order_by="name")
    assert [e.display_name for e in tagged.evaluations] == ["E1"]
    first = _list(core, page_size=3, order_by="name")
    assert len(first.evaluations) == 3
    second = _list(core, page_size=3, order_by="name", page_token=first.next_page_token)
    assert [e.display_name for e in second.evaluations] == ["E3"]
    assert second.next_page_token == ""


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"page_size": -1}, "page_size"),
        ({"order_by": "display_name"}, "order_by"),
        ({"order_by": "name desc, create_time"}, "order_by"),
        ({"evaluation_filter": "display_name = "}, "evaluation_filter"),
        ({"evaluation_filter": "colour = red"}, "evaluation_filter"),
        ({"filter": "create_time > yesterday"}, "filter"),
        ({"evaluation_run_filter": "execution_state = DONE"}, "evaluation_run_filter"),
        ({"page_token": "not-a-token"}, "page_token"),
    ],
)
def test_list_rejects_bad_arguments(core: Harness, fields: dict[str, Any], field: str) -> None:
    error = core.error("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP, **fields))
    assert error.code is Code.INVALID_ARGUMENT
    assert violations(error) == [field]


def test_filter_errors_report_the_position(core: Harness) -> None:
    error = core.error(
        "list_evaluations",
        service_pb2.ListEvaluationsRequest(parent=APP, evaluation_filter='tags:"x" AND colour = 1'),
    )
    assert "position 13" in error.violations[0].description


def test_page_size_is_coerced_to_the_maximum(core: Harness) -> None:
    core.create("E", "e")
    assert len(_list(core, page_size=5000).evaluations) == 1


def test_page_tokens_are_bound_to_their_query(core: Harness) -> None:
    for index in range(3):
        core.create(f"E{index}")
    token = _list(core, page_size=1, evaluation_filter='display_name = "E*"').next_page_token
    assert token
    for changed in ({"evaluation_filter": 'display_name = "E1"'}, {"order_by": "name"}):
        fields = {"page_size": 1, "evaluation_filter": 'display_name = "E*"', **changed}
        error = core.error(
            "list_evaluations",
            service_pb2.ListEvaluationsRequest(parent=APP, page_token=token, **fields),
        )
        assert violations(error) == ["page_token"]
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    error = core.error(
        "list_evaluations",
        service_pb2.ListEvaluationsRequest(
            parent=APP, page_size=1, evaluation_filter='display_name = "E*"', page_token=tampered
        ),
    )
    assert violations(error) == ["page_token"]


def test_last_ten_results_only_when_requested(core: Harness) -> None:
    evaluation = core.create("E", "e")
    for index in range(12):
        core.seed(evaluation.name, f"r{index:02d}")
    plain = _list(core)
    assert len(plain.evaluations[0].last_ten_results) == 0
    with_results = _list(core, last_ten_results=True)
    recent = [r.name.rsplit("/", 1)[1] for r in with_results.evaluations[0].last_ten_results]
    assert recent == [f"r{i:02d}" for i in range(11, 1, -1)]
    got = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=evaluation.name))
    assert len(got.last_ten_results) == 0


# -- update ------------------------------------------------------------------------------------


def _update(core: Harness, evaluation: Any, paths: list[str] | None) -> Any:
    request = service_pb2.UpdateEvaluationRequest(evaluation=evaluation)
    if paths is not None:
        request.update_mask.CopyFrom(field_mask_pb2.FieldMask(paths=paths))
    return core.call("update_evaluation", request)


def test_update_mask_semantics(core: Harness) -> None:
    created = core.create("E", "e", description="before", tags=["t"])
    change = golden("Renamed", name=created.name, description="after")
    masked = _update(core, change, ["description"])
    assert (masked.display_name, masked.description, list(masked.tags)) == ("E", "after", ["t"])
    assert masked.etag != created.etag
    assert masked.update_time.ToNanoseconds() > created.update_time.ToNanoseconds()
    assert masked.create_time == created.create_time
    assert masked.last_updated_by == ME.user
    for paths in (None, ["*"]):
        change.description = f"all-{paths}"
        replaced = _update(core, change, paths)
        # Absent mask and "*" replace every updatable field: tags were not sent, so they go.
        assert (replaced.display_name, list(replaced.tags)) == ("Renamed", [])
        assert replaced.description == f"all-{paths}"


@pytest.mark.parametrize(
    "paths", [["no_such_field"], ["create_time"], ["name"], ["golden.turns.steps"], ["*", "tags"]]
)
def test_update_rejects_bad_masks(core: Harness, paths: list[str]) -> None:
    created = core.create("E", "e")
    request = service_pb2.UpdateEvaluationRequest(
        evaluation=golden("E", name=created.name), update_mask=field_mask_pb2.FieldMask(paths=paths)
    )
    error = core.error("update_evaluation", request)
    assert error.code is Code.INVALID_ARGUMENT
    assert set(violations(error)) == {"update_mask"}


def test_update_with_a_stale_etag_is_aborted(core: Harness) -> None:
    created = core.create("E", "e")
    _update(core, golden("E", name=created.name, description="x"), ["description"])
    stale = golden("E", name=created.name, description="y", etag=created.etag)
    error = core.error(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=stale, update_mask=field_mask_pb2.FieldMask(paths=["description"])
        ),
    )
    assert error.code is Code.ABORTED


def test_update_validates_the_result(core: Harness) -> None:
    created = core.create("E", "e")
    error = core.error(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=evaluation_pb2.Evaluation(name=created.name),
            update_mask=field_mask_pb2.FieldMask(paths=["display_name"]),
        ),
    )
    assert violations(error) == ["evaluation.display_name"]


# -- delete ------------------------------------------------------------------------------------


def test_delete_checks_etag_force_and_cascades(core: Harness) -> None:
    created = core.create("E", "e")
    core.call(  # a dataset holding it (tests/unit/test_datasets.py holds the references)
        "create_evaluation_dataset",
        service_pb2.CreateEvaluationDatasetRequest(
            parent=APP,
            evaluation_dataset=evaluation_pb2.EvaluationDataset(
                display_name="D", evaluations=[created.name]
            ),
        ),
    )
    core.seed(created.name, "r1")
    fresh = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=created.name))
    stale = core.error(
        "delete_evaluation",
        service_pb2.DeleteEvaluationRequest(name=created.name, etag=created.etag),
    )
    assert stale.code is Code.ABORTED  # seeding a result changed the etag
    in_use = core.error("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=created.name))
    assert in_use.code is Code.FAILED_PRECONDITION
    core.call(
        "delete_evaluation",
        service_pb2.DeleteEvaluationRequest(name=created.name, etag=fresh.etag, force=True),
    )
    gone = core.error(
        "get_evaluation_result",
        service_pb2.GetEvaluationResultRequest(name=f"{created.name}/results/r1"),
    )
    assert gone.code is Code.NOT_FOUND
    again = core.error("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=created.name))
    assert again.code is Code.NOT_FOUND


# -- results -----------------------------------------------------------------------------------


def test_results_list_across_evaluations_with_filters(core: Harness) -> None:
    one = core.create("One", "one")
    two = core.create("Two", "two")
    completed = Result.ExecutionState.COMPLETED
    core.seed(
        one.name,
        "a",
        evaluation_run=f"{APP}/evaluationRuns/r1",
        execution_state=completed,
        evaluation_status=Result.Outcome.PASS,
    )
    core.seed(one.name, "b", evaluation_run=f"{APP}/evaluationRuns/r2")
    core.seed(two.name, "c", evaluation_run=f"{APP}/evaluationRuns/r1")

    def listed(parent: str, filter_text: str = "") -> list[str]:
        response = core.call(
            "list_evaluation_results",
            service_pb2.ListEvaluationResultsRequest(
                parent=parent, filter=filter_text, order_by="name"
            ),
        )
        return [r.name.rsplit("/", 1)[1] for r in response.evaluation_results]

    assert listed(f"{APP}/evaluations/-") == ["a", "b", "c"]
    assert listed(one.name) == ["a", "b"]
    assert listed(f"{APP}/evaluations/-", f'evaluation_run = "{APP}/evaluationRuns/r1"') == [
        "a",
        "c",
    ]
    assert listed(
        f"{APP}/evaluations/-", "execution_state = COMPLETED AND evaluation_status = PASS"
    ) == ["a"]
    missing = core.error(
        "list_evaluation_results",
        service_pb2.ListEvaluationResultsRequest(parent=f"{APP}/evaluations/none"),
    )
    assert missing.code is Code.NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"evaluation_status": Result.Outcome.PASS}, "evaluation_result.evaluation_status"),
        ({"evaluation_run": "runs/1"}, "evaluation_result.evaluation_run"),
        (
            {"evaluation_run": "projects/p/locations/l/apps/other/evaluationRuns/1"},
            "evaluation_result.evaluation_run",
        ),
        ({"app_version": f"{APP}/versions/"}, "evaluation_result.app_version"),
    ],
)
def test_seeded_results_are_validated(core: Harness, fields: dict[str, Any], field: str) -> None:
    evaluation = core.create("E", "e")
    error = core.error(
        "create_evaluation_result",
        emulator_pb2.CreateEvaluationResultRequest(
            parent=evaluation.name, evaluation_result=Result(**fields)
        ),
    )
    assert violations(error) == [field]


def test_seeded_result_defaults_and_output_fields(core: Harness) -> None:
    evaluation = core.create("E", "e")
    seeded = core.seed(evaluation.name, "", initiated_by="ci@example.com", changelog="v2")
    assert seeded.display_name.startswith("E Result - ")
    assert seeded.initiated_by == "ci@example.com"  # output-only fields are what a run wrote
    fetched = core.call(
        "get_evaluation_result", service_pb2.GetEvaluationResultRequest(name=seeded.name)
    )
    assert fetched == seeded
    duplicate = core.error(
        "create_evaluation_result",
        emulator_pb2.CreateEvaluationResultRequest(
            parent=evaluation.name, evaluation_result=Result(display_name=seeded.display_name)
        ),
    )
    assert duplicate.code is Code.ALREADY_EXISTS
    core.call(
        "delete_evaluation_result", service_pb2.DeleteEvaluationResultRequest(name=seeded.name)
    )
    assert (
        core.error(
            "delete_evaluation_result", service_pb2.DeleteEvaluationResultRequest(name=seeded.name)
        ).code
        is Code.NOT_FOUND
    )


def test_reset_project(core: Harness) -> None:
    evaluation = core.create("E", "e")
    core.seed(evaluation.name, "r")
    core.call(
        "create_evaluation_expectation",
        service_pb2.CreateEvaluationExpectationRequest(
            parent=APP,
            evaluation_expectation=evaluation_pb2.EvaluationExpectation(
                display_name="X", llm_criteria={"prompt": "p"}
            ),
        ),
    )
    core.call(
        "create_outcome_rule",
        emulator_pb2.CreateOutcomeRuleRequest(
            parent=APP, outcome_rule=emulator_pb2.OutcomeRule(outcome=emulator_pb2.OutcomeRule.FAIL)
        ),
    )
    endpoint = emulator_pb2.AgentEndpoint(name=f"{APP}/agentEndpoint", uri="http://127.0.0.1:1/")
    core.call(
        "update_agent_endpoint", emulator_pb2.UpdateAgentEndpointRequest(agent_endpoint=endpoint)
    )
    response = core.call("reset_project", emulator_pb2.ResetProjectRequest(name="projects/p"))
    assert (response.deleted_evaluations, response.deleted_evaluation_results) == (1, 1)
    # Every generic table's count, by its collection: those seeded above one, the others none.
    # The app the creates were made in exists from that use (docs/semantics.md, "Apps").
    seeded = {"evaluationExpectations": 1, "outcomeRules": 1, "agentEndpoints": 1, "apps": 1}
    assert dict(response.deleted_resources) == {
        **{table.collection: 0 for table in tables.TABLES},
        **seeded,
    }
    assert len(response.deleted_resources) == len(tables.TABLES) > len(seeded)
    gone = core.call("get_agent_endpoint", emulator_pb2.GetAgentEndpointRequest(name=endpoint.name))
    assert gone.uri == ""
    assert (
        core.error("reset_project", emulator_pb2.ResetProjectRequest(name="p")).code
        is Code.INVALID_ARGUMENT
    )
