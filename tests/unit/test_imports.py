"""EvaluationService.ImportEvaluations in the core over a real SQLite file and export folder
(src/ces_eval/core/exchange/imports.py): the three sources, the conflict strategies, the round
trip of an export and what is reported per evaluation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.longrunning import operations_pb2

from ces_eval.contract import limits
from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.exchange import imports
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, Harness

Request = service_pb2.ImportEvaluationsRequest
Strategy = Request.ImportOptions.ConflictResolutionStrategy
HEADER = "display_name,turn_index,action_type,text"
OTHER_APP = "projects/p/locations/l/apps/other"


class Importer(Harness):
    """The core with an export folder, and its operations awaited."""

    def __init__(self, path: Path, export_root: Path) -> None:
        super().__init__(path)
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(export_dir=export_root),
        )

    def finished(self, operation: operations_pb2.Operation) -> operations_pb2.Operation:
        request = operations_pb2.WaitOperationRequest(name=operation.name)
        request.timeout.FromSeconds(30)
        done: operations_pb2.Operation = self.call("wait_operation", request)
        assert done.done, done
        return done

    def imported(self, request: Request) -> service_pb2.ImportEvaluationsResponse:
        done = self.finished(self.call("import_evaluations", request))
        assert not done.HasField("error"), done.error
        response = service_pb2.ImportEvaluationsResponse()
        assert done.response.Unpack(response)
        metadata = service_pb2.ImportEvaluationsOperationMetadata()
        assert done.metadata.Unpack(metadata) and metadata.HasField("end_time")
        assert metadata.status_message.startswith("Imported ")
        return response

    def csv(self, *rows: str, strategy: int = 0, parent: str = APP, header: str = HEADER) -> Any:
        content = "\n".join([header, *rows]).encode()
        return self.imported(
            Request(
                parent=parent,
                csv_content=content,
                import_options=Request.ImportOptions(conflict_resolution_strategy=strategy),
            )
        )

    def listed(self, parent: str = APP) -> dict[str, evaluation_pb2.Evaluation]:
        response = self.call(
            "list_evaluations", service_pb2.ListEvaluationsRequest(parent=parent, page_size=100)
        )
        return {e.display_name: e for e in response.evaluations}


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Importer]:
    harness = Importer(tmp_path / "db.sqlite", tmp_path / "exports")
    yield harness
    harness.close()


def test_a_csv_imports_its_good_evaluations_and_reports_every_bad_row(core: Importer) -> None:
    response = core.csv(
        "One,1,user_input,hi",
        ",1,agent_response,hello",
        "Broken,1,user_input,",
        ",2,dance,x",
        "Two,1,user_input,bye",
        ",2,user_input,again",
    )
    assert [e.display_name for e in response.evaluations] == ["One", "Two"]
    assert list(response.error_messages) == [
        "line 4: user_input needs a value in column text",
        "line 5: unknown action_type 'dance'; use one of user_input, agent_response, "
        "tool_call, tool_response, mock_tool_response, agent_transfer, updated_variables, "
        "no_tool_calls",
    ]
    assert response.import_failure_count == 1
    stored = core.listed()
    assert set(stored) == {"One", "Two"}
    assert stored["One"] == response.evaluations[0]
    assert stored["One"].created_by == "me@example.com"
    assert len(stored["Two"].golden.turns) == 2


def test_a_csv_evaluation_over_a_limit_is_reported_at_the_row_of_the_field(
    core: Importer,
) -> None:
    deep = '{""a"": ' * 30 + "1" + "}" * 30
    response = core.csv(
        "Deep,1,user_input,hi,,",
        ",2,user_input,fine,,",
        f',2,tool_call,,t,"{deep}"',
        "L" * 513 + ",1,user_input,hi,,",
        header="display_name,turn_index,action_type,text,tool,arguments",
    )
    assert not response.evaluations
    deep_message, long_message = response.error_messages[0], response.error_messages[-1]
    assert deep_message.startswith("line 4: golden.turns[1].steps[1].expectation.tool_call.args")
    assert long_message.startswith("line 5: display_name: ")
    assert response.import_failure_count == 2
    too_long = core.csv("Long,1,user_input," + "x" * 140_000)
    assert list(too_long.error_messages) == [
        "line 2: field larger than field limit (131072); the rest of the file was not read"
    ]


def test_a_csv_that_cannot_be_read_fails_before_the_operation(core: Importer) -> None:
    error = core.error(
        "import_evaluations", Request(parent=APP, csv_content=b"display_name,text\nx,y\n")
    )
    assert error.code is Code.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == ["csv_content"]
    assert "line 1: missing the column(s) turn_index, action_type" in error.message


@pytest.mark.parametrize(
    ("strategy", "display_names", "failed", "text"),
    [
        (Strategy.CONFLICT_RESOLUTION_STRATEGY_UNSPECIFIED, {"One"}, 1, "old"),
        (Strategy.SKIP, {"One"}, 0, "old"),
        (Strategy.OVERWRITE, {"One"}, 0, "new"),
        (Strategy.DUPLICATE, {"One", "One (2)"}, 0, "old"),
    ],
    ids=["unspecified", "skip", "overwrite", "duplicate"],
)
def test_a_display_name_clash_is_settled_by_the_strategy(
    core: Importer, strategy: int, display_names: set[str], failed: int, text: str
) -> None:
    existing = core.create("One", "e1")
    core.seed(existing.name, "r1")
    response = core.csv("One,1,user_input,new", strategy=strategy)
    assert response.import_failure_count == failed
    stored = core.listed()
    assert set(stored) == display_names
    assert stored["One"].name == existing.name  # the stored evaluation keeps its name
    assert stored["One"].golden.turns[0].steps[0].user_input.text == (
        "new" if text == "new" else existing.golden.turns[0].steps[0].user_input.text
    )
    results = core.call(
        "list_evaluation_results", service_pb2.ListEvaluationResultsRequest(parent=existing.name)
    )
    # An overwrite replaces the evaluation with its results; the others keep them.
    assert len(results.evaluation_results) == (0 if strategy == Strategy.OVERWRITE else 1)
    if strategy == Strategy.CONFLICT_RESOLUTION_STRATEGY_UNSPECIFIED:
        [message] = response.error_messages
        assert message.startswith("line 2: ALREADY_EXISTS: the display_name of evaluation 'One'")
    if strategy == Strategy.SKIP:
        assert not response.evaluations and not response.error_messages
    if strategy == Strategy.DUPLICATE:
        assert [e.display_name for e in response.evaluations] == ["One (2)"]
        assert core.csv("One,1,user_input,third", strategy=strategy).evaluations[
            0
        ].display_name == ("One (3)")


def _export(core: Importer, uri: str, parent: str = APP) -> str:
    names = [e.name for e in core.listed(parent).values()]
    request = service_pb2.ExportEvaluationsRequest(
        parent=parent,
        names=names,
        include_evaluations=True,
        include_evaluation_results=True,
        export_options=service_pb2.ExportOptions(
            gcs_uri=uri, export_format=service_pb2.ExportOptions.ExportFormat.YAML
        ),
    )
    done = core.finished(core.call("export_evaluations", request))
    response = service_pb2.ExportEvaluationsResponse()
    assert done.response.Unpack(response)
    return response.evaluations_uri


def test_an_export_round_trip_restores_evaluations_and_results(core: Importer) -> None:
    first = core.create("One", "e1")
    core.create("Two", "e2")
    core.seed(first.name, "r1", display_name="run one")
    uri = _export(core, "gs://bucket/exports")
    assert uri.endswith(".yaml")
    before = core.listed()
    for evaluation in before.values():
        core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=evaluation.name))
    response = core.imported(Request(parent=APP, gcs_uri=uri))
    assert (len(response.evaluations), len(response.evaluation_results)) == (2, 1)
    assert not response.error_messages and response.import_failure_count == 0
    after = core.listed()
    for display_name, evaluation in before.items():
        restored = after[display_name]
        assert restored.name == evaluation.name
        assert restored.golden == evaluation.golden
        assert restored.create_time == evaluation.create_time
        assert restored.etag != evaluation.etag  # a new write, a new etag
    result = core.call(
        "get_evaluation_result",
        service_pb2.GetEvaluationResultRequest(name=f"{first.name}/results/r1"),
    )
    assert result.display_name == "run one"
    assert after["One"].evaluation_runs == before["One"].evaluation_runs  # derived again
    # Into another app: the same IDs under it.
    into_other = core.imported(Request(parent=OTHER_APP, gcs_uri=uri))
    assert {e.name.split("/")[5] for e in into_other.evaluations} == {"other"}
    # Again into the app: every evaluation clashes by its ID.
    again = core.imported(Request(parent=APP, gcs_uri=uri))
    assert again.import_failure_count == 2 and again.evaluation_result_import_failure_count == 1
    assert all("ALREADY_EXISTS" in m for m in again.error_messages)
    duplicated = core.imported(
        Request(
            parent=APP,
            gcs_uri=uri,
            import_options=Request.ImportOptions(conflict_resolution_strategy=Strategy.DUPLICATE),
        )
    )
    assert {e.display_name for e in duplicated.evaluations} == {"One (2)", "Two (2)"}
    assert all(e.name not in {b.name for b in before.values()} for e in duplicated.evaluations)
    [copied_result] = duplicated.evaluation_results
    assert copied_result.name.startswith(
        next(e.name for e in duplicated.evaluations if e.display_name == "One (2)") + "/results/"
    )


def test_results_of_an_evaluation_the_document_lacks_go_to_the_stored_one(
    core: Importer,
) -> None:
    evaluation = core.create("One", "e1")
    core.seed(evaluation.name, "r1")
    request = service_pb2.ExportEvaluationResultsRequest(
        parent=evaluation.name,
        names=[f"{evaluation.name}/results/r1"],
        export_options=service_pb2.ExportOptions(gcs_uri="gs://bucket/results"),
    )
    done = core.finished(core.call("export_evaluation_results", request))
    exported = service_pb2.ExportEvaluationResultsResponse()
    assert done.response.Unpack(exported)
    core.call(
        "delete_evaluation_result",
        service_pb2.DeleteEvaluationResultRequest(name=f"{evaluation.name}/results/r1"),
    )
    uri = exported.evaluation_results_uri
    response = core.imported(Request(parent=APP, gcs_uri=uri))
    assert [r.name for r in response.evaluation_results] == [f"{evaluation.name}/results/r1"]
    missing = core.imported(Request(parent=OTHER_APP, gcs_uri=uri))
    assert missing.evaluation_result_import_failure_count == 1
    assert missing.import_failure_count == 0
    [message] = missing.error_messages
    assert message == (
        f"gcs_uri.evaluationResults[0]: NOT_FOUND: Evaluation {OTHER_APP}/evaluations/e1 not found."
    )


def test_unfit_evaluations_of_a_document_are_reported_and_the_others_imported(
    core: Importer, tmp_path: Path
) -> None:
    (tmp_path / "exports" / "b").mkdir(parents=True)
    (tmp_path / "exports" / "b" / "doc.json").write_text(
        '{"format": "ces-eval.export/v1", "evaluations": ['
        f'{{"name": "{APP}/evaluations/Bad_ID", "displayName": "bad"}},'
        f'{{"name": "{APP}/evaluations/fine", "displayName": "fine",'
        ' "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]}}]}'
    )
    response = core.imported(Request(parent=APP, gcs_uri="gs://b/doc.json"))
    assert [e.display_name for e in response.evaluations] == ["fine"]
    assert response.import_failure_count == 1
    [message] = response.error_messages
    assert message.startswith("gcs_uri.evaluations[0]: gcs_uri.evaluations[0].name: The name")
    assert "Bad_ID" not in message  # a file's text is never quoted


def test_a_csv_object_is_read_as_csv(core: Importer, tmp_path: Path) -> None:
    (tmp_path / "exports" / "b").mkdir(parents=True)
    (tmp_path / "exports" / "b" / "batch.csv").write_text(f"{HEADER}\nOne,1,user_input,hi\n")
    response = core.imported(Request(parent=APP, gcs_uri="gs://b/batch.csv"))
    assert [e.display_name for e in response.evaluations] == ["One"]


def test_conversations_are_not_found_one_by_one(core: Importer) -> None:
    conversations = [f"{APP}/conversations/c1", f"{APP}/conversations/c2"]
    response = core.imported(
        Request(parent=APP, conversation_list=Request.ConversationList(conversations=conversations))
    )
    assert response.import_failure_count == 2 and not response.evaluations
    assert list(response.error_messages) == [
        f"conversation_list.conversations[{i}]: NOT_FOUND: Conversation {name} not found."
        for i, name in enumerate(conversations)
    ]
    error = core.error(
        "import_evaluations",
        Request(
            parent=APP,
            conversation_list=Request.ConversationList(
                conversations=[f"{OTHER_APP}/conversations/c1", "nope"]
            ),
        ),
    )
    assert [v.field for v in error.violations] == [
        "conversation_list.conversations[0]",
        "conversation_list.conversations[1]",
    ]
    empty = core.error(
        "import_evaluations", Request(parent=APP, conversation_list=Request.ConversationList())
    )
    assert [v.field for v in empty.violations] == ["conversation_list.conversations"]


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (Request(parent=APP), Code.INVALID_ARGUMENT, "source"),
        (Request(parent="apps/a", csv_content=b"x"), Code.INVALID_ARGUMENT, "parent"),
        (Request(parent=APP, gcs_uri="s3://b/x"), Code.INVALID_ARGUMENT, "gcs_uri"),
        (Request(parent=APP, gcs_uri="gs://b/none.json"), Code.NOT_FOUND, ""),
        (
            Request(
                parent=APP,
                csv_content=b"x",
                import_options=Request.ImportOptions(conflict_resolution_strategy=9),
            ),
            Code.INVALID_ARGUMENT,
            "import_options.conflict_resolution_strategy",
        ),
    ],
    ids=["no-source", "bad-parent", "bad-uri", "no-object", "unknown-strategy"],
)
def test_a_request_that_cannot_start_fails_at_once(
    core: Importer, request_: Request, code: Code, field: str
) -> None:
    error = core.error("import_evaluations", request_)
    assert error.code is code
    assert [v.field for v in error.violations] == ([field] if field else [])


def test_an_export_round_trip_restores_runs_too(core: Importer) -> None:
    """Evaluations with their results exported, their runs exported beside: importing both
    into a fresh app restores the runs (renamed into it) and the results still name them."""
    evaluation = core.create("One", "e1")
    run_name = f"{APP}/evaluationRuns/run-1"
    core.call(
        "create_evaluation_run",
        emulator_pb2.CreateEvaluationRunRequest(
            parent=APP,
            evaluation_run_id="run-1",
            evaluation_run=evaluation_pb2.EvaluationRun(
                display_name="nightly",
                evaluations=[evaluation.name],
                evaluation_results=[f"{evaluation.name}/results/r1"],
                state=evaluation_pb2.EvaluationRun.EvaluationRunState.COMPLETED,
            ),
        ),
    )
    core.seed(evaluation.name, "r1", evaluation_run=run_name)
    evaluations_uri = _export(core, "gs://bucket/evaluations")
    runs = core.finished(
        core.call(
            "export_evaluation_runs",
            service_pb2.ExportEvaluationRunsRequest(
                parent=APP,
                names=[run_name],
                export_options=service_pb2.ExportOptions(gcs_uri="gs://bucket/runs"),
            ),
        )
    )
    exported = service_pb2.ExportEvaluationRunsResponse()
    assert runs.response.Unpack(exported)
    runs_uri = exported.evaluation_runs_uri
    assert runs_uri.startswith("gs://bucket/runs")
    core.imported(Request(parent=OTHER_APP, gcs_uri=evaluations_uri))
    response = core.imported(Request(parent=OTHER_APP, gcs_uri=runs_uri))
    moved = f"{OTHER_APP}/evaluationRuns/run-1"
    assert [r.name for r in response.evaluation_runs] == [moved]
    assert response.evaluation_run_import_failure_count == 0
    stored = core.call("get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=moved))
    assert stored.display_name == "nightly"
    assert list(stored.evaluations) == [f"{OTHER_APP}/evaluations/e1"]
    assert list(stored.evaluation_results) == [f"{OTHER_APP}/evaluations/e1/results/r1"]
    result = core.call(
        "get_evaluation_result",
        service_pb2.GetEvaluationResultRequest(name=f"{OTHER_APP}/evaluations/e1/results/r1"),
    )
    assert result.evaluation_run == moved
    # Again: the run's name is taken; it fails, or is skipped with SKIP.
    again = core.imported(Request(parent=OTHER_APP, gcs_uri=runs_uri))
    assert again.evaluation_run_import_failure_count == 1
    skipped = core.imported(
        Request(
            parent=OTHER_APP,
            gcs_uri=runs_uri,
            import_options=Request.ImportOptions(conflict_resolution_strategy=Strategy.SKIP),
        )
    )
    assert skipped.evaluation_run_import_failure_count == 0 and not skipped.evaluation_runs


def test_a_response_naming_more_than_fits_lists_what_fits_and_counts_the_rest() -> None:
    """Imported items listed by name and display name alone can pass what clients read too
    (8,000 of about 570 bytes: 4.6 MB, stored whole before): as many as fit are listed, the rest
    counted for the status message."""
    long = "n" * limits.MAX_DISPLAY_NAME
    outcome = imports._Outcome(
        evaluations=[
            evaluation_pb2.Evaluation(name=f"{APP}/evaluations/e{i}", display_name=f"{long}{i}")
            for i in range(8000)
        ],
        errors=["x" * 5000] * 500,
    )
    response, left_out = imports._response(outcome)
    assert response.ByteSize() <= limits.MAX_RESOURCE_BYTES - 1024
    assert 0 < left_out < 8000
    assert len(response.evaluations) + left_out == 8000
    assert response.evaluations[0].display_name == f"{long}0" and response.evaluations[0].name
    assert len(response.error_messages) == limits.MAX_VIOLATIONS + 1
