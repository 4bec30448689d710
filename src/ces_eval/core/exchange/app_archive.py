"""ExportApp and ImportApp (both long-running): an app as a zip archive (docs/app-archive.md).

The archive holds what an app version holds: ``app.json`` (the app's settings) and one file per
agent, tool, toolset, example and guardrail, ``<collection>/<id>.json`` (``.yaml`` for YAML),
each the resource's proto3 JSON without its name, stamps and etag. Names of the app's own
resources inside it are written relative to the app (``tools/weather``), so an archive imported
into another app points at that app's resources, and exporting what was imported gives the same
bytes. Entries are sorted and dated 1980-01-01: one app exports to one archive.

ExportApp writes the current app (or ``app_version``'s snapshot) inline (``app_content``) or,
with ``gcs_uri``, as that object of the export folder (the path rules of the evaluation
exports). ImportApp reads ``app_content`` or ``gcs_uri`` into a new app (``app_id`` or a new
ID; ``display_name`` or the archive's) or into an existing one: REPLACE (the default) writes
each archived resource over the one of its ID and keeps the others, OVERWRITE first deletes the
app's resources of the archived kinds; either way in one transaction
(:func:`ces_eval.core.resources.versions.put_back`). A locked app is refused unless
``ignore_app_lock``. An entry that is not a valid resource is left out and named in
``warnings``. Bounds: the archive is at most the request limit, holds at most
:data:`_MAX_ENTRIES` entries, and each entry at most the resource limit once uncompressed
(read no further than that).
"""

from __future__ import annotations

import asyncio
import io
import re
import zipfile
from typing import TYPE_CHECKING, Any, cast

from google.api import resource_pb2
from google.protobuf import json_format

from ces_eval.contract import limits
from ces_eval.core.aip import names, standard, validation
from ces_eval.core.aip.ports import ObjectError
from ces_eval.core.exchange import document
from ces_eval.core.exchange.errors import ExchangeError
from ces_eval.core.exchange.imports import read_import
from ces_eval.core.exchange.stored import write_object
from ces_eval.core.resources import apps, changelogs, versions
from ces_eval.core.resources.locations import LOCATION
from ces_eval.generated.google.cloud.ces.v1beta import agent_service_pb2, app_version_pb2

if TYPE_CHECKING:
    from google.longrunning import operations_pb2
    from google.protobuf import descriptor
    from google.protobuf.message import Message

    from ces_eval.access import Caller
    from ces_eval.core.aip.context import Context, Rpc

__all__ = ["RPCS", "read_archive", "write_archive"]

_Format = agent_service_pb2.ExportAppRequest.ExportFormat
_Strategy = agent_service_pb2.ImportAppRequest.ImportOptions.ConflictResolutionStrategy
_EXTENSIONS: dict[int, str] = {_Format.JSON: "json", _Format.YAML: "yaml"}
_DROPPED = ("name", "createTime", "updateTime", "etag")
_DATE = (1980, 1, 1, 0, 0, 0)
_MAX_ENTRIES = 10_000
_APP_FILE = "app"
# The snapshot's repeated fields, by the collection their resources are named in.
_BY_COLLECTION = {
    str(
        cast("descriptor.Descriptor", field.message_type)
        .GetOptions()
        .Extensions[resource_pb2.resource]
        .pattern[0]
    ).split("/")[-2]: field
    for field in versions.KINDS
}
_RELATIVE = re.compile("^(?:" + "|".join(_BY_COLLECTION) + ")/")


def _relative(value: Any, prefix: str) -> Any:  # noqa: ANN401 - JSON
    """``value`` with every string naming something under ``prefix`` made relative to it."""
    if isinstance(value, str):
        return value.removeprefix(prefix)
    if isinstance(value, list):
        return [_relative(item, prefix) for item in value]
    if isinstance(value, dict):
        return {key: _relative(item, prefix) for key, item in value.items()}
    return value


def _absolute(value: Any, prefix: str) -> Any:  # noqa: ANN401 - JSON
    """``value`` with every relative name of the app's resources under ``prefix``."""
    if isinstance(value, str):
        return prefix + value if _RELATIVE.match(value) else value
    if isinstance(value, list):
        return [_absolute(item, prefix) for item in value]
    if isinstance(value, dict):
        return {key: _absolute(item, prefix) for key, item in value.items()}
    return value


def _entry(message: Message, app: str, fmt: int) -> bytes:
    shown = json_format.MessageToDict(message)
    for key in _DROPPED:
        shown.pop(key, None)
    return document.render(_relative(shown, f"{app}/"), fmt)


def write_archive(snapshot: app_version_pb2.AppSnapshot, app: str, fmt: int) -> bytes:
    """The zip archive of ``snapshot`` (the module's docstring)."""
    extension = _EXTENSIONS[fmt]
    files = {f"{_APP_FILE}.{extension}": _entry(snapshot.app, app, fmt)}
    for collection, field in _BY_COLLECTION.items():
        for resource in getattr(snapshot, field.name):
            identifier = str(resource.name).rsplit("/", 1)[-1]
            files[f"{collection}/{identifier}.{extension}"] = _entry(resource, app, fmt)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            archive.writestr(zipfile.ZipInfo(path, _DATE), files[path], zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _read_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, field: str) -> bytes:
    if info.file_size > limits.MAX_RESOURCE_BYTES:
        raise standard.invalid(
            field, f"{info.filename} is larger than {limits.MAX_RESOURCE_BYTES} bytes."
        )
    with archive.open(info) as opened:
        data = opened.read(limits.MAX_RESOURCE_BYTES + 1)
    if len(data) > limits.MAX_RESOURCE_BYTES:
        raise standard.invalid(
            field, f"{info.filename} is larger than {limits.MAX_RESOURCE_BYTES} bytes."
        )
    return data


def read_archive(
    data: bytes, app: str, field: str
) -> tuple[app_version_pb2.AppSnapshot, list[str]]:
    """The snapshot the archive ``data`` holds, named under ``app``, and a warning for each
    entry left out; a file that is no zip archive, or one past the bounds, is INVALID_ARGUMENT
    about request ``field``."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as error:
        raise standard.invalid(field, f"Not a zip archive: {error}.") from error
    taken = app_version_pb2.AppSnapshot()
    warnings: list[str] = []
    with archive:
        entries = [info for info in archive.infolist() if not info.is_dir()]
        if len(entries) > _MAX_ENTRIES:
            raise standard.invalid(field, f"The archive holds more than {_MAX_ENTRIES} files.")
        for info in entries:
            path = info.filename
            folder, _, file_name = path.rpartition("/")
            identifier, _, extension = file_name.rpartition(".")
            if extension not in _EXTENSIONS.values():
                warnings.append(f"{path}: not a .json or .yaml file; left out.")
                continue
            if not folder and identifier == _APP_FILE:
                target: Message = taken.app
                name = app
            elif folder in _BY_COLLECTION and names.foreign_id(identifier):
                target = getattr(taken, _BY_COLLECTION[folder].name).add()
                name = f"{app}/{folder}/{identifier}"
            else:
                warnings.append(f"{path}: not a file of an app archive; left out.")
                continue
            try:
                content = document.parse(_read_entry(archive, info, field))
                if not isinstance(content, dict):
                    raise ExchangeError("not an object")
                json_format.ParseDict(_absolute(content, f"{app}/"), target)
            except (ExchangeError, json_format.ParseError, zipfile.BadZipFile) as error:
                warnings.append(f"{path}: {error}; left out.")
                target.Clear()
                if target is not taken.app:
                    getattr(taken, _BY_COLLECTION[folder].name).pop()
                continue
            setattr(target, "name", name)  # noqa: B010 - every resource has a name
    return taken, warnings


# -- the RPCs ------------------------------------------------------------------------------------


async def export_app(
    context: Context, request: agent_service_pb2.ExportAppRequest, caller: Caller
) -> operations_pb2.Operation:
    """ExportApp (the module's docstring): a missing app or version, or a bad format or URI,
    is refused before the operation starts."""
    app = request.name
    await standard.get(context, apps.APPS, app)
    if request.export_format not in _EXTENSIONS:
        raise standard.invalid("export_format", "Use JSON or YAML.")
    version = None
    if request.app_version:
        version = await standard.get(context, versions.VERSIONS, request.app_version)
    target = None
    if request.gcs_uri:
        try:
            target = context.locate(request.gcs_uri, app)
        except ObjectError as error:
            raise standard.invalid("gcs_uri", error.message) from error

    async def work() -> agent_service_pb2.ExportAppResponse:
        taken = version.snapshot if version is not None else None
        if taken is None:
            taken = await versions.snapshot(context.storage, app)
        data = await asyncio.to_thread(write_archive, taken, app, request.export_format)
        if target is None:
            return agent_service_pb2.ExportAppResponse(app_content=data)
        await write_object(context, target, data, "gcs_uri")
        return agent_service_pb2.ExportAppResponse(app_uri=target.uri)

    return await context.operation(app, "ExportApp", work)


async def import_app(
    context: Context, request: agent_service_pb2.ImportAppRequest, caller: Caller
) -> operations_pb2.Operation:
    """ImportApp (the module's docstring): the archive is read and checked before the
    operation starts; the operation writes it."""
    parent = request.parent
    if request.app_id:
        names.validate_id(request.app_id, "app_id")
    LOCATION.parse(parent, "parent", owned=0)
    app = f"{parent}/apps/{request.app_id or names.new_id()}"
    source = request.WhichOneof("app")
    if source is None:
        raise standard.invalid("app", "Set app_content or gcs_uri.")
    if source == "gcs_uri":
        data = await read_import(context, request.gcs_uri, parent)
    else:
        data = request.app_content
    # Unzipping and parsing up to the request limit is CPU work: off the event loop.
    taken, warnings = await asyncio.to_thread(read_archive, data, app, source)
    existing = await context.storage.get_row(apps.TABLE, app)
    adopting = existing is not None and apps.IMPLICIT in existing.metadata
    if existing is not None and not adopting:
        if request.display_name:
            raise standard.invalid("display_name", f"{app} exists: its display name is kept.")
        if existing.locked and not request.ignore_app_lock:
            raise apps.locked(app)
    settings = apps.App()
    settings.CopyFrom(taken.app)
    settings.display_name = (
        request.display_name or settings.display_name or app.rsplit("/", maxsplit=1)[-1]
    )
    violations = validation.resource_violations(settings, "app")
    validation.raise_if_invalid(violations, "app")
    overwrite = request.import_options.conflict_resolution_strategy == _Strategy.OVERWRITE

    async def work() -> agent_service_pb2.ImportAppResponse:
        taken.app.CopyFrom(settings)
        before, stored, left = await versions.put_back(
            context.storage, app, taken, keep_others=not overwrite
        )
        apps.forget(context, app)
        warnings.extend(left)
        await changelogs.record(context, "Import", before, stored, caller)
        return agent_service_pb2.ImportAppResponse(name=app, warnings=warnings)

    return await context.operation(app, "ImportApp", work)


RPCS: dict[str, Rpc] = {"ExportApp": export_app, "ImportApp": import_app}
