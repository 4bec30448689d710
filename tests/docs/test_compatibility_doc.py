"""docs/compatibility.md lists exactly the fields numbered from 1000, and only seed fields."""

from __future__ import annotations

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


def _numbered_from_1000() -> dict[tuple[str, str, int], str]:
    files, pool = contract.ours()
    found: dict[tuple[str, str, int], str] = {}

    def visit(message: descriptor.Descriptor) -> None:
        for field in message.fields:
            if field.number >= 1000:
                short = message.full_name.removeprefix(PACKAGE + ".")
                found[(short, field.name, field.number)] = field.json_name
        for nested in message.nested_types:
            visit(nested)

    for file in files.file:
        if file.package == PACKAGE:
            for message in pool.FindFileByName(file.name).message_types_by_name.values():
                visit(message)
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
    files, pool = contract.ours()
    official = contract.official()
    offenders: list[str] = []

    def visit(message: descriptor.Descriptor) -> None:
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
        for nested in message.nested_types:
            visit(nested)

    for file in files.file:
        if file.package == PACKAGE:
            for message in pool.FindFileByName(file.name).message_types_by_name.values():
                visit(message)
    assert offenders == []
