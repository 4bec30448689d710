"""LINEAR16 audio: single-channel 16-bit signed little-endian PCM, raw or in a WAV file.

What UploadEvaluationAudio accepts (:func:`read`), what it stores and TestPersonaVoice answers
(:func:`wav`, as Google's speech APIs return LINEAR16: with a WAV header) and the emulator's
stand-in for a synthesized voice (:func:`synthesize`). Raw bytes carry no sample rate: they are
taken at :data:`SAMPLE_RATE`, the rate the client library states for uploads (16 kHz, the
default InputAudioConfig); a WAV header's own rate is used as given.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from dataclasses import dataclass
from functools import cache

from ces_eval.core.exchange.errors import ExchangeError

__all__ = ["SAMPLE_RATE", "Audio", "AudioError", "read", "synthesize", "wav"]

SAMPLE_RATE = 16_000
_PCM = 1  # WAVE_FORMAT_PCM
_EXTENSIBLE = 0xFFFE  # WAVE_FORMAT_EXTENSIBLE, whose sub-format names the encoding
_PCM_GUID = bytes.fromhex("0100000000001000800000aa00389b71")
_RATES = range(8_000, 192_001)
# Other containers' first bytes: content that is surely not LINEAR16.
_OTHER_FORMATS = {
    b"fLaC": "FLAC",
    b"OggS": "Ogg",
    b"ID3": "MP3",
    b"#!AMR": "AMR",
    b"FORM": "AIFF",
    b"\x1a\x45\xdf\xa3": "WebM/Matroska",
    b"caff": "CAF",
}
# The synthetic voice: one tone per character, silence for blanks (see synthesize).
_CHARACTER_SECONDS = 0.04
_FADE_SAMPLES = 80  # 5 ms ramps: no clicks between tones
_AMPLITUDE = 6_000


class AudioError(ExchangeError):
    """Content that is not single-channel LINEAR16 audio."""


@dataclass(frozen=True)
class Audio:
    """LINEAR16 samples (``pcm``, an even number of bytes) and their sample rate."""

    pcm: bytes
    sample_rate: int

    @property
    def nanoseconds(self) -> int:
        """The duration, rounded down to the nanosecond."""
        return len(self.pcm) // 2 * 1_000_000_000 // self.sample_rate


def _format(body: bytes) -> int:
    """The sample rate of a WAV format chunk that describes mono 16-bit PCM."""
    if len(body) < 16:
        raise AudioError("the WAV format chunk is too short")
    encoding, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
    if encoding == _EXTENSIBLE and len(body) >= 40 and body[24:40] == _PCM_GUID:
        encoding = _PCM
    if encoding != _PCM:
        raise AudioError(f"WAV encoding {encoding:#06x} is not PCM (LINEAR16)")
    if bits != 16:
        raise AudioError(f"{bits}-bit WAV samples; LINEAR16 has 16")
    if channels != 1:
        raise AudioError(f"{channels} channels; the audio must be single-channel")
    if rate not in _RATES:
        raise AudioError(f"a sample rate of {rate} Hz")
    return int(rate)


def _wav(data: bytes) -> Audio:
    """The samples of a RIFF/WAVE file, which must hold mono 16-bit PCM."""
    if data[8:12] != b"WAVE":
        raise AudioError("a RIFF file that is not WAVE audio")
    offset, rate, pcm = 12, 0, None
    while offset + 8 <= len(data):
        chunk, size = data[offset : offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        body = data[offset + 8 : offset + 8 + size]
        if len(body) < size:
            raise AudioError(f"the WAV chunk {chunk.decode('latin-1')!r} is cut short")
        if chunk == b"fmt ":
            rate = _format(body)
        elif chunk == b"data":
            if not rate:
                raise AudioError("the WAV data comes before its format chunk")
            pcm = body
        offset += 8 + size + size % 2  # chunks are padded to an even size
    if pcm is None:
        raise AudioError("a WAV file without a format or data chunk")
    if len(pcm) % 2:
        raise AudioError("the WAV data has an odd number of bytes; 16-bit samples have two each")
    return Audio(pcm, rate)


def read(data: bytes) -> Audio:
    """The LINEAR16 audio ``data`` holds: a WAV file (mono, 16-bit PCM, its rate) or raw
    samples (at :data:`SAMPLE_RATE`). Raises :class:`AudioError` for anything else: an empty
    upload, another container or encoding, more channels, an odd number of bytes."""
    if not data:
        raise AudioError("no audio")
    if data[:4] == b"RIFF":
        return _wav(data)
    for magic, name in _OTHER_FORMATS.items():
        if data.startswith(magic):
            raise AudioError(f"{name} audio, not LINEAR16")
    if len(data) % 2:
        raise AudioError("an odd number of bytes; 16-bit samples have two each")
    return Audio(data, SAMPLE_RATE)


def wav(audio: Audio) -> bytes:
    """``audio`` as a WAV file: the 44-byte header of mono 16-bit PCM, then the samples."""
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + len(audio.pcm),
        b"WAVE",
        b"fmt ",
        16,
        _PCM,
        1,
        audio.sample_rate,
        audio.sample_rate * 2,
        2,
        16,
        b"data",
        len(audio.pcm),
    )
    return header + audio.pcm


@cache
def _tone(frequency: int) -> bytes:
    """One character's tone: a sine of ``frequency`` Hz with faded ends, as LINEAR16."""
    count = round(SAMPLE_RATE * _CHARACTER_SECONDS)
    samples = array("h")
    for index in range(count):
        ramp = min(1.0, index / _FADE_SAMPLES, (count - 1 - index) / _FADE_SAMPLES)
        value = _AMPLITUDE * ramp * math.sin(2 * math.pi * frequency * index / SAMPLE_RATE)
        samples.append(round(value))
    if sys.byteorder == "big":  # pragma: no cover - LINEAR16 is little-endian
        samples.byteswap()
    return samples.tobytes()


def synthesize(text: str) -> Audio:
    """The emulator's stand-in for a voice: for each character of ``text``, 40 ms of a tone
    whose pitch the character picks (blanks are silence), at :data:`SAMPLE_RATE`. The same
    text always gives the same bytes, and the length follows the text."""
    silence = bytes(round(SAMPLE_RATE * _CHARACTER_SECONDS) * 2)
    parts = [
        silence if character.isspace() else _tone(220 + (ord(character) % 24) * 20)
        for character in text
    ]
    return Audio(b"".join(parts), SAMPLE_RATE)
