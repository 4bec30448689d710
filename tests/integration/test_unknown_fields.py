"""Fields the contract does not declare are dropped on write (issue 15, item 9).

A gRPC client can put any field number into its bytes; protobuf keeps what it does not know as
unknown fields, and a stored message used to carry them, served back over gRPC past every limit
(a 9 MiB unknown field passed the 262,144-character string limit). The server now ignores them,
as a proto3 server does, at the top of the request and inside the evaluation alike.
"""

from __future__ import annotations

import grpc

from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from ces_eval.testing.server import RunningServer
from tests.support.load import golden_evaluation

APP = "projects/p/locations/l/apps/a"
SERVICE = "/google.cloud.ces.v1beta.EvaluationService"
PAYLOAD = b"u" * (9 * 1024 * 1024)  # far past every string limit, under the 10 MiB message limit


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field ``number`` holding ``data``."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def test_unknown_fields_are_not_stored_nor_served(server: RunningServer) -> None:
    evaluation = golden_evaluation("unknown").SerializeToString() + _field(4999, PAYLOAD)
    request = (
        service_pb2.CreateEvaluationRequest(parent=APP, evaluation_id="unknown").SerializeToString()
        + _field(3, evaluation)  # the evaluation, carrying the unknown field
        + _field(5999, b"top-level")
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        create = channel.unary_unary(f"{SERVICE}/CreateEvaluation")
        created = create(request, timeout=60)
        get = channel.unary_unary(f"{SERVICE}/GetEvaluation")
        served = get(
            service_pb2.GetEvaluationRequest(name=f"{APP}/evaluations/unknown").SerializeToString(),
            timeout=60,
        )
    for answer in (created, served):
        assert len(answer) < 64 * 1024
        assert PAYLOAD[:1024] not in answer
        parsed = evaluation_pb2.Evaluation.FromString(answer)
        assert parsed.name == f"{APP}/evaluations/unknown"
        # Nothing the contract does not declare: dropping unknown fields changes nothing. (A
        # Get answers the stored bytes, whose fields need not come in number order.)
        known = evaluation_pb2.Evaluation.FromString(answer)
        known.DiscardUnknownFields()
        assert known.SerializeToString() == parsed.SerializeToString()
