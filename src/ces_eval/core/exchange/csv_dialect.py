"""The evaluation batch upload CSV (docs/import-csv.md): what ImportEvaluations reads from
``csv_content``.

A header names the columns (:data:`COLUMNS`; ``display_name``, ``turn_index`` and
``action_type`` are required). A row whose ``display_name`` differs from the current
evaluation's starts a new evaluation: without a ``turn_index`` it is the evaluation's own row
(``description``, ``tags``), with one it is already its first step. Every other row is one step
of a golden turn: the rows of a turn share its ``turn_index`` (1, 2, ... in order) and each
row's ``action_type`` says which step it is.

:func:`read` reports every bad row with its line number (the line a row starts on, counted
from 1 with the header) and keeps each evaluation whole or not at all: an evaluation with a bad
row is returned with its problems and without a message. A problem of the file as a whole (not
UTF-8, a bad header) is an :class:`~.errors.ExchangeError`: nothing of it can be read.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import json_format, struct_pb2

from ces_eval.core.exchange.errors import ExchangeError
from ces_eval.generated.google.cloud.ces.v1beta import content_pb2, evaluation_pb2

__all__ = ["ACTIONS", "COLUMNS", "REQUIRED_COLUMNS", "CsvEvaluation", "CsvImport", "read"]

_Evaluation = evaluation_pb2.Evaluation
REQUIRED_COLUMNS = ("display_name", "turn_index", "action_type")
# Columns of the evaluation's own row, and of its steps (which ones an action reads: ACTIONS).
_EVALUATION_COLUMNS = ("description", "tags")
_STEP_COLUMNS = ("text", "tool", "arguments", "response", "agent", "variables", "note")
COLUMNS = (*REQUIRED_COLUMNS, *_EVALUATION_COLUMNS, *_STEP_COLUMNS)
_TAG_SEPARATOR = ";"
_TURN = re.compile(r"[0-9]{1,4}")


class _RowError(Exception):
    """One problem of one row (its line is added where the row is known)."""


def _json_object(value: str, column: str) -> struct_pb2.Struct:
    """A JSON object of a cell, as a Struct; non-finite numbers are not JSON."""

    def constant(name: str) -> float:
        raise ValueError(name)

    try:
        parsed = json.loads(value, parse_constant=constant)
    except ValueError:
        raise _RowError(f"{column} is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise _RowError(f"{column} must be a JSON object")
    struct = struct_pb2.Struct()
    try:
        json_format.ParseDict(parsed, struct)
    except (json_format.ParseError, ValueError, TypeError, RecursionError):
        raise _RowError(f"{column} is not a JSON object a Struct can hold") from None
    return struct


def _required(cells: dict[str, str], column: str, action: str) -> str:
    value = cells.get(column, "")
    if not value:
        raise _RowError(f"{action} needs a value in column {column}")
    return value


def _expectation(**condition: object) -> evaluation_pb2.Evaluation.Step:
    expectation = _Evaluation.GoldenExpectation(**condition)  # type: ignore[arg-type]  # fields' own types
    return _Evaluation.Step(expectation=expectation)


# A step built from a row's cells and the app's resource names (``tool``, ``agent`` given as
# an ID are completed with the app's name).
_Builder = Callable[[dict[str, str], Callable[[str, str], str]], _Evaluation.Step]


def _user_input(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    return _Evaluation.Step(
        user_input=content_pb2.SessionInput(text=_required(cells, "text", "user_input"))
    )


def _agent_response(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    text = _required(cells, "text", "agent_response")
    message = content_pb2.Message(role="agent", chunks=[content_pb2.Chunk(text=text)])
    return _expectation(agent_response=message)


def _tool_call(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    tool = name("tools", _required(cells, "tool", "tool_call"))
    call = content_pb2.ToolCall(tool=tool)
    if cells.get("arguments"):
        call.args.CopyFrom(_json_object(cells["arguments"], "arguments"))
    return _expectation(tool_call=call)


def _tool_response(action: str) -> _Builder:
    def build(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
        tool = name("tools", _required(cells, "tool", action))
        response = _json_object(_required(cells, "response", action), "response")
        return _expectation(**{action: content_pb2.ToolResponse(tool=tool, response=response)})

    return build


def _agent_transfer(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    agent = name("agents", _required(cells, "agent", "agent_transfer"))
    return _expectation(agent_transfer=content_pb2.AgentTransfer(target_agent=agent))


def _updated_variables(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    variables = _required(cells, "variables", "updated_variables")
    return _expectation(updated_variables=_json_object(variables, "variables"))


def _no_tool_calls(cells: dict[str, str], name: Callable[[str, str], str]) -> _Evaluation.Step:
    return _expectation(no_tool_calls=True)


# action_type (case and "-" or " " for "_" ignored) → the step it makes.
ACTIONS: dict[str, _Builder] = {
    "user_input": _user_input,
    "agent_response": _agent_response,
    "tool_call": _tool_call,
    "tool_response": _tool_response("tool_response"),
    "mock_tool_response": _tool_response("mock_tool_response"),
    "agent_transfer": _agent_transfer,
    "updated_variables": _updated_variables,
    "no_tool_calls": _no_tool_calls,
}


@dataclass
class CsvEvaluation:
    """One evaluation of the file: the line of its first row, its display name, the message
    (None when a row of it is bad) and its problems, each prefixed with its line. ``lines``
    gives the line of each step, ``(turn, step)`` counted from 0 as in the message."""

    line: int
    display_name: str
    evaluation: _Evaluation | None = None
    problems: list[str] = field(default_factory=list)
    lines: dict[tuple[int, int], int] = field(default_factory=dict)

    def line_of(self, path: str) -> int:
        """The line of the row behind a field path of the evaluation
        (``evaluation.golden.turns[1].steps[0].user_input.text``); the evaluation's first line
        for a path outside the steps."""
        match = re.search(r"\.golden\.turns\[(\d+)\](?:\.steps\[(\d+)\])?", path)
        if match is None:
            return self.line
        turn, step = int(match.group(1)), int(match.group(2) or 0)
        return self.lines.get((turn, step), self.line)


@dataclass
class CsvImport:
    """What :func:`read` found: the evaluations in file order and the problems of rows that
    belong to none (steps before the first evaluation)."""

    evaluations: list[CsvEvaluation] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)


def _text(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ExchangeError(f"line {line}: not UTF-8 text (byte {error.start})") from None
    return text.removeprefix("\ufeff")


def _header(row: list[str]) -> list[str]:
    header = [cell.strip().lower() for cell in row]
    unknown = [column for column in header if column not in COLUMNS]
    if unknown:
        raise ExchangeError(
            f"line 1: unknown column {unknown[0]!r}; the columns are {', '.join(COLUMNS)}"
        )
    repeated = [column for index, column in enumerate(header) if column in header[:index]]
    if repeated:
        raise ExchangeError(f"line 1: column {repeated[0]!r} appears twice")
    missing = [column for column in REQUIRED_COLUMNS if column not in header]
    if missing:
        raise ExchangeError(f"line 1: missing the column(s) {', '.join(missing)}")
    return header


class _Reader:
    """The state of one read: the evaluation being built and where its turns are."""

    def __init__(self, name: Callable[[str, str], str]) -> None:
        self.found = CsvImport()
        self.name = name
        self.current: CsvEvaluation | None = None
        self.turns: list[_Evaluation.GoldenTurn] = []

    def close(self) -> None:
        """End the current evaluation: its message when none of its rows was bad."""
        current = self.current
        if current is None:
            return
        if not self.turns and not current.problems:
            current.problems.append(f"line {current.line}: evaluation has no turns")
        if not current.problems:
            evaluation = current.evaluation or _Evaluation()
            evaluation.golden.turns.extend(self.turns)
            current.evaluation = evaluation
        else:
            current.evaluation = None
        self.current = None
        self.turns = []

    def start(self, line: int, cells: dict[str, str]) -> CsvEvaluation:
        self.close()
        display_name = cells["display_name"]
        current = CsvEvaluation(line, display_name)
        if any(e.display_name == display_name for e in self.found.evaluations):
            current.problems.append(
                f"line {line}: display_name {display_name!r} starts a second evaluation; "
                "display names are unique within an app"
            )
        tags = [t.strip() for t in cells.get("tags", "").split(_TAG_SEPARATOR) if t.strip()]
        current.evaluation = _Evaluation(
            display_name=display_name, description=cells.get("description", ""), tags=tags
        )
        self.found.evaluations.append(current)
        self.current = current
        return current

    def row(self, line: int, cells: dict[str, str]) -> None:
        """Take one row (``cells``: every column of the header, stripped)."""
        current = self.current
        starts = bool(cells["display_name"]) and (
            current is None or cells["display_name"] != current.display_name
        )
        if starts:
            current = self.start(line, cells)
        elif any(cells.get(c) for c in _EVALUATION_COLUMNS):
            self.bad(current, line, "description and tags belong on an evaluation's first row")
            return
        if not cells["turn_index"]:
            if cells["action_type"] or any(cells.get(c) for c in _STEP_COLUMNS):
                self.bad(current, line, "a step needs a turn_index")
            elif not starts:
                self.bad(current, line, "the row names no evaluation and no turn")
            return
        if current is None:
            self.bad(None, line, "a step before any evaluation; give its display_name first")
            return
        try:
            self._step(current, line, cells)
        except _RowError as error:
            self.bad(current, line, str(error))

    def _step(self, current: CsvEvaluation, line: int, cells: dict[str, str]) -> None:
        text = cells["turn_index"]
        if not _TURN.fullmatch(text) or int(text) < 1:
            raise _RowError(f"turn_index {text!r} is not a whole number from 1")
        turn = int(text)
        expected = len(self.turns)  # the current turn's index, from 1 (0: none yet)
        if turn not in (expected, expected + 1):
            wanted = "1" if expected == 0 else f"{expected} or {expected + 1}"
            raise _RowError(f"turn_index {turn} out of order; expected {wanted}")
        if turn > expected:  # the turn exists even when this row is bad: no cascade
            self.turns.append(_Evaluation.GoldenTurn())
        action = re.sub(r"[-\s]", "_", cells["action_type"].lower())
        if not action:
            raise _RowError("action_type is empty")
        builder = ACTIONS.get(action)
        if builder is None:
            raise _RowError(
                f"unknown action_type {cells['action_type']!r}; use one of {', '.join(ACTIONS)}"
            )
        step = builder(cells, self.name)
        if action not in ("user_input", "agent_response") and cells.get("text"):
            raise _RowError(f"{action} takes no text")
        if step.HasField("expectation") and cells.get("note"):
            step.expectation.note = cells["note"]
        elif cells.get("note"):
            raise _RowError("only expectations take a note")
        steps = self.turns[-1].steps
        current.lines[(len(self.turns) - 1, len(steps))] = line
        steps.append(step)

    def bad(self, current: CsvEvaluation | None, line: int, problem: str) -> None:
        message = f"line {line}: {problem}"
        if current is None:
            self.found.strays.append(message)
        else:
            current.problems.append(message)


def read(data: bytes, app: str) -> CsvImport:
    """The evaluations of a batch upload CSV for ``app`` (whose name completes tool and agent
    IDs: ``lookup`` becomes ``{app}/tools/lookup``); raises :class:`ExchangeError` when the
    file cannot be read at all."""

    def name(collection: str, value: str) -> str:
        if "/" not in value:
            return f"{app}/{collection}/{value}"
        if not value.startswith(f"{app}/{collection}/"):
            raise _RowError(f"{value!r} is not a {collection[:-1]} of {app}")
        return value

    text = _text(data)
    rows = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        first = next(rows, None)
    except csv.Error as error:
        raise ExchangeError(f"line 1: {error}") from None
    if first is None or not any(cell.strip() for cell in first):
        raise ExchangeError("line 1: the file has no header")
    header = _header(first)
    reader = _Reader(name)
    ended = rows.line_num
    while True:
        line = ended + 1
        try:
            row = next(rows, None)
        except csv.Error as error:
            reader.bad(reader.current, line, f"{error}; the rest of the file was not read")
            break
        if row is None:
            break
        ended = rows.line_num
        if not any(cell.strip() for cell in row):
            continue  # blank lines and rows of empty cells
        if len(row) != len(header):
            reader.bad(reader.current, line, f"{len(row)} cells where the header has {len(header)}")
            continue
        reader.row(line, {c: v.strip() for c, v in zip(header, row, strict=True)})
    reader.close()
    return reader.found
