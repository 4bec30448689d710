"""The service core: one implementation per RPC, shared by every surface (gRPC, REST, MCP).

Methods take the request message and the :class:`Caller` and return the response message, or
raise :class:`~ces_eval.errors.ServiceError`. Nothing here knows about transports. Method names
are the RPC names in snake_case; surfaces find them through the service descriptors
(:func:`handlers`), so an RPC without a method here is UNIMPLEMENTED everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import empty_pb2

from ces_eval import filtering, schema
from ces_eval.access import Principal, authorize
from ces_eval.core import fields, limits, names, pages, validation
from ces_eval.core.json_safe import violations as unrenderable
from ces_eval.core.long_running import LongRunning
from ces_eval.core.operations import OperationRunner
from ces_eval.core.stamps import new_etag, now
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import (
    Conflict,
    EtagMismatch,
    InvalidFilter,
    ListQuery,
    Missing,
    TooLarge,
    Unavailable,
)

if TYPE_CHECKING:
    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.storage.base import Storage

__all__ = [
    "DEFAULT_EXPORT_ROOT",
    "DEFAULT_USER",
    "Caller",
    "Core",
    "Handler",
    "handlers",
    "implements",
]

DEFAULT_USER = "local-user@ces-eval.localhost"
DEFAULT_EXPORT_ROOT = Path("./data/exports")
_RECENT_RESULTS = 10
# Read-modify-write rounds of an update or delete without an etag before it gives up
# (ABORTED). Every lost round is another writer's success, so this bounds the contention it
# rides out: 15 concurrent writers of one evaluation.
_UNCONDITIONAL_ATTEMPTS = 16
_PROJECT = re.compile(r"projects/([A-Za-z0-9][A-Za-z0-9._~-]{0,127})")

Handler = Callable[["Message", "Caller"], Awaitable["Message"]]


@dataclass(frozen=True)
class Caller:
    """Who is calling, as the surfaces' boundary authenticated it (a plain value: see
    :func:`ces_eval.access.authentication.identify`). ``user`` is recorded in created_by /
    last_updated_by; ``principal`` is the authenticated token's principal when the server runs
    with ``--auth-tokens`` (None on an open server, where every project is reachable)."""

    user: str = DEFAULT_USER
    principal: Principal | None = None


def _filter(text: str, field: str) -> filtering.Expr | None:
    try:
        return filtering.parse(text)
    except filtering.FilterError as error:
        raise _filter_error(error, field) from error


def _filter_error(error: filtering.FilterError, field: str) -> ServiceError:
    description = f"{error.message} (at position {error.position})."
    return ServiceError.invalid_argument(
        f"{field} is invalid: {description}", [FieldViolation(field, description)]
    )


class Core(LongRunning):
    """EvaluationService, Operations and EmulatorService semantics over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        tokens: pages.PageTokens,
        runner: OperationRunner | None = None,
        export_root: Path = DEFAULT_EXPORT_ROOT,
        *,
        export_per_project: bool = False,
    ) -> None:
        self._storage = storage
        self._tokens = tokens
        self._runner = runner or OperationRunner(storage)
        self._export_root = export_root
        self._export_per_project = export_per_project

    # -- evaluations ---------------------------------------------------------------------------

    async def create_evaluation(
        self, request: service_pb2.CreateEvaluationRequest, caller: Caller
    ) -> evaluation_pb2.Evaluation:
        app = names.APP.parse(request.parent, "parent", owned=0)
        if request.evaluation_id:
            names.validate_id(request.evaluation_id, "evaluation_id")
        name = names.EVALUATION.format(**app, evaluation=request.evaluation_id or names.new_id())
        # Validated in a worker thread when large: the event loop serves everyone else meanwhile.
        large = request.evaluation.ByteSize() > limits.LOOP_BYTES
        evaluation, violations = await limits.off_loop(
            large, _new_evaluation, request, name, caller.user
        )
        validation.raise_if_invalid(violations, "evaluation")
        try:
            await self._storage.insert_evaluation(evaluation)
        except Conflict as conflict:
            raise self._conflict(conflict, names.EVALUATION, evaluation, "app") from conflict
        return evaluation

    async def _existing_evaluation(self, name: str) -> evaluation_pb2.Evaluation:
        evaluation = await self._storage.get_evaluation(name)
        if evaluation is None:
            raise ServiceError.not_found(names.EVALUATION.type, name)
        return evaluation

    async def get_evaluation(
        self, request: service_pb2.GetEvaluationRequest, caller: Caller
    ) -> evaluation_pb2.Evaluation:
        names.EVALUATION.parse(request.name, "name")
        return await self._existing_evaluation(request.name)

    async def list_evaluations(
        self, request: service_pb2.ListEvaluationsRequest, caller: Caller
    ) -> service_pb2.ListEvaluationsResponse:
        names.APP.parse(request.parent, "parent", owned=0)
        size = pages.page_size(request.page_size)
        order = pages.order_by(request.order_by)
        clauses = [
            f
            for f in (
                _filter(request.filter, "filter"),
                _filter(request.evaluation_filter, "evaluation_filter"),
            )
            if f is not None
        ]
        run_filter = _filter(request.evaluation_run_filter, "evaluation_run_filter")
        query_key = "\x1f".join(
            (
                "evaluations",
                request.parent,
                request.filter,
                request.evaluation_filter,
                request.evaluation_run_filter,
                f"{order.key.value}:{order.descending}",
            )
        )
        after = self._tokens.decode(request.page_token, query_key) if request.page_token else None
        query = ListQuery(
            parent=request.parent,
            order=order,
            limit=size + 1,
            filter=clauses[0]
            if len(clauses) == 1
            else (filtering.And(tuple(clauses)) if clauses else None),
            run_filter=run_filter,
            after=after,
            max_bytes=limits.MAX_PAGE_BYTES,
        )
        try:
            rows = await self._storage.list_evaluations(query)
        except InvalidFilter as invalid:
            field = (
                "evaluation_run_filter"
                if invalid.which == "run_filter"
                else ("evaluation_filter" if request.evaluation_filter else "filter")
            )
            raise _filter_error(invalid.error, field) from invalid
        sizes = [evaluation.ByteSize() for evaluation, _ in rows]
        taken = pages.fill(sizes, size)
        page = [evaluation for evaluation, _ in rows[:taken]]
        if request.last_ten_results and page:
            taken = await self._with_recent_results(page, sizes)
        response = service_pb2.ListEvaluationsResponse()
        response.evaluations.extend(page[:taken])
        if taken < len(rows):
            response.next_page_token = self._tokens.encode(query_key, rows[taken - 1][1])
        return response

    async def _with_recent_results(
        self, page: list[evaluation_pb2.Evaluation], sizes: list[int]
    ) -> int:
        """Give each evaluation of ``page`` (of ``sizes`` bytes) its newest results
        (ListEvaluationsRequest.last_ten_results) and say how many of them the page holds now:
        those that still fit the page's bytes with their results, the first always. When the
        first alone does not, it keeps the newest results that fit and ends the page (the
        results after it were not read: the storage stops at the same budget)."""
        recent = await self._storage.recent_results(
            [e.name for e in page], _RECENT_RESULTS, max_bytes=limits.MAX_PAGE_BYTES
        )
        found = [recent.get(e.name, []) for e in page]
        result_sizes = [[r.ByteSize() + pages.ITEM_FRAMING for r in rs] for rs in found]
        taken = pages.fill(
            [size + sum(extra) for size, extra in zip(sizes, result_sizes, strict=False)],
            len(page),
        )
        if taken == 1:
            room = limits.MAX_PAGE_BYTES - pages.ITEM_FRAMING - sizes[0]
            kept = 0
            while kept < len(found[0]) and result_sizes[0][kept] <= room:
                room -= result_sizes[0][kept]
                kept += 1
            found[0] = found[0][:kept]
        for evaluation, results in zip(page[:taken], found, strict=False):
            evaluation.last_ten_results.extend(results)
        return taken

    async def update_evaluation(
        self, request: service_pb2.UpdateEvaluationRequest, caller: Caller
    ) -> evaluation_pb2.Evaluation:
        if not request.HasField("evaluation"):
            raise ServiceError.invalid_argument(
                "evaluation is required.", [FieldViolation("evaluation", "Required.", "REQUIRED")]
            )
        name = request.evaluation.name
        names.EVALUATION.parse(name, "evaluation.name")
        # Without an etag the caller asked for the last write to win: a concurrent writer
        # (another call, another replica) between our read and our write is no conflict, so
        # read again and reapply. With an etag, a concurrent write is the caller's conflict.
        for attempt in range(_UNCONDITIONAL_ATTEMPTS):
            current = await self._existing_evaluation(name)
            if request.evaluation.etag and request.evaluation.etag != current.etag:
                raise ServiceError.aborted_etag(names.EVALUATION.type, name)
            large = max(request.evaluation.ByteSize(), current.ByteSize()) > limits.LOOP_BYTES
            updated = await limits.off_loop(
                large, self._updated_evaluation, current, request, caller
            )
            try:
                await self._storage.replace_evaluation(updated, expected_etag=current.etag)
            except Missing as missing:
                raise ServiceError.not_found(names.EVALUATION.type, name) from missing
            except EtagMismatch as mismatch:
                if request.evaluation.etag or attempt == _UNCONDITIONAL_ATTEMPTS - 1:
                    raise ServiceError.aborted_etag(names.EVALUATION.type, name) from mismatch
                continue
            except Conflict as conflict:
                raise self._conflict(conflict, names.EVALUATION, updated, "app") from conflict
            return updated
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _updated_evaluation(
        current: evaluation_pb2.Evaluation,
        request: service_pb2.UpdateEvaluationRequest,
        caller: Caller,
    ) -> evaluation_pb2.Evaluation:
        """``current`` with the request's masked fields applied, validated, newly stamped."""
        incoming = evaluation_pb2.Evaluation()
        incoming.CopyFrom(request.evaluation)
        fields.clear_output_only(incoming)
        updated = evaluation_pb2.Evaluation()
        updated.CopyFrom(current)
        fields.apply_update_mask(updated, incoming, list(request.update_mask.paths), "update_mask")
        editable = evaluation_pb2.Evaluation()
        editable.CopyFrom(updated)
        violations = validation.evaluation_violations(editable, "evaluation")
        updated.update_time.CopyFrom(now())
        updated.last_updated_by = caller.user
        updated.etag = new_etag()
        # What the update stores, served with the derived fields it keeps, is what is bounded.
        validation.raise_if_invalid(
            validation.with_size(violations, updated, "evaluation"), "evaluation"
        )
        return updated

    async def delete_evaluation(
        self, request: service_pb2.DeleteEvaluationRequest, caller: Caller
    ) -> empty_pb2.Empty:
        names.EVALUATION.parse(request.name, "name")
        # As in update: without an etag, a concurrent change is re-read, not a conflict; the
        # delete applies to the version whose datasets were checked.
        for attempt in range(_UNCONDITIONAL_ATTEMPTS):
            current = await self._existing_evaluation(request.name)
            if request.etag and request.etag != current.etag:
                raise ServiceError.aborted_etag(names.EVALUATION.type, request.name)
            if current.evaluation_datasets and not request.force:
                raise ServiceError(
                    Code.FAILED_PRECONDITION,
                    f"{request.name} still belongs to evaluation datasets "
                    f"({', '.join(current.evaluation_datasets)}); set force to delete it anyway.",
                    "EVALUATION_IN_USE",
                    {"resource": request.name},
                    resource=(names.EVALUATION.type, request.name),
                )
            try:
                await self._storage.delete_evaluation(request.name, current.etag)
            except Missing as missing:
                raise ServiceError.not_found(names.EVALUATION.type, request.name) from missing
            except EtagMismatch as mismatch:
                if request.etag or attempt == _UNCONDITIONAL_ATTEMPTS - 1:
                    raise ServiceError.aborted_etag(
                        names.EVALUATION.type, request.name
                    ) from mismatch
                continue
            return empty_pb2.Empty()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- results -------------------------------------------------------------------------------

    async def get_evaluation_result(
        self, request: service_pb2.GetEvaluationResultRequest, caller: Caller
    ) -> evaluation_pb2.EvaluationResult:
        names.EVALUATION_RESULT.parse(request.name, "name", owned=2)
        result = await self._storage.get_result(request.name)
        if result is None:
            raise ServiceError.not_found(names.EVALUATION_RESULT.type, request.name)
        return result

    async def list_evaluation_results(
        self, request: service_pb2.ListEvaluationResultsRequest, caller: Caller
    ) -> service_pb2.ListEvaluationResultsResponse:
        parts = names.EVALUATION.parse(request.parent, "parent", allow_wildcard="evaluation")
        across = parts["evaluation"] == names.WILDCARD
        if not across:
            await self._existing_evaluation(request.parent)
        size = pages.page_size(request.page_size)
        order = pages.order_by(request.order_by)
        query_key = "\x1f".join(
            ("results", request.parent, request.filter, f"{order.key.value}:{order.descending}")
        )
        after = self._tokens.decode(request.page_token, query_key) if request.page_token else None
        query = ListQuery(
            parent=names.APP.format(**parts) if across else request.parent,
            order=order,
            limit=size + 1,
            filter=_filter(request.filter, "filter"),
            after=after,
            across_evaluations=across,
            max_bytes=limits.MAX_PAGE_BYTES,
        )
        try:
            rows = await self._storage.list_results(query)
        except InvalidFilter as invalid:
            raise _filter_error(invalid.error, "filter") from invalid
        taken = pages.fill((len(data) for data, _ in rows), size)
        response = service_pb2.ListEvaluationResultsResponse()
        for data, _ in rows[:taken]:
            # Parsed straight into the response: no intermediate message to copy.
            response.evaluation_results.add().MergeFromString(data)
        if taken < len(rows):
            response.next_page_token = self._tokens.encode(query_key, rows[taken - 1][1])
        return response

    async def delete_evaluation_result(
        self, request: service_pb2.DeleteEvaluationResultRequest, caller: Caller
    ) -> empty_pb2.Empty:
        names.EVALUATION_RESULT.parse(request.name, "name", owned=2)
        try:
            await self._storage.delete_result(request.name, new_etag())
        except Missing as missing:
            raise ServiceError.not_found(names.EVALUATION_RESULT.type, request.name) from missing
        return empty_pb2.Empty()

    # -- emulator ------------------------------------------------------------------------------

    async def create_evaluation_result(
        self, request: emulator_pb2.CreateEvaluationResultRequest, caller: Caller
    ) -> evaluation_pb2.EvaluationResult:
        parts = names.EVALUATION.parse(request.parent, "parent")
        if request.evaluation_result_id:
            names.validate_id(request.evaluation_result_id, "evaluation_result_id")
        evaluation = await self._existing_evaluation(request.parent)
        result = evaluation_pb2.EvaluationResult()
        result.CopyFrom(request.evaluation_result)
        created = now()
        result.name = names.EVALUATION_RESULT.format(
            **parts, result=request.evaluation_result_id or names.new_id()
        )
        result.create_time.CopyFrom(created)
        if not result.display_name:
            # The seeds' default: "<evaluation display name> Result - <time>".
            result.display_name = f"{evaluation.display_name} Result - {created.ToJsonString()}"
        violations = await limits.off_loop(
            result.ByteSize() > limits.LOOP_BYTES, self._result_violations, result, parts
        )
        validation.raise_if_invalid(violations, "evaluation_result")
        try:
            await self._storage.insert_result(
                result, parent_etag=new_etag(), max_evaluation_bytes=limits.MAX_RESOURCE_BYTES
            )
        except Missing as missing:
            raise ServiceError.not_found(names.EVALUATION.type, request.parent) from missing
        except TooLarge as large:
            violation = limits.too_large("evaluation_result", large.size, large.name)
            validation.raise_if_invalid([violation], "evaluation_result")
        except Conflict as conflict:
            raise self._conflict(
                conflict, names.EVALUATION_RESULT, result, "evaluation"
            ) from conflict
        return result

    @staticmethod
    def _result_violations(
        result: evaluation_pb2.EvaluationResult, parts: dict[str, str]
    ) -> list[FieldViolation]:
        counted = validation.counts_first(limits.check(result, "evaluation_result"))
        if any(v.reason == "TOO_MANY" for v in counted):
            return counted
        violations = fields.required_violations(result, "evaluation_result")
        violations += unrenderable(result, "evaluation_result")
        violations += counted
        completed = evaluation_pb2.EvaluationResult.ExecutionState.COMPLETED
        if result.evaluation_status and result.execution_state != completed:
            violations.append(
                FieldViolation(
                    "evaluation_result.evaluation_status",
                    "Set only when execution_state is COMPLETED.",
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
                        f"evaluation_result.{field}",
                        f"Must be a resource name of the form {prefix}{{id}}.",
                    )
                )
        return validation.with_size(violations, result, "evaluation_result")

    async def reset_project(
        self, request: emulator_pb2.ResetProjectRequest, caller: Caller
    ) -> emulator_pb2.ResetProjectResponse:
        match = _PROJECT.fullmatch(request.name)
        if match is None:
            problem = "Must have the form projects/{project}."
            raise ServiceError.invalid_argument(
                f"name {request.name!r}: {problem}", [FieldViolation("name", problem)]
            )
        counts = await self._storage.reset_project(match.group(1))
        return emulator_pb2.ResetProjectResponse(
            deleted_evaluations=counts.evaluations,
            deleted_evaluation_results=counts.evaluation_results,
            deleted_operations=counts.operations,
        )

    # -- shared --------------------------------------------------------------------------------

    @staticmethod
    def _conflict(
        conflict: Conflict,
        pattern: names.ResourcePattern,
        resource: evaluation_pb2.Evaluation | evaluation_pb2.EvaluationResult,
        scope: str,
    ) -> ServiceError:
        if conflict.field == "name":
            return ServiceError.already_exists(pattern.type, resource.name)
        return ServiceError.already_exists(
            pattern.type,
            conflict.existing,
            f"display_name {resource.display_name!r} is already used by {conflict.existing}; "
            f"display names are unique within the {scope}.",
        )


def _new_evaluation(
    request: service_pb2.CreateEvaluationRequest, name: str, user: str
) -> tuple[evaluation_pb2.Evaluation, list[FieldViolation]]:
    """The evaluation a create stores (the caller's name and OUTPUT_ONLY fields dropped; named
    ``name``, created by ``user`` now, with a new etag), and what is wrong with it: the field
    rules, then its size as it will be served."""
    evaluation = evaluation_pb2.Evaluation()
    if not request.HasField("evaluation"):
        return evaluation, [FieldViolation("evaluation", "Required.", "REQUIRED")]
    evaluation.CopyFrom(request.evaluation)
    evaluation.ClearField("name")
    violations = validation.evaluation_violations(evaluation, "evaluation")
    created = now()
    evaluation.name = name
    evaluation.create_time.CopyFrom(created)
    evaluation.update_time.CopyFrom(created)
    evaluation.created_by = evaluation.last_updated_by = user
    evaluation.etag = new_etag()
    return evaluation, validation.with_size(violations, evaluation, "evaluation")


def snake_case(name: str) -> str:
    """An RPC name in snake_case (``CreateEvaluation`` → ``create_evaluation``): the name of its
    core method and of its MCP tool."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def implements(method: descriptor.MethodDescriptor) -> bool:
    """Whether the core serves ``method`` (surfaces answer UNIMPLEMENTED otherwise)."""
    return hasattr(Core, snake_case(method.name))


def _guarded(implementation: Handler) -> Handler:
    """``implementation`` answering UNAVAILABLE (retryable) while the database is away."""

    async def call(request: Message, caller: Caller) -> Message:
        try:
            return await implementation(request, caller)
        except Unavailable as error:
            raise ServiceError(
                Code.UNAVAILABLE,
                "The database is unavailable; retry later.",
                "DATABASE_UNAVAILABLE",
            ) from error

    return call


def _authorized(method: descriptor.MethodDescriptor, implementation: Handler) -> Handler:
    """``implementation`` behind the project check of :func:`ces_eval.access.authorize`: the
    first thing every call does on a server with ``--auth-tokens``."""

    async def call(request: Message, caller: Caller) -> Message:
        if caller.principal is None:
            # The surfaces authenticate first; reaching here without a principal is a wiring
            # fault, and it must fail closed.
            raise ServiceError(
                Code.UNAUTHENTICATED, "The request has no credentials.", "CREDENTIALS_MISSING"
            )
        authorize(caller.principal, method, request)
        return await implementation(request, caller)

    return call


def handlers(core: Core, *, authorization: bool = False) -> dict[str, Handler]:
    """``/package.Service/Method`` → the core's implementation, for every method the
    descriptors declare that the core implements. ``authorization``: every call must carry a
    principal allowed to reach the projects it addresses (``serve --auth-tokens``)."""
    found: dict[str, Handler] = {}
    for service in schema.services():
        for method in service.methods:
            if not implements(method):
                continue
            implementation = _guarded(getattr(core, snake_case(method.name)))
            if authorization:
                implementation = _authorized(method, implementation)
            found[f"/{service.full_name}/{method.name}"] = implementation
    return found
