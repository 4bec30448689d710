"""The export folder on real files: no read or write follows a symbolic link out of it, errors name
the gs:// URI only, temporary files carry their owner and the sweep removes only what it is told is
abandoned, and errors about a document read from a file quote none of it
(src/ces_eval/core/io/objects.py, docs/security.md).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ces_eval.core import exchange
from ces_eval.core.exchange import FORMAT, ExchangeError
from ces_eval.core.io import objects
from ces_eval.core.io.objects import ObjectMissing, ObjectTooLarge, PathRefused

SHADOW_LINE = "root:$6$s3cr3t-hash:19000:0:99999:7:::"
MARKER = "s3cr3t"
LIMIT = 1 << 20  # bytes read_object takes in these tests


@dataclass
class Folders:
    root: Path  # the export folder
    outside: Path  # a folder beside it, where links point

    def outside_files(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in self.outside.iterdir()}


@pytest.fixture
def folders(tmp_path: Path) -> Folders:
    root, outside = tmp_path / "exports", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "shadow").write_text(SHADOW_LINE + "\n")
    return Folders(root, outside)


def _at(folders: Folders, uri: str) -> objects.ObjectPath:
    return objects.locate(uri, folders.root)


# -- planted links ---------------------------------------------------------------------------------

# (what is planted under the export root, the URI written or read, the URI the refusal names)
LINKS = [
    pytest.param({"rootlink": "../outside"}, "gs://rootlink/shadow", "gs://rootlink", id="bucket"),
    pytest.param({"b/a": "../../outside"}, "gs://b/a/shadow", "gs://b/a", id="middle-of-the-path"),
    pytest.param({"b/x": "../../outside/shadow"}, "gs://b/x", "gs://b/x", id="file"),
    pytest.param({"b/gone": "../../outside/new"}, "gs://b/gone/x", "gs://b/gone", id="dangling"),
    pytest.param({"b/abs": "/"}, "gs://b/abs/etc/passwd", "gs://b/abs", id="absolute-to-root"),
]


def _plant(folders: Folders, links: dict[str, str]) -> None:
    for name, target in links.items():
        link = folders.root / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)


@pytest.mark.parametrize(("links", "uri", "named"), LINKS)
def test_an_export_through_a_link_is_refused_and_writes_nothing_outside(
    folders: Folders, links: dict[str, str], uri: str, named: str
) -> None:
    _plant(folders, links)
    before = folders.outside_files()
    for target in (_at(folders, uri), _at(folders, uri).child("export.json")):
        with pytest.raises(PathRefused) as caught:
            objects.write_atomically(target, b'{"format": "x"}')
        assert caught.value.link
        assert caught.value.message.startswith(f"{named} is a symbolic link")
        assert str(folders.root) not in str(caught.value)
        assert str(folders.outside) not in str(caught.value)
        assert folders.outside_files() == before
        assert not (folders.outside / "new").exists()
    with pytest.raises(PathRefused):
        objects.probe(_at(folders, uri))


@pytest.mark.parametrize(("links", "uri", "named"), LINKS)
def test_an_import_through_a_link_is_refused_without_reading(
    folders: Folders, links: dict[str, str], uri: str, named: str
) -> None:
    _plant(folders, links)
    with pytest.raises(PathRefused) as caught:
        objects.read_object(_at(folders, uri), LIMIT)
    assert caught.value.link
    assert caught.value.message == (
        f"{named} is a symbolic link in the export folder; ces-eval never follows links there."
    )


def test_a_link_at_the_target_name_is_refused_and_left_alone(folders: Folders) -> None:
    (folders.root / "b").mkdir()
    (folders.root / "b" / "out.json").symlink_to(folders.outside / "shadow")
    with pytest.raises(PathRefused) as caught:
        objects.write_atomically(_at(folders, "gs://b/out.json"), b"{}")
    assert caught.value.link
    assert (folders.outside / "shadow").read_text() == SHADOW_LINE + "\n"
    assert (folders.root / "b" / "out.json").is_symlink()
    assert sorted(os.listdir(folders.root / "b")) == ["out.json"]  # no temporary file left


def test_a_project_folder_that_is_a_link_is_refused(folders: Folders) -> None:
    (folders.root / "proj-a").symlink_to(folders.outside)
    target = objects.locate("gs://b/x", folders.root, "proj-a")
    with pytest.raises(PathRefused) as caught:
        objects.write_atomically(target.child("e.json"), b"{}")
    assert caught.value.message.startswith("the project's export folder is a symbolic link")
    assert "proj-a" not in caught.value.message
    assert folders.outside_files() == {"shadow": (SHADOW_LINE + "\n").encode()}


def test_a_root_that_is_a_link_is_the_operators_choice_and_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "exports").symlink_to(real)
    target = objects.locate("gs://b/x/e.json", tmp_path / "exports")
    objects.write_atomically(target, b"{}")
    assert (real / "b" / "x" / "e.json").read_bytes() == b"{}"
    assert objects.read_object(target, LIMIT) == b"{}"


def test_a_file_where_a_folder_belongs_is_refused(folders: Folders) -> None:
    (folders.root / "b").mkdir()
    (folders.root / "b" / "file").write_bytes(b"data")
    with pytest.raises(PathRefused) as caught:
        objects.write_atomically(_at(folders, "gs://b/file/e.json"), b"{}")
    assert not caught.value.link
    assert caught.value.message == "gs://b/file is an object, not a folder."
    with pytest.raises(PathRefused):
        objects.read_object(_at(folders, "gs://b/file/e.json"), LIMIT)


def test_folders_and_special_files_are_no_objects(folders: Folders) -> None:
    (folders.root / "b" / "folder").mkdir(parents=True)
    os.mkfifo(folders.root / "b" / "fifo")  # a FIFO must not hang the read
    with pytest.raises(PathRefused, match=r"^gs://b/folder is a folder, not an object\.$"):
        objects.read_object(_at(folders, "gs://b/folder"), LIMIT)
    with pytest.raises(PathRefused, match=r"^gs://b/fifo is not a regular file\.$"):
        objects.read_object(_at(folders, "gs://b/fifo"), LIMIT)


@pytest.mark.parametrize("uri", ["gs://b/none", "gs://nob/x", "gs://b/a/b/c"])
def test_a_missing_object_names_the_uri_only(folders: Folders, uri: str) -> None:
    (folders.root / "b").mkdir()
    with pytest.raises(ObjectMissing) as caught:
        objects.read_object(_at(folders, uri), LIMIT)
    assert caught.value.message == f"{uri} not found"


def test_a_missing_root_is_a_missing_object(tmp_path: Path) -> None:
    with pytest.raises(ObjectMissing):
        objects.read_object(objects.locate("gs://b/x", tmp_path / "none"), LIMIT)
    objects.probe(objects.locate("gs://b/x", tmp_path / "none"))  # nothing refused yet


def test_reads_and_writes_inside_the_folder_work(folders: Folders) -> None:
    target = _at(folders, "gs://b/a/b/e.json")
    objects.write_atomically(target, b"one")
    objects.write_atomically(target, b"two")
    assert objects.read_object(target, LIMIT) == b"two"
    assert sorted(os.listdir(folders.root / "b" / "a" / "b")) == ["e.json"]


def test_an_object_over_the_limit_is_refused_by_its_size_before_any_read(
    folders: Folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the whole file was read, whatever its size (a sparse file of a terabyte too)."""
    (folders.root / "b").mkdir()
    (folders.root / "b" / "exact").write_bytes(b" " * 100)
    assert objects.read_object(_at(folders, "gs://b/exact"), 100) == b" " * 100
    (folders.root / "b" / "over").write_bytes(b" " * 101)
    with pytest.raises(ObjectTooLarge) as caught:
        objects.read_object(_at(folders, "gs://b/over"), 100)
    assert caught.value.limit == 100
    assert (
        caught.value.message == "gs://b/over is larger than 100 bytes, the most one import reads."
    )
    with (folders.root / "b" / "huge").open("wb") as huge:
        huge.truncate(1 << 36)  # sparse: costs nothing to make, 64 GiB to read

    def unread(*args: object) -> None:
        raise AssertionError("the file was opened for reading")

    monkeypatch.setattr(os, "fdopen", unread)
    with pytest.raises(ObjectTooLarge):
        objects.read_object(_at(folders, "gs://b/huge"), LIMIT)


def test_an_object_that_grows_after_its_size_was_checked_is_read_limit_plus_one_bytes(
    folders: Folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folders.root / "b").mkdir()
    (folders.root / "b" / "growing").write_bytes(b" " * 1000)
    real_fstat = os.fstat

    def stale(descriptor: int) -> os.stat_result:  # the size before the file grew
        status = real_fstat(descriptor)
        return os.stat_result((*status[:6], 10, *status[7:]))

    monkeypatch.setattr(os, "fstat", stale)
    with pytest.raises(ObjectTooLarge):
        objects.read_object(_at(folders, "gs://b/growing"), 100)


def test_concurrent_writes_make_the_same_folders(folders: Folders) -> None:
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            objects.write_atomically(_at(folders, f"gs://b/x/y/z/{index}.json"), b"{}")
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(os.listdir(folders.root / "b" / "x" / "y" / "z")) == 8


# -- temporary files and their owners --------------------------------------------------------------


def _temporary(folder: Path, owner: str = "", random: str = "0123456789abcdef") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".ces-eval-{owner}{'+' if owner else ''}{random}.tmp"
    path.write_bytes(b"partial")
    return path


def test_the_temporary_file_carries_its_owner(
    folders: Folders, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def replace(source: Any, destination: Any, **dir_fds: int) -> None:
        seen.append(str(source))
        real_replace(source, destination, **dir_fds)

    monkeypatch.setattr(os, "replace", replace)
    objects.write_atomically(_at(folders, "gs://b/e.json"), b"{}", "tag+proj+loc+id-1")
    objects.write_atomically(_at(folders, "gs://b/f.json"), b"{}")
    assert seen[0].startswith(".ces-eval-tag+proj+loc+id-1+")
    assert seen[0].endswith(".tmp")
    assert seen[1].startswith(".ces-eval-")
    assert "+" not in seen[1]


@pytest.mark.parametrize("owner", ["a/b", "a b", "x" * (objects.OWNER_MAX + 1), "é", "a\x00"])
def test_owners_that_would_not_make_a_plain_name_are_refused(folders: Folders, owner: str) -> None:
    with pytest.raises(ValueError, match="not an owner"):
        objects.write_atomically(_at(folders, "gs://b/e.json"), b"{}", owner)
    assert not (folders.root / "b" / "e.json").exists()
    assert os.listdir(folders.root / "b") == []


def test_the_sweep_removes_only_what_its_caller_calls_abandoned(folders: Folders) -> None:
    live = _temporary(folders.root / "b" / "x", "db+p+l+live")
    dead = _temporary(folders.root / "b" / "y", "db+p+l+dead")
    legacy = _temporary(folders.root / "proj" / "b")
    export = folders.root / "b" / "x" / "e.json"
    export.write_bytes(b"{}")
    lookalike = folders.root / "b" / ".ces-eval-note.txt"
    lookalike.write_bytes(b"keep")
    assert objects.temporary_owners(folders.root) == {"db+p+l+live", "db+p+l+dead", ""}

    assert objects.sweep_temporary(folders.root, {"db+p+l+dead"}.__contains__) == 1
    assert live.exists()
    assert not dead.exists()
    assert legacy.exists()
    assert objects.sweep_temporary(folders.root, "".__eq__) == 1
    assert not legacy.exists()
    assert export.exists()
    assert lookalike.exists()


def test_the_sweep_never_follows_a_link(folders: Folders) -> None:
    victim = _temporary(folders.outside / "deep", "db+p+l+x")
    (folders.root / "b").mkdir()
    (folders.root / "b" / "link").symlink_to(folders.outside)
    (folders.root / "b" / f".ces-eval-db+p+l+y+{'f' * 16}.tmp").symlink_to(
        folders.outside / "shadow"
    )
    assert objects.temporary_owners(folders.root) == {"db+p+l+y"}
    assert objects.sweep_temporary(folders.root, lambda _owner: True) == 1
    assert victim.exists()
    assert (folders.outside / "shadow").read_text() == SHADOW_LINE + "\n"  # the link went, not it


def test_the_sweep_walks_a_root_that_is_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    leftover = _temporary(real / "b")
    (tmp_path / "exports").symlink_to(real)
    assert objects.sweep_temporary(tmp_path / "exports", lambda _owner: True) == 1
    assert not leftover.exists()
    assert objects.sweep_temporary(tmp_path / "none", lambda _owner: True) == 0


# -- errors about documents read from files quote none of them -------------------------------------


def _document(**members: object) -> bytes:
    return json.dumps({"format": FORMAT, **members}).encode()


QUOTING = [
    pytest.param(f"{MARKER}: 1\n".encode(), id="yaml-mapping-unknown-key"),
    pytest.param(f"key: [{MARKER}\n".encode(), id="yaml-unclosed-flow"),
    pytest.param(f"a: !{MARKER} x\n".encode(), id="yaml-unknown-tag"),
    pytest.param(f"a: 1\n\t{MARKER}: 2\n".encode(), id="yaml-tab"),
    pytest.param(
        f"format: {FORMAT}\nevaluations: [{{displayName: [{MARKER}]}}]\n".encode(),
        id="yaml-wrong-type",
    ),
    pytest.param(f"a: &{MARKER} x\nb: *{MARKER}\n".encode(), id="yaml-alias"),
    pytest.param(f'{{"{MARKER}": 1}}'.encode(), id="json-unknown-key"),
    pytest.param(f'{{"format": "{MARKER}"}}'.encode(), id="json-format"),
    pytest.param(f'{{"a": 1, "a": "{MARKER}"}}'.encode(), id="json-repeated-key"),
    pytest.param(f'{{"{MARKER}": 1, "{MARKER}": 2}}'.encode(), id="json-repeated-marker"),
    pytest.param(f'{{"a": "\\{MARKER}"}}'.encode(), id="json-bad-escape"),
    pytest.param(_document(evaluations=[{MARKER: 1}]), id="unknown-field"),
    pytest.param(_document(evaluations=[{"displayName": {MARKER: 1}}]), id="wrong-type"),
    pytest.param(_document(evaluations=[{"tags": [MARKER, {MARKER: 1}]}]), id="list-element"),
    pytest.param(_document(evaluationResults=[{"evaluationStatus": MARKER}]), id="enum-value"),
    pytest.param(_document(evaluationResults=[{"createTime": MARKER}]), id="timestamp"),
    pytest.param(
        _document(evaluations=[{"golden": {"turns": [{"steps": [{MARKER: {}}]}]}}]),
        id="deep-unknown-field",
    ),
    pytest.param(SHADOW_LINE.encode(), id="shadow-line"),
    pytest.param(b"\xff" + SHADOW_LINE.encode(), id="not-utf8"),
]


@pytest.mark.parametrize("data", QUOTING)
def test_the_redacted_error_quotes_nothing_of_the_document(data: bytes) -> None:
    with pytest.raises(ExchangeError) as caught:
        exchange.load(data)
    redacted = caught.value.redacted()
    assert not redacted.quotes
    assert MARKER not in str(redacted)
    assert MARKER not in redacted.path
    assert redacted.message  # says something


def test_redaction_keeps_what_quotes_nothing() -> None:
    cases = {
        b"": ("the document is empty", ""),
        b'{"format": 1,}': (
            "invalid JSON: Expecting property name enclosed in double quotes (line 1, column 14)",
            "",
        ),
        b"a: [1\n": ("invalid YAML (line 2, column 1)", ""),
        _document(evaluations=[{}, {"displayName": 5}]): (
            "not a valid Evaluation",
            "evaluations[1]",
        ),
        _document(evaluations={}): ("Expected a JSON array.", "evaluations"),
        b'{"format": "x"}': (f'unsupported format; expected "{FORMAT}"', "format"),
        b"[]": ("expected an object at the top of the document", ""),
    }
    for data, expected in cases.items():
        with pytest.raises(ExchangeError) as caught:
            exchange.load(data)
        redacted = caught.value.redacted()
        assert (redacted.message, redacted.path) == expected, data


def test_unredacted_errors_still_show_the_details() -> None:
    with pytest.raises(ExchangeError) as caught:
        exchange.load(_document(evaluations=[{MARKER: 1}]))
    assert caught.value.path == f"evaluations[0].{MARKER}"
    assert MARKER in caught.value.message


def _trees() -> st.SearchStrategy[object]:
    text = st.sampled_from([MARKER, f"x{MARKER}", "format", "evaluations", "name", "tags"])
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), text)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=12,
    )


@settings(max_examples=300, deadline=None)
@given(
    tree=_trees(),
    section=st.sampled_from(["evaluations", "evaluationResults", "format", MARKER]),
    as_yaml=st.booleans(),
)
def test_no_redacted_error_quotes_the_document(tree: object, section: str, as_yaml: bool) -> None:
    document: dict[str, object] = {"format": FORMAT, section: tree}
    data = (yaml.safe_dump(document) if as_yaml else json.dumps(document)).encode()
    try:
        exchange.load(data)
    except ExchangeError as error:
        redacted = error.redacted()
        assert MARKER not in str(redacted), (data, str(error))


def test_nothing_is_left_in_the_folders_by_refusals(folders: Folders) -> None:
    _plant(folders, {"rootlink": "../outside"})
    with pytest.raises(PathRefused):
        objects.write_atomically(_at(folders, "gs://rootlink/x/e.json"), b"{}")
    assert os.listdir(folders.root) == ["rootlink"]
    assert os.listdir(folders.outside) == ["shadow"]
