"""LINEAR16 audio (src/ces_eval/core/exchange/linear16.py) and the two audio RPCs
(src/ces_eval/core/exchange/media.py) in the core over a real SQLite file and export folder."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.core.aip import pages
from ces_eval.core.aip.context import Settings
from ces_eval.core.exchange import linear16
from ces_eval.core.exchange.media import AUDIO_BUCKET, MAX_AUDIO_BYTES, MAX_VOICE_TEXT
from ces_eval.core.service import Core
from ces_eval.errors import Code
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_core import APP, Harness

Upload = service_pb2.UploadEvaluationAudioRequest
Voice = service_pb2.TestPersonaVoiceRequest


def _wav(
    pcm: bytes, *, rate: int = 16_000, channels: int = 1, bits: int = 16, encoding: int = 1
) -> bytes:
    fmt = struct.pack("<HHIIHH", encoding, channels, rate, rate * channels * bits // 8, 2, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # an odd chunk, padded
    chunks += b"data" + struct.pack("<I", len(pcm)) + pcm
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def test_raw_samples_are_taken_at_16_khz() -> None:
    audio = linear16.read(bytes(32_000 * 3 + 2))
    assert audio.sample_rate == linear16.SAMPLE_RATE == 16_000
    assert audio.nanoseconds == 3_000_062_500


def test_a_wav_file_brings_its_own_rate_and_round_trips() -> None:
    audio = linear16.read(_wav(bytes(8_000), rate=8_000))
    assert (audio.sample_rate, audio.nanoseconds) == (8_000, 500_000_000)
    assert linear16.read(linear16.wav(audio)) == audio
    assert len(linear16.wav(audio)) == 44 + 8_000


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "no audio"),
        (b"\x00\x01\x02", "an odd number of bytes"),
        (b"fLaC" + bytes(10), "FLAC audio"),
        (b"OggS" + bytes(10), "Ogg audio"),
        (b"ID3" + bytes(11), "MP3 audio"),
        (b"RIFF\x00\x00\x00\x00AVI " + bytes(8), "not WAVE audio"),
        (_wav(bytes(8), encoding=3), "WAV encoding 0x0003 is not PCM"),
        (_wav(bytes(8), bits=8), "8-bit WAV samples"),
        (_wav(bytes(8), channels=2), "2 channels"),
        (_wav(bytes(7)), "odd number of bytes"),
        (_wav(bytes(8), rate=100), "a sample rate of 100 Hz"),
        (_wav(bytes(8))[:-4], "is cut short"),
        (b"RIFF\x00\x00\x00\x00WAVE", "without a format or data chunk"),
    ],
    ids=[
        "empty",
        "odd",
        "flac",
        "ogg",
        "mp3",
        "avi",
        "float-wav",
        "8-bit",
        "stereo",
        "odd-wav",
        "rate",
        "cut",
        "no-chunks",
    ],
)
def test_what_is_not_linear16_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(linear16.AudioError) as raised:
        linear16.read(data)
    assert problem in raised.value.message


def test_the_synthetic_voice_is_deterministic_and_follows_the_text() -> None:
    short, long = linear16.synthesize("hi"), linear16.synthesize("hi there")
    assert short == linear16.synthesize("hi")
    assert (short.nanoseconds, long.nanoseconds) == (80_000_000, 320_000_000)
    assert long.pcm[: len(short.pcm)] == short.pcm
    assert long.pcm[len(short.pcm) : len(short.pcm) + 1280] == bytes(1280)  # a blank is silence
    assert linear16.synthesize("a").pcm != linear16.synthesize("b").pcm
    assert max(abs(v) for (v,) in struct.iter_unpack("<h", short.pcm)) > 5_000


class Media(Harness):
    def __init__(self, path: Path, export_root: Path, *, per_project: bool = False) -> None:
        super().__init__(path)
        self.export_root = export_root
        self.core = Core(
            self.storage,
            pages.PageTokens(self.run(self.storage.secret())),
            settings=Settings(export_dir=export_root, export_per_project=per_project),
        )

    def file(self, uri: str, project: str = "") -> Path:
        return self.export_root.joinpath(*filter(None, [project]), uri.removeprefix("gs://"))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Media]:
    harness = Media(tmp_path / "db.sqlite", tmp_path / "exports")
    yield harness
    harness.close()


def test_an_upload_is_stored_as_wav_with_its_duration_and_transcript(core: Media) -> None:
    evaluation = core.create("Spoken", "e1")
    pcm = bytes(range(256)) * 125  # 32,000 bytes: one second
    response = core.call("upload_evaluation_audio", Upload(name=evaluation.name, audio_content=pcm))
    assert response.audio_gcs_uri.startswith(f"gs://{AUDIO_BUCKET}/{evaluation.name}/audio-")
    assert response.audio_gcs_uri.endswith(".wav")
    assert (response.duration.seconds, response.duration.nanos) == (1, 0)
    assert response.transcript == evaluation.golden.turns[0].steps[0].user_input.text
    stored = core.file(response.audio_gcs_uri).read_bytes()
    assert linear16.read(stored) == linear16.Audio(pcm, 16_000)
    # A WAV upload at 8 kHz; the first audio is replaced and removed.
    second = core.call(
        "upload_evaluation_audio",
        Upload(
            name=evaluation.name,
            audio_content=_wav(bytes(12_000), rate=8_000),
            previous_audio_gcs_uri=response.audio_gcs_uri,
        ),
    )
    assert (second.duration.seconds, second.duration.nanos) == (0, 750_000_000)
    assert not core.file(response.audio_gcs_uri).exists()
    assert core.file(second.audio_gcs_uri).is_file()
    # Replacing what is already gone is no error.
    core.call(
        "upload_evaluation_audio",
        Upload(
            name=evaluation.name, audio_content=pcm, previous_audio_gcs_uri=response.audio_gcs_uri
        ),
    )


def test_a_scenario_has_no_transcript(core: Media) -> None:
    evaluation = core.call(
        "create_evaluation",
        service_pb2.CreateEvaluationRequest(
            parent=APP,
            evaluation={
                "display_name": "Simulated",
                "scenario": {
                    "task": "Order",
                    "rubrics": ["polite"],
                    "scenario_expectations": [{"agent_response": {"role": "agent"}}],
                },
            },
        ),
    )
    response = core.call(
        "upload_evaluation_audio", Upload(name=evaluation.name, audio_content=b"\0\0")
    )
    assert response.transcript == ""


def test_uploads_go_to_the_projects_folder_with_tokens(tmp_path: Path) -> None:
    harness = Media(tmp_path / "db.sqlite", tmp_path / "exports", per_project=True)
    try:
        evaluation = harness.create("Spoken", "e1")
        response = harness.call(
            "upload_evaluation_audio", Upload(name=evaluation.name, audio_content=b"\0\0")
        )
        assert harness.file(response.audio_gcs_uri, project="p").is_file()
        assert not harness.file(response.audio_gcs_uri).exists()
    finally:
        harness.close()


@pytest.mark.parametrize(
    ("request_", "code", "field"),
    [
        (
            Upload(name=f"{APP}/evaluations/e1", audio_content=b"OggS..."),
            Code.INVALID_ARGUMENT,
            "audio_content",
        ),
        (
            Upload(name=f"{APP}/evaluations/e1", audio_content=b"\0"),
            Code.INVALID_ARGUMENT,
            "audio_content",
        ),
        (Upload(name=f"{APP}/evaluations/e1"), Code.INVALID_ARGUMENT, "audio_content"),
        (
            Upload(name=f"{APP}/evaluations/e1", audio_content=bytes(MAX_AUDIO_BYTES + 2)),
            Code.RESOURCE_EXHAUSTED,
            "",
        ),
        (Upload(name=f"{APP}/evaluations/nope", audio_content=b"\0\0"), Code.NOT_FOUND, ""),
        (Upload(name="evaluations/e1", audio_content=b"\0\0"), Code.INVALID_ARGUMENT, "name"),
        (
            Upload(
                name=f"{APP}/evaluations/e1",
                audio_content=b"\0\0",
                previous_audio_gcs_uri=f"gs://{AUDIO_BUCKET}/{APP}/evaluations/e2/audio-x.wav",
            ),
            Code.INVALID_ARGUMENT,
            "previous_audio_gcs_uri",
        ),
        (
            Upload(
                name=f"{APP}/evaluations/e1",
                audio_content=b"\0\0",
                previous_audio_gcs_uri="gs://exports/evaluations-1.json",
            ),
            Code.INVALID_ARGUMENT,
            "previous_audio_gcs_uri",
        ),
    ],
    ids=[
        "ogg",
        "odd",
        "empty",
        "too-large",
        "no-evaluation",
        "bad-name",
        "other-evaluation",
        "not-audio",
    ],
)
def test_a_bad_upload_is_refused(core: Media, request_: Upload, code: Code, field: str) -> None:
    core.create("Spoken", "e1")
    error = core.error("upload_evaluation_audio", request_)
    assert error.code is code, error
    assert [v.field for v in error.violations] == ([field] if field else [])
    if code is Code.RESOURCE_EXHAUSTED:
        assert error.reason == "AUDIO_TOO_LARGE"
        assert error.metadata["limit"] == str(MAX_AUDIO_BYTES)
    assert not (core.export_root / AUDIO_BUCKET).exists()  # nothing stored


def test_the_default_persona_speaks(core: Media) -> None:
    response = core.call("test_persona_voice", Voice(app=APP, persona_id="default", text="Hello"))
    audio = linear16.read(response.audio)
    assert audio == linear16.synthesize("Hello")
    assert response.audio[:4] == b"RIFF"


@pytest.mark.parametrize(
    ("request_", "code", "fields"),
    [
        (Voice(app=APP, persona_id="grumpy", text="Hi"), Code.NOT_FOUND, []),
        (Voice(app=APP), Code.INVALID_ARGUMENT, ["persona_id", "text"]),
        (
            Voice(app=APP, persona_id="default", text="x" * (MAX_VOICE_TEXT + 1)),
            Code.INVALID_ARGUMENT,
            ["text"],
        ),
        (Voice(app="apps/a", persona_id="default", text="Hi"), Code.INVALID_ARGUMENT, ["app"]),
    ],
    ids=["unknown-persona", "required", "too-long", "bad-app"],
)
def test_a_bad_voice_test_is_refused(
    core: Media, request_: Voice, code: Code, fields: list[str]
) -> None:
    error = core.error("test_persona_voice", request_)
    assert error.code is code
    assert [v.field for v in error.violations] == fields
    if code is Code.NOT_FOUND:
        assert error.resource == (
            "ces.googleapis.com/EvaluationPersona",
            f"{APP}/evaluationPersonas/grumpy",
        )


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.binary(max_size=60).map(lambda tail: b"RIFF\x10\x00\x00\x00WAVE" + tail),
        st.tuples(st.integers(0, 0xFFFF), st.integers(0, 8), st.integers(0, 200_000)).map(
            lambda f: _wav(bytes(6), encoding=f[0], channels=f[1], rate=f[2])
        ),
    )
)
def test_any_bytes_are_audio_or_refused(data: bytes) -> None:
    """Any content is LINEAR16 (an even number of bytes, a rate in range) or an AudioError."""
    try:
        audio = linear16.read(data)
    except linear16.AudioError:
        return
    assert len(audio.pcm) % 2 == 0 and 8_000 <= audio.sample_rate <= 192_000
