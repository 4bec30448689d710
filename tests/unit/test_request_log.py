"""The request log's lines, in process (src/ces_eval/logs.py): batched, in the configured format."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from ces_eval import logs
from ces_eval.errors import Code


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    logs.configure("info", "text")  # the request log's style back to the default
    root.handlers[:] = handlers  # and pytest's own handlers back
    root.setLevel(level)


def _call(code: Code | None = Code.OK) -> logs.Call:
    call = logs.RequestLog.start("grpc", "google.cloud.ces.v1beta.EvaluationService/GetEvaluation")
    call.resource = "projects/p/locations/l/apps/a/evaluations/e"
    call.caller = "alice"
    call.code = code
    return call


def test_a_line_has_the_text_format_of_every_other_line() -> None:
    logs.configure("info", "text")
    out = io.StringIO()
    logs.RequestLog(out).finish(_call())  # no event loop: written at once
    line = out.getvalue()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ces_eval\.access: grpc "
        r"google\.cloud\.ces\.v1beta\.EvaluationService/GetEvaluation "
        r"projects/p/locations/l/apps/a/evaluations/e OK \d+\.\d\dms caller=alice\n",
        line,
    ), line


def test_json_lines_carry_every_field() -> None:
    logs.configure("info", "json")
    out = io.StringIO()
    log = logs.RequestLog(out)
    log.finish(_call(None), 404)  # no code: read from the HTTP status
    entry = json.loads(out.getvalue())
    assert entry["logger"] == "ces_eval.access"
    assert entry["level"] == "INFO"
    assert entry["code"] == "NOT_FOUND"
    assert entry["http_status"] == 404
    assert entry["caller"] == "alice"
    assert entry["duration_ms"] >= 0
    assert set(entry) >= {"time", "message", "surface", "method", "resource"}


def test_lines_wait_for_one_write_on_the_event_loop() -> None:
    logs.configure("info", "text")
    out = io.StringIO()
    log = logs.RequestLog(out)

    async def calls() -> tuple[str, str]:
        for _ in range(50):
            log.finish(_call())
        before = out.getvalue()
        await asyncio.sleep(logs.FLUSH_SECONDS * 3)
        return before, out.getvalue()

    before, after = asyncio.run(calls())
    assert before == ""  # nothing written per call
    assert after.count("\n") == 50


def test_flush_writes_what_is_pending() -> None:
    logs.configure("info", "text")
    out = io.StringIO()
    log = logs.RequestLog(out)

    async def one() -> None:
        log.finish(_call())
        log.flush()  # what the server does when it stops

    asyncio.run(one())
    assert out.getvalue().count("\n") == 1


def test_off_below_info() -> None:
    logs.configure("warning", "text")
    assert not logs.RequestLog.wanted()
    logs.configure("info", "text")
    assert logs.RequestLog.wanted()


def test_repeated_calls_are_each_written_with_their_own_time_duration_and_outcome() -> None:
    """Lines of the same call, repeated, share what they say but for their time and duration
    (formatted once, logs.RequestLog._text); one detail more or less is another line."""
    logs.configure("info", "text")
    out = io.StringIO()
    log = logs.RequestLog(out)
    first, again, refused = _call(), _call(), _call(Code.NOT_FOUND)
    log._pending = [
        logs._entry(1_700_000_000.001, first, None, 1.5),
        logs._entry(1_700_000_000.001, again, None, 2.25),
        logs._entry(1_700_000_001.999, refused, None, 0.5),
        logs._entry(1_700_000_002.0, first, 200, 3.0),
    ]
    log.flush()
    lines = out.getvalue().splitlines()
    assert [line.split(",")[1][:3] for line in lines] == ["001", "001", "999", "000"]
    assert [line.split(" ")[-2] for line in lines] == ["1.50ms", "2.25ms", "0.50ms", "3.00ms"]
    assert [line.split(" ")[-3] for line in lines] == ["OK", "OK", "NOT_FOUND", "200"]
    assert lines[0].split(",", 1)[1][3:] == lines[1].split(",", 1)[1][3:].replace("2.25", "1.50")
    assert lines[2].split(" ")[0:2] != lines[3].split(" ")[0:2]  # another second's stamp


def test_a_pending_line_holds_plain_values_the_collector_stops_tracking() -> None:
    """A busy server keeps hundreds of lines pending between two flushes: made of plain values
    only, none of them is looked at again by the cyclic collector after its first pass."""
    pending = [logs._entry(1_700_000_000.001, _call(code), 200, 1.5) for code in (None, Code.OK)]
    gc.collect()
    assert [gc.is_tracked(entry) for entry in pending] == [False, False]
