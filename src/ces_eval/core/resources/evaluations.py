"""Evaluations: the resource's declaration and its RPCs (Create, Get, List, Update, Delete).

Their standard methods are the generic ones of :mod:`ces_eval.core.aip.standard`; what is theirs
alone is written here: a list's ``last_ten_results`` (each evaluation with its newest results)
the refusal to delete an evaluation that evaluation datasets still hold (without ``force``)
and the check that the evaluation expectations it names exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ces_eval.contract import limits
from ces_eval.core.aip import names, pages, standard, validation
from ces_eval.core.aip.stamps import new_etag
from ces_eval.core.resources import app_resources
from ces_eval.core.resources.expectations import EXPECTATIONS
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2, evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.offload import is_heavy, off_loop

if TYPE_CHECKING:
    from collections.abc import Iterator

    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.errors import FieldViolation

__all__ = ["EVALUATIONS", "RPCS"]

_RECENT_RESULTS = 10


def _rules(
    evaluation: evaluation_pb2.Evaluation, path: str, parts: dict[str, str]
) -> list[FieldViolation]:
    return validation.evaluation_violations(evaluation, path)


async def _in_use(
    context: Context,
    evaluation: evaluation_pb2.Evaluation,
    request: Message,
    caller: Caller | None,
) -> None:
    """An evaluation that evaluation datasets hold is deleted only with ``force``."""
    delete = cast("service_pb2.DeleteEvaluationRequest", request)
    if evaluation.evaluation_datasets and not delete.force:
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"{delete.name} still belongs to evaluation datasets "
            f"({', '.join(evaluation.evaluation_datasets)}); set force to delete it anyway.",
            "EVALUATION_IN_USE",
            {"resource": delete.name},
            resource=(names.EVALUATION.type, delete.name),
        )


async def _references(
    context: Context, evaluation: evaluation_pb2.Evaluation
) -> list[FieldViolation]:
    """The evaluation expectations its golden or scenario names exist in its app, and so do
    the tools and toolsets its tool calls and responses name, when the app has any of that
    kind (docs/semantics.md, "Agents, tools and the app's other resources")."""
    inputs = evaluation.WhichOneof("inputs")
    if inputs is None:
        return []
    listed = getattr(evaluation, inputs).evaluation_expectations
    app = evaluation.name.rsplit("/evaluations/", 1)[0]
    path = f"evaluation.{inputs}.evaluation_expectations"
    found = await standard.references(context, EXPECTATIONS, listed, path, app)
    kinds = await app_resources.tool_kinds(context, app)
    if not any(kinds):
        return found  # the app has neither tools nor toolsets: no name of them is checked
    by_kind: dict[int, list[tuple[str, str]]] = {}
    # The walk visits every message of the evaluation: off the event loop when it is large.
    walk = _tools_named(evaluation, "evaluation")
    named: list[tuple[str, int, str]] = await off_loop(is_heavy(evaluation), list, walk)
    for at, kind, name in named:
        by_kind.setdefault(kind, []).append((at, name))
    for kind, uses in by_kind.items():
        resource = _TOOL_KINDS[kind]
        if not kinds[kind]:
            continue  # the app has none of this kind: its names are not checked
        for at, name in uses:
            found += await standard.references(context, resource, [name], at, app, repeated=False)
    return found


# What a tool call or response names: a tool, or a toolset's tool.
_TOOL_MESSAGES = frozenset(
    {content_pb2.ToolCall.DESCRIPTOR.full_name, content_pb2.ToolResponse.DESCRIPTOR.full_name}
)
_TOOL_KINDS = (app_resources.TOOLS, app_resources.TOOLSETS)


def _tools_named(message: Message, path: str) -> Iterator[tuple[str, int, str]]:
    """(field path, 0 for a tool or 1 for a toolset, its name) of every tool call and tool
    response ``message`` holds, at any depth."""
    for field, value in message.ListFields():
        nested = field.message_type
        if nested is None or nested.full_name.startswith("google.protobuf."):
            continue
        items = value if field.is_repeated else [value]
        for index, item in enumerate(items):
            at = f"{path}.{field.name}[{index}]" if field.is_repeated else f"{path}.{field.name}"
            if nested.full_name not in _TOOL_MESSAGES:
                yield from _tools_named(item, at)
            elif item.tool:
                yield f"{at}.tool", 0, item.tool
            elif item.HasField("toolset_tool"):
                yield f"{at}.toolset_tool.toolset", 1, item.toolset_tool.toolset


async def _with_recent_results(
    context: Context,
    request: Message,
    page: list[evaluation_pb2.Evaluation | bytes],
    sizes: list[int],
) -> int:
    """With ListEvaluationsRequest.last_ten_results, give each evaluation of ``page`` (of
    ``sizes`` bytes) its newest results and say how many of them the page holds now: those
    that still fit the page's bytes with their results, the first always. When the first alone
    does not, it keeps the newest results that fit and ends the page (the results after it were
    not read: the storage stops at the same budget)."""
    if not cast("service_pb2.ListEvaluationsRequest", request).last_ten_results:
        return len(page)
    evaluations = [e for e in page if isinstance(e, evaluation_pb2.Evaluation)]
    recent = await context.storage.recent_results(
        [e.name for e in evaluations], _RECENT_RESULTS, max_bytes=limits.MAX_PAGE_BYTES
    )
    found = [recent.get(e.name, []) for e in evaluations]
    result_sizes = [[r.ByteSize() + pages.ITEM_FRAMING for r in rs] for rs in found]
    taken = pages.fill(
        [size + sum(extra) for size, extra in zip(sizes, result_sizes, strict=False)],
        len(evaluations),
    )
    if taken == 1:
        room = limits.MAX_PAGE_BYTES - pages.ITEM_FRAMING - sizes[0]
        kept = 0
        while kept < len(found[0]) and result_sizes[0][kept] <= room:
            room -= result_sizes[0][kept]
            kept += 1
        found[0] = found[0][:kept]
    for evaluation, results in zip(evaluations[:taken], found, strict=False):
        evaluation.last_ten_results.extend(results)
    return taken


EVALUATIONS = standard.Resource(
    message=evaluation_pb2.Evaluation,
    parent=names.APP,
    store=standard.Store(
        get=lambda storage, name: storage.get_evaluation(name),
        insert=lambda storage, evaluation: storage.insert_evaluation(evaluation),
        list=lambda storage, query: storage.list_evaluations(query),
        # A forced delete takes the evaluation out of its datasets, which get a new etag.
        delete=lambda storage, name, etag: storage.delete_evaluation(
            name, etag, dataset_etag=new_etag()
        ),
        replace=lambda storage, evaluation, etag: storage.replace_evaluation(
            evaluation, expected_etag=etag
        ),
        read=lambda storage, name: storage.read_evaluation(name),
    ),
    rules=_rules,
    filters=("filter", "evaluation_filter"),
    run_filter="evaluation_run_filter",
    guard=_in_use,
    enrich=_with_recent_results,
    verify=_references,
)


RPCS: dict[str, Rpc] = standard.methods(EVALUATIONS, "Create", "Get", "List", "Update", "Delete")
