"""Evaluation runs, driven by Google's official Python client against a running server.

Runs have no public create: the emulator seeds two runs and their results (harness.py's
emulator clients), then the official client gets,
lists (pager, filter, order) and exports them, filters evaluations by their runs, and deletes one
(a long-running operation), after which its results are gone and the evaluations' runs follow.
The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

import json
from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.protobuf import empty_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import main, refused, smallest_evaluation, step  # type: ignore[import-not-found]

APP = "projects/runs-project/locations/us-central1/apps/runs"
RUNS = APP + "/evaluationRuns/"
Run = ces_v1beta.EvaluationRun
Result = ces_v1beta.EvaluationResult


def _evaluation(client: Any, display_name: str) -> str:
    return str(
        client.create_evaluation(parent=APP, evaluation=smallest_evaluation(display_name)).name
    )


def scenario(client: Any, emulator: Any) -> None:
    one, two = _evaluation(client, "One"), _evaluation(client, "Two")
    nightly = emulator.create_run(
        APP,
        Run(
            display_name="Nightly",
            initiated_by="ci@example.com",
            app_version_display_name="v1",
            evaluations=[one, two],
            state=Run.EvaluationRunState.COMPLETED,
            progress=Run.Progress(total_count=2, completed_count=2, passed_count=2),
        ),
        "nightly",
    )
    manual = emulator.create_run(
        APP,
        Run(
            display_name="Manual",
            initiated_by="me@example.com",
            app_version_display_name="v2",
            evaluations=[one],
            state=Run.EvaluationRunState.RUNNING,
        ),
        "manual",
    )
    assert nightly.name == RUNS + "nightly" and manual.name == RUNS + "manual"
    passed = {"execution_state": 2, "evaluation_status": Result.Outcome.PASS}
    emulator.create_result(one, Result(evaluation_run=nightly.name, **passed), "r1")
    emulator.create_result(two, Result(evaluation_run=nightly.name, **passed), "r2")
    emulator.create_result(one, Result(evaluation_run=manual.name, execution_state=1), "r3")
    step("seed", runs=[nightly.name, manual.name])

    got = client.get_evaluation_run(name=nightly.name)
    assert got == nightly and got.progress.passed_count == 2, got
    absent = refused(lambda: client.get_evaluation_run(name=RUNS + "absent"), exceptions.NotFound)
    step("get", state=Run.EvaluationRunState(got.state).name, **absent)

    pages = list(client.list_evaluation_runs(request={"parent": APP, "page_size": 1}).pages)
    paged = [run.name for page in pages for run in page.evaluation_runs]
    assert len(pages) == 2 and sorted(paged) == sorted([nightly.name, manual.name]), paged
    ordered = client.list_evaluation_runs(request={"parent": APP, "order_by": "name"})
    by_name = [r.name for r in ordered]
    assert by_name == [manual.name, nightly.name], by_name
    filtered = client.list_evaluation_runs(
        request={"parent": APP, "filter": 'initiated_by = "ci@example.com" AND state = COMPLETED'}
    )
    assert [r.name for r in filtered] == [nightly.name]
    bad_filter = refused(
        lambda: list(client.list_evaluation_runs(request={"parent": APP, "filter": "nope = 1"})),
        exceptions.BadRequest,
    )
    step("list", pages=len(pages), **bad_filter)

    def evaluations_with(run_filter: str) -> list[str]:
        request = {"parent": APP, "evaluation_run_filter": run_filter, "order_by": "name"}
        return [e.name for e in client.list_evaluations(request=request)]

    by_initiator = evaluations_with('initiated_by = "me@example.com"')
    by_version = evaluations_with('app_version_display_name = "v1"')
    assert by_initiator == [one] and sorted(by_version) == sorted([one, two])
    step("evaluation_run_filter", initiated_by=by_initiator, app_version=sorted(by_version))

    export = client.export_evaluation_runs(parent=APP, names=[nightly.name, manual.name])
    exported = export.result(timeout=60)
    document = json.loads(exported.evaluation_runs_content)
    to_file = client.export_evaluation_runs(
        request={
            "parent": APP,
            "names": [manual.name],
            "export_options": {"export_format": "YAML", "gcs_uri": "gs://runs/exports"},
        }
    ).result(timeout=60)
    step(
        "export",
        runs=[r["name"] for r in document["evaluationRuns"]],
        metadata=type(export.metadata).__name__,
        uri=to_file.evaluation_runs_uri,
    )

    deletion = client.delete_evaluation_run(name=nightly.name)
    outcome = deletion.result(timeout=60)
    assert isinstance(outcome, empty_pb2.Empty), outcome
    left = client.list_evaluation_results(
        request={"parent": APP + "/evaluations/-", "order_by": "name"}
    )
    remaining = [r.name.rsplit("/", 1)[1] for r in left]
    assert remaining == ["r3"], remaining
    first, second = client.get_evaluation(name=one), client.get_evaluation(name=two)
    assert list(first.evaluation_runs) == [manual.name], first.evaluation_runs
    assert list(second.evaluation_runs) == [], second.evaluation_runs
    gone = refused(lambda: client.get_evaluation_run(name=nightly.name), exceptions.NotFound)
    again = refused(lambda: client.delete_evaluation_run(name=nightly.name), exceptions.NotFound)
    step(
        "delete",
        metadata=type(deletion.metadata).__name__,
        remaining=remaining,
        evaluation_runs={"one": list(first.evaluation_runs), "two": list(second.evaluation_runs)},
        gone=gone,
        again=again,
    )


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.emulator))
