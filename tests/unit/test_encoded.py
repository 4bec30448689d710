"""Responses held as wire bytes (issue 19): a List page assembled from its items' bytes is the
message built field by field, and its JSON, joined from the items' own renderings, is exactly
``json_format``'s rendering of that message, for every List response of the contract, every
field kind the generated messages have and both enum encodings."""

from __future__ import annotations

import json

import pytest
from google.protobuf import descriptor, json_format, message_factory, wrappers_pb2
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.contract import schema
from ces_eval.contract.encoded import Encoded, message_of, varint
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.transcoding.rendering import JsonRenderer
from tests.support.generated import generated_examples, messages


def _fresh(message: Message, int_enums: bool) -> bytes:
    document = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _list_responses() -> list[tuple[type[Message], descriptor.FieldDescriptor]]:
    """Every List response the services declare, with its repeated items field."""
    found = {}
    for method in schema.methods().values():
        if method is None or not method.name.startswith("List"):
            continue
        response = method.output_type
        items = [f for f in response.fields if f.is_repeated and f.message_type is not None]
        if len(items) == 1:
            found[response.full_name] = (message_factory.GetMessageClass(response), items[0])
    return sorted(found.values(), key=lambda pair: pair[0].DESCRIPTOR.full_name)


LISTS = _list_responses()
_SETTINGS = generated_examples(10)
# Large enough to remember every rendering an example makes (a renderer does not keep one
# larger than an eighth of its budget).
_BUDGET = 1 << 30


def test_every_list_response_of_the_contract_is_covered() -> None:
    names = {response.DESCRIPTOR.name for response, _ in LISTS}
    assert {"ListEvaluationsResponse", "ListEvaluationResultsResponse"} <= names
    assert len(LISTS) >= 8, names


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize(
    ("response_class", "field"), LISTS, ids=[r.DESCRIPTOR.name for r, _ in LISTS]
)
def test_a_page_from_item_bytes_is_the_message_and_renders_as_json_format_does(
    response_class: type[Message], field: descriptor.FieldDescriptor, int_enums: bool
) -> None:
    item_class = message_factory.GetMessageClass(field.message_type)

    @_SETTINGS
    @given(
        items=st.lists(messages(item_class, max_depth=4, json_safe=True), max_size=3),
        token=st.text(max_size=12),
    )
    def check(items: list[Message], token: str) -> None:
        expected = response_class()
        getattr(expected, field.name).extend(items)
        rest = response_class()
        if token and "next_page_token" in rest.DESCRIPTOR.fields_by_name:
            rest.next_page_token = token  # type: ignore[attr-defined]
            expected.next_page_token = token  # type: ignore[attr-defined]
        encoded = Encoded.of_page(
            response_class, field, [i.SerializeToString(deterministic=True) for i in items], rest
        )
        assert encoded.message() == expected
        assert message_of(encoded) == expected
        renderer = JsonRenderer(_BUDGET)
        if items:
            assert renderer.cached_encoded(encoded, int_enums) is None  # nothing rendered yet
        rendered = renderer.render_encoded(encoded, int_enums)
        # Exactly json_format's rendering of the message as stored (a map's members in the
        # order its deterministic bytes hold them), and the same document as the original's.
        assert rendered == _fresh(encoded.message(), int_enums)
        assert json.loads(rendered) == json.loads(_fresh(expected, int_enums))
        assert renderer.cached_encoded(encoded, int_enums) == rendered  # joined, not rendered
        assert renderer.render(encoded.message(), int_enums) == rendered

    check()


@pytest.mark.parametrize("int_enums", [False, True])
def test_a_get_from_stored_bytes_renders_as_json_format_does(int_enums: bool) -> None:
    @_SETTINGS
    @given(messages(evaluation_pb2.Evaluation, max_depth=4, json_safe=True))
    def check(evaluation: Message) -> None:
        data = evaluation.SerializeToString(deterministic=True)
        encoded = Encoded(evaluation_pb2.Evaluation, data)
        renderer = JsonRenderer(_BUDGET)
        assert renderer.cached_encoded(encoded, int_enums) is None
        stored = encoded.message()
        assert renderer.render_encoded(encoded, int_enums) == _fresh(stored, int_enums)
        assert renderer.cached_encoded(encoded, int_enums) == _fresh(stored, int_enums)
        assert json.loads(_fresh(stored, int_enums)) == json.loads(_fresh(evaluation, int_enums))

    check()


def _repeated_after_a_string() -> tuple[type[Message], descriptor.FieldDescriptor, str]:
    """A contract message with a repeated message field numbered after a string field."""
    for message_type in evaluation_pb2.DESCRIPTOR.message_types_by_name.values():
        for repeated in message_type.fields:
            if not repeated.is_repeated or repeated.message_type is None:
                continue
            if repeated.message_type.GetOptions().map_entry:
                continue
            for other in message_type.fields:
                string = other.type == descriptor.FieldDescriptor.TYPE_STRING
                if string and not other.is_repeated and other.number < repeated.number:
                    return message_factory.GetMessageClass(message_type), repeated, other.name
    raise AssertionError("no such message in the contract")


@pytest.mark.parametrize("int_enums", [False, True])
def test_items_numbered_after_another_field_set_render_as_json_format_does(
    int_enums: bool,
) -> None:
    """json_format orders members by field number: when a field numbered before the items is
    set, the page is not a join with the items first; it is rendered as a message."""
    message_class, field, earlier = _repeated_after_a_string()
    rest = message_class()
    setattr(rest, earlier, "first")
    item = message_factory.GetMessageClass(field.message_type)()
    encoded = Encoded.of_page(message_class, field, [item.SerializeToString()] * 2, rest)
    expected = encoded.message()
    assert getattr(expected, earlier) == "first" and len(getattr(expected, field.name)) == 2
    rendered = JsonRenderer().render_encoded(encoded, int_enums)
    assert rendered == _fresh(expected, int_enums)
    assert next(iter(json.loads(rendered))) == rest.DESCRIPTOR.fields_by_name[earlier].json_name


@pytest.mark.parametrize("value", [1, 127, 128, 300, 16_383, 16_384, 2**31, 2**63, 2**64 - 1])
def test_varints_are_protobufs(value: int) -> None:
    assert varint(value) == wrappers_pb2.UInt64Value(value=value).SerializeToString()[1:]
    assert varint(0) == b"\x00"
