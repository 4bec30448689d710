"""The YAML dialect of export documents: YAML 1.2's core schema on PyYAML.

Reading keeps ``yes``, ``on``, ``2024-01-01`` and ``0777`` strings or decimal numbers, as JSON
would; writing quotes every string that any YAML 1.1 or 1.2 reader could take for another type
and never writes anchors or aliases. Mappings are read as :class:`Object`, which remembers keys
that occur twice (the document reader refuses them, for YAML and JSON alike).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import yaml

from ces_eval.core.exchange.errors import ExchangeError

__all__ = ["DUMPER", "LOADER", "PY_DUMPER", "PY_LOADER", "Object", "read", "write"]

# YAML 1.2's core schema: its tag resolution, as docs/export-format.md describes the dialect.
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


class Object(dict[str, Any]):
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


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[Object]:
    data = Object()
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

    class Loader(base):  # type: ignore[misc,valid-type]  # a base given at run time
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

    class Dumper(base):  # type: ignore[misc,valid-type]  # a base given at run time
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
PY_LOADER = _loader_class(yaml.SafeLoader)
PY_DUMPER = _dumper_class(yaml.SafeDumper)
LOADER = _loader_class(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
DUMPER = _dumper_class(getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def read(text: str) -> object:
    """The JSON-like value of the YAML document ``text``; a malformed one raises
    :class:`ExchangeError` (with a blind form giving the position only)."""
    try:
        return yaml.load(text, Loader=LOADER)  # noqa: S506 - a SafeLoader subclass
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


def write(document: dict[str, Any]) -> bytes:
    """``document`` as UTF-8 YAML, block style, one scalar per line."""
    return yaml.dump(
        document,
        Dumper=DUMPER,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1 << 30,  # no folding: one scalar per line reads and diffs better
        encoding="utf-8",
    )
