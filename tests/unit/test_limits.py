"""Request limits (``ces_eval.contract.limits``), table-driven: each limit just under is accepted
and just over is refused with the exact field path and reason, by the one-pass validation of
evaluations and by the standalone check alike; the core applies them to every write (create,
the merged update, seeded results, imports). Also: the depth limit is reachable on the wire
(protobuf parses a Struct one level deeper than the limit wherever a request holds one), and a
property test of the shortcut that spares walking small Structs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor, field_mask_pb2, struct_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.access import Caller
from ces_eval.contract import limits
from ces_eval.core.aip import pages, validation
from ces_eval.core.service import Core
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.storage.sqlite import SqliteStorage

APP = "projects/p/locations/l/apps/a"
STEPS = "evaluation.golden.turns[0].steps"
ARGS = f"{STEPS}[1].expectation.tool_call.args"
RESPONSE = f"{STEPS}[2].expectation.mock_tool_response.response"
LIMIT_REASONS = {"TOO_LONG", "TOO_MANY", "TOO_DEEP"}


def golden() -> evaluation_pb2.Evaluation:
    """A valid evaluation: one turn whose steps are a user input, a tool call (``ARGS``) and a
    mock tool response (``RESPONSE``, holding one field)."""
    evaluation = evaluation_pb2.Evaluation(display_name="e")
    steps = evaluation.golden.turns.add().steps
    steps.add().user_input.text = "hi"
    steps.add().expectation.tool_call.tool = f"{APP}/tools/t"
    steps.add().expectation.mock_tool_response.tool = f"{APP}/tools/t"
    response(evaluation)["ok"] = True  # REQUIRED
    return evaluation


def args(evaluation: evaluation_pb2.Evaluation) -> struct_pb2.Struct:
    return evaluation.golden.turns[0].steps[1].expectation.tool_call.args


def response(evaluation: evaluation_pb2.Evaluation) -> struct_pb2.Struct:
    return evaluation.golden.turns[0].steps[2].expectation.mock_tool_response.response


# -- builders: an evaluation at size n of one limit ----------------------------------------------


def display_name(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    evaluation.display_name = "é" * n  # characters, not bytes
    return evaluation


def description(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    evaluation.description = "d" * n
    return evaluation


def long_tag(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    evaluation.tags.extend(["ok", "t" * n])
    return evaluation


def user_text(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    evaluation.golden.turns[0].steps[0].user_input.text = "u" * n
    return evaluation


def turns(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    for _ in range(n - 1):
        evaluation.golden.turns.add().steps.add().user_input.text = "more"
    return evaluation


def tags(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    evaluation.tags.extend(f"t{i}" for i in range(n))
    return evaluation


def nested_structs(n: int) -> evaluation_pb2.Evaluation:
    """``args`` is level 1; n levels of Structs in all, each under the key "a"."""
    evaluation = golden()
    level = args(evaluation)
    for _ in range(n - 1):
        level = level.fields["a"].struct_value
    level.fields["leaf"].string_value = "x"
    return evaluation


def nested_lists(n: int) -> evaluation_pb2.Evaluation:
    """``args`` (level 1) holds a list (level 2) whose first element is a list, n levels."""
    evaluation = golden()
    level = args(evaluation).fields["l"].list_value
    for _ in range(n - 2):
        level = level.values.add().list_value
    level.values.add().number_value = 1
    return evaluation


def entries(n: int) -> evaluation_pb2.Evaluation:
    """n Struct fields and list elements over two Structs: the total counts, not each."""
    evaluation = golden()
    for i in range(4_000):
        args(evaluation).fields[f"k{i}"].number_value = i
    items = response(evaluation).fields["items"].list_value.values  # beside "ok": 2 fields
    for i in range(n - 4_000 - 2):
        items.add().number_value = i
    return evaluation


def struct_string(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    args(evaluation).fields["k"].string_value = "s" * n
    return evaluation


def list_string(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    values = args(evaluation).fields["l"].list_value.values
    values.add().number_value = 1
    values.add().string_value = "s" * n
    return evaluation


def struct_key(n: int) -> evaluation_pb2.Evaluation:
    evaluation = golden()
    args(evaluation).fields["k" * n].number_value = 1
    return evaluation


@dataclass(frozen=True)
class Case:
    limit: int
    build: Callable[[int], evaluation_pb2.Evaluation]
    path: str  # of the violation at limit + 1
    reason: str


CUT_KEY = '["' + "k" * 128 + '…"]'  # a long key in a path: its first 128 characters
CASES = {
    "display_name": Case(
        limits.MAX_DISPLAY_NAME, display_name, "evaluation.display_name", "TOO_LONG"
    ),
    "any string field": Case(
        limits.MAX_STRING_CHARS, description, "evaluation.description", "TOO_LONG"
    ),
    "a repeated string": Case(limits.MAX_STRING_CHARS, long_tag, "evaluation.tags[1]", "TOO_LONG"),
    "a nested string": Case(
        limits.MAX_STRING_CHARS, user_text, f"{STEPS}[0].user_input.text", "TOO_LONG"
    ),
    "golden turns (seeds)": Case(
        limits.MAX_GOLDEN_TURNS, turns, "evaluation.golden.turns", "TOO_MANY"
    ),
    "any repeated field": Case(limits.MAX_REPEATED, tags, "evaluation.tags", "TOO_MANY"),
    "Struct depth": Case(
        limits.MAX_STRUCT_DEPTH,
        nested_structs,
        ARGS + '.fields["a"].struct_value' * limits.MAX_STRUCT_DEPTH,
        "TOO_DEEP",
    ),
    "ListValue depth": Case(
        limits.MAX_STRUCT_DEPTH,
        nested_lists,
        ARGS + '.fields["l"].list_value' + ".values[0].list_value" * (limits.MAX_STRUCT_DEPTH - 1),
        "TOO_DEEP",
    ),
    "Struct entries in all": Case(
        limits.MAX_STRUCT_ENTRIES, entries, f'{RESPONSE}.fields["items"].list_value', "TOO_MANY"
    ),
    "Struct string value": Case(
        limits.MAX_STRING_CHARS, struct_string, f'{ARGS}.fields["k"].string_value', "TOO_LONG"
    ),
    "list string element": Case(
        limits.MAX_STRING_CHARS,
        list_string,
        f'{ARGS}.fields["l"].list_value.values[1].string_value',
        "TOO_LONG",
    ),
    "Struct key": Case(limits.MAX_STRING_CHARS, struct_key, f"{ARGS}.fields{CUT_KEY}", "TOO_LONG"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_just_under_a_limit_is_accepted(case: Case) -> None:
    evaluation = case.build(case.limit)
    assert limits.check(evaluation, "evaluation") == []
    assert validation.evaluation_violations(evaluation, "evaluation") == []


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_just_over_a_limit_is_refused_naming_the_path(case: Case) -> None:
    evaluation = case.build(case.limit + 1)
    [violation] = limits.check(evaluation, "evaluation")
    assert (violation.field, violation.reason) == (case.path, case.reason)
    assert str(case.limit) in violation.description
    # The one pass of validation (field behaviours and limits together) finds the same.
    assert validation.evaluation_violations(evaluation, "evaluation") == [violation]


MAPS = {
    "map entries": (
        error_details_pb2.ErrorInfo(
            metadata={f"k{i}": "v" for i in range(limits.MAX_MAP_ENTRIES + 1)}
        ),
        "info.metadata",
        "TOO_MANY",
    ),
    "map key": (
        error_details_pb2.ErrorInfo(metadata={"k" * (limits.MAX_STRING_CHARS + 1): "v"}),
        f"info.metadata{CUT_KEY}",
        "TOO_LONG",
    ),
    "map value": (
        error_details_pb2.ErrorInfo(
            metadata={'a "quoted" key': "v" * (limits.MAX_STRING_CHARS + 1)}
        ),
        'info.metadata["a \\"quoted\\" key"]',
        "TOO_LONG",
    ),
}


@pytest.mark.parametrize(("message", "path", "reason"), MAPS.values(), ids=MAPS.keys())
def test_maps_are_limited_like_repeated_fields(message: Message, path: str, reason: str) -> None:
    """No CES message has a map besides Struct's: any message is walked the same way."""
    [violation] = limits.check(message, "info")
    assert (violation.field, violation.reason) == (path, reason)


def test_maps_just_under_the_limits_are_accepted() -> None:
    info = error_details_pb2.ErrorInfo(
        metadata={f"k{i}": "v" for i in range(limits.MAX_MAP_ENTRIES - 1)}
    )
    info.metadata["k" * limits.MAX_STRING_CHARS] = "v" * limits.MAX_STRING_CHARS
    assert limits.check(info, "info") == []


def test_every_problem_is_reported_at_once_up_to_a_bound() -> None:
    evaluation = golden()
    evaluation.display_name = "x" * (limits.MAX_DISPLAY_NAME + 1)
    evaluation.description = "d" * (limits.MAX_STRING_CHARS + 1)
    assert {v.field for v in limits.check(evaluation, "evaluation")} == {
        "evaluation.display_name",
        "evaluation.description",
    }
    hostile = golden()
    values = args(hostile).fields["l"].list_value.values
    for _ in range(limits.MAX_VIOLATIONS + 5):
        values.add().string_value = "s" * (limits.MAX_STRING_CHARS + 1)
    assert len(limits.check(hostile, "evaluation")) == limits.MAX_VIOLATIONS


def test_output_only_fields_are_not_held_to_limits_on_create() -> None:
    """They are cleared before the evaluation is stored (AIP-203), so they do not count; the
    standalone check, used where they are stored (imports), does count them."""
    evaluation = golden()
    evaluation.evaluation_runs.extend(f"run-{i}" for i in range(limits.MAX_REPEATED + 1))
    assert [v.field for v in limits.check(evaluation, "evaluation")] == [
        "evaluation.evaluation_runs"
    ]
    assert validation.evaluation_violations(evaluation, "evaluation") == []
    assert not evaluation.evaluation_runs


# -- the depth limit is what a gRPC caller meets, not protobuf's parser -------------------------


def _struct_paths(
    message_type: descriptor.Descriptor, seen: frozenset[str] = frozenset()
) -> Iterator[list[descriptor.FieldDescriptor]]:
    """Every chain of fields from ``message_type`` to a Struct field, without recursing."""
    for field in message_type.fields:
        target = field.message_type
        if target is None or target.full_name in seen or target.GetOptions().map_entry:
            continue
        if target.full_name == "google.protobuf.Struct":
            yield [field]
        elif not target.full_name.startswith("google.protobuf."):
            for rest in _struct_paths(target, seen | {message_type.full_name}):
                yield [field, *rest]


REQUESTS = [
    service_pb2.CreateEvaluationRequest,
    service_pb2.UpdateEvaluationRequest,
    emulator_pb2.CreateEvaluationResultRequest,
]
LOCATIONS = [
    (request, chain)
    for request in REQUESTS
    for chain in _struct_paths(request.DESCRIPTOR)  # type: ignore[arg-type]
]


def test_structs_are_found_in_every_writing_request() -> None:
    assert len(LOCATIONS) > 20
    assert {request for request, _ in LOCATIONS} == set(REQUESTS)


@pytest.mark.parametrize(
    ("request_class", "chain"),
    LOCATIONS,
    ids=[f"{r.__name__}.{'.'.join(f.name for f in c)}" for r, c in LOCATIONS],
)
def test_a_struct_one_level_too_deep_parses_so_the_limit_answers(
    request_class: type[Message], chain: list[descriptor.FieldDescriptor]
) -> None:
    request = request_class()
    message: Any = request
    for field in chain[:-1]:
        message = getattr(message, field.name)
        if field.is_repeated:
            message = message.add()
    level = getattr(message, chain[-1].name)
    for _ in range(limits.MAX_STRUCT_DEPTH):
        level = level.fields["a"].struct_value
    level.fields["leaf"].string_value = "x"
    parsed = request_class.FromString(request.SerializeToString())  # no DecodeError
    assert [v.reason for v in limits.check(parsed, "request")] == ["TOO_DEEP"]


# -- the shortcut for small Structs never hides a violation -------------------------------------

# Junk whose encoding holds the bytes the shortcut counts (0x2A "*", 0x32 "2"), and newlines.
_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet="*2\n ab", max_size=6),
)
_trees = st.recursive(
    _junk,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet="*2ab", max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def _deep_trees(draw: st.DrawFn) -> dict[str, Any]:
    """A chain of dicts and lists around the depth limit, with junk beside every link."""
    depth = draw(st.integers(limits.MAX_STRUCT_DEPTH - 3, limits.MAX_STRUCT_DEPTH + 3))
    value: Any = draw(_junk)
    for _ in range(depth - 1):
        siblings = draw(st.lists(_trees, max_size=2))
        if draw(st.booleans()):
            value = [*siblings, value]
        else:
            value = {**{f"s{i}": s for i, s in enumerate(siblings)}, "next": value}
    return {"root": value, **draw(st.dictionaries(st.text("*2", max_size=2), _trees, max_size=2))}


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(_deep_trees())
def test_the_depth_limit_holds_for_any_tree(tree: dict[str, Any]) -> None:
    evaluation = golden()
    args(evaluation).update(tree)
    found = limits.check(evaluation, "evaluation")
    too_deep = _depth(tree) > limits.MAX_STRUCT_DEPTH
    assert [v.reason for v in found][:1] == (["TOO_DEEP"] if too_deep else []), json.dumps(tree)
    assert all(v.reason == "TOO_DEEP" and v.field.startswith(ARGS) for v in found)
    assert validation.evaluation_violations(evaluation, "evaluation") == found


# -- the core applies the limits to every write -------------------------------------------------


class Service:
    """The core over a real SQLite file, driven synchronously."""

    def __init__(self, path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.storage = SqliteStorage(path)
        self.loop.run_until_complete(self.storage.open())
        secret = self.loop.run_until_complete(self.storage.secret())
        self.core = Core(self.storage, pages.PageTokens(secret))

    def call(self, method: str, request: Message) -> Any:
        """``method``: the core's snake_case name of an RPC, or its gRPC path."""
        handler = (
            self.core.handler(method) if method.startswith("/") else getattr(self.core, method)
        )
        return self.loop.run_until_complete(handler(request, Caller()))

    def violations(self, method: str, request: Message) -> list[FieldViolation]:
        with pytest.raises(ServiceError) as raised:
            self.call(method, request)
        assert raised.value.code is Code.INVALID_ARGUMENT
        return list(raised.value.violations)

    def close(self) -> None:
        self.loop.run_until_complete(self.storage.close())
        self.loop.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path / "db.sqlite")
    yield running
    running.close()


def test_create_evaluation_is_limited(service: Service) -> None:
    request = service_pb2.CreateEvaluationRequest(parent=APP, evaluation=nested_structs(25))
    [violation] = service.violations("create_evaluation", request)
    assert (violation.field, violation.reason) == (CASES["Struct depth"].path, "TOO_DEEP")


def test_update_checks_the_merged_evaluation(service: Service) -> None:
    created = service.call(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=turns(60))
    )
    more = turns(limits.MAX_GOLDEN_TURNS + 1)
    more.name = created.name
    request = service_pb2.UpdateEvaluationRequest(
        evaluation=more, update_mask=field_mask_pb2.FieldMask(paths=["golden"])
    )
    [violation] = service.violations("update_evaluation", request)
    assert (violation.field, violation.reason) == ("evaluation.golden.turns", "TOO_MANY")
    # A change elsewhere keeps the stored turns, which are within the limit.
    renamed = evaluation_pb2.Evaluation(name=created.name, display_name="renamed")
    service.call(
        "update_evaluation",
        service_pb2.UpdateEvaluationRequest(
            evaluation=renamed, update_mask=field_mask_pb2.FieldMask(paths=["display_name"])
        ),
    )


def test_seeded_results_are_limited(service: Service) -> None:
    created = service.call(
        "create_evaluation", service_pb2.CreateEvaluationRequest(parent=APP, evaluation=golden())
    )
    result = evaluation_pb2.EvaluationResult()
    result.root_span.attributes.fields["note"].string_value = "n" * (limits.MAX_STRING_CHARS + 1)
    request = emulator_pb2.CreateEvaluationResultRequest(
        parent=created.name, evaluation_result=result
    )
    found = service.violations("create_evaluation_result", request)
    assert [(v.field, v.reason) for v in found] == [
        ('evaluation_result.root_span.attributes.fields["note"].string_value', "TOO_LONG")
    ]


def test_imports_are_limited_and_import_nothing(service: Service) -> None:
    document = {
        "format": "ces-eval.export/v1",
        "evaluations": [
            {"name": f"{APP}/evaluations/fine", "displayName": "fine"},
            {"name": f"{APP}/evaluations/long", "displayName": "x" * 513},
        ],
    }
    request = emulator_pb2.ImportEvaluationsRequest(
        parent=APP, content=json.dumps(document).encode()
    )
    [violation] = service.violations(
        "/ces_eval.emulator.v1.EmulatorService/ImportEvaluations", request
    )
    assert (violation.field, violation.reason) == (
        "content.evaluations[1].display_name",
        "TOO_LONG",
    )
    listed = service.call("list_evaluations", service_pb2.ListEvaluationsRequest(parent=APP))
    assert not listed.evaluations


def test_an_error_with_thousands_of_problems_stays_small() -> None:
    """Every check stops at MAX_VIOLATIONS: 100,000 steps lacking a required field cost the
    first hundred, and the message says there are at least that many."""
    evaluation = evaluation_pb2.Evaluation(display_name="many")
    for _ in range(limits.MAX_GOLDEN_TURNS):
        steps = evaluation.golden.turns.add().steps
        for _ in range(limits.MAX_REPEATED):
            steps.add().expectation.mock_tool_response.tool = f"{APP}/tools/t"  # no response
    violations = validation.evaluation_violations(evaluation, "evaluation")
    assert len(violations) == limits.MAX_VIOLATIONS
    assert {v.reason for v in violations} == {"REQUIRED"}
    with pytest.raises(ServiceError) as caught:
        validation.raise_if_invalid(violations, "evaluation")
    error = caught.value
    assert len(error.violations) == limits.MAX_VIOLATIONS
    assert f"(at least {limits.MAX_VIOLATIONS} problems)" in error.message
    assert f"and {limits.MAX_VIOLATIONS - 5} more" in error.message
    assert len(error.message) < 2_000


def test_a_container_over_its_count_is_refused_alone() -> None:
    """1,001 turns, each lacking its required steps: the count limit answers alone, and no
    turn is looked at (issue 15: one violation per element froze the server)."""
    evaluation = evaluation_pb2.Evaluation(display_name="many")
    for _ in range(1_001):
        evaluation.golden.turns.add()
    evaluation.tags.append("t" * (limits.MAX_STRING_CHARS + 1))
    assert [(v.field, v.reason) for v in validation.evaluation_violations(evaluation, "e")] == [
        ("e.golden.turns", "TOO_MANY")
    ]
