"""Generated Evaluations and EvaluationResults, created then read back over gRPC and REST
(issue 9: property-based input).

Hypothesis builds messages by walking the descriptors (tests/support/generated.py): every field
kind, every oneof branch, extreme numbers, hostile Unicode, empty and huge strings, Timestamps and
Durations beyond their ranges, Struct trees, Any. Each is created on one real server (SQLite) —
evaluations with CreateEvaluation, results with the emulator's CreateEvaluationResult — over
gRPC, or over REST as proto3 JSON, some of it mutated in ways only JSON allows. Then:

* accepted: the resource read back over the same surface equals what was sent, apart from what
  the server owns (OUTPUT_ONLY fields and the name of an evaluation; name, create_time and a
  defaulted display_name of a result), and it also renders over REST (no 500 on a later read);
* refused: INVALID_ARGUMENT in Google's error model (one ErrorInfo, a BadRequest naming fields
  under the request's resource field), never INTERNAL/UNKNOWN/500; no call may hang (timeouts);
* an unmutated REST body is accepted exactly when the same message is accepted over gRPC.

Each test sweeps every oneof branch (a few examples focused on each, since hypothesis would leave
deep branches to luck) and then runs unfocused examples; at the end it asserts that every branch
was generated. The counts are printed and written as JSON to ``$CES_EVAL_GENERATED_REPORT``.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format, message_factory, text_format
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from ces_eval.contract import schema
from ces_eval.contract.limits import MAX_REQUEST_BYTES, MAX_VIOLATIONS
from ces_eval.core.aip import names
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2_grpc as emulator_grpc
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import (
    evaluation_service_pb2_grpc as service_grpc,
)
from ces_eval.testing.server import RunningServer, start_server
from tests.support import generated
from tests.support.load import golden_evaluation

SERVICE = "google.cloud.ces.v1beta.EvaluationService"
Evaluation = evaluation_pb2.Evaluation
EvaluationResult = evaluation_pb2.EvaluationResult

PROJECT = "projects/generated/locations/l"
RESULTS_APP = f"{PROJECT}/apps/results"
TIMEOUT = 60  # seconds; a hang fails the example instead of the run
PER_BRANCH = 4  # examples focused on each oneof branch
UNFOCUSED = 200  # examples without a focus
JSON_HEADERS = {"content-type": "application/json"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
COMPLETED = EvaluationResult.ExecutionState.COMPLETED

# Result fields the server checks against the parent's app: mostly names it accepts.
RESULT_NAMES = {
    EvaluationResult.DESCRIPTOR.fields_by_name[name].full_name: st.one_of(
        st.sampled_from(("", f"{RESULTS_APP}/{collection}/x1", f"{RESULTS_APP}/{collection}/")),
        st.text(max_size=8),
    )
    for name, collection in (("evaluation_run", "evaluationRuns"), ("app_version", "versions"))
}

_SUMMARY: dict[str, dict[str, Any]] = {}
_apps = itertools.count()


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        # Huge strings and long repeated fields are the point, not a slow strategy.
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# -- fixtures ---------------------------------------------------------------------------------


@dataclass
class Clients:
    server: RunningServer
    evaluations: service_grpc.EvaluationServiceStub
    emulator: emulator_grpc.EmulatorServiceStub
    http: httpx.Client
    channel: grpc.Channel


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    running = start_server(tmp_path_factory.mktemp("generated") / "ces-eval.db")
    options = [("grpc.max_receive_message_length", -1)]
    try:
        with (
            grpc.insecure_channel(running.grpc_target, options=options) as channel,
            httpx.Client(base_url=running.http_base, timeout=TIMEOUT) as http,
        ):
            yield Clients(
                running,
                service_grpc.EvaluationServiceStub(channel),
                emulator_grpc.EmulatorServiceStub(channel),
                http,
                channel,
            )
    finally:
        running.kill()
        _write_summary()


def _write_summary() -> None:
    text = json.dumps(_SUMMARY, indent=2, sort_keys=True)
    print(f"\ngenerated input:\n{text}")
    target = os.environ.get("CES_EVAL_GENERATED_REPORT")
    if target:
        Path(target).write_text(text + "\n")


@dataclass
class Tally:
    """What one test generated and how the server answered."""

    name: str
    examples: int = 0
    accepted: int = 0
    mutated: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    refused_fields: Counter[str] = field(default_factory=Counter)
    branches: Counter[str] = field(default_factory=Counter)
    stored_branches: set[str] = field(default_factory=set)

    def refusal(self, reason: str, fields: list[str]) -> None:
        self.refused[reason] += 1
        self.refused_fields.update({re.sub(r"\[[^]]*\]", "[]", f) for f in fields})

    def generated(self, message: Message) -> set[str]:
        self.examples += 1
        found = generated.branches_in(message)
        self.branches.update(found)
        return found

    def summary(self, expected: set[str]) -> dict[str, Any]:
        return {
            "examples": self.examples,
            "accepted": self.accepted,
            "refused": sum(self.refused.values()),
            "refused_by_reason": dict(self.refused.most_common(12)),
            "refused_fields": dict(self.refused_fields.most_common(12)),
            "mutated_json": self.mutated,
            "oneof_branches": len(expected),
            "branches_generated": len(expected & set(self.branches)),
            "branches_stored_and_read_back": len(expected & self.stored_branches),
        }


class Example:
    """One generated input: a message (and, for REST, the body sent and its mutation), shown
    briefly in hypothesis' reports (a full repr of a huge message is megabytes)."""

    def __init__(self, message: Message, body: bytes = b"", mutation: str = "") -> None:
        self.message = message
        self.body = body
        self.mutation = mutation

    def __repr__(self) -> str:
        text = "\n".join(_text(self.message))
        shown = text if len(text) <= 4000 else text[:4000] + f"… ({len(text)} characters)"
        body = self.body[:1000].decode(errors="replace") if self.body else ""
        kind = self.message.DESCRIPTOR.name
        return f"Example(<{kind}>\n{shown}\nbody={body!r}\nmutation={self.mutation!r})"


def _sweep(
    tally: Tally,
    branches: set[str],
    strategy: Callable[[str | None], st.SearchStrategy[Example]],
    check: Callable[[Example], None],
    unfocused: int = UNFOCUSED,
) -> None:
    """Run ``check`` on PER_BRANCH examples focused on each branch, then on ``unfocused``
    more; then require that every branch was generated and record the counts."""
    for branch in sorted(branches):

        @_settings(PER_BRANCH)
        @given(strategy(branch))
        def focused(example: Example) -> None:
            note(repr(example))
            check(example)

        focused()

    @_settings(unfocused)
    @given(strategy(None))
    def without_focus(example: Example) -> None:
        note(repr(example))
        check(example)

    without_focus()
    _SUMMARY[tally.name] = tally.summary(branches)
    assert not branches - set(tally.branches), "oneof branches never generated"


# -- checks -----------------------------------------------------------------------------------


def _fresh_app() -> str:
    """An app of its own per example: display names are unique within an app."""
    return f"{PROJECT}/apps/a{next(_apps)}"


def _text(message: Message) -> list[str]:
    """``message`` in text format, lines cut at 160 characters."""
    try:
        text = text_format.MessageToString(message)
    except DecodeError:  # text_format re-encodes map entries, past protobuf's nesting limit
        return [f"<{message.ByteSize()} bytes, nested too deep for text_format>"]
    return [line[:160] for line in text.splitlines()]


def _assert_same(expected: Message, actual: Message, what: str) -> None:
    """Equal messages (deterministic bytes: NaN payloads and -0.0 count), with a diff if not."""
    if expected.SerializeToString(deterministic=True) == actual.SerializeToString(
        deterministic=True
    ):
        return
    diff = difflib.unified_diff(_text(expected), _text(actual), "sent", "stored", lineterm="")
    pytest.fail(f"{what} differs from what was sent:\n" + "\n".join(list(diff)[:60]))


def _writable(message: Message) -> Message:
    """``message`` without what the server owns: OUTPUT_ONLY fields and the resource name."""
    copy = type(message)()
    copy.CopyFrom(message)
    copy.ClearField("name")  # type: ignore[arg-type]
    generated.clear_output_only(copy)
    return copy


def _check_violations(fields: list[str], root: str) -> None:
    assert fields, "an INVALID_ARGUMENT about the input names the fields at fault"
    for name in fields:
        assert name.split(".")[0].split("[")[0] == root, f"violation outside {root}: {name!r}"


def _grpc_refusal(error: grpc.RpcError, root: str, size: int) -> tuple[str, list[str]]:
    """Check a refused gRPC create; its reason (the first violation's, else ErrorInfo's) and
    the fields at fault."""
    code = error.code()
    if size > MAX_REQUEST_BYTES and code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return "GRPC_MESSAGE_TOO_LARGE", []
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code}: {error.details()}"
    status = status_pb2.Status()
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    assert status.code == code.value[0]
    assert status.message == error.details()
    kinds = [detail.type_url for detail in status.details]
    assert kinds.count(ERROR_INFO) == 1
    assert kinds[0] == ERROR_INFO
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    assert info.domain == "ces.googleapis.com"
    assert info.reason
    assert kinds.count(BAD_REQUEST) == 1, f"no BadRequest: {status.message}"
    bad_request = error_details_pb2.BadRequest()
    status.details[kinds.index(BAD_REQUEST)].Unpack(bad_request)
    fields = [v.field for v in bad_request.field_violations]
    _check_violations(fields, root)
    return bad_request.field_violations[0].reason or info.reason, fields


def _rest_refusal(response: httpx.Response, root: str, size: int) -> tuple[str, list[str]]:
    """Check a refused REST create (Google's JSON envelope); as :func:`_grpc_refusal`."""
    if size > MAX_REQUEST_BYTES and response.status_code == 413:
        return "BODY_TOO_LARGE", []
    assert response.status_code == 400, f"{response.status_code}: {response.text[:500]}"
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == 400
    assert error["status"] == "INVALID_ARGUMENT"
    assert isinstance(error["message"], str)
    assert error["message"]
    kinds = [detail["@type"] for detail in error["details"]]
    assert kinds.count(ERROR_INFO) == 1
    assert kinds[0] == ERROR_INFO
    info = error["details"][0]
    assert info["domain"] == "ces.googleapis.com"
    assert info["reason"]
    assert kinds.count(BAD_REQUEST) == 1, f"no BadRequest: {error['message']}"
    violations = error["details"][kinds.index(BAD_REQUEST)]["fieldViolations"]
    fields = [v["field"] for v in violations]
    _check_violations(fields, root)
    return violations[0].get("reason") or info["reason"], fields


def _assert_parity(
    accepted: bool, over_rest: list[str], over_grpc: Message | tuple[str, list[str]]
) -> None:
    """An unmutated REST body and the same message over gRPC get the same answer: both
    accepted, or both refused naming the same fields, except that gRPC may drop violations and
    cut long paths (ending in "…") to fit the error into its trailers. Order is not compared:
    map entries (Struct fields) may iterate differently in the two parsed messages. (Callers
    skip bodies past REST's size limit; messages past gRPC's are skipped here.)"""
    if isinstance(over_grpc, tuple) and not over_grpc[1]:
        return
    if accepted:
        assert not isinstance(over_grpc, tuple), f"refused over gRPC only: {over_grpc}"
        return
    assert isinstance(over_grpc, tuple), f"refused over REST only: {over_rest}"
    fields = over_grpc[1]
    assert len(fields) <= len(over_rest), (fields, over_rest)
    if len(fields) == len(over_rest) and not any(f.endswith("…") for f in fields):
        assert sorted(fields) == sorted(over_rest)
    for cut in fields:
        assert any(cut == whole or whole.startswith(cut.rstrip("…")) for whole in over_rest), cut


def _assert_renders(clients: Clients, message: Message) -> None:
    """The resource reads over REST as json_format renders it here (no 500 once stored)."""
    response = clients.http.get(f"/v1beta/{message.name}")  # type: ignore[attr-defined]
    assert response.status_code == 200, response.text[:500]
    local = generated.parse_json(type(message), json_format.MessageToJson(message))
    _assert_same(local, generated.parse_json(type(message), response.content), "REST rendering")


def _local_reading(message_class: type[Message], body: bytes) -> Message | None:
    """``body`` as protobuf's JSON parser reads it; None when it refuses it."""
    try:
        return generated.parse_json(message_class, body)
    except (json_format.ParseError, ValueError, TypeError, OverflowError, RecursionError):
        return None


def _documents(messages: st.SearchStrategy[Message]) -> st.SearchStrategy[Example]:
    """Examples of :func:`generated.json_documents`, with their source messages."""

    @st.composite
    def build(draw: st.DrawFn) -> Example:
        message = draw(messages)
        body, mutation = draw(generated.json_documents(st.just(message), message.DESCRIPTOR))
        return Example(message, body, mutation)

    return build()


# -- evaluations ------------------------------------------------------------------------------


def _evaluation_branches() -> set[str]:
    return set(generated.oneof_branches(Evaluation.DESCRIPTOR, through_output_only=False))


def _assert_evaluation_stored(
    sent: Message, created: Evaluation, fetched: Evaluation, app: str
) -> None:
    assert created.name.startswith(f"{app}/evaluations/")
    assert fetched.name == created.name
    assert created.etag
    assert created.HasField("create_time")
    expected = _writable(sent)
    _assert_same(expected, _writable(fetched), "GetEvaluation")
    _assert_same(expected, _writable(created), "CreateEvaluation's answer")


def _grpc_create_evaluation(
    clients: Clients, evaluation: Message, app: str
) -> Evaluation | tuple[str, list[str]]:
    request = service_pb2.CreateEvaluationRequest(parent=app, evaluation=evaluation)
    try:
        created: Evaluation = clients.evaluations.CreateEvaluation(request, timeout=TIMEOUT)
    except grpc.RpcError as error:
        return _grpc_refusal(error, "evaluation", request.ByteSize())
    return created


def test_generated_evaluations_over_grpc(clients: Clients) -> None:
    tally = Tally("evaluations over gRPC")

    def check(example: Example) -> None:
        evaluation = example.message
        branches = tally.generated(evaluation)
        app = _fresh_app()
        created = _grpc_create_evaluation(clients, evaluation, app)
        if isinstance(created, tuple):
            tally.refusal(*created)
            return
        fetched = clients.evaluations.GetEvaluation(
            service_pb2.GetEvaluationRequest(name=created.name), timeout=TIMEOUT
        )
        _assert_evaluation_stored(evaluation, created, fetched, app)
        _assert_renders(clients, fetched)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    _sweep(
        tally,
        _evaluation_branches(),
        lambda f: generated.messages(Evaluation, focus=f).map(Example),
        check,
    )
    assert "Traceback" not in clients.server.output()


def test_generated_evaluations_over_rest(clients: Clients) -> None:
    _over_rest(clients, Tally("evaluations over REST"), Evaluation, _assert_evaluation_stored)


# -- results ----------------------------------------------------------------------------------


def _result_branches() -> set[str]:
    return set(generated.oneof_branches(EvaluationResult.DESCRIPTOR, through_output_only=True))


def _results(focus: str | None, json_safe: bool = False) -> st.SearchStrategy[Any]:
    """Results whose evaluation_status agrees with execution_state in most examples (the server
    refuses a status unless the execution COMPLETED)."""

    def agree(pair: tuple[Any, bool]) -> Any:
        result, repair = pair
        if repair and result.evaluation_status:
            result.execution_state = COMPLETED
        return result

    messages = generated.messages(
        EvaluationResult, focus=focus, json_safe=json_safe, overrides=RESULT_NAMES
    )
    return st.tuples(messages, st.integers(0, 4).map(bool)).map(agree)


@dataclass(frozen=True)
class Parent:
    name: str
    display_name: str


def _parent(clients: Clients) -> Parent:
    """A new evaluation to hold one result (result display names are unique per evaluation)."""
    display_name = f"parent {next(_apps)}"
    created = clients.evaluations.CreateEvaluation(
        service_pb2.CreateEvaluationRequest(
            parent=RESULTS_APP, evaluation=golden_evaluation(display_name)
        ),
        timeout=TIMEOUT,
    )
    return Parent(created.name, display_name)


def _assert_result_stored(
    sent: Message, created: EvaluationResult, fetched: EvaluationResult, parent: Parent
) -> None:
    """Stored as sent, apart from the name, create_time and a defaulted display_name."""
    assert created.name.startswith(f"{parent.name}/results/")
    _assert_same(created, fetched, "GetEvaluationResult (against the create answer)")
    expected = EvaluationResult()
    expected.CopyFrom(sent)
    for owned in ("name", "create_time"):
        expected.ClearField(owned)
    if not expected.display_name:
        assert fetched.display_name.startswith(f"{parent.display_name} Result - ")
        expected.display_name = fetched.display_name
    actual = EvaluationResult()
    actual.CopyFrom(fetched)
    for owned in ("name", "create_time"):
        actual.ClearField(owned)
    _assert_same(expected, actual, "GetEvaluationResult")


def _grpc_create_result(
    clients: Clients, result: Message, parent: Parent
) -> EvaluationResult | tuple[str, list[str]]:
    request = emulator_pb2.CreateEvaluationResultRequest(
        parent=parent.name, evaluation_result=result
    )
    try:
        created: EvaluationResult = clients.emulator.CreateEvaluationResult(
            request, timeout=TIMEOUT
        )
    except grpc.RpcError as error:
        return _grpc_refusal(error, "evaluation_result", request.ByteSize())
    return created


def _assert_parent_renders(clients: Clients, parent: Parent) -> None:
    """The parent, whose derived fields now count the new result, reads on both surfaces."""
    evaluation = clients.evaluations.GetEvaluation(
        service_pb2.GetEvaluationRequest(name=parent.name), timeout=TIMEOUT
    )
    _assert_renders(clients, evaluation)


def test_generated_results_over_grpc(clients: Clients) -> None:
    tally = Tally("results over gRPC")

    def check(example: Example) -> None:
        result = example.message
        branches = tally.generated(result)
        parent = _parent(clients)
        created = _grpc_create_result(clients, result, parent)
        if isinstance(created, tuple):
            tally.refusal(*created)
            return
        fetched = clients.evaluations.GetEvaluationResult(
            service_pb2.GetEvaluationResultRequest(name=created.name), timeout=TIMEOUT
        )
        _assert_result_stored(result, created, fetched, parent)
        _assert_renders(clients, fetched)
        _assert_parent_renders(clients, parent)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    _sweep(tally, _result_branches(), lambda f: _results(f).map(Example), check)
    assert "Traceback" not in clients.server.output()


def test_generated_results_over_rest(clients: Clients) -> None:
    tally = Tally("results over REST")

    def check(example: Example) -> None:
        body, mutation = example.body, example.mutation
        branches = tally.generated(example.message)
        tally.mutated += bool(mutation)
        parent = _parent(clients)
        expected = _local_reading(EvaluationResult, body)
        response = clients.http.post(
            f"/emulator/v1/{parent.name}/results", content=body, headers=JSON_HEADERS
        )
        accepted = response.status_code == 200
        fields: list[str] = []
        if not accepted:
            reason, fields = _rest_refusal(response, "evaluation_result", len(body))
            tally.refusal(reason, fields)
        if not mutation and (accepted or fields):
            assert expected is not None
            over_grpc = _grpc_create_result(clients, expected, _parent(clients))
            _assert_parity(accepted, fields, over_grpc)
        if not accepted:
            return
        assert expected is not None, f"accepted a body protobuf's JSON parser refuses ({mutation})"
        created = generated.parse_json(EvaluationResult, response.content)
        read = clients.http.get(f"/v1beta/{created.name}")  # type: ignore[attr-defined]
        assert read.status_code == 200, read.text[:500]
        fetched = generated.parse_json(EvaluationResult, read.content)
        _assert_result_stored(expected, created, fetched, parent)  # type: ignore[arg-type]
        _assert_parent_renders(clients, parent)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    _sweep(
        tally,
        _result_branches(),
        lambda f: _documents(_results(f, json_safe=True)),
        check,
    )
    assert "Traceback" not in clients.server.output()


# -- runs ---------------------------------------------------------------------------------------

EvaluationRun = evaluation_pb2.EvaluationRun
RUNS_APP = f"{PROJECT}/apps/runs"
# Run fields the server checks against the app: mostly names of its evaluations and results.
RUN_NAMES = {
    EvaluationRun.DESCRIPTOR.fields_by_name[name].full_name: st.one_of(
        st.sampled_from((f"{RUNS_APP}/{tail}", f"{PROJECT}/apps/other/{tail}", tail)),
        st.text(max_size=8),
    )
    for name, tail in (
        ("evaluations", "evaluations/e1"),
        ("evaluation_results", "evaluations/e1/results/r1"),
    )
}


def test_generated_runs_over_grpc(clients: Clients) -> None:
    """Seeded runs (the emulator's CreateEvaluationRun): stored whole apart from the name and
    create_time, read back over gRPC and REST; or refused under ``evaluation_run``."""
    tally = Tally("runs over gRPC")

    def check(example: Example) -> None:
        run = example.message
        branches = tally.generated(run)
        request = emulator_pb2.CreateEvaluationRunRequest(parent=RUNS_APP, evaluation_run=run)
        try:
            created = clients.emulator.CreateEvaluationRun(request, timeout=TIMEOUT)
        except grpc.RpcError as error:
            tally.refusal(*_grpc_refusal(error, "evaluation_run", request.ByteSize()))
            return
        assert created.name.startswith(f"{RUNS_APP}/evaluationRuns/")
        fetched = clients.evaluations.GetEvaluationRun(
            service_pb2.GetEvaluationRunRequest(name=created.name), timeout=TIMEOUT
        )
        _assert_same(created, fetched, "GetEvaluationRun (against the create answer)")
        expected, actual = EvaluationRun(), EvaluationRun()
        expected.CopyFrom(run)
        actual.CopyFrom(fetched)
        for owned in ("name", "create_time"):
            expected.ClearField(owned)
            actual.ClearField(owned)
        _assert_same(expected, actual, "GetEvaluationRun")
        _assert_renders(clients, fetched)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    _sweep(
        tally,
        set(generated.oneof_branches(EvaluationRun.DESCRIPTOR, through_output_only=True)),
        lambda f: generated.messages(EvaluationRun, focus=f, overrides=RUN_NAMES).map(Example),
        check,
    )
    assert tally.accepted, "no generated run was stored"
    assert "Traceback" not in clients.server.output()


# -- regressions found by the generated input -------------------------------------------------


def _scenario(display_name: str) -> Evaluation:
    evaluation = Evaluation(display_name=display_name)
    evaluation.scenario.task = "t"
    evaluation.scenario.rubrics.append("r")
    evaluation.scenario.scenario_expectations.add().agent_response.role = "agent"
    return evaluation


# -- scheduled evaluation runs ----------------------------------------------------------------

SCHEDULES_APP = f"{PROJECT}/apps/schedules"
Scheduled = evaluation_pb2.ScheduledEvaluationRun
_REQUEST = evaluation_pb2.RunEvaluationRequest.DESCRIPTOR.fields_by_name
_CONFIG = Scheduled.SchedulingConfig.DESCRIPTOR.fields_by_name
# Request fields checked against the parent app and stored evaluations: mostly names that hold.
SCHEDULE_FIELDS = {
    _REQUEST["app"].full_name: st.sampled_from(
        (SCHEDULES_APP, SCHEDULES_APP, SCHEDULES_APP, f"{PROJECT}/apps/other", "")
    ),
    _REQUEST["evaluations"].full_name: st.sampled_from(
        (
            f"{SCHEDULES_APP}/evaluations/e1",
            f"{SCHEDULES_APP}/evaluations/e2",
            f"{SCHEDULES_APP}/evaluations/e3",
            f"{SCHEDULES_APP}/evaluations/absent",
        )
    ),
    _REQUEST["evaluation_dataset"].full_name: st.sampled_from(
        ("", "", "", f"{SCHEDULES_APP}/evaluationDatasets/absent")
    ),
    _REQUEST["run_count"].full_name: st.integers(-1, 6),
    _CONFIG["frequency"].full_name: st.integers(0, 5),
    _CONFIG["days_of_week"].full_name: st.integers(0, 8),
}


def _repaired(pair: tuple[Any, bool]) -> Any:
    """In most examples, the request's names and the schedule made valid, the rest (configs,
    settings, output-only fields, text) as generated: so that some are stored."""
    run, repair = pair
    if not repair:
        return run
    request, config = run.request, run.scheduling_config
    request.app = SCHEDULES_APP
    del request.evaluations[:]
    request.evaluations.append(f"{SCHEDULES_APP}/evaluations/e1")
    for name in ("evaluation_dataset", "app_version", "scheduled_evaluation_run"):
        request.ClearField(name)
    del request.persona_run_configs[:]
    if request.HasField("run_count") and request.run_count < 1:
        request.run_count = 1
    if config.frequency not in (1, 2, 3, 4):
        config.frequency = Scheduled.SchedulingConfig.Frequency.WEEKLY
    days = sorted({d for d in config.days_of_week if 1 <= d <= 7}) if config.frequency > 2 else []
    del config.days_of_week[:]
    config.days_of_week.extend(days)
    if not 0 <= config.start_time.seconds <= 253402300799 or config.start_time.nanos:
        config.start_time.FromSeconds(4107576600)
    run.display_name = run.display_name or "Scheduled"
    return run


def test_generated_scheduled_runs_over_grpc(clients: Clients) -> None:
    """Refused in Google's error model naming fields under the resource, or stored as sent
    (apart from what the server owns) and rendered over REST."""
    tally = Tally("scheduled runs over gRPC")
    for index in (1, 2, 3):
        clients.evaluations.CreateEvaluation(
            service_pb2.CreateEvaluationRequest(
                parent=SCHEDULES_APP,
                evaluation_id=f"e{index}",
                evaluation=golden_evaluation(f"Scheduled {index}"),
            ),
            timeout=TIMEOUT,
        )

    def check(example: Example) -> None:
        run = example.message
        branches = tally.generated(run)
        request = service_pb2.CreateScheduledEvaluationRunRequest(
            parent=SCHEDULES_APP, scheduled_evaluation_run=run
        )
        try:
            created = clients.evaluations.CreateScheduledEvaluationRun(request, timeout=TIMEOUT)
        except grpc.RpcError as error:
            tally.refusal(*_grpc_refusal(error, "scheduled_evaluation_run", request.ByteSize()))
            return
        fetched = clients.evaluations.GetScheduledEvaluationRun(
            service_pb2.GetScheduledEvaluationRunRequest(name=created.name), timeout=TIMEOUT
        )
        _assert_same(created, fetched, "GetScheduledEvaluationRun (against the create answer)")
        _assert_same(_writable(run), _writable(fetched), "GetScheduledEvaluationRun")
        assert fetched.total_executions == 0 and not fetched.last_completed_run
        assert fetched.HasField("next_scheduled_execution_time") <= fetched.active
        _assert_renders(clients, fetched)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    _sweep(
        tally,
        set(generated.oneof_branches(Scheduled.DESCRIPTOR, through_output_only=False)),
        lambda f: (
            st.tuples(
                generated.messages(Scheduled, focus=f, overrides=SCHEDULE_FIELDS),
                st.integers(0, 3).map(bool),
            )
            .map(_repaired)
            .map(Example)
        ),
        check,
    )
    assert tally.accepted, "no generated scheduled run was valid: the overrides need care"
    assert "Traceback" not in clients.server.output()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param(
            lambda e: e.scenario.variable_overrides.__setitem__("n", float("nan")),
            'evaluation.scenario.variable_overrides.fields["n"].number_value',
            id="NaN in a Struct",
        ),
        pytest.param(
            lambda e: e.scenario.variable_overrides.get_or_create_list("l").append(float("-inf")),
            'evaluation.scenario.variable_overrides.fields["l"].list_value.values[0].number_value',
            id="-Infinity in a ListValue",
        ),
        pytest.param(
            lambda e: setattr(
                e.scenario.scenario_expectations[0].agent_response.event_time, "seconds", -(2**40)
            ),
            "evaluation.scenario.scenario_expectations[0].agent_response.event_time",
            id="Timestamp before year 1",
        ),
        pytest.param(
            lambda e: setattr(
                e.scenario.scenario_expectations[0].agent_response.event_time, "nanos", -1
            ),
            "evaluation.scenario.scenario_expectations[0].agent_response.event_time",
            id="Timestamp with negative nanos",
        ),
    ],
)
def test_values_json_cannot_render_are_refused_over_grpc(
    clients: Clients, change: Callable[[Evaluation], None], field: str
) -> None:
    """Stored, these made every later REST read of the evaluation a 500 (json_format raises)."""
    evaluation = _scenario("unrenderable")
    change(evaluation)
    app = _fresh_app()
    refused = _grpc_create_evaluation(clients, evaluation, app)
    assert isinstance(refused, tuple)
    assert refused[1] == [field]
    # An update to the same value is refused the same way.
    created = _grpc_create_evaluation(clients, _scenario("renderable"), app)
    assert isinstance(created, Evaluation)
    evaluation.name = created.name
    with pytest.raises(grpc.RpcError) as raised:
        clients.evaluations.UpdateEvaluation(
            service_pb2.UpdateEvaluationRequest(evaluation=evaluation), timeout=TIMEOUT
        )
    assert _grpc_refusal(raised.value, "evaluation", 0)[1] == [field]


def test_results_json_cannot_render_are_refused(clients: Clients) -> None:
    """An Any of a type the server does not know, a Duration beyond ±10,000 years and a
    Timestamp after 9999 in a result: refused, where they used to be stored unreadable."""
    result = EvaluationResult(display_name="unrenderable")
    result.error.details.add(type_url="type.googleapis.com/no.such.Type", value=b"\x08\x01")
    result.error.details.add().Pack(error_details_pb2.ErrorInfo(reason="FINE"))
    result.error.details.add(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=b"\xff")
    result.golden_result.turn_replay_results.add().turn_latency.seconds = 315_576_000_001
    result.root_span.end_time.seconds = 253_402_300_800
    refused = _grpc_create_result(clients, result, _parent(clients))
    assert isinstance(refused, tuple)
    assert sorted(refused[1]) == [
        "evaluation_result.error.details[0].type_url",
        "evaluation_result.error.details[2].value",
        "evaluation_result.golden_result.turn_replay_results[0].turn_latency",
        "evaluation_result.root_span.end_time",
    ]
    del result.error.details[0]
    del result.error.details[1]
    result.golden_result.turn_replay_results[0].turn_latency.seconds = 315_576_000_000
    result.root_span.end_time.seconds = 253_402_300_799
    created = _grpc_create_result(clients, result, _parent(clients))
    assert isinstance(created, EvaluationResult)
    _assert_renders(clients, created)


def test_an_error_with_a_thousand_violations_reaches_a_grpc_client(clients: Clients) -> None:
    """1,000 steps each lacking a required field: one violation each (the checks stop at
    MAX_VIOLATIONS). The error used to exceed what a gRPC client accepts in trailers (16 KiB),
    which answered RESOURCE_EXHAUSTED "received metadata size exceeds hard limit" in its place;
    now it is trimmed to fit. (1,001 turns no longer make a thousand violations: a request over
    a count limit is refused with that one alone, issue 15.)"""
    evaluation = Evaluation(display_name="many problems")
    for _ in range(100):
        steps = evaluation.golden.turns.add().steps
        for _ in range(10):
            steps.add().expectation.mock_tool_response.tool = "t"  # its response is required
    request = service_pb2.CreateEvaluationRequest(parent=_fresh_app(), evaluation=evaluation)
    with pytest.raises(grpc.RpcError) as raised:
        clients.evaluations.CreateEvaluation(request, timeout=TIMEOUT)
    _, fields = _grpc_refusal(raised.value, "evaluation", request.ByteSize())
    assert (
        fields[0] == "evaluation.golden.turns[0].steps[0].expectation.mock_tool_response.response"
    )
    assert len(raised.value.details().encode()) <= 512
    # Over REST the error carries the first MAX_VIOLATIONS of them, and its message counts them.
    response = clients.http.post(
        f"/v1beta/{_fresh_app()}/evaluations",
        content=json_format.MessageToJson(evaluation),
        headers=JSON_HEADERS,
    )
    assert len(_rest_refusal(response, "evaluation", 0)[1]) == MAX_VIOLATIONS
    assert "more" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "number",
    [
        pytest.param("1" + "0" * 400, id="an integer of 401 digits"),
        pytest.param("1e400", id="1e400"),
        pytest.param("NaN", id="the NaN literal"),
        pytest.param("-Infinity", id="the -Infinity literal"),
    ],
)
def test_json_numbers_a_struct_cannot_hold_are_400(clients: Clients, number: str) -> None:
    """A 401-digit integer used to be a 500 (json_format's OverflowError); 1e400 parsed to
    infinity and NaN literals (not JSON) to NaN, both stored and then unreadable over REST."""
    body = (
        '{"displayName":"n","scenario":{"task":"t","rubrics":["r"],'
        '"scenarioExpectations":[{"agentResponse":{}}],"variableOverrides":{"n":' + number + "}}}"
    )
    response = clients.http.post(
        f"/v1beta/{_fresh_app()}/evaluations", content=body, headers=JSON_HEADERS
    )
    _rest_refusal(response, "evaluation", len(body))


def test_the_largest_float_round_trips_over_rest(clients: Clients) -> None:
    """The server prints the largest float as 3.4028235e+38 (its shortest form) and used to
    refuse that same text on input (json_format: "Float value too large"); a larger number
    that rounds to infinity in 32 bits stays refused."""
    parent = _parent(clients)
    body = (
        '{"scenarioResult":{"rubricOutcomes":[{"score":3.4028235e+38},{"score":"-3.4028235e38"}]}}'
    )
    response = clients.http.post(
        f"/emulator/v1/{parent.name}/results", content=body, headers=JSON_HEADERS
    )
    assert response.status_code == 200, response.text
    created = generated.parse_json(EvaluationResult, response.content)
    scores = [o.score for o in created.scenario_result.rubric_outcomes]  # type: ignore[attr-defined]
    assert scores == [generated.FLOAT_MAX, -generated.FLOAT_MAX]
    read = clients.http.get(f"/v1beta/{created.name}")  # type: ignore[attr-defined]
    assert b'"score":3.4028235e+38' in read.content
    too_large = body.replace("3.4028235e+38", "3.4028236e+38")
    response = clients.http.post(
        f"/emulator/v1/{parent.name}/results", content=too_large, headers=JSON_HEADERS
    )
    _rest_refusal(response, "evaluation_result", len(too_large))


# -- the other resources of the generic standard methods --------------------------------------

# Resources created by their own AIP-133 Create (besides evaluations): each is generated, created
# over gRPC and over REST (as proto3 JSON, mutated or not), read back equal to what was sent
# apart from what the server owns, or refused in Google's error model. Their references to other
# resources are random names, so those that set any are refused naming them.
STANDARD = (evaluation_pb2.EvaluationExpectation, evaluation_pb2.EvaluationDataset)
# Fewer unfocused examples than evaluations get: these messages are small.
STANDARD_UNFOCUSED = 60


def _create_method(message_class: type[Message]) -> Any:
    return schema.methods()[f"/{SERVICE}/Create{message_class.DESCRIPTOR.name}"]


def _grpc_create(clients: Clients, message: Message, app: str) -> Message | tuple[str, list[str]]:
    method = _create_method(type(message))
    request = message_factory.GetMessageClass(method.input_type)(parent=app)
    field = names.snake_case(message.DESCRIPTOR.name)
    getattr(request, field).CopyFrom(message)
    call = clients.channel.unary_unary(
        f"/{SERVICE}/{method.name}",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=type(message).FromString,
    )
    try:
        created: Message = call(request, timeout=TIMEOUT)
    except grpc.RpcError as error:
        return _grpc_refusal(error, field, request.ByteSize())
    return created


def _assert_stored(sent: Message, created: Message, fetched: Message, app: str) -> None:
    name = created.name  # type: ignore[attr-defined]
    assert name.startswith(f"{app}/"), name
    assert fetched.name == name  # type: ignore[attr-defined]
    expected = _writable(sent)
    _assert_same(expected, _writable(fetched), "Get")
    _assert_same(expected, _writable(created), "Create's answer")


@pytest.mark.parametrize("message_class", STANDARD, ids=lambda m: m.DESCRIPTOR.name)
def test_generated_resources_over_grpc(clients: Clients, message_class: type[Message]) -> None:
    tally = Tally(f"{message_class.DESCRIPTOR.name} over gRPC")

    def check(example: Example) -> None:
        branches = tally.generated(example.message)
        app = _fresh_app()
        created = _grpc_create(clients, example.message, app)
        if isinstance(created, tuple):
            tally.refusal(*created)
            return
        read = clients.http.get(f"/v1beta/{created.name}")  # type: ignore[attr-defined]
        assert read.status_code == 200, read.text[:500]
        fetched = generated.parse_json(message_class, read.content)
        _assert_stored(example.message, created, fetched, app)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    branches = set(generated.oneof_branches(message_class.DESCRIPTOR, through_output_only=False))
    _sweep(
        tally,
        branches,
        lambda f: generated.messages(message_class, focus=f).map(Example),
        check,
        unfocused=STANDARD_UNFOCUSED,
    )
    assert tally.accepted, "no generated resource was accepted"
    assert "Traceback" not in clients.server.output()


def _over_rest(
    clients: Clients,
    tally: Tally,
    message_class: type[Message],
    assert_stored: Callable[[Message, Message, Message, str], None],
    unfocused: int = UNFOCUSED,
) -> None:
    """Generated ``message_class`` resources created over REST as proto3 JSON, mutated or not:
    each is refused in Google's error model (as gRPC refuses it, when protobuf's JSON parser
    reads it) or read back as ``assert_stored`` wants it."""
    field = names.snake_case(message_class.DESCRIPTOR.name)
    collection = names.of(message_class).pattern.split("/")[-2]

    def check(example: Example) -> None:
        body, mutation = example.body, example.mutation
        branches = tally.generated(example.message)
        tally.mutated += bool(mutation)
        app = _fresh_app()
        expected = _local_reading(message_class, body)
        response = clients.http.post(
            f"/v1beta/{app}/{collection}", content=body, headers=JSON_HEADERS
        )
        accepted = response.status_code == 200
        fields: list[str] = []
        if not accepted:
            reason, fields = _rest_refusal(response, field, len(body))
            tally.refusal(reason, fields)
        if not mutation and (accepted or fields):
            assert expected is not None
            _assert_parity(accepted, fields, _grpc_create(clients, expected, _fresh_app()))
        if not accepted:
            return
        assert expected is not None, f"accepted a body protobuf's JSON parser refuses ({mutation})"
        created = generated.parse_json(message_class, response.content)
        read = clients.http.get(f"/v1beta/{created.name}")  # type: ignore[attr-defined]
        assert read.status_code == 200, read.text[:500]
        fetched = generated.parse_json(message_class, read.content)
        assert_stored(expected, created, fetched, app)
        tally.accepted += 1
        tally.stored_branches |= branches & generated.branches_in(fetched)

    branches = set(generated.oneof_branches(message_class.DESCRIPTOR, through_output_only=False))
    _sweep(
        tally,
        branches,
        lambda f: _documents(generated.messages(message_class, focus=f, json_safe=True)),
        check,
        unfocused=unfocused,
    )
    assert "Traceback" not in clients.server.output()


@pytest.mark.parametrize("message_class", STANDARD, ids=lambda m: m.DESCRIPTOR.name)
def test_generated_resources_over_rest(clients: Clients, message_class: type[Message]) -> None:
    tally = Tally(f"{message_class.DESCRIPTOR.name} over REST")
    _over_rest(clients, tally, message_class, _assert_stored, STANDARD_UNFOCUSED)
