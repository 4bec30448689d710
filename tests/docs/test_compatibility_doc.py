"""docs/compatibility.md lists exactly the fields numbered from 1000, and only seed fields."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.protobuf import descriptor

from tests.support import contract, seeds

DOC = contract.ROOT / "docs" / "compatibility.md"
PACKAGE = "google.cloud.ces.v1beta"


def _documented() -> dict[tuple[str, str, int], tuple[str, list[str]]]:
    rows: dict[tuple[str, str, int], tuple[str, list[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[3].isdigit():
            message, field, json_name, number, pages = cells
            rows[(message, field, int(number))] = (json_name, pages.split(", "))
    return rows


def _our_messages() -> Iterator[descriptor.Descriptor]:
    """Every message of our package, nested ones included."""
    files, pool = contract.ours()

    def walk(message: descriptor.Descriptor) -> Iterator[descriptor.Descriptor]:
        yield message
        for nested in message.nested_types:
            yield from walk(nested)

    for file in files.file:
        if file.package == PACKAGE:
            for message in pool.FindFileByName(file.name).message_types_by_name.values():
                yield from walk(message)


def _numbered_from_1000() -> dict[tuple[str, str, int], str]:
    found: dict[tuple[str, str, int], str] = {}
    for message in _our_messages():
        for field in message.fields:
            if field.number >= 1000:
                short = message.full_name.removeprefix(PACKAGE + ".")
                found[(short, field.name, field.number)] = field.json_name
    return found


def test_doc_lists_exactly_the_fields_numbered_from_1000() -> None:
    documented = _documented()
    actual = _numbered_from_1000()
    assert set(documented) == set(actual)
    assert {k: v[0] for k, v in documented.items()} == actual
    assert len(actual) == 20


def test_each_listed_field_appears_on_its_source_pages() -> None:
    pages = {p.path.name[:3]: p for p in seeds.load_pages()}
    for (message, field, _), (json_name, sources) in _documented().items():
        for source in sources:
            keys = set().union(*(b.keys for b in pages[source].blocks))
            assert json_name in keys, f"{message}.{field}: {json_name} not on page {source}"


@pytest.mark.external  # the official client (.venv-client)
def test_fields_numbered_from_1000_are_absent_from_the_official_client() -> None:
    official = contract.official()
    for message, field, number in _numbered_from_1000():
        try:
            theirs = official.pool.FindMessageTypeByName(f"{PACKAGE}.{message}")
        except KeyError:
            continue  # a type the official client does not have at all
        names = {f.json_name for f in theirs.fields}
        numbers = {f.number for f in theirs.fields}
        assert number not in numbers
        assert _numbered_from_1000()[(message, field, number)] not in names


@pytest.mark.external  # the official client (.venv-client)
def test_every_field_the_official_client_lacks_is_numbered_from_1000() -> None:
    """A seed-only field with a low number could collide with a future official number."""
    official = contract.official()
    offenders: list[str] = []
    for message in _our_messages():
        try:
            theirs = {
                f.number for f in official.pool.FindMessageTypeByName(message.full_name).fields
            }
        except KeyError:
            theirs = set()
        offenders.extend(
            f"{message.full_name}.{f.name} = {f.number}"
            for f in message.fields
            if f.number not in theirs and f.number < 1000
        )
    assert offenders == []
