"""Evaluation expectations: the resource's declaration and its standard methods (Create, Get,
List, Update, Delete).

An expectation is kept in a generic table (:data:`ces_eval.storage.tables.EXPECTATIONS`) and
served by the generic standard methods: its field rules are the descriptors' (``display_name``
and ``llm_criteria.prompt`` REQUIRED, the output-only stamps ignored) and the request limits;
display names are unique within the app. Evaluations name expectations (their golden's or
scenario's ``evaluation_expectations``, checked to exist when written): one that an evaluation
names is not deleted (FAILED_PRECONDITION naming the evaluations) until none does.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ces_eval import filtering
from ces_eval.core.aip import names, standard, validation
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import ListQuery, OrderBy, SortKey

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.errors import FieldViolation

__all__ = ["EXPECTATIONS", "RPCS"]

Expectation = evaluation_pb2.EvaluationExpectation


def _rules(expectation: Expectation, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    return validation.resource_violations(expectation, path)


# How many of the evaluations naming an expectation its refused delete lists.
_LISTED = 10


async def _named(
    context: Context, expectation: Expectation, request: Message, caller: Caller | None
) -> None:
    """An expectation that evaluations name is not deleted (docs/semantics.md)."""
    query = ListQuery(
        parent=tables.parent_of(expectation.name),
        order=OrderBy(SortKey.NAME, descending=False),
        limit=_LISTED + 1,
        filter=filtering.parse(f"evaluation_expectations:{json.dumps(expectation.name)}"),
    )
    naming = [evaluation.name for evaluation, _ in await context.storage.list_evaluations(query)]
    if naming:
        more = ", ..." if len(naming) > _LISTED else ""
        raise ServiceError(
            Code.FAILED_PRECONDITION,
            f"{expectation.name} is named by evaluations ({', '.join(naming[:_LISTED])}{more}); "
            "remove it from them first.",
            "EVALUATION_EXPECTATION_IN_USE",
            {"resource": expectation.name},
            resource=(names.of(Expectation).type, expectation.name),
        )


EXPECTATIONS = standard.Resource(
    message=Expectation,
    parent=names.APP,
    store=standard.Store.of(tables.EXPECTATIONS),
    rules=_rules,
    guard=_named,
)

RPCS: dict[str, Rpc] = standard.methods(EXPECTATIONS, "Create", "Get", "List", "Update", "Delete")
