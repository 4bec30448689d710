"""Objects of the context's store (:class:`~ces_eval.core.aip.ports.ObjectStore`) written for
a request, and the store's refusals in Google's error model: what exports, audio uploads and
imports share.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ces_eval.core.aip.ports import PathRefused
from ces_eval.core.aip.standard import invalid
from ces_eval.errors import Code, ServiceError

if TYPE_CHECKING:
    from ces_eval.core.aip.context import Context
    from ces_eval.core.aip.ports import ObjectLocation

__all__ = ["refused", "write_object"]


def refused(field: str, error: PathRefused, uri: str) -> ServiceError:
    """A link in the export folder is PERMISSION_DENIED: the server will not go where it leads,
    whatever is there. A file where a folder belongs (or the reverse) is the caller's path."""
    if error.link:
        return ServiceError(
            Code.PERMISSION_DENIED,
            f"{field}: {error.message}",
            "EXPORT_PATH_REFUSED",
            {"uri": uri},
        )
    return invalid(field, error.message)


async def write_object(context: Context, location: ObjectLocation, data: bytes, field: str) -> None:
    """Write ``data`` atomically at ``location`` (named by request ``field``); a link on the
    way is PERMISSION_DENIED, a write the disk refuses UNAVAILABLE (retryable)."""
    owner = context.runner.export_owner()  # in an operation's own context: its name
    try:
        await asyncio.to_thread(context.objects.write, location, data, owner)
    except PathRefused as error:
        raise refused(field, error, location.uri) from error
    except OSError as error:
        # A full disk, a quota or a file size limit: retryable once space returns, and
        # write_atomically left nothing at the final path.
        raise ServiceError(
            Code.UNAVAILABLE,
            f"Cannot write {location.uri}: {error.strerror or error}; retry later.",
            "EXPORT_WRITE_FAILED",
            {"uri": location.uri},
        ) from error
