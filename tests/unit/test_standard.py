"""The generic standard methods (core/aip/standard.py, AIP-131..135), table-driven: each standard
method over each declared resource, through the generic functions themselves, over a real
SQLite file. The resources' own RPCs (and their exact messages) are covered by test_core.py."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.api import resource_pb2
from google.protobuf import field_mask_pb2
from google.protobuf.message import Message

from ces_eval.access import Caller
from ces_eval.contract import schema
from ces_eval.contract.encoded import Encoded, message_of
from ces_eval.core.aip import names, standard
from ces_eval.core.resources.datasets import DATASETS
from ces_eval.core.resources.evaluations import EVALUATIONS
from ces_eval.core.resources.expectations import EXPECTATIONS
from ces_eval.core.resources.results import RESULTS
from ces_eval.core.service import RESOURCES, RPCS, implements
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.support.imports import imports_of
from tests.unit.test_core import Harness as CoreHarness

APP = "projects/p/locations/l/apps/a"
PARENT_EVALUATION = f"{APP}/evaluations/parent"
ME = Caller("me@example.com")
CORE = Path(__file__).parents[2] / "src" / "ces_eval" / "core"


@dataclass(frozen=True)
class Kind:
    """How the tests make one resource: its declaration, a parent that exists, a valid body,
    and the request types of its create (AIP-133) and list (AIP-132)."""

    resource: standard.Resource[Any]
    parent: str
    body: Callable[[str], Message]
    create_request: type[Message]
    list_request: type[Message]
    list_response: type[Message]
    update_request: type[Message] | None = None
    delete_request: type[Message] = service_pb2.DeleteEvaluationResultRequest
    # Changes a field of the resource other than display_name (an update masks it out).
    spoil: Callable[[Any], None] = lambda message: None


def _evaluation(display_name: str) -> Message:
    message = evaluation_pb2.Evaluation(display_name=display_name)
    message.golden.turns.add().steps.add().user_input.text = "hi"
    return message


KINDS = {
    "evaluation": Kind(
        EVALUATIONS,
        APP,
        _evaluation,
        service_pb2.CreateEvaluationRequest,
        service_pb2.ListEvaluationsRequest,
        service_pb2.ListEvaluationsResponse,
        service_pb2.UpdateEvaluationRequest,
        service_pb2.DeleteEvaluationRequest,
        lambda message: setattr(message, "description", "not in the mask"),
    ),
    "evaluation_result": Kind(
        RESULTS,
        PARENT_EVALUATION,
        lambda display_name: evaluation_pb2.EvaluationResult(display_name=display_name),
        emulator_pb2.CreateEvaluationResultRequest,
        service_pb2.ListEvaluationResultsRequest,
        service_pb2.ListEvaluationResultsResponse,
    ),
    "evaluation_dataset": Kind(
        DATASETS,
        APP,
        lambda display_name: evaluation_pb2.EvaluationDataset(
            display_name=display_name, evaluations=[PARENT_EVALUATION]
        ),
        service_pb2.CreateEvaluationDatasetRequest,
        service_pb2.ListEvaluationDatasetsRequest,
        service_pb2.ListEvaluationDatasetsResponse,
        service_pb2.UpdateEvaluationDatasetRequest,
        service_pb2.DeleteEvaluationDatasetRequest,
        lambda message: message.ClearField("evaluations"),
    ),
}


class Harness(CoreHarness):
    """test_core's harness, with the results' parent evaluation, calling the generic methods
    directly over the core's context."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.context = self.core.context
        self.make(KINDS["evaluation"], "parent", "Parent")

    def fails(self, awaitable: Awaitable[Any]) -> ServiceError:
        with pytest.raises(ServiceError) as raised:
            self.run(awaitable)
        return raised.value

    def make(self, kind: Kind, resource_id: str, display_name: str) -> Any:
        return self.run(_create(self, kind, resource_id, display_name))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "db.sqlite")
    yield harness
    harness.close()


each_kind = pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))


# -- the declarations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "field", "id_field", "owned", "collection", "pattern"),
    [
        (EVALUATIONS, "evaluation", "evaluation_id", 1, "evaluations", names.EVALUATION),
        (
            RESULTS,
            "evaluation_result",
            "evaluation_result_id",
            2,
            "results",
            names.EVALUATION_RESULT,
        ),
    ],
)
def test_a_declaration_reads_the_rest_from_the_descriptors(
    resource: standard.Resource[Any],
    field: str,
    id_field: str,
    owned: int,
    collection: str,
    pattern: names.ResourcePattern,
) -> None:
    assert (resource.field, resource.id_field, resource.owned) == (field, id_field, owned)
    assert (resource.collection, resource.pattern) == (collection, pattern)


def _served_standard_resources() -> set[str]:
    """The resource messages the descriptors give a served standard method (AIP-131..134:
    ``Get<Message>`` and ``Create``/``Update`` answer it, ``List<Messages>`` lists it in a
    repeated field), singletons aside (AIP-156: a name without an ID of its own, such as
    ``projects/{project}/clock``, read and set by methods of their own)."""
    found = set()
    for method in schema.methods().values():
        verb = re.match("Get|Create|Update|List", method.name)
        if verb is None or not implements(method):
            continue
        message = method.output_type
        if verb.group() == "List":
            repeated = [f for f in message.fields if f.is_repeated and f.message_type is not None]
            message = repeated[0].message_type
        pattern = message.GetOptions().Extensions[resource_pb2.resource].pattern
        standard_name = f"{verb.group()}{message.name}{'s' if verb.group() == 'List' else ''}"
        if pattern and pattern[0].endswith("}") and method.name == standard_name:
            found.add(message.full_name)
    return found


def test_every_resource_is_declared_once_and_parents_come_first() -> None:
    """The core's resources are those its standard methods serve, each declared once."""
    assert len({id(r) for r in RESOURCES}) == len(RESOURCES)
    served = _served_standard_resources()
    assert "google.cloud.ces.v1beta.EvaluationExpectation" in served
    assert {r.message.DESCRIPTOR.full_name for r in RESOURCES} == served
    assert len({r.message for r in RESOURCES}) == len(RESOURCES)
    for index, resource in enumerate(RESOURCES):
        if resource.parent_resource is not None:
            assert resource.parent_resource in RESOURCES[:index]
            assert resource.parent == resource.parent_resource.pattern


def test_a_resource_without_rules_of_its_own_has_the_descriptors() -> None:
    plain = standard.Resource(
        message=evaluation_pb2.EvaluationExpectation,
        parent=names.APP,
        store=EXPECTATIONS.store,
    )
    assert plain.rules is standard.descriptor_rules
    violations = plain.rules(evaluation_pb2.EvaluationExpectation(), "expectation", {})
    assert [(v.field, v.description) for v in violations] == [
        ("expectation.display_name", "Required.")
    ]


def test_the_registry_holds_only_rpcs_the_descriptors_declare() -> None:
    declared = schema.methods()
    assert set(RPCS) <= set(declared)
    for path, method in declared.items():
        assert implements(method) == (path in RPCS)


def test_rpcs_of_one_name_in_two_services_stay_apart() -> None:
    """EmulatorService and EvaluationService both implement an ImportEvaluations, each with
    its own request type and implementation."""
    declared = schema.methods()
    emulator = "/ces_eval.emulator.v1.EmulatorService/ImportEvaluations"
    official = "/google.cloud.ces.v1beta.EvaluationService/ImportEvaluations"
    assert implements(declared[emulator]) and implements(declared[official])
    assert RPCS[emulator] is not RPCS[official]


def test_core_modules_import_no_cycle() -> None:
    """No core module imports another that imports it back, not even for type checking."""
    graph: dict[str, set[str]] = {}
    for path in CORE.rglob("*.py"):
        module = ".".join(("ces_eval", *path.relative_to(CORE.parent).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        imported = imports_of(path, members=True)
        graph[module] = {m for m in imported if m.startswith("ces_eval.core")}
    for module, imported in graph.items():
        # Importing a submodule runs its package's __init__ first: no edge of the design.
        graph[module] = {m for m in imported if m in graph and not module.startswith(m + ".")}

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for step in graph[start]:
            if step == target or (step not in seen and reaches(step, target, seen | {step})):
                return True
        return False

    assert [m for m in graph if reaches(m, m, {m})] == []


# -- AIP-131 Get ---------------------------------------------------------------------------------


@each_kind
def test_get_returns_what_create_stored(core: Harness, kind: Kind) -> None:
    created = core.make(kind, "one", "One")
    assert core.run(standard.get(core.context, kind.resource, created.name)) == created


@pytest.mark.parametrize("kind", [KINDS["evaluation"], KINDS["evaluation_result"]])
def test_the_get_rpc_answers_the_stored_bytes_unparsed(core: Harness, kind: Kind) -> None:
    """An evaluation and a result are stored exactly as they are served: the Get RPC answers
    the stored wire bytes (Encoded: not serialized again on the read), which are what create
    stored. (A dataset's aggregated_metrics are tallied on each read.)"""
    created = core.make(kind, "one", "One")
    rpc = f"Get{kind.resource.message.DESCRIPTOR.name}"
    call = standard.methods(kind.resource, "Get")[rpc]
    request = type("Request", (), {"name": created.name})()
    answer = core.run(call(core.context, request, ME))
    assert isinstance(answer, Encoded)
    assert message_of(answer) == created


@each_kind
def test_get_of_a_missing_resource_is_not_found(core: Harness, kind: Kind) -> None:
    name = f"{kind.parent}/{kind.resource.collection}/nothing"
    error = core.fails(standard.get(core.context, kind.resource, name))
    assert (error.code, error.resource) == (Code.NOT_FOUND, (kind.resource.pattern.type, name))


@each_kind
def test_get_of_a_malformed_name_is_invalid(core: Harness, kind: Kind) -> None:
    error = core.fails(standard.get(core.context, kind.resource, f"{kind.parent}/elsewhere/x"))
    assert error.code == Code.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == ["name"]


# -- AIP-133 Create ------------------------------------------------------------------------------


@each_kind
def test_create_names_and_stamps_what_the_descriptor_has(core: Harness, kind: Kind) -> None:
    created = core.make(kind, "", "Fresh")
    parts = kind.resource.pattern.parse(created.name, "name", owned=kind.resource.owned)
    assert created.name.startswith(kind.parent + "/")
    assert parts[kind.resource.pattern.variables[-1]]  # a server-assigned AIP-122 ID
    assert created.HasField("create_time")
    for author in ("created_by", "last_updated_by"):
        if author in kind.resource.fields:
            assert getattr(created, author) == ME.user
    if "etag" in kind.resource.fields:
        assert created.etag


@each_kind
def test_create_holds_the_id_to_aip_122(core: Harness, kind: Kind) -> None:
    request = kind.create_request(
        parent=kind.parent,
        **{kind.resource.id_field: "Not-An-Id", kind.resource.field: kind.body("Bad ID")},
    )
    error = core.fails(standard.create(core.context, kind.resource, request, ME))
    assert error.code == Code.INVALID_ARGUMENT
    assert [v.field for v in error.violations] == [kind.resource.id_field]


@each_kind
def test_create_refuses_a_taken_id_and_a_taken_display_name(core: Harness, kind: Kind) -> None:
    first = core.make(kind, "one", "One")
    by_id = core.fails(_create(core, kind, "one", "Other"))
    assert (by_id.code, first.name in by_id.message) == (Code.ALREADY_EXISTS, True)
    by_display_name = core.fails(_create(core, kind, "two", "One"))
    assert by_display_name.code == Code.ALREADY_EXISTS
    scope = kind.resource.parent.kind.lower()
    assert f"display names are unique within the {scope}" in by_display_name.message


async def _create(core: Harness, kind: Kind, resource_id: str, display_name: str) -> Any:
    request = kind.create_request(
        parent=kind.parent,
        **{kind.resource.id_field: resource_id, kind.resource.field: kind.body(display_name)},
    )
    return await standard.create(core.context, kind.resource, request, ME)


def test_create_under_a_missing_stored_parent_is_not_found(core: Harness) -> None:
    request = emulator_pb2.CreateEvaluationResultRequest(
        parent=f"{APP}/evaluations/absent", evaluation_result=evaluation_pb2.EvaluationResult()
    )
    error = core.fails(standard.create(core.context, RESULTS, request, ME))
    assert error.code == Code.NOT_FOUND
    assert error.resource == (names.EVALUATION.type, f"{APP}/evaluations/absent")


# -- AIP-132 List --------------------------------------------------------------------------------


@each_kind
def test_list_pages_through_everything_once(core: Harness, kind: Kind) -> None:
    made = {core.make(kind, f"item-{i}", f"Item {i}").name for i in range(5)}
    seen: list[str] = []
    token = ""
    items = standard._items_field(
        kind.list_response.DESCRIPTOR, kind.resource.message.DESCRIPTOR
    ).name
    while True:
        request = kind.list_request(parent=kind.parent, page_size=2, page_token=token)
        page = core.run(
            _message(standard.list_page(core.context, kind.resource, request, kind.list_response()))
        )
        seen += [item.name for item in getattr(page, items)]
        token = page.next_page_token
        if not token:
            break
    expected = made | ({PARENT_EVALUATION} if kind.resource is EVALUATIONS else set())
    assert sorted(seen) == sorted(expected)


def _list(core: Harness, kind: Kind, **fields: Any) -> Awaitable[Any]:
    request = kind.list_request(parent=kind.parent, **fields)
    return _message(standard.list_page(core.context, kind.resource, request, kind.list_response()))


async def _message(call: Awaitable[Any]) -> Any:
    """A List answer as a message (a page of stored items comes as its bytes)."""
    return message_of(await call)


@each_kind
def test_list_tokens_belong_to_their_query(core: Harness, kind: Kind) -> None:
    for i in range(3):
        core.make(kind, f"item-{i}", f"Item {i}")
    first = core.run(_list(core, kind, page_size=1))
    changed = _list(core, kind, page_size=1, page_token=first.next_page_token, order_by="name")
    error = core.fails(changed)
    assert (error.code, [v.field for v in error.violations]) == (
        Code.INVALID_ARGUMENT,
        ["page_token"],
    )


@each_kind
def test_list_filter_errors_name_the_filter(core: Harness, kind: Kind) -> None:
    error = core.fails(_list(core, kind, filter="display_name = "))
    assert (error.code, [v.field for v in error.violations]) == (Code.INVALID_ARGUMENT, ["filter"])


@each_kind
def test_list_filters_and_orders(core: Harness, kind: Kind) -> None:
    for i in range(3):
        core.make(kind, f"item-{i}", f"Item {i}")
    wanted = 'display_name = "Item 1" OR display_name = "Item 2"'
    page = core.run(_list(core, kind, filter=wanted, order_by="name desc"))
    items = standard._items_field(
        kind.list_response.DESCRIPTOR, kind.resource.message.DESCRIPTOR
    ).name
    assert [i.display_name for i in getattr(page, items)] == ["Item 2", "Item 1"]


def test_list_of_a_missing_stored_parent_is_not_found_unless_across(core: Harness) -> None:
    core.make(KINDS["evaluation_result"], "seen", "Seen")
    missing = service_pb2.ListEvaluationResultsRequest(parent=f"{APP}/evaluations/absent")
    error = core.fails(
        standard.list_page(
            core.context, RESULTS, missing, service_pb2.ListEvaluationResultsResponse()
        )
    )
    assert error.code == Code.NOT_FOUND
    across = service_pb2.ListEvaluationResultsRequest(parent=f"{APP}/evaluations/-")
    page = core.run(
        _message(
            standard.list_page(
                core.context, RESULTS, across, service_pb2.ListEvaluationResultsResponse()
            )
        )
    )
    assert [r.display_name for r in page.evaluation_results] == ["Seen"]


# -- AIP-134 Update ------------------------------------------------------------------------------


UPDATABLE = [k for k in KINDS.values() if k.resource.store.replace is not None]


def _changed(core: Harness, kind: Kind, **fields: Any) -> tuple[Any, Any]:
    """A new resource of ``kind``, and a copy of it with ``fields`` set."""
    created = core.make(kind, "one", "One")
    change = kind.resource.message()
    change.CopyFrom(created)
    for field, value in fields.items():
        setattr(change, field, value)
    return created, change


def _update_request(kind: Kind, change: Message, *paths: str) -> Message:
    assert kind.update_request is not None
    mask = field_mask_pb2.FieldMask(paths=paths)
    return kind.update_request(**{kind.resource.field: change, "update_mask": mask})


def _without_stamps(message: Message) -> Message:
    kept = type(message)()
    kept.CopyFrom(message)
    for field in ("display_name", "update_time", "last_updated_by", "etag"):
        kept.ClearField(field)
    return kept


@pytest.mark.parametrize("kind", UPDATABLE, ids=[k.resource.field for k in UPDATABLE])
def test_update_applies_the_mask_and_stamps_anew(core: Harness, kind: Kind) -> None:
    created, change = _changed(core, kind, display_name="Renamed")
    kind.spoil(change)
    request = _update_request(kind, change, "display_name")
    updated = core.run(standard.update(core.context, kind.resource, request, ME))
    assert updated.display_name == "Renamed"
    assert _without_stamps(updated) == _without_stamps(created)  # the rest as it was
    assert updated.etag != created.etag
    assert updated.update_time.ToNanoseconds() >= created.update_time.ToNanoseconds()
    assert core.run(standard.get(core.context, kind.resource, created.name)) == updated


@pytest.mark.parametrize("kind", UPDATABLE, ids=[k.resource.field for k in UPDATABLE])
def test_update_with_a_stale_etag_is_aborted(core: Harness, kind: Kind) -> None:
    _, change = _changed(core, kind, etag="stale")
    request = _update_request(kind, change)
    error = core.fails(standard.update(core.context, kind.resource, request, ME))
    assert error.code == Code.ABORTED


def test_only_resources_with_an_update_declare_replace() -> None:
    declared = {r.message.DESCRIPTOR.name for r in RESOURCES if r.store.replace is not None}
    updates = {m.name.removeprefix("Update") for s in schema.services() for m in s.methods} & {
        r.message.DESCRIPTOR.name for r in RESOURCES
    }
    assert declared == updates


# -- AIP-135 Delete ------------------------------------------------------------------------------


def _delete_request(kind: Kind, name: str, etag: str = "") -> Message:
    if "etag" in kind.delete_request.DESCRIPTOR.fields_by_name:
        return kind.delete_request(name=name, etag=etag)
    return kind.delete_request(name=name)


@each_kind
def test_delete_removes_and_then_is_not_found(core: Harness, kind: Kind) -> None:
    created = core.make(kind, "one", "One")
    core.run(standard.delete(core.context, kind.resource, _delete_request(kind, created.name)))
    for call in (
        standard.get(core.context, kind.resource, created.name),
        standard.delete(core.context, kind.resource, _delete_request(kind, created.name)),
    ):
        assert core.fails(call).code == Code.NOT_FOUND


TAGGED = [k for k in KINDS.values() if "etag" in k.resource.fields]  # AIP-154 is optional


@pytest.mark.parametrize("kind", TAGGED, ids=[k.resource.field for k in TAGGED])
def test_delete_with_a_stale_etag_is_aborted(core: Harness, kind: Kind) -> None:
    created = core.make(kind, "one", "One")
    error = core.fails(
        standard.delete(core.context, kind.resource, _delete_request(kind, created.name, "stale"))
    )
    assert error.code == Code.ABORTED
    assert core.run(standard.get(core.context, kind.resource, created.name)) == created


@pytest.mark.parametrize(
    ("parent", "child"),
    [(r.parent_resource, r) for r in RESOURCES if r.parent_resource is not None],
    ids=lambda r: r.field,
)
def test_delete_takes_the_children_with_it(
    core: Harness, parent: standard.Resource[Any], child: standard.Resource[Any]
) -> None:
    seeded = core.make(KINDS[child.field], "kept", "Kept")
    parent_kind = KINDS[parent.field]
    core.run(standard.delete(core.context, parent, _delete_request(parent_kind, PARENT_EVALUATION)))
    assert core.fails(standard.get(core.context, child, seeded.name)).code == Code.NOT_FOUND


def test_a_delete_guard_refuses_before_anything_is_deleted(core: Harness) -> None:
    dataset = core.make(KINDS["evaluation_dataset"], "d", "D")  # it lists the evaluation
    error = core.fails(
        standard.delete(
            core.context, EVALUATIONS, service_pb2.DeleteEvaluationRequest(name=PARENT_EVALUATION)
        )
    )
    assert (error.code, error.reason) == (Code.FAILED_PRECONDITION, "EVALUATION_IN_USE")
    assert core.run(standard.get(core.context, EVALUATIONS, PARENT_EVALUATION))
    forced = service_pb2.DeleteEvaluationRequest(name=PARENT_EVALUATION, force=True)
    core.run(standard.delete(core.context, EVALUATIONS, forced))
    assert not core.run(standard.get(core.context, DATASETS, dataset.name)).evaluations


# -- the facade ----------------------------------------------------------------------------------


def test_standard_methods_are_named_as_the_aips_name_them() -> None:
    assert set(standard.methods(RESULTS, "Get", "List", "Create")) == {
        "GetEvaluationResult",
        "ListEvaluationResults",
        "CreateEvaluationResult",
    }
    with pytest.raises(ValueError, match="not a standard method"):
        standard.methods(RESULTS, "Rename")


def test_the_facade_answers_rpcs_by_method_name_only(core: Harness) -> None:
    assert callable(core.core.get_evaluation)
    with pytest.raises(AttributeError):
        _ = core.core.no_such_method
