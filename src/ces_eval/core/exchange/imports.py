"""Imports of evaluations: EvaluationService.ImportEvaluations (a long-running operation) and
the readers it shares with the EmulatorService's ImportEvaluations (:mod:`.emulator`).

The official import reads one of three sources (docs/semantics.md, "ImportEvaluations"):

- ``gcs_uri``: an object of the export root (:mod:`.exchange.objects`) holding an export
  document in any format an export writes (:mod:`.exchange.document`; a ``.csv`` object is
  read as the CSV below). Evaluations keep their IDs and bring their results; results whose
  evaluation the document lacks go to the app's evaluation of that ID.
- ``csv_content``: Google's evaluation batch upload CSV (:mod:`.exchange.csv_dialect`,
  docs/import-csv.md); every evaluation gets a new ID.
- ``conversation_list``: each stored conversation (:mod:`.conversations`) becomes a golden
  evaluation with a new ID, by GenerateEvaluation's conversion; one not stored is NOT_FOUND
  (reported per conversation in the response).

Each evaluation is imported whole or not at all (one transaction with its results); a bad one
is reported in ``error_messages`` and counted, and the others are imported. A clash with a
stored evaluation (its ID, or its display name: unique within the app) is settled by the
request's ConflictResolutionStrategy: OVERWRITE replaces the stored evaluation (its name kept,
its results replaced), SKIP keeps it, DUPLICATE imports a copy under a fresh ID and display
name; unspecified reports the clash as a failure.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from ces_eval.contract import limits
from ces_eval.core import exchange
from ces_eval.core.aip import names
from ces_eval.core.aip.names import location_of
from ces_eval.core.aip.ports import ObjectError, ObjectMissing, ObjectTooLarge, PathRefused
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.aip.standard import invalid
from ces_eval.core.aip.validation import (
    evaluation_violations,
    raise_if_invalid,
    seeded_violations,
    with_size,
)
from ces_eval.core.exchange import csv_dialect
from ces_eval.core.exchange.stored import refused
from ces_eval.core.resources import apps, conversations
from ces_eval.core.resources.results import RESULTS
from ces_eval.core.resources.runs import RUNS
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage import derived, tables
from ces_eval.storage.base import Conflict, Missing, TooLarge

if TYPE_CHECKING:
    from google.longrunning import operations_pb2

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "Renamed", "SeedPlan", "Seeded", "read_import", "renamed", "seed", "seed_plan"]

_Evaluation = evaluation_pb2.Evaluation
_Result = evaluation_pb2.EvaluationResult
_Run = evaluation_pb2.EvaluationRun
_Strategy = service_pb2.ImportEvaluationsRequest.ImportOptions.ConflictResolutionStrategy
_OBJECT = "storage.googleapis.com/Object"  # Cloud Storage's resource type, for NOT_FOUND
# Display names a DUPLICATE tries ("Name (2)", "Name (3)", ...) before it reports a failure.
_DUPLICATE_TRIES = 100
_OPERATION_ENVELOPE = 1024  # an operation's name, metadata and type URL, at most
# A listed item's tags and lengths: its own, its name's and its display name's, at most.
_ITEM_OVERHEAD = 10
M = TypeVar("M", "evaluation_pb2.Evaluation", "evaluation_pb2.EvaluationResult")


# -- the readers both imports share -----------------------------------------------------------


async def read_import(
    context: Context,
    gcs_uri: str,
    parent: str,
    limit: int = limits.MAX_REQUEST_BYTES,
    what: str = "evaluations",
) -> bytes:
    """The bytes of the object ``gcs_uri`` names for ``parent``'s project (field ``gcs_uri``
    in both import requests, and in ImportAgentRecordings'), at most ``limit`` (by default as
    large as a document given as content may be: the request size limit); a larger one says
    to export fewer of ``what`` per file."""
    try:
        location = context.locate(gcs_uri, parent)
    except ObjectError as error:
        raise invalid("gcs_uri", error.message) from error
    try:
        return await asyncio.to_thread(context.objects.read, location, limit)
    except ObjectTooLarge as error:
        # INVALID_ARGUMENT: the object is this call's input, as content would be, and Google
        # answers input over a size limit so (Cloud Logging's "Log entry with size … exceeds
        # maximum size"); this method answers so for the other objects it cannot import (a
        # folder, a FIFO, a document it cannot read). Not FAILED_PRECONDITION: no change of
        # the server's state makes this object importable; the caller must name another.
        description = f"{error.message} Export fewer {what} per file."
        raise ServiceError(
            Code.INVALID_ARGUMENT,
            f"gcs_uri: {description}",
            "INVALID_ARGUMENT",
            {"uri": location.uri, "limit": str(error.limit)},
            [FieldViolation("gcs_uri", description, "TOO_LARGE")],
        ) from error
    except ObjectMissing as error:
        # Only paths inside the export folder can be missing: a link on the way was
        # refused before anything behind it was looked at.
        raise ServiceError.not_found(_OBJECT, location.uri) from error
    except PathRefused as error:
        raise refused("gcs_uri", error, location.uri) from error
    except OSError as error:
        raise invalid("gcs_uri", f"cannot read {location.uri}: {error.strerror}") from error


def load_document(data: bytes, source: str) -> exchange.Bundle:
    """The export document ``data`` of request field ``source`` (``content``, ``gcs_uri``);
    INVALID_ARGUMENT at the path of its first problem. A caller's own content may be quoted
    back; a file's may not (it may not be theirs to read, and need not be an export at all)."""
    try:
        return exchange.load(data)
    except exchange.ExchangeError as error:
        shown = error if source == "content" else error.redacted()
        field_path = f"{source}.{shown.path}" if shown.path else source
        raise invalid(field_path, shown.message) from error


@dataclass
class Renamed(Generic[M]):
    """One evaluation or result of a document, renamed into the app: ``at`` is where it is in
    the request (``content.evaluations[2]``); ``message`` is None when its name is unusable;
    ``violations`` are what makes it unfit to store."""

    at: str
    message: M | None
    violations: list[FieldViolation] = field(default_factory=list)


def _unquoted(violation: FieldViolation) -> FieldViolation:
    """``violation`` without the map or Struct keys of its path (text of the document)."""
    return FieldViolation(
        violation.field.split('["', 1)[0], violation.description, violation.reason
    )


def _in_app(name: str, app: str) -> str:
    """``name`` (``projects/…/apps/{app}/rest``) moved into ``app``; other text unchanged."""
    _, sep, rest = name.partition("/apps/")
    return f"{app}/{rest.split('/', 1)[1]}" if sep and "/" in rest else name


def renamed(
    source: str, bundle: exchange.Bundle, app: dict[str, str]
) -> tuple[list[Renamed[_Evaluation]], list[Renamed[_Result]]]:
    """The evaluations and results of ``bundle`` renamed into ``app``, each with what makes it
    unfit to store: a name that is not an evaluation's (a result's) resource name or whose IDs
    break AIP-122 (:meth:`names.ResourcePattern.violation`, the rule every create applies), and
    the limits it exceeds, located in the document (``content.evaluations[2].name``,
    ``content.evaluations[2].golden.turns``). A document read from a file (not ``content``)
    is quoted nowhere: neither names nor map keys. Derived fields are cleared: they are derived
    again from what is imported."""
    quote = source == "content"

    def checked(item: Renamed[M], violations: list[FieldViolation]) -> Renamed[M]:
        item.violations = violations if quote else [_unquoted(v) for v in violations]
        return item

    evaluations: list[Renamed[_Evaluation]] = []
    for index, evaluation in enumerate(bundle.evaluations):
        at = f"{source}.evaluations[{index}]"
        bad = names.EVALUATION.violation(
            evaluation.name, f"{at}.name", owned=names.owned(names.EVALUATION), quote=quote
        )
        if bad is not None:
            evaluations.append(checked(Renamed(at, None), [bad]))
            continue
        copy = _Evaluation()
        copy.CopyFrom(evaluation)
        copy.ClearField("last_ten_results")
        for derived_field in derived.FIELDS:
            copy.ClearField(derived_field)
        copy.ClearField("evaluation_datasets")  # kept by datasets, none of which lists it
        copy.name = names.EVALUATION.format(**app, evaluation=evaluation.name.rsplit("/", 1)[1])
        evaluations.append(checked(Renamed(at, copy), with_size(limits.check(copy, at), copy, at)))
    results: list[Renamed[_Result]] = []
    for index, result in enumerate(bundle.results):
        at = f"{source}.evaluationResults[{index}]"
        bad = names.EVALUATION_RESULT.violation(
            result.name, f"{at}.name", owned=RESULTS.owned, quote=quote
        )
        if bad is not None:
            results.append(checked(Renamed(at, None), [bad]))
            continue
        parts = result.name.split("/")
        copy_result = _Result()
        copy_result.CopyFrom(result)
        copy_result.name = names.EVALUATION_RESULT.format(
            **app, evaluation=parts[-3], result=parts[-1]
        )
        parent = names.APP.format(**app)
        if copy_result.evaluation_run:  # the run moves into the app with it
            copy_result.evaluation_run = _in_app(copy_result.evaluation_run, parent)
        violations = with_size(limits.check(copy_result, at), copy_result, at)
        results.append(checked(Renamed(at, copy_result), violations))
    return evaluations, results


# -- the official import -----------------------------------------------------------------------


@dataclass
class _Group:
    """What one transaction imports: an evaluation (None: results for the stored evaluation
    they name) and its results; ``at`` says where in the request (an index, a CSV line)."""

    evaluation: _Evaluation | None
    results: list[_Result]
    at: str


@dataclass
class _Outcome:
    """What the import did, in the response's terms."""

    evaluations: list[_Evaluation] = field(default_factory=list)
    results: list[_Result] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: int = 0
    failed_results: int = 0
    skipped: int = 0
    runs: list[_Run] = field(default_factory=list)
    failed_runs: int = 0

    def fail(
        self, message: str, *, results: int = 0, evaluation: bool = True, runs: int = 0
    ) -> None:
        self.errors.append(message)
        self.failed += int(evaluation)
        self.failed_results += results
        self.failed_runs += runs


def _described(violations: list[FieldViolation]) -> str:
    return "; ".join(f"{v.field}: {v.description}" for v in violations[:3]) + (
        f" (and {len(violations) - 3} more)" if len(violations) > 3 else ""
    )


def _stamped(message: _Evaluation | _Result, user: str) -> None:
    """A new etag; the document's times and authors kept, what it lacks filled as by a create."""
    stamp = now()
    if not message.HasField("create_time"):
        message.create_time.CopyFrom(stamp)
    if isinstance(message, _Evaluation):
        if not message.HasField("update_time"):
            message.update_time.CopyFrom(stamp)
        message.created_by = message.created_by or user
        message.last_updated_by = message.last_updated_by or user
        message.etag = new_etag()


def _moved(group: _Group, name: str) -> None:
    """Rename the group's evaluation to ``name`` and its results under it."""
    if group.evaluation is not None:
        group.evaluation.name = name
    for result in group.results:
        result.name = f"{name}/results/{result.name.rsplit('/', 1)[1]}"


def _csv_groups(data: bytes, parent: str, app: dict[str, str], outcome: _Outcome) -> list[_Group]:
    """The evaluations of a batch upload CSV, each with a new ID; bad rows into ``outcome``."""
    try:
        found = csv_dialect.read(data, parent)
    except exchange.ExchangeError as error:
        raise invalid("csv_content", error.message) from error
    for stray in found.strays:
        outcome.fail(stray)
    groups = []
    for item in found.evaluations:
        evaluation = item.evaluation
        if evaluation is not None:
            violations = evaluation_violations(evaluation, "evaluation")
            evaluation.name = names.EVALUATION.format(**app, evaluation=names.new_id())
            violations = with_size(violations, evaluation, "evaluation")
            for violation in violations[: limits.MAX_VIOLATIONS]:
                where = violation.field.removeprefix("evaluation.")
                item.problems.append(
                    f"line {item.line_of(violation.field)}: {where}: {violation.description}"
                )
        if item.problems or evaluation is None:  # the reader made one unless a row was bad
            outcome.errors.extend(item.problems)
            outcome.failed += 1
            continue
        groups.append(_Group(evaluation, [], f"line {item.line}"))
    return groups


def _document_groups(
    bundle: exchange.Bundle, source: str, app: dict[str, str], outcome: _Outcome
) -> list[_Group]:
    """The evaluations of an export document with their results, then the results whose
    evaluation the document lacks (grouped by it); unfit items into ``outcome``."""
    evaluations, results = renamed(source, bundle, app)
    groups: dict[str, _Group] = {}
    for item in evaluations:
        if item.message is None or item.violations:
            outcome.fail(f"{item.at}: {_described(item.violations)}")
        elif item.message.name in groups:
            outcome.fail(f"{item.at}: the document holds this evaluation twice")
        else:
            groups[item.message.name] = _Group(item.message, [], item.at)
    # Evaluations the document holds but that are unfit: their results fail with them.
    failed_parents = {
        e.message.name
        for e in evaluations
        if e.message is not None and e.message.name not in groups
    }
    for result_item in results:
        if result_item.message is None or result_item.violations:
            message = f"{result_item.at}: {_described(result_item.violations)}"
            outcome.fail(message, results=1, evaluation=False)
            continue
        parent = result_item.message.name.rsplit("/results/", 1)[0]
        if parent in failed_parents:
            outcome.failed_results += 1  # its evaluation's failure says why
            continue
        group = groups.get(parent)
        if group is None:
            group = groups[parent] = _Group(None, [], result_item.at)
        group.results.append(result_item.message)
    return list(groups.values())


async def _import_runs(
    context: Context,
    bundle: exchange.Bundle,
    strategy: int,
    outcome: _Outcome,
    app: dict[str, str],
) -> None:
    """The EvaluationRuns of a document, once its evaluations and results are stored: each
    renamed into the app with the evaluations, dataset and results it names (their IDs kept,
    as the results' are), checked as a seed is, stored in a transaction of its own. A run
    whose name is taken is skipped with SKIP, else fails (runs are never overwritten or
    duplicated: their results name them)."""
    parent = names.APP.format(**app)
    for index, run in enumerate(bundle.runs):
        at = f"gcs_uri.evaluationRuns[{index}]"
        bad = names.of(_Run).violation(run.name, f"{at}.name", owned=RUNS.owned, quote=False)
        if bad is not None:
            outcome.fail(f"{at}: {_described([bad])}", evaluation=False, runs=1)
            continue
        moved = _Run()
        moved.CopyFrom(run)
        moved.name = _in_app(run.name, parent)
        moved.evaluations[:] = [_in_app(e, parent) for e in run.evaluations]
        moved.evaluation_results[:] = [_in_app(r, parent) for r in run.evaluation_results]
        if moved.evaluation_dataset:
            moved.evaluation_dataset = _in_app(run.evaluation_dataset, parent)
        if moved.scheduled_evaluation_run:
            moved.scheduled_evaluation_run = _in_app(run.scheduled_evaluation_run, parent)
        violations = seeded_violations(moved, at)
        if violations:
            outcome.fail(f"{at}: {_described(violations)}", evaluation=False, runs=1)
            continue
        try:
            await context.storage.insert_row(tables.RUNS, moved)
        except Conflict:
            if strategy == _Strategy.SKIP:
                outcome.skipped += 1
                continue
            outcome.fail(f"{at}: {moved.name} already exists.", evaluation=False, runs=1)
            continue
        outcome.runs.append(moved)


def _settle(
    conflict: Conflict,
    group: _Group,
    strategy: int,
    outcome: _Outcome,
    retry: tuple[dict[str, str], list[str], str],
) -> list[str] | None:
    """How a clash of ``group`` is settled by ``strategy``: the evaluations the next attempt
    replaces (the group renamed as it needs), or None when the group is done (skipped or
    failed). ``retry`` is (the app, what this attempt replaced, the next duplicate's name)."""
    app, replacing, duplicate_name = retry
    evaluation = group.evaluation
    holder = conflict.existing
    if evaluation is None or "/results/" in holder:  # a result's clash: no strategy applies
        outcome.fail(
            f"{group.at}: ALREADY_EXISTS: the {conflict.field} of a result clashes with {holder}.",
            results=len(group.results),
            evaluation=evaluation is not None,
        )
        return None
    if strategy == _Strategy.SKIP:
        outcome.skipped += 1
        return None
    if strategy == _Strategy.OVERWRITE and not replacing:
        _moved(group, holder)  # the stored evaluation's name, its content replaced
        return [holder]
    if strategy == _Strategy.DUPLICATE:
        if conflict.field == "name":  # a fresh ID
            _moved(group, names.EVALUATION.format(**app, evaluation=names.new_id()))
        else:  # a fresh display name: "Name (2)", "Name (3)", ...
            evaluation.display_name = duplicate_name
        return replacing
    hint = (
        "; only one evaluation can be overwritten."
        if replacing
        else " (import_options.conflict_resolution_strategy settles clashes)."
    )
    outcome.fail(
        f"{group.at}: ALREADY_EXISTS: the {conflict.field} of evaluation "
        f"{evaluation.display_name!r} is taken by {holder}{hint}",
        results=len(group.results),
    )
    return None


async def _store(
    context: Context, group: _Group, strategy: int, outcome: _Outcome, app: dict[str, str]
) -> None:
    """Import one group in one transaction, settling clashes by ``strategy`` (a retry each)."""
    evaluation = group.evaluation
    replacing: list[str] | None = []
    base = evaluation.display_name if evaluation is not None else ""
    for attempt in range(2, _DUPLICATE_TRIES + 2):
        try:
            await context.storage.import_bundle(
                [evaluation] if evaluation is not None else [],
                group.results,
                max_evaluation_bytes=limits.MAX_RESOURCE_BYTES,
                replacing=replacing or (),
            )
        except Conflict as conflict:
            replacing = _settle(
                conflict, group, strategy, outcome, (app, replacing or [], f"{base} ({attempt})")
            )
            if replacing is None:
                return
            continue
        except Missing as missing:
            if evaluation is None:
                problem = f"NOT_FOUND: Evaluation {missing.name} not found."
            else:  # the evaluation to overwrite was deleted meanwhile
                problem = f"ABORTED: {missing.name} changed during the import."
            outcome.fail(
                f"{group.at}: {problem}",
                results=len(group.results),
                evaluation=evaluation is not None,
            )
            return
        except TooLarge as large:
            outcome.fail(
                f"{group.at}: its results would make {large.name} larger than "
                f"{limits.MAX_RESOURCE_BYTES} bytes.",
                results=len(group.results),
                evaluation=evaluation is not None,
            )
            return
        if evaluation is not None:
            outcome.evaluations.append(evaluation)
        outcome.results.extend(group.results)
        return
    outcome.fail(f"{group.at}: no free display name after {_DUPLICATE_TRIES} tries.")


def _response(outcome: _Outcome) -> tuple[service_pb2.ImportEvaluationsResponse, int]:
    """The response, within what every client reads (:data:`limits.MAX_RESOURCE_BYTES`), and
    how many imported items it leaves out. Problems are :func:`limits.listed` (at most 100,
    each cut); the imported evaluations, results and runs are listed whole when they fit, else
    by name and display name only, as many as fit (evaluations first, then runs, then
    results): the metadata's status message counts them all."""
    response = service_pb2.ImportEvaluationsResponse(
        evaluations=outcome.evaluations,
        evaluation_results=outcome.results,
        evaluation_runs=outcome.runs,
        error_messages=limits.listed(outcome.errors),
        import_failure_count=outcome.failed,
        evaluation_result_import_failure_count=outcome.failed_results,
        evaluation_run_import_failure_count=outcome.failed_runs,
    )
    if response.ByteSize() + _OPERATION_ENVELOPE <= limits.MAX_RESOURCE_BYTES:
        return response, 0
    del response.evaluations[:]
    del response.evaluation_results[:]
    del response.evaluation_runs[:]
    room = limits.MAX_RESOURCE_BYTES - _OPERATION_ENVELOPE - response.ByteSize()
    left_out = 0
    for field_name, items in (
        ("evaluations", outcome.evaluations),
        ("evaluation_runs", outcome.runs),
        ("evaluation_results", outcome.results),
    ):
        listing = getattr(response, field_name)
        for item in items:
            size = len(item.name.encode()) + len(item.display_name.encode()) + _ITEM_OVERHEAD
            if size > room:
                left_out += 1
                continue
            room -= size
            listing.add(name=item.name, display_name=item.display_name)
    return response, left_out


async def _conversations(
    context: Context,
    request: service_pb2.ImportEvaluationsRequest,
    app: dict[str, str],
    outcome: _Outcome,
) -> list[_Group]:
    """A golden evaluation of each stored conversation named (the conversion of
    GenerateEvaluation, :func:`ces_eval.core.resources.conversations.evaluation_of`), each with a
    new ID, after the names are checked (a conversation of the parent app); a conversation not
    stored is NOT_FOUND, one with nothing to convert FAILED_PRECONDITION (reported per
    conversation)."""
    listed = request.conversation_list.conversations
    if not listed:
        raise ServiceError.invalid_argument(
            "conversation_list.conversations is required.",
            [FieldViolation("conversation_list.conversations", "Required.", "REQUIRED")],
        )
    violations = []
    for index, name in enumerate(listed):
        at = f"conversation_list.conversations[{index}]"
        violation = names.CONVERSATION.violation(name, at, owned=0)
        if violation is None and not name.startswith(f"{request.parent}/conversations/"):
            violation = FieldViolation(at, f"Must be a conversation of {request.parent}.")
        if violation is not None:
            violations.append(violation)
    raise_if_invalid(violations, "import request")
    groups = []
    for index, name in enumerate(dict.fromkeys(listed)):
        at = f"conversation_list.conversations[{index}]"
        try:
            conversation = await conversations.found(context, name)
            evaluation = conversations.evaluation_of(conversation)
        except ServiceError as error:
            outcome.fail(f"{at}: {error.code.name}: {error.message}")
            continue
        evaluation.name = names.EVALUATION.format(**app, evaluation=names.new_id())
        refused = conversations.checked(evaluation)
        if refused is not None:
            outcome.fail(f"{at}: {refused.code.name}: {refused.message}")
            continue
        groups.append(_Group(evaluation, [], at))
    return groups


async def import_evaluations(
    context: Context, request: service_pb2.ImportEvaluationsRequest, caller: Caller
) -> operations_pb2.Operation:
    app = names.APP.parse(request.parent, "parent", owned=0)
    strategy = request.import_options.conflict_resolution_strategy
    if strategy not in _Strategy.values():
        raise invalid(
            "import_options.conflict_resolution_strategy", "Use OVERWRITE, SKIP or DUPLICATE."
        )
    source = request.WhichOneof("source")
    outcome = _Outcome()
    groups: list[_Group] = []
    bundle: exchange.Bundle | None = None
    # The source is read and checked before the operation starts: a request that cannot be
    # read at all fails at once; the operation reports what fails per evaluation.
    if source is None:
        raise invalid("source", "Set conversation_list, gcs_uri or csv_content.")
    if source == "conversation_list":
        groups = await _conversations(context, request, app, outcome)
    elif source == "csv_content":
        groups = await asyncio.to_thread(
            _csv_groups, request.csv_content, request.parent, app, outcome
        )
    else:
        data = await read_import(context, request.gcs_uri, request.parent)
        if request.gcs_uri.lower().endswith(".csv"):
            groups = await asyncio.to_thread(_csv_groups, data, request.parent, app, outcome)
        else:
            bundle = await asyncio.to_thread(load_document, data, "gcs_uri")
            groups = await asyncio.to_thread(_document_groups, bundle, "gcs_uri", app, outcome)
    metadata = service_pb2.ImportEvaluationsOperationMetadata()

    async def work() -> service_pb2.ImportEvaluationsResponse:
        for group in groups:
            for message in ([group.evaluation] if group.evaluation else []) + group.results:
                _stamped(message, caller.user)
            await _store(context, group, strategy, outcome, app)
        if bundle is not None:
            await _import_runs(context, bundle, strategy, outcome, app)
        # Sizing and copying every imported item: off the event loop for a large import.
        response, left_out = await asyncio.to_thread(_response, outcome)
        metadata.status_message = (
            f"Imported {len(outcome.evaluations)} evaluations, {len(outcome.results)} "
            f"results and {len(outcome.runs)} runs; {outcome.skipped} skipped, "
            f"{outcome.failed} evaluations, {outcome.failed_results} results and "
            f"{outcome.failed_runs} runs failed."
        )
        if left_out:
            metadata.status_message += (
                f" The response lists {left_out} imported items fewer, within the "
                f"{limits.MAX_RESOURCE_BYTES} bytes every client reads."
            )
        return response

    return await context.runner.start(
        location_of(request.parent), "ImportEvaluations", metadata, work
    )


# -- serve --seed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """What a seed at start stored (``serve --seed``), and what it found stored already."""

    evaluations: int
    results: int
    runs: int
    present: int


def _by_app(bundle: exchange.Bundle) -> dict[str, exchange.Bundle]:
    """The document split by the app each evaluation, result and run names."""
    parts: dict[str, exchange.Bundle] = {}

    def part(name: str, marker: str) -> exchange.Bundle:
        return parts.setdefault(name.split(marker, 1)[0], exchange.Bundle())

    for evaluation in bundle.evaluations:
        part(evaluation.name, "/evaluations/").evaluations.append(evaluation)
    for result in bundle.results:
        part(result.name, "/evaluations/").results.append(result)
    for run in bundle.runs:
        part(run.name, "/evaluationRuns/").runs.append(run)
    return parts


@dataclass(frozen=True)
class SeedPlan:
    """An export document read and checked for ``serve --seed``, by app, ready to store."""

    apps: list[tuple[dict[str, str], exchange.Bundle, list[_Group]]]


def seed_plan(data: bytes) -> SeedPlan:
    """The export document ``data`` (any format an export writes) as :func:`seed` stores it:
    each evaluation, result and run in the app its name names, IDs kept. A document unfit to
    import is INVALID_ARGUMENT at its first problem (checked before anything is stored)."""
    bundle = load_document(data, "seed")
    outcome = _Outcome()
    apps = []
    for app_name, part in _by_app(bundle).items():
        app = names.APP.parse(app_name, "seed", owned=0)
        apps.append((app, part, _document_groups(part, "seed", app, outcome)))
    _refuse_seed(outcome)
    return SeedPlan(apps)


async def seed(context: Context, plan: SeedPlan, user: str) -> Seeded:
    """Store what ``plan`` holds. What is stored already (the same name, or an evaluation's
    display name in its app) is kept as it is (SKIP), so a seed read again at every start
    changes nothing. Results are seeded with their evaluations: a result whose evaluation the
    document lacks and that is stored already is refused (INVALID_ARGUMENT)."""
    outcome = _Outcome()
    for app, part, groups in plan.apps:
        # The app its names name exists from the seed on, as from any other write under it
        # (docs/semantics.md, "Apps"), whatever --require-apps says: the seed is the server's.
        await apps.store_implicit(context, names.APP.format(**app))
        for group in groups:
            for message in ([group.evaluation] if group.evaluation else []) + group.results:
                _stamped(message, user)
            await _store(context, group, _Strategy.SKIP, outcome, app)
        await _import_runs(context, part, _Strategy.SKIP, outcome, app)
    _refuse_seed(outcome)
    return Seeded(
        len(outcome.evaluations), len(outcome.results), len(outcome.runs), outcome.skipped
    )


def _refuse_seed(outcome: _Outcome) -> None:
    if outcome.errors:
        more = f" (and {len(outcome.errors) - 1} more)" if len(outcome.errors) > 1 else ""
        raise invalid("seed", f"{limits.cut(outcome.errors[0])}{more}")


RPCS: dict[str, Rpc] = {"ImportEvaluations": import_evaluations}
