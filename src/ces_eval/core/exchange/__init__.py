"""The export exchange: the export document and where it is kept.

:mod:`.document` is the document (docs/export-format.md) in JSON or in the YAML dialect of
:mod:`.yaml_dialect`; :mod:`.objects` is the gs:// object store over the export root, and
:mod:`.errors` their one error. The document's API is re-exported here, where the core and the
tests have always found it.
"""

from __future__ import annotations

from ces_eval.core.exchange.document import FORMAT, Bundle, detect_format, dump, load
from ces_eval.core.exchange.errors import ExchangeError

__all__ = ["FORMAT", "Bundle", "ExchangeError", "detect_format", "dump", "load"]
