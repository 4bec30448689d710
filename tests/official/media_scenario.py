"""UploadEvaluationAudio and TestPersonaVoice driven by Google's official Python client.

The command line, the wiring and the reports are harness.py's.
"""

from __future__ import annotations

import struct
from typing import Any

from google.api_core import exceptions

# The scenarios run as scripts: their folder is on sys.path.
from client_scenario import golden  # type: ignore[import-not-found]
from harness import main, refused, step  # type: ignore[import-not-found]

ONE_SECOND = bytes(32_000)  # LINEAR16 at 16 kHz: 2 bytes a sample


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
        **refused(
            lambda: client.upload_evaluation_audio(name=evaluation.name, audio_content=wav_float),
            exceptions.BadRequest,  # gRPC's InvalidArgument is one
        ),
    )
    step(
        "too_large",
        **refused(
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
        **refused(
            lambda: client.test_persona_voice(
                request={"app": app, "persona_id": "pirate", "text": "Ahoy"}
            ),
            exceptions.NotFound,
        ),
    )


if __name__ == "__main__":
    main(lambda wired: scenario(wired.client, wired.app("media-project"), wired.transport))
