"""The OpenAPI 3.1 document generated from the HTTP rules (src/ces_eval/openapi.py).

The document under test is the one ``make generate`` writes and the server serves: that of the
bindings the REST surface serves (``rest.served_bindings``)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest
from google.longrunning import operations_pb2
from google.protobuf import json_format
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

import ces_eval
from ces_eval.contract.comments import comments
from ces_eval.contract.jsonschema import SchemaBuilder, iter_refs
from ces_eval.contract.openapi import (
    TITLE,
    PathParameter,
    _query_parameters,
    build_openapi,
    convert_template,
)
from ces_eval.contract.schema import HttpBinding, http_bindings
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2
from ces_eval.surfaces.rest import served_bindings
from tests.support.samples import populate
from tests.support.standard_routes import standard_routes
from tests.unit.test_jsonschema import KINDS

APP = "/projects/{project}/locations/{location}/apps/{app}"
EVAL = APP + "/evaluations/{evaluation}"
DATASET = APP + "/evaluationDatasets/{evaluationDataset}"
RESULT = EVAL + "/results/{result}"
EXPECTATION = APP + "/evaluationExpectations/{evaluationExpectation}"
RUN = APP + "/evaluationRuns/{evaluationRun}"
V1B = "google.cloud.ces.v1beta"
LOCATION = "/projects/{project}/locations/{location}"
OPERATION = LOCATION + "/operations/{operation}"
SCHEDULED = APP + "/scheduledEvaluationRuns/{scheduledEvaluationRun}"
CONVERSATION = APP + "/conversations/{conversation}"
RULE = APP + "/outcomeRules/{outcomeRule}"
SESSION = APP + "/sessions/{session}"

# operationId → (HTTP method, OpenAPI path): the custom methods' written out by hand, the
# standard methods' as AIP-127 and AIP-131..135 spell them from each resource's name pattern.
EXPECTED = {
    "EvaluationService_ExportEvaluations": ("post", f"/v1beta{APP}/evaluations:export"),
    "EvaluationService_ImportEvaluations": ("post", f"/v1beta{APP}:importEvaluations"),
    "EvaluationService_UploadEvaluationAudio": ("post", f"/v1beta{EVAL}:uploadEvaluationAudio"),
    "EvaluationService_TestPersonaVoice": ("post", f"/v1beta{APP}:testPersonaVoice"),
    "EvaluationService_ExportEvaluationResults": ("post", f"/v1beta{EVAL}/results:export"),
    "EvaluationService_RunEvaluationResultMetrics": (
        "post",
        f"/v1beta{RESULT}:runEvaluationResultMetrics",
    ),
    "EvaluationService_DeleteEvaluationRun": ("delete", f"/v1beta{RUN}"),
    "EvaluationService_ExportEvaluationRuns": ("post", f"/v1beta{APP}/evaluationRuns:export"),
    "EvaluationService_RunEvaluation": ("post", f"/v1beta{APP}:runEvaluation"),
    "EvaluationService_GenerateEvaluation": ("post", f"/v1beta{CONVERSATION}:generateEvaluation"),
    "AgentService_GetConversation": ("get", f"/v1beta{CONVERSATION}"),
    "SessionService_RunSession": ("post", f"/v1beta{SESSION}:runSession"),
    "SessionService_StreamRunSession": ("post", f"/v1beta{SESSION}:streamRunSession"),
    "WidgetService_GenerateChatToken": ("post", f"/v1beta{SESSION}:generateChatToken"),
    "ToolService_ExecuteTool": ("post", f"/v1beta{APP}:executeTool"),
    "ToolService_RetrieveToolSchema": ("post", f"/v1beta{APP}:retrieveToolSchema"),
    "ToolService_RetrieveTools": ("post", f"/v1beta{APP}/toolsets/{{toolset}}:retrieveTools"),
    "AgentService_ListConversations": ("get", f"/v1beta{APP}/conversations"),
    "AgentService_DeleteConversation": ("delete", f"/v1beta{CONVERSATION}"),
    "AgentService_BatchDeleteConversations": (
        "post",
        f"/v1beta{APP}/conversations:batchDelete",
    ),
    "AgentService_GetSecuritySettings": ("get", f"/v1beta{LOCATION}/securitySettings"),
    "AgentService_UpdateSecuritySettings": ("patch", f"/v1beta{LOCATION}/securitySettings"),
    "AgentService_GenerateAppResource": ("post", f"/v1beta{APP}:generateAppResource"),
    "AgentService_CreateApp": ("post", f"/v1beta{LOCATION}/apps"),
    "AgentService_UpdateApp": ("patch", f"/v1beta{APP}"),
    "AgentService_DeleteApp": ("delete", f"/v1beta{APP}"),
    "AgentService_ExportApp": ("post", f"/v1beta{APP}:exportApp"),
    "AgentService_ImportApp": ("post", f"/v1beta{LOCATION}/apps:importApp"),
    "AgentService_RestoreAppVersion": ("post", f"/v1beta{APP}/versions/{{version}}:restore"),
    "EmulatorService_GetConversation": ("get", f"/emulator/v1{CONVERSATION}"),
    "EmulatorService_ListConversations": ("get", f"/emulator/v1{APP}/conversations"),
    "EmulatorService_ReleaseOutcomeRule": ("post", f"/emulator/v1{RULE}:release"),
    "EmulatorService_ImportEvaluations": ("post", f"/emulator/v1{APP}:importEvaluations"),
    "EmulatorService_ResetProject": ("post", "/emulator/v1/projects/{project}:reset"),
    "EmulatorService_FireScheduledEvaluationRun": ("post", f"/emulator/v1{SCHEDULED}:fire"),
    "EmulatorService_AdvanceClock": ("post", "/emulator/v1/projects/{project}/clock:advance"),
    "EmulatorService_GetProjectClock": ("get", "/emulator/v1/projects/{project}/clock"),
    "EmulatorService_GetAgentEndpoint": ("get", f"/emulator/v1{APP}/agentEndpoint"),
    "EmulatorService_UpdateAgentEndpoint": ("patch", f"/emulator/v1{APP}/agentEndpoint"),
    "EmulatorService_PurgeAgentRecordings": ("post", f"/emulator/v1{APP}/agentRecordings:purge"),
    "EmulatorService_ExportAgentRecordings": (
        "post",
        f"/emulator/v1{APP}/agentRecordings:export",
    ),
    "EmulatorService_ImportAgentRecordings": (
        "post",
        f"/emulator/v1{APP}/agentRecordings:import",
    ),
    "Operations_ListOperations": ("get", f"/v1beta{LOCATION}/operations"),
    "Operations_GetOperation": ("get", f"/v1beta{OPERATION}"),
    "Operations_DeleteOperation": ("delete", f"/v1beta{OPERATION}"),
    "Operations_CancelOperation": ("post", f"/v1beta{OPERATION}:cancel"),
    "Locations_GetLocation": ("get", f"/v1beta{LOCATION}"),
    "Locations_ListLocations": ("get", "/v1beta/projects/{project}/locations"),
    **{route.operation_id: (route.verb.lower(), route.path) for route in standard_routes()},
}

# operationId → query parameters besides $alt.
QUERY = {
    "EvaluationService_CreateEvaluation": ["evaluationId"],
    "EvaluationService_GetEvaluation": [],
    "EvaluationService_ListEvaluations": [
        "pageSize",
        "pageToken",
        "filter",
        "evaluationFilter",
        "evaluationRunFilter",
        "orderBy",
        "lastTenResults",
    ],
    "EvaluationService_UpdateEvaluation": ["updateMask"],
    "EvaluationService_DeleteEvaluation": ["force", "etag"],
    "EvaluationService_CreateEvaluationDataset": ["evaluationDatasetId"],
    "EvaluationService_GetEvaluationDataset": [],
    "EvaluationService_ListEvaluationDatasets": ["pageSize", "pageToken", "filter", "orderBy"],
    "EvaluationService_UpdateEvaluationDataset": ["updateMask"],
    "EvaluationService_DeleteEvaluationDataset": ["etag"],
    "EvaluationService_ExportEvaluations": [],
    "EvaluationService_ImportEvaluations": [],
    "EvaluationService_UploadEvaluationAudio": [],
    "EvaluationService_TestPersonaVoice": [],
    "EvaluationService_GetEvaluationResult": [],
    "EvaluationService_ListEvaluationResults": ["pageSize", "pageToken", "filter", "orderBy"],
    "EvaluationService_DeleteEvaluationResult": [],
    "EvaluationService_ExportEvaluationResults": [],
    "EvaluationService_RunEvaluationResultMetrics": [],
    "EvaluationService_CreateEvaluationExpectation": ["evaluationExpectationId"],
    "EvaluationService_GetEvaluationExpectation": [],
    "EvaluationService_ListEvaluationExpectations": [
        "pageSize",
        "pageToken",
        "filter",
        "orderBy",
    ],
    "EvaluationService_CreateScheduledEvaluationRun": ["scheduledEvaluationRunId"],
    "EvaluationService_GetScheduledEvaluationRun": [],
    "EvaluationService_ListScheduledEvaluationRuns": [
        "pageSize",
        "pageToken",
        "filter",
        "orderBy",
    ],
    "EvaluationService_UpdateEvaluationExpectation": ["updateMask"],
    "EvaluationService_DeleteEvaluationExpectation": ["etag"],
    "EvaluationService_UpdateScheduledEvaluationRun": ["updateMask"],
    "EvaluationService_DeleteScheduledEvaluationRun": ["etag"],
    "EvaluationService_GetEvaluationRun": [],
    "EvaluationService_ListEvaluationRuns": ["pageSize", "pageToken", "filter", "orderBy"],
    "EvaluationService_DeleteEvaluationRun": [],
    "EvaluationService_ExportEvaluationRuns": [],
    "EvaluationService_RunEvaluation": [],
    "EvaluationService_GenerateEvaluation": [],
    "EmulatorService_CreateEvaluationResult": ["evaluationResultId"],
    "EmulatorService_CreateConversation": ["conversationId"],
    "EmulatorService_GetConversation": [],
    "AgentService_GetConversation": ["source"],
    "AgentService_ListConversations": ["pageSize", "pageToken", "filter", "source", "sources"],
    "AgentService_DeleteConversation": ["source"],
    "AgentService_BatchDeleteConversations": [],
    "AgentService_GetSecuritySettings": [],
    "AgentService_UpdateSecuritySettings": ["updateMask"],
    "AgentService_GenerateAppResource": [],
    "AgentService_CreateApp": ["appId"],
    "AgentService_UpdateApp": ["updateMask"],
    "AgentService_DeleteApp": ["etag"],
    "AgentService_ExportApp": [],
    "AgentService_ImportApp": [],
    "AgentService_RestoreAppVersion": [],
    "EmulatorService_ListConversations": ["pageSize", "pageToken", "filter", "orderBy"],
    "EmulatorService_CreateEvaluationRun": ["evaluationRunId"],
    "EmulatorService_CreateOutcomeRule": ["outcomeRuleId"],
    "EmulatorService_GetOutcomeRule": [],
    "EmulatorService_ListOutcomeRules": ["pageSize", "pageToken", "filter", "orderBy"],
    "EmulatorService_DeleteOutcomeRule": ["etag"],
    "EmulatorService_ReleaseOutcomeRule": [],
    "EmulatorService_ImportEvaluations": [],
    "EmulatorService_ResetProject": [],
    "EmulatorService_FireScheduledEvaluationRun": [],
    "EmulatorService_AdvanceClock": [],
    "EmulatorService_GetProjectClock": [],
    "EmulatorService_GetAgentEndpoint": [],
    "EmulatorService_UpdateAgentEndpoint": ["updateMask"],
    "EmulatorService_GetAgentRecording": [],
    "EmulatorService_ListAgentRecordings": ["pageSize", "pageToken", "filter", "orderBy"],
    "EmulatorService_DeleteAgentRecording": ["etag"],
    "EmulatorService_PurgeAgentRecordings": [],
    "EmulatorService_ExportAgentRecordings": [],
    "EmulatorService_ImportAgentRecordings": [],
    "Operations_ListOperations": ["filter", "pageSize", "pageToken", "returnPartialSuccess"],
    "Operations_GetOperation": [],
    "Operations_DeleteOperation": [],
    "Operations_CancelOperation": [],
    "Locations_GetLocation": [],
    "Locations_ListLocations": ["filter", "pageSize", "pageToken"],
}

RESPONSES = {
    "EvaluationService_CreateEvaluation": f"{V1B}.Evaluation",
    "EvaluationService_GetEvaluation": f"{V1B}.Evaluation",
    "EvaluationService_ListEvaluations": f"{V1B}.ListEvaluationsResponse",
    "EvaluationService_UpdateEvaluation": f"{V1B}.Evaluation",
    "EvaluationService_ExportEvaluations": "google.longrunning.Operation",
    "EvaluationService_ImportEvaluations": "google.longrunning.Operation",
    "EvaluationService_UploadEvaluationAudio": f"{V1B}.UploadEvaluationAudioResponse",
    "EvaluationService_TestPersonaVoice": f"{V1B}.TestPersonaVoiceResponse",
    "EvaluationService_GetEvaluationResult": f"{V1B}.EvaluationResult",
    "EvaluationService_ListEvaluationResults": f"{V1B}.ListEvaluationResultsResponse",
    "EvaluationService_ExportEvaluationResults": "google.longrunning.Operation",
    "EvaluationService_RunEvaluationResultMetrics": "google.longrunning.Operation",
    "EvaluationService_CreateEvaluationDataset": f"{V1B}.EvaluationDataset",
    "EvaluationService_GetEvaluationDataset": f"{V1B}.EvaluationDataset",
    "EvaluationService_ListEvaluationDatasets": f"{V1B}.ListEvaluationDatasetsResponse",
    "EvaluationService_UpdateEvaluationDataset": f"{V1B}.EvaluationDataset",
    "EvaluationService_CreateEvaluationExpectation": f"{V1B}.EvaluationExpectation",
    "EvaluationService_GetEvaluationExpectation": f"{V1B}.EvaluationExpectation",
    "EvaluationService_ListEvaluationExpectations": f"{V1B}.ListEvaluationExpectationsResponse",
    "EvaluationService_UpdateEvaluationExpectation": f"{V1B}.EvaluationExpectation",
    "EvaluationService_GetEvaluationRun": f"{V1B}.EvaluationRun",
    "EvaluationService_ListEvaluationRuns": f"{V1B}.ListEvaluationRunsResponse",
    "EvaluationService_DeleteEvaluationRun": "google.longrunning.Operation",
    "EvaluationService_ExportEvaluationRuns": "google.longrunning.Operation",
    "EvaluationService_RunEvaluation": "google.longrunning.Operation",
    "EvaluationService_GenerateEvaluation": "google.longrunning.Operation",
    "EmulatorService_CreateEvaluationResult": f"{V1B}.EvaluationResult",
    "EmulatorService_CreateConversation": f"{V1B}.Conversation",
    "EmulatorService_GetConversation": f"{V1B}.Conversation",
    "AgentService_GetConversation": f"{V1B}.Conversation",
    "AgentService_ListConversations": f"{V1B}.ListConversationsResponse",
    "AgentService_BatchDeleteConversations": "google.longrunning.Operation",
    "AgentService_GetSecuritySettings": f"{V1B}.SecuritySettings",
    "AgentService_UpdateSecuritySettings": f"{V1B}.SecuritySettings",
    "AgentService_GenerateAppResource": "google.longrunning.Operation",
    "AgentService_CreateApp": "google.longrunning.Operation",
    "AgentService_UpdateApp": f"{V1B}.App",
    "AgentService_DeleteApp": "google.longrunning.Operation",
    "AgentService_ExportApp": "google.longrunning.Operation",
    "AgentService_ImportApp": "google.longrunning.Operation",
    "AgentService_RestoreAppVersion": "google.longrunning.Operation",
    "EmulatorService_ListConversations": "ces_eval.emulator.v1.ListConversationsResponse",
    "EmulatorService_CreateEvaluationRun": f"{V1B}.EvaluationRun",
    "EmulatorService_CreateOutcomeRule": "ces_eval.emulator.v1.OutcomeRule",
    "EmulatorService_GetOutcomeRule": "ces_eval.emulator.v1.OutcomeRule",
    "EmulatorService_ListOutcomeRules": "ces_eval.emulator.v1.ListOutcomeRulesResponse",
    "EmulatorService_ReleaseOutcomeRule": "ces_eval.emulator.v1.OutcomeRule",
    "EmulatorService_ImportEvaluations": "ces_eval.emulator.v1.ImportEvaluationsResponse",
    "EmulatorService_ResetProject": "ces_eval.emulator.v1.ResetProjectResponse",
    "EmulatorService_FireScheduledEvaluationRun": "google.longrunning.Operation",
    "EmulatorService_AdvanceClock": "ces_eval.emulator.v1.ProjectClock",
    "EmulatorService_GetProjectClock": "ces_eval.emulator.v1.ProjectClock",
    "EmulatorService_GetAgentEndpoint": "ces_eval.emulator.v1.AgentEndpoint",
    "EmulatorService_UpdateAgentEndpoint": "ces_eval.emulator.v1.AgentEndpoint",
    "Operations_ListOperations": "google.longrunning.ListOperationsResponse",
    "Operations_GetOperation": "google.longrunning.Operation",
    "Locations_GetLocation": "google.cloud.location.Location",
    "Locations_ListLocations": "google.cloud.location.ListLocationsResponse",
}
EMPTY_RESPONSES = {
    "AgentService_DeleteConversation",
    "EvaluationService_DeleteEvaluation",
    "EvaluationService_DeleteEvaluationResult",
    "EmulatorService_DeleteOutcomeRule",
    "Operations_DeleteOperation",
    "Operations_CancelOperation",
}


@cache
def _doc() -> dict[str, Any]:
    return build_openapi(served_bindings())


def _operations() -> dict[str, tuple[str, str, dict[str, Any]]]:
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for path, item in _doc()["paths"].items():
        for verb, operation in item.items():
            assert operation["operationId"] not in found
            found[operation["operationId"]] = (verb, path, operation)
    return found


def _operation(operation_id: str) -> dict[str, Any]:
    return _operations()[operation_id][2]


def _resolve(pointer: str) -> Any:
    node: Any = _doc()
    for part in pointer.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    """Validates against an OpenAPI schema; its refs resolve within the document's components."""
    return Draft202012Validator({**schema, "components": _doc()["components"]})


def _response_schema(operation_id: str) -> dict[str, Any]:
    schema: dict[str, Any] = _operation(operation_id)["responses"]["200"]["content"][
        "application/json"
    ]["schema"]
    return schema


def _body_schema(operation_id: str) -> dict[str, Any]:
    schema: dict[str, Any] = _operation(operation_id)["requestBody"]["content"]["application/json"][
        "schema"
    ]
    return schema


def test_document_is_valid_openapi_3_1() -> None:
    document = build_openapi(served_bindings(), server_url="http://127.0.0.1:8080")
    validate(document)
    assert list(OpenAPIV31SpecValidator(document).iter_errors()) == []
    assert document["openapi"] == "3.1.0"


def _operation_ids(document: dict[str, Any]) -> set[str]:
    return {op["operationId"] for item in document["paths"].values() for op in item.values()}


def _binding_id(binding: HttpBinding) -> str:
    return f"{binding.method.containing_service.name}_{binding.method.name}"


def test_document_of_every_declared_binding_is_valid_openapi_3_1() -> None:
    """By default the builder takes every binding our descriptors declare, those of methods
    the core does not implement (yet) included: their schemas must be sound too. The served
    document has the served bindings alone: RunEvaluation's, as the core implements it, and
    none of a method the core would lack."""
    document = build_openapi()
    validate(document)
    assert list(OpenAPIV31SpecValidator(document).iter_errors()) == []
    ids = _operation_ids(document)
    assert ids == {_binding_id(binding) for binding in http_bindings()}
    assert len(ids) == len(http_bindings())
    assert set(_operations()) == {_binding_id(binding) for binding in served_bindings()}
    assert "EvaluationService_RunEvaluation" in _operations()
    lacking = build_openapi([b for b in served_bindings() if b.method.name != "RunEvaluation"])
    assert _operation_ids(lacking) == set(_operations()) - {"EvaluationService_RunEvaluation"}


def test_info_and_servers() -> None:
    document = build_openapi(served_bindings(), server_url="http://127.0.0.1:9")
    assert document["info"]["title"] == TITLE
    assert TITLE == (
        "ces-eval — Customer Engagement Suite EvaluationService (google.cloud.ces.v1beta)"
    )
    assert document["info"]["version"] == ces_eval.__version__
    assert document["servers"] == [{"url": "http://127.0.0.1:9"}]
    assert "servers" not in build_openapi()


def test_every_binding_is_one_operation() -> None:
    operations = _operations()
    assert len(operations) == len(served_bindings()) == len(EXPECTED)
    assert {k: (verb, path) for k, (verb, path, _) in operations.items()} == EXPECTED
    templates = sorted(op["x-ces-eval-template"] for _, _, op in operations.values())
    assert templates == sorted(binding.template for binding in served_bindings())
    for binding in served_bindings():
        service, method = binding.method.containing_service.name, binding.method.name
        verb, _, operation = operations[f"{service}_{method}"]
        assert verb == binding.verb.lower()
        assert operation["x-ces-eval-template"] == binding.template


def test_the_standard_methods_routes_are_derived_as_written() -> None:
    """The derived routes of the standard methods, against some written out by hand."""
    assert {
        key: EXPECTED[key]
        for key in (
            "EvaluationService_CreateEvaluation",
            "EvaluationService_ListEvaluationResults",
            "EvaluationService_UpdateEvaluationExpectation",
            "EmulatorService_CreateEvaluationResult",
            "EmulatorService_DeleteOutcomeRule",
        )
    } == {
        "EvaluationService_CreateEvaluation": ("post", f"/v1beta{APP}/evaluations"),
        "EvaluationService_ListEvaluationResults": ("get", f"/v1beta{EVAL}/results"),
        "EvaluationService_UpdateEvaluationExpectation": ("patch", f"/v1beta{EXPECTATION}"),
        "EmulatorService_CreateEvaluationResult": ("post", f"/emulator/v1{EVAL}/results"),
        "EmulatorService_DeleteOutcomeRule": ("delete", f"/emulator/v1{RULE}"),
    }


def test_methods_of_one_path_share_its_item() -> None:
    item = _doc()["paths"][f"/v1beta{EVAL}"]
    assert sorted(item) == ["delete", "get", "patch"]
    assert sorted(_doc()["paths"][f"/v1beta{APP}/evaluations"]) == ["get", "post"]


@pytest.mark.parametrize(
    ("operation_id", "names", "field"),
    [
        (
            "EvaluationService_UpdateEvaluation",
            ["project", "location", "app", "evaluation"],
            "evaluation.name",
        ),
        (
            "EvaluationService_RunEvaluationResultMetrics",
            ["project", "location", "app", "evaluation", "result"],
            "evaluation_result_id",
        ),
        (
            "EvaluationService_ListEvaluationResults",
            ["project", "location", "app", "evaluation"],
            "parent",
        ),
        ("EmulatorService_ResetProject", ["project"], "name"),
        ("EvaluationService_RunEvaluation", ["project", "location", "app"], "app"),
    ],
)
def test_path_parameters(operation_id: str, names: list[str], field: str) -> None:
    _, path, operation = _operations()[operation_id]
    path_parameters = [p for p in operation["parameters"] if p.get("in") == "path"]
    assert [p["name"] for p in path_parameters] == names
    assert re.findall(r"\{([^}]+)\}", path) == names
    for parameter in path_parameters:
        assert parameter["required"] is True
        assert parameter["schema"] == {"type": "string", "pattern": "^[^/]+$"}
        assert f"`{field}`" in parameter["description"]


def test_every_path_placeholder_is_a_parameter() -> None:
    for _, path, operation in _operations().values():
        declared = [p["name"] for p in operation["parameters"] if p.get("in") == "path"]
        assert re.findall(r"\{([^}]+)\}", path) == declared


@pytest.mark.parametrize("operation_id", sorted(QUERY))
def test_query_parameters(operation_id: str) -> None:
    parameters = _operation(operation_id)["parameters"]
    query = [p["name"] for p in parameters if p.get("in") == "query"]
    assert query == QUERY[operation_id]
    assert parameters[-1] == {"$ref": "#/components/parameters/alt"}


def test_query_parameter_details() -> None:
    listing = {
        p.get("name"): p for p in _operation("EvaluationService_ListEvaluations")["parameters"]
    }
    assert listing["pageSize"]["schema"] == {
        "type": "integer",
        "minimum": -(2**31),
        "maximum": 2**31 - 1,
    }
    assert listing["filter"]["deprecated"] is True
    assert "deprecated" not in listing["evaluationFilter"]
    assert listing["lastTenResults"]["schema"] == {"type": "boolean"}
    assert listing["orderBy"]["description"] == comments()[f"{V1B}.ListEvaluationsRequest.order_by"]
    update = {
        p.get("name"): p for p in _operation("EvaluationService_UpdateEvaluation")["parameters"]
    }
    assert update["updateMask"]["schema"] == {"type": "string"}


def test_alt_system_parameter() -> None:
    alt = _doc()["components"]["parameters"]["alt"]
    assert alt["name"] == "$alt"
    assert alt["in"] == "query"
    assert alt["required"] is False
    assert alt["schema"]["enum"] == ["json", "json;enum-encoding=int"]


@pytest.mark.parametrize(
    ("operation_id", "ref"),
    [
        ("EvaluationService_CreateEvaluation", f"{V1B}.Evaluation-Input"),
        ("EvaluationService_UpdateEvaluation", f"{V1B}.Evaluation-Partial"),
        ("EmulatorService_CreateEvaluationResult", f"{V1B}.EvaluationResult-Input"),
    ],
)
def test_body_field(operation_id: str, ref: str) -> None:
    body = _operation(operation_id)["requestBody"]
    assert body["required"] is True
    assert body["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{ref}"}
    assert body["description"]


def test_body_star_is_the_request_without_path_fields() -> None:
    schema = _body_schema("EvaluationService_ExportEvaluations")
    assert list(schema["properties"]) == [
        "names",
        "exportOptions",
        "includeEvaluationResults",
        "includeEvaluations",
    ]
    assert schema["required"] == ["names"]
    assert schema["additionalProperties"] is False
    validator = _validator(schema)
    assert list(validator.iter_errors({"names": ["n"], "includeEvaluations": True})) == []
    assert list(validator.iter_errors({"names": ["n"], "parent": "projects/p"}))
    assert list(validator.iter_errors({}))
    run = _body_schema("EvaluationService_RunEvaluation")
    assert "app" not in run["properties"]
    assert {"evaluations", "evaluationDataset", "runCount"} <= set(run["properties"])
    assert run["additionalProperties"] is False
    assert list(_validator(run).iter_errors({"evaluations": ["e"], "runCount": 2})) == []
    assert list(_validator(run).iter_errors({"app": "projects/p/locations/l/apps/a"}))
    metrics = _body_schema("EvaluationService_RunEvaluationResultMetrics")
    assert metrics["properties"] == {}
    assert list(_validator(metrics).iter_errors({})) == []
    assert list(_validator(metrics).iter_errors({"evaluationResultId": "x"}))


def test_no_body_without_body_rule() -> None:
    for operation_id in (
        "EvaluationService_GetEvaluation",
        "EvaluationService_ListEvaluations",
        "EvaluationService_DeleteEvaluation",
    ):
        assert "requestBody" not in _operation(operation_id)


@pytest.mark.parametrize("operation_id", sorted(RESPONSES))
def test_success_responses(operation_id: str) -> None:
    assert _response_schema(operation_id) == {
        "$ref": f"#/components/schemas/{RESPONSES[operation_id]}"
    }


@pytest.mark.parametrize("operation_id", sorted(EMPTY_RESPONSES))
def test_empty_responses(operation_id: str) -> None:
    schema = _response_schema(operation_id)
    assert schema == {"type": "object", "properties": {}, "additionalProperties": False}


def test_every_operation_documents_errors() -> None:
    for _, _, operation in _operations().values():
        assert operation["responses"]["default"] == {"$ref": "#/components/responses/Error"}
    error = _doc()["components"]["responses"]["Error"]
    assert error["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Status"}


def test_error_envelope_validates_a_service_error() -> None:
    error = ServiceError.not_found("ces.googleapis.com/Evaluation", "projects/p/x")
    status = json_format.MessageToDict(error.to_status())
    envelope = {
        "error": {
            "code": error.code.http_status,
            "message": status["message"],
            "status": error.code.name,
            "details": status["details"],
        }
    }
    validator = _validator(_doc()["components"]["schemas"]["Status"])
    assert list(validator.iter_errors(envelope)) == []
    assert list(validator.iter_errors({"error": {**envelope["error"], "status": "GONE"}}))
    assert list(validator.iter_errors({"error": {"code": 404}}))


def test_long_running_operations() -> None:
    operation = _operation("EvaluationService_ExportEvaluations")
    success = operation["responses"]["200"]
    assert success["x-ces-eval-long-running"] == {
        "responseType": f"{V1B}.ExportEvaluationsResponse",
        "metadataType": f"{V1B}.OperationMetadata",
    }
    schemas = _doc()["components"]["schemas"]
    assert f"{V1B}.ExportEvaluationsResponse" in schemas
    assert f"{V1B}.OperationMetadata" in schemas
    metrics = _operation("EvaluationService_RunEvaluationResultMetrics")["responses"]["200"]
    assert metrics["x-ces-eval-long-running"]["metadataType"] == (
        f"{V1B}.RunEvaluationResultMetricsOperationMetadata"
    )
    run = _operation("EvaluationService_RunEvaluation")["responses"]["200"]
    assert run["x-ces-eval-long-running"] == {
        "responseType": f"{V1B}.RunEvaluationResponse",
        "metadataType": f"{V1B}.RunEvaluationOperationMetadata",
    }
    assert {f"{V1B}.RunEvaluationResponse", f"{V1B}.RunEvaluationOperationMetadata"} <= set(schemas)
    sample = populate(operations_pb2.Operation(), 0)
    sample.response.Pack(evaluation_service_pb2.ExportEvaluationsResponse(evaluations_uri="gs://b"))
    validator = _validator(_response_schema("EvaluationService_ExportEvaluations"))
    assert list(validator.iter_errors(json_format.MessageToDict(sample))) == []
    assert list(validator.iter_errors({"name": "x", "done": True, "unknown": 1}))


def test_refs_resolve() -> None:
    refs = list(iter_refs(_doc()))
    assert len(refs) > 100
    for ref in refs:
        assert ref.startswith("#/components/")
        _resolve(ref)  # raises KeyError when dangling


@pytest.mark.parametrize("variant", range(3))
def test_payloads_validate_against_the_document(variant: int) -> None:
    evaluation = populate(evaluation_pb2.Evaluation(), variant)
    get = _validator(_response_schema("EvaluationService_GetEvaluation"))
    # Responses may use enum names or numbers ($alt=json;enum-encoding=int).
    assert list(get.iter_errors(json_format.MessageToDict(evaluation))) == []
    by_number = json_format.MessageToDict(evaluation, use_integers_for_enums=True)
    assert list(get.iter_errors(by_number)) == []
    assert list(get.iter_errors({**by_number, "displayName": 1}))
    create = _validator(_body_schema("EvaluationService_CreateEvaluation"))
    assert list(create.iter_errors(json_format.MessageToDict(evaluation))) == []
    assert list(create.iter_errors({"description": "no display name"}))
    update = _validator(_body_schema("EvaluationService_UpdateEvaluation"))
    assert list(update.iter_errors({"description": "a masked update"})) == []
    assert list(update.iter_errors({"description": "x", "bogus": 1}))
    listing = populate(evaluation_service_pb2.ListEvaluationResultsResponse(), variant)
    results = _validator(_response_schema("EvaluationService_ListEvaluationResults"))
    assert list(results.iter_errors(json_format.MessageToDict(listing))) == []


def test_a_streamed_method_answers_an_array_of_its_responses_or_a_last_error() -> None:
    success = _operation("SessionService_StreamRunSession")["responses"]["200"]
    schema = success["content"]["application/json"]["schema"]
    assert schema["type"] == "array"
    refs = [item["$ref"] for item in schema["items"]["anyOf"]]
    assert refs == [f"#/components/schemas/{V1B}.RunSessionResponse", "#/components/schemas/Status"]
    assert success["x-ces-eval-server-streaming"] is True
    unary = _operation("SessionService_RunSession")["responses"]["200"]
    assert "x-ces-eval-server-streaming" not in unary


def test_operation_texts_and_tags() -> None:
    operation = _operation("EvaluationService_ListEvaluationResults")
    text = comments()[f"{V1B}.EvaluationService.ListEvaluationResults"]
    assert operation["description"] == text
    assert operation["summary"] == (
        "Lists the results of an evaluation, or of every evaluation of the app when the"
        " evaluation ID is `-`."
    )
    assert operation["tags"] == ["EvaluationService"]
    assert _operation("EmulatorService_ResetProject")["tags"] == ["EmulatorService"]
    tags = {tag["name"]: tag for tag in _doc()["tags"]}
    assert tags["EvaluationService"]["description"] == comments()[f"{V1B}.EvaluationService"]
    assert set(tags) == {
        "EvaluationService",
        "AgentService",
        "SessionService",
        "ToolService",
        "WidgetService",
        "Operations",
        "Locations",
        "EmulatorService",
    }


def test_fresh_document_each_call() -> None:
    first = build_openapi(served_bindings())
    first["paths"].clear()
    first["components"]["schemas"].clear()
    second = build_openapi(served_bindings())
    assert second["paths"]
    assert second == _doc()


@pytest.mark.parametrize(
    ("template", "path", "parameters"),
    [
        pytest.param(
            "/v1beta/{parent=projects/*/locations/*/apps/*}/evaluations",
            "/v1beta/projects/{project}/locations/{location}/apps/{app}/evaluations",
            [
                ("project", "parent"),
                ("location", "parent"),
                ("app", "parent"),
            ],
            id="collection",
        ),
        pytest.param(
            "/v1/{name=projects/*}:reset",
            "/v1/projects/{project}:reset",
            [("project", "name")],
            id="custom-verb",
        ),
        pytest.param(
            "/v1/{book.name=libraries/*/books/*}",
            "/v1/libraries/{library}/books/{book}",
            [("library", "book.name"), ("book", "book.name")],
            id="nested-field",
        ),
        pytest.param("/v1/{name}", "/v1/{name}", [("name", "name")], id="bare-variable"),
        pytest.param(
            "/v1/shelves/{shelf_id}/books",
            "/v1/shelves/{shelf_id}/books",
            [("shelf_id", "shelf_id")],
            id="named-by-field",
        ),
        pytest.param(
            "/v1/{a=projects/*}/copies/{b=projects/*}",
            "/v1/projects/{project}/copies/projects/{project_2}",
            [("project", "a"), ("project_2", "b")],
            id="collision",
        ),
        pytest.param(
            "/v1/{name=policies/*/evaluationRuns/*/addresses/*}",
            "/v1/policies/{policy}/evaluationRuns/{evaluationRun}/addresses/{address}",
            [("policy", "name"), ("evaluationRun", "name"), ("address", "name")],
            id="singular-forms",
        ),
    ],
)
def test_convert_template(template: str, path: str, parameters: list[tuple[str, str]]) -> None:
    converted, found = convert_template(template)
    assert converted == path
    assert [(p.name, p.field) for p in found] == parameters


def test_convert_template_records_how_to_rebuild_the_field() -> None:
    _, found = convert_template("/v1/{parent=projects/*/docs/**}:list")
    assert found == [
        PathParameter("project", "parent", "projects/{project}/docs/{doc}"),
        PathParameter("doc", "parent", "projects/{project}/docs/{doc}", multi_segment=True),
    ]


def test_query_parameters_of_every_field_kind() -> None:
    """Which fields can be query parameters (http.proto), on the test proto of every kind."""
    names = [p["name"] for p in _query_parameters(SchemaBuilder(), KINDS, {"text", "node.label"})]
    scalars = ["i32", "s32", "sf32", "u32", "f32", "i64", "s64", "sf64", "u64", "f64"]
    assert names == [
        *scalars,
        "flt",
        "dbl",
        "flag",
        "blob",
        "color",
        "manyI64",
        "colors",
        # maps (byName, byId, byFlag), Struct, Value, ListValue, Any and Empty cannot be
        "at",
        "took",
        "mask",
        "big",
        "maybe",
        "raw",
        "ratio",
        # node: label is skipped, children are repeated messages, parent would recurse
        # nodes: repeated messages
        "left",
        "right.label",
        "middle",
        "maybeCount",
        "renamed",
        "snakeCaseName",
    ]
    by_name = {
        p["name"]: p for p in _query_parameters(SchemaBuilder(), KINDS, set(), json_prefix="")
    }
    assert by_name["manyI64"]["schema"] == {
        "type": "array",
        "items": {"type": "string", "pattern": "^-?[0-9]+$"},
    }
    assert by_name["manyI64"]["explode"] is True
    assert by_name["color"]["schema"]["enum"] == ["COLOR_UNSPECIFIED", "RED", "GREEN", 0, 1, 2]
    assert by_name["big"]["schema"] == {"type": "string", "pattern": "^-?[0-9]+$"}
    assert by_name["at"]["schema"]["format"] == "date-time"
    assert by_name["node.label"]["schema"] == {"type": "string"}
