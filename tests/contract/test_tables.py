"""The storage contract of the generic tables (``ces_eval.storage.tables``), for every declared
table, against every backend (a real SQLite file, a fresh database on a real PostgreSQL server).

Each table's sample rows are built from its message descriptor alone, so a newly declared table
is covered without a line here: its migration must create the columns its declaration implies,
and every filter column must filter.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor
from google.protobuf.message import Message

import ces_eval.core.service  # noqa: F401 - every resource module, so every declared table
from ces_eval import filtering
from ces_eval.storage.base import (
    Conflict,
    Cursor,
    Delete,
    EtagMismatch,
    Insert,
    ListQuery,
    Missing,
    OrderBy,
    Replace,
    SortKey,
    Storage,
)
from ces_eval.storage.tables import RUNS, SCHEDULED_RUNS, TABLES, Table, by_collection, declare
from tests.contract.test_storage import storage_factory, ts

APP = "projects/p1/locations/l/apps/a"
OTHER_APP = "projects/p2/locations/l/apps/a"
_F = descriptor.FieldDescriptor


@pytest.fixture(params=("sqlite", "postgresql"))
def make_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    return storage_factory(request, tmp_path)


@pytest.fixture(params=TABLES, ids=lambda table: table.name)
def table(request: pytest.FixtureRequest) -> Table[Message]:
    return request.param  # type: ignore[no-any-return]


def collection(table: Table[Message]) -> str:
    return table.collection


def sample(
    table: Table[Message],
    rid: str,
    display: str,
    t: int,
    *,
    app: str = APP,
    etag: str = "e0",
    variant: int = 0,
) -> Message:
    """A row of ``table``: named, stamped at ``t`` microseconds, its filter fields set from
    ``variant`` (so two variants differ in every filter column)."""
    message = table.message()
    fields = table.message.DESCRIPTOR.fields_by_name
    setattr(message, "name", f"{app}/{collection(table)}/{rid}")  # noqa: B010
    if "display_name" in fields:
        setattr(message, "display_name", display)  # noqa: B010
    if "etag" in fields:
        setattr(message, "etag", etag)  # noqa: B010
    for stamp in (table.created, "update_time"):
        if stamp in fields:
            getattr(message, stamp).CopyFrom(ts(t))
    for column in table.columns:
        if column.path == table.created:  # stamped at t above
            continue
        *outer, last = column.path.split(".")
        holder = message
        for step in outer:
            holder = getattr(holder, step)
        _set(holder, holder.DESCRIPTOR.fields_by_name[last], variant, column.reference)
    return message


def _value(message: Message, path: str) -> Any:
    for step in path.split("."):
        message = getattr(message, step)
    return message


def _set(message: Message, field: Any, variant: int, reference: bool) -> None:
    """``field`` of ``message`` set from ``variant``; resource names (``…/refs/<id>``) in a
    field of references, whose last segment is the plain string value."""
    name = field.name
    if reference:
        ids = [f"{name}-{variant}", "shared"] if field.is_repeated else [f"{name}-{variant}"]
        names = [f"{APP}/refs/{i}" for i in ids]
        if field.is_repeated:
            getattr(message, name).extend(names)
        else:
            setattr(message, name, names[0])
    elif field.enum_type is not None:
        values = [v.number for v in field.enum_type.values if v.number != 0]
        setattr(message, name, values[variant % len(values)])
    elif field.type == _F.TYPE_STRING and field.is_repeated:
        getattr(message, name).extend([f"{name}-{variant}", "shared"])
    elif field.type == _F.TYPE_STRING:
        setattr(message, name, f"{name}-{variant}")
    elif field.type == _F.TYPE_BOOL:
        setattr(message, name, variant % 2 == 1)
    elif field.message_type is not None:  # a timestamp
        getattr(message, name).CopyFrom(ts(1_000_000 * (variant + 1)))
    else:
        setattr(message, name, variant + 1)


def run(make_storage: Callable[[], Storage], body: Callable[[Storage], Awaitable[None]]) -> None:
    async def main() -> None:
        storage = make_storage()
        await storage.open()
        try:
            await body(storage)
        finally:
            await storage.close()

    asyncio.run(main())


def test_every_declared_resource_has_a_table() -> None:
    assert TABLES, "no generic table is declared"
    for table in TABLES:
        assert by_collection(f"{APP}/{collection(table)}/x") is table
    assert by_collection(f"{APP}/evaluations/x") is None


def test_a_table_is_declared_once() -> None:
    """A second declaration of a table's name or of its resource's collection is refused."""
    before = list(TABLES)
    for twice in (
        dataclasses.replace(RUNS),
        dataclasses.replace(RUNS, name="other_runs"),
        dataclasses.replace(SCHEDULED_RUNS, message=RUNS.message),  # evaluationRuns again
    ):
        with pytest.raises(ValueError, match="declared twice"):
            declare(twice)
    assert before == TABLES


def test_insert_get_and_missing(make_storage: Callable[[], Storage], table: Table[Message]) -> None:
    async def body(storage: Storage) -> None:
        stored = sample(table, "r1", "One", 1_000_000)
        await storage.insert_row(table, stored)
        assert await storage.get_row(table, getattr(stored, "name")) == stored  # noqa: B009
        assert await storage.get_row(table, f"{APP}/{collection(table)}/none") is None

    run(make_storage, body)


def test_uniqueness_of_names_and_display_names(
    make_storage: Callable[[], Storage], table: Table[Message]
) -> None:
    async def body(storage: Storage) -> None:
        await storage.insert_row(table, sample(table, "r1", "One", 1))
        with pytest.raises(Conflict) as by_name:
            await storage.insert_row(table, sample(table, "r1", "Other", 2))
        assert by_name.value.field == "name"
        if table.unique_display_name:
            with pytest.raises(Conflict) as by_display:
                await storage.insert_row(table, sample(table, "r2", "One", 3))
            assert (by_display.value.field, by_display.value.existing) == (
                "display_name",
                f"{APP}/{collection(table)}/r1",
            )
        # In another app the display name is free.
        await storage.insert_row(table, sample(table, "r2", "One", 4, app=OTHER_APP))

    run(make_storage, body)


def test_rows_replaced_together_are_stored_together_or_not_at_all(
    make_storage: Callable[[], Storage],
) -> None:
    """write_rows of replacements: one transaction. A stale etag or a missing row in any
    change refuses them all (the run engine relies on it: a run is COMPLETED only with its
    schedule naming it)."""

    async def body(storage: Storage) -> None:
        run_row = sample(RUNS, "r1", "Run", 1)
        schedule = sample(SCHEDULED_RUNS, "s1", "Schedule", 1)
        await storage.insert_row(RUNS, run_row)
        await storage.insert_row(SCHEDULED_RUNS, schedule)
        completed = sample(RUNS, "r1", "Run", 1, variant=1)
        named = sample(SCHEDULED_RUNS, "s1", "Schedule", 1, etag="e1", variant=1)
        with pytest.raises(EtagMismatch) as stale:
            await storage.write_rows(
                [Replace(RUNS, completed, ""), Replace(SCHEDULED_RUNS, named, "old")]
            )
        assert stale.value.name == f"{APP}/{collection(SCHEDULED_RUNS)}/s1"
        gone = sample(SCHEDULED_RUNS, "gone", "Gone", 1)
        with pytest.raises(Missing):
            await storage.write_rows(
                [Replace(RUNS, completed, ""), Replace(SCHEDULED_RUNS, gone, "e0")]
            )
        assert await storage.get_row(RUNS, getattr(run_row, "name")) == run_row  # noqa: B009
        await storage.write_rows(
            [Replace(RUNS, completed, ""), Replace(SCHEDULED_RUNS, named, "e0")]
        )
        assert await storage.get_row(RUNS, getattr(run_row, "name")) == completed  # noqa: B009
        assert await storage.get_row(SCHEDULED_RUNS, getattr(named, "name")) == named  # noqa: B009

    run(make_storage, body)


def test_conditional_replace_and_delete(
    make_storage: Callable[[], Storage], table: Table[Message]
) -> None:
    """With an etag field, writes are conditional on it; a versioned table (Conversation) is
    conditional on the digest of what is stored; another table of a resource without one
    (EvaluationRun) stores an empty etag, which every write names. The etag a write names is
    what :meth:`Table.version` gives of the row it read."""
    conditional = "etag" in table.fields or table.versioned

    async def body(storage: Storage) -> None:
        stored = sample(table, "r1", "One", 1)
        name = getattr(stored, "name")  # noqa: B009
        await storage.insert_row(table, stored)
        await storage.insert_row(table, sample(table, "r2", "Two", 1))
        changed = sample(table, "r1", "Renamed", 1, etag="e1", variant=1)
        with pytest.raises(EtagMismatch):
            await storage.replace_row(table, changed, "stale")
        await storage.replace_row(table, changed, table.version(stored))
        assert await storage.get_row(table, name) == changed
        if table.unique_display_name:
            clash = sample(table, "r1", "Two", 1, etag="e2")
            with pytest.raises(Conflict) as by_display:
                await storage.replace_row(table, clash, table.version(changed))
            assert by_display.value.existing == f"{APP}/{collection(table)}/r2"
        nope = sample(table, "nope", "x", 1)
        with pytest.raises(Missing):
            await storage.replace_row(table, nope, table.version(nope))
        if conditional:
            with pytest.raises(EtagMismatch):
                await storage.delete_row(table, name, table.version(stored))
        await storage.delete_row(table, name, table.version(changed) or None)
        assert await storage.get_row(table, name) is None
        with pytest.raises(Missing):
            await storage.delete_row(table, name, None)

    run(make_storage, body)


@pytest.mark.parametrize(
    "order",
    [OrderBy(k, d) for k in SortKey for d in (False, True)],
    ids=lambda o: f"{o.key.value}-{'desc' if o.descending else 'asc'}",
)
def test_keyset_pages_visit_every_row_once_in_order(
    make_storage: Callable[[], Storage], table: Table[Message], order: OrderBy
) -> None:
    times = [5, 3, 3, 9, 1, 3, 7]

    async def body(storage: Storage) -> None:
        for index, t in enumerate(times):
            await storage.insert_row(table, sample(table, f"r{index}", f"R{index}", t))
        await storage.insert_row(table, sample(table, "x", "X", 4, app=OTHER_APP))
        seen: list[str] = []
        after: Cursor | None = None
        while True:
            page = await storage.list_rows(
                table, ListQuery(parent=APP, order=order, limit=3, after=after)
            )
            seen += [getattr(table.parse(data), "name") for data, _ in page]  # noqa: B009
            if len(page) < 3:
                break
            after = page[-1][1]
        # The create_time column holds the table's created field (a Conversation's
        # start_time); a resource without update_time (EvaluationRun) orders by it there too.
        updated = "update_time" if "update_time" in table.fields else table.created
        stamp = {"create_time": table.created, "update_time": updated}.get(order.key.value, "")
        has_time = order.key is not SortKey.NAME and stamp in table.fields
        key = (lambda i: (times[i], f"r{i}")) if has_time else (lambda i: (0, f"r{i}"))
        expected = [
            f"{APP}/{collection(table)}/r{i}"
            for i in sorted(range(len(times)), key=key, reverse=order.descending)
        ]
        assert seen == expected

    run(make_storage, body)


# Scheduled runs: (next execution in seconds or None, the create time of its last completed
# run in seconds, None without one, "gone" for a run no longer stored).
SCHEDULES: dict[str, tuple[int | None, int | str | None]] = {
    "s0": (5, 40),
    "s1": (None, 10),
    "s2": (3, None),
    "s3": (3, "gone"),
    "s4": (9, 40),
    "s5": (None, None),
    "s6": (1, 20),
}


def _sort_value(order: str, rid: str) -> int:
    """The sort value the table's declaration describes: no next execution after every time,
    no (stored) completed run before every time."""
    upcoming, completed = SCHEDULES[rid]
    if order == "next_scheduled_execution":
        return 2**63 - 1 if upcoming is None else upcoming
    return completed if isinstance(completed, int) else 0


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("order", [o.field for o in SCHEDULED_RUNS.orders])
def test_a_tables_own_orders_page_through_every_row_once(
    make_storage: Callable[[], Storage], order: str, descending: bool
) -> None:
    async def body(storage: Storage) -> None:
        for rid, (upcoming, completed) in SCHEDULES.items():
            row = sample(SCHEDULED_RUNS, rid, rid, 1)
            row.ClearField("next_scheduled_execution_time")
            row.ClearField("last_completed_run")
            if upcoming is not None:
                row.next_scheduled_execution_time.CopyFrom(ts(upcoming * 1_000_000))
            if completed is not None:
                row.last_completed_run = f"{APP}/evaluationRuns/{rid}"
            if isinstance(completed, int):
                await storage.insert_row(RUNS, sample(RUNS, rid, rid, completed * 1_000_000))
            await storage.insert_row(SCHEDULED_RUNS, row)
        seen: list[str] = []
        after: Cursor | None = None
        while True:
            query = ListQuery(APP, OrderBy(order, descending), limit=2, after=after)
            page = await storage.list_rows(SCHEDULED_RUNS, query)
            seen += [SCHEDULED_RUNS.parse(data).name.rsplit("/", 1)[1] for data, _ in page]
            if len(page) < 2:
                break
            after = page[-1][1]
        expected = sorted(
            SCHEDULES, key=lambda rid: (_sort_value(order, rid), rid), reverse=descending
        )
        assert seen == expected

    run(make_storage, body)


def test_every_filter_field_filters(
    make_storage: Callable[[], Storage], table: Table[Message]
) -> None:
    """For each filter column, a filter on the value of variant 1 finds the variant-1 row only
    (by the field's proto name and by its JSON name); ``:`` on resource names by the whole
    name and by the ID alone."""

    async def body(storage: Storage) -> None:
        first = sample(table, "r0", "Zero", 1, variant=0)
        second = sample(table, "r1", "One", 2, variant=1)
        await storage.insert_row(table, first)
        await storage.insert_row(table, second)
        for column in table.columns:
            path = column.path
            value = _value(second, path)
            texts = []
            if column.reference:
                resource_id = f"{path.rsplit('.', 1)[-1]}-1"
                texts = [f'{path}:"{resource_id}"', f'{path}:"{APP}/refs/{resource_id}"']
                text = f"{path}:{resource_id}"
            elif column.kind is filtering.FieldKind.STRING_LIST:
                text = f'{path}:"{path.rsplit(".", 1)[-1]}-1"'
            elif column.kind is filtering.FieldKind.ENUM:
                names = {number: name for name, number in column.enum_values.items()}
                text = f"{path} = {names[value]}"
            elif column.kind is filtering.FieldKind.STRING:
                text = f'{path} = "{value}"'
            elif column.kind is filtering.FieldKind.BOOL:
                text = f"{path} = {'true' if value else 'false'}"
            elif column.kind is filtering.FieldKind.TIMESTAMP:
                # Between the two rows' times (the stamp t for the table's created field).
                low, high = (_value(row, path).ToMicroseconds() for row in (first, second))
                text = f'{path} > "{ts((low + high) // 2).ToJsonString()}"'
            else:
                text = f"{path} = {value}"
            for spelled in (*texts, text, text.replace(path, column.json_path, 1)):
                found = await _names(storage, table, spelled)
                assert found == [getattr(second, "name")], spelled  # noqa: B009
            if column.reference:
                # An ID matches whole segments only: no substring, no shorter ID.
                for partial in (f"{path}:{resource_id[:-1]}", f'{path}:"refs/{resource_id}"'):
                    assert await _names(storage, table, partial) == [], partial

    run(make_storage, body)


async def _names(storage: Storage, table: Table[Message], text: str) -> list[str]:
    query = ListQuery(
        parent=APP,
        order=OrderBy(SortKey.NAME, descending=False),
        limit=10,
        filter=filtering.parse(text),
    )
    rows = await storage.list_rows(table, query)
    return [getattr(table.parse(data), "name") for data, _ in rows]  # noqa: B009


def test_reset_project_empties_every_table(make_storage: Callable[[], Storage]) -> None:
    async def body(storage: Storage) -> None:
        for table in TABLES:
            await storage.insert_row(table, sample(table, "r1", "One", 1))
            await storage.insert_row(table, sample(table, "r2", "Two", 1))
            await storage.insert_row(table, sample(table, "r1", "One", 1, app=OTHER_APP))
        counts = await storage.reset_project("p1")
        assert dict(counts.others) == {table.collection: 2 for table in TABLES}
        for table in TABLES:
            assert await storage.get_row(table, f"{APP}/{collection(table)}/r1") is None
            kept = f"{OTHER_APP}/{collection(table)}/r1"
            assert await storage.get_row(table, kept) is not None

    run(make_storage, body)


def test_rows_are_counted_per_parent_in_one_read(make_storage: Callable[[], Storage]) -> None:
    """count_rows: each parent asked for, with 0 for one without rows (an app's
    deployment_count is read so)."""

    async def body(storage: Storage) -> None:
        table = RUNS
        for index in range(3):
            await storage.insert_row(table, sample(table, f"r{index}", f"Run {index}", index))
        await storage.insert_row(table, sample(table, "r9", "Other", 9, app=OTHER_APP))
        empty = "projects/p1/locations/l/apps/empty"
        counted = await storage.count_rows(table, [APP, empty, OTHER_APP])
        assert counted == {APP: 3, empty: 0, OTHER_APP: 1}
        assert await storage.count_rows(table, []) == {}

    run(make_storage, body)


def test_a_fold_case_table_matches_has_ignoring_ascii_case_alone(
    make_storage: Callable[[], Storage],
) -> None:
    """A table declared with ``fold_case`` (changelogs): ``:`` ignores ASCII case on its string
    fields, and only ASCII case, on both engines alike; ``=`` stays exact; an alias filters
    the field it names."""
    changelogs = by_collection(f"{APP}/changelogs/c")
    assert changelogs is not None and changelogs.fold_case

    async def body(storage: Storage) -> None:
        for index, (action, kind) in enumerate((("Update", "Agent"), ("Create", "Émile"))):
            row = sample(changelogs, f"c{index}", "", index)
            named = ("resource", f"{APP}/agents/a{index}")
            for field, value in (("action", action), ("resource_type", kind), named):
                setattr(row, field, value)
            await storage.insert_row(changelogs, row)

        async def ids(text: str) -> list[str]:
            query = ListQuery(
                parent=APP,
                order=OrderBy(SortKey.NAME, descending=False),
                limit=10,
                filter=filtering.parse(text),
            )
            rows = await storage.list_rows(changelogs, query)
            return [cursor.name.rsplit("/", 1)[1] for _, cursor in rows]

        assert await ids("action:uPDATE") == ["c0"]
        assert await ids('action="update"') == []
        assert await ids("resource_type:AGE") == ["c0"]
        assert await ids("resource_type:émile") == []  # not ASCII: not folded
        assert await ids("resource_type:MILE") == ["c1"]
        assert await ids(f'resource_name:"{APP}/agents/A1"') == ["c1"]
        assert await ids(f'resourceName="{APP}/agents/a0"') == ["c0"]

    run(make_storage, body)


def test_inserts_replaces_and_deletes_are_written_together_or_not_at_all(
    make_storage: Callable[[], Storage],
) -> None:
    """write_rows: one transaction over several tables. Any change refused (a stale etag, a
    missing row, a taken name or display name) refuses them all; a display name passes from
    a row deleted earlier in the batch to a row written later."""
    agents = by_collection(f"{APP}/agents/a")
    assert agents is not None and agents.unique_display_name

    async def body(storage: Storage) -> None:
        old = sample(agents, "old", "Root", 1)
        kept = sample(agents, "kept", "Kept", 1)
        schedule = sample(SCHEDULED_RUNS, "s1", "Schedule", 1)
        for table, row in ((agents, old), (agents, kept), (SCHEDULED_RUNS, schedule)):
            await storage.insert_row(table, row)
        new = sample(agents, "new", "Root", 2)
        renamed = sample(agents, "kept", "Renamed", 2, etag="e1")
        named = sample(SCHEDULED_RUNS, "s1", "Schedule", 2, etag="e1", variant=1)
        batch = [
            Delete(agents, getattr(old, "name"), "e0"),  # noqa: B009
            Insert(agents, new),
            Replace(agents, renamed, "e0"),
            Replace(SCHEDULED_RUNS, named, "e0"),
        ]
        refusals: list[tuple[Any, type[Exception]]] = [
            (Replace(SCHEDULED_RUNS, named, "stale"), EtagMismatch),
            (Delete(agents, f"{APP}/agents/gone", None), Missing),
            (Insert(agents, sample(agents, "other", "Root", 3)), Conflict),  # display name
            (Insert(agents, sample(agents, "kept", "Again", 3)), Conflict),  # name
        ]
        for last, refusal in refusals:
            with pytest.raises(refusal):
                await storage.write_rows([*batch[:-1], last])
            assert await storage.get_row(agents, getattr(old, "name")) == old  # noqa: B009
            assert await storage.get_row(agents, getattr(new, "name")) is None  # noqa: B009
            assert await storage.get_row(agents, getattr(kept, "name")) == kept  # noqa: B009
        await storage.write_rows(batch)
        assert await storage.get_row(agents, getattr(old, "name")) is None  # noqa: B009
        assert await storage.get_row(agents, getattr(new, "name")) == new  # noqa: B009
        assert await storage.get_row(agents, getattr(kept, "name")) == renamed  # noqa: B009
        assert await storage.get_row(SCHEDULED_RUNS, getattr(named, "name")) == named  # noqa: B009

    run(make_storage, body)
