"""Server-maintained stamps: times and etags (AIP-148, AIP-154)."""

from __future__ import annotations

import os
import time

from google.protobuf import timestamp_pb2

__all__ = ["new_etag", "now"]


def now() -> timestamp_pb2.Timestamp:
    """The current time at microsecond precision: the storage keeps times in microseconds, so
    what a write returns is exactly what a later read returns."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMicroseconds(time.time_ns() // 1000)
    return stamp


def new_etag() -> str:
    """A fresh etag: random, so equal content written twice still gets a new one."""
    return os.urandom(12).hex()
