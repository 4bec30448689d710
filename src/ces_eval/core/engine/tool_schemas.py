"""What a stored tool takes and gives, as ``google.cloud.ces.v1beta.Schema`` (docs/tools.md,
"Schemas"): read from the tool's own declaration, never by running it.

* A client function declares its ``parameters`` and ``response``; an MCP tool its
  ``input_schema`` and ``output_schema``.
* An OpenAPI tool's operation is found in its stored document (JSON or YAML): its parameters and
  its JSON request body's properties make the input, its first 2xx JSON response (else
  ``default``) the output; ``$ref`` pointers are followed within the document, at most
  :data:`MAX_DEPTH` schemas deep, so a recursive type ends in a refusal instead of a loop.
* A Python function's signature is parsed with :mod:`ast` (the code never runs): the annotations
  ``int``, ``float``, ``str``, ``bool``, ``list[...]``, ``dict[...]``, ``Optional[...]`` /
  ``... | None`` become Schema types, parameters without a default are required, and the
  docstring's first paragraph (and its Google-style ``Args:`` lines) the descriptions.

Anything that cannot be read raises :class:`Unreadable` with a sentence saying why; the RPCs
answer it FAILED_PRECONDITION.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any, cast

import yaml
from google.protobuf import json_format, struct_pb2

from ces_eval.generated.google.cloud.ces.v1beta import schema_pb2

__all__ = [
    "MAX_DEPTH",
    "MAX_SPEC_BYTES",
    "Operation",
    "Unreadable",
    "from_json_schema",
    "listed",
    "load_spec",
    "narrowed",
    "operations",
    "python_function",
]

Schema = schema_pb2.Schema
# Schemas nested in one another, $ref pointers followed included, before a document is refused.
MAX_DEPTH = 32
# The largest OpenAPI document or Python code read (a tool's field holds at most this much
# anyway: contract/limits.py's MAX_STRING_CHARS).
MAX_SPEC_BYTES = 1024 * 1024
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_TYPES = {
    "string": Schema.STRING,
    "integer": Schema.INTEGER,
    "number": Schema.NUMBER,
    "boolean": Schema.BOOLEAN,
    "object": Schema.OBJECT,
    "array": Schema.ARRAY,
}


class Unreadable(ValueError):
    """A declaration the schemas cannot be read from; the message says why."""


@dataclass(frozen=True)
class Operation:
    """One operation of an OpenAPI document: a tool of an OpenAPI toolset."""

    operation_id: str
    method: str  # upper case
    path: str
    description: str
    spec: dict[str, Any]  # the operation object
    path_parameters: tuple[dict[str, Any], ...]  # declared on the path item


def listed(value: object) -> list[Any]:
    """``value`` when a document holds a list there, else nothing (a stored document may hold
    anything anywhere)."""
    return value if isinstance(value, list) else []


def load_spec(text: str) -> dict[str, Any]:
    """The OpenAPI document ``text`` (JSON or YAML) as an object."""
    if len(text) > MAX_SPEC_BYTES:
        raise Unreadable(f"The OpenAPI document is longer than {MAX_SPEC_BYTES} characters.")
    try:
        loaded = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise Unreadable(f"The OpenAPI document is neither JSON nor YAML: {error}") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("paths"), dict):
        raise Unreadable("The OpenAPI document has no paths object.")
    return loaded


def operations(spec: dict[str, Any]) -> list[Operation]:
    """Every operation of ``spec`` that has an operationId, in the document's order (one
    without an ID cannot be named as a tool)."""
    found: list[Operation] = []
    for path, item in spec["paths"].items():
        if not isinstance(item, dict):
            continue
        shared = tuple(p for p in listed(item.get("parameters")) if isinstance(p, dict))
        for method in _METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict) or not operation.get("operationId"):
                continue
            description = str(operation.get("description") or operation.get("summary") or "")
            found.append(
                Operation(
                    str(operation["operationId"]),
                    method.upper(),
                    str(path),
                    description,
                    operation,
                    shared,
                )
            )
    return found


def narrowed(spec: dict[str, Any], operation: Operation) -> str:
    """``spec`` with ``operation`` alone in its paths (what one tool of an OpenAPI toolset
    holds), as JSON: its servers, components and other top-level fields kept."""
    item: dict[str, Any] = {operation.method.lower(): operation.spec}
    if operation.path_parameters:
        item["parameters"] = list(operation.path_parameters)
    alone = {**spec, "paths": {operation.path: item}}
    return json.dumps(alone, default=str)  # YAML's dates as their text


class _Resolver:
    """Converts JSON Schema objects of one document, following its local ``$ref`` pointers."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document

    def pointer(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise Unreadable(f"$ref {ref!r} points outside the document.")
        found: Any = self._document
        for escaped in ref[2:].split("/"):
            part = escaped.replace("~1", "/").replace("~0", "~")  # RFC 6901
            if not isinstance(found, dict) or part not in found:
                raise Unreadable(f"$ref {ref!r} names nothing in the document.")
            found = found[part]
        if not isinstance(found, dict):
            raise Unreadable(f"$ref {ref!r} names no schema.")
        return found

    def resolved(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        """``node`` with its $ref chain followed."""
        while "$ref" in node:
            depth += 1
            if depth > MAX_DEPTH:
                raise Unreadable(f"The schema nests deeper than {MAX_DEPTH} levels.")
            node = self.pointer(str(node["$ref"]))
        return node

    def schema(self, node: Any, depth: int = 0) -> Schema:  # noqa: ANN401, PLR0912 - JSON
        if depth > MAX_DEPTH:
            raise Unreadable(f"The schema nests deeper than {MAX_DEPTH} levels.")
        if not isinstance(node, dict):
            return Schema()
        node = self.resolved(node, depth)
        out = Schema()
        kind = node.get("type")
        if isinstance(kind, list):
            out.nullable = "null" in kind
            kind = next((k for k in kind if k != "null"), None)
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else None
        out.type = (
            _TYPES.get(str(kind), Schema.TYPE_UNSPECIFIED) if kind else Schema.TYPE_UNSPECIFIED
        )
        out.nullable = out.nullable or bool(node.get("nullable"))
        for key, field in (("description", "description"), ("title", "title")):
            if isinstance(node.get(key), str):
                setattr(out, field, node[key])
        for part in listed(node.get("allOf")):
            merged = self.schema(part, depth + 1)
            if merged.type == Schema.OBJECT:
                out.type = Schema.OBJECT
            for name, value in merged.properties.items():
                out.properties[name].CopyFrom(value)
            out.required.extend(r for r in merged.required if r not in out.required)
        properties = node.get("properties")
        if isinstance(properties, dict):
            for name, value in properties.items():
                out.properties[str(name)].CopyFrom(self.schema(value, depth + 1))
        required = node.get("required")
        if isinstance(required, list):
            out.required.extend(str(r) for r in required if str(r) not in out.required)
        if isinstance(node.get("items"), dict):
            out.items.CopyFrom(self.schema(node["items"], depth + 1))
        if isinstance(node.get("prefixItems"), list):
            out.prefix_items.extend(self.schema(p, depth + 1) for p in node["prefixItems"])
        if isinstance(node.get("additionalProperties"), dict):
            additional = self.schema(node["additionalProperties"], depth + 1)
            out.additional_properties.CopyFrom(additional)
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                out.any_of.extend(self.schema(p, depth + 1) for p in node[key])
        if isinstance(node.get("enum"), list):
            out.enum.extend(_text(value) for value in node["enum"])
        if "default" in node:
            # A default proto3 JSON cannot hold (a date object of YAML) is left out.
            with contextlib.suppress(json_format.ParseError, TypeError, ValueError):
                json_format.ParseDict(node["default"], out.default)
        for key, field in (("minItems", "min_items"), ("maxItems", "max_items")):
            value = node.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
                setattr(out, field, value)  # an int64 field: other counts left out
        for key in ("minimum", "maximum"):
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                with contextlib.suppress(OverflowError):  # an integer no double holds
                    setattr(out, key, float(value))
        out.unique_items = bool(node.get("uniqueItems"))
        return out


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def from_json_schema(node: Any, document: dict[str, Any] | None = None) -> Schema:  # noqa: ANN401
    """The Schema of the JSON Schema (or OpenAPI schema object) ``node``, its $ref pointers
    resolved within ``document`` (``node`` itself when absent)."""
    return _Resolver(document if document is not None else node).schema(node)


def _json_content(holder: dict[str, Any], resolver: _Resolver) -> dict[str, Any] | None:
    holder = resolver.resolved(holder, 0)
    content = holder.get("content")
    if not isinstance(content, dict):
        return None
    for media, entry in content.items():
        if (
            "json" in str(media)
            and isinstance(entry, dict)
            and isinstance(entry.get("schema"), dict)
        ):
            schema: dict[str, Any] = entry["schema"]
            return schema
    return None


def operation_schemas(spec: dict[str, Any], operation: Operation) -> tuple[Schema, Schema]:
    """The input and output schemas of ``operation`` of ``spec``: an OBJECT of its parameters
    and its JSON body's properties; its first 2xx JSON response (else ``default``)."""
    resolver = _Resolver(spec)
    return _inputs(resolver, operation), _outputs(resolver, operation)


def _inputs(resolver: _Resolver, operation: Operation) -> Schema:
    inputs = Schema(type=Schema.OBJECT)
    for declared in [*operation.path_parameters, *listed(operation.spec.get("parameters"))]:
        if not isinstance(declared, dict):
            continue
        parameter = resolver.resolved(declared, 0)
        name = str(parameter.get("name", ""))
        if not name or parameter.get("in") not in ("path", "query", "header"):
            continue
        converted = resolver.schema(parameter.get("schema", {"type": "string"}), 1)
        if isinstance(parameter.get("description"), str):
            converted.description = parameter["description"]
        inputs.properties[name].CopyFrom(converted)
        required = parameter.get("required") or parameter.get("in") == "path"
        if required and name not in inputs.required:
            inputs.required.append(name)
    body = operation.spec.get("requestBody")
    found = _json_content(body, resolver) if isinstance(body, dict) else None
    if found is not None:
        converted = resolver.schema(found, 1)
        if converted.type == Schema.OBJECT:
            for name, value in converted.properties.items():
                inputs.properties[name].CopyFrom(value)
            inputs.required.extend(r for r in converted.required if r not in inputs.required)
        else:  # a body that is no object is the argument "body"
            inputs.properties["body"].CopyFrom(converted)
            if resolver.resolved(cast("dict[str, Any]", body), 0).get("required"):
                inputs.required.append("body")
    return inputs


def _outputs(resolver: _Resolver, operation: Operation) -> Schema:
    responses = operation.spec.get("responses")
    if not isinstance(responses, dict):
        return Schema()
    # YAML reads an unquoted 200 as a number.
    by_code = {str(code): response for code, response in responses.items()}
    codes = sorted(code for code in by_code if code.startswith("2"))
    for code in [*codes, "default"]:
        response = by_code.get(code)
        found = _json_content(response, resolver) if isinstance(response, dict) else None
        if found is not None:
            return resolver.schema(found, 1)
    return Schema()


# -- Python functions ----------------------------------------------------------------------------

_SCALARS = {
    "int": Schema.INTEGER,
    "float": Schema.NUMBER,
    "str": Schema.STRING,
    "bool": Schema.BOOLEAN,
    "list": Schema.ARRAY,
    "List": Schema.ARRAY,
    "tuple": Schema.ARRAY,
    "Sequence": Schema.ARRAY,
    "dict": Schema.OBJECT,
    "Dict": Schema.OBJECT,
    "Mapping": Schema.OBJECT,
}
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.Optional
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "int"
        return node.value
    return ""


def _annotation(node: ast.expr | None, depth: int = 0) -> Schema:  # noqa: PLR0911 - one per form
    """The Schema of a Python annotation; an unknown one gives an unspecified type."""
    if node is None or depth > MAX_DEPTH:
        return Schema()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return Schema()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        sides = [node.left, node.right]
        kept = [s for s in sides if not (isinstance(s, ast.Constant) and s.value is None)]
        if len(kept) == 1:
            found = _annotation(kept[0], depth + 1)
            found.nullable = True
            return found
        return Schema(any_of=[_annotation(s, depth + 1) for s in sides])
    if isinstance(node, ast.Subscript):
        outer = _name_of(node.value)
        inner = node.slice
        arguments = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if not arguments:  # list[()]: no type to read
            return Schema(type=_SCALARS.get(outer, Schema.TYPE_UNSPECIFIED))
        if outer == "Optional":
            found = _annotation(arguments[0], depth + 1)
            found.nullable = True
            return found
        if outer == "Union":
            kept = [a for a in arguments if not (isinstance(a, ast.Constant) and a.value is None)]
            if len(kept) == 1:
                found = _annotation(kept[0], depth + 1)
                found.nullable = len(kept) < len(arguments)
                return found
            return Schema(any_of=[_annotation(a, depth + 1) for a in kept])
        kind = _SCALARS.get(outer, Schema.TYPE_UNSPECIFIED)
        found = Schema(type=kind)
        if kind == Schema.ARRAY and outer != "tuple":
            found.items.CopyFrom(_annotation(arguments[0], depth + 1))
        if kind == Schema.OBJECT and len(arguments) == 2:
            found.additional_properties.CopyFrom(_annotation(arguments[1], depth + 1))
        return found
    return Schema(type=_SCALARS.get(_name_of(node), Schema.TYPE_UNSPECIFIED))


def _docstring_parts(text: str) -> tuple[str, dict[str, str], str]:
    """The summary (first paragraph), the ``Args:`` lines by parameter and the ``Returns:``
    text of a Google-style docstring."""
    summary = text.strip().split("\n\n", 1)[0].strip()
    arguments: dict[str, str] = {}
    returns: list[str] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:", "Returns:", "Raises:"):
            section = stripped
            continue
        if section in ("Args:", "Arguments:", "Parameters:"):
            matched = _ARG_LINE.match(line)
            if matched:
                arguments[matched.group(1).lstrip("*")] = matched.group(2).strip()
        elif section == "Returns:" and stripped:
            returns.append(stripped)
    if summary.startswith(("Args:", "Returns:")):
        summary = ""
    return summary, arguments, " ".join(returns)


def python_function(code: str, name: str) -> tuple[Schema, Schema, str]:
    """The input and output schemas of function ``name`` of ``code`` (the first function
    defined there when ``name`` is empty), and its docstring's summary."""
    if len(code) > MAX_SPEC_BYTES:
        raise Unreadable(f"The Python code is longer than {MAX_SPEC_BYTES} characters.")
    try:
        module = ast.parse(code)
    except (SyntaxError, ValueError) as error:
        raise Unreadable(f"The Python code does not parse: {error}") from None
    functions = [
        node for node in module.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    chosen = next((f for f in functions if f.name == name), None) if name else None
    if chosen is None and not name and functions:
        chosen = functions[0]
    if chosen is None:
        raise Unreadable(
            f"The Python code defines no function {name!r}."
            if name
            else "The Python code defines no function."
        )
    summary, described, returned = _docstring_parts(ast.get_docstring(chosen) or "")
    inputs = Schema(type=Schema.OBJECT, description=summary)
    arguments = chosen.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    pairs = [
        *zip(positional, defaults, strict=True),
        *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
    ]
    for argument, default in pairs:
        if argument.arg in ("self", "cls", "tool_context", "context"):
            continue  # what CES hands a Python tool, not one of its arguments
        schema = _annotation(argument.annotation)
        if argument.arg in described:
            schema.description = described[argument.arg]
        if default is not None:
            try:
                value = ast.literal_eval(default)
                json_format.ParseDict(value, schema.default)
            except (ValueError, TypeError, SyntaxError, json_format.ParseError):
                pass  # a default that is not a JSON literal: left out
        inputs.properties[argument.arg].CopyFrom(schema)
        if default is None:
            inputs.required.append(argument.arg)
    outputs = _annotation(chosen.returns)
    if returned:
        outputs.description = returned
    return inputs, outputs, summary


def struct_of(value: dict[str, Any]) -> struct_pb2.Struct:
    """``value`` as a Struct."""
    out = struct_pb2.Struct()
    out.update(value)
    return out
