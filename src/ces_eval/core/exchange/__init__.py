"""The exchange: what enters and leaves the service as documents and objects.

Its methods are :mod:`.exports`, :mod:`.imports` and :mod:`.media`, which reach the ``gs://``
objects through the context's store (:mod:`.stored`). Its formats: :mod:`.document`, the export
document (docs/export-format.md) in JSON or in the YAML dialect of :mod:`.yaml_dialect`;
:mod:`.csv_dialect`, the batch upload CSV; :mod:`.linear16`, audio; :mod:`.errors`, their one
error. The document's API is re-exported here.
"""

from __future__ import annotations

from ces_eval.core.exchange.document import FORMAT, Bundle, detect_format, dump, load
from ces_eval.core.exchange.errors import ExchangeError

__all__ = ["FORMAT", "Bundle", "ExchangeError", "detect_format", "dump", "load"]
