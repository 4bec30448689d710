"""The emulator service over REST/JSON, with the standard library (see :mod:`ces_eval.testing`)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = ["Emulator", "EmulatorError"]

Document = dict[str, Any]


class EmulatorError(Exception):
    """A call the server refused: its HTTP status and the ``google.rpc.Status`` it answered
    (``status`` is the code's name, ``details`` the decoded details)."""

    def __init__(self, http_status: int, status: str, message: str, details: list[Any]) -> None:
        super().__init__(f"{http_status} {status}: {message}")
        self.http_status = http_status
        self.status = status
        self.message = message
        self.details = details


def _document(resource: object) -> Document:
    """A resource as proto3 JSON: a mapping as it is; an official proto-plus object or a
    protobuf message through protobuf's own printer (no default values written)."""
    if isinstance(resource, Mapping):
        return dict(resource)
    kind: Any = type(resource)
    raw: Any = kind.pb(resource) if callable(getattr(kind, "pb", None)) else resource  # proto-plus
    if hasattr(raw, "DESCRIPTOR") and hasattr(raw, "SerializeToString"):
        from google.protobuf import json_format  # noqa: PLC0415 - only for message objects

        printed: Document = json_format.MessageToDict(raw)
        return printed
    raise TypeError(
        f"expected a dict (proto3 JSON), a proto-plus object or a protobuf message, not {kind!r}"
    )


def _project(project: str) -> str:
    """``projects/{project}`` from a project ID or name."""
    return project if project.startswith("projects/") else f"projects/{project}"


def _seconds(duration: float | timedelta) -> str:
    """A Duration's JSON form: seconds with up to nine decimals and an ``s``."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    text = f"{seconds:.9f}".rstrip("0").rstrip(".")
    return f"{text}s"


class Emulator:
    """The emulator service of the ces-eval server at ``http_url`` (``http://host:port``):
    seed what only runs produce (results, runs, conversations), script outcomes and holds for
    the run engine, move a project's clock and fire schedules, import files, and reset a
    project or every project. ``token``: a bearer token, for a server run with
    ``--auth-tokens``."""

    def __init__(self, http_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self.http_url = http_url.rstrip("/")
        self._token = token
        self._timeout = timeout

    # -- seeding -------------------------------------------------------------------------------

    def create_result(
        self, evaluation: str, result: object, result_id: str | None = None
    ) -> Document:
        """Store an evaluation result under ``evaluation`` (its name), as a run would have."""
        query = {"evaluationResultId": result_id} if result_id else None
        return self._call("POST", f"/emulator/v1/{evaluation}/results", _document(result), query)

    def create_run(self, app: str, run: object, run_id: str | None = None) -> Document:
        """Store an evaluation run in ``app`` (its name), every field as given."""
        query = {"evaluationRunId": run_id} if run_id else None
        return self._call("POST", f"/emulator/v1/{app}/evaluationRuns", _document(run), query)

    def create_conversation(
        self, app: str, conversation: object, conversation_id: str | None = None
    ) -> Document:
        """Store a conversation in ``app``, for GenerateEvaluation and imports to read."""
        query = {"conversationId": conversation_id} if conversation_id else None
        body = _document(conversation)
        return self._call("POST", f"/emulator/v1/{app}/conversations", body, query)

    def import_evaluations(
        self, app: str, source: bytes | str | Path | Mapping[str, Any]
    ) -> Document:
        """Import evaluations (and their results) into ``app`` from an export document: its
        bytes, a file path, a parsed document, or a ``gs://`` URI under the server's
        ``--export-dir``. Returns the names imported and the count of results."""
        if isinstance(source, str) and source.startswith("gs://"):
            body: Document = {"gcsUri": source}
        else:
            if isinstance(source, Mapping):
                content = json.dumps(dict(source)).encode()
            elif isinstance(source, bytes):
                content = source
            else:
                content = Path(source).read_bytes()
            body = {"content": base64.b64encode(content).decode("ascii")}
        return self._call("POST", f"/emulator/v1/{app}:importEvaluations", body)

    # -- scripted outcomes ---------------------------------------------------------------------

    def create_outcome_rule(self, app: str, rule: object, rule_id: str | None = None) -> Document:
        """Script what the run engine makes of matching evaluations in ``app``: an outcome, an
        error, observed values, scores, a delay, or a hold (the run waits in QUEUED or
        RUNNING until the rule is released)."""
        query = {"outcomeRuleId": rule_id} if rule_id else None
        return self._call("POST", f"/emulator/v1/{app}/outcomeRules", _document(rule), query)

    def outcome_rules(self, app: str) -> list[Document]:
        """Every outcome rule of ``app``."""
        return list(self._pages(f"/emulator/v1/{app}/outcomeRules", "outcomeRules"))

    def release_outcome_rule(self, name: str) -> Document:
        """Let the runs a holding rule keeps waiting go on."""
        return self._call("POST", f"/emulator/v1/{name}:release", {})

    def delete_outcome_rule(self, name: str) -> None:
        self._call("DELETE", f"/emulator/v1/{name}")

    # -- the team's own agent ------------------------------------------------------------------

    def set_agent(
        self,
        app: str,
        uri: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | timedelta | None = None,
        max_response_bytes: int | None = None,
        judge_uri: str = "",
        simulator_uri: str = "",
        recording_mode: str = "",
        max_concurrent_sessions: int | None = None,
    ) -> Document:
        """Play ``app``'s evaluations against the agent at ``uri`` (docs/agents.md): it is
        POSTed CES's session JSON with ``headers``; a call may take ``timeout`` seconds and
        answer ``max_response_bytes``; a judge at ``judge_uri`` scores agent responses and
        rubrics, a simulator at ``simulator_uri`` plays scenarios' users. An empty ``uri`` goes
        back to scripted outcomes. ``recording_mode`` (``RECORD``, ``REPLAY``,
        ``REPLAY_OR_RECORD``) records the runs' exchanges or replays them instead of calling
        (docs/agents.md, "Record and replay"). A run plays up to ``max_concurrent_sessions``
        sessions at once (16 when unset; docs/agents.md, "Concurrency")."""
        endpoint: Document = {
            "name": f"{app}/agentEndpoint",
            "uri": uri,
            "judgeUri": judge_uri,
            "simulatorUri": simulator_uri,
        }
        if headers:
            endpoint["headers"] = dict(headers)
        if timeout is not None:
            endpoint["timeout"] = _seconds(timeout)
        if max_response_bytes is not None:
            endpoint["maxResponseBytes"] = str(max_response_bytes)
        if recording_mode:
            endpoint["recordingMode"] = recording_mode
        if max_concurrent_sessions is not None:
            endpoint["maxConcurrentSessions"] = max_concurrent_sessions
        return self._call("PATCH", f"/emulator/v1/{app}/agentEndpoint", endpoint)

    def agent(self, app: str) -> Document:
        """``app``'s agent endpoint (its header names, never their values)."""
        return self._call("GET", f"/emulator/v1/{app}/agentEndpoint")

    def agent_recordings(self, app: str, filter: str = "") -> list[Document]:
        """Every recorded exchange of ``app`` (those ``filter`` matches), newest first."""
        path = f"/emulator/v1/{app}/agentRecordings"
        return list(self._pages(path, "agentRecordings", {"filter": filter} if filter else {}))

    def purge_agent_recordings(self, app: str, filter: str = "") -> int:
        """Delete ``app``'s recordings (those ``filter`` matches); how many."""
        body = {"filter": filter, "force": True}
        purged = self._call("POST", f"/emulator/v1/{app}/agentRecordings:purge", body)
        return int(purged.get("purgeCount", 0))

    def export_agent_recordings(self, app: str, gcs_uri: str = "") -> bytes | str:
        """``app``'s recordings as JSON Lines: the document, or with ``gcs_uri`` (a folder
        under the server's ``--export-dir``) the ``gs://`` URI of the file written."""
        body = {"gcsUri": gcs_uri} if gcs_uri else {}
        answer = self._call("POST", f"/emulator/v1/{app}/agentRecordings:export", body)
        if gcs_uri:
            return str(answer["uri"])
        return base64.b64decode(answer.get("content", ""))

    def import_agent_recordings(self, app: str, source: bytes | str) -> int:
        """Import recordings into ``app`` from a JSON Lines document (its bytes) or a ``gs://``
        file under the server's ``--export-dir``; how many."""
        if isinstance(source, str):
            body: Document = {"gcsUri": source}
        else:
            body = {"content": base64.b64encode(source).decode("ascii")}
        answer = self._call("POST", f"/emulator/v1/{app}/agentRecordings:import", body)
        return int(answer.get("importedCount", 0))

    # -- time ----------------------------------------------------------------------------------

    def clock(self, project: str) -> Document:
        """The project's clock: its offset from the wall clock and the time it reads."""
        return self._call("GET", f"/emulator/v1/{_project(project)}/clock")

    def advance_clock(self, project: str, by: float | timedelta) -> Document:
        """Move the project's clock forward ``by`` (seconds, or a timedelta): schedules due in
        the meantime fire (with the server's scheduler on)."""
        body = {"by": _seconds(by)}
        return self._call("POST", f"/emulator/v1/{_project(project)}/clock:advance", body)

    def fire(self, scheduled_run: str) -> Document:
        """Fire a scheduled evaluation run now; its RunEvaluation operation."""
        return self._call("POST", f"/emulator/v1/{scheduled_run}:fire", {})

    def wait(self, operation: str | Mapping[str, Any], timeout: float = 60.0) -> Document:
        """Poll a long-running operation (a name, or the operation itself) until it is done;
        TimeoutError after ``timeout`` seconds."""
        name = operation if isinstance(operation, str) else str(operation["name"])
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            current = self._call("GET", f"/v1beta/{name}")
            if current.get("done"):
                return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} is not done after {timeout:g} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    # -- resets --------------------------------------------------------------------------------

    def reset_project(self, project: str) -> Document:
        """Delete everything in the project; the counts deleted."""
        return self._call("POST", f"/emulator/v1/{_project(project)}:reset", {})

    def reset_all(self) -> Document:
        """Delete everything in every project (``projects/-``); the counts deleted."""
        return self._call("POST", "/emulator/v1/projects/-:reset", {})

    # -- HTTP ----------------------------------------------------------------------------------

    def _pages(
        self, path: str, key: str, query: Mapping[str, str] | None = None
    ) -> Iterator[Document]:
        token = ""
        while True:
            asked = {**(query or {}), **({"pageToken": token} if token else {})}
            page = self._call("GET", path, query=asked or None)
            yield from page.get(key, [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    def _call(
        self,
        method: str,
        path: str,
        body: Document | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Document:
        url = self.http_url + urllib.parse.quote(path, safe="/:-_.~")
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - the caller's server URL
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:  # noqa: S310
                text = answer.read()
        except urllib.error.HTTPError as error:
            raise _refusal(error) from None
        answered: Document = json.loads(text) if text.strip() else {}
        return answered


def _refusal(error: urllib.error.HTTPError) -> EmulatorError:
    text = error.read()
    try:
        status = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return EmulatorError(error.code, "UNKNOWN", text.decode(errors="replace")[:500], [])
    return EmulatorError(
        error.code,
        str(status.get("status", "UNKNOWN")),
        str(status.get("message", "")),
        list(status.get("details", [])),
    )
