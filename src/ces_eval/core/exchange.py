"""The export document (docs/export-format.md) and the local stand-in for Cloud Storage.

ExportEvaluations / ExportEvaluationResults render a :class:`Bundle` with :func:`dump`; the
emulator's import reads one back with :func:`load`, which accepts JSON or YAML and reports every
problem as an :class:`ExchangeError` carrying a field path inside the document (and a form that
quotes nothing of it, for documents read from files). ``gs://`` URIs map to files under the
server's export root (:func:`locate`); :func:`write_atomically` writes them so a reader never sees
a half-written export, :func:`read_object` reads them, and neither follows a symbolic link out of
the export folder (docs/security.md).

The YAML side reads YAML 1.2's core schema (``yes``, ``on``, ``2024-01-01`` and ``0777`` stay
strings or decimal numbers as in JSON) and writes every string that any YAML 1.1 or 1.2 reader
could take for another type in quotes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from google.protobuf import descriptor, json_format, message_factory
from google.protobuf.message import Message

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2, evaluation_service_pb2

__all__ = [
    "FORMAT",
    "OWNER_MAX",
    "Bundle",
    "ExchangeError",
    "ObjectMissing",
    "ObjectPath",
    "ObjectTooLarge",
    "PathRefused",
    "detect_format",
    "dump",
    "load",
    "locate",
    "probe",
    "read_object",
    "sweep_temporary",
    "temporary_owners",
    "write_atomically",
]

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


class ExchangeError(ValueError):
    """A document, URI or path that cannot be used; ``path`` locates it in the document.

    ``quotes`` says whether ``message`` or ``path`` may hold text of the document (a key, a
    value, a line); ``blind`` is the (message, path) to give instead where the document's text
    must not be shown (:meth:`redacted`)."""

    def __init__(
        self,
        message: str,
        path: str = "",
        *,
        quotes: bool = True,
        blind: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.message = message
        self.path = path
        self.quotes = quotes
        self.blind = blind

    def redacted(self) -> ExchangeError:
        """This error without any text of the document: for a document read from a file,
        whose content the caller may have no right to see (docs/security.md)."""
        if not self.quotes:
            return self
        message, path = self.blind or ("not a valid export document", "")
        return ExchangeError(message, path, quotes=False)


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


# -- YAML ----------------------------------------------------------------------------------------

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
_CORE_SCHEMA = (
    ("tag:yaml.org,2002:null", re.compile(r"(?:~|null|Null|NULL|)\Z"), ["~", "n", "N", ""]),
    (
        "tag:yaml.org,2002:bool",
        re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z"),
        list("tTfF"),
    ),
    (
        "tag:yaml.org,2002:int",
        re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z"),
        list("-+0123456789"),
    ),
    (
        "tag:yaml.org,2002:float",
        re.compile(
            r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
        ),
        list("-+0123456789."),
    ),
)


class _Object(dict[str, Any]):
    """A mapping read from a document, with the keys that occurred more than once."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: list[str] = []


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    body = text.lstrip("+-")
    try:
        if body[:2] in ("0o", "0x"):
            if body != text:  # YAML 1.2 has no signed octal or hexadecimal
                raise ValueError(text)
            return int(body[2:], 8 if body[1] == "o" else 16)
        return int(text, 10)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not an integer", node.start_mark
        ) from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node)
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    if text.lower() in special:
        return special[text.lower()]
    try:
        return float(text)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number", node.start_mark
        ) from None


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[_Object]:
    data = _Object()
    yield data
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                "keys must be strings (quote this key)",
                key_node.start_mark,
            )
        if key in data:
            data.duplicates.append(key)
        data[key] = loader.construct_object(value_node)


def _loader_class(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A safe loader that reads YAML 1.2 core-schema scalars into plain JSON-like values."""

    class Loader(base):  # type: ignore[misc,valid-type]
        yaml_implicit_resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}  # noqa: RUF012
        yaml_constructors: dict[Any, Any] = {}  # noqa: RUF012

    for tag, pattern, first in _CORE_SCHEMA:
        Loader.add_implicit_resolver(tag, pattern, first)
    Loader.add_constructor("tag:yaml.org,2002:null", yaml.SafeLoader.construct_yaml_null)
    Loader.add_constructor("tag:yaml.org,2002:bool", yaml.SafeLoader.construct_yaml_bool)
    Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
    Loader.add_constructor("tag:yaml.org,2002:str", yaml.SafeLoader.construct_yaml_str)
    Loader.add_constructor("tag:yaml.org,2002:seq", yaml.SafeLoader.construct_yaml_seq)
    Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
    Loader.add_constructor(None, yaml.SafeLoader.construct_undefined)
    return Loader


# YAML line breaks besides \n and \r. PyYAML's own emitter writes them raw inside quoted
# scalars, where a reader folds them into spaces; double quotes make it escape them.
_UNICODE_BREAKS = re.compile("[\x85\u2028\u2029]")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = '"' if _UNICODE_BREAKS.search(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _dumper_class(base: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    """A safe dumper that quotes strings a YAML 1.1 *or* 1.2 reader would resolve to another
    type, and never writes anchors or aliases."""

    class Dumper(base):  # type: ignore[misc,valid-type]
        def ignore_aliases(self, data: Any) -> bool:  # noqa: ANN401
            return True

    # The inherited resolvers are YAML 1.1's (yes/no/on/off, 1_000, 0b1, 12:30, dates, ...);
    # adding the core schema's makes the dumper quote anything either reading would not keep
    # a string.
    for tag, pattern, first in _CORE_SCHEMA:
        Dumper.add_implicit_resolver(tag, pattern, first)
    Dumper.add_representer(str, _represent_str)
    # json_format renders Any as an OrderedDict: write every dict subclass as a plain mapping.
    Dumper.add_multi_representer(dict, yaml.SafeDumper.represent_dict)
    return Dumper


# libyaml's parser and emitter when PyYAML was built with it (much faster), else pure Python.
# Both get the same resolvers, constructors and representers, which are Python code either way.
_PY_LOADER = _loader_class(yaml.SafeLoader)
_PY_DUMPER = _dumper_class(yaml.SafeDumper)
_Loader = _loader_class(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
_Dumper = _dumper_class(getattr(yaml, "CSafeDumper", yaml.SafeDumper))


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
        return yaml.dump(
            document,
            Dumper=_Dumper,
            sort_keys=False,
            allow_unicode=True,
            default_flow_style=False,
            width=1 << 30,  # no folding: one scalar per line reads and diffs better
            encoding="utf-8",
        )
    raise ValueError(f"unknown export format {fmt}")


# -- load ----------------------------------------------------------------------------------------


def detect_format(data: bytes) -> int:
    """JSON when the first character that is not blank (or a byte order mark) is ``{`` or ``[``,
    else YAML. Returns an ``ExportOptions.ExportFormat`` value."""
    head = data.lstrip(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return _ExportFormat.JSON if head[:1] in (b"{", b"[") else _ExportFormat.YAML


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    data = _Object()
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
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        # PyYAML's problems quote what they met (a character, a tag, a scalar), and str(error)
        # adds the offending line: the blind form gives the position only.
        problem = "; ".join(p for p in (error.context, error.problem) if p)
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ExchangeError(
            f"invalid YAML: {problem}{where}", blind=(f"invalid YAML{where}", "")
        ) from None
    except yaml.YAMLError as error:
        raise ExchangeError(f"invalid YAML: {error}", blind=("invalid YAML", "")) from None


def _check_values(value: object, path: str, seen: set[int]) -> None:
    """Reject what JSON cannot say: repeated keys, non-finite numbers, shared (aliased) nodes."""
    if isinstance(value, dict | list):
        if id(value) in seen:
            message = "YAML aliases are not supported; write the value out"
            raise ExchangeError(message, path, blind=(message, ""))
        seen.add(id(value))
    if isinstance(value, dict):
        if isinstance(value, _Object) and value.duplicates:
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


# -- Cloud Storage stand-in ----------------------------------------------------------------------

# The characters of Cloud Storage bucket names (lowercase letters, digits, "-", "_", "."; a letter
# or digit at both ends). Short names such as "b" are accepted: no bucket is created anywhere.
_BUCKET = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,220}[a-z0-9])?\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAME_MAX = 255  # bytes in one file name on common file systems
_OBJECT_MAX = 1024  # bytes in a Cloud Storage object name


@dataclass(frozen=True)
class ObjectPath:
    """A ``gs://`` URI resolved under the export root.

    ``root`` is the operator's ``--export-dir`` and is trusted (it may itself be a symbolic
    link); ``parts`` are plain file names below it (a project's namespace folder first, with
    ``--auth-tokens``), each walked from its folder's descriptor without following links, so
    that no link planted in the export folder leads a read or a write outside it. ``uri`` is
    what errors name: never the local path."""

    uri: str
    root: Path
    parts: tuple[str, ...]
    namespaced: bool = False

    @property
    def path(self) -> Path:
        return self.root.joinpath(*self.parts)

    def child(self, name: str) -> ObjectPath:
        return ObjectPath(f"{self.uri}/{name}", self.root, (*self.parts, name), self.namespaced)

    def prefix(self, count: int) -> str:
        """The URI of the folder ``parts[:count]`` (the caller's words, not the local path)."""
        names = self.parts[int(self.namespaced) : count]
        return "gs://" + "/".join(names) if names else "the project's export folder"


def locate(gcs_uri: str, export_root: Path, namespace: str = "") -> ObjectPath:
    """``gs://bucket/a/b`` → ``export_root/[namespace/]bucket/a/b``; ``gs://bucket`` and one
    trailing ``/`` name the bucket or folder itself. Raises :class:`ExchangeError` for other
    schemes, bucket names outside Cloud Storage's alphabet, empty, ``.`` or ``..`` segments,
    backslashes, control characters (NUL included) and names too long for Cloud Storage or the
    file system. Nothing is decoded: ``%2e%2e`` is a literal file name."""
    if not gcs_uri.startswith("gs://"):
        raise ExchangeError(f"expected a gs:// URI, got {gcs_uri!r}")
    if _CONTROL.search(gcs_uri):
        raise ExchangeError("the URI contains a control character")
    if _SURROGATE.search(gcs_uri):
        raise ExchangeError("the URI is not valid Unicode")
    if "\\" in gcs_uri:
        raise ExchangeError("the URI contains a backslash")
    bucket, _, name = gcs_uri.removeprefix("gs://").partition("/")
    if not bucket:
        raise ExchangeError("the URI names no bucket")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ExchangeError(f"{bucket!r} is not a valid bucket name")
    if len(name.encode("utf-8")) > _OBJECT_MAX:
        raise ExchangeError(f"the object name is longer than {_OBJECT_MAX} bytes")
    segments = name.split("/")
    if segments[-1] == "":  # "gs://bucket", "gs://bucket/" and "gs://bucket/folder/"
        segments.pop()
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ExchangeError(f"the object name has an empty, '.' or '..' segment: {name!r}")
        if len(segment.encode("utf-8")) > _NAME_MAX:
            raise ExchangeError(f"a segment of the object name is longer than {_NAME_MAX} bytes")
    if namespace and (namespace in (".", "..") or "/" in namespace or "\x00" in namespace):
        raise ValueError(f"not a plain folder name: {namespace!r}")
    # Every part is now one plain file name, so the path cannot leave the root by its names;
    # the walk (_descend) keeps links from leaving it.
    parts = (*([namespace] if namespace else []), bucket, *segments)
    uri = "gs://" + "/".join([bucket, *segments])
    return ObjectPath(uri, export_root, tuple(parts), bool(namespace))


class PathRefused(ExchangeError):
    """A path the export folder serves only by leaving it or by reading what is no object: a
    symbolic link on the way (``link``), a file where a folder belongs, or a folder or special
    file (a FIFO, a device) where an object belongs. The message names the ``gs://`` URI only:
    never the local path, what a link points to, or whether anything exists there."""

    def __init__(self, message: str, *, link: bool) -> None:
        super().__init__(message)
        self.link = link


class ObjectMissing(ExchangeError):
    """No object (or folder) at a URI, inside the export folder."""


class ObjectTooLarge(ExchangeError):
    """An object larger than a reader takes (``limit`` bytes); nothing of it was kept."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FOLDER_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW


def _refusal(folder: int, name: str, location: ObjectPath, count: int) -> PathRefused:
    """Why ``name`` in ``folder`` (``location.parts[count - 1]``) cannot be entered as a folder."""
    where = location.prefix(count)
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        link = False  # gone in between: say what the walk met
    if link:
        return PathRefused(
            f"{where} is a symbolic link in the export folder; ces-eval never follows links there.",
            link=True,
        )
    return PathRefused(f"{where} is an object, not a folder.", link=False)


def _open_root(root: Path, *, create: bool) -> int:
    """A descriptor of the export root, made (with its missing parents, each entry synced) when
    ``create``. The root is the operator's choice, so a link there is followed."""
    if create and not root.is_dir():
        missing = [p for p in (root, *root.parents) if not p.exists()]
        root.mkdir(parents=True, exist_ok=True)
        for new in reversed(missing):  # a new folder's entry lives in its parent
            _fsync_folder(new.parent)
    return os.open(root, _ROOT_FLAGS)


def _enter(folder: int, name: str, location: ObjectPath, count: int, *, create: bool) -> int:
    """A descriptor of the folder ``name`` in ``folder``, never through a link; made (and its
    entry synced) when missing and ``create``."""
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        if not create:
            raise ObjectMissing(f"{location.uri} not found") from None
    except OSError as error:
        # O_NOFOLLOW|O_DIRECTORY on a link gives ENOTDIR (ELOOP on some systems).
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refusal(folder, name, location, count) from None
        raise
    try:
        os.mkdir(name, 0o777, dir_fd=folder)
    except FileExistsError:
        pass  # made at the same moment by another export, or something else is there now
    else:
        os.fsync(folder)  # the new folder's entry is durable before anything goes inside
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refusal(folder, name, location, count) from None
        raise


def _descend(location: ObjectPath, count: int, *, create: bool) -> int:
    """A descriptor of the folder ``location.parts[:count]``, reached from the root one name at
    a time; raises :class:`PathRefused` at a link or a file on the way, :class:`ObjectMissing`
    at a missing folder unless ``create``."""
    try:
        current = _open_root(location.root, create=create)
    except FileNotFoundError:
        if create:
            raise
        raise ObjectMissing(f"{location.uri} not found") from None
    try:
        for index, name in enumerate(location.parts[:count]):
            inner = _enter(current, name, location, index + 1, create=create)
            os.close(current)
            current = inner
    except BaseException:
        os.close(current)
        raise
    return current


def probe(location: ObjectPath) -> None:
    """Refuse now the folder ``location`` that :func:`write_atomically` would refuse (a link
    or a file on its path); a folder that does not exist yet is fine."""
    with contextlib.suppress(ObjectMissing):
        os.close(_descend(location, len(location.parts), create=False))


def read_object(location: ObjectPath, limit: int) -> bytes:
    """The bytes of the regular file at ``location``, reached without following links, if it
    holds at most ``limit`` bytes. Raises :class:`ObjectMissing`, :class:`PathRefused`,
    :class:`ObjectTooLarge` (a larger file is refused by its size before any read, and one
    that grew meanwhile after ``limit + 1`` bytes: never held in memory whole) or OSError."""
    *_, name = location.parts
    folder = _descend(location, len(location.parts) - 1, create=False)
    try:
        # O_NONBLOCK: a FIFO planted here must not hang the read; regular files ignore it.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        descriptor_ = os.open(name, flags, dir_fd=folder)
    except FileNotFoundError:
        raise ObjectMissing(f"{location.uri} not found") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refusal(folder, name, location, len(location.parts)) from None
        raise
    finally:
        os.close(folder)
    try:
        status = os.fstat(descriptor_)
    except BaseException:
        os.close(descriptor_)
        raise
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor_)
        what = "a folder, not an object" if stat.S_ISDIR(status.st_mode) else "not a regular file"
        raise PathRefused(f"{location.uri} is {what}.", link=False)
    too_large = ObjectTooLarge(
        f"{location.uri} is larger than {limit} bytes, the most one import reads.", limit=limit
    )
    if status.st_size > limit:
        os.close(descriptor_)
        raise too_large
    with os.fdopen(descriptor_, "rb") as file:
        data = file.read(limit + 1)  # the file may have grown since fstat
    if len(data) > limit:
        raise too_large
    return data


def _fsync_folder(folder: Path) -> None:
    descriptor_ = os.open(folder, _ROOT_FLAGS)
    try:
        os.fsync(descriptor_)
    finally:
        os.close(descriptor_)


def _write_all(descriptor_: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(descriptor_, view)
        view = view[written:]


# ``.ces-eval-<owner>+<random>.tmp``: the owner says who may remove the file once its writer is
# gone (see sweep_temporary); ``.ces-eval-<random>.tmp`` is an older version's, or an owner's
# that gave none.
_TEMPORARY = re.compile(r"\.ces-eval-(?:(?P<owner>[A-Za-z0-9._~+-]+)\+)?[0-9a-f]{16}\.tmp\Z")
_OWNER = re.compile(r"[A-Za-z0-9._~+-]{1,200}\Z")
OWNER_MAX = 200  # characters: the temporary file's name stays within _NAME_MAX bytes


def _temporary_name(owner: str) -> str:
    if owner and not _OWNER.match(owner):
        raise ValueError(f"not an owner for a temporary file's name: {owner!r}")
    return f".ces-eval-{owner}{'+' if owner else ''}{secrets.token_hex(8)}.tmp"


def write_atomically(location: ObjectPath, data: bytes, owner: str = "") -> None:
    """Replace the object at ``location`` with a file holding exactly ``data``: readers see the
    old file or the new one, never a part. Missing folders are created; no link on the path is
    followed (:class:`PathRefused`). The temporary file's name carries ``owner`` (at most
    :data:`OWNER_MAX` of ``[A-Za-z0-9._~+-]``) for :func:`sweep_temporary`. On failure the
    temporary file is removed, the target is left as it was, and the error propagates."""
    *_, name = location.parts
    folder = _descend(location, len(location.parts) - 1, create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            temporary = _temporary_name(owner)
            try:
                descriptor_ = os.open(temporary, flags, 0o666, dir_fd=folder)
            except FileExistsError:
                continue
            break
        try:
            try:
                _write_all(descriptor_, data)
                os.fsync(descriptor_)
            finally:
                os.close(descriptor_)
            # A rename replaces a link at the target rather than writing through it; refusing
            # one tells the caller the path was not what they named.
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                    raise _refusal(folder, name, location, len(location.parts))
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):  # keep the original error
                os.unlink(temporary, dir_fd=folder)
            raise
        os.fsync(folder)
    finally:
        os.close(folder)


def _temporaries(export_root: Path) -> Iterator[tuple[int, str, str]]:
    """(folder descriptor, file name, owner) of every temporary file under ``export_root``;
    the walk never follows a link (os.fwalk checks each folder it enters is the one it
    listed). The descriptor is valid until the next item."""
    try:
        top = os.open(export_root, _ROOT_FLAGS)
    except OSError:
        return  # no export root yet: nothing was ever written
    try:
        for _, _, files, folder in os.fwalk(".", dir_fd=top):
            for name in files:
                if match := _TEMPORARY.match(name):
                    yield folder, name, match["owner"] or ""
    finally:
        os.close(top)


def temporary_owners(export_root: Path) -> set[str]:
    """The owners of the temporary files under ``export_root`` (``""``: none recorded)."""
    return {owner for _, _, owner in _temporaries(export_root)}


def sweep_temporary(export_root: Path, abandoned: Callable[[str], bool]) -> int:
    """Remove the temporary files under ``export_root`` whose owner is ``abandoned``: files an
    interrupted :func:`write_atomically` left (its process was killed mid-write). Only the
    caller can tell a dead owner from a live one; the count removed."""
    removed = 0
    for folder, name, owner in _temporaries(export_root):
        if abandoned(owner):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder)
                removed += 1
    return removed
