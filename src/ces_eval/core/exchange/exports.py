"""ExportEvaluations, ExportEvaluationResults and ExportEvaluationRuns: long-running operations
that write the export document (docs/export-format.md) inline into the operation's response,
or, with ``export_options.gcs_uri``, atomically into a file under the server's export root
(``gs://bucket/path`` → ``<export root>/bucket/path``, :mod:`ces_eval.core.io.objects`).

No read or write there follows a symbolic link, and errors about a file read from there never
quote its content (docs/security.md).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ces_eval.contract import limits
from ces_eval.core import exchange
from ces_eval.core.aip import names
from ces_eval.core.aip.names import location_of
from ces_eval.core.aip.ports import ObjectError, PathRefused
from ces_eval.core.aip.standard import invalid
from ces_eval.core.aip.validation import raise_if_invalid
from ces_eval.core.exchange.stored import refused, write_object
from ces_eval.core.resources.results import RESULTS
from ces_eval.core.resources.runs import RUNS
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import Cursor, ListQuery, OrderBy, SortKey

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from google.longrunning import operations_pb2
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.core.aip.ports import ObjectLocation
    from ces_eval.core.aip.standard import Resource

__all__ = ["RPCS", "refused", "write_object"]

_EXTENSIONS = {
    service_pb2.ExportOptions.ExportFormat.YAML: "yaml",
}

_Response = TypeVar("_Response", bound="Message")
_Stored = TypeVar("_Stored", bound="Message")
# An operation's name, metadata and the type URL of its response, at most.
_OPERATION_ENVELOPE = 1024


def _readable(response: _Response) -> _Response:
    """``response``, unless the operation that carries it would be larger than any other
    resource (:data:`limits.MAX_RESOURCE_BYTES`): a client could not read it back. An inline
    export that large fails instead; a file holds any size."""
    size = response.ByteSize() + _OPERATION_ENVELOPE
    if size <= limits.MAX_RESOURCE_BYTES:
        return response
    raise ServiceError(
        Code.FAILED_PRECONDITION,
        f"The export would make its operation about {size} bytes, more than the "
        f"{limits.MAX_RESOURCE_BYTES} every client can read; write it to a file "
        "(export_options.gcs_uri) or export fewer evaluations at a time.",
        "EXPORT_TOO_LARGE",
        {"size": str(size), "limit": str(limits.MAX_RESOURCE_BYTES)},
    )


def _names_violations(
    requested: Sequence[str],
    parent: str,
    collection: str,
    problem: Callable[[str, str], FieldViolation | None] | None = None,
) -> list[FieldViolation]:
    """What is wrong with an export's ``names``: none given (REQUIRED), or one violation per
    entry that is not of ``parent``'s ``collection`` or has another ``problem(name,
    "names[3]")``, stopping at :data:`limits.MAX_VIOLATIONS` like every check: a request of a
    thousand bad names costs a hundred, and :func:`raise_if_invalid` says there are at least
    that many."""
    if not requested:
        return [FieldViolation("names", "Required.", "REQUIRED")]
    prefix = f"{parent}/{collection}/"
    kind = {
        "evaluations": "an evaluation",
        "results": "a result",
        "evaluationRuns": "an evaluation run",
    }[collection]
    found: list[FieldViolation] = []
    for index, name in enumerate(requested):
        field = f"names[{index}]"
        if not name.startswith(prefix):
            violation: FieldViolation | None = FieldViolation(field, f"Must be {kind} of {parent}.")
        else:
            violation = problem(name, field) if problem else None
        if violation is not None:
            found.append(violation)
            if len(found) >= limits.MAX_VIOLATIONS:
                break
    return found


def _export_target(
    context: Context, options: service_pb2.ExportOptions, resource: str
) -> ObjectLocation | None:
    """The folder named by ``options.gcs_uri``; None for inline content. Also rejects
    export formats this server does not know (proto3 enums are open)."""
    if options.export_format not in service_pb2.ExportOptions.ExportFormat.values():
        raise invalid("export_options.export_format", "Use JSON or YAML.")
    if not options.gcs_uri:
        return None
    try:
        return context.locate(options.gcs_uri, resource)
    except ObjectError as error:
        raise invalid("export_options.gcs_uri", error.message) from error


async def _check_export_target(
    context: Context, options: service_pb2.ExportOptions, resource: str
) -> None:
    """Refuse an export before it starts when its target cannot be written: a bad URI, or
    a link or file on its path (the write checks again, links may appear meanwhile)."""
    target = _export_target(context, options, resource)
    if target is None:
        return
    try:
        await asyncio.to_thread(context.objects.probe, target)
    except PathRefused as error:
        raise refused("export_options.gcs_uri", error, target.uri) from error


async def _deliver(
    context: Context,
    bundle: exchange.Bundle,
    options: service_pb2.ExportOptions,
    prefix: str,
    resource: str,
) -> tuple[bytes, str]:
    """Render the export; write it when a target was given. (content, uri): one is empty."""
    # Rendering is CPU work: keep it off the event loop so the server stays responsive.
    data = await asyncio.to_thread(exchange.dump, bundle, options.export_format)
    target = _export_target(context, options, resource)
    if target is None:
        return data, ""
    file_name = f"{prefix}-{names.new_id()}.{_EXTENSIONS.get(options.export_format, 'json')}"
    location = target.child(file_name)
    await write_object(context, location, data, "export_options.gcs_uri")
    return b"", location.uri


def _answer(response_type: type[_Response], oneof: str, content: bytes, uri: str) -> _Response:
    """An export's response: the member ``<oneof>_uri`` of its oneof ``oneof`` when a file was
    written, else ``<oneof>_content`` (when the operation can carry it, :func:`_readable`)."""
    if uri:
        return response_type(**{f"{oneof}_uri": uri})
    return _readable(response_type(**{f"{oneof}_content": content}))


async def _every(
    names_: Sequence[str], get: Callable[[str], Awaitable[_Stored | None]], kind: str
) -> list[_Stored]:
    """The resources ``names_``, in that order; NOT_FOUND naming every one that is missing."""
    found: list[_Stored] = []
    missing: list[str] = []
    for name in names_:
        resource = await get(name)
        if resource is None:
            missing.append(name)
        else:
            found.append(resource)
    if missing:
        raise ServiceError.not_found(kind, ", ".join(missing))
    return found


async def _results_of(context: Context, evaluation: str) -> list[evaluation_pb2.EvaluationResult]:
    found: list[evaluation_pb2.EvaluationResult] = []
    after: Cursor | None = None
    while True:
        page = await context.storage.list_results(
            ListQuery(evaluation, OrderBy(SortKey.NAME, descending=False), 1000, after=after)
        )
        found += [evaluation_pb2.EvaluationResult.FromString(data) for data, _ in page]
        if len(page) < 1000:
            return found
        after = page[-1][1]


async def export_evaluations(
    context: Context, request: service_pb2.ExportEvaluationsRequest, caller: Caller
) -> operations_pb2.Operation:
    names.APP.parse(request.parent, "parent", owned=0)
    violations: list[FieldViolation] = []
    if not request.include_evaluations and not request.include_evaluation_results:
        violations.append(
            FieldViolation(
                "include_evaluations",
                "Set include_evaluations, include_evaluation_results or both.",
            )
        )
    violations += _names_violations(
        request.names, request.parent, "evaluations", names.EVALUATION.violation
    )
    raise_if_invalid(violations, "export request")
    await _check_export_target(context, request.export_options, request.parent)
    wanted = list(dict.fromkeys(request.names))

    async def work() -> service_pb2.ExportEvaluationsResponse:
        evaluations: list[evaluation_pb2.Evaluation] = []
        results: list[evaluation_pb2.EvaluationResult] = []
        failed: dict[str, str] = {}
        for name in wanted:
            evaluation = await context.storage.get_evaluation(name)
            if evaluation is None:
                failed[name] = f"NOT_FOUND: Evaluation {name} not found."
                continue
            if request.include_evaluations:
                evaluations.append(evaluation)
            if request.include_evaluation_results:
                results += await _results_of(context, name)
        content, uri = await _deliver(
            context,
            exchange.Bundle(evaluations, results),
            request.export_options,
            "evaluations",
            request.parent,
        )
        response = service_pb2.ExportEvaluationsResponse(failed_evaluations=failed)
        if uri:
            response.evaluations_uri = uri
        else:
            response.evaluations_content = content
        return _readable(response)

    return await context.operation(request.parent, "ExportEvaluations", work)


async def _export_each(
    context: Context,
    kind: str,
    resource: Resource[Any],
    request: service_pb2.ExportEvaluationResultsRequest | service_pb2.ExportEvaluationRunsRequest,
) -> operations_pb2.Operation:
    """ExportEvaluation{Results,Runs} (``kind``: ``results`` or ``runs``): the resources the
    request names (each must exist: a missing one fails the operation with NOT_FOUND naming
    it) as the ``kind`` part of an export document; its response and metadata are the RPC's
    own."""
    parent, options = request.parent, request.export_options
    await _check_export_target(context, options, parent)
    wanted = list(dict.fromkeys(request.names))
    rpc = f"ExportEvaluation{kind.title()}"
    response_class: type[Message] = getattr(service_pb2, f"{rpc}Response")

    async def work() -> Message:
        get = partial(resource.store.get, context.storage)
        items = await _every(wanted, get, resource.pattern.type)
        content, uri = await _deliver(
            context, exchange.Bundle(**{kind: items}), options, f"evaluation-{kind}", parent
        )
        return _answer(response_class, f"evaluation_{kind}", content, uri)

    metadata = getattr(service_pb2, f"{rpc}OperationMetadata")()
    return await context.runner.start(location_of(parent), rpc, metadata, work)


async def export_evaluation_results(
    context: Context, request: service_pb2.ExportEvaluationResultsRequest, caller: Caller
) -> operations_pb2.Operation:
    names.EVALUATION.parse(request.parent, "parent")
    violations = _names_violations(request.names, request.parent, "results")
    raise_if_invalid(violations, "export request")
    if await context.storage.get_evaluation(request.parent) is None:
        raise ServiceError.not_found(names.EVALUATION.type, request.parent)
    return await _export_each(context, "results", RESULTS, request)


async def export_evaluation_runs(
    context: Context, request: service_pb2.ExportEvaluationRunsRequest, caller: Caller
) -> operations_pb2.Operation:
    """The runs ``names`` of the app ``parent``."""
    names.APP.parse(request.parent, "parent", owned=0)
    raise_if_invalid(
        _names_violations(request.names, request.parent, "evaluationRuns", RUNS.pattern.violation),
        "export request",
    )
    return await _export_each(context, "runs", RUNS, request)


RPCS: dict[str, Rpc] = {
    "ExportEvaluations": export_evaluations,
    "ExportEvaluationResults": export_evaluation_results,
    "ExportEvaluationRuns": export_evaluation_runs,
}
