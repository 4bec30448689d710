"""The EmulatorService: what the emulator adds to the real API for tests and local use.

CreateEvaluationResult seeds a result and CreateEvaluationRun a run (the generic AIP-133 create
over the results' and the runs' declarations, :data:`ces_eval.core.results.RESULTS`,
:data:`ces_eval.core.runs.RUNS`); ResetProject deletes a project's evaluations, results and
operations; ImportEvaluations reads an export document (:mod:`ces_eval.core.exchange.document`),
given as content or as a ``gs://`` object of the export root, into an app, all or nothing.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from ces_eval.contract import limits
from ces_eval.core import exchange, names, standard
from ces_eval.core.exchange import objects
from ces_eval.core.exports import refused
from ces_eval.core.results import RESULTS
from ces_eval.core.runs import RUNS
from ces_eval.core.standard import invalid
from ces_eval.core.validation import raise_if_invalid, with_size
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import derived
from ces_eval.storage.base import Conflict, Missing, TooLarge

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.context import Context, Rpc

__all__ = ["RPCS"]

_PROJECT = re.compile(r"projects/([A-Za-z0-9][A-Za-z0-9._~-]{0,127})")
_OBJECT = "storage.googleapis.com/Object"  # Cloud Storage's resource type, for NOT_FOUND


async def reset_project(
    context: Context, request: emulator_pb2.ResetProjectRequest, caller: Caller
) -> emulator_pb2.ResetProjectResponse:
    match = _PROJECT.fullmatch(request.name)
    if match is None:
        problem = "Must have the form projects/{project}."
        raise ServiceError.invalid_argument(
            f"name {request.name!r}: {problem}", [FieldViolation("name", problem)]
        )
    counts = await context.storage.reset_project(match.group(1))
    return emulator_pb2.ResetProjectResponse(
        deleted_evaluations=counts.evaluations,
        deleted_evaluation_results=counts.evaluation_results,
        deleted_operations=counts.operations,
    )


def _renamed(
    source: str, bundle: exchange.Bundle, app: dict[str, str]
) -> tuple[
    list[evaluation_pb2.Evaluation], list[evaluation_pb2.EvaluationResult], list[FieldViolation]
]:
    """The evaluations and results of ``bundle`` renamed into ``app``, and what makes them
    unfit to store: a name that is not an evaluation's (a result's) resource name or whose IDs
    break AIP-122 (:meth:`names.ResourcePattern.violation`, the rule every create applies), and
    the limits each exceeds, all located in the document (``content.evaluations[2].name``,
    ``content.evaluations[2].golden.turns``); at most :data:`limits.MAX_VIOLATIONS`. A document
    read from a file (not ``content``) is quoted nowhere: neither names nor map keys."""
    quote = source == "content"
    violations: list[FieldViolation] = []

    def bad(pattern: names.ResourcePattern, name: str, field: str, owned: int) -> bool:
        violation = pattern.violation(name, field, owned=owned, quote=quote)
        if violation is not None:
            violations.append(violation)
        return violation is not None

    evaluations = []
    for index, evaluation in enumerate(bundle.evaluations):
        if len(violations) >= limits.MAX_VIOLATIONS:
            break  # every check stops there (raise_if_invalid: "at least 100 problems")
        at = f"{source}.evaluations[{index}]"
        if bad(names.EVALUATION, evaluation.name, f"{at}.name", names.owned(names.EVALUATION)):
            continue
        renamed = evaluation_pb2.Evaluation()
        renamed.CopyFrom(evaluation)
        renamed.ClearField("last_ten_results")
        for field in derived.FIELDS:  # derived again from what is imported
            renamed.ClearField(field)
        renamed.ClearField("evaluation_datasets")  # kept by datasets, none of which lists it
        renamed.name = names.EVALUATION.format(**app, evaluation=evaluation.name.rsplit("/", 1)[1])
        evaluations.append(renamed)
        violations += with_size(limits.check(renamed, at), renamed, at)
    results = []
    for index, result in enumerate(bundle.results):
        if len(violations) >= limits.MAX_VIOLATIONS:
            break
        at = f"{source}.evaluationResults[{index}]"
        if bad(names.EVALUATION_RESULT, result.name, f"{at}.name", RESULTS.owned):
            continue
        parts = result.name.split("/")
        renamed_result = evaluation_pb2.EvaluationResult()
        renamed_result.CopyFrom(result)
        renamed_result.name = names.EVALUATION_RESULT.format(
            **app, evaluation=parts[-3], result=parts[-1]
        )
        results.append(renamed_result)
        violations += with_size(limits.check(renamed_result, at), renamed_result, at)
    violations = violations[: limits.MAX_VIOLATIONS]
    return evaluations, results, violations if quote else [_unquoted(v) for v in violations]


def _unquoted(violation: FieldViolation) -> FieldViolation:
    """``violation`` without the map or Struct keys of its path (text of the document)."""
    return FieldViolation(
        violation.field.split('["', 1)[0], violation.description, violation.reason
    )


async def _read_import(context: Context, gcs_uri: str, parent: str) -> bytes:
    """The bytes of the object ``gcs_uri`` names for ``parent``'s project."""
    try:
        location = context.locate(gcs_uri, parent)
    except exchange.ExchangeError as error:
        raise invalid("gcs_uri", error.message) from error
    try:
        # As large as a document given as content may be (the request size limit).
        return await asyncio.to_thread(objects.read_object, location, limits.MAX_REQUEST_BYTES)
    except objects.ObjectTooLarge as error:
        # INVALID_ARGUMENT: the object is this call's input, as content would be, and Google
        # answers input over a size limit so (Cloud Logging's "Log entry with size … exceeds
        # maximum size"); this method answers so for the other objects it cannot import (a
        # folder, a FIFO, a document it cannot read). Not FAILED_PRECONDITION: no change of
        # the server's state makes this object importable; the caller must name another.
        description = f"{error.message} Export fewer evaluations per file."
        raise ServiceError(
            Code.INVALID_ARGUMENT,
            f"gcs_uri: {description}",
            "INVALID_ARGUMENT",
            {"uri": location.uri, "limit": str(error.limit)},
            [FieldViolation("gcs_uri", description, "TOO_LARGE")],
        ) from error
    except objects.ObjectMissing as error:
        # Only paths inside the export folder can be missing: a link on the way was
        # refused before anything behind it was looked at.
        raise ServiceError.not_found(_OBJECT, location.uri) from error
    except objects.PathRefused as error:
        raise refused("gcs_uri", error, location.uri) from error
    except OSError as error:
        raise invalid("gcs_uri", f"cannot read {location.uri}: {error.strerror}") from error


async def import_evaluations(
    context: Context, request: emulator_pb2.ImportEvaluationsRequest, caller: Caller
) -> emulator_pb2.ImportEvaluationsResponse:
    app = names.APP.parse(request.parent, "parent", owned=0)
    source = request.WhichOneof("source")
    if source is None:
        raise invalid("content", "Set content or gcs_uri.")
    if source == "gcs_uri":
        data = await _read_import(context, request.gcs_uri, request.parent)
    else:
        data = request.content
    try:
        bundle = await asyncio.to_thread(exchange.load, data)
    except exchange.ExchangeError as error:
        # A caller's own content may be quoted back; a file's may not (it may not be theirs
        # to read, and need not be an export at all).
        shown = error if source == "content" else error.redacted()
        field = f"{source}.{shown.path}" if shown.path else source
        raise invalid(field, shown.message) from error
    if bundle.runs:  # refused rather than dropped: this import restores no runs
        raise invalid(f"{source}.evaluationRuns", "Evaluation runs are not imported here.")
    # Many names and limits to check in a large document: off the event loop, like the parse.
    evaluations, results, violations = await asyncio.to_thread(_renamed, source, bundle, app)
    raise_if_invalid(violations, "import")
    try:
        await context.storage.import_bundle(
            evaluations, results, max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
        )
    except TooLarge as large:
        # The results imported for it make it too large: named at the first of them.
        index = next(i for i, r in enumerate(results) if r.name.startswith(large.name + "/"))
        evaluation = large.name if source == "content" else "its evaluation"
        violation = limits.too_large(f"{source}.evaluationResults[{index}]", large.size, evaluation)
        raise_if_invalid([violation], "import")
    except Conflict as conflict:
        raise ServiceError.already_exists(
            names.EVALUATION.type,
            conflict.existing,
            f"{conflict.field} clashes with {conflict.existing}; nothing was imported.",
        ) from conflict
    except Missing as missing:
        raise ServiceError.not_found(names.EVALUATION.type, missing.name) from missing
    return emulator_pb2.ImportEvaluationsResponse(
        evaluations=[e.name for e in evaluations], imported_evaluation_results=len(results)
    )


RPCS: dict[str, Rpc] = {
    **standard.methods(RESULTS, "Create"),  # CreateEvaluationResult: seeds a result
    **standard.methods(RUNS, "Create"),  # CreateEvaluationRun: seeds a run
    "ResetProject": reset_project,
    "ImportEvaluations": import_evaluations,
}
