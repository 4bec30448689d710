"""Proto comments by full name (src/ces_eval/comments.py), read from descriptor_set.binpb."""

from __future__ import annotations

from importlib import resources

import pytest
from google.protobuf import descriptor_pb2

from ces_eval.contract.comments import clean, comment, comments
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2

V1B = "google.cloud.ces.v1beta"

# Expected texts are copied from the .proto files by hand (not computed), one per kind of element.
CASES = [
    pytest.param(
        f"{V1B}.Evaluation",
        "An evaluation holds everything needed to simulate a conversation with an agent and to"
        " judge\nhow the agent behaved: either a golden conversation to replay or a scenario for"
        " a simulated\nuser.",
        id="message",
    ),
    pytest.param(
        f"{V1B}.Evaluation.Golden",
        "A golden conversation: a recorded sequence of turns that is replayed against the agent.",
        id="nested-message",
    ),
    pytest.param(
        f"{V1B}.Evaluation.display_name",
        "Human-readable name of the evaluation, chosen by the user. Must be unique within the app.",
        id="field",
    ),
    pytest.param(
        f"{V1B}.Evaluation.Scenario.UserFact.value",
        "Value of the user fact.",
        id="field-of-doubly-nested-message",
    ),
    pytest.param(
        f"{V1B}.Evaluation.inputs",
        "What is evaluated; exactly one kind of input may be set.",
        id="oneof",
    ),
    pytest.param(
        f"{V1B}.ExportOptions.ExportFormat",
        "Document format of an export.",
        id="nested-enum",
    ),
    pytest.param(f"{V1B}.ExportOptions.ExportFormat.YAML", "YAML document.", id="enum-value"),
    pytest.param(
        f"{V1B}.Evaluation.Scenario.UserGoalBehavior.USER_GOAL_IGNORED",
        "Whether the user's goal was met is not taken into account.",
        id="enum-value-of-nested-enum",
    ),
    pytest.param(
        f"{V1B}.EvaluationService",
        "Stores evaluations of a conversational agent app (golden conversations and simulated"
        " scenarios)\nand the results their runs produced.\nRuns them (listed, as datasets or on"
        " a schedule) and keeps the expectations they are judged\nagainst.",
        id="service",
    ),
    pytest.param(
        f"{V1B}.EvaluationService.ListEvaluationResults",
        "Lists the results of an evaluation, or of every evaluation of the app when the"
        " evaluation ID\nis `-`.",
        id="method",
    ),
    pytest.param(
        "ces_eval.emulator.v1.EmulatorService.ResetProject",
        "Deletes every resource and operation of one project, or of every project when the name "
        "is\n`projects/-`.",
        id="emulator-method",
    ),
    pytest.param(
        "ces_eval.emulator.v1.ResetProjectResponse.deleted_operations",
        "How many long-running operations were deleted.",
        id="emulator-field",
    ),
    pytest.param(
        "google.longrunning.Operation.done",
        "If the value is `false`, it means the operation is still in progress.\nIf `true`, the"
        " operation is completed, and either `error` or `response` is\navailable.",
        id="imported-file",
    ),
]


@pytest.mark.parametrize(("name", "expected"), CASES)
def test_comment_by_full_name(name: str, expected: str) -> None:
    assert comments()[name] == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(" One line.\n", "One line.", id="leading-space"),
        pytest.param(" First.\n Second.\n", "First.\nSecond.", id="lines"),
        pytest.param("   deep\n     deeper\n", "deep\n  deeper", id="relative-indent-kept"),
        pytest.param(" trailing   \n spaces\t\n", "trailing\nspaces", id="trailing-whitespace"),
        pytest.param("\n\n text\n\n", "text", id="blank-edges"),
        pytest.param(" a\n\n b\n", "a\n\nb", id="inner-blank-line-kept"),
    ],
)
def test_clean(raw: str, expected: str) -> None:
    assert clean(raw) == expected


def test_comment_of_descriptors() -> None:
    export_format = evaluation_service_pb2.ExportOptions.ExportFormat.DESCRIPTOR
    assert comment(export_format.values_by_name["JSON"]) == "JSON document."
    assert comment(export_format) == "Document format of an export."
    evaluation = evaluation_pb2.Evaluation.DESCRIPTOR
    assert comment(evaluation.oneofs_by_name["inputs"]) == comments()[f"{V1B}.Evaluation.inputs"]
    service = emulator_service_pb2.DESCRIPTOR.services_by_name["EmulatorService"]
    assert comment(service.methods_by_name["ResetProject"]).startswith("Deletes every resource")
    assert comment(evaluation_service_pb2.ExportEvaluationResultsOperationMetadata.DESCRIPTOR) == (
        "Metadata of the ExportEvaluationResults long-running operation."
    )


def test_uncommented_element_is_empty() -> None:
    entry = evaluation_service_pb2.ExportEvaluationsResponse.DESCRIPTOR.nested_types_by_name[
        "FailedEvaluationsEntry"
    ]
    assert comment(entry) == ""


def _our_elements() -> list[str]:
    """Full names of every hand-written element of our own .proto files, walked independently of
    the module under test: from the FileDescriptorProtos, skipping what protoc synthesizes (map
    entry messages and the one-member oneofs of proto3 ``optional``)."""
    data = resources.files("ces_eval.generated").joinpath("descriptor_set.binpb").read_bytes()
    names: list[str] = []

    def enum(value: descriptor_pb2.EnumDescriptorProto, full: str) -> None:
        names.append(full)
        names.extend(f"{full}.{v.name}" for v in value.value)

    def message(value: descriptor_pb2.DescriptorProto, full: str) -> None:
        if value.options.map_entry:
            return
        names.append(full)
        names.extend(f"{full}.{f.name}" for f in value.field)
        synthetic = {f.oneof_index for f in value.field if f.proto3_optional}
        names.extend(
            f"{full}.{o.name}" for i, o in enumerate(value.oneof_decl) if i not in synthetic
        )
        for nested in value.nested_type:
            message(nested, f"{full}.{nested.name}")
        for nested_enum in value.enum_type:
            enum(nested_enum, f"{full}.{nested_enum.name}")

    for file in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        if not file.package.startswith(("google.cloud.ces.", "ces_eval.")):
            continue
        for value in file.message_type:
            message(value, f"{file.package}.{value.name}")
        for value in file.enum_type:
            enum(value, f"{file.package}.{value.name}")
        for service in file.service:
            names.append(f"{file.package}.{service.name}")
            names.extend(f"{file.package}.{service.name}.{m.name}" for m in service.method)
    return names


def test_every_hand_written_element_has_a_clean_comment() -> None:
    names = _our_elements()
    assert len(names) > 500  # the walk above really reached fields, values and methods
    found = comments()
    missing = [name for name in names if not found.get(name)]
    assert missing == []
    for name in names:
        text = found[name]
        assert text == text.strip()
        assert all(line == line.rstrip() for line in text.splitlines()), name
        assert not text.startswith(" "), name


def test_built_once_and_read_only() -> None:
    first = comments()
    assert comments() is first
    with pytest.raises(TypeError):
        first[f"{V1B}.Evaluation"] = "changed"  # type: ignore[index]
