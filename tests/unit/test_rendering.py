"""JSON rendering: in pieces, exactly as rendered whole; the content-addressed cache: same bytes
as rendering afresh, per enum encoding, bounded in memory."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.transcoding import rendering
from ces_eval.transcoding.rendering import COMPACT, JsonRenderer, encode
from tests.support import samples


def _fresh(message: evaluation_pb2.Evaluation, int_enums: bool) -> bytes:
    document = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def test_cached_rendering_equals_fresh_rendering_per_content_and_encoding() -> None:
    renderer = JsonRenderer()
    message = samples.populate(evaluation_pb2.Evaluation(), 1)
    assert isinstance(message, evaluation_pb2.Evaluation)
    first = renderer.render(message, int_enums=False)
    again = renderer.render(message, int_enums=False)
    assert first == again == _fresh(message, False)
    assert (renderer.hits, renderer.misses) == (1, 1)
    assert renderer.render(message, int_enums=True) == _fresh(message, True)
    assert renderer.misses == 2  # another encoding is another entry
    message.etag = "changed"  # new content: rendered afresh, never the stale entry
    assert json.loads(renderer.render(message, int_enums=False))["etag"] == "changed"
    assert renderer.misses == 3


def test_memory_stays_within_the_bound() -> None:
    renderer = JsonRenderer(max_bytes=64 * 1024)
    for index in range(500):
        message = evaluation_pb2.Evaluation(name=f"e{index}", description="x" * 500)
        assert renderer.render(message, int_enums=False) == _fresh(message, False)
    assert renderer._used <= 64 * 1024
    first = evaluation_pb2.Evaluation(name="e0", description="x" * 500)
    renderer.render(first, int_enums=False)
    assert renderer.misses == 501  # evicted long ago: rendered again


@pytest.mark.parametrize("int_enums", [False, True])
@pytest.mark.parametrize("separators", [COMPACT, (", ", ": ")])
def test_rendering_in_pieces_is_exactly_rendering_whole(
    int_enums: bool, separators: tuple[str, str]
) -> None:
    messages = samples.contract_messages()
    assert len(messages) > 200
    maps = [m for m in messages if isinstance(m, service_pb2.ExportEvaluationsResponse)]
    assert any(m.failed_evaluations for m in maps)  # a map, rendered whole
    for message in messages:
        document = json_format.MessageToDict(message, use_integers_for_enums=int_enums)
        whole = json.dumps(document, ensure_ascii=False, separators=separators)
        # piece=0: every message with a field is taken apart, down to its leaves.
        assert encode(message, int_enums, separators, piece=0) == whole, message.DESCRIPTOR.name


def test_a_large_message_is_rendered_in_pieces_no_larger_than_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evaluation = evaluation_pb2.Evaluation(display_name="large")
    for _ in range(40):
        evaluation.golden.turns.add().steps.add().user_input.text = "x" * 1000
    pieces: list[int] = []
    original = rendering._whole

    def counted(message: Message, int_enums: bool, separators: tuple[str, str]) -> str:
        pieces.append(message.ByteSize())
        return original(message, int_enums, separators)

    monkeypatch.setattr(rendering, "_whole", counted)
    rendered = encode(evaluation, piece=4096)
    assert rendered == _fresh(evaluation, False).decode()
    assert len(pieces) > 40
    assert max(pieces) <= 4096
