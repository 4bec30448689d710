"""schemathesis hooks for the runs against a server with ``--auth-tokens`` (loaded through
``SCHEMATHESIS_HOOKS`` by tests/integration/test_schemathesis.py, in the schemathesis process).

``CES_EVAL_ST_PROJECT``: every generated ``project`` path parameter becomes this project, so the
requests address one known tenant instead of random ones. ``CES_EVAL_ST_ONLY_STATUS``: the
``only_expected_status`` check fails on any other status code (a foreign token must meet 403,
whatever else the request holds), but for 415 to a write without a JSON Content-Type, which
the server refuses for its headers alone, before any project is looked at.
``CES_EVAL_ST_STATUS_LOG``: the ``record_status`` check appends each response's status code to
this file, so a test can tell that the token worked.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis


@schemathesis.hook
def map_path_parameters(ctx: schemathesis.HookContext, value: Any) -> Any:
    project = os.environ.get("CES_EVAL_ST_PROJECT")
    if project and isinstance(value, dict) and "project" in value:
        return {**value, "project": project}
    return value


@schemathesis.check
def only_expected_status(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    expected = os.environ.get("CES_EVAL_ST_ONLY_STATUS")
    content_type = str(response.request.headers.get("content-type", ""))
    if response.status_code == 415 and not content_type.startswith("application/json"):
        return None  # refused for its headers (http_app.BrowserGuard): nothing learnt
    if expected and response.status_code != int(expected):
        raise AssertionError(
            f"expected {expected}, got {response.status_code}: {response.text[:300]}"
        )
    return None


@schemathesis.check
def record_status(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    log = os.environ.get("CES_EVAL_ST_STATUS_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as sink:
            sink.write(f"{response.status_code}\n")
    return None
