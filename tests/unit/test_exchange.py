"""The export document and the Cloud Storage stand-in (src/ces_eval/core/exchange/).

Expected documents and paths are written out literally; where the expected JSON of a message is
needed it comes from google.protobuf.json_format, the definition of proto3 JSON the document uses.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import any_pb2, duration_pb2, json_format, struct_pb2, timestamp_pb2
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ces_eval.core import exchange
from ces_eval.core.aip.ports import ObjectError
from ces_eval.core.exchange import FORMAT, Bundle, ExchangeError, yaml_dialect
from ces_eval.core.exchange import document as export_document
from ces_eval.core.io import objects
from ces_eval.generated.google.cloud.ces.v1beta import (
    content_pb2,
    evaluation_pb2,
    evaluation_service_pb2,
)
from tests.support.samples import oneof_branches, populate, set_branches

E = evaluation_pb2.Evaluation
R = evaluation_pb2.EvaluationResult
UNSPECIFIED = evaluation_service_pb2.ExportOptions.EXPORT_FORMAT_UNSPECIFIED
JSON = evaluation_service_pb2.ExportOptions.JSON
YAML = evaluation_service_pb2.ExportOptions.YAML
FORMATS = pytest.mark.parametrize(
    "fmt", [UNSPECIFIED, JSON, YAML], ids=["unspecified", "json", "yaml"]
)
VARIANTS = range(24)  # enough for every oneof branch (test_samples_cover_every_oneof_branch)


def _populated(variant: int) -> Bundle:
    # Two of each, so that list order matters too.
    return Bundle(
        [populate(E(), variant), populate(E(), variant + 1)],
        [populate(R(), variant), populate(R(), variant + 1)],
    )


def _yaml_1_1(data: bytes) -> Any:
    """What PyYAML's stock safe loader (YAML 1.1 rules) reads."""
    return yaml.safe_load(data.decode("utf-8"))


def _error(data: bytes) -> ExchangeError:
    with pytest.raises(ExchangeError) as caught:
        exchange.load(data)
    return caught.value


def _json(document: object) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


# libyaml's parser and emitter (the default when PyYAML has it) and PyYAML's pure-Python ones.
IMPLEMENTATIONS = {
    "libyaml": (yaml_dialect.LOADER, yaml_dialect.DUMPER),
    "python": (yaml_dialect.PY_LOADER, yaml_dialect.PY_DUMPER),
}


@pytest.fixture(params=list(IMPLEMENTATIONS))
def yaml_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    loader, dumper = IMPLEMENTATIONS[request.param]
    monkeypatch.setattr(yaml_dialect, "LOADER", loader)
    monkeypatch.setattr(yaml_dialect, "DUMPER", dumper)
    return str(request.param)


def test_libyaml_is_used_when_available() -> None:
    assert yaml.__with_libyaml__  # PyYAML's wheels include it; the fixture relies on it
    assert issubclass(yaml_dialect.LOADER, yaml.CSafeLoader)
    assert issubclass(yaml_dialect.DUMPER, yaml.CSafeDumper)
    assert not issubclass(yaml_dialect.PY_LOADER, yaml.CSafeLoader)
    assert not issubclass(yaml_dialect.PY_DUMPER, yaml.CSafeDumper)


# --- round trips ----------------------------------------------------------------------------------


def test_samples_cover_every_oneof_branch() -> None:
    """The round trips below reach every oneof branch, so they cover every field."""
    for root in (E, R):
        found: set[str] = set()
        for variant in VARIANTS:
            found |= set_branches(populate(root(), variant))
        assert oneof_branches(root.DESCRIPTOR) <= found


@FORMATS
@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_of_fully_populated_messages(fmt: int, variant: int) -> None:
    bundle = _populated(variant)
    loaded = exchange.load(exchange.dump(bundle, fmt))
    assert loaded == bundle
    # Byte for byte as well, so that a difference is not hidden by message equality rules.
    for expected, got in zip(
        bundle.evaluations + bundle.results, loaded.evaluations + loaded.results, strict=True
    ):
        assert got.SerializeToString(deterministic=True) == expected.SerializeToString(
            deterministic=True
        )


@pytest.mark.parametrize("variant", range(4))
def test_round_trip_of_fully_populated_messages_with_pure_python_yaml(
    variant: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yaml_dialect, "LOADER", yaml_dialect.PY_LOADER)
    monkeypatch.setattr(yaml_dialect, "DUMPER", yaml_dialect.PY_DUMPER)
    bundle = _populated(variant)
    assert exchange.load(exchange.dump(bundle, YAML)) == bundle


@FORMATS
def test_round_trip_keeps_struct_time_duration_bytes_and_unicode(fmt: int, yaml_impl: str) -> None:
    variables = struct_pb2.Struct()
    variables.update(
        {
            "list": [1, "two", None, [False, {"deep": None}], []],
            "nothing": None,
            "empty": {},
            "big": 2.0**60,
            "small": -1.5e-300,
            "text": "ünï € 𝄞 – ✓",
        }
    )
    evaluation = E(
        display_name="ünï € 𝄞",
        create_time=timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=123_456_789),
        scenario=E.Scenario(task="t", variable_overrides=variables),
    )
    turn = R.GoldenResult.TurnReplayResult(
        turn_latency=duration_pb2.Duration(seconds=-3, nanos=-500_000_001)
    )
    result = R(
        execution_state=R.COMPLETED,
        golden_result=R.GoldenResult(turn_replay_results=[turn]),
    )
    step = E.Step(user_input=content_pb2.SessionInput(audio=b"\xfb\xff\x00\xbf"))
    golden = E(golden=E.Golden(turns=[E.GoldenTurn(steps=[step])]))
    bundle = Bundle([evaluation, golden], [result])
    assert exchange.load(exchange.dump(bundle, fmt)) == bundle


@FORMATS
def test_empty_bundle_has_only_the_format(fmt: int) -> None:
    data = exchange.dump(Bundle([], []), fmt)
    assert _yaml_1_1(data) == {"format": "ces-eval.export/v1"}
    assert exchange.load(data) == Bundle([], [])


def test_lists_are_omitted_when_empty() -> None:
    only_results = json.loads(exchange.dump(Bundle([], [R(name="r")]), JSON))
    assert only_results == {"format": FORMAT, "evaluationResults": [{"name": "r"}]}
    only_evaluations = json.loads(exchange.dump(Bundle([E(name="e")], []), JSON))
    assert only_evaluations == {"format": FORMAT, "evaluations": [{"name": "e"}]}


def test_json_items_are_proto3_json() -> None:
    bundle = _populated(0)
    document = json.loads(exchange.dump(bundle, JSON))
    assert list(document) == ["format", "evaluations", "evaluationResults"]
    assert document["evaluations"] == [json_format.MessageToDict(m) for m in bundle.evaluations]
    assert document["evaluationResults"] == [json_format.MessageToDict(m) for m in bundle.results]


def test_json_spelling_of_values() -> None:
    turn = R.GoldenResult.TurnReplayResult(
        turn_latency=duration_pb2.Duration(seconds=-3, nanos=-500_000_000)
    )
    result = R(
        display_name="d",
        execution_state=R.COMPLETED,
        create_time=timestamp_pb2.Timestamp(seconds=0, nanos=5),
        golden_result=R.GoldenResult(turn_replay_results=[turn]),
    )
    step = E.Step(user_input=content_pb2.SessionInput(audio=b"\xfb\xff\xbf"))
    evaluation = E(golden=E.Golden(turns=[E.GoldenTurn(steps=[step])]))
    text = exchange.dump(Bundle([evaluation], [result]), JSON).decode("utf-8")
    document = json.loads(text)
    assert document["evaluationResults"] == [
        {
            "displayName": "d",
            "createTime": "1970-01-01T00:00:00.000000005Z",
            "goldenResult": {"turnReplayResults": [{"turnLatency": "-3.500s"}]},
            "executionState": "COMPLETED",
        }
    ]
    assert document["evaluations"][0]["golden"]["turns"][0]["steps"][0] == {
        "userInput": {"audio": "+/+/"}
    }
    assert text.endswith("}\n")


def test_json_keeps_unicode_unescaped() -> None:
    data = exchange.dump(Bundle([E(display_name="ünï € 𝄞")], []), JSON)
    assert "ünï € 𝄞".encode() in data


def test_yaml_is_the_same_data_as_json(yaml_impl: str) -> None:
    bundle = _populated(1)
    from_yaml = _yaml_1_1(exchange.dump(bundle, YAML))
    assert from_yaml == json.loads(exchange.dump(bundle, JSON))
    assert list(from_yaml) == ["format", "evaluations", "evaluationResults"]


def test_yaml_is_block_style_unicode_and_unwrapped(yaml_impl: str) -> None:
    long_text = "wörter " * 40
    data = exchange.dump(Bundle([E(display_name="ünï €", description=long_text)], []), YAML)
    text = data.decode("utf-8")
    assert text.startswith("format: ces-eval.export/v1\nevaluations:\n- ")
    assert "displayName: ünï €\n" in text
    assert f"description: {long_text.rstrip()}" in text or f"'{long_text}'" in text
    assert "{" not in text


def test_unspecified_format_is_json() -> None:
    bundle = _populated(2)
    assert exchange.dump(bundle, UNSPECIFIED) == exchange.dump(bundle, JSON)
    assert exchange.dump(bundle, JSON).startswith(b"{")


def test_unknown_format_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown export format 7"):
        exchange.dump(Bundle([], []), 7)


# --- YAML types -----------------------------------------------------------------------------------

# Strings that some YAML reader (1.1 or 1.2 rules) resolves to another type when left unquoted,
# and strings that need quoting or escaping for other reasons.
TRICKY = [
    "yes", "No", "on", "OFF", "y", "n", "true", "False", "TRUE", "null", "Null", "~", "",
    "1e3", "1E3", "-1e-3", "1.5", ".5", "5.", "+12", "-0", "012", "0o17", "0x1F", "0b101",
    "1_000", "1:30", "12:30:00", "2024-01-01", "2024-01-01T10:00:00Z",
    "2001-12-14 21:59:43.10 -5", ".inf", "-.Inf", ".NaN", "NaN", "Infinity", "=", "<<",
    " leading", "trailing ", "a: b", "a #b", "- x", "#c", "[1]", "{a: 1}", "*x", "&x", "!x",
    "!!str", "%x", "@x", "`x", "|", ">", "'", '"', "?", ":", "-", "---", "...", "\n", "a\nb",
    "a\n\nb\n", "\r\n", "\t", "\x00", "\x07", "\x1b[0m", "\u2028", "\x85", "\ufeff", "\ufffe",
    "𝄞", "\u200b", "a\x85b", "\u2029x", "k\u2028",
]  # fmt: skip
# The ones a YAML reader would type if they were written unquoted.
TYPED = [
    "yes", "No", "on", "OFF", "true", "False", "TRUE", "null", "Null", "~", "1e3", "1E3",
    "-1e-3", "1.5", ".5", "5.", "+12", "-0", "012", "0o17", "0x1F", "0b101", "1_000", "1:30",
    "2024-01-01", "2024-01-01T10:00:00Z", ".inf", "-.Inf", ".NaN", "=", "<<",
]  # fmt: skip


def _tricky_bundle() -> Bundle:
    variables = struct_pb2.Struct()
    variables.update({text: text for text in TRICKY})
    variables.update({"list": list(TRICKY)})
    evaluation = E(
        display_name="yes",
        description="2024-01-01",
        tags=TRICKY,
        scenario=E.Scenario(task="1e3", rubrics=TRICKY, variable_overrides=variables),
    )
    return Bundle([evaluation], [R(display_name="null", initiated_by="0x1F")])


@FORMATS
def test_strings_that_look_like_other_types_stay_strings(fmt: int, yaml_impl: str) -> None:
    bundle = _tricky_bundle()
    data = exchange.dump(bundle, fmt)
    assert exchange.load(data) == bundle
    if fmt == YAML:  # a YAML 1.1 reader (PyYAML's stock safe loader) sees the same strings
        assert _yaml_1_1(data) == json.loads(exchange.dump(bundle, JSON))


def test_yaml_quotes_every_scalar_a_reader_could_type(yaml_impl: str) -> None:
    data = exchange.dump(_tricky_bundle(), YAML)
    styles: dict[str, set[str | None]] = {}
    for event in yaml.parse(data.decode("utf-8"), Loader=yaml.SafeLoader):
        if isinstance(event, yaml.ScalarEvent):
            styles.setdefault(event.value, set()).add(event.style)
    for text in TYPED:
        assert styles[text] <= {"'", '"'}, text


def test_yaml_numbers_bools_and_nulls_stay_typed(yaml_impl: str) -> None:
    variables = struct_pb2.Struct()
    variables.update({"n": 3, "f": 0.25, "t": True, "z": None, "e": 1e300})
    bundle = Bundle([E(scenario=E.Scenario(variable_overrides=variables))], [])
    text = exchange.dump(bundle, YAML).decode("utf-8")
    assert "t: true\n" in text
    assert "z: null\n" in text
    assert "f: 0.25\n" in text
    assert exchange.load(text.encode()) == bundle


def test_yaml_never_writes_anchors(yaml_impl: str) -> None:
    # json_format builds a fresh object for every value, so this guards against a future change.
    shared = {"x": [1]}
    text = yaml.dump({"a": shared, "b": shared}, Dumper=yaml_dialect.DUMPER)
    assert "&" not in text
    assert "*" not in text


def test_hand_written_yaml_reads_with_yaml_1_2_core_rules(yaml_impl: str) -> None:
    data = b"""\
format: ces-eval.export/v1
evaluations:
- displayName: yes
  description: 2024-01-01
  tags: [on, off, 1_000, 12:30, 0b1, y]
  scenario:
    task: no
    variableOverrides:
      decimal: 012
      octal: 0o17
      hex: 0x1F
      exponent: 1e3
      float: -.5
      bool: True
      nothing: ~
      empty:
      date: 2024-01-01
"""
    evaluation = exchange.load(data).evaluations[0]
    assert evaluation.display_name == "yes"
    assert evaluation.description == "2024-01-01"
    assert list(evaluation.tags) == ["on", "off", "1_000", "12:30", "0b1", "y"]
    assert evaluation.scenario.task == "no"
    assert json_format.MessageToDict(evaluation.scenario.variable_overrides) == {
        "decimal": 12,
        "octal": 15,
        "hex": 31,
        "exponent": 1000,
        "float": -0.5,
        "bool": True,
        "nothing": None,
        "empty": None,
        "date": "2024-01-01",
    }


def test_either_field_spelling_is_accepted() -> None:
    proto_names = {
        "format": FORMAT,
        "evaluations": [
            {
                "display_name": "x",
                "golden": {"turns": [{"steps": [{"user_input": {"text": "hi"}}]}]},
            }
        ],
        "evaluation_results": [{"execution_state": "ERROR", "initiated_by": "me"}],
    }
    step = E.Step(user_input=content_pb2.SessionInput(text="hi"))
    expected = Bundle(
        [E(display_name="x", golden=E.Golden(turns=[E.GoldenTurn(steps=[step])]))],
        [R(execution_state=R.ERROR, initiated_by="me")],
    )
    assert exchange.load(_json(proto_names)) == expected
    assert exchange.load(yaml.safe_dump(proto_names).encode()) == expected


def test_nulls_mean_empty() -> None:
    data = _json({"format": FORMAT, "evaluations": None, "evaluationResults": [{"name": None}]})
    assert exchange.load(data) == Bundle([], [R()])


# --- format detection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"format": 1}', JSON),
        (b" \r\n\t[1]", JSON),
        (b'\xef\xbb\xbf  {"a": 1}', JSON),
        (b"format: x", YAML),
        (b"---\nformat: x", YAML),
        (b"# comment\n{}", YAML),
        (b"- {a: 1}", YAML),
        (b"", YAML),
    ],
)
def test_detect_format(data: bytes, expected: int) -> None:
    assert exchange.detect_format(data) == expected


def test_load_reads_both_formats_and_a_byte_order_mark() -> None:
    bundle = Bundle([E(display_name="x")], [])
    compact = _json({"format": FORMAT, "evaluations": [{"displayName": "x"}]})
    assert exchange.load(compact) == bundle
    assert exchange.load(b"\xef\xbb\xbf" + compact) == bundle
    assert exchange.load(b"\xef\xbb\xbf" + exchange.dump(bundle, YAML)) == bundle
    flow = (
        b"# flow style is YAML too\n{format: ces-eval.export/v1, evaluations: [{displayName: x}]}"
    )
    assert exchange.load(flow) == bundle


def test_a_document_starting_with_a_brace_is_read_as_json() -> None:
    error = _error(b"{format: ces-eval.export/v1}")
    assert error.path == ""
    assert error.message.startswith("invalid JSON: ")
    assert "line 1, column 2" in error.message


# --- errors ---------------------------------------------------------------------------------------


def _doc(**items: Any) -> bytes:
    return _json({"format": FORMAT, **items})


def _evaluation(item: object) -> bytes:
    return _doc(evaluations=[{"displayName": "ok"}, item])


YAML_HEAD = b"format: ces-eval.export/v1\nevaluations:\n"

ERRORS = [
    # (id, document, path, fragment of the message)
    ("not utf-8", b'{"format": "\xff"}', "", "not UTF-8 text (byte 12)"),
    ("empty", b"", "", "the document is empty"),
    ("blank", b" \n\t\r\n", "", "the document is empty"),
    ("only a BOM", b"\xef\xbb\xbf", "", "the document is empty"),
    ("bad json", b'{"format": ', "", "invalid JSON: Expecting value (line 1, column 12)"),
    ("json trailing data", b'{"format": 1} x', "", "invalid JSON: Extra data"),
    ("json NaN", b'{"format": NaN}', "", "invalid JSON: NaN is not JSON"),
    ("json Infinity", b'{"format": -Infinity}', "", "invalid JSON: -Infinity is not JSON"),
    ("bad yaml", b"a: b: c", "", "invalid YAML: mapping values are not allowed"),
    ("yaml line", b"format: x\n- y\n", "", "(line 2, column 1)"),
    ("two yaml documents", b"a: 1\n---\nb: 2\n", "", "expected a single document"),
    ("yaml binary tag", YAML_HEAD + b"- {displayName: !!binary aGk=}\n", "", "binary"),
    (
        "yaml timestamp tag",
        YAML_HEAD + b"- {createTime: !!timestamp 2024-01-01}\n",
        "",
        "timestamp",
    ),
    ("yaml python tag", b"!!python/object:os.system {}", "", "python/object"),
    ("yaml set", YAML_HEAD + b"- !!set {a, b}\n", "", "tag:yaml.org,2002:set"),
    ("yaml bad int", YAML_HEAD + b"- {maxTurns: !!int x}\n", "", "'x' is not an integer"),
    ("yaml bad float", YAML_HEAD + b"- {x: !!float x}\n", "", "'x' is not a number"),
    ("yaml number key", YAML_HEAD + b"- {1: x}\n", "", "keys must be strings (quote this key)"),
    ("yaml null key", YAML_HEAD + b"- {~: x}\n", "", "keys must be strings"),
    ("top is a list", b"[]", "", "expected an object at the top of the document"),
    ("top is a scalar", b"hello", "", "expected an object at the top of the document"),
    ("top is null", b"~", "", "expected an object at the top of the document"),
    ("nested too deeply", b"[" * 100_000, "", "the document is nested too deeply"),
    (
        "format missing",
        _json({"evaluations": []}),
        "format",
        'missing; expected "ces-eval.export/v1"',
    ),
    (
        "format wrong",
        _json({"format": "ces-eval.export/v2"}),
        "format",
        'unsupported format "ces-eval.export/v2"',
    ),
    ("format a number", _json({"format": 1}), "format", "unsupported format 1"),
    ("format null", _json({"format": None}), "format", "unsupported format null"),
    ("unknown top key", _doc(evaluation=[]), "evaluation", 'unknown key "evaluation"'),
    ("unknown odd top key", _doc(**{"a b": 1}), '["a b"]', 'unknown key "a b"'),
    (
        "results spelled twice",
        _doc(evaluationResults=[], evaluation_results=[]),
        "evaluation_results",
        '"evaluation_results" repeats "evaluationResults"',
    ),
    ("evaluations not a list", _doc(evaluations={}), "evaluations", "Expected a JSON array."),
    (
        "results not a list",
        _doc(evaluation_results="x"),
        "evaluation_results",
        "Expected a JSON array.",
    ),
    (
        "item not an object",
        _evaluation([]),
        "evaluations[1]",
        "Expected a JSON object (Evaluation).",
    ),
    ("item null", _evaluation(None), "evaluations[1]", "Expected a JSON object (Evaluation)."),
    (
        "unknown field",
        _evaluation({"bogus": 1}),
        "evaluations[1].bogus",
        "Unknown field 'bogus' in Evaluation.",
    ),
    ("unknown odd field", _evaluation({"a.b": 1}), 'evaluations[1]["a.b"]', "Unknown field 'a.b'"),
    (
        "unknown nested field",
        _evaluation({"golden": {"turns": [{"steps": [{}, {"userInput": {"txt": "x"}}]}]}}),
        "evaluations[1].golden.turns[0].steps[1].userInput.txt",
        "Unknown field 'txt' in SessionInput.",
    ),
    (
        "unknown result field",
        _doc(
            evaluationResults=[
                {"goldenResult": {"turnReplayResults": [{"spanLatencies": [{"x": 1}]}]}}
            ]
        ),
        "evaluationResults[0].goldenResult.turnReplayResults[0].spanLatencies[0].x",
        "Unknown field 'x'",
    ),
    (
        "field spelled twice",
        _evaluation({"displayName": "a", "display_name": "b"}),
        "evaluations[1].display_name",
        "Given twice (as 'displayName' and 'display_name').",
    ),
    (
        "two oneof members",
        _evaluation({"golden": {}, "scenario": {}}),
        "evaluations[1].scenario",
        "Only one of the inputs fields may be set; golden is.",
    ),
    (
        "message is a list",
        _evaluation({"golden": []}),
        "evaluations[1].golden",
        "Expected a JSON object (Golden).",
    ),
    (
        "message is a string",
        _evaluation({"scenario": "x"}),
        "evaluations[1].scenario",
        "Expected a JSON object (Scenario).",
    ),
    (
        "repeated is an object",
        _evaluation({"tags": {"a": 1}}),
        "evaluations[1].tags",
        "Expected a JSON array.",
    ),
    (
        "repeated messages is a string",
        _evaluation({"golden": {"turns": "x"}}),
        "evaluations[1].golden.turns",
        "Expected a JSON array.",
    ),
    (
        "null in a list",
        _evaluation({"tags": ["a", None]}),
        "evaluations[1].tags[1]",
        "A list element cannot be null.",
    ),
    (
        "null message in a list",
        _evaluation({"golden": {"turns": [None]}}),
        "evaluations[1].golden.turns[0]",
        "A list element cannot be null.",
    ),
    (
        "number for a string",
        _evaluation({"displayName": 5}),
        "evaluations[1].displayName",
        "Invalid value 5: expected a string.",
    ),
    (
        "number in a string list",
        _evaluation({"tags": ["a", "b", 5]}),
        "evaluations[1].tags[2]",
        "Invalid value 5: expected a string.",
    ),
    (
        "string for a bool",
        _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"willContinue": "yes"}}]}]}}),
        "evaluations[1].golden.turns[0].steps[0].userInput.willContinue",
        'Invalid value "yes": expected true or false.',
    ),
    (
        "string for an int",
        _evaluation({"scenario": {"maxTurns": "many"}}),
        "evaluations[1].scenario.maxTurns",
        'Invalid value "many": expected a 32-bit integer.',
    ),
    (
        "int out of range",
        _evaluation({"scenario": {"maxTurns": 2**40}}),
        "evaluations[1].scenario.maxTurns",
        "Invalid value 1099511627776: expected a 32-bit integer.",
    ),
    (
        "fraction for an int",
        _evaluation({"scenario": {"maxTurns": 1.5}}),
        "evaluations[1].scenario.maxTurns",
        "Invalid value 1.5: expected a 32-bit integer.",
    ),
    (
        "unknown enum",
        _doc(evaluationResults=[{"executionState": "NOPE"}]),
        "evaluationResults[0].executionState",
        'Invalid value "NOPE": expected one of EXECUTION_STATE_UNSPECIFIED, RUNNING, COMPLETED, '
        "ERROR, CANCELLED, QUEUED (or its number).",
    ),
    (
        "bad timestamp",
        _evaluation({"createTime": "yesterday"}),
        "evaluations[1].createTime",
        'Invalid value "yesterday": expected an RFC 3339 timestamp such as '
        '"2024-01-31T09:30:00.5Z".',
    ),
    (
        "timestamp without zone",
        _evaluation({"updateTime": "2024-01-01T00:00:00"}),
        "evaluations[1].updateTime",
        'Invalid value "2024-01-01T00:00:00": expected an RFC 3339 timestamp',
    ),
    (
        "bad duration",
        _doc(
            evaluationResults=[
                {"goldenResult": {"turnReplayResults": [{}, {"turnLatency": "3 minutes"}]}}
            ]
        ),
        "evaluationResults[0].goldenResult.turnReplayResults[1].turnLatency",
        'Invalid value "3 minutes": expected a duration in seconds such as "1.5s" or "-3s".',
    ),
    (
        "bad base64",
        _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"audio": "%%%"}}]}]}}),
        "evaluations[1].golden.turns[0].steps[0].userInput.audio",
        'Invalid value "%%%": expected base64 text.',
    ),
    (
        "base64 of impossible length",
        _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"audio": "AAAAA"}}]}]}}),
        "evaluations[1].golden.turns[0].steps[0].userInput.audio",
        'Invalid value "AAAAA": expected base64 text.',
    ),
    (
        "base64 with too much padding",
        _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"audio": "AA==="}}]}]}}),
        "evaluations[1].golden.turns[0].steps[0].userInput.audio",
        "expected base64 text",
    ),
    (
        "bytes as a number",
        _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"audio": 12}}]}]}}),
        "evaluations[1].golden.turns[0].steps[0].userInput.audio",
        "Invalid value 12: expected base64 text.",
    ),
    (
        "struct is a list",
        _evaluation({"scenario": {"variableOverrides": [1]}}),
        "evaluations[1].scenario.variableOverrides",
        "Invalid value [1]: expected a JSON object.",
    ),
    (
        "any without type",
        _doc(evaluationResults=[{"error": {"details": [{"value": "x"}]}}]),
        "evaluationResults[0].error.details[0]",
        "@type is missing",
    ),
    (
        "any of unknown type",
        _doc(
            evaluationResults=[{"error": {"details": [{"@type": "type.googleapis.com/no.Such"}]}}]
        ),
        "evaluationResults[0].error.details[0]",
        "no.Such",
    ),
    (
        "duplicate json key",
        b'{"format": "ces-eval.export/v1", "evaluations": [{"tags": [], "tags": []}]}',
        "evaluations[0].tags",
        'key "tags" occurs more than once',
    ),
    (
        "duplicate top key",
        b'{"format": "ces-eval.export/v1", "format": "ces-eval.export/v1"}',
        "format",
        'key "format" occurs more than once',
    ),
    (
        "duplicate yaml key",
        YAML_HEAD + b"- displayName: a\n  displayName: b\n",
        "evaluations[0].displayName",
        'key "displayName" occurs more than once',
    ),
    (
        "json number too large",
        b'{"format": "ces-eval.export/v1", '
        b'"evaluations": [{"scenario": {"variableOverrides": {"x": 1e999}}}]}',
        "evaluations[0].scenario.variableOverrides.x",
        'numbers must be finite; use the strings "NaN" or "Infinity"',
    ),
    (
        "yaml .inf",
        YAML_HEAD + b"- scenario: {variableOverrides: {x: [1, .inf]}}\n",
        "evaluations[0].scenario.variableOverrides.x[1]",
        "numbers must be finite",
    ),
    (
        "yaml .nan",
        YAML_HEAD + b"- scenario: {maxTurns: .nan}\n",
        "evaluations[0].scenario.maxTurns",
        "numbers must be finite",
    ),
    (
        "yaml alias",
        YAML_HEAD + b"- &a {displayName: x}\n- *a\n",
        "evaluations[1]",
        "YAML aliases are not supported",
    ),
    (
        "yaml recursive alias",
        YAML_HEAD + b"- scenario: {variableOverrides: &a {x: [*a]}}\n",
        "evaluations[0].scenario.variableOverrides.x[0]",
        "YAML aliases are not supported",
    ),
]


@pytest.mark.parametrize(
    ("data", "path", "fragment"), [case[1:] for case in ERRORS], ids=[case[0] for case in ERRORS]
)
def test_load_errors(data: bytes, path: str, fragment: str) -> None:
    error = _error(data)
    assert error.path == path
    assert fragment in error.message
    assert str(error) == (f"{path}: {error.message}" if path else error.message)


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [case[1:] for case in ERRORS if case[1].startswith(YAML_HEAD)],
    ids=[case[0] for case in ERRORS if case[1].startswith(YAML_HEAD)],
)
def test_yaml_errors_with_either_parser(
    data: bytes, path: str, fragment: str, yaml_impl: str
) -> None:
    error = _error(data)
    assert error.path == path
    assert fragment in error.message


def test_error_messages_carry_no_json_format_paths() -> None:
    struct = _error(_evaluation({"scenario": {"variableOverrides": [1]}}))
    assert struct.message == "Invalid value [1]: expected a JSON object."
    any_ = _error(_doc(evaluationResults=[{"error": {"details": [{"value": "x"}]}}]))
    assert any_.message == 'Invalid value {"value": "x"}: @type is missing.'


def test_either_base64_alphabet_with_or_without_padding() -> None:
    for text in ("+/+/", "-_-_", "+/8=", "-_8", ""):
        data = _evaluation({"golden": {"turns": [{"steps": [{"userInput": {"audio": text}}]}]}})
        audio = exchange.load(data).evaluations[1].golden.turns[0].steps[0].user_input.audio
        assert audio == {"+/+/": b"\xfb\xff\xbf", "-_-_": b"\xfb\xff\xbf"}.get(
            text, b"\xfb\xff" if text else b""
        )


def test_exchange_error_is_a_value_error() -> None:
    error = ExchangeError("broken", "evaluations[2].displayName")
    assert isinstance(error, ValueError)
    assert (error.message, error.path) == ("broken", "evaluations[2].displayName")
    assert str(error) == "evaluations[2].displayName: broken"
    assert ExchangeError("broken").path == ""


def test_map_fields_are_checked_by_entry() -> None:
    """Evaluation and EvaluationResult have no map fields; the checks are generic all the same."""
    cls = evaluation_service_pb2.ExportEvaluationsResponse
    with pytest.raises(ExchangeError) as caught:
        export_document._parse_item({"failedEvaluations": ["x"]}, cls, "r")
    assert (caught.value.path, caught.value.message) == (
        "r.failedEvaluations",
        "Expected a JSON object (a map).",
    )
    with pytest.raises(ExchangeError) as caught:
        export_document._parse_item({"failedEvaluations": {"a": "ok", "b": 5}}, cls, "r")
    assert caught.value.path == 'r.failedEvaluations["b"]'
    parsed = export_document._parse_item({"failedEvaluations": {"a": "why"}}, cls, "r")
    assert dict(parsed.failed_evaluations) == {"a": "why"}


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
    | st.sampled_from(["RUNNING", "2024-01-01T00:00:00Z", "-1s", "AAAA", "x"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["displayName", "golden", "turns", "steps", "userInput", "text", "scenario",
                 "variableOverrides", "tags", "maxTurns", "createTime", "error", "details",
                 "@type", "value", "goldenResult", "turnReplayResults", "turnLatency",
                 "executionState", "rootSpan", "attributes", "childSpans", "name", "x"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(item=_JSON_VALUES)
def test_load_raises_only_exchange_errors(item: object) -> None:
    for document in (
        {"format": FORMAT, "evaluations": [item]},
        {"format": FORMAT, "evaluationResults": [item]},
    ):
        for data in (_json(document), yaml.safe_dump(document, allow_unicode=True).encode()):
            try:
                bundle = exchange.load(data)
            except ExchangeError:
                continue
            assert exchange.load(exchange.dump(bundle, YAML)) == bundle


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_load_of_arbitrary_bytes_raises_only_exchange_errors(data: bytes) -> None:
    with contextlib.suppress(ExchangeError):
        exchange.load(data)


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=300, deadline=None)
@given(first=_TEXT, second=_TEXT)
def test_any_string_round_trips(first: str, second: str) -> None:
    variables = struct_pb2.Struct()
    variables.update({first: second, second: [first, None, 1.5], "k": {first: first}})
    bundle = Bundle(
        [
            E(
                display_name=first,
                tags=[first, second],
                scenario=E.Scenario(task=second, variable_overrides=variables),
            )
        ],
        [R(display_name=second)],
    )
    assert exchange.load(exchange.dump(bundle, JSON)) == bundle
    for loader, dumper in IMPLEMENTATIONS.values():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(yaml_dialect, "LOADER", loader)
            patch.setattr(yaml_dialect, "DUMPER", dumper)
            assert exchange.load(exchange.dump(bundle, YAML)) == bundle


def test_any_details_round_trip() -> None:
    detail = any_pb2.Any()
    detail.Pack(duration_pb2.Duration(seconds=-1, nanos=-1))
    bundle = Bundle([], [R(error=status_pb2.Status(code=3, message="m", details=[detail]))])
    for fmt in (JSON, YAML):
        assert exchange.load(exchange.dump(bundle, fmt)) == bundle


# --- locate ---------------------------------------------------------------------------------------

ROOT = Path("/srv/exports")


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://bucket/a/b", ROOT / "bucket" / "a" / "b"),
        ("gs://bucket/a/b/", ROOT / "bucket" / "a" / "b"),
        ("gs://bucket", ROOT / "bucket"),
        ("gs://bucket/", ROOT / "bucket"),
        ("gs://b/x", ROOT / "b" / "x"),
        ("gs://my.bucket_name-1/exports/x.json", ROOT / "my.bucket_name-1" / "exports" / "x.json"),
        ("gs://b/ünï €/x y", ROOT / "b" / "ünï €" / "x y"),
        ("gs://b/%2e%2e/x", ROOT / "b" / "%2e%2e" / "x"),
        ("gs://b/a..b/...", ROOT / "b" / "a..b" / "..."),
        ("gs://b/.hidden", ROOT / "b" / ".hidden"),
        ("gs://b/a?x=1#y", ROOT / "b" / "a?x=1#y"),
        ("gs://b/" + "x" * 255, ROOT / "b" / ("x" * 255)),
    ],
)
def test_locate_accepts(uri: str, expected: Path) -> None:
    located = objects.locate(uri, ROOT)
    assert located.path == expected
    assert located.uri == uri.rstrip("/")


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("gs://b/../x", "'..' segment"),
        ("gs://b/a/../../x", "'..' segment"),
        ("gs://b/..", "'..' segment"),
        ("gs://b/a/./b", "'.' or"),
        ("gs://b/.", "'.' or"),
        ("gs://b//x", "empty"),
        ("gs://b//etc/passwd", "empty"),
        ("gs://b/a//", "empty"),
        ("gs://b//", "empty"),
        ("gs:///x", "names no bucket"),
        ("gs://", "names no bucket"),
        ("gs://..", "not a valid bucket name"),
        ("gs://../x", "not a valid bucket name"),
        ("gs://./x", "not a valid bucket name"),
        ("gs://b..c/x", "not a valid bucket name"),
        ("gs://Bucket/x", "not a valid bucket name"),
        ("gs://-b/x", "not a valid bucket name"),
        ("gs://b-/x", "not a valid bucket name"),
        ("gs://b:80/x", "not a valid bucket name"),
        ("gs://user@b/x", "not a valid bucket name"),
        ("gs://" + "b" * 223 + "/x", "not a valid bucket name"),
        ("gs://b/x\x00", "control character"),
        ("gs://b/x\x00/../../etc", "control character"),
        ("gs://b/x\n", "control character"),
        ("gs://b/x\x7f", "control character"),
        ("gs://b\\x", "backslash"),
        ("gs://b/a\\..\\..\\x", "backslash"),
        ("gs://b/\udc80", "not valid Unicode"),
        ("gs://b/" + "x" * 256, "longer than 255 bytes"),
        ("gs://b/" + "é" * 128, "longer than 255 bytes"),
        ("gs://b/" + "/".join(["x" * 200] * 6), "longer than 1024 bytes"),
        ("s3://b/x", "expected a gs:// URI"),
        ("GS://b/x", "expected a gs:// URI"),
        ("gs:/b/x", "expected a gs:// URI"),
        ("gs:b/x", "expected a gs:// URI"),
        ("/etc/passwd", "expected a gs:// URI"),
        ("b/x", "expected a gs:// URI"),
        ("file:///etc/passwd", "expected a gs:// URI"),
        (" gs://b/x", "expected a gs:// URI"),
        ("", "expected a gs:// URI"),
    ],
)
def test_locate_rejects(uri: str, fragment: str) -> None:
    with pytest.raises(ObjectError) as caught:
        objects.locate(uri, ROOT)
    assert fragment in caught.value.message


def test_locate_is_relative_to_a_relative_root() -> None:
    assert objects.locate("gs://b/x", Path()).path == Path("b/x")
    assert objects.locate("gs://b/x", Path("data/exports")).path == Path("data/exports/b/x")


def test_locate_in_a_project_namespace_names_the_uri_only() -> None:
    located = objects.locate("gs://b/x/", ROOT, "proj-a")
    assert located.path == ROOT / "proj-a" / "b" / "x"
    assert located.parts == ("proj-a", "b", "x")
    assert located.uri == "gs://b/x"
    assert located.child("f.json").uri == "gs://b/x/f.json"


# --- write_atomically -----------------------------------------------------------------------------


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def _object(root: Path, *parts: str) -> objects.ObjectPath:
    return objects.ObjectPath("gs://" + "/".join(parts), root, parts)


def test_write_creates_the_file_with_the_exact_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024) + b"\x00\r\n"
    target = tmp_path / "export.json"
    objects.write_atomically(_object(tmp_path, "export.json"), data)
    assert target.read_bytes() == data
    assert _listing(tmp_path) == ["export.json"]


def test_write_of_empty_data(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    objects.write_atomically(_object(tmp_path, "empty"), b"")
    assert target.read_bytes() == b""
    assert _listing(tmp_path) == ["empty"]


def test_write_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "export.yaml"
    target.write_bytes(b"old content that is longer than the new one")
    objects.write_atomically(_object(tmp_path, "export.yaml"), b"new")
    assert target.read_bytes() == b"new"
    assert _listing(tmp_path) == ["export.yaml"]


def test_write_creates_missing_folders(tmp_path: Path) -> None:
    target = objects.locate("gs://bucket/a/b/export.json", tmp_path)
    objects.write_atomically(target, b"{}")
    assert target.path.read_bytes() == b"{}"
    assert _listing(tmp_path / "bucket" / "a" / "b") == ["export.json"]


def test_written_file_has_ordinary_permissions(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        objects.write_atomically(_object(tmp_path, "x"), b"1")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o644


def test_data_is_synced_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"0123456789" * 1000
    target = tmp_path / "new" / "export.json"
    events: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            events.append(("file", info.st_size))
        else:
            events.append(("folder", info.st_ino))
        real_fsync(fd)

    def replace(source: Any, destination: Any, **dir_fds: int) -> None:
        events.append(("replace", 0))
        real_replace(source, destination, **dir_fds)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    objects.write_atomically(_object(tmp_path, "new", "export.json"), data)
    assert target.read_bytes() == data
    assert events == [
        ("folder", tmp_path.stat().st_ino),  # the new folder's own entry, once it is made
        ("file", len(data)),
        ("replace", 0),
        ("folder", (tmp_path / "new").stat().st_ino),
    ]


def test_failing_rename_leaves_no_target_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replace(source: Any, destination: Any, **_: int) -> None:
        assert (tmp_path / source).read_bytes() == b"payload"  # the data was written in full
        raise OSError(errno.EIO, "simulated rename failure")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="simulated rename failure"):
        objects.write_atomically(_object(tmp_path, "export.json"), b"payload")
    assert _listing(tmp_path) == []


def test_failing_rename_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "export.json"
    target.write_bytes(b"previous")

    def replace(source: Any, destination: Any, **_: int) -> None:
        raise OSError(errno.EXDEV, "simulated rename failure")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="simulated rename failure"):
        objects.write_atomically(_object(tmp_path, "export.json"), b"next")
    assert target.read_bytes() == b"previous"
    assert _listing(tmp_path) == ["export.json"]


def test_write_failing_half_way_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls: list[int] = []

    def write(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # a short write, then ...
        raise OSError(errno.ENOSPC, "simulated full disk")  # ... the disk fills up

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="simulated full disk"):
        objects.write_atomically(_object(tmp_path, "export.json"), b"x" * 1000)
    assert calls == [1000, 500]  # the short write was continued, not taken as the end
    assert _listing(tmp_path) == []


def test_failing_fsync_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="simulated I/O error"):
        objects.write_atomically(_object(tmp_path, "export.json"), b"data")
    assert _listing(tmp_path) == []


def test_target_that_is_a_folder_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "export.json").mkdir()
    (tmp_path / "export.json" / "inside").write_bytes(b"keep")
    with pytest.raises(IsADirectoryError):
        objects.write_atomically(_object(tmp_path, "export.json"), b"data")
    assert _listing(tmp_path) == ["export.json"]
    assert (tmp_path / "export.json" / "inside").read_bytes() == b"keep"


def test_interrupted_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def replace(source: Any, destination: Any, **_: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        objects.write_atomically(_object(tmp_path, "export.json"), b"data")
    assert _listing(tmp_path) == []
