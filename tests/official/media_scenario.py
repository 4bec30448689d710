"""UploadEvaluationAudio and TestPersonaVoice driven by Google's official Python client.

Runs in the official client's own environment (``.venv-client``), never beside ``ces_eval``
(GUIDE §2). Usage: ``media_scenario.py grpc HOST:PORT`` or ``media_scenario.py rest
http://HOST:PORT``. Prints one JSON line per step and exits non-zero on the first failed
assertion.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import grpc

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import details_of, golden, step  # type: ignore[import-not-found]
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import ces_v1beta
from google.cloud.ces_v1beta.services.evaluation_service.transports import grpc as grpc_transport

ONE_SECOND = bytes(32_000)  # LINEAR16 at 16 kHz: 2 bytes a sample


def _refused(call: Any, error: type[Exception]) -> dict[str, Any]:
    try:
        call()
    except error as raised:
        return details_of(raised)  # type: ignore[arg-type]
    raise AssertionError(f"expected {error.__name__}")


def scenario(client: Any, app: str, transport: str) -> None:
    evaluation = client.create_evaluation(parent=app, evaluation=golden("Spoken"))
    first = client.upload_evaluation_audio(name=evaluation.name, audio_content=ONE_SECOND)
    assert first.duration.total_seconds() == 1.0, first.duration
    assert first.transcript == evaluation.golden.turns[0].steps[0].user_input.text
    assert first.audio_gcs_uri.startswith(f"gs://evaluation-audio/{evaluation.name}/")
    second = client.upload_evaluation_audio(
        request={
            "name": evaluation.name,
            "audio_content": ONE_SECOND * 2,
            "previous_audio_gcs_uri": first.audio_gcs_uri,
        }
    )
    assert second.duration.total_seconds() == 2.0
    step("upload", first=first.audio_gcs_uri, second=second.audio_gcs_uri)
    wav_float = (
        b"RIFF"
        + struct.pack("<I", 28)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 3, 1, 16000, 64000, 4, 32)
    )
    step(
        "not_linear16",
        **_refused(
            lambda: client.upload_evaluation_audio(name=evaluation.name, audio_content=wav_float),
            exceptions.BadRequest,  # gRPC's InvalidArgument is one
        ),
    )
    step(
        "too_large",
        **_refused(
            lambda: client.upload_evaluation_audio(
                name=evaluation.name, audio_content=bytes(4 * 1024 * 1024 + 2)
            ),
            exceptions.TooManyRequests,  # HTTP 429; gRPC's ResourceExhausted is one
        ),
    )

    voice = client.test_persona_voice(
        request={"app": app, "persona_id": "default", "text": "Hello there"}
    )
    assert voice.audio[:4] == b"RIFF" and voice.audio[8:12] == b"WAVE"
    assert len(voice.audio) == 44 + 11 * 1280  # 40 ms of 16 kHz samples per character
    again = client.test_persona_voice(
        request={"app": app, "persona_id": "default", "text": "Hello there"}
    )
    assert again.audio == voice.audio
    step("voice", bytes=len(voice.audio))
    step(
        "unknown_persona",
        **_refused(
            lambda: client.test_persona_voice(
                request={"app": app, "persona_id": "pirate", "text": "Ahoy"}
            ),
            exceptions.NotFound,
        ),
    )


def main(transport: str, target: str) -> int:
    if transport == "grpc":
        channel = grpc.insecure_channel(target)
        client = ces_v1beta.EvaluationServiceClient(
            transport=grpc_transport.EvaluationServiceGrpcTransport(channel=channel)
        )
    else:
        client = ces_v1beta.EvaluationServiceClient(
            transport="rest",
            client_options={"api_endpoint": target},
            credentials=AnonymousCredentials(),
        )
    scenario(client, f"projects/media-project/locations/us-central1/apps/{transport}", transport)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
