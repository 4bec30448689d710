"""Evaluation datasets through the core's RPCs, over a real SQLite file: the references
(``evaluations`` names stored evaluations of the dataset's app, each once), the evaluations'
``evaluation_datasets`` kept exact by every write, DeleteEvaluation's ``force``, and the
``aggregated_metrics`` derived from the evaluations' results. The generic AIP semantics (IDs,
conflicts, pages, masks, etags) are held by test_standard.py's table, which includes datasets;
the same storage scripts run on PostgreSQL in tests/contract/test_datasets.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import field_mask_pb2

from ces_eval.core.resources.datasets import DATASETS
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, EMULATOR_IMPORT, Harness, violations

Dataset = evaluation_pb2.EvaluationDataset
Result = evaluation_pb2.EvaluationResult
OTHER_APP = "projects/p/locations/l/apps/other"


class Datasets(Harness):
    """test_core's harness with the dataset RPCs and three evaluations, e1..e3."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        for eid in ("e1", "e2", "e3"):
            self.create(eid.upper(), eid)

    def make(self, did: str, *evaluations: str, display_name: str = "") -> Any:
        return self.call(
            "create_evaluation_dataset",
            service_pb2.CreateEvaluationDatasetRequest(
                parent=APP,
                evaluation_dataset_id=did,
                evaluation_dataset=Dataset(
                    display_name=display_name or did.upper(),
                    evaluations=[_evaluation(e) for e in evaluations],
                ),
            ),
        )

    def get(self, did: str) -> Any:
        return self.call(
            "get_evaluation_dataset",
            service_pb2.GetEvaluationDatasetRequest(name=f"{APP}/evaluationDatasets/{did}"),
        )

    def evaluation(self, eid: str) -> Any:
        return self.call("get_evaluation", service_pb2.GetEvaluationRequest(name=_evaluation(eid)))

    def memberships(self, eid: str) -> list[str]:
        return [d.rsplit("/", 1)[1] for d in self.evaluation(eid).evaluation_datasets]

    def update(self, dataset: Dataset, *paths: str) -> Any:
        return self.call(
            "update_evaluation_dataset",
            service_pb2.UpdateEvaluationDatasetRequest(
                evaluation_dataset=dataset,
                update_mask=field_mask_pb2.FieldMask(paths=paths) if paths else None,
            ),
        )


def _evaluation(eid: str) -> str:
    return eid if "/" in eid else f"{APP}/evaluations/{eid}"


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Datasets]:
    harness = Datasets(tmp_path / "db.sqlite")
    yield harness
    harness.close()


# -- references --------------------------------------------------------------------------------


def test_every_bad_reference_is_named_by_its_index(core: Datasets) -> None:
    request = service_pb2.CreateEvaluationDatasetRequest(
        parent=APP,
        evaluation_dataset=Dataset(
            display_name="D",
            evaluations=[
                _evaluation("e1"),
                "not/an/evaluation",
                _evaluation("absent"),
                f"{OTHER_APP}/evaluations/e1",
                _evaluation("e1"),
                f"{APP}/evaluations/Bad_Id",
                _evaluation("e2"),
            ],
        ),
    )
    error = core.error("create_evaluation_dataset", request)
    assert error.code is Code.INVALID_ARGUMENT
    assert violations(error) == [f"evaluation_dataset.evaluations[{i}]" for i in range(1, 6)]
    descriptions = [v.description for v in error.violations]
    assert "does not exist" in descriptions[1]
    assert f"not a Evaluation of {APP}" in descriptions[2]
    assert "evaluations[0]" in descriptions[3]  # the repeated entry's first
    assert error.violations[3].reason == "DUPLICATE"
    assert core.memberships("e1") == core.memberships("e2") == []  # nothing was stored
    # The descriptors' rules come first: without a display name, that alone is reported.
    request.evaluation_dataset.ClearField("display_name")
    error = core.error("create_evaluation_dataset", request)
    assert violations(error) == ["evaluation_dataset.display_name"]


def test_an_update_is_held_to_the_same_references(core: Datasets) -> None:
    created = core.make("d1", "e1")
    change = Dataset(name=created.name, evaluations=[_evaluation("e1"), _evaluation("nope")])
    error = core.error(
        "update_evaluation_dataset",
        service_pb2.UpdateEvaluationDatasetRequest(
            evaluation_dataset=change,
            update_mask=field_mask_pb2.FieldMask(paths=["evaluations"]),
        ),
    )
    assert (error.code, violations(error)) == (
        Code.INVALID_ARGUMENT,
        ["evaluation_dataset.evaluations[1]"],
    )
    assert core.get("d1") == created


# -- Evaluation.evaluation_datasets ------------------------------------------------------------


def test_evaluations_list_the_datasets_that_list_them(core: Datasets) -> None:
    before = core.evaluation("e1")
    d1 = core.make("d1", "e1", "e2")
    core.make("d2", "e2")
    assert (core.memberships("e1"), core.memberships("e2"), core.memberships("e3")) == (
        ["d1"],
        ["d1", "d2"],
        [],
    )
    after = core.evaluation("e1")
    assert after.etag != before.etag  # what it serves changed
    assert after.update_time == before.update_time  # no caller changed it
    listed = core.call(
        "list_evaluations",
        service_pb2.ListEvaluationsRequest(
            parent=APP, filter=f'evaluation_datasets:"{d1.name}"', order_by="name"
        ),
    )
    assert [e.display_name for e in listed.evaluations] == ["E1", "E2"]

    # An update moves the memberships; the mask decides what changes.
    moved = Dataset(name=d1.name, display_name="ignored", evaluations=[_evaluation("e3")])
    updated = core.update(moved, "evaluations")
    assert (updated.display_name, list(updated.evaluations)) == ("D1", [_evaluation("e3")])
    assert (core.memberships("e1"), core.memberships("e2"), core.memberships("e3")) == (
        [],
        ["d2"],
        ["d1"],
    )
    kept = core.update(Dataset(name=d1.name, display_name="Renamed"), "display_name")
    assert list(kept.evaluations) == [_evaluation("e3")]
    emptied = core.update(Dataset(name=d1.name, display_name="All"), "*")
    assert (emptied.display_name, list(emptied.evaluations)) == ("All", [])
    assert core.memberships("e3") == []

    core.call(
        "delete_evaluation_dataset",
        service_pb2.DeleteEvaluationDatasetRequest(name=f"{APP}/evaluationDatasets/d2"),
    )
    assert core.memberships("e2") == []


def test_an_evaluation_update_keeps_its_datasets(core: Datasets) -> None:
    core.make("d1", "e1")
    current = core.evaluation("e1")
    change = evaluation_pb2.Evaluation()
    change.CopyFrom(current)
    change.description = "changed"
    change.ClearField("evaluation_datasets")  # output only: what a caller sends is ignored
    change.evaluation_datasets.append(f"{APP}/evaluationDatasets/forged")
    updated = core.call(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=change, update_mask=field_mask_pb2.FieldMask(paths=["*"])
        ),
    )
    assert list(updated.evaluation_datasets) == [f"{APP}/evaluationDatasets/d1"]
    assert core.memberships("e1") == ["d1"]


def test_a_dataset_write_makes_an_evaluations_etag_stale(core: Datasets) -> None:
    current = core.evaluation("e1")
    core.make("d1", "e1")
    change = evaluation_pb2.Evaluation()
    change.CopyFrom(current)
    change.description = "stale"
    error = core.error("update_evaluation", service_pb2.UpdateEvaluationRequest(evaluation=change))
    assert error.code is Code.ABORTED


def test_deleting_an_evaluation_a_dataset_lists_needs_force(core: Datasets) -> None:
    d1 = core.make("d1", "e1", "e2")
    d2 = core.make("d2", "e1")
    d3 = core.make("d3", "e2")
    name = _evaluation("e1")
    refused = core.error("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=name))
    assert (refused.code, refused.reason) == (Code.FAILED_PRECONDITION, "EVALUATION_IN_USE")
    assert d1.name in refused.message and d2.name in refused.message
    assert core.evaluation("e1").name == name  # still there
    core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=name, force=True))
    after = [core.get(d) for d in ("d1", "d2", "d3")]
    assert [list(d.evaluations) for d in after] == [[_evaluation("e2")], [], [_evaluation("e2")]]
    assert after[0].etag != d1.etag and after[1].etag != d2.etag
    assert after[2] == d3  # it never listed e1
    assert core.error("get_evaluation", service_pb2.GetEvaluationRequest(name=name)).code is (
        Code.NOT_FOUND
    )
    # Once no dataset lists it, an evaluation is deleted without force.
    core.update(Dataset(name=d1.name, display_name="D1"), "evaluations")
    core.update(Dataset(name=d3.name, display_name="D3"), "evaluations")
    core.call("delete_evaluation", service_pb2.DeleteEvaluationRequest(name=_evaluation("e2")))


# -- aggregated_metrics --------------------------------------------------------------------------


def _completed(core: Datasets, eid: str, rid: str, status: Result.Outcome.ValueType) -> None:
    core.seed(
        _evaluation(eid),
        rid,
        execution_state=Result.ExecutionState.COMPLETED,
        evaluation_status=status,
    )


def _counts(dataset: Dataset) -> list[tuple[int, int]]:
    return [(m.pass_count, m.fail_count) for m in dataset.aggregated_metrics.metrics_by_app_version]


def test_aggregated_metrics_sum_the_evaluations_results(core: Datasets) -> None:
    _completed(core, "e1", "r1", Result.PASS)
    _completed(core, "e1", "r2", Result.FAIL)
    _completed(core, "e2", "r1", Result.PASS)
    _completed(core, "e3", "r1", Result.FAIL)
    created = core.make("d1", "e1", "e2")
    assert _counts(created) == [(2, 1)]
    assert core.get("d1") == created
    _completed(core, "e2", "r2", Result.PASS)  # a result written later counts at once
    assert _counts(core.get("d1")) == [(3, 1)]
    core.make("d2", "e3")
    listed = core.call(
        "list_evaluation_datasets",
        service_pb2.ListEvaluationDatasetsRequest(parent=APP, order_by="name"),
    )
    assert [_counts(d) for d in listed.evaluation_datasets] == [[(3, 1)], [(0, 1)]]
    updated = core.update(
        Dataset(name=created.name, evaluations=[_evaluation("e3")]), "evaluations"
    )
    assert _counts(updated) == [(0, 1)]
    # Output only: what a caller sends is ignored.
    forged = Dataset(display_name="Forged")
    forged.aggregated_metrics.metrics_by_app_version.add(pass_count=99)
    made = core.call(
        "create_evaluation_dataset",
        service_pb2.CreateEvaluationDatasetRequest(parent=APP, evaluation_dataset=forged),
    )
    assert made.aggregated_metrics == evaluation_pb2.AggregatedMetrics()


def test_lists_filter_on_the_datasets_fields(core: Datasets) -> None:
    core.make("d1", "e1", "e2")
    core.make("d2", "e2")
    core.make("d3")

    def listed(text: str, order_by: str = "name") -> list[str]:
        page = core.call(
            "list_evaluation_datasets",
            service_pb2.ListEvaluationDatasetsRequest(parent=APP, filter=text, order_by=order_by),
        )
        return [d.name.rsplit("/", 1)[1] for d in page.evaluation_datasets]

    assert listed(f'evaluations:"{_evaluation("e2")}"') == ["d1", "d2"]
    assert listed(f'evaluations:"{_evaluation("e1")}"') == ["d1"]
    assert listed('display_name = "D3" OR display_name = "D1"', "name desc") == ["d3", "d1"]
    assert listed(f'created_by = "{core.get("d1").created_by}"', "create_time") == [
        "d3",
        "d2",
        "d1",
    ]
    error = core.error(
        "list_evaluation_datasets",
        service_pb2.ListEvaluationDatasetsRequest(parent=APP, filter="aggregated_metrics = 1"),
    )
    assert (error.code, violations(error)) == (Code.INVALID_ARGUMENT, ["filter"])


def test_an_evaluation_deleted_after_the_check_is_the_same_violation(core: Datasets) -> None:
    """The storage refuses an evaluation gone between the verification and the write; the
    caller gets the violation the verification would have given."""
    dataset = Dataset(
        name=f"{APP}/evaluationDatasets/late",
        display_name="Late",
        evaluations=[_evaluation("e1"), _evaluation("gone")],
        etag="x",
    )
    with pytest.raises(ServiceError) as raised:
        core.run(DATASETS.store.insert(core.storage, dataset))
    assert (raised.value.code, violations(raised.value)) == (
        Code.INVALID_ARGUMENT,
        ["evaluation_dataset.evaluations[1]"],
    )
    assert (
        raised.value.violations[0].description
        == f"Evaluation {_evaluation('gone')} does not exist."
    )
    assert core.memberships("e1") == []


def test_an_import_drops_the_evaluations_datasets(core: Datasets) -> None:
    """An imported evaluation belongs to no dataset, whatever its document says."""
    document = {
        "format": "ces-eval.export/v1",
        "evaluations": [
            {
                "name": f"{APP}/evaluations/imported",
                "displayName": "Imported",
                "golden": {"turns": [{"steps": [{"userInput": {"text": "hi"}}]}]},
                "evaluationDatasets": [f"{APP}/evaluationDatasets/elsewhere"],
            }
        ],
    }
    core.call(
        EMULATOR_IMPORT,
        emulator_pb2.ImportEvaluationsRequest(parent=APP, content=json.dumps(document).encode()),
    )
    assert core.memberships("imported") == []
