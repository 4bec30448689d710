"""Evaluation results: the resource's declaration and its standard RPCs (Get, List, Delete; the
custom RunEvaluationResultMetrics is the engine's, :mod:`ces_eval.core.engine.metrics`).

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
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.errors import FieldViolation
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

if TYPE_CHECKING:
    from google.protobuf import timestamp_pb2
    from google.protobuf.message import Message

    from ces_eval.core.aip.context import Rpc

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


# Its create is the emulator's (CreateEvaluationResult), its update a metric rerun (the
# engine's: ces_eval.core.engine.metrics).
RPCS: dict[str, Rpc] = standard.methods(RESULTS, "Get", "List", "Delete")
