"""The export exchange: the export document and where it is kept.

:mod:`.document` is the document (docs/export-format.md) in JSON or in the YAML dialect of
:mod:`.yaml_dialect`; :mod:`.objects` is the gs:// object store over the export root. This facade
re-exports what the core and the tests use, so callers need not know which module holds what.
"""

from __future__ import annotations

from ces_eval.core.exchange.document import FORMAT, Bundle, detect_format, dump, load
from ces_eval.core.exchange.errors import ExchangeError
from ces_eval.core.exchange.objects import (
    OWNER_MAX,
    ObjectMissing,
    ObjectPath,
    ObjectTooLarge,
    PathRefused,
    locate,
    probe,
    read_object,
    sweep_temporary,
    temporary_owners,
    write_atomically,
)

__all__ = [
    "FORMAT",
    "OWNER_MAX",
    "Bundle",
    "ExchangeError",
    "ObjectMissing",
    "ObjectPath",
    "ObjectTooLarge",
    "PathRefused",
    "detect_format",
    "dump",
    "load",
    "locate",
    "probe",
    "read_object",
    "sweep_temporary",
    "temporary_owners",
    "write_atomically",
]
