"""The evaluation batch upload CSV (src/ces_eval/core/exchange/csv_dialect.py,
docs/import-csv.md): what each row makes, and every kind of bad row with its line number."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.core.exchange import ExchangeError, csv_dialect
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

APP = "projects/p/locations/l/apps/a"
HEADER = (
    "display_name,description,tags,turn_index,action_type,"
    "text,tool,arguments,response,agent,variables,note"
)


def _csv(*rows: str, header: str = HEADER) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def test_rows_make_golden_turns_of_steps() -> None:
    data = _csv(
        "Booking,books a room,smoke; rooms,,,,,,,,,",
        ",,,1,user_input,Book a room,,,,,,",
        ',,,1,tool_call,,book,"{""nights"": 2}",,,,called',
        ",,,1,Agent-Response,Booked.,,,,,,",
        ',,,2,mock_tool_response,,pay,,"{""ok"": true}",,,',
        ",,,2,agent_transfer,,,,,billing,,",
        ',,,2,updated_variables,,,,,,"{""paid"": true}",',
        "Booking,,,2,no tool calls,,,,,,,",
    )
    found = csv_dialect.read(data, APP)
    assert not found.strays
    [item] = found.evaluations
    assert (item.line, item.problems) == (2, [])
    evaluation = item.evaluation
    assert evaluation is not None
    assert (evaluation.display_name, evaluation.description) == ("Booking", "books a room")
    assert list(evaluation.tags) == ["smoke", "rooms"]
    first, second = evaluation.golden.turns
    assert first.steps[0].user_input.text == "Book a room"
    call = first.steps[1].expectation
    assert (call.tool_call.tool, call.tool_call.args["nights"], call.note) == (
        f"{APP}/tools/book",
        2,
        "called",
    )
    response = first.steps[2].expectation.agent_response
    assert (response.role, response.chunks[0].text) == ("agent", "Booked.")
    mock = second.steps[0].expectation.mock_tool_response
    assert (mock.tool, mock.response["ok"]) == (f"{APP}/tools/pay", True)
    assert second.steps[1].expectation.agent_transfer.target_agent == f"{APP}/agents/billing"
    assert second.steps[2].expectation.updated_variables["paid"] is True
    assert second.steps[3].expectation.no_tool_calls
    assert item.lines == {
        (0, 0): 3,
        (0, 1): 4,
        (0, 2): 5,
        (1, 0): 6,
        (1, 1): 7,
        (1, 2): 8,
        (1, 3): 9,
    }
    assert item.line_of("evaluation.golden.turns[1].steps[2].updated_variables") == 8
    assert item.line_of("evaluation.display_name") == 2


def test_a_new_display_name_starts_an_evaluation_on_its_first_step() -> None:
    data = _csv(
        "One,,,1,user_input,hi,,,,,,",
        "Two,,,1,user_input,hello,,,,,,",
        ",,,2,user_input,again,,,,,,",
        header=HEADER,
    )
    one, two = csv_dialect.read(data, APP).evaluations
    assert (one.display_name, one.line, two.display_name, two.line) == ("One", 2, "Two", 3)
    assert two.evaluation is not None and len(two.evaluation.golden.turns) == 2


def test_quoted_cells_may_span_lines_and_lines_count_from_the_header() -> None:
    data = _csv('One,"a\nlong description",,,,,,,,,,', ",,,1,user_input,,,,,,,")
    [item] = csv_dialect.read(data, APP).evaluations
    assert item.problems == ["line 4: user_input needs a value in column text"]


# (rows after the header, the problems of the evaluation or of stray rows, by line)
BAD_ROWS = {
    "step before any evaluation": (
        [",,,1,user_input,hi,,,,,,", "One,,,1,user_input,hi,,,,,,"],
        ["line 2: a step before any evaluation; give its display_name first"],
    ),
    "turn_index not a number": (
        ["One,,,,,,,,,,,", ",,,x,user_input,hi,,,,,,"],
        ["line 3: turn_index 'x' is not a whole number from 1"],
    ),
    "turn_index zero": (
        ["One,,,,,,,,,,,", ",,,0,user_input,hi,,,,,,"],
        ["line 3: turn_index '0' is not a whole number from 1"],
    ),
    "turn_index skips": (
        ["One,,,,,,,,,,,", ",,,1,user_input,hi,,,,,,", ",,,3,user_input,hi,,,,,,"],
        ["line 4: turn_index 3 out of order; expected 1 or 2"],
    ),
    "first turn_index not 1": (
        ["One,,,,,,,,,,,", ",,,2,user_input,hi,,,,,,"],
        ["line 3: turn_index 2 out of order; expected 1"],
    ),
    "action_type empty": (
        ["One,,,,,,,,,,,", ",,,1,,hi,,,,,,"],
        ["line 3: action_type is empty"],
    ),
    "action_type unknown": (
        ["One,,,,,,,,,,,", ",,,1,dance,hi,,,,,,"],
        ["line 3: unknown action_type 'dance'; use one of " + ", ".join(csv_dialect.ACTIONS)],
    ),
    "value missing": (
        ["One,,,,,,,,,,,", ",,,1,tool_call,,,,,,,"],
        ["line 3: tool_call needs a value in column tool"],
    ),
    "arguments not JSON": (
        ["One,,,,,,,,,,,", ",,,1,tool_call,,t,{nope,,,,"],
        ["line 3: arguments is not valid JSON"],
    ),
    "arguments not an object": (
        ["One,,,,,,,,,,,", ",,,1,tool_call,,t,[1],,,,"],
        ["line 3: arguments must be a JSON object"],
    ),
    "non-finite number": (
        ["One,,,,,,,,,,,", ',,,1,tool_response,,t,,"{""a"": NaN}",,,'],
        ["line 3: response is not valid JSON"],
    ),
    "tool of another app": (
        ["One,,,,,,,,,,,", ",,,1,tool_call,,projects/p/locations/l/apps/b/tools/t,,,,,"],
        ["line 3: 'projects/p/locations/l/apps/b/tools/t' is not a tool of " + APP],
    ),
    "text on an action without text": (
        ["One,,,,,,,,,,,", ",,,1,no_tool_calls,hi,,,,,,"],
        ["line 3: no_tool_calls takes no text"],
    ),
    "note on a user input": (
        ["One,,,,,,,,,,,", ",,,1,user_input,hi,,,,,,n"],
        ["line 3: only expectations take a note"],
    ),
    "step without turn_index": (
        ["One,,,,,,,,,,,", ",,,,user_input,hi,,,,,,"],
        ["line 3: a step needs a turn_index"],
    ),
    "description on a step": (
        ["One,,,,,,,,,,,", ",late,,1,user_input,hi,,,,,,"],
        ["line 3: description and tags belong on an evaluation's first row"],
    ),
    "cells missing": (
        ["One,,,,,,,,,,,", ",,,1,user_input,hi"],
        ["line 3: 6 cells where the header has 12"],
    ),
    "no turns": (
        ["One,,,,,,,,,,,"],
        ["line 2: evaluation has no turns"],
    ),
    "display name twice": (
        [
            "One,,,1,user_input,hi,,,,,,",
            "Two,,,1,user_input,hi,,,,,,",
            "One,,,1,user_input,x,,,,,,",
        ],
        [
            "line 4: display_name 'One' starts a second evaluation; display names are unique "
            "within an app"
        ],
    ),
    "unterminated quote": (
        ["One,,,,,,,,,,,", ',,,1,user_input,"hi,,,,,,'],
        ["line 3: unexpected end of data; the rest of the file was not read"],
    ),
}


@pytest.mark.parametrize(("rows", "problems"), BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_every_bad_row_is_reported_with_its_line(rows: list[str], problems: list[str]) -> None:
    found = csv_dialect.read(_csv(*rows), APP)
    reported = found.strays + [p for e in found.evaluations for p in e.problems]
    assert reported == problems
    for item in found.evaluations:  # an evaluation with a bad row is not made at all
        assert (item.evaluation is None) == bool(item.problems)


def test_every_bad_row_of_one_evaluation_is_reported_and_others_stay_whole() -> None:
    data = _csv(
        "Bad,,,,,,,,,,,",
        ",,,1,user_input,,,,,,,",
        ",,,1,dance,,,,,,,",
        ",,,2,user_input,fine,,,,,,",
        "Good,,,1,user_input,hi,,,,,,",
    )
    bad, good = csv_dialect.read(data, APP).evaluations
    assert [p.split(":")[0] for p in bad.problems] == ["line 3", "line 4"]
    assert bad.evaluation is None
    assert isinstance(good.evaluation, evaluation_pb2.Evaluation) and not good.problems


# (the file, the ExchangeError's message): the file as a whole cannot be read.
BAD_FILES = {
    "not UTF-8": (
        HEADER.encode() + b"\nOne,\xff",
        f"line 2: not UTF-8 text (byte {len(HEADER) + 5})",
    ),
    "empty": (b"", "line 1: the file has no header"),
    "unknown column": (b"display_name,turn_index,action_type,colour\n", "line 1: unknown column"),
    "column twice": (b"display_name,turn_index,action_type,text,text\n", "line 1: column 'text'"),
    "column missing": (b"display_name,text\n", "line 1: missing the column(s) turn_index"),
}


@pytest.mark.parametrize(("data", "message"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_file_that_cannot_be_read_is_one_error(data: bytes, message: str) -> None:
    with pytest.raises(ExchangeError) as raised:
        csv_dialect.read(data, APP)
    assert raised.value.message.startswith(message)


def test_a_byte_order_mark_crlf_and_header_case_are_accepted() -> None:
    data = "\ufeffDisplay_Name,Turn_Index,Action_Type,Text\r\nOne,1,user_input,hi\r\n"
    [item] = csv_dialect.read(data.encode(), APP).evaluations
    assert item.evaluation is not None and not item.problems


_CELLS = st.text(st.sampled_from('ab1,"\n\r;{}[]: \x00é'), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.lists(_CELLS, min_size=0, max_size=14), max_size=8),
    raw=st.binary(max_size=64),
)
def test_any_input_is_read_or_refused_as_a_whole(rows: list[list[str]], raw: bytes) -> None:
    """Whatever the bytes, the reader answers evaluations and problems, or one ExchangeError:
    never another exception; every problem names a line of the file."""
    text = HEADER + "\n" + "\n".join(",".join(row) for row in rows)
    for data in (text.encode(), raw, HEADER.encode() + b"\n" + raw):
        try:
            found = csv_dialect.read(data, APP)
        except ExchangeError as error:
            assert error.message.startswith("line ")
            continue
        lines = data.count(b"\n") + data.count(b"\r") + 2
        for problem in found.strays + [p for e in found.evaluations for p in e.problems]:
            line = int(problem.split(":", 1)[0].removeprefix("line "))
            assert 1 <= line <= lines, problem
