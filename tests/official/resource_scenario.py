"""The standard methods of one resource, driven by Google's official Python client.

The command line, the wiring and the reports are harness.py's; the one argument after them,
``KIND``, names an entry of :data:`KINDS`:
a resource served by the generic standard methods, with how to build a valid one, which field
an update changes and which required field a create may not leave empty. Every step asserts
what the client observes (AIP-131 to 135: ids, ALREADY_EXISTS, pages and filters, update masks
and etags, deletes).

A kind's ``prepare`` creates what its resources refer to (an evaluation for a dataset) and
returns the app-scoped names a body may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.protobuf import field_mask_pb2, timestamp_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import main, refused, smallest_evaluation, step  # type: ignore[import-not-found]

APP = "projects/resource-project/locations/us-central1/apps/resources"
# Monday 2100-03-01 09:30 UTC: a schedule's first firing, whenever the scenario runs.
START = 4107576600


def _golden_evaluation(client: Any, display_name: str, evaluation_id: str = "") -> str:
    created = client.create_evaluation(
        parent=APP, evaluation_id=evaluation_id, evaluation=smallest_evaluation(display_name)
    )
    return str(created.name)


@dataclass(frozen=True)
class Kind:
    """One resource: its message name (``EvaluationExpectation``), a valid body given a display
    name and what ``prepare`` made, the field an update changes (with its new value), the
    REQUIRED field path a create without it is refused for (as a BadRequest violation) and
    whether display names are unique within the app. ``own(client, made, transport)`` runs
    the resource's own checks (its references) after the standard ones."""

    message: str
    body: Callable[[str, dict[str, str]], Any]
    update: tuple[str, Any]
    required: str
    unique_display_name: bool = True
    prepare: Callable[[Any], dict[str, str]] = field(default=lambda client: {})
    # A filter (given what prepare made) that every resource a body makes matches.
    matches_all: Callable[[dict[str, str]], str] | None = None
    # What the create step reports of the created resource besides its name.
    observe: Callable[[Any], dict[str, Any]] = field(default=lambda created: {})
    own: Callable[[Any, dict[str, str], str], None] = field(default=lambda *_: None)

    @property
    def snake(self) -> str:
        return "".join(f"_{c.lower()}" if c.isupper() else c for c in self.message).lstrip("_")


# The evaluations a dataset's scenario lists (its prepare makes them).
_SOURCES = {key: f"{APP}/evaluations/dataset-source-{key}" for key in ("e1", "e2")}


def _dataset_sources(client: Any) -> dict[str, str]:
    made = {
        key: _golden_evaluation(client, f"Dataset source {key}", name.rsplit("/", 1)[1])
        for key, name in _SOURCES.items()
    }
    assert made == _SOURCES, made
    return made


def _dataset_references(client: Any, made: dict[str, str], transport: str) -> None:
    """A dataset's evaluations: stored ones of its app (a bad entry named by its index),
    listed back by each evaluation; deleting one a dataset lists needs ``force``, which takes
    it out of the dataset."""
    e1, e2 = made["e1"], made["e2"]
    dataset = client.create_evaluation_dataset(
        parent=APP,
        evaluation_dataset=ces_v1beta.EvaluationDataset(display_name="Refs", evaluations=[e1, e2]),
    )
    assert dataset.name in client.get_evaluation(name=e1).evaluation_datasets
    request = {"parent": APP, "filter": f'evaluation_datasets:"{dataset.name}"'}
    listed = list(client.list_evaluations(request=request))
    assert sorted(e.name for e in listed) == [e1, e2]
    bad = refused(
        lambda: client.create_evaluation_dataset(
            parent=APP,
            evaluation_dataset=ces_v1beta.EvaluationDataset(
                display_name="Bad", evaluations=[e1, f"{APP}/evaluations/absent"]
            ),
        ),
        exceptions.BadRequest,
    )
    assert bad["violations"] == ["evaluation_dataset.evaluations[1]"], bad
    # FAILED_PRECONDITION is HTTP 400, which api_core maps to BadRequest over REST.
    in_use_error = exceptions.FailedPrecondition if transport == "grpc" else exceptions.BadRequest
    in_use = refused(lambda: client.delete_evaluation(name=e1), in_use_error)
    assert in_use["reason"] == "EVALUATION_IN_USE", in_use
    client.delete_evaluation(request={"name": e1, "force": True})
    after = client.get_evaluation_dataset(name=dataset.name)
    assert list(after.evaluations) == [e2] and after.etag != dataset.etag
    step("references", bad=bad, in_use=in_use)


KINDS: dict[str, Kind] = {
    "expectation": Kind(
        message="EvaluationExpectation",
        body=lambda display, made: ces_v1beta.EvaluationExpectation(
            display_name=display,
            tags=["tone", display.lower()],
            llm_criteria=ces_v1beta.EvaluationExpectation.LlmCriteria(
                prompt="The agent stays polite."
            ),
        ),
        update=("llm_criteria.prompt", "The agent apologises once."),
        required="llm_criteria.prompt",
    ),
    "scheduled_run": Kind(
        message="ScheduledEvaluationRun",
        body=lambda display, made: ces_v1beta.ScheduledEvaluationRun(
            display_name=display,
            active=True,
            request=ces_v1beta.RunEvaluationRequest(app=APP, evaluations=[made["evaluation"]]),
            scheduling_config=ces_v1beta.ScheduledEvaluationRun.SchedulingConfig(
                frequency=ces_v1beta.ScheduledEvaluationRun.SchedulingConfig.Frequency.WEEKLY,
                start_time=timestamp_pb2.Timestamp(seconds=START),
                days_of_week=[1, 4],
            ),
        ),
        update=("description", "Twice a week."),
        required="scheduling_config",
        unique_display_name=False,
        prepare=lambda client: {"evaluation": _golden_evaluation(client, "Scheduled")},
        matches_all=lambda made: f"request.evaluations:{made['evaluation'].rsplit('/', 1)[1]}",
        observe=lambda created: {
            "next": created.next_scheduled_execution_time.isoformat(),
            "total_executions": created.total_executions,
        },
    ),
    "dataset": Kind(
        message="EvaluationDataset",
        body=lambda display, made: ces_v1beta.EvaluationDataset(
            display_name=display, evaluations=[made["e1"]]
        ),
        update=("evaluations", [_SOURCES["e2"]]),
        required="display_name",
        prepare=_dataset_sources,
        matches_all=lambda made: f"evaluations:{made['e1'].rsplit('/', 1)[1]}",
        own=_dataset_references,
    ),
}


def _get(message: Any, path: str) -> Any:
    for part in path.split("."):
        message = getattr(message, part)
    return message


def _set(message: Any, path: str, value: Any) -> None:
    *outer, last = path.split(".")
    for part in outer:
        message = getattr(message, part)
    setattr(message, last, value)


def _clear(message: Any, path: str) -> None:
    *outer, last = path.split(".")
    for part in outer:
        message = getattr(message, part)
    message.__class__.pb(message).ClearField(last)


def scenario(client: Any, kind: Kind, transport: str) -> None:
    # Over REST api_core maps HTTP 409 (ABORTED and ALREADY_EXISTS alike) to Conflict.
    stale_error = exceptions.Aborted if transport == "grpc" else exceptions.Conflict
    snake = kind.snake
    create = getattr(client, f"create_{snake}")
    get = getattr(client, f"get_{snake}")
    list_ = getattr(client, f"list_{snake}s")
    update = getattr(client, f"update_{snake}")
    delete = getattr(client, f"delete_{snake}")
    made = kind.prepare(client)

    def body(display: str) -> Any:
        return kind.body(display, made)

    first = create(request={"parent": APP, f"{snake}_id": "first", snake: body("First")})
    assert first.name.endswith("/first"), first.name
    assert first.create_time and first.etag
    step("create", resource=first.name, **kind.observe(first))
    assigned = create(parent=APP, **{snake: body("Second")})
    assert assigned.name.startswith(APP + "/") and not assigned.name.endswith("/first")
    step("create_assigned_id", resource=assigned.name)
    taken = refused(
        lambda: create(request={"parent": APP, f"{snake}_id": "first", snake: body("Other")}),
        exceptions.Conflict,
    )
    step("create_taken_id", **taken)
    if kind.unique_display_name:
        clash = refused(lambda: create(parent=APP, **{snake: body("First")}), exceptions.Conflict)
        step("create_taken_display_name", **clash)
    missing = body("Third")
    _clear(missing, kind.required)
    invalid = refused(lambda: create(parent=APP, **{snake: missing}), exceptions.BadRequest)
    assert f"{snake}.{kind.required}" in invalid["violations"], invalid
    step("create_missing_required", **invalid)
    bad_id = refused(
        lambda: create(request={"parent": APP, f"{snake}_id": "Not An Id", snake: body("X")}),
        exceptions.BadRequest,
    )
    step("create_bad_id", **bad_id)

    got = get(name=first.name)
    assert got == first
    absent = refused(lambda: get(name=f"{first.name}-absent"), exceptions.NotFound)
    step("get", **absent)

    pages = list(list_(request={"parent": APP, "page_size": 1}).pages)
    names = [item.name for page in pages for item in getattr(page, f"{snake}s")]
    assert sorted(names) == sorted([first.name, assigned.name]), names
    assert len(pages) == 2, len(pages)
    filtered = list(list_(request={"parent": APP, "filter": 'display_name = "First"'}))
    assert [item.name for item in filtered] == [first.name]
    ordered = list(list_(request={"parent": APP, "order_by": "name desc"}))
    assert [item.name for item in ordered] == sorted(names, reverse=True)
    if kind.matches_all is not None:
        every = list(list_(request={"parent": APP, "filter": kind.matches_all(made)}))
        assert sorted(item.name for item in every) == sorted(names), every
    bad_filter = refused(
        lambda: list(list_(request={"parent": APP, "filter": "no_such_field = 1"})),
        exceptions.BadRequest,
    )
    step("list", pages=len(pages), **bad_filter)

    path, value = kind.update
    change = ces_v1beta.__dict__[kind.message](name=first.name)
    _set(change, path, value)
    updated = update(**{snake: change, "update_mask": field_mask_pb2.FieldMask(paths=[path])})
    assert _get(updated, path) == value
    assert updated.display_name == "First" and updated.etag != first.etag
    stale = ces_v1beta.__dict__[kind.message](name=first.name, etag=first.etag)
    _set(stale, path, value)
    aborted = refused(
        lambda: update(**{snake: stale, "update_mask": field_mask_pb2.FieldMask(paths=[path])}),
        stale_error,
    )
    unknown = refused(
        lambda: update(**{snake: change, "update_mask": field_mask_pb2.FieldMask(paths=["nope"])}),
        exceptions.BadRequest,
    )
    step("update", stale=aborted, unknown=unknown)

    if "etag" in type(first).meta.fields:
        stale_delete = refused(
            lambda: delete(request={"name": first.name, "etag": first.etag}),
            stale_error,
        )
        step("delete_stale", **stale_delete)
    delete(request={"name": first.name, "etag": updated.etag})
    gone = refused(lambda: get(name=first.name), exceptions.NotFound)
    again = refused(lambda: delete(name=first.name), exceptions.NotFound)
    step("delete", gone=gone, again=again)
    kind.own(client, made, transport)


if __name__ == "__main__":
    main(lambda wired, kind: scenario(wired.client, KINDS[kind], wired.transport))
