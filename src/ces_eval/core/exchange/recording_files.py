"""ExportAgentRecordings and ImportAgentRecordings: an app's agent recordings
(:mod:`ces_eval.core.resources.agent_recordings`; docs/agents.md, "Record and replay") as a file
of JSON Lines, one AgentRecording in proto3 JSON a line (its answer base64, as bytes are).

An export is answered inline, or written atomically into a new file
(``agent-recordings-{id}.jsonl``) under the folder ``gcs_uri`` names, as evaluation exports are
(:mod:`ces_eval.core.exchange.exports`); an import reads such a document inline or from a file
of the export root, all or nothing. Both hold at most :data:`limits.MAX_RECORDINGS_FILE_BYTES`
(a filter exports fewer). An imported recording is renamed into the app, its evaluation too
(by the evaluation's ID), its ID the key's there: a recording of the same exchange is replaced.
Recorded in another app, its answer's names of that app's resources (a tool's) become the app's
(:func:`_moved`), as its request is keyed without the app's name.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING

from google.protobuf import json_format

from ces_eval.contract import limits
from ces_eval.core.aip import names
from ces_eval.core.aip.ports import ObjectError
from ces_eval.core.aip.stamps import new_etag, now
from ces_eval.core.aip.standard import invalid
from ces_eval.core.aip.validation import raise_if_invalid
from ces_eval.core.exchange import imports
from ces_eval.core.exchange.stored import write_object
from ces_eval.core.resources import agent_recordings
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Cursor

__all__ = ["RPCS"]

_Recording = agent_recordings.AgentRecording
_Callee = agent_recordings.Callee
_OPERATION_ENVELOPE = 1024  # a response's other fields, at most


def _too_large(size: int, limit: int, advice: str) -> ServiceError:
    return ServiceError(
        Code.FAILED_PRECONDITION,
        f"The export would take more than {limit} bytes ({size} so far); {advice}",
        "EXPORT_TOO_LARGE",
        {"size": str(size), "limit": str(limit)},
    )


def _lines(rows: Sequence[tuple[bytes, Cursor]]) -> list[bytes]:
    """The stored recordings ``rows`` as lines of the file."""
    found = []
    for data, _ in rows:
        document = json_format.MessageToDict(_Recording.FromString(data))
        line = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        found.append(line.encode() + b"\n")
    return found


async def export_agent_recordings(
    context: Context, request: emulator_pb2.ExportAgentRecordingsRequest, caller: Caller
) -> emulator_pb2.ExportAgentRecordingsResponse:
    names.APP.parse(request.parent, "parent", owned=0)
    target = None
    if request.gcs_uri:
        try:
            target = context.locate(request.gcs_uri, request.parent)
        except ObjectError as error:
            raise invalid("gcs_uri", error.message) from error
    lines: list[bytes] = []
    size = 0
    after: Cursor | None = None
    while page := await agent_recordings.matching(context, request.parent, request.filter, after):
        for line in await asyncio.to_thread(_lines, page):
            size += len(line)
            if size > limits.MAX_RECORDINGS_FILE_BYTES:
                raise _too_large(
                    size,
                    limits.MAX_RECORDINGS_FILE_BYTES,
                    "export fewer at a time (a filter by evaluation or evaluation_run).",
                )
            lines.append(line)
        after = page[-1][1]
    data = b"".join(lines)
    if target is None:
        if size + _OPERATION_ENVELOPE > limits.MAX_RESOURCE_BYTES:
            raise _too_large(
                size + _OPERATION_ENVELOPE,
                limits.MAX_RESOURCE_BYTES,
                "write it to a file (gcs_uri), or export fewer at a time (a filter).",
            )
        return emulator_pb2.ExportAgentRecordingsResponse(content=data, exported_count=len(lines))
    location = target.child(f"agent-recordings-{names.new_id()}.jsonl")
    await write_object(context, location, data, "gcs_uri")
    return emulator_pb2.ExportAgentRecordingsResponse(uri=location.uri, exported_count=len(lines))


def _moved(answer: bytes, recorded_in: str, app: str) -> bytes:
    """``answer`` with the names of resources of the app it was recorded in
    (``recorded_in/...``, such as a tool's) made names of ``app``'s, as the agent would answer
    there: a request is keyed without its app's name, so an answer must not keep it."""
    pattern = re.compile(re.escape(recorded_in.encode()) + rb'(?=[/"])')
    target = app.encode()
    return pattern.sub(lambda _: target, answer)


def _parsed(data: bytes, source: str, app: str) -> tuple[list[_Recording], list[FieldViolation]]:
    """The recordings of the JSON Lines document ``data`` (request field ``source``), renamed
    into ``app`` (one per exchange: the last of a key), and what is wrong with them."""
    found: dict[str, _Recording] = {}
    violations: list[FieldViolation] = []
    stamp = now()

    def refuse(line: int, problem: str, reason: str = "") -> None:
        violations.append(FieldViolation(source, f"Line {line}: {problem}", reason))

    for index, text in enumerate(data.splitlines(), start=1):
        if len(violations) >= limits.MAX_VIOLATIONS:
            break
        if not text.strip():
            continue
        recording = _Recording()
        try:
            json_format.ParseDict(json.loads(text), recording)
        except (ValueError, TypeError, RecursionError, json_format.ParseError) as error:
            refuse(index, f"not an AgentRecording in proto3 JSON ({str(error)[:200]}).")
            continue
        if recording.callee not in (_Callee.AGENT, _Callee.JUDGE, _Callee.SIMULATOR):
            refuse(index, "callee must be AGENT, JUDGE or SIMULATOR.")
            continue
        evaluation = recording.evaluation.rsplit("/", 1)[-1]
        if "/evaluations/" not in recording.evaluation or not evaluation:
            refuse(index, "evaluation must name an evaluation.")
            continue
        if recording.repetition < 0 or recording.position < 0:
            refuse(index, "repetition and position must not be negative.")
            continue
        if not recording.request:
            refuse(index, "request is required.", "REQUIRED")
            continue
        recorded_in = names.app_of(recording.name) or names.app_of(recording.evaluation)
        if recorded_in and recorded_in != app:
            recording.answer = _moved(recording.answer, recorded_in, app)
        recording.evaluation = f"{app}/evaluations/{evaluation}"
        recording.name = agent_recordings.name_of(app, recording)
        recording.etag = new_etag()
        if not recording.HasField("create_time"):
            recording.create_time.CopyFrom(stamp)
        size = recording.ByteSize()
        if size > limits.MAX_RESOURCE_BYTES:
            refuse(index, limits.too_large("", size).description, "TOO_LARGE")
            continue
        found[recording.name] = recording
    return list(found.values()), violations


async def import_agent_recordings(
    context: Context, request: emulator_pb2.ImportAgentRecordingsRequest, caller: Caller
) -> emulator_pb2.ImportAgentRecordingsResponse:
    app = request.parent
    names.APP.parse(app, "parent", owned=0)
    source = request.WhichOneof("source")
    if source is None:
        raise_if_invalid([FieldViolation("content", "Required.", "REQUIRED")], "import")
    if source == "gcs_uri":
        data = await imports.read_import(
            context, request.gcs_uri, app, limits.MAX_RECORDINGS_FILE_BYTES, "recordings"
        )
    else:
        data = request.content
    recordings, violations = await asyncio.to_thread(_parsed, data, str(source), app)
    raise_if_invalid(violations, "import")
    held = await agent_recordings.count(context, app)
    if held + len(recordings) > limits.MAX_APP_RECORDINGS:
        raise agent_recordings.too_many(str(source), held, len(recordings))
    await agent_recordings.store(context.storage, recordings)
    return emulator_pb2.ImportAgentRecordingsResponse(imported_count=len(recordings))


RPCS: dict[str, Rpc] = {
    "ExportAgentRecordings": export_agent_recordings,
    "ImportAgentRecordings": import_agent_recordings,
}
