"""A JSON document is checked, counted and merged into its message by one walk of our own
(transcoding/body.py, ``_convert``), json_format only for the kinds it leaves to it, the
separate passes at anything out of the ordinary: the message must be json_format's,
for every request type of the contract, every field kind the generated messages have, both enum
encodings and both spellings of field names; and where json_format refuses (too deep), the
refusal is json_format's, word for word."""

from __future__ import annotations

import json
from typing import cast

import pytest
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.contract import schema
from ces_eval.contract.limits import LIMITS
from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.transcoding.body import MAX_NESTING, check_document, parse_body, parse_document
from tests.support.generated import generated_examples, json_documents, messages


def _request_types() -> list[type[Message]]:
    found = {
        method.input_type.full_name: method.input_type
        for method in schema.methods().values()
        if method is not None
    }
    return [message_factory.GetMessageClass(found[name]) for name in sorted(found)]


REQUESTS = _request_types()
_SETTINGS = generated_examples(15)


@pytest.mark.parametrize("request_class", REQUESTS, ids=lambda c: c.DESCRIPTOR.name)
@given(data=st.data())
@_SETTINGS
def test_a_document_merges_as_json_format_parses_it(
    request_class: type[Message], data: st.DataObject
) -> None:
    message = data.draw(messages(request_class, json_safe=True, max_depth=6))
    int_enums = data.draw(st.booleans())
    proto_names = data.draw(st.booleans())
    document = json_format.MessageToDict(
        message, use_integers_for_enums=int_enums, preserving_proto_field_name=proto_names
    )
    text = json.dumps(document)
    merged = request_class()
    try:
        parse_document(json.loads(text), merged, "")
    except ServiceError as error:  # over a count or size limit of ours: json_format has none
        assert {v.reason for v in error.violations} & {"TOO_MANY", "TOO_LONG", "TOO_DEEP"}
        return
    # What json_format makes of the document as the check leaves it (a float32 spelt as
    # json_format prints it is read back as json_format can: see body._as_float32).
    checked = json.loads(text)
    assert check_document(request_class.DESCRIPTOR, checked, "") == []
    expected = json_format.ParseDict(checked, request_class(), max_recursion_depth=MAX_NESTING)
    assert merged == expected
    assert merged.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )


def _nested(levels: int, array: bool) -> object:
    """A Struct ``levels`` deep: objects in objects, or an object of arrays in arrays."""
    value: object = "leaf"
    for _ in range(levels):
        value = [value, 1, None] if array else {"k": value, "n": 1.5}
    return {"top": value}


@pytest.mark.parametrize("array", [False, True], ids=["objects", "arrays"])
@pytest.mark.parametrize("levels", [10, 44, 45, 46, 47, 48])
def test_depth_counts_from_the_top_as_json_format_counts_it(levels: int, array: bool) -> None:
    """A Struct deep inside an evaluation: the messages above it count towards the limit."""
    args = _nested(levels, array)
    step = {"expectation": {"toolCall": {"tool": "t", "args": args}}}
    document = {"golden": {"turns": [{"steps": [step]}]}}
    text = json.dumps(document)
    try:
        json_format.Parse(text, evaluation_pb2.Evaluation(), max_recursion_depth=MAX_NESTING)
    except json_format.ParseError as error:
        refused: str | None = str(error).split("\n", 1)[0]
    else:
        refused = None
    merged = evaluation_pb2.Evaluation()
    if refused is None:
        parse_body(text.encode(), merged, "evaluation")
        assert merged == json_format.Parse(text, evaluation_pb2.Evaluation())
        return
    with pytest.raises(ServiceError) as raised:
        parse_body(text.encode(), merged, "evaluation")
    assert raised.value.message == f"The request body is invalid: {refused}"


def _separately(request_class: type[Message], document: object) -> Message | list[str]:
    """What the separate passes make of ``document``: the count limits' violations, else the
    check's, else json_format's message (or its refusal's first line, said of the body)."""
    descriptor = request_class.DESCRIPTOR
    violations = LIMITS.json_counts(descriptor, document) or check_document(
        descriptor, document, ""
    )
    if violations:
        return [f"{v.field}: {v.description}" for v in violations]
    try:
        return json_format.ParseDict(document, request_class(), max_recursion_depth=MAX_NESTING)
    except json_format.ParseError as error:
        return [f"body: {str(error).split(chr(10), 1)[0]}"]


@pytest.mark.parametrize("request_class", REQUESTS, ids=lambda c: c.DESCRIPTOR.name)
@given(data=st.data())
@_SETTINGS
def test_the_one_walk_answers_as_the_separate_passes(
    request_class: type[Message], data: st.DataObject
) -> None:
    """Valid or mutated (unknown fields, wrong JSON types, values out of range, doubled oneofs,
    counts over their limits...): the conversion walks a document once, and gives up to the
    separate passes at anything out of the ordinary; its answer is always theirs."""
    source = messages(request_class, json_safe=True, max_depth=6)
    body, _ = data.draw(json_documents(source, request_class.DESCRIPTOR))
    expected = _separately(request_class, json.loads(body))
    merged = request_class()
    try:
        parse_document(json.loads(body), merged, "")
    except ServiceError as error:
        assert isinstance(expected, list), error.message
        assert [f"{v.field}: {v.description}" for v in error.violations] == expected
        return
    assert merged == expected
    assert merged.SerializeToString(deterministic=True) == cast(
        "Message", expected
    ).SerializeToString(deterministic=True)
