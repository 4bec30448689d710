"""Evaluation results: the resource's declaration and its RPCs (Get, List, Delete and the
custom RunEvaluationResultMetrics).

Results are created only by the emulator (:mod:`ces_eval.core.emulator`, CreateEvaluationResult,
through the generic create with this declaration): in the real service the runs write them. A
list reads across evaluations with the AIP-159 wildcard (``evaluations/-``). Deleting one gives
its evaluation a new etag: the evaluation's derived fields change with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ces_eval.contract import limits
from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.stamps import new_etag
from ces_eval.core.engine import rerun
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.core.resources.longrunning import location_of
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import Missing, TooLarge

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf import timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RESULTS", "RPCS"]

Result = evaluation_pb2.EvaluationResult


def _rules(result: Result, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    """The field rules of a result as a seed writes it (:func:`validation.seeded_violations`:
    the count limits alone when exceeded, else REQUIRED, JSON-safety and the other limits),
    an evaluation_status only on a completed run, and names of runs and versions of its own
    app."""
    violations = validation.seeded_violations(result, path)
    if any(v.reason == "TOO_MANY" for v in violations):
        return violations
    completed = Result.ExecutionState.COMPLETED
    if result.evaluation_status and result.execution_state != completed:
        violations.append(
            FieldViolation(
                f"{path}.evaluation_status", "Set only when execution_state is COMPLETED."
            )
        )
    app = names.APP.format(**{k: parts[k] for k in ("project", "location", "app")})
    for field, kind in (("evaluation_run", "evaluationRuns"), ("app_version", "versions")):
        value = getattr(result, field)
        prefix = f"{app}/{kind}/"
        if value and (
            not value.startswith(prefix) or "/" in value[len(prefix) :] or value == prefix
        ):
            violations.append(
                FieldViolation(
                    f"{path}.{field}", f"Must be a resource name of the form {prefix}{{id}}."
                )
            )
    return violations


def _default_display_name(
    result: Result, evaluation: Message | None, created: timestamp_pb2.Timestamp
) -> None:
    """The seeds' default: "<evaluation display name> Result - <time>"."""
    if not result.display_name and evaluation is not None:
        parent = cast("evaluation_pb2.Evaluation", evaluation)
        result.display_name = f"{parent.display_name} Result - {created.ToJsonString()}"


RESULTS = standard.Resource(
    message=Result,
    parent=names.EVALUATION,
    parent_resource=EVALUATIONS,
    store=standard.Store(
        get=lambda storage, name: storage.get_result(name),
        insert=lambda storage, result: storage.insert_result(
            result, parent_etag=new_etag(), max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
        ),
        list=lambda storage, query: storage.list_results(query),
        # Results carry no etag; their evaluation gets a new one.
        delete=lambda storage, name, _etag: storage.delete_result(name, new_etag()),
        read=lambda storage, name: storage.read_result(name),
    ),
    rules=_rules,
    list_across=True,
    require_body=False,
    defaults=_default_display_name,
)


async def run_evaluation_result_metrics(
    context: Context, request: service_pb2.RunEvaluationResultMetricsRequest, caller: Caller
) -> operations_pb2.Operation:
    """Compute a stored result's metrics again (:func:`ces_eval.core.engine.rerun.rerun`) in an
    operation, and store the result with them."""
    name = request.evaluation_result_id
    names.EVALUATION_RESULT.parse(name, "evaluation_result_id", owned=RESULTS.owned)
    storage = context.storage
    if await storage.get_result(name) is None:
        raise ServiceError.not_found(names.EVALUATION_RESULT.type, name)

    async def work() -> service_pb2.RunEvaluationResultMetricsResponse:
        result = await storage.get_result(name)
        evaluation = await storage.get_evaluation(name.rsplit("/results/", 1)[0])
        if result is None or evaluation is None:
            raise ServiceError.not_found(names.EVALUATION_RESULT.type, name)
        updated = rerun.rerun(result, evaluation)
        # The rerun result is stored: held to the size every write is held to.
        validation.raise_if_invalid(
            limits.size_violations(updated, "evaluation_result_id"), "result"
        )
        try:
            await storage.replace_result(
                updated, new_etag(), max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
            )
        except Missing as missing:
            raise ServiceError.not_found(names.EVALUATION_RESULT.type, name) from missing
        except TooLarge as large:
            violation = limits.too_large("evaluation_result_id", large.size, large.name)
            validation.raise_if_invalid([violation], "result")
        return service_pb2.RunEvaluationResultMetricsResponse(status=updated.evaluation_status)

    return await context.runner.start(
        location_of(name),
        "RunEvaluationResultMetrics",
        service_pb2.RunEvaluationResultMetricsOperationMetadata(),
        work,
    )


# Its create is the emulator's (CreateEvaluationResult), its update a metric rerun.
RPCS: dict[str, Rpc] = {
    **standard.methods(RESULTS, "Get", "List", "Delete"),
    "RunEvaluationResultMetrics": run_evaluation_result_metrics,
}
