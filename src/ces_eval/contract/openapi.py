"""The OpenAPI 3.1 document of the REST surface, generated from the HTTP rules.

``make generate`` writes what :func:`build_openapi` returns to ``generated/openapi.json`` (so a
contract change shows in review, and ``make check-generated`` fails when it is stale); the server
serves that file (:func:`committed_openapi`) instead of building the document at every start.

Every operation is one ``google.api.http`` binding (google/api/http.proto) of the bindings given
(default: every one of :func:`ces_eval.contract.schema.http_bindings`; ``make generate`` gives
those the REST surface serves, :func:`ces_eval.surfaces.rest.served_bindings`, so the document
lists no method answering 501); every schema comes from :mod:`ces_eval.contract.jsonschema`, with
``$ref`` into ``components.schemas``. Nothing is listed by hand.

Transcoding as documented here (http.proto):

- A path variable's sub-template (``{parent=projects/*/locations/*/apps/*}``) is spelled out, each
  ``*`` becoming a path parameter named after the literal collection segment before it, in the
  singular (``projects/{project}/locations/{location}/apps/{app}``); a variable without literals
  (``{name}``) is one parameter named after its field. Repeated names get ``_2``, ``_3``, ….
  ``x-ces-eval-template`` on each operation keeps the original template.
- Body ``""``: the request's fields not bound by the path are query parameters, by JSON name,
  nested singular messages as dotted names (maps, repeated messages and JSON-shaped well-known
  types cannot be query parameters). Body ``"<field>"``: that field is the body, the other unbound
  fields are query parameters. Body ``"*"``: the request minus its path-bound fields is the body,
  and there are no query parameters.
- ``$alt`` (``json`` or ``json;enum-encoding=int``, which official clients append to every call)
  is a parameter of every operation. Since it switches responses to numeric enums, response
  schemas accept enums by name or number.

Request bodies use the input views of the messages (REQUIRED fields required, the update
resource partial); responses use the output views (see :mod:`ces_eval.contract.jsonschema`).
Errors are Google's JSON envelope, ``components.schemas.Status``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from google.longrunning import operations_proto_pb2

import ces_eval
from ces_eval.contract.comments import comment
from ces_eval.contract.jsonschema import JsonSchema, SchemaBuilder, View
from ces_eval.contract.schema import HttpBinding, http_bindings, services
from ces_eval.contract.templates import parse_template
from ces_eval.errors import Code

if TYPE_CHECKING:
    from collections.abc import Iterable

    from google.protobuf import descriptor

__all__ = [
    "OPENAPI_JSON",
    "PathParameter",
    "build_openapi",
    "committed_openapi",
    "convert_template",
]

OPENAPI_JSON = "openapi.json"  # in ces_eval.generated
OPENAPI_VERSION = "3.1.0"
TITLE = "ces-eval — Customer Engagement Suite EvaluationService (google.cloud.ces.v1beta)"
SCHEMAS = "#/components/schemas/"
_ERROR = "Status"
_ALT = "alt"
_VERBS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
_SEGMENT = "^[^/]+$"
_SEGMENTS = "^.+$"
# Well-known types whose JSON form is a string (or scalar), usable as query parameter values.
_QUERYABLE_MESSAGES = frozenset(
    {"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"}
    | {
        f"google.protobuf.{name}Value"
        for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String")
    }
    | {"google.protobuf.BytesValue"}
)


@dataclass(frozen=True)
class PathParameter:
    """One path parameter: a ``*`` (or ``**``) of the variable bound to ``field``.

    ``value`` is the variable's template with its parameters spelled out
    (``projects/{project}/locations/{location}``): how the field's value is put back together.
    """

    name: str
    field: str
    value: str
    multi_segment: bool = False


def _singular(collection: str) -> str:
    """``projects`` → ``project``, ``evaluationRuns`` → ``evaluationRun``, ``policies`` →
    ``policy``: regular English plurals only, which is what resource collections use."""
    if collection.endswith("ies"):
        return collection[:-3] + "y"
    if collection.endswith(("sses", "xes", "ches", "shes")):
        return collection[:-2]
    if collection.endswith("s") and not collection.endswith("ss"):
        return collection[:-1]
    return collection


def convert_template(template: str) -> tuple[str, list[PathParameter]]:
    """An HttpRule path template as an OpenAPI path with its path parameters.

    ``/v1beta/{parent=projects/*/locations/*/apps/*}/evaluations:export`` →
    ``/v1beta/projects/{project}/locations/{location}/apps/{app}/evaluations:export``.
    """
    parsed = parse_template(template)
    taken: set[str] = set()
    parameters: list[PathParameter] = []
    out: list[str] = []
    for field, segments in parsed.layout():
        if field is None:
            out.extend(segments)
            continue
        pieces: list[str] = []
        wildcards: list[tuple[str, bool]] = []
        collection: str | None = None
        for part in segments:
            if part not in ("*", "**"):
                pieces.append(part)
                collection = part
                continue
            base = _singular(collection) if collection else field
            name, count = base, 1
            while name in taken:
                count += 1
                name = f"{base}_{count}"
            taken.add(name)
            wildcards.append((name, part == "**"))
            pieces.append("{" + name + "}")
        value = "/".join(pieces)
        parameters += [PathParameter(name, field, value, multi) for name, multi in wildcards]
        out.append(value)
    verb = "" if parsed.verb is None else f":{parsed.verb}"
    return "/" + "/".join(out) + verb, parameters


def _bound_fields(parameters: list[PathParameter]) -> set[str]:
    return {p.field for p in parameters}


def _summary(text: str) -> str:
    flat = " ".join(text.split())
    match = re.match(r"(.+?\.)(\s|$)", flat)
    return match.group(1) if match else flat


def _path_parameter(parameter: PathParameter) -> JsonSchema:
    spans = "Segments" if parameter.multi_segment else "A segment"
    return {
        "name": parameter.name,
        "in": "path",
        "required": True,
        "description": f"{spans} of `{parameter.field}`, which is `{parameter.value}`.",
        "schema": {
            "type": "string",
            "pattern": _SEGMENTS if parameter.multi_segment else _SEGMENT,
        },
    }


def _query_parameters(
    builder: SchemaBuilder,
    message: descriptor.Descriptor,
    skip: set[str],
    *,
    proto_prefix: str = "",
    json_prefix: str = "",
    stack: tuple[str, ...] = (),
) -> list[JsonSchema]:
    """Query parameters for the fields of ``message`` not in ``skip`` (proto paths)."""
    found: list[JsonSchema] = []
    for field in message.fields:
        proto_path, json_path = proto_prefix + field.name, json_prefix + field.json_name
        if proto_path in skip:
            continue
        target = field.message_type
        if target is not None and target.full_name not in _QUERYABLE_MESSAGES:
            if target.GetOptions().map_entry or field.is_repeated:
                continue
            visiting = (*stack, message.full_name)
            if target.full_name.startswith("google.protobuf.") or target.full_name in visiting:
                continue
            found += _query_parameters(
                builder,
                target,
                skip,
                proto_prefix=proto_path + ".",
                json_prefix=json_path + ".",
                stack=visiting,
            )
            continue
        value = builder.query_value(field)
        schema: JsonSchema = {"type": "array", "items": value} if field.is_repeated else value
        parameter: JsonSchema = {"name": json_path, "in": "query"}
        description = builder.field_description(field)
        if description:
            parameter["description"] = description
        if not proto_prefix and builder.is_required(field):
            parameter["required"] = True
        if field.GetOptions().deprecated:
            parameter["deprecated"] = True
        parameter["schema"] = schema
        if field.is_repeated:
            parameter["style"], parameter["explode"] = "form", True
        found.append(parameter)
    return found


def _resolve(method: descriptor.MethodDescriptor, name: str) -> descriptor.Descriptor:
    """A message named in ``operation_info``: fully qualified, or relative to the method's
    package (google/longrunning/operations.proto)."""
    file = method.containing_service.file
    try:
        return file.pool.FindMessageTypeByName(name)
    except KeyError:
        return file.pool.FindMessageTypeByName(f"{file.package}.{name}")


def _responses(builder: SchemaBuilder, method: descriptor.MethodDescriptor) -> JsonSchema:
    output = method.output_type
    description = f"Success: a `{output.full_name}`."
    success: JsonSchema = {
        "description": description,
        "content": {"application/json": {"schema": builder.ref(output, View.OUTPUT)}},
    }
    if method.server_streaming:
        # Google's REST streaming: one JSON array written element by element as the responses
        # come; an error after the first is the array's last element, in the error envelope
        # (ces_eval.surfaces.rest).
        item = {"anyOf": [builder.ref(output, View.OUTPUT), {"$ref": SCHEMAS + _ERROR}]}
        success["description"] = (
            f"Success: a JSON array of `{output.full_name}`, streamed element by element as "
            "the responses come. An error after the first response ends the array as its last "
            "element, in Google's error envelope."
        )
        success["content"] = {"application/json": {"schema": {"type": "array", "items": item}}}
        success["x-ces-eval-server-streaming"] = True
    info = method.GetOptions().Extensions[operations_proto_pb2.operation_info]
    if info.response_type or info.metadata_type:
        response = _resolve(method, info.response_type or "google.protobuf.Empty")
        metadata = _resolve(method, info.metadata_type or "google.protobuf.Empty")
        for packed in (response, metadata):
            builder.ref(packed, View.OUTPUT)  # listed in components for readers of the Any
        success["description"] = (
            f"{description} Long-running: when done, its `response` holds a "
            f"`{response.full_name}`; its `metadata` holds a `{metadata.full_name}`."
        )
        success["x-ces-eval-long-running"] = {
            "responseType": response.full_name,
            "metadataType": metadata.full_name,
        }
    return {"200": success, "default": {"$ref": "#/components/responses/Error"}}


def _request_body(
    builder: SchemaBuilder, binding: HttpBinding, bound: set[str]
) -> JsonSchema | None:
    request = binding.method.input_type
    if not binding.body:
        return None
    if binding.body == "*":
        top_level = {name for name in bound if "." not in name}
        schema = builder.object(request, View.INPUT, exclude=top_level)
        description = schema.pop("description", "") or f"A `{request.full_name}`."
    else:
        schema = builder.field(request.fields_by_name[binding.body], View.INPUT)
        description = schema.pop("description", "") or f"The `{binding.body}` field."
    return {
        "description": description,
        "required": True,
        "content": {"application/json": {"schema": schema}},
    }


def _operation(
    builder: SchemaBuilder, binding: HttpBinding, operation_id: str, parameters: list[PathParameter]
) -> JsonSchema:
    method = binding.method
    text = comment(method)
    bound = _bound_fields(parameters)
    query: list[JsonSchema] = []
    if binding.body != "*":
        skip = bound | ({binding.body} if binding.body else set())
        query = _query_parameters(builder, method.input_type, skip)
    operation: JsonSchema = {
        "operationId": operation_id,
        "tags": [method.containing_service.name],
        "summary": _summary(text) if text else method.name,
    }
    if text:
        operation["description"] = text
    operation["parameters"] = [
        *(_path_parameter(p) for p in parameters),
        *query,
        {"$ref": f"#/components/parameters/{_ALT}"},
    ]
    body = _request_body(builder, binding, bound)
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = _responses(builder, method)
    operation["x-ces-eval-template"] = binding.template
    return operation


def _error_schema() -> JsonSchema:
    return {
        "type": "object",
        "description": (
            "Google's JSON error envelope (AIP-193): a google.rpc.Status with its code also as"
            " a name. Exactly one detail is a google.rpc.ErrorInfo."
        ),
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer", "description": "The HTTP status code."},
                    "message": {"type": "string", "description": "Developer-facing message."},
                    "status": {
                        "type": "string",
                        "enum": [code.name for code in Code],
                        "description": "The google.rpc.Code, by name.",
                    },
                    "details": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"@type": {"type": "string"}},
                            "required": ["@type"],
                        },
                    },
                },
                "required": ["code", "message", "status"],
            }
        },
        "required": ["error"],
    }


def _alt_parameter() -> JsonSchema:
    return {
        "name": "$alt",
        "in": "query",
        "required": False,
        "description": (
            "Response encoding: `json` (enums by name) or `json;enum-encoding=int` (enums as"
            " numbers), as Google's REST clients send it."
        ),
        "schema": {"type": "string", "enum": ["json", "json;enum-encoding=int"]},
    }


def build_openapi(
    bindings: Iterable[HttpBinding] | None = None, *, server_url: str | None = None
) -> JsonSchema:
    """The OpenAPI 3.1 document of ``bindings`` (default: every HTTP binding of our
    descriptors), as a fresh JSON-ready dict."""
    builder = SchemaBuilder(ref_prefix=SCHEMAS, enums_as="names_or_numbers")
    paths: dict[str, JsonSchema] = {}
    seen_ids: dict[str, int] = {}
    for binding in http_bindings() if bindings is None else bindings:
        verb = binding.verb.lower()
        if verb not in _VERBS:
            raise ValueError(
                f"{binding.method.full_name}: HTTP method {binding.verb} has no OpenAPI form"
            )
        path, parameters = convert_template(binding.template)
        base_id = f"{binding.method.containing_service.name}_{binding.method.name}"
        seen_ids[base_id] = seen_ids.get(base_id, 0) + 1
        operation_id = base_id if seen_ids[base_id] == 1 else f"{base_id}_{seen_ids[base_id]}"
        item = paths.setdefault(path, {})
        if verb in item:
            raise ValueError(f"Two bindings of {verb.upper()} {path}")
        item[verb] = _operation(builder, binding, operation_id, parameters)
    document: JsonSchema = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": TITLE,
            "version": ces_eval.__version__,
            "description": (
                "Generated from the compiled protos (google.api.http rules, field"
                " behaviours and comments). Request bodies and parameters follow the proto3 JSON"
                " mapping."
            ),
        },
    }
    if server_url is not None:
        document["servers"] = [{"url": server_url}]
    document["tags"] = [
        {"name": service.name, "description": comment(service)}
        if comment(service)
        else {"name": service.name}
        for service in services()
    ]
    document["paths"] = paths
    document["components"] = {
        "schemas": {**builder.defs, _ERROR: _error_schema()},
        "parameters": {_ALT: _alt_parameter()},
        "responses": {
            "Error": {
                "description": "An error, in Google's JSON error envelope.",
                "content": {"application/json": {"schema": {"$ref": SCHEMAS + _ERROR}}},
            }
        },
    }
    return document


def committed_openapi() -> JsonSchema:
    """The document ``generated/openapi.json`` holds, as a fresh dict: what :func:`build_openapi`
    returns (without ``servers``), written by ``make generate``. Read as package data, like the
    descriptor set beside it; a few milliseconds instead of building it."""
    document: JsonSchema = json.loads(
        resources.files("ces_eval.generated").joinpath(OPENAPI_JSON).read_bytes()
    )
    return document
