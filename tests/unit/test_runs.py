"""Evaluation runs through the core, over a real SQLite file: the emulator's seed, Get and List
(filters, orders, pages), the long-running delete that takes the run's results and their share
of the evaluations' derived fields with it, the export of runs, and ListEvaluations'
``evaluation_run_filter`` over the runs' fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from google.rpc import code_pb2

from ces_eval.core import exchange
from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, EMULATOR_IMPORT, Harness, violations

Run = evaluation_pb2.EvaluationRun
Result = evaluation_pb2.EvaluationResult
COMPLETED = Result.ExecutionState.COMPLETED


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    storage = harness.storage
    secret = harness.run(storage.secret())
    harness.core = Core(
        storage, pages.PageTokens(secret), settings=Settings(export_dir=tmp_path / "exports")
    )
    yield harness
    harness.close()


def seed_run(harness: Harness, run_id: str, **fields: Any) -> Any:
    return harness.call(
        "create_evaluation_run",
        emulator_pb2.CreateEvaluationRunRequest(
            parent=APP, evaluation_run_id=run_id, evaluation_run=Run(**fields)
        ),
    )


def finished(harness: Harness, operation: operations_pb2.Operation) -> operations_pb2.Operation:
    done = harness.run(harness.core.context.runner.wait(operation.name, timeout=30))
    assert done is not None and done.done, done
    return done


def run_list(harness: Harness, **fields: Any) -> Any:
    return harness.call(
        "list_evaluation_runs", service_pb2.ListEvaluationRunsRequest(parent=APP, **fields)
    )


def eval_list(harness: Harness, **fields: Any) -> list[str]:
    """The display names of the evaluations listed, sorted."""
    listed = harness.call(
        "list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP, **fields)
    )
    return sorted(e.display_name for e in listed.evaluations)


def test_a_seeded_run_keeps_its_output_fields_and_gets_a_name_and_create_time(
    core: Harness,
) -> None:
    evaluation = core.create("One")
    run = seed_run(
        core,
        "run-1",
        name=f"{APP}/evaluationRuns/ignored",
        display_name="Nightly",
        initiated_by="ci@example.com",
        evaluations=[evaluation.name],
        state=Run.EvaluationRunState.COMPLETED,
        progress=Run.Progress(total_count=2, passed_count=2),
        run_count=2,
    )
    assert run.name == f"{APP}/evaluationRuns/run-1"
    assert run.create_time.seconds > 0
    assert (run.initiated_by, run.state, run.progress.passed_count) == (
        "ci@example.com",
        Run.EvaluationRunState.COMPLETED,
        2,
    )
    got = core.call("get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=run.name))
    assert got == run
    absent = core.error(
        "get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=f"{APP}/evaluationRuns/x")
    )
    assert absent.code is Code.NOT_FOUND


def test_a_seed_lists_only_evaluations_and_results_of_its_app(core: Harness) -> None:
    other = "projects/p/locations/l/apps/b/evaluations/e"
    error = core.error(
        "create_evaluation_run",
        emulator_pb2.CreateEvaluationRunRequest(
            parent=APP,
            evaluation_run=Run(evaluations=[other, "nonsense"], evaluation_results=["x"]),
        ),
    )
    assert error.code is Code.INVALID_ARGUMENT
    assert violations(error) == [
        "evaluation_run.evaluations[0]",
        "evaluation_run.evaluations[1]",
        "evaluation_run.evaluation_results[0]",
    ]
    taken = seed_run(core, "run-1")
    again = core.error(
        "create_evaluation_run",
        emulator_pb2.CreateEvaluationRunRequest(
            parent=APP, evaluation_run_id="run-1", evaluation_run=Run()
        ),
    )
    assert again.code is Code.ALREADY_EXISTS and taken.name in again.message


def test_list_filters_orders_and_pages_over_run_fields(core: Harness) -> None:
    for index, who in enumerate(("a@x", "b@x", "a@x")):
        seed_run(
            core,
            f"run-{index}",
            display_name=f"R{index}",
            initiated_by=who,
            app_version_display_name=f"v{index}",
            state=Run.EvaluationRunState.COMPLETED if index else Run.EvaluationRunState.RUNNING,
        )
    newest_first = run_list(core)
    assert [r.display_name for r in newest_first.evaluation_runs] == ["R2", "R1", "R0"]
    by_name = run_list(core, order_by="name")
    assert [r.display_name for r in by_name.evaluation_runs] == ["R0", "R1", "R2"]
    created = run_list(core, order_by="create_time asc")
    assert [r.display_name for r in created.evaluation_runs] == ["R0", "R1", "R2"]
    filtered = run_list(core, filter='initiated_by = "a@x" AND state = COMPLETED')
    assert [r.display_name for r in filtered.evaluation_runs] == ["R2"]
    first = run_list(core, page_size=2, order_by="name")
    second = run_list(core, page_size=2, order_by="name", page_token=first.next_page_token)
    assert [r.display_name for r in second.evaluation_runs] == ["R2"]
    assert second.next_page_token == ""
    for bad, field in (
        (service_pb2.ListEvaluationRunsRequest(parent=APP, filter="colour = 1"), "filter"),
        (service_pb2.ListEvaluationRunsRequest(parent=APP, order_by="state"), "order_by"),
    ):
        error = core.error("list_evaluation_runs", bad)
        assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, [field])


def test_delete_takes_the_runs_results_and_the_evaluations_derived_fields_follow(
    core: Harness,
) -> None:
    one, two = core.create("One"), core.create("Two")
    doomed = seed_run(core, "doomed", evaluations=[one.name, two.name])
    kept = seed_run(core, "kept")
    pass_ = {"execution_state": COMPLETED, "evaluation_status": Result.Outcome.PASS}
    core.seed(one.name, "r1", evaluation_run=doomed.name, **pass_)
    core.seed(two.name, "r2", evaluation_run=doomed.name, **pass_)
    core.seed(one.name, "r3", evaluation_run=kept.name, execution_state=COMPLETED)
    before = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=one.name))
    assert list(before.evaluation_runs) == [kept.name, doomed.name]

    operation = core.call(
        "delete_evaluation_run", service_pb2.DeleteEvaluationRunRequest(name=doomed.name)
    )
    done = finished(core, operation)
    assert done.response.Is(empty_pb2.Empty.DESCRIPTOR)
    assert done.metadata.Is(service_pb2.DeleteEvaluationRunOperationMetadata.DESCRIPTOR)

    gone = core.error("get_evaluation_run", service_pb2.GetEvaluationRunRequest(name=doomed.name))
    assert gone.code is Code.NOT_FOUND
    left = core.call(
        "list_evaluation_results",
        service_pb2.ListEvaluationResultsRequest(parent=f"{APP}/evaluations/-", order_by="name"),
    )
    assert [r.name.rsplit("/", 1)[1] for r in left.evaluation_results] == ["r3"]
    after = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=one.name))
    assert list(after.evaluation_runs) == [kept.name]
    assert after.last_completed_result.name.endswith("/r3")
    assert after.etag != before.etag
    groups = after.aggregated_metrics.metrics_by_app_version
    assert [(g.pass_count, g.fail_count) for g in groups] == [(0, 0)]
    emptied = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=two.name))
    assert not emptied.evaluation_runs and not emptied.HasField("last_completed_result")
    assert not emptied.aggregated_metrics.metrics_by_app_version

    again = core.error(
        "delete_evaluation_run", service_pb2.DeleteEvaluationRunRequest(name=doomed.name)
    )
    assert again.code is Code.NOT_FOUND
    malformed = core.error(
        "delete_evaluation_run", service_pb2.DeleteEvaluationRunRequest(name="runs/x")
    )
    assert (malformed.code, violations(malformed)) == (Code.INVALID_ARGUMENT, ["name"])


def test_export_writes_the_runs_inline_or_to_a_file(core: Harness, tmp_path: Path) -> None:
    one = seed_run(core, "one", display_name="One")
    two = seed_run(core, "two", display_name="Two")
    inline = finished(
        core,
        core.call(
            "export_evaluation_runs",
            service_pb2.ExportEvaluationRunsRequest(parent=APP, names=[two.name, one.name]),
        ),
    )
    response = service_pb2.ExportEvaluationRunsResponse()
    assert inline.response.Unpack(response)
    document = json.loads(response.evaluation_runs_content)
    assert [r["name"] for r in document["evaluationRuns"]] == [two.name, one.name]
    assert set(document) == {"format", "evaluationRuns"}

    options = service_pb2.ExportOptions(
        gcs_uri="gs://bucket/runs", export_format=service_pb2.ExportOptions.ExportFormat.YAML
    )
    to_file = finished(
        core,
        core.call(
            "export_evaluation_runs",
            service_pb2.ExportEvaluationRunsRequest(
                parent=APP, names=[one.name], export_options=options
            ),
        ),
    )
    written = service_pb2.ExportEvaluationRunsResponse()
    assert to_file.response.Unpack(written)
    assert written.evaluation_runs_uri.startswith("gs://bucket/runs/evaluation-runs-")
    assert written.evaluation_runs_uri.endswith(".yaml")
    path = tmp_path / "exports" / written.evaluation_runs_uri.removeprefix("gs://")
    assert "evaluationRuns:" in path.read_text()

    missing = finished(
        core,
        core.call(
            "export_evaluation_runs",
            service_pb2.ExportEvaluationRunsRequest(
                parent=APP, names=[one.name, f"{APP}/evaluationRuns/absent"]
            ),
        ),
    )
    assert missing.error.code == code_pb2.NOT_FOUND and "absent" in missing.error.message
    for request, field in (
        (service_pb2.ExportEvaluationRunsRequest(parent=APP), "names"),
        (
            service_pb2.ExportEvaluationRunsRequest(
                parent=APP, names=["projects/p/locations/l/apps/b/evaluationRuns/x"]
            ),
            "names[0]",
        ),
    ):
        error = core.error("export_evaluation_runs", request)
        assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, [field])


def test_evaluation_run_filter_selects_evaluations_with_a_result_of_a_matching_run(
    core: Harness,
) -> None:
    one, two = core.create("One"), core.create("Two")
    core.create("Three")  # no results: matches no run filter
    ci = seed_run(core, "ci", initiated_by="ci@x", app_version_display_name="v1")
    me = seed_run(core, "me", initiated_by="me@x", app_version_display_name="v2")
    core.seed(one.name, "r1", evaluation_run=ci.name)
    core.seed(two.name, "r2", evaluation_run=me.name)
    core.seed(two.name, "r3", evaluation_run=f"{APP}/evaluationRuns/never-stored")
    assert eval_list(core, evaluation_run_filter='initiated_by = "ci@x"') == ["One"]
    assert eval_list(core, evaluation_run_filter='app_version_display_name = "v2"') == ["Two"]
    after = ci.create_time.ToJsonString()
    assert eval_list(core, evaluation_run_filter=f'create_time > "{after}"') == ["Two"]
    assert eval_list(core, evaluation_run_filter=f'create_time >= "{after}"') == ["One", "Two"]
    both = eval_list(
        core,
        evaluation_run_filter='initiated_by = "me@x"',
        evaluation_filter='display_name = "One"',
    )
    assert both == []
    # A result field is no run field.
    error = core.error(
        "list_evaluations",
        service_pb2.ListEvaluationsRequest(parent=APP, evaluation_run_filter="execution_state = 2"),
    )
    assert violations(error) == ["evaluation_run_filter"]


@pytest.mark.parametrize("fmt", [service_pb2.ExportOptions.ExportFormat.JSON, 2])
def test_the_document_carries_runs_and_the_emulators_import_refuses_them(
    core: Harness, fmt: int
) -> None:
    run = seed_run(
        core,
        "one",
        display_name="yes",  # a string YAML 1.1 would read as a boolean
        evaluation_run_summaries={"e": Run.EvaluationRunSummary(passed_count=1)},
    )
    document = exchange.dump(exchange.Bundle(runs=[run]), fmt)
    assert exchange.load(document) == exchange.Bundle(runs=[run])
    error = core.error(
        EMULATOR_IMPORT, emulator_pb2.ImportEvaluationsRequest(parent=APP, content=document)
    )
    assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, ["content.evaluationRuns"])
