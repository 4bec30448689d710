"""Google's official Python client makes evaluations of conversations the emulator seeds:
GenerateEvaluation (golden and scenario, unknown conversation, another source, a taken display
name) and ImportEvaluations' conversation_list, over gRPC and REST against the real server
(tests/official/conversations_scenario.py)."""

from __future__ import annotations

import httpx
import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_conversations_through_the_official_client(server: RunningServer, transport: str) -> None:
    steps = run_official("conversations_scenario.py", [server], transport)
    assert set(steps) == {"seed", "golden", "unique", "scenario", "not_found", "import"}
    assert steps["golden"]["turns"] == 2
    assert steps["unique"]["display_name"] == "Generated from c1 (2)"
    assert steps["not_found"] == {
        "missing": "RESOURCE_NOT_FOUND",
        "other_source": "RESOURCE_NOT_FOUND",
    }


def test_the_emulator_seeds_gets_and_lists_conversations(server: RunningServer) -> None:
    """CreateConversation, GetConversation and ListConversations over REST: filters on the
    table's columns, order by start_time (newest first by default), pages, NOT_FOUND."""
    app = "projects/conversations-project/locations/us-central1/apps/listing"
    base = f"{server.http_base}/emulator/v1/{app}/conversations"
    seeds = [
        ("c1", "LIVE", "2026-01-01T00:00:00Z", "en-US"),
        ("c2", "SIMULATOR", "2026-01-03T00:00:00Z", "de-DE"),
        ("c3", "LIVE", "2026-01-02T00:00:00Z", "en-US"),
    ]
    turn = {"messages": [{"role": "user", "chunks": [{"text": "hi"}]}]}
    with httpx.Client(timeout=30) as http:
        for cid, source, start, language in seeds:
            created = http.post(
                f"{base}?conversationId={cid}",
                json={
                    "source": source,
                    "startTime": start,
                    "languageCode": language,
                    "turns": [turn, turn],
                },
            )
            assert created.status_code == 200, created.text
            assert created.json()["turnCount"] == 2
        got = http.get(f"{base}/c2").json()
        assert got["source"] == "SIMULATOR" and got["name"] == f"{app}/conversations/c2"
        assert http.get(f"{base}/none").status_code == 404
        newest = http.get(base).json()["conversations"]
        assert [c["name"].rsplit("/", 1)[1] for c in newest] == ["c2", "c3", "c1"]
        live = http.get(base, params={"filter": "source = LIVE", "orderBy": "start_time asc"})
        assert [c["name"].rsplit("/", 1)[1] for c in live.json()["conversations"]] == ["c1", "c3"]
        german = http.get(base, params={"filter": 'language_code = "de-DE"'}).json()
        assert [c["name"].rsplit("/", 1)[1] for c in german["conversations"]] == ["c2"]
        first = http.get(base, params={"pageSize": 2}).json()
        rest = http.get(base, params={"pageSize": 2, "pageToken": first["nextPageToken"]}).json()
        assert len(first["conversations"]) == 2 and len(rest["conversations"]) == 1
        wrong = http.get(base, params={"orderBy": "display_name"})
        assert wrong.status_code == 400
