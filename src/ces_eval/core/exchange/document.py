"""The export document (docs/export-format.md): what ExportEvaluations, ExportEvaluationResults
and ExportEvaluationRuns write and the emulator's ImportEvaluations reads.

:func:`dump` renders a :class:`Bundle` as JSON or YAML (:mod:`.yaml_dialect`); :func:`load` reads
either back and reports every problem as an :class:`ExchangeError` carrying a field path inside
the document (and a form that quotes nothing of it, for documents read from files).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from google.protobuf import descriptor, json_format
from google.protobuf.message import Message

from ces_eval.core.exchange import yaml_dialect
from ces_eval.core.exchange.errors import ExchangeError
from ces_eval.core.exchange.yaml_dialect import Object
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2
from ces_eval.transcoding import printer
from ces_eval.transcoding.body import check_document, member_path

__all__ = ["FORMAT", "Bundle", "detect_format", "dump", "load", "parse", "render"]

FORMAT = "ces-eval.export/v1"
_ExportFormat = evaluation_service_pb2.ExportOptions.ExportFormat
_EVALUATIONS = "evaluations"
_RESULTS = "evaluationResults"
_RUNS = "evaluationRuns"
_KEYS = {
    "format": "format",
    _EVALUATIONS: _EVALUATIONS,
    _RESULTS: _RESULTS,
    "evaluation_results": _RESULTS,
    _RUNS: _RUNS,
    "evaluation_runs": _RUNS,
}
_M = TypeVar("_M", bound=Message)


@dataclass(frozen=True)
class Bundle:
    """The content of one export document: evaluations, evaluation results and evaluation
    runs, in order."""

    evaluations: list[evaluation_pb2.Evaluation] = field(default_factory=list)
    results: list[evaluation_pb2.EvaluationResult] = field(default_factory=list)
    runs: list[evaluation_pb2.EvaluationRun] = field(default_factory=list)


# -- document paths ----------------------------------------------------------------------------


def _quoted(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def _element(parent: str, index: int) -> str:
    return f"{parent}[{index}]"


# -- dump ----------------------------------------------------------------------------------------


def dump(bundle: Bundle, fmt: int) -> bytes:
    """Render ``bundle`` as an export document; ``fmt`` is an ``ExportOptions.ExportFormat``
    value (``EXPORT_FORMAT_UNSPECIFIED`` means JSON). Other values raise ``ValueError``."""
    document: dict[str, Any] = {"format": FORMAT}
    if bundle.evaluations:
        document[_EVALUATIONS] = [printer.to_dict(e) for e in bundle.evaluations]
    if bundle.results:
        document[_RESULTS] = [printer.to_dict(r) for r in bundle.results]
    if bundle.runs:
        document[_RUNS] = [printer.to_dict(r) for r in bundle.runs]
    return render(document, fmt)


def render(document: dict[str, Any], fmt: int) -> bytes:
    """``document`` as JSON (``fmt`` JSON or unspecified) or YAML; other values raise
    ``ValueError``."""
    if fmt in (_ExportFormat.EXPORT_FORMAT_UNSPECIFIED, _ExportFormat.JSON):
        text = json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False)
        return (text + "\n").encode("utf-8")
    if fmt == _ExportFormat.YAML:
        return yaml_dialect.write(document)
    raise ValueError(f"unknown export format {fmt}")


# -- load ----------------------------------------------------------------------------------------


def detect_format(data: bytes) -> int:
    """JSON when the first character that is not blank (or a byte order mark) is ``{`` or ``[``,
    else YAML. Returns an ``ExportOptions.ExportFormat`` value."""
    head = data.lstrip(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return _ExportFormat.JSON if head[:1] in (b"{", b"[") else _ExportFormat.YAML


def _object_pairs(pairs: list[tuple[str, Any]]) -> Object:
    data = Object()
    for key, value in pairs:
        if key in data:
            data.duplicates.append(key)
        data[key] = value
    return data


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def parse(data: bytes) -> object:
    """The JSON-like value of the JSON or YAML document ``data`` (:func:`detect_format`); raises
    :class:`ExchangeError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ExchangeError(f"not UTF-8 text (byte {error.start})", quotes=False) from None
    text = text.removeprefix("\ufeff")
    if not text.strip(" \t\r\n"):
        raise ExchangeError("the document is empty", quotes=False)
    if detect_format(data) == _ExportFormat.JSON:
        try:
            return json.loads(
                text, object_pairs_hook=_object_pairs, parse_constant=_reject_constant
            )
        except json.JSONDecodeError as error:
            # The C scanner's messages are fixed words; the Python one's may end with ": <the
            # offending character>", which the blind form leaves out.
            where = f"(line {error.lineno}, column {error.colno})"
            raise ExchangeError(
                f"invalid JSON: {error.msg} {where}",
                blind=(f"invalid JSON: {error.msg.split(':', 1)[0]} {where}", ""),
            ) from None
        except ValueError as error:
            raise ExchangeError(f"invalid JSON: {error}", blind=("invalid JSON", "")) from None
    return yaml_dialect.read(text)


def _check_values(value: object, path: str, seen: set[int]) -> None:
    """Reject what JSON cannot say: repeated keys, non-finite numbers, shared (aliased) nodes."""
    if isinstance(value, dict | list):
        if id(value) in seen:
            message = "YAML aliases are not supported; write the value out"
            raise ExchangeError(message, path, blind=(message, ""))
        seen.add(id(value))
    if isinstance(value, dict):
        if isinstance(value, Object) and value.duplicates:
            key = value.duplicates[0]
            raise ExchangeError(
                f"key {_quoted(key)} occurs more than once",
                member_path(path, key),
                blind=("a key occurs more than once in an object", ""),
            )
        for key, item in value.items():
            _check_values(item, member_path(path, key), seen)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_values(item, _element(path, index), seen)
    elif isinstance(value, float) and not math.isfinite(value):
        message = 'numbers must be finite; use the strings "NaN" or "Infinity"'
        raise ExchangeError(message, path, blind=(message, ""))


def _descriptor(cls: type[Message]) -> descriptor.Descriptor:
    # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
    return cast("descriptor.Descriptor", cls.DESCRIPTOR)


_WRAPPER = re.compile(r"Failed to parse \w+ field: ")
_AT_PATH = re.compile(r'\s+at\s+"?[A-Za-z_][^\s"]*"?\.?\Z')


def _innermost(error: BaseException) -> str:
    """The most specific json_format complaint in ``error``'s chain, without json_format's own
    paths."""
    found = error
    while error.__cause__ is not None:
        error = error.__cause__
        if isinstance(error, json_format.ParseError):
            found = error
    text = _AT_PATH.sub("", str(found))
    while _WRAPPER.match(text):
        text = _WRAPPER.sub("", text, count=1).removesuffix(".")
    return _AT_PATH.sub("", text)


def _parse_item(value: object, cls: type[_M], path: str) -> _M:
    """One message of the document, checked by the proto3-JSON checker of request bodies
    (:func:`~ces_eval.transcoding.body.check_document`) with the document's policy: the first
    problem, at its path as the document spells it."""
    message_type = _descriptor(cls)
    if not isinstance(value, dict):
        raise ExchangeError(f"Expected a JSON object ({message_type.name}).", path)
    problems = check_document(message_type, value, path, limit=1, spelled=True)
    if problems:
        raise ExchangeError(problems[0].description, problems[0].field)
    message = cls()
    try:
        json_format.ParseDict(value, message)
    except (json_format.ParseError, ValueError, TypeError) as error:
        raise ExchangeError(_innermost(error), path) from None
    return message


def _items(document: dict[str, tuple[str, Any]], key: str, cls: type[_M]) -> list[_M]:
    spelled, value = document.get(key, (key, None))
    if value is None:
        return []  # null is an empty list, as in proto3 JSON
    if not isinstance(value, list):
        raise ExchangeError(
            "Expected a JSON array.", spelled, quotes=False
        )  # spelled is one of _KEYS
    items: list[_M] = []
    for index, item in enumerate(value):
        at = _element(spelled, index)
        try:
            items.append(_parse_item(item, cls, at))
        except ExchangeError as error:
            if error.blind is None:  # which field and why would quote the document
                error.blind = (f"not a valid {_descriptor(cls).name}", at)
            raise
    return items


def load(data: bytes) -> Bundle:
    """Read an export document (JSON or YAML, see :func:`detect_format`); anything malformed
    raises :class:`ExchangeError` with the path of the offending value."""
    try:
        tree = parse(data)
        _check_values(tree, "", set())
        if not isinstance(tree, dict):
            raise ExchangeError("expected an object at the top of the document", quotes=False)
        document: dict[str, tuple[str, Any]] = {}  # canonical key -> (key as written, value)
        for key, value in tree.items():
            canonical = _KEYS.get(key)
            if canonical is None:
                raise ExchangeError(
                    f"unknown key {_quoted(key)}",
                    member_path("", key),
                    blind=(
                        "unknown key at the top; expected format, evaluations, "
                        "evaluationResults and evaluationRuns",
                        "",
                    ),
                )
            if canonical in document:
                first = document[canonical][0]
                raise ExchangeError(  # both keys are among _KEYS
                    f"{_quoted(key)} repeats {_quoted(first)}", key, quotes=False
                )
            document[canonical] = key, value
        if "format" not in document:
            raise ExchangeError(f"missing; expected {_quoted(FORMAT)}", "format", quotes=False)
        declared = document["format"][1]
        if declared != FORMAT:
            raise ExchangeError(
                f"unsupported format {json.dumps(declared)}; expected {_quoted(FORMAT)}",
                "format",
                blind=(f"unsupported format; expected {_quoted(FORMAT)}", "format"),
            )
        return Bundle(
            _items(document, _EVALUATIONS, evaluation_pb2.Evaluation),
            _items(document, _RESULTS, evaluation_pb2.EvaluationResult),
            _items(document, _RUNS, evaluation_pb2.EvaluationRun),
        )
    except RecursionError:
        raise ExchangeError("the document is nested too deeply", quotes=False) from None
