"""What every scenario of this folder shares: the command line, the official client and our
emulator's client wired to the servers under test, and the reports.

The scenarios run in the official client's own environment (``.venv-client``), never beside
``ces_eval``: this module imports Google's client and protobuf alone, and reads our
emulator's messages from the descriptor set it is given (``generated/descriptor_set.binpb``)
into a private DescriptorPool. They run as scripts, so this folder is on their ``sys.path``;
``tests/support/official.py`` starts them.

A scenario's command line is ``SCRIPT TRANSPORT TARGETS DESCRIPTOR_SET [ARGUMENT ...]``:
``grpc HOST:PORT`` or ``rest http://HOST:PORT``, several comma-separated targets (replicas
sharing one database) called in turn, one call each. It prints one JSON line per step
(:func:`step`) and exits non-zero on the first failed assertion. The scripts auth, wiring, large
and unimplemented keep command lines of their own and borrow the client and the smallest
evaluation from here.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.rpc import error_details_pb2


def step(name: str, **facts: Any) -> None:
    """Report what the client saw at one step: a JSON line, read back by name by the test."""
    print(json.dumps({"step": name, **facts}, default=str), flush=True)


def smallest_evaluation(display_name: str) -> ces_v1beta.Evaluation:
    """A valid evaluation with as little as possible in it: one golden turn saying hi."""
    return ces_v1beta.Evaluation(
        display_name=display_name,
        golden=ces_v1beta.Evaluation.Golden(
            turns=[
                ces_v1beta.Evaluation.GoldenTurn(
                    steps=[
                        ces_v1beta.Evaluation.Step(user_input=ces_v1beta.SessionInput(text="hi"))
                    ]
                )
            ]
        ),
    )


def details_of(error: exceptions.GoogleAPICallError) -> dict[str, Any]:
    """What api_core parsed from the error: ErrorInfo reason and domain, BadRequest fields.

    Over REST api_core picks the exception class from the HTTP status (409 is Conflict for both
    ALREADY_EXISTS and ABORTED), exactly as against Google's own front end.
    """
    found: dict[str, Any] = {"reason": error.reason, "domain": error.domain, "violations": []}
    for detail in error.details:
        if isinstance(detail, error_details_pb2.BadRequest):  # gRPC: unpacked messages
            found["violations"] = [v.field for v in detail.field_violations]
        elif isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.BadRequest"):
            found["violations"] = [v["field"] for v in detail["fieldViolations"]]  # REST: JSON
    return found


class RoundRobin:
    """Each method call goes to the next of several equivalent objects (replicas' clients)."""

    def __init__(self, targets: list[Any]) -> None:
        self._targets = targets
        self._next = 0

    def __getattr__(self, name: str) -> Any:
        target = self._targets[self._next % len(self._targets)]
        self._next += 1
        return getattr(target, name)


def wiring(transport: str, targets: str, descriptor_set: str = "") -> tuple[Any, Any, Any]:
    """The official EvaluationService and AgentService clients and our emulator's client of
    ``targets`` over ``transport`` (``grpc``: ``HOST:PORT`` and our descriptor set; ``rest``:
    ``http://HOST:PORT``); several comma-separated targets (replicas sharing one database) are
    called in turn, one call each."""
    clients: list[ces_v1beta.EvaluationServiceClient] = []
    agents: list[ces_v1beta.AgentServiceClient] = []
    emulators: list[Emulator | RestEmulator] = []
    for target in targets.split(","):
        if transport == "grpc":
            channel = grpc.insecure_channel(target)
            clients.append(official_client(transport, target, channel))
            agents.append(official_client(transport, target, channel, "AgentService"))
            emulators.append(Emulator(channel, descriptor_set))
        else:
            clients.append(official_client(transport, target))
            agents.append(official_client(transport, target, service="AgentService"))
            emulators.append(RestEmulator(target))
    if len(clients) == 1:
        return clients[0], emulators[0], agents[0]
    return RoundRobin(clients), RoundRobin(emulators), RoundRobin(agents)


def refused(call: Callable[[], object], kind: type[Exception]) -> dict[str, Any]:
    """What api_core parsed from the error of ``call()``, which must raise ``kind`` (one of
    api_core's exceptions, or a class the test computed, such as the transport's)."""
    try:
        call()
    except kind as error:
        assert isinstance(error, exceptions.GoogleAPICallError), error
        return details_of(error)
    raise AssertionError(f"expected {kind.__name__}")


def _classes(service: str) -> tuple[Any, Any]:
    """The official client class of ``service`` (``AgentService``) and its gRPC transport."""
    client_class = getattr(ces_v1beta, f"{service}Client")
    package = re.sub(r"(?<!^)(?=[A-Z])", "_", service).lower()
    transports = importlib.import_module(f"google.cloud.ces_v1beta.services.{package}.transports")
    return client_class, getattr(transports, f"{service}GrpcTransport")


def official_client(
    transport: str,
    target: str,
    channel: grpc.Channel | None = None,
    service: str = "EvaluationService",
) -> Any:
    """The official client of ``service`` of one server: over ``channel`` (an insecure one to
    ``target`` when not given, default options) for ``grpc``, over its REST binding with
    anonymous credentials for ``rest``."""
    client_class, grpc_class = _classes(service)
    if transport == "grpc":
        return client_class(transport=grpc_class(channel=channel or grpc.insecure_channel(target)))
    return client_class(
        transport="rest",
        client_options={"api_endpoint": target},
        credentials=AnonymousCredentials(),
    )


class Emulator:
    """ces_eval.emulator.v1.EmulatorService over a raw channel, messages from our descriptors."""

    def __init__(self, channel: grpc.Channel, descriptor_set: str) -> None:
        files = descriptor_pb2.FileDescriptorSet()
        with open(descriptor_set, "rb") as handle:
            files.ParseFromString(handle.read())
        self._pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            self._pool.Add(file)
        self._channel = channel

    def _seed(self, kind: type[Any], parent: str, message: Any, resource_id: str) -> Any:
        """EmulatorService.Create<kind> of ``message`` (an official client message)."""
        name = kind.__name__
        request_type = message_factory.GetMessageClass(
            self._pool.FindMessageTypeByName(f"ces_eval.emulator.v1.Create{name}Request")
        )
        field = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
        request = request_type(parent=parent, **{f"{field}_id": resource_id})
        getattr(request, field).MergeFromString(kind.serialize(message))
        call = self._channel.unary_unary(
            f"/ces_eval.emulator.v1.EmulatorService/Create{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=kind.deserialize,
        )
        return call(request, timeout=30)

    def create_result(
        self, parent: str, result: ces_v1beta.EvaluationResult, result_id: str = ""
    ) -> ces_v1beta.EvaluationResult:
        return self._seed(ces_v1beta.EvaluationResult, parent, result, result_id)

    def create_run(
        self, parent: str, run: ces_v1beta.EvaluationRun, run_id: str = ""
    ) -> ces_v1beta.EvaluationRun:
        return self._seed(ces_v1beta.EvaluationRun, parent, run, run_id)

    def create_conversation(
        self, parent: str, conversation: ces_v1beta.Conversation, conversation_id: str = ""
    ) -> ces_v1beta.Conversation:
        return self._seed(ces_v1beta.Conversation, parent, conversation, conversation_id)

    def _call(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        """EmulatorService.``method`` of a request given as proto3 JSON; the answer as JSON
        (outcome rules are no official client message)."""
        service = self._pool.FindServiceByName("ces_eval.emulator.v1.EmulatorService")
        found = service.FindMethodByName(method)
        request_message = json_format.ParseDict(
            request, message_factory.GetMessageClass(found.input_type)()
        )
        response_class = message_factory.GetMessageClass(found.output_type)
        call = self._channel.unary_unary(
            f"/ces_eval.emulator.v1.EmulatorService/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        return json_format.MessageToDict(call(request_message, timeout=30))

    def create_outcome_rule(self, parent: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self._call("CreateOutcomeRule", {"parent": parent, "outcomeRule": rule})

    def release_outcome_rule(self, name: str) -> dict[str, Any]:
        return self._call("ReleaseOutcomeRule", {"name": name})

    def delete_outcome_rule(self, name: str) -> None:
        self._call("DeleteOutcomeRule", {"name": name})

    def advance_clock(self, project: str, seconds: int) -> dict[str, Any]:
        return self._call("AdvanceClock", {"name": f"{project}/clock", "by": f"{seconds}s"})


class RestEmulator:
    """The emulator's REST bindings: POST /emulator/v1/{parent}/results?evaluationResultId=,
    POST /emulator/v1/{parent}/evaluationRuns?evaluationRunId=,
    POST /emulator/v1/{parent}/conversations?conversationId=."""

    def __init__(self, base: str) -> None:
        self._base = base

    def _seed(self, kind: type[Any], url: str, message: Any) -> Any:
        request = urllib.request.Request(
            url,
            data=kind.to_json(message).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return kind.from_json(response.read(), ignore_unknown_fields=False)

    def create_result(
        self, parent: str, result: ces_v1beta.EvaluationResult, result_id: str = ""
    ) -> ces_v1beta.EvaluationResult:
        url = f"{self._base}/emulator/v1/{parent}/results?evaluationResultId={result_id}"
        return self._seed(ces_v1beta.EvaluationResult, url, result)

    def create_run(
        self, parent: str, run: ces_v1beta.EvaluationRun, run_id: str = ""
    ) -> ces_v1beta.EvaluationRun:
        url = f"{self._base}/emulator/v1/{parent}/evaluationRuns?evaluationRunId={run_id}"
        return self._seed(ces_v1beta.EvaluationRun, url, run)

    def create_conversation(
        self, parent: str, conversation: ces_v1beta.Conversation, conversation_id: str = ""
    ) -> ces_v1beta.Conversation:
        url = f"{self._base}/emulator/v1/{parent}/conversations?conversationId={conversation_id}"
        return self._seed(ces_v1beta.Conversation, url, conversation)

    def _json(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer

    def create_outcome_rule(self, parent: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"{self._base}/emulator/v1/{parent}/outcomeRules", rule)

    def release_outcome_rule(self, name: str) -> dict[str, Any]:
        return self._json("POST", f"{self._base}/emulator/v1/{name}:release", {})

    def delete_outcome_rule(self, name: str) -> None:
        self._json("DELETE", f"{self._base}/emulator/v1/{name}", None)

    def advance_clock(self, project: str, seconds: int) -> dict[str, Any]:
        url = f"{self._base}/emulator/v1/{project}/clock:advance"
        return self._json("POST", url, {"by": f"{seconds}s"})


@dataclass(frozen=True)
class Wired:
    """What a scenario drives: the official client and our emulator's client of the servers
    under test (:func:`wiring`), and the transport they use."""

    transport: str
    client: Any
    emulator: Any
    agents: Any  # the official AgentService client

    def app(self, project: str) -> str:
        """An app of ``project`` of its own for this transport, so that the gRPC and REST runs
        of a scenario against one server do not meet."""
        return f"projects/{project}/locations/us-central1/apps/{self.transport}"


def main(scenario: Callable[..., object]) -> NoReturn:
    """Run ``scenario(wired, *arguments)`` from the command line (the module's docstring) and
    exit: 0 when it returns, non-zero with the traceback when it raises."""
    transport, targets, descriptor_set, *arguments = sys.argv[1:]
    client, emulator, agents = wiring(transport, targets, descriptor_set)
    scenario(Wired(transport, client, emulator, agents), *arguments)
    sys.exit(0)
