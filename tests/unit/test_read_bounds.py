"""Every read fits what a client receives (issue 15, item 8), in process over a real SQLite file.

Writes are held to :data:`limits.MAX_RESOURCE_BYTES` on the resource as it will be served (its
name, times, etag and derived fields included); a List page holds at most
:data:`limits.MAX_PAGE_BYTES` of items, ending early with a next_page_token. Sizes here are real
(megabytes), since the bounds are the ones the official clients need.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import field_mask_pb2

from ces_eval.access import Caller
from ces_eval.contract import limits
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.base import ListQuery, OrderBy, SortKey
from tests.unit.test_core import APP, Harness

Result = evaluation_pb2.EvaluationResult
BOUND = limits.MAX_RESOURCE_BYTES
TEXT = 200_000  # characters of one step: under the string limit


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


def big(display_name: str, size: int) -> evaluation_pb2.Evaluation:
    """A golden evaluation of about ``size`` bytes (its steps' text)."""
    message = evaluation_pb2.Evaluation(display_name=display_name)
    turn = message.golden.turns.add()
    for index in range(math.ceil(size / TEXT)):
        turn.steps.add().user_input.text = "x" * min(TEXT, size - index * TEXT)
    return message


def big_result(size: int, **fields: Any) -> Result:
    """A completed result of about ``size`` bytes (its turns' replies)."""
    message = Result(execution_state=Result.ExecutionState.COMPLETED, **fields)
    for index in range(math.ceil(size / TEXT)):
        turn = message.golden_result.turn_replay_results.add()
        turn.conversation = "x" * min(TEXT, size - index * TEXT)
    return message


def create(core: Harness, evaluation_id: str, evaluation: evaluation_pb2.Evaluation) -> Any:
    return core.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(
            parent=APP, evaluation_id=evaluation_id, evaluation=evaluation
        ),
    )


def seed(core: Harness, evaluation: str, result_id: str, result: Result) -> Any:
    return core.call(
        "create_evaluation_result",
        emulator_pb2.CreateEvaluationResultRequest(
            parent=evaluation, evaluation_result_id=result_id, evaluation_result=result
        ),
    )


def too_large(error: ServiceError, field: str) -> str:
    """The one TOO_LARGE violation of ``error``, at ``field``: its description."""
    assert error.code is Code.INVALID_ARGUMENT
    assert error.reason == "INVALID_ARGUMENT"
    [violation] = error.violations
    assert (violation.field, violation.reason) == (field, "TOO_LARGE")
    assert str(BOUND) in violation.description
    return violation.description


def test_a_create_over_the_bound_is_refused_with_its_size(core: Harness) -> None:
    created = create(core, "under", big("under", BOUND - 10_000))
    assert BOUND - 10_000 < created.ByteSize() <= BOUND
    with pytest.raises(ServiceError) as raised:
        create(core, "over", big("over", BOUND))
    description = too_large(raised.value, "evaluation")
    served = int(description.split(" ", 1)[0])
    assert served > BOUND  # the size as it would have been served: name, times, etag included
    missing = core.error(
        "get_evaluation", service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/over")
    )
    assert missing.code is Code.NOT_FOUND
    listed = core.call("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP))
    assert [e.name for e in listed.evaluations] == [created.name]
    # Over a count limit too: refused with that alone, before anything is measured.
    counted = big("counted", BOUND + 100_000)
    counted.tags.extend(["t"] * (limits.MAX_REPEATED + 1))
    error = core.error(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=counted)
    )
    assert [(v.field, v.reason) for v in error.violations] == [("evaluation.tags", "TOO_MANY")]


def test_an_update_is_bounded_on_the_evaluation_it_would_store(core: Harness) -> None:
    stored = create(core, "e", big("e", BOUND - 100_000))
    patch = evaluation_pb2.Evaluation(name=stored.name, description="d" * 200_000)
    request = service_pb2.UpdateEvaluationRequest(
        evaluation=patch, update_mask=field_mask_pb2.FieldMask(paths=["description"])
    )
    too_large(core.error("update_evaluation", request), "evaluation")
    assert core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=stored.name)) == stored
    request.evaluation.description = "d" * 50_000
    updated = core.call("update_evaluation", request)
    assert updated.description == request.evaluation.description


def test_a_result_is_bounded_and_so_is_the_evaluation_it_derives(core: Harness) -> None:
    evaluation = create(core, "e", big("e", 3_000_000))
    with pytest.raises(ServiceError) as raised:
        seed(core, evaluation.name, "huge", big_result(BOUND))
    too_large(raised.value, "evaluation_result")
    # 1.5 MB fits a result, but the evaluation would serve it as last_completed_result.
    with pytest.raises(ServiceError) as raised:
        seed(core, evaluation.name, "large", big_result(1_500_000))
    description = too_large(raised.value, "evaluation_result")
    assert evaluation.name in description
    stored = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=evaluation.name))
    assert stored == evaluation  # nothing of either write was kept
    seeded = seed(core, evaluation.name, "small", big_result(500_000))
    stored = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=evaluation.name))
    assert stored.last_completed_result == seeded
    assert stored.ByteSize() <= BOUND


def _pages(core: Harness, method: str, request: Any, field: str) -> list[list[str]]:
    """The names on each page of a List, walking its tokens; every page fits the client."""
    pages = []
    while True:
        response = core.call(method, request)
        assert response.ByteSize() <= limits.CLIENT_RECEIVE_BYTES
        pages.append([item.name for item in getattr(response, field)])
        if not response.next_page_token:
            return pages
        request.page_token = response.next_page_token


def test_list_pages_end_within_the_byte_budget(core: Harness) -> None:
    names = [create(core, f"e{i}", big(f"e{i}", 1_500_000)).name for i in range(5)]
    request = service_pb2.ListEvaluationsRequest(parent=APP, order_by="name")
    pages = _pages(core, "list_evaluations", request, "evaluations")
    assert pages == [names[0:2], names[2:4], names[4:]]  # two of 1.5 MB fit, three do not
    # page_size still applies, whichever ends the page first.
    request = service_pb2.ListEvaluationsRequest(parent=APP, order_by="name", page_size=1)
    assert _pages(core, "list_evaluations", request, "evaluations") == [[n] for n in names]
    small = create(core, "small", big("small", 10_000)).name
    results = [seed(core, small, f"r{i}", big_result(1_500_000)).name for i in range(3)]
    request_results = service_pb2.ListEvaluationResultsRequest(parent=small, order_by="name")
    pages = _pages(core, "list_evaluation_results", request_results, "evaluation_results")
    assert pages == [results[0:2], results[2:]]


def test_last_ten_results_are_cut_to_the_page_budget(core: Harness) -> None:
    """A first evaluation that does not fit with its ten newest results keeps the newest that
    do and ends its page; the next evaluation starts the next page."""
    first = create(core, "a", big("a", 1_000_000)).name
    second = create(core, "b", big("b", 1_000)).name
    made = [seed(core, first, f"r{i}", big_result(400_000)).name for i in range(10)]
    seed(core, second, "only", big_result(1_000))
    request = service_pb2.ListEvaluationsRequest(parent=APP, order_by="name", last_ten_results=True)
    page = core.call("list_evaluations", request)
    assert page.ByteSize() <= limits.CLIENT_RECEIVE_BYTES
    [evaluation] = page.evaluations
    assert evaluation.name == first
    # 1 MB, its last_completed_result (0.4 MB) and 6 x 0.4 MB fit the 4,128,768 bytes; 7 would
    # not. Newest first.
    assert [r.name for r in evaluation.last_ten_results] == made[::-1][:6]
    assert page.next_page_token
    request.page_token = page.next_page_token
    page = core.call("list_evaluations", request)
    assert [e.name for e in page.evaluations] == [second]
    assert len(page.evaluations[0].last_ten_results) == 1
    assert not page.next_page_token


def test_a_row_stored_over_the_bound_is_served_alone(core: Harness) -> None:
    """A database written before the bound may hold larger rows: a Get serves it whole, a List
    page holds it alone (or ends before it), and the pages go on after it."""
    small = create(core, "a", big("a", 1_000)).name
    legacy = create(core, "b", big("b", 1_000))
    for _ in range(26):
        legacy.golden.turns[0].steps.add().user_input.text = "x" * TEXT
    core.run(core.storage.replace_evaluation(legacy, expected_etag=legacy.etag))
    last = create(core, "c", big("c", 1_000)).name
    got = core.call("get_evaluation", service_pb2.GetEvaluationRequest(name=legacy.name))
    assert got.ByteSize() > limits.CLIENT_RECEIVE_BYTES
    request = service_pb2.ListEvaluationsRequest(parent=APP, order_by="name")
    pages = []
    while True:
        response = core.call("list_evaluations", request)
        pages.append([e.name for e in response.evaluations])
        if not response.next_page_token:
            break
        request.page_token = response.next_page_token
    assert pages == [[small], [legacy.name], [last]]
    # A write that leaves it over the bound is refused; one that brings it under passes.
    patch = evaluation_pb2.Evaluation(name=legacy.name, description="d")
    mask = field_mask_pb2.FieldMask(paths=["description"])
    request_update = service_pb2.UpdateEvaluationRequest(evaluation=patch, update_mask=mask)
    too_large(core.error("update_evaluation", request_update), "evaluation")
    request_update.evaluation.golden.turns.add().steps.add().user_input.text = "short"
    request_update.update_mask.paths.append("golden")
    assert core.call("update_evaluation", request_update).ByteSize() < 10_000


def test_the_storage_reads_no_row_past_the_budget(core: Harness) -> None:
    """25 evaluations of 3 MB: a page of the default size reads two rows (the one that fits
    and the first past the budget), not 26."""
    for i in range(25):
        create(core, f"e{i:02d}", big(f"e{i}", 3_000_000))
    query = ListQuery(APP, OrderBy(SortKey.NAME, descending=False), 51, max_bytes=BOUND)
    rows = core.run(core.storage.list_evaluations(query))
    assert len(rows) == 2
    page = core.call(
        "list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP, order_by="name")
    )
    assert [e.name for e in page.evaluations] == [rows[0][0].name]
    assert page.next_page_token


def test_caller_identity_is_part_of_the_served_size(core: Harness) -> None:
    """created_by / last_updated_by are served, so they count."""
    long_user = Caller("u" * 200_000)
    evaluation = big("e", BOUND - 300_000)
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=evaluation)
    with pytest.raises(ServiceError) as raised:
        core.call("create_evaluation", request, long_user)
    too_large(raised.value, "evaluation")


def _export(core: Harness, names: list[str]) -> Any:
    """An inline ExportEvaluations of ``names``, waited for: its final operation."""
    started = core.call(
        "export_evaluations",
        service_pb2.ExportEvaluationsRequest(parent=APP, names=names, include_evaluations=True),
    )
    waited = core.call("wait_operation", operations_pb2.WaitOperationRequest(name=started.name))
    assert waited.done
    return waited


def test_inline_exports_and_operation_pages_fit_the_client(core: Harness) -> None:
    """An operation is read back like any resource: an inline export that would make it too
    large fails (FAILED_PRECONDITION, EXPORT_TOO_LARGE: use a file), and ListOperations pages
    end within the byte budget."""
    names = [create(core, f"e{i}", big(f"e{i}", 1_500_000)).name for i in range(3)]
    failed = _export(core, names)
    assert failed.error.code == Code.FAILED_PRECONDITION.number
    assert "export_options.gcs_uri" in failed.error.message
    assert not failed.HasField("response")
    exported = [_export(core, [name]) for name in names]
    assert all(op.HasField("response") for op in exported)
    assert all(op.ByteSize() <= BOUND for op in exported)
    request = operations_pb2.ListOperationsRequest(name="projects/p/locations/l")
    pages = _pages(core, "list_operations", request, "operations")
    assert len(pages) > 1
    assert sorted(n for page in pages for n in page) == sorted(
        [failed.name, *(op.name for op in exported)]
    )
