"""Google's official Python client drives an app around its evaluations against the real server
(tests/official/apps_scenario.py, once per transport): the app with its thresholds, persona and
settings, its tools and agent, a version, runs whose results follow the app, the changelog, an
export imported into a new app, and both apps deleted with what they hold."""

from __future__ import annotations

import pytest

from ces_eval.testing.server import RunningServer
from tests.support.official import run_official

pytestmark = pytest.mark.external

LOCATION = "projects/apps-project/locations/us-central1"


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_an_app_through_the_official_client(server: RunningServer, transport: str) -> None:
    steps = run_official("apps_scenario.py", [server], transport)
    app = f"{LOCATION}/apps/apps-{transport}"
    assert steps["create_app"] == {"app": app, "again": "RESOURCE_ALREADY_EXISTS"}
    resources = steps["resources"]
    assert resources["tools"] == [f"{app}/tools/lookup"]
    assert resources["agents"] == [f"{app}/agents/root"]
    assert resources["tool_display_name"] == "lookup_order"
    assert resources["root_agent"] == f"{app}/agents/root"
    assert resources["missing_tool"] == ["agent.tools[0]"]
    version = steps["version"]
    assert version["version"].startswith(f"{app}/versions/")
    assert version["snapshot_tools"] == resources["tools"]
    assert version["snapshot_agents"] == resources["agents"]
    run = steps["run"]
    assert run["status"] == "FAIL"  # a similarity of 3 under the app's threshold of 4
    assert run["recorded"] == 4
    assert run["golden_run_method"] == "NAIVE"
    assert run["personas"] == ["Hurried"]
    assert run["versions"] == [version["version"]]
    changelog = steps["changelog"]
    assert changelog["actions"][:4] == [
        ["Create", "App"],
        ["Create", "Tool"],
        ["Create", "Agent"],
        ["Update", "App"],
    ]
    assert changelog["numbers"] == list(range(1, len(changelog["actions"]) + 1))
    copy = f"{LOCATION}/apps/copy-{transport}"
    assert steps["import"] == {
        "app": copy,
        "warnings": [],
        "root_agent": f"{copy}/agents/root",
        "tools": [f"{copy}/tools/lookup"],
    }
    stored = steps["file"]
    assert stored["uri"] == f"gs://apps/{transport}/app.zip"
    assert (server.export_dir / "apps" / transport / "app.zip").is_file()
    assert stored["app"] == f"{LOCATION}/apps/file-{transport}"
    assert stored["tools"] == [f"{stored['app']}/tools/lookup"]
    assert steps["delete"] == {"app": "RESOURCE_NOT_FOUND", "evaluation": "RESOURCE_NOT_FOUND"}
