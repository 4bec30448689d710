"""The core's I/O ports (src/ces_eval/core/aip/ports.py): the core reaches ``gs://`` objects only
through the context's :class:`ObjectStore`, so a second store, here one that keeps objects in
memory, serves exports, imports and audio uploads with no edit of the core, and the export folder
is never touched."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ces_eval.core.aip.ports import (
    ObjectError,
    ObjectLocation,
    ObjectMissing,
    ObjectStore,
    ObjectTooLarge,
    PathRefused,
)
from ces_eval.core.io.objects import ExportFolder
from ces_eval.errors import Code, ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_service_pb2 as service_pb2
from tests.unit.test_imports import APP, Importer, Request, _export


@dataclass(frozen=True)
class _Spot:
    uri: str

    def child(self, name: str) -> _Spot:
        return _Spot(f"{self.uri}/{name}")


@dataclass
class MemoryBucket:
    """Objects in a dict by URI; a URI under ``gs://refused/`` is refused as a link would be."""

    objects: dict[str, bytes] = field(default_factory=dict)

    def locate(self, gcs_uri: str, namespace: str) -> ObjectLocation:
        if not gcs_uri.startswith("gs://") or len(gcs_uri) == len("gs://"):
            raise ObjectError(f"expected a gs:// URI, got {gcs_uri!r}")
        return _Spot(gcs_uri.rstrip("/"))

    def probe(self, location: ObjectLocation) -> None:
        self._check(location)

    def read(self, location: ObjectLocation, limit: int) -> bytes:
        self._check(location)
        if location.uri not in self.objects:
            raise ObjectMissing(location.uri)
        data = self.objects[location.uri]
        if len(data) > limit:
            raise ObjectTooLarge(f"{len(data)} bytes", limit=limit)
        return data

    def write(self, location: ObjectLocation, data: bytes, owner: str) -> None:
        self._check(location)
        self.objects[location.uri] = data

    def remove(self, location: ObjectLocation) -> bool:
        self._check(location)
        return self.objects.pop(location.uri, None) is not None

    @staticmethod
    def _check(location: ObjectLocation) -> None:
        if location.uri.startswith("gs://refused/"):
            raise PathRefused(f"{location.uri} passes through a link", link=True)


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[tuple[Importer, MemoryBucket]]:
    harness = Importer(tmp_path / "db.sqlite", tmp_path / "exports")
    store = MemoryBucket()
    objects: ObjectStore = store  # the Protocol is all the core asks of it
    harness.core.context = dataclasses.replace(harness.core.context, objects=objects)
    yield harness, store
    harness.close()
    assert not (tmp_path / "exports").exists()  # the export folder was never used


def test_the_server_runs_with_the_export_folder(tmp_path: Path) -> None:
    harness = Importer(tmp_path / "db.sqlite", tmp_path / "exports")
    try:
        assert harness.core.context.objects == ExportFolder(tmp_path / "exports")
    finally:
        harness.close()


def test_an_export_and_its_import_go_through_the_store(
    bucket: tuple[Importer, MemoryBucket],
) -> None:
    core, store = bucket
    core.create("One", "e1")
    uri = _export(core, "gs://bucket/exports")
    assert list(store.objects) == [uri]
    assert b"One" in store.objects[uri]
    core.call(
        "delete_evaluation", service_pb2.DeleteEvaluationRequest(name=f"{APP}/evaluations/e1")
    )
    response = core.imported(Request(parent=APP, gcs_uri=uri))
    assert [e.display_name for e in response.evaluations] == ["One"]


def test_the_stores_refusals_are_the_apis_errors(bucket: tuple[Importer, MemoryBucket]) -> None:
    core, store = bucket

    def refusal(uri: str) -> ServiceError:
        with pytest.raises(ServiceError) as caught:
            core.call("import_evaluations", Request(parent=APP, gcs_uri=uri))
        return caught.value

    assert refusal("gs://b/x").code == Code.NOT_FOUND
    store.objects["gs://b/big"] = b" " * (11 * 1024 * 1024)
    large = refusal("gs://b/big")
    assert large.code == Code.INVALID_ARGUMENT and "fewer evaluations" in large.message
    assert refusal("gs://refused/x").code == Code.PERMISSION_DENIED
    assert refusal("not-a-uri").code == Code.INVALID_ARGUMENT
    with pytest.raises(ServiceError) as refused:
        core.call(
            "export_evaluations",
            service_pb2.ExportEvaluationsRequest(
                parent=APP,
                names=[f"{APP}/evaluations/none"],
                include_evaluations=True,
                export_options=service_pb2.ExportOptions(gcs_uri="gs://refused/x"),
            ),
        )
    assert refused.value.code == Code.PERMISSION_DENIED
