"""Seeding and steering a running ces-eval from tests, beside Google's client.

:class:`Emulator` speaks the emulator service's REST/JSON routes (``/emulator/v1/...``) with the
standard library alone. It imports none of ces-eval's generated modules, so it runs in the same
process as ``google-cloud-ces`` (both would register ``google.cloud.ces.v1beta`` in protobuf's
default pool). Resources go in as proto3 JSON dicts, official proto-plus objects
(``ces_v1beta.EvaluationResult(...)``) or protobuf messages, and come back as dicts.

The pytest plugin (:mod:`ces_eval.testing.plugin`) hands one bound to its server to every test
as the ``ces_eval_admin`` fixture.
"""

from __future__ import annotations

from ces_eval.testing.emulator import Emulator, EmulatorError

__all__ = ["Emulator", "EmulatorError"]
