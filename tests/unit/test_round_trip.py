"""Proto3 JSON and binary round trips of fully populated resources (issue: schema foundation).

Samples are built from the descriptors (tests/support/samples.py) so that a field added to the
contract is exercised without editing this file; one variant per oneof member makes every branch
appear in some sample, and a test checks that it does.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2
from tests.support import samples

ROOTS: list[type[Message]] = [
    evaluation_pb2.Evaluation,
    evaluation_pb2.EvaluationResult,
    evaluation_service_pb2.ListEvaluationResultsResponse,
    evaluation_service_pb2.ExportEvaluationsResponse,
]
# Enough variants that every oneof member is chosen somewhere, including members of oneofs nested
# under other oneofs (SessionInput.input_type under Evaluation.Step.step under Evaluation.golden).
VARIANTS = range(24)


def _json_keys(value: Any, path: str = "") -> list[str]:
    """Every object key in a JSON document except inside free-form Struct content."""
    keys: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            keys.append(key)
            if key not in {
                "args",
                "response",
                "payload",
                "variables",
                "attributes",
                "updatedVariables",
                "defaultVariables",
                "variableOverrides",
                "observedPayload",
            }:
                keys += _json_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            keys += _json_keys(item, path)
    return keys


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.DESCRIPTOR.name)
def test_json_round_trip_is_lossless(root: type[Message], variant: int) -> None:
    original = samples.populate(root(), variant)
    text = json_format.MessageToJson(original)
    parsed = json_format.Parse(text, root())
    assert parsed == original
    keys = _json_keys(json.loads(text))
    assert keys
    assert [k for k in keys if "_" in k and k != "@type"] == []  # lowerCamelCase only


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.DESCRIPTOR.name)
def test_binary_round_trip_is_lossless(root: type[Message], variant: int) -> None:
    original = samples.populate(root(), variant)
    data = original.SerializeToString(deterministic=True)
    assert root.FromString(data) == original
    assert root.FromString(data).SerializeToString(deterministic=True) == data


@pytest.mark.parametrize("root", ROOTS[:2], ids=lambda r: r.DESCRIPTOR.name)
def test_samples_cover_every_oneof_branch(root: type[Message]) -> None:
    wanted = samples.oneof_branches(root.DESCRIPTOR)
    covered: set[str] = set()
    for variant in VARIANTS:
        covered |= samples.set_branches(samples.populate(root(), variant))
    assert wanted - covered == set()
    own = {f.full_name for o in root.DESCRIPTOR.oneofs for f in o.fields}
    assert own <= wanted
    assert "google.cloud.ces.v1beta.Chunk.transcript" in wanted


def test_golden_and_scenario_variants_fill_the_inputs_oneof() -> None:
    golden = samples.populate(evaluation_pb2.Evaluation(), 0)
    scenario = samples.populate(evaluation_pb2.Evaluation(), 1)
    assert golden.WhichOneof("inputs") == "golden"
    assert scenario.WhichOneof("inputs") == "scenario"
    assert len(golden.golden.turns[0].steps) == 2
    assert scenario.scenario.scenario_expectations[0].WhichOneof("expectation")
    golden_result = samples.populate(evaluation_pb2.EvaluationResult(), 0)
    scenario_result = samples.populate(evaluation_pb2.EvaluationResult(), 1)
    assert golden_result.WhichOneof("result") == "golden_result"
    assert scenario_result.WhichOneof("result") == "scenario_result"
    assert scenario_result.scenario_result.milestone_results[0].milestone.goal


def test_proto3_json_forms_of_well_known_types() -> None:
    result = evaluation_pb2.EvaluationResult()
    result.create_time.FromJsonString("2014-10-02T15:01:23.045123456Z")
    turn = result.golden_result.turn_replay_results.add()
    turn.turn_latency.FromJsonString("-3.5s")
    latency = turn.tool_call_latencies.add()
    latency.execution_latency.seconds = 1
    expectation = turn.expectation_outcome.add()
    expectation.observed_tool_call.args.update({"list": [1, None, {"x": None}], "null": None})
    result.persona.speech_config.speaking_rate = 1.5
    result.root_span.attributes.update({"k": "v"})
    doc = json.loads(json_format.MessageToJson(result))
    assert doc["createTime"] == "2014-10-02T15:01:23.045123456Z"
    replay = doc["goldenResult"]["turnReplayResults"][0]
    assert replay["turnLatency"] == "-3.500s"
    assert replay["toolCallLatencies"][0]["executionLatency"] == "1s"
    assert replay["expectationOutcome"][0]["observedToolCall"]["args"] == {
        "list": [1, None, {"x": None}],
        "null": None,
    }
    assert doc["rootSpan"]["attributes"] == {"k": "v"}
    # Offsets other than Z are accepted on input and normalized to UTC.
    parsed = json_format.Parse(
        json.dumps({"createTime": "2014-10-02T15:01:23+05:30"}), evaluation_pb2.EvaluationResult()
    )
    assert parsed.create_time.ToJsonString() == "2014-10-02T09:31:23Z"


def test_int64_is_a_string_and_bytes_are_base64() -> None:
    response = emulator_service_pb2.ResetProjectResponse(deleted_evaluations=2**53 + 1)
    assert json.loads(json_format.MessageToJson(response)) == {"deletedEvaluations": str(2**53 + 1)}
    raw = bytes([0xFB, 0xFF, 0xBF])
    export = evaluation_service_pb2.ExportEvaluationsResponse(evaluations_content=raw)
    doc = json.loads(json_format.MessageToJson(export))
    assert doc["evaluationsContent"] == base64.b64encode(raw).decode() == "+/+/"
    url_safe = json.dumps({"evaluationsContent": base64.urlsafe_b64encode(raw).decode()})
    assert json_format.Parse(url_safe, evaluation_service_pb2.ExportEvaluationsResponse()) == export


def test_new_fields_use_their_seed_json_names() -> None:
    """Fields the official client lacks keep the seeds' JSON names (numbers >= 1000)."""
    result = evaluation_pb2.EvaluationResult(
        outcome_metadata=evaluation_pb2.EvaluationResult.OutcomeMetadata.GRACEFUL_HANDOFF
    )
    result.scenario_result.milestone_results.add().milestone.max_turn_count = 3
    doc = json.loads(json_format.MessageToJson(result))
    assert doc == {
        "outcomeMetadata": "GRACEFUL_HANDOFF",
        "scenarioResult": {"milestoneResults": [{"milestone": {"maxTurnCount": 3}}]},
    }
