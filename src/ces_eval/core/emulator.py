"""The EmulatorService: what the emulator adds to the real API for tests and local use.

CreateEvaluationResult seeds a result and CreateEvaluationRun a run (the generic AIP-133 create
over the results' and the runs' declarations, :data:`ces_eval.core.resources.results.RESULTS`,
:data:`ces_eval.core.resources.runs.RUNS`); CreateConversation seeds a conversation,
GetConversation and ListConversations read them
(:data:`ces_eval.core.resources.conversations.CONVERSATIONS`); the outcome rules script what the
run engine observes (:mod:`ces_eval.core.resources.outcome_rules`); the project
clocks and FireScheduledEvaluationRun drive the scheduler (:mod:`ces_eval.core.engine.scheduler`);
ResetProject
deletes a project's evaluations, results and operations; ImportEvaluations reads an export
document (:mod:`ces_eval.core.exchange.document`), given as content or as a ``gs://`` object of
the export root, into an app, all or nothing (with the readers of the official import,
:mod:`ces_eval.core.exchange.imports`, which imports what it can and reports the rest); the
agent recordings are listed, deleted, purged
(:mod:`ces_eval.core.resources.agent_recordings`), exported and imported
(:mod:`ces_eval.core.exchange.recording_files`).
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from ces_eval.contract import limits
from ces_eval.core.aip import names, standard
from ces_eval.core.aip.standard import invalid
from ces_eval.core.aip.validation import raise_if_invalid
from ces_eval.core.engine import scheduler
from ces_eval.core.exchange import imports, recording_files
from ces_eval.core.resources import agent_endpoints, agent_recordings, conversations, outcome_rules
from ces_eval.core.resources.results import RESULTS
from ces_eval.core.resources.runs import RUNS
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.storage.base import Conflict, Missing, TooLarge

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core import exchange
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

__all__ = ["RPCS"]

_PROJECT = re.compile(r"projects/([A-Za-z0-9][A-Za-z0-9._~-]{0,127})")
_EVERY_PROJECT = "projects/-"  # AIP-159's wildcard: ResetProject of every project


async def reset_project(
    context: Context, request: emulator_pb2.ResetProjectRequest, caller: Caller
) -> emulator_pb2.ResetProjectResponse:
    match = _PROJECT.fullmatch(request.name)
    if match is None and request.name != _EVERY_PROJECT:
        problem = "Must have the form projects/{project}, or projects/- for every project."
        raise ServiceError.invalid_argument(
            f"name {request.name!r}: {problem}", [FieldViolation("name", problem)]
        )
    counts = await context.storage.reset_project(match.group(1) if match else None)
    context.recent.clear()  # what the core learnt of the deleted apps no longer holds
    return emulator_pb2.ResetProjectResponse(
        deleted_evaluations=counts.evaluations,
        deleted_evaluation_results=counts.evaluation_results,
        deleted_operations=counts.operations,
        deleted_resources=counts.others,
    )


def _flat(
    source: str, bundle: exchange.Bundle, app: dict[str, str]
) -> tuple[
    list[evaluation_pb2.Evaluation], list[evaluation_pb2.EvaluationResult], list[FieldViolation]
]:
    """The evaluations and results of ``bundle`` renamed into ``app``
    (:func:`ces_eval.core.exchange.imports.renamed`) and every problem of them as the answer lists
    them (:func:`limits.bounded`: at most :data:`limits.MAX_VIOLATIONS`, each description cut, as
    the official import's error_messages are): this import is all or nothing. More evaluations
    than the answer can name (:data:`limits.MAX_IMPORT_EVALUATIONS`) is the only problem
    reported then."""
    count = len(bundle.evaluations)
    if count > limits.MAX_IMPORT_EVALUATIONS:
        path = f"{source}.evaluations"
        return [], [], [limits.too_many(path, limits.MAX_IMPORT_EVALUATIONS, count)]
    evaluations, results = imports.renamed(source, bundle, app)
    violations = [v for e in evaluations for v in e.violations]
    violations += [v for r in results for v in r.violations]
    return (
        [e.message for e in evaluations if e.message is not None],
        [r.message for r in results if r.message is not None],
        limits.bounded(violations),
    )


async def import_evaluations(
    context: Context, request: emulator_pb2.ImportEvaluationsRequest, caller: Caller
) -> emulator_pb2.ImportEvaluationsResponse:
    app = names.APP.parse(request.parent, "parent", owned=0)
    source = request.WhichOneof("source")
    if source is None:
        raise invalid("content", "Set content or gcs_uri.")
    if source == "gcs_uri":
        data = await imports.read_import(context, request.gcs_uri, request.parent)
    else:
        data = request.content
    bundle = await asyncio.to_thread(imports.load_document, data, source)
    if bundle.runs:  # refused rather than dropped: this import restores no runs
        raise invalid(f"{source}.evaluationRuns", "Evaluation runs are not imported here.")
    # Many names and limits to check in a large document: off the event loop, like the parse.
    evaluations, results, violations = await asyncio.to_thread(_flat, source, bundle, app)
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
    # CreateConversation (a seed), GetConversation, ListConversations
    **conversations.EMULATOR_RPCS,
    # Create/Get/List/DeleteOutcomeRule and ReleaseOutcomeRule: the run engine's scripted outcomes
    **outcome_rules.RPCS,
    # FireScheduledEvaluationRun, AdvanceClock, GetProjectClock: schedules fired on demand
    **scheduler.RPCS,
    # GetAgentEndpoint, UpdateAgentEndpoint: the team's own agent that runs play against
    **agent_endpoints.RPCS,
    # Get/List/DeleteAgentRecording(s), PurgeAgentRecordings, Export/ImportAgentRecordings: the
    # recorded exchanges runs replay (docs/agents.md, "Record and replay")
    **agent_recordings.RPCS,
    **recording_files.RPCS,
    "ResetProject": reset_project,
    "ImportEvaluations": import_evaluations,
}
