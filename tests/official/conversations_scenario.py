"""GenerateEvaluation and ImportEvaluations' conversation_list driven by Google's official
Python client, over conversations the emulator seeds (harness.py's emulator clients).

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta
from google.protobuf import struct_pb2

# The scenarios run as scripts: their folder is on sys.path.
from harness import main, refused, step  # type: ignore[import-not-found]

Conversation = ces_v1beta.Conversation
Chunk = ces_v1beta.Chunk
Message = ces_v1beta.Message
Type = ces_v1beta.GenerateEvaluationRequest.EvaluationType


def _conversation(app: str) -> Conversation:
    args = struct_pb2.Struct()
    args.update({"order": 42})
    response = struct_pb2.Struct()
    response.update({"status": "shipped"})
    return Conversation(
        source=Conversation.Source.LIVE,
        language_code="en-US",
        turns=[
            Conversation.Turn(
                messages=[
                    Message(role="user", chunks=[Chunk(text="Where is order 42?")]),
                    Message(
                        role="agent",
                        chunks=[
                            Chunk(
                                tool_call=ces_v1beta.ToolCall(
                                    id="call-1", tool=f"{app}/tools/status", args=args
                                )
                            ),
                            Chunk(
                                tool_response=ces_v1beta.ToolResponse(
                                    id="call-1", tool=f"{app}/tools/status", response=response
                                )
                            ),
                            Chunk(text="It has shipped."),
                        ],
                    ),
                ]
            ),
            Conversation.Turn(
                messages=[
                    Message(role="user", chunks=[Chunk(text="Let me talk to billing.")]),
                    Message(
                        role="agent",
                        chunks=[
                            Chunk(
                                agent_transfer=ces_v1beta.AgentTransfer(
                                    target_agent=f"{app}/agents/billing"
                                )
                            )
                        ],
                    ),
                ]
            ),
        ],
    )


def _generated(client: Any, request: dict[str, Any]) -> ces_v1beta.Evaluation:
    operation = client.generate_evaluation(request=request)
    evaluation = operation.result(timeout=60)
    assert isinstance(operation.metadata, ces_v1beta.GenerateEvaluationOperationMetadata)
    assert isinstance(evaluation, ces_v1beta.Evaluation)
    return evaluation


def scenario(client: Any, emulator: Any, app: str) -> None:
    seeded = emulator.create_conversation(app, _conversation(app), "c1")
    assert seeded.name == f"{app}/conversations/c1" and seeded.turn_count == 2
    step("seed", conversation=seeded.name)

    golden = _generated(client, {"conversation": seeded.name})
    assert golden.display_name == "Generated from c1", golden.display_name
    assert golden.name.startswith(f"{app}/evaluations/") and golden.etag
    first, second = golden.golden.turns
    kinds = [s._pb.WhichOneof("step") for s in first.steps]
    assert kinds == ["user_input", "expectation", "expectation", "expectation"], kinds
    assert first.steps[0].user_input.text == "Where is order 42?"
    call = first.steps[1].expectation.tool_call
    assert call.tool == f"{app}/tools/status" and call.args["order"] == 42
    assert first.steps[2].expectation.tool_response.response["status"] == "shipped"
    assert first.steps[3].expectation.agent_response.chunks[0].text == "It has shipped."
    assert second.steps[0].user_input.text == "Let me talk to billing."
    assert second.steps[1].expectation.agent_transfer.target_agent == f"{app}/agents/billing"
    assert client.get_evaluation(name=golden.name).golden == golden.golden
    step("golden", evaluation=golden.name, turns=len(golden.golden.turns))

    again = _generated(client, {"conversation": seeded.name, "source": Conversation.Source.LIVE})
    assert again.display_name == "Generated from c1 (2)", again.display_name
    step("unique", display_name=again.display_name)

    scenario_made = _generated(
        client, {"conversation": seeded.name, "evaluation_type": Type.SCENARIO}
    )
    made = scenario_made.scenario
    assert made.task == "Where is order 42?", made.task
    assert list(made.rubrics) == [
        "The agent calls " + f'{app}/tools/status with {{"order": 42}}',
        "The agent responds as it did: It has shipped.",
        f"The agent transfers the conversation to {app}/agents/billing",
    ], list(made.rubrics)
    expected = made.scenario_expectations[0].tool_expectation
    assert expected.mock_tool_response.response["status"] == "shipped"
    assert made.max_turns == 2
    assert scenario_made.display_name == "Generated from c1 (3)", scenario_made.display_name
    step("scenario", display_name=scenario_made.display_name, rubrics=len(made.rubrics))

    missing = refused(
        lambda: client.generate_evaluation(conversation=f"{app}/conversations/none"),
        exceptions.NotFound,
    )
    other = refused(
        lambda: client.generate_evaluation(
            request={"conversation": seeded.name, "source": Conversation.Source.SIMULATOR}
        ),
        exceptions.NotFound,
    )
    step("not_found", missing=missing["reason"], other_source=other["reason"])

    operation = client.import_evaluations(
        request={
            "parent": app,
            "conversation_list": {"conversations": [seeded.name, f"{app}/conversations/none"]},
            "import_options": {"conflict_resolution_strategy": 3},  # DUPLICATE
        }
    )
    imported = operation.result(timeout=60)
    [evaluation] = imported.evaluations
    assert evaluation.golden == golden.golden, evaluation.golden
    # The scenario took "(3)": display names are unique within the app, whatever the kind.
    assert evaluation.display_name == "Generated from c1 (4)", evaluation.display_name
    assert imported.import_failure_count == 1
    assert "NOT_FOUND" in imported.error_messages[0], list(imported.error_messages)
    step("import", evaluation=evaluation.name, errors=list(imported.error_messages))


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.emulator, wired.app("conversations-project")))
