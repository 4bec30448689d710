"""Audio: UploadEvaluationAudio and TestPersonaVoice (docs/semantics.md, "Audio").

UploadEvaluationAudio stores an evaluation's LINEAR16 audio (:mod:`.exchange.linear16`) as a
WAV object under the export root, ``gs://evaluation-audio/{evaluation name}/audio-{id}.wav``
(in the project's namespace with ``--auth-tokens``, like exports), and deletes the upload it
replaces. Hosted CES writes to the bucket its App's audio recording settings name; apps are not
kept here, so the bucket is fixed. Its transcript is the text the evaluation's golden
conversation gives the user to say (this server has no speech recognition): empty for a
scenario.

TestPersonaVoice answers the emulator's stand-in for a synthesized voice
(:func:`.exchange.linear16.synthesize`). Personas are declared by the App
(``App.evaluation_personas``), which this server does not keep: only ``default`` exists.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from google.protobuf import duration_pb2

from ces_eval.core.aip import names
from ces_eval.core.aip.ports import ObjectError, PathRefused
from ces_eval.core.aip.standard import invalid
from ces_eval.core.aip.validation import raise_if_invalid
from ces_eval.core.exchange import linear16
from ces_eval.core.exchange.stored import refused, write_object
from ces_eval.errors import Code, FieldViolation, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2

if TYPE_CHECKING:
    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc
    from ces_eval.core.aip.ports import ObjectLocation
    from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2

__all__ = ["AUDIO_BUCKET", "MAX_AUDIO_BYTES", "MAX_VOICE_TEXT", "RPCS"]

AUDIO_BUCKET = "evaluation-audio"
# An upload's audio: 4 MiB, 131 s at 16 kHz; within a request (10 MiB) even as REST's base64.
MAX_AUDIO_BYTES = 4 * 1024 * 1024
# A voice test's text: 2,000 characters make 80 s of audio (2.5 MiB), a response any client reads.
MAX_VOICE_TEXT = 2_000


def _transcript(evaluation: evaluation_pb2.Evaluation) -> str:
    """The user's text of a golden conversation, turn by turn, separated by blanks."""
    if not evaluation.HasField("golden"):
        return ""
    return " ".join(
        step.user_input.text
        for turn in evaluation.golden.turns
        for step in turn.steps
        if step.WhichOneof("step") == "user_input" and step.user_input.text
    )


def _previous(
    context: Context, request: service_pb2.UploadEvaluationAudioRequest
) -> ObjectLocation | None:
    """Where the audio to replace is: an upload of this evaluation's, or INVALID_ARGUMENT."""
    uri = request.previous_audio_gcs_uri
    if not uri:
        return None
    field = "previous_audio_gcs_uri"
    if not uri.startswith(f"gs://{AUDIO_BUCKET}/{request.name}/"):
        raise invalid(field, f"Must be audio uploaded for {request.name}.")
    try:
        return context.locate(uri, request.name)
    except ObjectError as error:
        raise invalid(field, error.message) from error


async def upload_evaluation_audio(
    context: Context, request: service_pb2.UploadEvaluationAudioRequest, caller: Caller
) -> service_pb2.UploadEvaluationAudioResponse:
    names.EVALUATION.parse(request.name, "name")
    size = len(request.audio_content)
    if size > MAX_AUDIO_BYTES:
        # RESOURCE_EXHAUSTED: a quota on what one upload may hold (AIP-193), as for requests
        # over the size limit; a shorter recording fits.
        raise ServiceError(
            Code.RESOURCE_EXHAUSTED,
            f"audio_content holds {size} bytes, more than the {MAX_AUDIO_BYTES} an upload takes.",
            "AUDIO_TOO_LARGE",
            {"size": str(size), "limit": str(MAX_AUDIO_BYTES)},
        )
    if not size:
        raise_if_invalid([FieldViolation("audio_content", "Required.", "REQUIRED")], "upload")
    try:
        audio = linear16.read(request.audio_content)
    except linear16.AudioError as error:
        raise invalid(
            "audio_content", f"Not single-channel LINEAR16 audio: {error.message}."
        ) from error
    previous = _previous(context, request)
    evaluation = await context.storage.get_evaluation(request.name)
    if evaluation is None:
        raise ServiceError.not_found(names.EVALUATION.type, request.name)
    uri = f"gs://{AUDIO_BUCKET}/{request.name}/audio-{names.new_id()}.wav"
    try:
        location = context.locate(uri, request.name)
    except ObjectError as error:  # a name too long for an object
        raise invalid("name", error.message) from error
    await write_object(context, location, linear16.wav(audio), "name")
    if previous is not None:  # only once the new audio is safe
        try:
            await asyncio.to_thread(context.objects.remove, previous)
        except PathRefused as error:
            raise refused("previous_audio_gcs_uri", error, previous.uri) from error
    seconds, nanos = divmod(audio.nanoseconds, 1_000_000_000)
    return service_pb2.UploadEvaluationAudioResponse(
        audio_gcs_uri=uri,
        transcript=_transcript(evaluation),
        duration=duration_pb2.Duration(seconds=seconds, nanos=nanos),
    )


async def test_persona_voice(
    context: Context, request: service_pb2.TestPersonaVoiceRequest, caller: Caller
) -> service_pb2.TestPersonaVoiceResponse:
    names.APP.parse(request.app, "app", owned=0)
    violations = [
        FieldViolation(field, "Required.", "REQUIRED")
        for field in ("persona_id", "text")
        if not getattr(request, field)
    ]
    if len(request.text) > MAX_VOICE_TEXT:
        violations.append(
            FieldViolation("text", f"At most {MAX_VOICE_TEXT} characters.", "TOO_LONG")
        )
    raise_if_invalid(violations, "voice test")
    if request.persona_id != names.DEFAULT_PERSONA:
        persona = f"{request.app}/evaluationPersonas/{request.persona_id}"
        raise ServiceError.not_found(names.EVALUATION_PERSONA.type, persona)
    audio = await asyncio.to_thread(linear16.synthesize, request.text)
    return service_pb2.TestPersonaVoiceResponse(audio=linear16.wav(audio))


RPCS: dict[str, Rpc] = {
    "UploadEvaluationAudio": upload_evaluation_audio,
    "TestPersonaVoice": test_persona_voice,
}
