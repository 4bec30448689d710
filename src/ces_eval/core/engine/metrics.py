"""RunEvaluationResultMetrics: a stored result's metrics computed again by the engine's rules
(:func:`ces_eval.core.engine.rerun.rerun`), in a long-running operation: under the thresholds
the result recorded and the metrics config in force now (the evaluation's override and its
app's ``evaluation_settings.metrics_config`` as stored when the operation works: no field of a
result records the config a run played under)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.contract import limits
from ces_eval.core.aip import names, validation
from ces_eval.core.aip.names import location_of
from ces_eval.core.aip.stamps import new_etag
from ces_eval.core.engine import app_settings, rerun
from ces_eval.core.resources.results import RESULTS
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import Missing, TooLarge

if TYPE_CHECKING:
    from google.longrunning import operations_pb2

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "run_evaluation_result_metrics"]


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
        defaults = await app_settings.of_app(context, names.app_of(name))
        updated = rerun.rerun(result, evaluation, defaults.metrics_config)
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


RPCS: dict[str, Rpc] = {"RunEvaluationResultMetrics": run_evaluation_result_metrics}
