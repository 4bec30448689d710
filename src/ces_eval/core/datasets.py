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

from ces_eval.core import names, standard, validation
from ces_eval.core.stamps import new_etag
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage.base import Missing

if TYPE_CHECKING:
    from ces_eval.core.context import Context, Rpc
    from ces_eval.storage.base import Storage

__all__ = ["DATASETS", "RPCS"]

Dataset = evaluation_pb2.EvaluationDataset
_APP_VARIABLES = names.APP.variables


def _rules(dataset: Dataset, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """The descriptors' rules, then each entry of ``evaluations``: an evaluation's name, of
    the dataset's app, not listed before."""
    violations = validation.resource_violations(dataset, path)
    app = names.APP.format(**{v: parts[v] for v in _APP_VARIABLES})
    first: dict[str, int] = {}
    for index, name in enumerate(dataset.evaluations):
        field = f"{path}.evaluations[{index}]"
        malformed = names.EVALUATION.violation(name, field)
        if malformed is not None:
            violations.append(malformed)
        elif not name.startswith(f"{app}/"):
            description = f"{name!r} is an evaluation of another app; list those of {app}."
            violations.append(FieldViolation(field, description))
        elif name in first:
            description = f"{name!r} is already listed as evaluations[{first[name]}]."
            violations.append(FieldViolation(field, description, "DUPLICATE"))
        else:
            first[name] = index
    return violations


def _missing(dataset: Dataset, stored: set[str], path: str) -> list[FieldViolation]:
    return [
        FieldViolation(f"{path}.evaluations[{index}]", f"There is no evaluation {name!r}.")
        for index, name in enumerate(dataset.evaluations)
        if name not in stored
    ]


async def _verify(context: Context, dataset: Dataset) -> list[FieldViolation]:
    """Every evaluation the dataset lists is stored."""
    if not dataset.evaluations:
        return []
    stored = await context.storage.stored_evaluations(list(dataset.evaluations))
    return _missing(dataset, stored, DATASETS.field)


def _vanished(dataset: Dataset, missing: Missing) -> ServiceError:
    """An evaluation deleted between the verification and the write: the same violation."""
    violations = _missing(dataset, set(dataset.evaluations) - {missing.name}, DATASETS.field)
    return ServiceError.invalid_argument(
        f"{violations[0].field}: {violations[0].description}", violations
    )


async def _insert(storage: Storage, dataset: Dataset) -> None:
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
