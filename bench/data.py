"""Benchmark data sets: realistic evaluations and results, and two ways to store them.

Shape of a data set of ``results`` results under one app:

* ``ceil(results / per_evaluation)`` golden evaluations ``<app>/evaluations/e000000``..., each
  with a ~5 KB golden conversation (turns of user input, tool-call expectations with Struct
  arguments, mocked tool responses, expected agent responses);
* ``per_evaluation`` results per evaluation (the last one may have fewer), ``r000000``..., each
  a completed (mostly) golden result of a few KB: one TurnReplayResult per turn with expectation
  outcomes, observed tool calls, semantic-similarity and hallucination scores and latencies;
* result ``r`` of every evaluation belongs to run ``run-{r % RUNS}`` (the filter
  ``evaluation_run = "<app>/evaluationRuns/run-3"`` selects 1/RUNS of the results, spread over
  every evaluation) and is a copy of template ``r % len(templates)`` with its own name, display
  name, run and create time; create times grow with (evaluation, result), one second apart, and
  the ``update_time`` column equals the create time.

``load_direct`` writes a data set into a SQLite file that the real migrations created, mostly
around the storage layer. Evaluation 0 (and a shorter last evaluation, if any) is stored through
``Storage.import_bundle``, so its derived columns are whatever the storage computes. Every other
evaluation holds the same result templates in the same order and relative times, so its row is a
copy of evaluation 0's row as stored (every column, whatever the schema version has) with its
own identity columns (``_tables.evaluation_row``) and the derived fields' newest completed result
renamed. Every other result row is assembled from pre-serialized pieces of the templates around
the per-row fields, byte for byte what ``SerializeToString(deterministic=True)`` gives (checked
against ``_tables.result_row`` on the first rows), and written with plain ``executemany`` in
transactions of 50,000 rows. ``load_via_storage`` stores the same data set through
``Storage.import_bundle`` (one evaluation and its results per call): any backend, slower. Both
give the same rows (tests/integration/test_bench_smoke.py checks it).
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import struct_pb2

from ces_eval import storage as storage_backends
from ces_eval.generated.google.cloud.ces.v1beta import common_pb2, content_pb2, evaluation_pb2
from ces_eval.storage import _tables

__all__ = [
    "RUNS",
    "DataSet",
    "evaluation",
    "load_direct",
    "load_via_storage",
    "result",
    "results_of",
    "stored",
]

RUNS = 10
TURNS = 6
TEMPLATES = 4
_Evaluation = evaluation_pb2.Evaluation
_Result = evaluation_pb2.EvaluationResult
_Outcome = _Result.Outcome
_BASE_SECONDS = 1_750_000_000
_ROWS_PER_TRANSACTION = 50_000

_QUESTIONS = [
    "Hi, I ordered a pair of trail running shoes last week and the tracking page has not "
    "changed for three days. Order number is {order}. Can you tell me where it is?",
    "Thanks. The shipping address on that order is wrong, I moved last month. Can you change "
    "it to 221B Baker Street, London NW1 6XE before it goes out for delivery?",
    "Great. While you are at it, I would also like to add a second pair in size 44 to the same "
    "shipment if that is still possible, same colour as the first pair please.",
    "Hmm, what will that cost me in total including shipping? I have a discount code from the "
    "newsletter, SPRING-RUN-15, can you apply it to the new item as well?",
    "OK, please go ahead and charge the card on file for the difference, the one ending in "
    "4242. Send me a confirmation email when it is done.",
    "That is all, thank you. Actually one last thing: what is your return policy if the second "
    "pair does not fit? Do I need to keep the original box?",
]
_ANSWERS = [
    "I found order {order}. It left our warehouse in Leipzig on Monday and is currently held "
    "at the regional hub because of a sorting delay; the new estimated delivery is Friday.",
    "I have updated the delivery address of order {order} to 221B Baker Street, London NW1 6XE. "
    "The carrier has confirmed the change, so the parcel will be rerouted before delivery.",
    "Yes, the item is in stock in size 44 in Glacier Blue. I added one pair to order {order}; "
    "it will ship together with the first pair from the same hub.",
    "With the code SPRING-RUN-15 the new pair costs 101.15 EUR instead of 119.00 EUR, and "
    "shipping stays free because both pairs travel in one parcel. The total due now is 101.15.",
    "Done: the card ending in 4242 was charged 101.15 EUR and a confirmation email is on its "
    "way to the address on your account. Is there anything else I can help you with?",
    "You can return unworn shoes within 30 days for a full refund, no original box needed; "
    "just print the prepaid label from the link in your confirmation email.",
]
_TOOLS = [
    "get_order_status",
    "update_shipping_address",
    "add_order_item",
    "quote_order_total",
    "charge_payment_method",
    "lookup_return_policy",
]


@dataclass(frozen=True)
class DataSet:
    """One data set: ``results`` results under ``app``, ``per_evaluation`` per evaluation."""

    app: str
    results: int
    per_evaluation: int = 1000

    @property
    def evaluations(self) -> int:
        return max(1, math.ceil(self.results / self.per_evaluation))

    def evaluation_name(self, index: int) -> str:
        return f"{self.app}/evaluations/e{index:06d}"

    def results_in(self, index: int) -> int:
        """How many results evaluation ``index`` has."""
        return min(self.per_evaluation, self.results - index * self.per_evaluation)

    def matching(self, run: int) -> int:
        """How many results belong to run ``run``."""
        return sum(len(range(run, self.results_in(e), RUNS)) for e in range(self.evaluations))

    def run_name(self, run: int) -> str:
        return f"{self.app}/evaluationRuns/run-{run}"

    def create_seconds(self, evaluation_index: int, result_index: int) -> int:
        return _BASE_SECONDS + evaluation_index * self.per_evaluation + result_index


def _app_resource(app: str, kind: str, name: str) -> str:
    return f"{app}/{kind}/{name}"


def _args(turn: int, order: str) -> struct_pb2.Struct:
    args = struct_pb2.Struct()
    args.update(
        {
            "order_id": order,
            "customer_id": "cust-0042-7781",
            "locale": "en-GB",
            "turn": turn,
            "fields": ["status", "eta"],
        }
    )
    return args


def _tool_call(app: str, turn: int, order: str) -> content_pb2.ToolCall:
    return content_pb2.ToolCall(
        id=f"call-{turn}",
        tool=_app_resource(app, "tools", _TOOLS[turn]),
        args=_args(turn, order),
    )


def _tool_response(app: str, turn: int, order: str) -> content_pb2.ToolResponse:
    response = content_pb2.ToolResponse(
        id=f"call-{turn}", tool=_app_resource(app, "tools", _TOOLS[turn])
    )
    response.response.update(
        {"status": "OK", "order_id": order, "eta": "2025-06-20", "attempt": turn}
    )
    return response


def _agent_message(turn: int, order: str) -> content_pb2.Message:
    message = content_pb2.Message(role="agent")
    message.chunks.add().text = _ANSWERS[turn].format(order=order)
    return message


def evaluation(data: DataSet, index: int) -> _Evaluation:
    """Evaluation ``index`` of ``data`` as stored: name, times and etag set, no derived fields."""
    order = f"ORD-{index:06d}-7734"
    item = _Evaluation(
        name=data.evaluation_name(index),
        display_name=f"Order status and changes {index:06d}",
        description="Customer asks for the status of a delayed order, changes the address, adds "
        "an item with a discount code, pays, and asks about returns.",
        tags=["benchmark", "orders", "golden"],
        created_by="bench@ces-eval.localhost",
        last_updated_by="bench@ces-eval.localhost",
        etag=f"bench-etag-{index:06d}",
    )
    item.create_time.FromSeconds(_BASE_SECONDS - 86_400 + index)
    item.update_time.FromSeconds(_BASE_SECONDS - 86_400 + index)
    for turn in range(TURNS):
        golden_turn = item.golden.turns.add()
        golden_turn.steps.add().user_input.text = _QUESTIONS[turn].format(order=order)
        expectation = golden_turn.steps.add().expectation
        expectation.note = f"Check_{_TOOLS[turn]}_called"
        expectation.tool_call.CopyFrom(_tool_call(data.app, turn, order))
        golden_turn.steps.add().expectation.mock_tool_response.CopyFrom(
            _tool_response(data.app, turn, order)
        )
        answer = golden_turn.steps.add().expectation
        answer.note = f"Check_answer_{turn}"
        answer.agent_response.CopyFrom(_agent_message(turn, order))
    return item


def _template(data: DataSet, variant: int) -> _Result:
    """Result template ``variant``: a golden result of evaluation 0 (names and run unset)."""
    order = f"ORD-{0:06d}-7734"
    passed = variant % 2 == 0
    completed = variant != TEMPLATES - 1  # one template in four is still RUNNING
    result = _Result(
        evaluation_status=_Outcome.PASS if passed else _Outcome.FAIL,
        execution_state=_Result.ExecutionState.COMPLETED
        if completed
        else _Result.ExecutionState.RUNNING,
        initiated_by="bench@ces-eval.localhost",
        app_version=f"{data.app}/versions/v{variant % 2 + 1}",
        app_version_display_name=f"Release {variant % 2 + 1}",
        golden_run_method=common_pb2.STABLE if variant % 2 == 0 else common_pb2.NAIVE,
    )
    for turn in range(TURNS):
        replay = result.golden_result.turn_replay_results.add()
        replay.conversation = f"{data.app}/conversations/conv-{variant}-{turn:02d}"
        outcome = replay.expectation_outcome.add()
        outcome.expectation.note = f"Check_{_TOOLS[turn]}_called"
        outcome.expectation.tool_call.CopyFrom(_tool_call(data.app, turn, order))
        outcome.observed_tool_call.CopyFrom(_tool_call(data.app, turn, order))
        tool_ok = passed or turn % 3 != 2
        outcome.outcome = _Outcome.PASS if tool_ok else _Outcome.FAIL
        outcome.tool_invocation_result.parameter_correctness_score = 1.0 if tool_ok else 0.5
        outcome.tool_invocation_result.outcome = outcome.outcome
        outcome.tool_invocation_result.explanation = "All expected parameters were present."
        answer = replay.expectation_outcome.add()
        answer.expectation.note = f"Check_answer_{turn}"
        answer.expectation.agent_response.CopyFrom(_agent_message(turn, order))
        answer.outcome = _Outcome.PASS
        replay.hallucination_result.score = 0 if passed else 1
        replay.hallucination_result.label = "No hallucination" if passed else "Hallucination"
        replay.semantic_similarity_result.score = 4 - (turn + variant) % 3
        replay.semantic_similarity_result.label = "Semantically similar"
        replay.semantic_similarity_result.outcome = _Outcome.PASS
        replay.turn_latency.FromMilliseconds(1200 + 137 * turn + 41 * variant)
        latency = replay.tool_call_latencies.add()
        latency.tool = _app_resource(data.app, "tools", _TOOLS[turn])
        latency.display_name = _TOOLS[turn]
        latency.execution_latency.FromMilliseconds(180 + 23 * turn + 7 * variant)
        replay.overall_tool_invocation_result.tool_invocation_score = 1.0 if tool_ok else 0.5
        replay.overall_tool_invocation_result.outcome = outcome.outcome
    return result


def result(data: DataSet, evaluation_index: int, result_index: int) -> _Result:
    """Result ``result_index`` of evaluation ``evaluation_index``, as a message."""
    message = _Result()
    message.CopyFrom(_template(data, result_index % TEMPLATES))
    _name_result(message, data, evaluation_index, result_index)
    return message


def _name_result(message: _Result, data: DataSet, e: int, r: int) -> None:
    message.name = f"{data.evaluation_name(e)}/results/r{r:06d}"
    message.display_name = f"Run {r % RUNS} result {r:06d}"
    message.evaluation_run = data.run_name(r % RUNS)
    message.create_time.FromSeconds(data.create_seconds(e, r))


def results_of(data: DataSet, evaluation_index: int) -> list[_Result]:
    return [result(data, evaluation_index, r) for r in range(data.results_in(evaluation_index))]


class _Blobs:
    """Result rows assembled from pre-serialized template pieces.

    Deterministic serialization writes fields by ascending number: name (1), display_name (2),
    evaluation_status (4), create_time (5), evaluation_run (6), then the rest (7 and up). The
    per-row fields are 1, 2, 5 and 6, so a row's blob is head(1, 2) + template(4) +
    middle(5, 6) + template(7...)."""

    def __init__(self, data: DataSet) -> None:
        self.data = data
        self.templates = [_template(data, v) for v in range(TEMPLATES)]
        self.status_part = []
        self.rest_part = []
        for template in self.templates:
            status = _Result(evaluation_status=template.evaluation_status)
            self.status_part.append(status.SerializeToString(deterministic=True))
            rest = _Result()
            rest.CopyFrom(template)
            rest.ClearField("evaluation_status")
            self.rest_part.append(rest.SerializeToString(deterministic=True))

    def row(self, e: int, r: int, evaluation_name: str) -> tuple[object, ...]:
        data = self.data
        variant = r % TEMPLATES
        template = self.templates[variant]
        name = f"{evaluation_name}/results/r{r:06d}"
        display_name = f"Run {r % RUNS} result {r:06d}"
        run = data.run_name(r % RUNS)
        seconds = data.create_seconds(e, r)
        head = _Result(name=name, display_name=display_name).SerializeToString()
        middle = _Result(evaluation_run=run)
        middle.create_time.seconds = seconds
        blob = (
            head
            + self.status_part[variant]
            + middle.SerializeToString(deterministic=True)
            + self.rest_part[variant]
        )
        micros = seconds * 1_000_000
        # RESULT_COLUMNS order.
        return (
            name,
            evaluation_name,
            data.app,
            display_name,
            micros,
            micros,
            run,
            int(template.execution_state),
            int(template.evaluation_status),
            template.app_version,
            template.initiated_by,
            int(template.golden_run_method),
            blob,
        )


def _check_row(blobs: _Blobs, e: int, r: int) -> None:
    """The assembled row equals the storage's own row of the same result."""
    row = blobs.row(e, r, blobs.data.evaluation_name(e))
    expected = list(_tables.result_row(result(blobs.data, e, r)))
    expected[5] = row[5]  # update_time: result_row stamps the moment of the write
    if list(row) != expected:
        raise AssertionError(f"assembled row of result {e}/{r} differs from result_row()")


def _renamed_derived(data: DataSet, derived: bytes, e: int) -> bytes:
    """Evaluation 0's ``derived`` column as evaluation ``e``'s: its newest completed result is
    the same result index of evaluation ``e``."""
    fields = _Evaluation.FromString(derived)
    if fields.HasField("last_completed_result"):
        newest = fields.last_completed_result
        _name_result(newest, data, e, int(newest.name.rsplit("/results/r", 1)[1]))
    return fields.SerializeToString(deterministic=True)


def _insert_sql(table: str, columns: Sequence[str]) -> str:
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"  # noqa: S608 - column names from the schema


def migrate_sqlite(path: Path) -> None:
    """Create (or upgrade) the schema of ``path`` with the real migrations."""

    async def run() -> None:
        database = storage_backends.from_url(f"sqlite:///{path}")
        await database.open()
        await database.close()

    asyncio.run(run())


def load_direct(path: Path, data: DataSet, progress: bool = False) -> None:
    """Write ``data`` into the SQLite file ``path`` (migrated here first) mostly without the
    storage layer: evaluation 0 (and a shorter last evaluation) go through
    ``Storage.import_bundle``; every other evaluation row is a copy of evaluation 0's row as
    the storage wrote it (derived columns included) with its own identity and renamed derived
    fields, and every other result row is assembled here; plain ``executemany`` in
    transactions of 50,000 rows."""
    migrate_sqlite(path)
    blobs = _Blobs(data)
    for e, r in ((0, 0), (0, 1), (0, TEMPLATES - 1)):
        _check_row(blobs, e, r)
    last = data.evaluations - 1
    imported = {0} | ({last} if data.results_in(last) != data.results_in(0) else set())
    asyncio.run(_import(f"sqlite:///{path}", data, sorted(imported)))
    direct = [e for e in range(data.evaluations) if e not in imported]
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        # The storage stamps update_time with the moment of the write; every other row has its
        # create time there, so the imported ones get theirs too (not part of the blob).
        connection.executemany(
            "UPDATE evaluation_results SET update_time = create_time WHERE evaluation = ?",
            ((data.evaluation_name(e),) for e in sorted(imported)),
        )
        # A throw-away bulk load: no journal, no fsync; the server switches back to WAL with
        # synchronous=FULL when it opens the file.
        connection.execute("PRAGMA journal_mode=OFF")
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("PRAGMA cache_size=-1048576")  # 1 GiB
        cursor = connection.execute(
            "SELECT * FROM evaluations WHERE name = ?", (data.evaluation_name(0),)
        )
        columns = [column[0] for column in cursor.description]
        first = dict(zip(columns, cursor.fetchone(), strict=True))

        def evaluation_values(e: int) -> list[object]:
            values = dict(first)
            values.update(
                zip(
                    _tables.EVALUATION_COLUMNS,
                    _tables.evaluation_row(evaluation(data, e)),
                    strict=True,
                )
            )
            values["derived"] = _renamed_derived(data, first["derived"], e)
            return [values[column] for column in columns]

        connection.execute("BEGIN")
        connection.executemany(
            _insert_sql("evaluations", columns), (evaluation_values(e) for e in direct)
        )
        connection.execute("COMMIT")
        rows = ((e, r) for e in direct for r in range(data.results_in(e)))
        statement = _insert_sql("evaluation_results", _tables.RESULT_COLUMNS)
        names = [data.evaluation_name(e) for e in range(data.evaluations)]
        done = 0
        started = time.monotonic()
        while True:
            batch = [blobs.row(e, r, names[e]) for e, r in _take(rows, _ROWS_PER_TRANSACTION)]
            if not batch:
                break
            connection.execute("BEGIN")
            connection.executemany(statement, batch)
            connection.execute("COMMIT")
            done += len(batch)
            if progress and done % 200_000 == 0:
                rate = done / (time.monotonic() - started)
                print(f"  {done:,} results written ({rate:,.0f}/s)", flush=True)
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


def _take(iterator: Iterator[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) == count:
            break
    return out


async def _import(url: str, data: DataSet, evaluations: Iterable[int]) -> None:
    database = storage_backends.from_url(url)
    await database.open()
    try:
        for e in evaluations:
            await database.import_bundle([evaluation(data, e)], results_of(data, e))
    finally:
        await database.close()


def load_via_storage(url: str, data: DataSet) -> None:
    """Store ``data`` through ``Storage.import_bundle`` (one evaluation per call) in the
    database at ``url``, whatever its backend."""
    asyncio.run(_import(url, data, range(data.evaluations)))


def stored(url: str, data: DataSet) -> bool:
    """Whether the database at ``url`` already holds ``data`` (its last evaluation and that
    evaluation's last result exist), checked through the storage contract."""

    async def check() -> bool:
        database = storage_backends.from_url(url)
        await database.open()
        try:
            last = data.evaluations - 1
            name = f"{data.evaluation_name(last)}/results/r{data.results_in(last) - 1:06d}"
            return (
                await database.get_evaluation(data.evaluation_name(last)) is not None
                and await database.get_result(name) is not None
            )
        finally:
            await database.close()

    return asyncio.run(check())
