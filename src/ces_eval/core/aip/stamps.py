"""Server-maintained stamps: times and etags (AIP-148, AIP-154)."""

from __future__ import annotations

import os
import random
import time

from google.protobuf import timestamp_pb2

__all__ = ["new_etag", "now", "random_bits"]

# IDs and etags need uniqueness, not secrecy: a generator seeded once per process from the OS
# (and again in a forked child) draws them without a system call each time.
_random = random.Random(os.urandom(32))  # noqa: S311 - not used for secrets


def _reseed() -> None:
    _random.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def random_bits(count: int) -> int:
    return _random.getrandbits(count)


def now() -> timestamp_pb2.Timestamp:
    """The current time at microsecond precision: the storage keeps times in microseconds, so
    what a write returns is exactly what a later read returns."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMicroseconds(time.time_ns() // 1000)
    return stamp


def new_etag() -> str:
    """A fresh etag: random, so equal content written twice still gets a new one."""
    return f"{random_bits(96):024x}"
