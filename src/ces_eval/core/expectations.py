"""Evaluation expectations: the resource's declaration and its standard methods (Create, Get,
List, Update, Delete), nothing of its own.

An expectation is kept in a generic table (:data:`ces_eval.storage.tables.EXPECTATIONS`) and
served by the generic standard methods: its field rules are the descriptors' (``display_name``
and ``llm_criteria.prompt`` REQUIRED, the output-only stamps ignored) and the request limits;
display names are unique within the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ces_eval.core import names, standard, validation
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.storage import tables

if TYPE_CHECKING:
    from ces_eval.core.context import Rpc
    from ces_eval.errors import FieldViolation

__all__ = ["EXPECTATIONS", "RPCS"]

Expectation = evaluation_pb2.EvaluationExpectation


def _rules(expectation: Expectation, path: str, parts: dict[str, str]) -> list[FieldViolation]:
    return validation.resource_violations(expectation, path)


EXPECTATIONS = standard.Resource(
    message=Expectation,
    parent=names.APP,
    store=standard.Store.of(tables.EXPECTATIONS),
    rules=_rules,
)

RPCS: dict[str, Rpc] = standard.methods(EXPECTATIONS, "Create", "Get", "List", "Update", "Delete")
