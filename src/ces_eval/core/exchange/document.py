"""The export document (docs/export-format.md): what ExportEvaluations and
ExportEvaluationResults write and the emulator's ImportEvaluations reads.

:func:`dump` renders a :class:`Bundle` as JSON or YAML (:mod:`.yaml_dialect`); :func:`load` reads
either back and reports every problem as an :class:`ExchangeError` carrying a field path inside
the document (and a form that quotes nothing of it, for documents read from files).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar, cast

from google.protobuf import descriptor, json_format, message_factory
from google.protobuf.message import Message

from ces_eval.core.exchange import yaml_dialect
from ces_eval.core.exchange.errors import ExchangeError
from ces_eval.core.exchange.yaml_dialect import Object
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2

__all__ = ["FORMAT", "Bundle", "detect_format", "dump", "load"]

FORMAT = "ces-eval.export/v1"
_ExportFormat = evaluation_service_pb2.ExportOptions.ExportFormat
_EVALUATIONS = "evaluations"
_RESULTS = "evaluationResults"
_KEYS = {
    "format": "format",
    _EVALUATIONS: _EVALUATIONS,
    _RESULTS: _RESULTS,
    "evaluation_results": _RESULTS,
}
_M = TypeVar("_M", bound=Message)


@dataclass(frozen=True)
class Bundle:
    """The content of one export document: evaluations and evaluation results, in order."""

    evaluations: list[evaluation_pb2.Evaluation] = field(default_factory=list)
    results: list[evaluation_pb2.EvaluationResult] = field(default_factory=list)


# -- document paths ----------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _quoted(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def _member(parent: str, key: str) -> str:
    """``parent.key``, or ``parent["key"]`` when the key is not a plain identifier."""
    if not _IDENTIFIER.match(key):
        return f"{parent}[{_quoted(key)}]"
    return f"{parent}.{key}" if parent else key


def _entry(parent: str, key: str) -> str:
    return f"{parent}[{_quoted(key)}]"


def _element(parent: str, index: int) -> str:
    return f"{parent}[{index}]"


# -- dump ----------------------------------------------------------------------------------------


def dump(bundle: Bundle, fmt: int) -> bytes:
    """Render ``bundle`` as an export document; ``fmt`` is an ``ExportOptions.ExportFormat``
    value (``EXPORT_FORMAT_UNSPECIFIED`` means JSON). Other values raise ``ValueError``."""
    document: dict[str, Any] = {"format": FORMAT}
    if bundle.evaluations:
        document[_EVALUATIONS] = [json_format.MessageToDict(e) for e in bundle.evaluations]
    if bundle.results:
        document[_RESULTS] = [json_format.MessageToDict(r) for r in bundle.results]
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


def _parse(data: bytes) -> object:
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
                _member(path, key),
                blind=("a key occurs more than once in an object", ""),
            )
        for key, item in value.items():
            _check_values(item, _member(path, key), seen)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_values(item, _element(path, index), seen)
    elif isinstance(value, float) and not math.isfinite(value):
        message = 'numbers must be finite; use the strings "NaN" or "Infinity"'
        raise ExchangeError(message, path, blind=(message, ""))


def _descriptor(cls: type[Message]) -> descriptor.Descriptor:
    # types-protobuf types DESCRIPTOR as a union with the upb implementation class.
    return cast("descriptor.Descriptor", cls.DESCRIPTOR)


@cache
def _fields(message: descriptor.Descriptor) -> dict[str, descriptor.FieldDescriptor]:
    """Fields by JSON name and by proto name (json_format accepts both)."""
    fields = {f.name: f for f in message.fields}
    fields.update((f.json_name, f) for f in message.fields)
    return fields


def _field(message: descriptor.Descriptor, key: str) -> descriptor.FieldDescriptor | None:
    return _fields(message).get(key)


def _map_entry(field_: descriptor.FieldDescriptor) -> descriptor.Descriptor | None:
    """The entry type of a map field; None for other fields."""
    entry = field_.message_type
    return entry if entry is not None and entry.GetOptions().map_entry else None


def _check_shape(value: object, message: descriptor.Descriptor, path: str) -> None:
    """Objects where messages belong, lists where repeated fields belong, known fields only,
    each field and each oneof at most once (json_format lets some of these through)."""
    if message.full_name.startswith("google.protobuf."):
        return  # well-known types have their own JSON forms; json_format checks them
    if not isinstance(value, dict):
        raise ExchangeError(f"expected an object ({message.name})", path)
    spelled: dict[str, str] = {}
    oneofs: dict[str, str] = {}
    for key, item in value.items():
        at = _member(path, key)
        field_ = _field(message, key)
        if field_ is None:
            raise ExchangeError(f"unknown field {_quoted(key)} of {message.full_name}", at)
        if field_.name in spelled:
            raise ExchangeError(f"{_quoted(key)} repeats {_quoted(spelled[field_.name])}", at)
        spelled[field_.name] = key
        if item is None:
            continue  # null is the default value, as in proto3 JSON
        oneof = field_.containing_oneof
        if oneof is not None:
            if oneof.name in oneofs:
                raise ExchangeError(
                    f"{_quoted(key)} and {_quoted(oneofs[oneof.name])} are both set, "
                    f"but only one member of {oneof.name} may be",
                    at,
                )
            oneofs[oneof.name] = key
        _check_field(item, field_, at)


_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*\Z")


def _is_base64(text: str) -> bool:
    """Standard or URL-safe base64, padded or not (proto3 JSON). json_format skips junk."""
    body = text.rstrip("=")
    padding = len(text) - len(body)
    return (
        _BASE64.match(body) is not None
        and len(body) % 4 != 1
        and padding <= 2
        and (padding == 0 or len(text) % 4 == 0)
    )


def _check_bytes(item: object, field_: descriptor.FieldDescriptor, at: str) -> None:
    elements: list[tuple[int | None, object]] = [(None, item)]
    if field_.is_repeated and isinstance(item, list):
        elements = list(enumerate(item))
    for index, element in elements:
        if isinstance(element, str) and not _is_base64(element):
            where = at if index is None else _element(at, index)
            raise ExchangeError(f"expected base64 text, got {_shown(element)}", where)


def _check_field(item: object, field_: descriptor.FieldDescriptor, at: str) -> None:
    if field_.type == descriptor.FieldDescriptor.TYPE_BYTES:
        _check_bytes(item, field_, at)
    map_entry = _map_entry(field_)
    if map_entry is not None:
        if not isinstance(item, dict):
            raise ExchangeError("expected an object (a map)", at)
        entry_value = map_entry.fields_by_name["value"].message_type
        if entry_value is not None:
            for key, entry in item.items():
                _check_shape(entry, entry_value, _entry(at, key))
    elif field_.is_repeated:
        if not isinstance(item, list):
            raise ExchangeError("expected a list", at)
        if field_.message_type is not None:
            for index, element in enumerate(item):
                _check_shape(element, field_.message_type, _element(at, index))
    elif field_.message_type is not None:
        _check_shape(item, field_.message_type, at)


_WRAPPER = re.compile(r"Failed to parse \w+ field: ")
_AT_PATH = re.compile(r'\s+at\s+"?[A-Za-z_][^\s"]*"?\.?\Z')


def _innermost(error: BaseException) -> str:
    """The most specific json_format complaint in ``error``'s chain, without json_format's own
    paths (ours are more exact)."""
    found = error
    while error.__cause__ is not None:
        error = error.__cause__
        if isinstance(error, json_format.ParseError):
            found = error
    text = _AT_PATH.sub("", str(found))
    while _WRAPPER.match(text):
        text = _WRAPPER.sub("", text, count=1).removesuffix(".")
    return _AT_PATH.sub("", text)


def _parse_error(js: dict[str, Any], cls: type[Message]) -> str | None:
    """json_format's complaint about ``js`` as a ``cls`` message, or None if it parses."""
    try:
        json_format.ParseDict(js, cls())
    except (json_format.ParseError, ValueError, TypeError) as error:
        return _innermost(error)
    return None


def _locate(value: dict[str, Any], cls: type[Message], path: str) -> tuple[str, str] | None:
    """(path, complaint) of the innermost field of a well-shaped ``value`` that json_format
    rejects on its own; None when every field parses by itself."""
    message = _descriptor(cls)
    for key, item in value.items():
        field_ = _field(message, key)
        if field_ is None:  # ruled out by _check_shape
            continue
        complaint = _parse_error({key: item}, cls)
        if complaint is None:
            continue
        at = _member(path, key)
        map_entry = _map_entry(field_)
        if map_entry is not None:
            value_field = map_entry.fields_by_name["value"]
            for entry_key, entry in item.items():
                entry_complaint = _parse_error({key: {entry_key: entry}}, cls)
                if entry_complaint is not None:
                    return _explain(entry, value_field, _entry(at, entry_key), entry_complaint)
        elif field_.is_repeated:
            for index, element in enumerate(item):
                element_complaint = _parse_error({key: [element]}, cls)
                if element_complaint is not None:
                    return _explain(element, field_, _element(at, index), element_complaint)
        else:
            return _explain(item, field_, at, complaint)
        return at, complaint  # each part parses alone, the whole does not
    return None


def _explain(
    value: object, field_: descriptor.FieldDescriptor, at: str, complaint: str
) -> tuple[str, str]:
    """(path, complaint) for a ``value`` of ``field_`` (an element, for repeated fields) that
    json_format rejects: what was expected for scalars, Timestamps and Durations; the innermost
    failing field for messages; json_format's own words otherwise."""
    target = field_.message_type
    if target is None:
        return at, f"expected {_expected(field_)}, got {_shown(value)}"
    hint = _WELL_KNOWN_HINTS.get(target.full_name)
    if hint is not None:
        return at, f"expected {hint}, got {_shown(value)}"
    if target.full_name.startswith("google.protobuf.") or not isinstance(value, dict):
        return at, complaint
    return _locate(value, message_factory.GetMessageClass(target), at) or (at, complaint)


_F = descriptor.FieldDescriptor
_EXPECTED = {
    _F.TYPE_STRING: "a string",
    _F.TYPE_BYTES: "base64 text",
    _F.TYPE_BOOL: "true or false",
    _F.TYPE_INT32: "a 32-bit integer",
    _F.TYPE_SINT32: "a 32-bit integer",
    _F.TYPE_SFIXED32: "a 32-bit integer",
    _F.TYPE_UINT32: "an unsigned 32-bit integer",
    _F.TYPE_FIXED32: "an unsigned 32-bit integer",
    _F.TYPE_INT64: "a 64-bit integer",
    _F.TYPE_SINT64: "a 64-bit integer",
    _F.TYPE_SFIXED64: "a 64-bit integer",
    _F.TYPE_UINT64: "an unsigned 64-bit integer",
    _F.TYPE_FIXED64: "an unsigned 64-bit integer",
    _F.TYPE_FLOAT: "a number (32-bit)",
    _F.TYPE_DOUBLE: "a number",
}
_WELL_KNOWN_HINTS = {
    "google.protobuf.Timestamp": 'an RFC 3339 timestamp such as "2024-01-31T09:30:00.5Z"',
    "google.protobuf.Duration": 'a duration in seconds such as "1.5s" or "-3s"',
}


def _expected(field_: descriptor.FieldDescriptor) -> str:
    if field_.enum_type is not None:
        names = [value.name for value in field_.enum_type.values]
        return f"one of {', '.join(names)} (or its number)"
    return _EXPECTED.get(field_.type, "a scalar value")


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_item(value: object, cls: type[_M], path: str) -> _M:
    _check_shape(value, _descriptor(cls), path)
    assert isinstance(value, dict)
    message = cls()
    try:
        json_format.ParseDict(value, message)
    except (json_format.ParseError, ValueError, TypeError) as error:
        at, complaint = _locate(value, cls, path) or (path, _innermost(error))
        raise ExchangeError(complaint, at) from None
    return message


def _items(document: dict[str, tuple[str, Any]], key: str, cls: type[_M]) -> list[_M]:
    spelled, value = document.get(key, (key, None))
    if value is None:
        return []  # null is an empty list, as in proto3 JSON
    if not isinstance(value, list):
        raise ExchangeError("expected a list", spelled, quotes=False)  # spelled is one of _KEYS
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
        tree = _parse(data)
        _check_values(tree, "", set())
        if not isinstance(tree, dict):
            raise ExchangeError("expected an object at the top of the document", quotes=False)
        document: dict[str, tuple[str, Any]] = {}  # canonical key -> (key as written, value)
        for key, value in tree.items():
            canonical = _KEYS.get(key)
            if canonical is None:
                raise ExchangeError(
                    f"unknown key {_quoted(key)}",
                    _member("", key),
                    blind=(
                        "unknown key at the top; expected format, evaluations and "
                        "evaluationResults",
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
        )
    except RecursionError:
        raise ExchangeError("the document is nested too deeply", quotes=False) from None
