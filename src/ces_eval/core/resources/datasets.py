"""Evaluation datasets: the resource's declaration and its standard methods (Create, Get, List,
Update, Delete).

A dataset is kept in a generic table (:data:`ces_eval.storage.tables.DATASETS`) and served by
the generic standard methods, through storage calls of its own (``insert_dataset`` ...) that
add its side effects to the same transaction: the evaluations it lists hold its name in their
output-only ``evaluation_datasets`` (each evaluation whose list changes gets a new etag), and
it is read with its ``aggregated_metrics``, the sum of its evaluations' metrics.

What is its own is the rule of its references (docs/semantics.md, "Evaluation datasets"):
``evaluations`` names stored evaluations of the dataset's own app, each once (a repeated entry
is refused, not merged: the list is the caller's and is stored as given).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.stamps import new_etag
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import Missing

if TYPE_CHECKING:
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = ["DATASETS", "RPCS"]

Dataset = evaluation_pb2.EvaluationDataset


def _rules(dataset: Dataset, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    return validation.resource_violations(dataset, path)


def _repeats(dataset: Dataset, path: str) -> list[FieldViolation]:
    """An entry of ``evaluations`` naming the same evaluation as an earlier one."""
    first: dict[str, int] = {}
    violations = []
    for index, name in enumerate(dataset.evaluations):
        earlier = first.setdefault(name, index)
        if earlier != index:
            description = f"{name!r} is already listed as evaluations[{earlier}]."
            violations.append(FieldViolation(f"{path}[{index}]", description, "DUPLICATE"))
    return violations


def _index(violation: FieldViolation) -> int:
    return int(violation.field.rsplit("[", 1)[1].rstrip("]"))


async def _verify(context: Context, dataset: Dataset) -> list[FieldViolation]:
    """Each entry of ``evaluations`` names a stored evaluation of the dataset's app, once:
    the violations in the order of the entries."""
    path = f"{DATASETS.field}.evaluations"
    app = tables.parent_of(dataset.name)
    named = await standard.references(context, EVALUATIONS, dataset.evaluations, path, app)
    return sorted(named + _repeats(dataset, path), key=_index)


def _vanished(dataset: Dataset, missing: Missing) -> ServiceError:
    """An evaluation deleted between the verification and the write: the violation the
    verification would have given."""
    index = list(dataset.evaluations).index(missing.name)
    field = f"{DATASETS.field}.evaluations[{index}]"
    description = f"Evaluation {missing.name} does not exist."
    return ServiceError.invalid_argument(
        f"{field}: {description}", [FieldViolation(field, description)]
    )


async def _insert(storage: Storage, dataset: Dataset) -> None:
    """Store ``dataset``, then give it the aggregated_metrics it is served with (the create's
    answer is the message stored)."""
    try:
        metrics = await storage.insert_dataset(dataset, new_etag())
    except Missing as missing:
        raise _vanished(dataset, missing) from missing
    dataset.aggregated_metrics.CopyFrom(metrics)


async def _replace(storage: Storage, dataset: Dataset, etag: str) -> None:
    try:
        metrics = await storage.replace_dataset(dataset, etag, new_etag())
    except Missing as missing:
        if missing.name == dataset.name:
            raise
        raise _vanished(dataset, missing) from missing
    dataset.aggregated_metrics.CopyFrom(metrics)


DATASETS = standard.Resource(
    message=Dataset,
    parent=names.APP,
    store=standard.Store(
        get=lambda storage, name: storage.get_dataset(name),
        insert=_insert,
        list=lambda storage, query: storage.list_datasets(query),
        delete=lambda storage, name, etag: storage.delete_dataset(name, etag, new_etag()),
        replace=_replace,
    ),
    rules=_rules,
    verify=_verify,
)

RPCS: dict[str, Rpc] = standard.methods(DATASETS, "Create", "Get", "List", "Update", "Delete")
