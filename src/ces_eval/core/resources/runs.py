"""Evaluation runs: the resource's declaration and its RPCs (Get, List and the long-running
DeleteEvaluationRun; ExportEvaluationRuns is an export, :mod:`ces_eval.core.exchange.exports`).

A run is kept in a generic table (:data:`ces_eval.storage.tables.RUNS`) and read by the generic
standard methods. It has no public create or update: the run engine writes runs
(:mod:`ces_eval.core.engine.running`, RunEvaluation), and the emulator seeds them
(:mod:`ces_eval.core.emulator`, CreateEvaluationRun, the generic create with this declaration:
every field as the seed gives it, held to :func:`~ces_eval.core.aip.validation.seeded_violations`).
Deleting a run deletes the results it produced (those whose ``evaluation_run`` names it) in
the same transaction, and their evaluations' derived fields follow (docs/semantics.md,
"Evaluation runs").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.protobuf import empty_pb2

from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.names import location_of
from ces_eval.core.aip.stamps import new_etag
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import Missing

if TYPE_CHECKING:
    from google.longrunning import operations_pb2

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "RUNS"]

Run = evaluation_pb2.EvaluationRun
# The names a run holds that must be of its own app: field → the pattern of their resource.
_OF_THE_APP = {
    "evaluations": names.EVALUATION,
    "evaluation_results": names.EVALUATION_RESULT,
}


def _rules(run: Run, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """The field rules of a run as a seed writes it: :func:`validation.seeded_violations`, and
    the evaluations and results it lists are resource names of its own app."""
    violations = validation.seeded_violations(run, path)
    if any(v.reason == "TOO_MANY" for v in violations):
        return violations
    app = names.APP.format(**{k: parts[k] for k in names.APP.variables})
    for field, pattern in _OF_THE_APP.items():
        for index, value in enumerate(getattr(run, field)):
            at = f"{path}.{field}[{index}]"
            malformed = pattern.violation(value, at, owned=names.owned(pattern))
            if malformed is not None:
                violations.append(malformed)
            elif not value.startswith(app + "/"):
                violations.append(FieldViolation(at, f"{value!r} is not of {app}."))
    return violations


RUNS = standard.Resource(
    message=Run,
    parent=names.APP,
    store=standard.Store.of(tables.RUNS, updatable=False),
    rules=_rules,
)


async def delete_evaluation_run(
    context: Context, request: service_pb2.DeleteEvaluationRunRequest, caller: Caller
) -> operations_pb2.Operation:
    """Delete the run, its results and their share of their evaluations' derived fields, in
    an operation (the client's DeleteEvaluationRun is long-running: Empty, with
    DeleteEvaluationRunOperationMetadata). A run that does not exist is NOT_FOUND at once."""
    name = request.name
    await standard.get(context, RUNS, name)
    storage = context.storage

    async def work() -> empty_pb2.Empty:
        try:
            await storage.delete_evaluation_run(name, new_etag())
        except Missing as missing:  # deleted meanwhile
            raise ServiceError.not_found(RUNS.pattern.type, name) from missing
        return empty_pb2.Empty()

    return await context.runner.start(
        location_of(name),
        "DeleteEvaluationRun",
        service_pb2.DeleteEvaluationRunOperationMetadata(),
        work,
    )


RPCS: dict[str, Rpc] = {
    **standard.methods(RUNS, "Get", "List"),
    "DeleteEvaluationRun": delete_evaluation_run,
}
