"""The content-addressed JSON rendering cache: same bytes as rendering afresh, per enum encoding,
bounded in memory."""

from __future__ import annotations

import json

from google.protobuf import json_format

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.transcoding.rendering import JsonRenderer
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
