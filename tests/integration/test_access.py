"""``serve --auth-tokens``: authentication and per-project access on gRPC, REST and MCP.

One server with four principals (tests/support/tokens.py): alice (read-write on proj-a), bob
(read-write on proj-b), reader (read-only on proj-a) and admin (every project, token stored
hashed). Alice owns an evaluation, a result and an export in proj-a; every method of every
service, on every surface, is then driven with bob's token against alice's resources (and
against names that do not exist), descriptor-driven, so a method added later is covered too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import httpx
import pytest
from google.cloud.location import locations_pb2
from google.longrunning import operations_pb2
from google.protobuf import descriptor, json_format, message_factory
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from ces_eval.access import method_access
from ces_eval.contract import schema
from ces_eval.contract.fields import required_fields
from ces_eval.core.aip.standard import StandardMethod
from ces_eval.core.service import RPCS, implements
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.generated.google.cloud.ces.v1beta import conversation_pb2, evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.surfaces.mcp_tools import tool_specs
from ces_eval.testing.server import RunningServer, run_serve, start_server
from tests.support.load import golden_evaluation
from tests.support.mcp import ACCEPT, tool_call
from tests.support.tokens import ADMIN, ALICE, BOB, READER, guarded_server

PROJECT_A = "projects/proj-a"
LOCATION_A = f"{PROJECT_A}/locations/us"
APP_A = f"{LOCATION_A}/apps/app"
APP_B = "projects/proj-b/locations/us/apps/app"
_VARIABLE = re.compile(r"\{([a-z_.]+)=([^}]*)\}")


class Owned:
    """The resources alice created in proj-a."""

    evaluation: evaluation_pb2.Evaluation
    result: evaluation_pb2.EvaluationResult
    operation: operations_pb2.Operation
    # The other resources alice created (an expectation, a scheduled run, ...; an evaluation
    # run and any resource without a seed of its own as _seed_the_rest makes them).
    others: list[Message]

    def names(self) -> list[str]:
        return [
            PROJECT_A,
            f"{PROJECT_A}/clock",  # every project has its clock
            LOCATION_A,
            f"{LOCATION_A}/securitySettings",  # and every location its security settings
            APP_A,
            f"{APP_A}/sessions/s",  # a session is named by its caller, never created
            self.evaluation.name,
            self.result.name,
            self.operation.name,
            *(getattr(other, "name") for other in self.others),  # noqa: B009
        ]


def _auth(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def _call(
    server: RunningServer, method: descriptor.MethodDescriptor, request: Message, token: str | None
) -> Any:
    path = f"/{method.containing_service.full_name}/{method.name}"
    response_class = message_factory.GetMessageClass(method.output_type)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = channel.unary_unary(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        return stub(request, timeout=30, metadata=_auth(token) if token else None)


def _methods() -> list[descriptor.MethodDescriptor]:
    return [m for s in schema.services() for m in s.methods if implements(m)]


def _method(name: str, service: str = "") -> descriptor.MethodDescriptor:
    """The implemented method ``name`` (of ``service`` where two services have one)."""
    return next(
        m
        for m in _methods()
        if m.name == name and (not service or m.containing_service.name == service)
    )


def _status(error: grpc.RpcError) -> status_pb2.Status:
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    raise AssertionError(f"no status details in {error}")


def _reason(status: status_pb2.Status) -> str:
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    return str(info.reason)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with guarded_server(tmp_path_factory.mktemp("access")) as running:
        yield running


@pytest.fixture(scope="module")
def owned(server: RunningServer) -> Owned:
    found = Owned()
    found.evaluation = _call(
        server,
        _method("CreateEvaluation"),
        service_pb2.CreateEvaluationRequest(
            parent=APP_A, evaluation=golden_evaluation("alice's"), evaluation_id="mine"
        ),
        ALICE,
    )
    result = evaluation_pb2.EvaluationResult(display_name="run 1")
    result.execution_state = evaluation_pb2.EvaluationResult.ExecutionState.COMPLETED
    result.evaluation_status = evaluation_pb2.EvaluationResult.Outcome.PASS
    found.result = _call(
        server,
        _method("CreateEvaluationResult"),
        emulator_pb2.CreateEvaluationResultRequest(
            parent=found.evaluation.name, evaluation_result=result
        ),
        ALICE,
    )
    dataset = _call(
        server,
        _method("CreateEvaluationDataset"),
        service_pb2.CreateEvaluationDatasetRequest(
            parent=APP_A,
            evaluation_dataset=evaluation_pb2.EvaluationDataset(
                display_name="alice's", evaluations=[found.evaluation.name]
            ),
        ),
        ALICE,
    )
    # The result and the dataset changed the evaluation's etag and derived fields: read it again.
    found.evaluation = _call(
        server,
        _method("GetEvaluation"),
        service_pb2.GetEvaluationRequest(name=found.evaluation.name),
        ALICE,
    )
    operation = _call(
        server,
        _method("ExportEvaluations"),
        service_pb2.ExportEvaluationsRequest(
            parent=APP_A,
            names=[found.evaluation.name],
            include_evaluations=True,
            include_evaluation_results=True,
            export_options=service_pb2.ExportOptions(gcs_uri="gs://shared-bucket/alice"),
        ),
        ALICE,
    )
    found.operation = _call(
        server,
        _method("WaitOperation"),
        operations_pb2.WaitOperationRequest(name=operation.name),
        ALICE,
    )
    assert found.operation.done
    assert not found.operation.HasField("error"), found.operation.error
    expectation = evaluation_pb2.EvaluationExpectation(
        display_name="alice's", llm_criteria={"prompt": "Polite."}
    )
    conversation = conversation_pb2.Conversation(
        turns=[{"messages": [{"role": "user", "chunks": [{"text": "alice's"}]}]}]
    )
    found.others = [
        _call(
            server,
            _method("CreateConversation"),
            emulator_pb2.CreateConversationRequest(parent=APP_A, conversation=conversation),
            ALICE,
        ),
        _call(
            server,
            _method("CreateEvaluationExpectation"),
            service_pb2.CreateEvaluationExpectationRequest(
                parent=APP_A, evaluation_expectation=expectation
            ),
            ALICE,
        ),
        dataset,
        _call(
            server,
            _method("CreateOutcomeRule"),
            emulator_pb2.CreateOutcomeRuleRequest(
                parent=APP_A,
                outcome_rule=emulator_pb2.OutcomeRule(display_name="alice's", tag="never-used"),
            ),
            ALICE,
        ),
        _call(
            server,
            _method("UpdateAgentEndpoint"),
            emulator_pb2.UpdateAgentEndpointRequest(
                agent_endpoint=emulator_pb2.AgentEndpoint(
                    name=f"{APP_A}/agentEndpoint", uri="http://127.0.0.1:9/alice"
                )
            ),
            ALICE,
        ),
    ]
    schedule = evaluation_pb2.ScheduledEvaluationRun(display_name="alice's nightly")
    schedule.request.app = APP_A
    schedule.request.evaluations.append(found.evaluation.name)
    schedule.scheduling_config.frequency = schedule.SchedulingConfig.Frequency.DAILY
    schedule.scheduling_config.start_time.FromSeconds(4107576600)
    found.others.append(
        _call(
            server,
            _method("CreateScheduledEvaluationRun"),
            service_pb2.CreateScheduledEvaluationRunRequest(
                parent=APP_A, scheduled_evaluation_run=schedule
            ),
            ALICE,
        )
    )
    _seed_the_rest(server, found)
    return found


def _seed_the_rest(server: RunningServer, found: Owned) -> None:
    """One of every other resource a standard Create serves, built from its declaration alone
    (a display name where it has one, its other REQUIRED fields set), under alice's resource of
    its parent's shape: the
    denials cover its methods too without a line here."""
    seeded = {found.evaluation.DESCRIPTOR, found.result.DESCRIPTOR}
    seeded |= {other.DESCRIPTOR for other in found.others}
    for path, rpc in RPCS.items():
        if not isinstance(rpc, StandardMethod) or rpc.verb != "Create":
            continue
        resource = rpc.resource
        if resource.message.DESCRIPTOR in seeded:
            continue
        body = resource.message()
        if "display_name" in resource.fields:
            setattr(body, "display_name", "alice's")  # noqa: B010 - the field is found by name
        for field in required_fields(body.DESCRIPTOR):  # a deployment's channel_profile
            if field.message_type is not None:
                getattr(body, field.name).SetInParent()
            elif field.type == field.TYPE_STRING and not getattr(body, field.name):
                setattr(body, field.name, "alice's")
        method = schema.methods()[path]
        parent = _name_for(re.sub(r"\{[^}]+\}", "*", resource.parent.pattern), found, missing=False)
        request = message_factory.GetMessageClass(method.input_type)(parent=parent)
        getattr(request, resource.field).CopyFrom(body)
        found.others.append(_call(server, method, request, ALICE))
        seeded.add(resource.message.DESCRIPTOR)
    # Agent recordings come from runs and imports: one imported (docs/agents.md).
    recording = emulator_pb2.AgentRecording(
        callee=emulator_pb2.AgentRecording.AGENT,
        evaluation=found.evaluation.name,
        request="{}",
        answer=b"{}",
    )
    _call(
        server,
        _method("ImportAgentRecordings"),
        emulator_pb2.ImportAgentRecordingsRequest(
            parent=APP_A, content=json_format.MessageToJson(recording, indent=None).encode()
        ),
        ALICE,
    )
    # A resource no caller creates (an app's changelog entries, agent recordings): the first
    # its List gives.
    for path, rpc in RPCS.items():
        resource = rpc.resource if isinstance(rpc, StandardMethod) else None
        if resource is None or rpc.verb != "List" or resource.message.DESCRIPTOR in seeded:
            continue
        method = schema.methods()[path]
        parent = _name_for(re.sub(r"\{[^}]+\}", "*", resource.parent.pattern), found, missing=False)
        listed = _call(
            server, method, message_factory.GetMessageClass(method.input_type)(parent=parent), ALICE
        )
        items = next(value for field, value in listed.ListFields() if field.is_repeated)
        found.others.append(items[0])
        seeded.add(resource.message.DESCRIPTOR)


def _name_for(pattern: str, owned: Owned, *, missing: bool) -> str:
    """The resource of alice's matching ``pattern`` (``projects/*/locations/*/apps/*``...), or
    a name of the same shape that does not exist."""
    wanted = pattern.split("/")
    for name in owned.names():
        segments = name.split("/")
        if len(segments) == len(wanted) and all(
            w in {"*", s} for w, s in zip(wanted, segments, strict=True)
        ):
            # Missing: its last ID (an app's, for a singleton such as agentEndpoint) changed.
            last = max(index for index, part in enumerate(wanted) if part == "*")
            if missing and last > 3:
                segments[last] += "-gone"
            return "/".join(segments)
    raise AssertionError(f"no resource of the shape {pattern}")


def _patterns(method: descriptor.MethodDescriptor) -> dict[str, str]:
    """Field path → resource pattern, from the HTTP template (WaitOperation: its name is an
    operation)."""
    for binding in schema.http_bindings():
        if binding.method is method:
            return dict(_VARIABLE.findall(binding.template))
    return {
        ".".join(path): "projects/*/locations/*/operations/*"
        for path in method_access(method).fields
    }


def _request(method: descriptor.MethodDescriptor, owned: Owned, *, missing: bool) -> Message:
    request = message_factory.GetMessageClass(method.input_type)()
    for path, pattern in _patterns(method).items():
        *parents, last = path.split(".")
        target = request
        for part in parents:
            target = getattr(target, part)
        setattr(target, last, _name_for(pattern, owned, missing=missing))
    return request


def _assert_denied_alike(messages: dict[str, str], owned: Owned) -> None:
    """Denials for existing and missing resources read the same, names aside."""
    shapes = {
        label: re.sub(r"'projects/[^']*'", "'NAME'", text) for label, text in messages.items()
    }
    for label, text in messages.items():
        assert "(or it may not exist)" in text, (label, text)
    by_method: dict[str, set[str]] = {}
    for label, shape in shapes.items():
        by_method.setdefault(label.split(" ")[0], set()).add(shape)
    for method_name, seen in by_method.items():
        assert len(seen) == 1, (method_name, seen)
    assert owned.evaluation.name  # the resources the denials were about did exist


def _unchanged(server: RunningServer, owned: Owned) -> None:
    evaluation = _call(
        server,
        _method("GetEvaluation"),
        service_pb2.GetEvaluationRequest(name=owned.evaluation.name),
        ALICE,
    )
    assert evaluation.etag == owned.evaluation.etag
    listed = _call(
        server,
        _method("ListEvaluationResults"),
        service_pb2.ListEvaluationResultsRequest(parent=f"{APP_A}/evaluations/-"),
        ALICE,
    )
    assert [r.name for r in listed.evaluation_results] == [owned.result.name]
    operation = _call(
        server,
        _method("GetOperation"),
        operations_pb2.GetOperationRequest(name=owned.operation.name),
        ALICE,
    )
    assert operation == owned.operation
    for other in owned.others:
        method = _method(f"Get{other.DESCRIPTOR.name}")
        request = message_factory.GetMessageClass(method.input_type)(
            name=getattr(other, "name")  # noqa: B009
        )
        assert _call(server, method, request, ALICE) == other


def test_grpc_refuses_every_method_on_a_foreign_project(
    server: RunningServer, owned: Owned
) -> None:
    messages: dict[str, str] = {}
    for method in _methods():
        for missing in (False, True):
            with pytest.raises(grpc.RpcError) as caught:
                _call(server, method, _request(method, owned, missing=missing), BOB)
            error = caught.value
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED, (method.name, error)
            status = _status(error)
            assert _reason(status) == "IAM_PERMISSION_DENIED"
            messages[f"{method.name} {missing}"] = status.message
    _assert_denied_alike(messages, owned)
    _unchanged(server, owned)


def test_rest_refuses_every_binding_on_a_foreign_project_before_reading_the_body(
    server: RunningServer, owned: Owned
) -> None:
    messages: dict[str, str] = {}
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        for binding in schema.http_bindings():
            if not implements(binding.method):
                continue
            for missing in (False, True):
                path = _VARIABLE.sub(
                    lambda m, gone=missing: _name_for(m.group(2), owned, missing=gone),
                    binding.template,
                )
                # A body this method would refuse: authorization answers first.
                body = b'{"noSuchField": [' if binding.body else None
                response = http.request(
                    binding.verb,
                    quote(path, safe="/:"),
                    content=body,
                    # JSON, as clients send it: another type is refused before anything else.
                    headers={"authorization": f"Bearer {BOB}", "content-type": "application/json"},
                    params={"unknownParameter": "1"},
                )
                assert response.status_code == 403, (binding.template, response.text)
                error = response.json()["error"]
                assert error["status"] == "PERMISSION_DENIED"
                assert error["details"][0]["reason"] == "IAM_PERMISSION_DENIED"
                messages[f"{binding.method.name}:{binding.verb} {missing}"] = error["message"]
    _assert_denied_alike(messages, owned)
    _unchanged(server, owned)


def _mcp(http: httpx.Client, token: str | None, body: dict[str, Any]) -> httpx.Response:
    headers = {"accept": ACCEPT}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return http.post("/mcp", headers=headers, json=body)


def test_mcp_refuses_every_tool_on_a_foreign_project(server: RunningServer, owned: Owned) -> None:
    messages: dict[str, str] = {}
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        for name, spec in tool_specs().items():
            for missing in (False, True):
                arguments = json_format.MessageToDict(_request(spec.method, owned, missing=missing))
                arguments["notAField"] = 1  # schema-invalid: authorization answers first
                response = _mcp(http, BOB, tool_call(name, arguments))
                assert response.status_code == 200, response.text
                result = response.json()["result"]
                assert result["isError"] is True, (name, result)
                error = json.loads(result["content"][0]["text"])["error"]
                assert (error["code"], error["status"]) == (403, "PERMISSION_DENIED"), name
                messages[f"{name} {missing}"] = error["message"]
    _assert_denied_alike(messages, owned)
    _unchanged(server, owned)


def test_wildcard_lists_and_operations_stay_within_the_callers_projects(
    server: RunningServer, owned: Owned
) -> None:
    bob_evaluation = _call(
        server,
        _method("CreateEvaluation"),
        service_pb2.CreateEvaluationRequest(
            parent=APP_B, evaluation=golden_evaluation("bob's"), evaluation_id="mine"
        ),
        BOB,
    )
    listed = _call(
        server,
        _method("ListEvaluationResults"),
        service_pb2.ListEvaluationResultsRequest(parent=f"{APP_B}/evaluations/-"),
        BOB,
    )
    assert list(listed.evaluation_results) == []
    evaluations = _call(
        server, _method("ListEvaluations"), service_pb2.ListEvaluationsRequest(parent=APP_B), BOB
    )
    assert [e.name for e in evaluations.evaluations] == [bob_evaluation.name]
    operations = _call(
        server,
        _method("ListOperations"),
        operations_pb2.ListOperationsRequest(name="projects/proj-b/locations/us"),
        BOB,
    )
    assert list(operations.operations) == []
    for parent in ("projects/-/locations/us/apps/app/evaluations/-", "projects/-"):
        with pytest.raises(grpc.RpcError) as caught:
            _call(
                server,
                _method("ListEvaluationResults"),
                service_pb2.ListEvaluationResultsRequest(parent=parent),
                BOB,
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert owned.operation.done


def test_exports_live_in_a_bucket_namespace_per_project(
    server: RunningServer, owned: Owned
) -> None:
    """gs:// paths are per project with --auth-tokens: bob cannot import alice's export by
    naming the same bucket, and his own export of the same path does not overwrite hers."""
    response = service_pb2.ExportEvaluationsResponse()
    assert owned.operation.response.Unpack(response)
    uri = response.evaluations_uri
    assert uri.startswith("gs://shared-bucket/alice/")
    alice_file = server.export_dir / "proj-a" / uri.removeprefix("gs://")
    assert alice_file.is_file()
    with pytest.raises(grpc.RpcError) as caught:
        _call(
            server,
            _method("ImportEvaluations", "EmulatorService"),
            emulator_pb2.ImportEvaluationsRequest(parent=APP_B, gcs_uri=uri),
            BOB,
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # no such object for bob
    assert "not found" in (caught.value.details() or "")
    with pytest.raises(grpc.RpcError) as official:  # nor through EvaluationService's import
        _call(
            server,
            _method("ImportEvaluations", "EvaluationService"),
            service_pb2.ImportEvaluationsRequest(parent=APP_B, gcs_uri=uri),
            BOB,
        )
    assert official.value.code() == grpc.StatusCode.NOT_FOUND
    imported = _call(  # the owner project, by the admin token: the file is found
        server,
        _method("ImportEvaluations", "EmulatorService"),
        emulator_pb2.ImportEvaluationsRequest(parent=f"{LOCATION_A}/apps/copy", gcs_uri=uri),
        ADMIN,
    )
    assert imported.imported_evaluation_results == 1


def test_read_only_tokens_read_but_never_write(server: RunningServer, owned: Owned) -> None:
    got = _call(
        server,
        _method("GetEvaluation"),
        service_pb2.GetEvaluationRequest(name=owned.evaluation.name),
        READER,
    )
    assert got.name == owned.evaluation.name
    for method_name, request in (
        (
            "CreateEvaluation",
            service_pb2.CreateEvaluationRequest(
                parent=APP_A, evaluation=golden_evaluation("reader's")
            ),
        ),
        (
            "DeleteEvaluationResult",
            service_pb2.DeleteEvaluationResultRequest(name=owned.result.name),
        ),
        ("ResetProject", emulator_pb2.ResetProjectRequest(name=PROJECT_A)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            _call(server, _method(method_name), request, READER)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, method_name
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        response = http.get(f"/v1beta/{owned.evaluation.name}", params={"access_token": READER})
        assert response.status_code == 200, response.text
        response = _mcp(
            http, READER, tool_call("delete_evaluation", {"name": owned.evaluation.name})
        )
        error = json.loads(response.json()["result"]["content"][0]["text"])["error"]
        assert error["status"] == "PERMISSION_DENIED"
    _unchanged(server, owned)


def test_only_a_token_of_every_project_resets_every_project(tmp_path: Path) -> None:
    """``projects/-`` reaches every project: a token of some projects is denied it, as for a
    project of someone else's, and nothing is deleted; a token of every project may. (A server
    of its own: the reset empties it.)"""
    every = emulator_pb2.ResetProjectRequest(name="projects/-")
    with guarded_server(tmp_path) as server:
        created = _call(
            server,
            _method("CreateEvaluation"),
            service_pb2.CreateEvaluationRequest(
                parent=APP_A, evaluation=golden_evaluation("to reset")
            ),
            ALICE,
        )
        read = service_pb2.GetEvaluationRequest(name=created.name)
        for token in (ALICE, BOB, READER):
            with pytest.raises(grpc.RpcError) as caught:
                _call(server, _method("ResetProject", "EmulatorService"), every, token)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, token
        assert _call(server, _method("GetEvaluation"), read, ALICE) == created
        reset = _call(server, _method("ResetProject", "EmulatorService"), every, ADMIN)
        assert reset.deleted_evaluations == 1
        with pytest.raises(grpc.RpcError) as caught:
            _call(server, _method("GetEvaluation"), read, ADMIN)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_token_names_the_author_whatever_x_goog_user_claims(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = channel.unary_unary(
            f"/{_method('CreateEvaluation').containing_service.full_name}/CreateEvaluation",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=evaluation_pb2.Evaluation.FromString,
        )
        created = stub(
            service_pb2.CreateEvaluationRequest(
                parent=APP_A, evaluation=golden_evaluation("authored")
            ),
            timeout=30,
            metadata=[*_auth(ALICE), ("x-goog-user", "mallory@example.com")],
        )
    assert created.created_by == created.last_updated_by == "alice"


@pytest.mark.parametrize(
    ("token", "reason"),
    [(None, "CREDENTIALS_MISSING"), ("not-a-valid-token-at-all", "ACCESS_TOKEN_INVALID")],
)
def test_every_surface_authenticates(
    server: RunningServer, owned: Owned, token: str | None, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _call(
            server,
            _method("GetEvaluation"),
            service_pb2.GetEvaluationRequest(name=owned.evaluation.name),
            token,
        )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _reason(_status(caught.value)) == reason
    challenge = 'Bearer realm="ces-eval"' + (', error="invalid_token"' if token else "")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        for response in (
            http.get(f"/v1beta/{owned.evaluation.name}", headers=headers),
            http.get("/v1beta/no/such/path", headers=headers),
            _mcp(http, token, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ):
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == challenge
            error = response.json()["error"]
            if response.request.url.path == "/mcp":
                # A JSON-RPC error (id null) carrying Google's error, as every /mcp refusal;
                # before: Google's bare envelope, which MCP clients cannot read.
                assert response.json()["jsonrpc"] == "2.0"
                assert response.json()["id"] is None
                assert error["code"] == -32000
                assert error["message"] == error["data"]["message"]
                error = error["data"]
                assert error["code"] == 401
            assert (error["status"], error["details"][0]["reason"]) == ("UNAUTHENTICATED", reason)
            assert [d["@type"] for d in error["details"]].count(
                "type.googleapis.com/google.rpc.ErrorInfo"
            ) == 1
        # Readiness and the API description stay open for load balancers and tooling.
        assert http.get("/healthz").status_code == 200
        assert http.get("/openapi.json").status_code == 200


def test_admin_and_owner_work_on_all_three_surfaces(server: RunningServer, owned: Owned) -> None:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        for token in (ALICE, ADMIN):
            response = http.get(
                f"/v1beta/{owned.evaluation.name}", headers={"authorization": f"Bearer {token}"}
            )
            assert response.status_code == 200, response.text
            response = _mcp(
                http, token, tool_call("get_evaluation", {"name": owned.evaluation.name})
            )
            result = response.json()["result"]
            assert result["isError"] is False, result
            assert result["structuredContent"]["name"] == owned.evaluation.name


def test_a_public_address_needs_tokens_or_an_explicit_opt_out(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'x.db'}"
    refused = run_serve(database, "--host", "0.0.0.0")  # noqa: S104 - the case under test
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0 without authentication" in refused.stderr
    for workers in ("1", "2"):
        refused = run_serve(database, "--host", "0.0.0.0", "--workers", workers)  # noqa: S104
        assert refused.returncode == 2, refused.stderr
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    tokens.chmod(0o600)
    broken = run_serve(database, "--auth-tokens", str(tokens))
    assert broken.returncode == 2
    assert "tokens must be a non-empty list" in broken.stderr
    assert not (tmp_path / "x.db").exists()  # refused before touching the database
    everywhere = "0.0.0.0"  # noqa: S104 - binding every interface is the case under test
    opened = start_server(tmp_path / "open.db", "--host", everywhere, "--allow-unauthenticated")
    try:
        base = opened.http_base.replace(everywhere, "127.0.0.1")
        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
    finally:
        assert opened.stop() == 0


def test_a_wrong_verb_on_a_foreign_resource_is_403_and_on_ones_own_405(
    server: RunningServer, owned: Owned
) -> None:
    with httpx.Client(base_url=server.http_base, timeout=30) as http:
        path = f"/v1beta/{owned.evaluation.name}"
        foreign = http.request("TRACE", path, headers={"authorization": f"Bearer {BOB}"})
        assert foreign.status_code == 403, foreign.text
        own = http.request("PUT", path, headers={"authorization": f"Bearer {ALICE}"})
        assert own.status_code == 405, own.text
        assert own.headers["allow"] == "GET, PATCH, DELETE"


def test_audio_and_locations_stay_in_their_project(server: RunningServer, owned: Owned) -> None:
    """An upload lands in its project's folder; bob can neither upload to alice's evaluation
    nor see her project's locations; each project lists only the locations it uses."""
    uploaded = _call(
        server,
        _method("UploadEvaluationAudio"),
        service_pb2.UploadEvaluationAudioRequest(name=owned.evaluation.name, audio_content=b"\0\0"),
        ALICE,
    )
    assert (server.export_dir / "proj-a" / uploaded.audio_gcs_uri.removeprefix("gs://")).is_file()
    for method, request in (
        (
            "UploadEvaluationAudio",
            service_pb2.UploadEvaluationAudioRequest(
                name=owned.evaluation.name, audio_content=b"\0\0"
            ),
        ),
        ("ListLocations", locations_pb2.ListLocationsRequest(name=PROJECT_A)),
        ("GetLocation", locations_pb2.GetLocationRequest(name=LOCATION_A)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            _call(server, _method(method), request, BOB)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
    mine = _call(
        server, _method("ListLocations"), locations_pb2.ListLocationsRequest(name=PROJECT_A), ALICE
    )
    assert [x.name for x in mine.locations] == [LOCATION_A]
    theirs = _call(
        server,
        _method("ListLocations"),
        locations_pb2.ListLocationsRequest(name="projects/proj-b"),
        BOB,
    )
    assert all(x.name.startswith("projects/proj-b/locations/") for x in theirs.locations)
