"""Agent recordings: the exchanges of an app's runs with its agent, judge and simulator, recorded
and replayed by the run engine (:mod:`ces_eval.core.engine.recording`; docs/agents.md, "Record
and replay"), declared as a resource of the app and served by the generic standard methods (Get,
List, Delete) plus PurgeAgentRecordings (AIP-165). Export and import are
:mod:`ces_eval.core.exchange.recording_files`.

An exchange is found again by its key (:func:`recording_id`): who was called, the evaluation's
ID, the repetition, the call's position among its repetition's calls, and the request document
as keyed (:func:`keyed`: what differs from run to run taken out). The key gives the recording's
ID, so a later run, in this app or in another one the recordings were imported into, finds it
with one read. Recordings live in a generic table (:data:`TABLE`), so a project reset clears
them with everything else; an app holds at most :data:`limits.MAX_APP_RECORDINGS`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from ces_eval.contract import limits
from ces_eval.core.aip import names, standard
from ces_eval.core.aip.retry import ATTEMPTS
from ces_eval.errors import FieldViolation, ServiceError
from ces_eval.generated.ces_eval.emulator.v1 import emulator_service_pb2 as emulator_pb2
from ces_eval.storage import tables
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    Delete,
    EtagMismatch,
    Insert,
    InvalidFilter,
    ListQuery,
    Missing,
    OrderBy,
    Replace,
    SortKey,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ces_eval import filtering
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.storage.base import Change, Storage

__all__ = [
    "RECORDINGS",
    "RPCS",
    "TABLE",
    "AgentRecording",
    "count",
    "keyed",
    "matching",
    "name_of",
    "recording_id",
    "store",
    "too_many",
]

AgentRecording = emulator_pb2.AgentRecording
Callee = AgentRecording.Callee

TABLE = tables.declare(
    tables.Table(
        "agent_recordings",
        AgentRecording,
        ("callee", "evaluation", "evaluation_run", "repetition"),
        unique_display_name=False,  # a recording has no display name
    )
)
RECORDINGS = standard.Resource(
    message=AgentRecording,
    parent=names.APP,
    store=standard.Store.of(TABLE, updatable=False),  # written by runs and imports only
)
_COLLECTION = "agentRecordings"
# The keys of a request document that hold times the engine stamps (a message's event_time).
_TIMES = frozenset({"eventTime", "createTime", "updateTime", "startTime", "endTime"})
# The IDs a run makes up (a session, a conversation, a result, a run) in a resource name.
_RUN_IDS = re.compile(r"(/(?:sessions|conversations|results|evaluationRuns)/)[^/]+")
_APP = "~"  # what the app's name becomes in a keyed request
_ID_HEX = 40  # hex digits of the key's SHA-256 in a recording's ID (160 bits)
_PAGE = 500  # rows read at a time by a purge or an export


def keyed(document: object, app: str) -> str:
    """``document`` (a request as sent to the agent, judge or simulator, JSON) as its
    recording is keyed: the app's name replaced by ``~`` (recordings move between apps), the
    IDs a run makes up in resource names replaced by ``-``, the stamped times
    (:data:`_TIMES`) left out; canonical JSON (keys sorted, no spaces)."""

    def shown(value: object) -> object:
        if isinstance(value, dict):
            return {key: shown(item) for key, item in value.items() if key not in _TIMES}
        if isinstance(value, list):
            return [shown(item) for item in value]
        if isinstance(value, str):
            if value == app or value.startswith(app + "/"):
                value = _APP + value[len(app) :]
            if value.startswith((_APP + "/", "projects/")):
                value = _RUN_IDS.sub(r"\1-", value)
        return value

    return json.dumps(shown(document), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def recording_id(
    callee: Callee.ValueType, evaluation: str, repetition: int, position: int, request: str
) -> str:
    """The ID of the recording of an exchange with this key (see the module): ``r`` and the
    first :data:`_ID_HEX` hex digits of the key's SHA-256 (``evaluation`` by its ID)."""
    key = json.dumps(
        [Callee.Name(callee), evaluation.rsplit("/", 1)[-1], repetition, position, request],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return "r" + hashlib.sha256(key.encode()).hexdigest()[:_ID_HEX]


def name_of(app: str, recording: AgentRecording) -> str:
    """The name ``recording`` takes in ``app``: its key's ID there."""
    found = recording_id(
        recording.callee,
        recording.evaluation,
        recording.repetition,
        recording.position,
        recording.request,
    )
    return f"{app}/{_COLLECTION}/{found}"


async def count(context: Context, app: str) -> int:
    """How many recordings ``app`` holds."""
    return (await context.storage.count_rows(TABLE, [app]))[app]


async def store(
    storage: Storage, recordings: Sequence[AgentRecording], *, fresh: bool = True
) -> int:
    """Store ``recordings`` in one transaction, each replacing a stored recording of its
    exchange; how many were new. When they are likely ``fresh`` (none stored yet), inserted
    at once; else (or when one was stored after all) each one's current etag is read first,
    and read again when another writer changed it meanwhile."""
    if not recordings:
        return 0
    if fresh:
        try:
            await storage.write_rows([Insert(TABLE, recording) for recording in recordings])
        except Conflict:
            pass
        else:
            return len(recordings)
    for attempt in range(ATTEMPTS):
        changes: list[Change] = []
        new = 0
        for recording in recordings:
            stored = await storage.get_row(TABLE, recording.name)
            if stored is None:
                changes.append(Insert(TABLE, recording))
                new += 1
            else:
                changes.append(Replace(TABLE, recording, stored.etag))
        try:
            await storage.write_rows(changes)
        except (Conflict, EtagMismatch, Missing):
            if attempt == ATTEMPTS - 1:
                raise
            continue
        return new
    raise AssertionError("unreachable")  # the last attempt returned or raised


async def matching(
    context: Context, parent: str, filter_text: str, after: Cursor | None
) -> list[tuple[bytes, Cursor]]:
    """A page of ``parent``'s recordings that ``filter_text`` matches (oldest first, from
    ``after``; empty after the last): the stored bytes of each, with its cursor."""
    expression: filtering.Expr | None = standard.parse_filter(filter_text, "filter")
    query = ListQuery(
        parent=parent,
        order=OrderBy(SortKey.CREATE_TIME, descending=False),
        limit=_PAGE,
        filter=expression,
        after=after,
        max_bytes=limits.MAX_PAGE_BYTES,  # a few large recordings at a time
    )
    try:
        return await context.storage.list_rows(TABLE, query)
    except InvalidFilter as error:
        raise standard.filter_error(error.error, "filter") from error


async def purge_agent_recordings(
    context: Context, request: emulator_pb2.PurgeAgentRecordingsRequest, caller: Caller
) -> emulator_pb2.PurgeAgentRecordingsResponse:
    """Delete the app's recordings the filter matches (all without one), a page per
    transaction, or only count them without ``force`` (AIP-165)."""
    names.APP.parse(request.parent, "parent", owned=0)
    purged = 0
    after: Cursor | None = None
    while True:
        page = await matching(context, request.parent, request.filter, after)
        if request.force and page:
            gone = [AgentRecording.FromString(data).name for data, _ in page]
            try:
                await context.storage.write_rows([Delete(TABLE, name, None) for name in gone])
            except Missing:  # deleted meanwhile: delete the others one by one
                for name in gone:
                    try:
                        await context.storage.delete_row(TABLE, name, None)
                    except Missing:
                        purged -= 1
        if not page:
            return emulator_pb2.PurgeAgentRecordingsResponse(purge_count=purged)
        purged += len(page)
        after = page[-1][1]


def too_many(field: str, held: int, added: int) -> ServiceError:
    """INVALID_ARGUMENT: ``added`` recordings more would make the app hold more than
    :data:`limits.MAX_APP_RECORDINGS`."""
    description = (
        f"The app holds {held} recordings; {added} more would pass the "
        f"{limits.MAX_APP_RECORDINGS} an app may hold. Purge some first "
        "(PurgeAgentRecordings)."
    )
    return ServiceError.invalid_argument(
        f"{field}: {description}", [FieldViolation(field, description, "TOO_MANY")]
    )


RPCS: dict[str, Rpc] = {
    **standard.methods(RECORDINGS, "Get", "List", "Delete"),
    "PurgeAgentRecordings": purge_agent_recordings,
}
