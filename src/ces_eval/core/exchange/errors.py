"""The one error of the exchange's formats: a document that cannot be used.

Shared by the document reader (:mod:`.document`, :mod:`.yaml_dialect`) and the CSV and audio
readers, so that a caller catches one type. The object store's refusals are the port's
(:class:`ces_eval.core.aip.ports.ObjectError`).
"""

from __future__ import annotations

__all__ = ["ExchangeError"]


class ExchangeError(ValueError):
    """A document that cannot be used; ``path`` locates it in the document.

    ``quotes`` says whether ``message`` or ``path`` may hold text of the document (a key, a
    value, a line); ``blind`` is the (message, path) to give instead where the document's text
    must not be shown (:meth:`redacted`)."""

    def __init__(
        self,
        message: str,
        path: str = "",
        *,
        quotes: bool = True,
        blind: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.message = message
        self.path = path
        self.quotes = quotes
        self.blind = blind

    def redacted(self) -> ExchangeError:
        """This error without any text of the document: for a document read from a file,
        whose content the caller may have no right to see (docs/security.md)."""
        if not self.quotes:
            return self
        message, path = self.blind or ("not a valid export document", "")
        return ExchangeError(message, path, quotes=False)
