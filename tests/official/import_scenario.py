"""ImportEvaluations driven by Google's official Python client: an export round trip through a
``gs://`` object and a batch upload CSV, with the conflict strategies.

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions
from google.cloud import ces_v1beta

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import golden  # type: ignore[import-not-found]
from harness import details_of, main, step  # type: ignore[import-not-found]

Strategy = ces_v1beta.ImportEvaluationsRequest.ImportOptions.ConflictResolutionStrategy
CSV = (
    "display_name,description,tags,turn_index,action_type,text,tool,arguments\n"
    "Refund,asks for a refund,csv;refunds,,,,,\n"
    ",,,1,user_input,I want my money back,,\n"
    ',,,1,tool_call,,refund,"{""order"": 42}"\n'
    ",,,1,agent_response,Your refund is on its way.,,\n"
    "Broken,,,1,user_input,,,\n"
)


def _imported(client: Any, request: dict[str, Any]) -> Any:
    operation = client.import_evaluations(request=request)
    response = operation.result(timeout=60)
    assert isinstance(operation.metadata, ces_v1beta.ImportEvaluationsOperationMetadata)
    assert operation.metadata.status_message.startswith("Imported ")
    return response


def scenario(client: Any, app: str) -> None:
    first = client.create_evaluation(parent=app, evaluation=golden("Status"), evaluation_id="e1")
    client.create_evaluation(parent=app, evaluation=golden("Other"), evaluation_id="e2")
    export = client.export_evaluations(
        request={
            "parent": app,
            "names": [first.name, f"{app}/evaluations/e2"],
            "include_evaluations": True,
            "export_options": {"gcs_uri": "gs://official-imports/round-trip"},
        }
    ).result(timeout=60)
    uri = export.evaluations_uri
    assert uri.startswith("gs://official-imports/round-trip/"), uri
    step("export", uri=uri)

    for name in (first.name, f"{app}/evaluations/e2"):
        client.delete_evaluation(name=name)
    restored = _imported(client, {"parent": app, "gcs_uri": uri})
    assert sorted(e.display_name for e in restored.evaluations) == ["Other", "Status"]
    assert restored.import_failure_count == 0 and not restored.error_messages
    again = client.get_evaluation(name=first.name)
    assert again.golden == first.golden and again.create_time == first.create_time
    step("round_trip", evaluations=[e.name for e in restored.evaluations])

    clashing = _imported(client, {"parent": app, "gcs_uri": uri})
    assert clashing.import_failure_count == 2 and not clashing.evaluations
    assert all("ALREADY_EXISTS" in m for m in clashing.error_messages)
    skipped = _imported(
        client,
        {
            "parent": app,
            "gcs_uri": uri,
            "import_options": {"conflict_resolution_strategy": Strategy.SKIP},
        },
    )
    assert not skipped.evaluations and skipped.import_failure_count == 0
    duplicated = _imported(
        client,
        {
            "parent": app,
            "gcs_uri": uri,
            "import_options": {"conflict_resolution_strategy": Strategy.DUPLICATE},
        },
    )
    assert sorted(e.display_name for e in duplicated.evaluations) == ["Other (2)", "Status (2)"]
    step("strategies", duplicated=[e.name for e in duplicated.evaluations])

    from_csv = _imported(client, {"parent": app, "csv_content": CSV.encode()})
    [refund] = from_csv.evaluations
    assert refund.display_name == "Refund" and list(refund.tags) == ["csv", "refunds"]
    call = refund.golden.turns[0].steps[1].expectation.tool_call
    assert call.tool == f"{app}/tools/refund" and call.args["order"] == 42
    assert list(from_csv.error_messages) == ["line 6: user_input needs a value in column text"]
    assert from_csv.import_failure_count == 1
    overwritten = _imported(
        client,
        {
            "parent": app,
            "csv_content": CSV.replace("Your refund is on its way.", "Done.").encode(),
            "import_options": {"conflict_resolution_strategy": Strategy.OVERWRITE},
        },
    )
    assert [e.name for e in overwritten.evaluations] == [refund.name]
    stored = client.get_evaluation(name=refund.name)
    assert stored.golden.turns[0].steps[2].expectation.agent_response.chunks[0].text == "Done."
    step("csv", evaluation=refund.name, errors=list(from_csv.error_messages))

    conversations = _imported(
        client,
        {"parent": app, "conversation_list": {"conversations": [f"{app}/conversations/c1"]}},
    )
    assert conversations.import_failure_count == 1
    assert "NOT_FOUND" in conversations.error_messages[0]
    try:
        client.import_evaluations(request={"parent": app, "gcs_uri": "gs://official-imports/none"})
    except exceptions.NotFound as error:
        step("missing_object", **details_of(error))
    else:
        raise AssertionError("an import of a missing object started")


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.app("import-project")))
