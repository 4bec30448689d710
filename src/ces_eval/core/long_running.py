"""The long-running methods of the core: exports, metric runs, the Operations service, and the
emulator's import. Mixed into :class:`ces_eval.core.service.Core`.

ExportEvaluations / ExportEvaluationResults write the export document (docs/export-format.md)
inline into the operation's response, or, with ``export_options.gcs_uri``, atomically into a
file under the server's export root (``gs://bucket/path`` → ``<export root>/bucket/path``).
No read or write there follows a symbolic link, and errors about a file read from there never
quote its content (docs/security.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from google.longrunning import operations_pb2
from google.protobuf import empty_pb2

from ces_eval.core import exchange, limits, names, rerun
from ces_eval.core.pages import PageTokens, fill, page_size
from ces_eval.core.stamps import new_etag
from ces_eval.core.validation import raise_if_invalid, with_size
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import derived
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    ListQuery,
    Missing,
    OrderBy,
    SortKey,
    TooLarge,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from google.protobuf.message import Message

    from ces_eval.core.operations import OperationRunner
    from ces_eval.core.service import Caller
    from ces_eval.storage.base import Storage

__all__ = ["LOCATION", "OPERATION", "LongRunning"]

LOCATION = names.ResourcePattern(
    "ces.googleapis.com/Location", "projects/{project}/locations/{location}"
)
OPERATION = names.ResourcePattern(
    "longrunning.googleapis.com/Operation",
    "projects/{project}/locations/{location}/operations/{operation}",
)
_EXTENSIONS = {
    service_pb2.ExportOptions.ExportFormat.YAML: "yaml",
}
_OBJECT = "storage.googleapis.com/Object"  # Cloud Storage's resource type, for NOT_FOUND
_WAIT_DEFAULT = 60.0
_WAIT_MAX = 600.0


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
        if bad(names.EVALUATION, evaluation.name, f"{at}.name", 1):
            continue
        renamed = evaluation_pb2.Evaluation()
        renamed.CopyFrom(evaluation)
        renamed.ClearField("last_ten_results")
        for field in derived.FIELDS:  # derived again from what is imported
            renamed.ClearField(field)
        renamed.name = names.EVALUATION.format(**app, evaluation=evaluation.name.rsplit("/", 1)[1])
        evaluations.append(renamed)
        violations += with_size(limits.check(renamed, at), renamed, at)
    results = []
    for index, result in enumerate(bundle.results):
        if len(violations) >= limits.MAX_VIOLATIONS:
            break
        at = f"{source}.evaluationResults[{index}]"
        if bad(names.EVALUATION_RESULT, result.name, f"{at}.name", 2):
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


_Response = TypeVar("_Response", bound="Message")
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
    requested: Sequence[str], problem: Callable[[str, str], FieldViolation | None]
) -> list[FieldViolation]:
    """One violation per bad entry of an export's ``names`` (``problem(name, "names[3]")``),
    stopping at :data:`limits.MAX_VIOLATIONS` like every check: a request of a thousand bad
    names costs a hundred, and :func:`raise_if_invalid` says there are at least that many."""
    found: list[FieldViolation] = []
    for index, name in enumerate(requested):
        violation = problem(name, f"names[{index}]")
        if violation is not None:
            found.append(violation)
            if len(found) >= limits.MAX_VIOLATIONS:
                break
    return found


def _invalid(field: str, description: str) -> ServiceError:
    return ServiceError.invalid_argument(
        f"{field}: {description}", [FieldViolation(field, description)]
    )


def _refused(field: str, error: exchange.PathRefused, uri: str) -> ServiceError:
    """A link in the export folder is PERMISSION_DENIED: the server will not go where it leads,
    whatever is there. A file where a folder belongs (or the reverse) is the caller's path."""
    if error.link:
        return ServiceError(
            Code.PERMISSION_DENIED,
            f"{field}: {error.message}",
            "EXPORT_PATH_REFUSED",
            {"uri": uri},
        )
    return _invalid(field, error.message)


def _unquoted(violation: FieldViolation) -> FieldViolation:
    """``violation`` without the map or Struct keys of its path (text of the document)."""
    return FieldViolation(
        violation.field.split('["', 1)[0], violation.description, violation.reason
    )


class LongRunning:
    """Methods that return or manage google.longrunning.Operation."""

    _storage: Storage
    _tokens: PageTokens
    _runner: OperationRunner
    _export_root: Path
    # With ``--auth-tokens`` every project has a bucket namespace of its own (docs/security.md):
    # gs://b/p of project P is <export root>/P/b/p, so no token reaches another project's files.
    _export_per_project: bool

    def _locate(self, gcs_uri: str, resource: str) -> exchange.ObjectPath:
        """Where ``gcs_uri`` is for ``resource``'s project; raises ExchangeError."""
        namespace = resource.split("/", 2)[1] if self._export_per_project else ""
        return exchange.locate(gcs_uri, self._export_root, namespace)

    # -- helpers -------------------------------------------------------------------------------

    def _export_target(
        self, options: service_pb2.ExportOptions, resource: str
    ) -> exchange.ObjectPath | None:
        """The folder named by ``options.gcs_uri``; None for inline content. Also rejects
        export formats this server does not know (proto3 enums are open)."""
        if options.export_format not in service_pb2.ExportOptions.ExportFormat.values():
            raise _invalid("export_options.export_format", "Use JSON or YAML.")
        if not options.gcs_uri:
            return None
        try:
            return self._locate(options.gcs_uri, resource)
        except exchange.ExchangeError as error:
            raise _invalid("export_options.gcs_uri", error.message) from error

    async def _check_export_target(self, options: service_pb2.ExportOptions, resource: str) -> None:
        """Refuse an export before it starts when its target cannot be written: a bad URI, or
        a link or file on its path (the write checks again, links may appear meanwhile)."""
        target = self._export_target(options, resource)
        if target is None:
            return
        try:
            await asyncio.to_thread(exchange.probe, target)
        except exchange.PathRefused as error:
            raise _refused("export_options.gcs_uri", error, target.uri) from error

    async def _deliver(
        self,
        bundle: exchange.Bundle,
        options: service_pb2.ExportOptions,
        prefix: str,
        resource: str,
    ) -> tuple[bytes, str]:
        """Render the export; write it when a target was given. (content, uri): one is empty."""
        # Rendering is CPU work: keep it off the event loop so the server stays responsive.
        data = await asyncio.to_thread(exchange.dump, bundle, options.export_format)
        target = self._export_target(options, resource)
        if target is None:
            return data, ""
        file_name = f"{prefix}-{names.new_id()}.{_EXTENSIONS.get(options.export_format, 'json')}"
        location = target.child(file_name)
        owner = self._runner.export_owner()  # here, in the operation's own context
        try:
            await asyncio.to_thread(exchange.write_atomically, location, data, owner)
        except exchange.PathRefused as error:
            raise _refused("export_options.gcs_uri", error, location.uri) from error
        except OSError as error:
            # A full disk, a quota or a file size limit: retryable once space returns, and
            # write_atomically left nothing at the final path.
            raise ServiceError(
                Code.UNAVAILABLE,
                f"Cannot write {location.uri}: {error.strerror or error}; retry later.",
                "EXPORT_WRITE_FAILED",
                {"uri": location.uri},
            ) from error
        return b"", location.uri

    async def _results_of(self, evaluation: str) -> list[evaluation_pb2.EvaluationResult]:
        found: list[evaluation_pb2.EvaluationResult] = []
        after: Cursor | None = None
        while True:
            page = await self._storage.list_results(
                ListQuery(evaluation, OrderBy(SortKey.NAME, descending=False), 1000, after=after)
            )
            found += [evaluation_pb2.EvaluationResult.FromString(data) for data, _ in page]
            if len(page) < 1000:
                return found
            after = page[-1][1]

    @staticmethod
    def _location(name: str) -> str:
        return "/".join(name.split("/")[:4])

    # -- EvaluationService ---------------------------------------------------------------------

    async def export_evaluations(
        self, request: service_pb2.ExportEvaluationsRequest, caller: Caller
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
        if not request.names:
            violations.append(FieldViolation("names", "Required.", "REQUIRED"))
        prefix = request.parent + "/evaluations/"

        def evaluation_problem(name: str, field: str) -> FieldViolation | None:
            if not name.startswith(prefix):
                return FieldViolation(field, f"Must be an evaluation of {request.parent}.")
            return names.EVALUATION.violation(name, field)

        violations += _names_violations(request.names, evaluation_problem)
        raise_if_invalid(violations, "export request")
        await self._check_export_target(request.export_options, request.parent)
        wanted = list(dict.fromkeys(request.names))

        async def work() -> service_pb2.ExportEvaluationsResponse:
            evaluations: list[evaluation_pb2.Evaluation] = []
            results: list[evaluation_pb2.EvaluationResult] = []
            failed: dict[str, str] = {}
            for name in wanted:
                evaluation = await self._storage.get_evaluation(name)
                if evaluation is None:
                    failed[name] = f"NOT_FOUND: Evaluation {name} not found."
                    continue
                if request.include_evaluations:
                    evaluations.append(evaluation)
                if request.include_evaluation_results:
                    results += await self._results_of(name)
            content, uri = await self._deliver(
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

        return await self._runner.start(
            self._location(request.parent),
            "ExportEvaluations",
            service_pb2.OperationMetadata(),
            work,
        )

    async def export_evaluation_results(
        self, request: service_pb2.ExportEvaluationResultsRequest, caller: Caller
    ) -> operations_pb2.Operation:
        names.EVALUATION.parse(request.parent, "parent")
        violations: list[FieldViolation] = []
        if not request.names:
            violations.append(FieldViolation("names", "Required.", "REQUIRED"))
        prefix = request.parent + "/results/"

        def result_problem(name: str, field: str) -> FieldViolation | None:
            if not name.startswith(prefix):
                return FieldViolation(field, f"Must be a result of {request.parent}.")
            return None

        violations += _names_violations(request.names, result_problem)
        raise_if_invalid(violations, "export request")
        if await self._storage.get_evaluation(request.parent) is None:
            raise ServiceError.not_found(names.EVALUATION.type, request.parent)
        await self._check_export_target(request.export_options, request.parent)
        wanted = list(dict.fromkeys(request.names))

        async def work() -> service_pb2.ExportEvaluationResultsResponse:
            results: list[evaluation_pb2.EvaluationResult] = []
            missing: list[str] = []
            for name in wanted:
                result = await self._storage.get_result(name)
                if result is None:
                    missing.append(name)
                else:
                    results.append(result)
            if missing:
                raise ServiceError.not_found(names.EVALUATION_RESULT.type, ", ".join(missing))
            content, uri = await self._deliver(
                exchange.Bundle([], results),
                request.export_options,
                "evaluation-results",
                request.parent,
            )
            if uri:
                return service_pb2.ExportEvaluationResultsResponse(evaluation_results_uri=uri)
            return _readable(
                service_pb2.ExportEvaluationResultsResponse(evaluation_results_content=content)
            )

        return await self._runner.start(
            self._location(request.parent),
            "ExportEvaluationResults",
            service_pb2.ExportEvaluationResultsOperationMetadata(),
            work,
        )

    async def run_evaluation_result_metrics(
        self, request: service_pb2.RunEvaluationResultMetricsRequest, caller: Caller
    ) -> operations_pb2.Operation:
        name = request.evaluation_result_id
        names.EVALUATION_RESULT.parse(name, "evaluation_result_id", owned=2)
        if await self._storage.get_result(name) is None:
            raise ServiceError.not_found(names.EVALUATION_RESULT.type, name)

        async def work() -> service_pb2.RunEvaluationResultMetricsResponse:
            result = await self._storage.get_result(name)
            evaluation = await self._storage.get_evaluation(name.rsplit("/results/", 1)[0])
            if result is None or evaluation is None:
                raise ServiceError.not_found(names.EVALUATION_RESULT.type, name)
            updated = rerun.rerun(result, evaluation)
            # The rerun result is stored: held to the size every write is held to.
            raise_if_invalid(limits.size_violations(updated, "evaluation_result_id"), "result")
            try:
                await self._storage.replace_result(
                    updated, new_etag(), max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
                )
            except Missing as missing:
                raise ServiceError.not_found(names.EVALUATION_RESULT.type, name) from missing
            except TooLarge as large:
                violation = limits.too_large("evaluation_result_id", large.size, large.name)
                raise_if_invalid([violation], "result")
            return service_pb2.RunEvaluationResultMetricsResponse(status=updated.evaluation_status)

        return await self._runner.start(
            self._location(name),
            "RunEvaluationResultMetrics",
            service_pb2.RunEvaluationResultMetricsOperationMetadata(),
            work,
        )

    # -- google.longrunning.Operations ---------------------------------------------------------

    async def get_operation(
        self, request: operations_pb2.GetOperationRequest, caller: Caller
    ) -> operations_pb2.Operation:
        OPERATION.parse(request.name, "name", owned=0)
        operation = await self._storage.get_operation(request.name)
        if operation is None:
            raise ServiceError.not_found(OPERATION.type, request.name)
        return operation

    async def list_operations(
        self, request: operations_pb2.ListOperationsRequest, caller: Caller
    ) -> operations_pb2.ListOperationsResponse:
        LOCATION.parse(request.name, "name", owned=0)
        size = page_size(request.page_size)
        done: bool | None = None
        text = " ".join(request.filter.split())
        if text in {"done = true", "done=true", "done:true"}:
            done = True
        elif text in {"done = false", "done=false", "done:false"}:
            done = False
        elif text:
            raise _invalid("filter", "Only `done = true` and `done = false` are supported.")
        query_key = f"operations\x1f{request.name}\x1f{done}"
        after = (
            self._tokens.decode(request.page_token, query_key).name if request.page_token else None
        )
        found = await self._storage.list_operations(
            request.name, size + 1, after, done, max_bytes=limits.MAX_PAGE_BYTES
        )
        taken = fill((operation.ByteSize() for operation in found), size, limits.MAX_PAGE_BYTES)
        response = operations_pb2.ListOperationsResponse(operations=found[:taken])
        if taken < len(found):
            last = found[taken - 1].name
            response.next_page_token = self._tokens.encode(query_key, Cursor(last, last))
        return response

    async def delete_operation(
        self, request: operations_pb2.DeleteOperationRequest, caller: Caller
    ) -> empty_pb2.Empty:
        OPERATION.parse(request.name, "name", owned=0)
        if not await self._storage.delete_operation(request.name):
            raise ServiceError.not_found(OPERATION.type, request.name)
        return empty_pb2.Empty()

    async def cancel_operation(
        self, request: operations_pb2.CancelOperationRequest, caller: Caller
    ) -> empty_pb2.Empty:
        OPERATION.parse(request.name, "name", owned=0)
        if await self._runner.cancel(request.name) is None:
            raise ServiceError.not_found(OPERATION.type, request.name)
        return empty_pb2.Empty()

    async def wait_operation(
        self, request: operations_pb2.WaitOperationRequest, caller: Caller
    ) -> operations_pb2.Operation:
        OPERATION.parse(request.name, "name", owned=0)
        timeout = _WAIT_DEFAULT
        if request.HasField("timeout"):
            timeout = min(max(request.timeout.ToNanoseconds() / 1e9, 0.0), _WAIT_MAX)
        operation = await self._runner.wait(request.name, timeout)
        if operation is None:
            raise ServiceError.not_found(OPERATION.type, request.name)
        return operation

    # -- emulator ------------------------------------------------------------------------------

    async def _read_import(self, gcs_uri: str, parent: str) -> bytes:
        """The bytes of the object ``gcs_uri`` names for ``parent``'s project."""
        try:
            location = self._locate(gcs_uri, parent)
        except exchange.ExchangeError as error:
            raise _invalid("gcs_uri", error.message) from error
        try:
            # As large as a document given as content may be (the request size limit).
            return await asyncio.to_thread(exchange.read_object, location, limits.MAX_REQUEST_BYTES)
        except exchange.ObjectTooLarge as error:
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
        except exchange.ObjectMissing as error:
            # Only paths inside the export folder can be missing: a link on the way was
            # refused before anything behind it was looked at.
            raise ServiceError.not_found(_OBJECT, location.uri) from error
        except exchange.PathRefused as error:
            raise _refused("gcs_uri", error, location.uri) from error
        except OSError as error:
            raise _invalid("gcs_uri", f"cannot read {location.uri}: {error.strerror}") from error

    async def import_evaluations(
        self, request: emulator_pb2.ImportEvaluationsRequest, caller: Caller
    ) -> emulator_pb2.ImportEvaluationsResponse:
        app = names.APP.parse(request.parent, "parent", owned=0)
        source = request.WhichOneof("source")
        if source is None:
            raise _invalid("content", "Set content or gcs_uri.")
        if source == "gcs_uri":
            data = await self._read_import(request.gcs_uri, request.parent)
        else:
            data = request.content
        try:
            bundle = await asyncio.to_thread(exchange.load, data)
        except exchange.ExchangeError as error:
            # A caller's own content may be quoted back; a file's may not (it may not be theirs
            # to read, and need not be an export at all).
            shown = error if source == "content" else error.redacted()
            field = f"{source}.{shown.path}" if shown.path else source
            raise _invalid(field, shown.message) from error
        # Many names and limits to check in a large document: off the event loop, like the parse.
        evaluations, results, violations = await asyncio.to_thread(_renamed, source, bundle, app)
        raise_if_invalid(violations, "import")
        try:
            await self._storage.import_bundle(
                evaluations, results, max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
            )
        except TooLarge as large:
            # The results imported for it make it too large: named at the first of them.
            index = next(i for i, r in enumerate(results) if r.name.startswith(large.name + "/"))
            evaluation = large.name if source == "content" else "its evaluation"
            violation = limits.too_large(
                f"{source}.evaluationResults[{index}]", large.size, evaluation
            )
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
