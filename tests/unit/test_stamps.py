"""Server-assigned IDs and etags: AIP-122 shape, uniqueness, and a fresh sequence per process."""

from __future__ import annotations

import os
import re
import uuid

from ces_eval.core.aip import names, stamps


def test_ids_are_letter_first_version_4_uuids_valid_per_aip_122() -> None:
    ids = [names.new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert {identifier[0] for identifier in ids} == set("abcdef")  # every letter occurs
    for identifier in ids[:500]:
        assert uuid.UUID(identifier).version == 4
        names.validate_id(identifier, "evaluation_id")  # raises when not AIP-122


def test_etags_are_fresh_hex() -> None:
    etags = {stamps.new_etag() for _ in range(20_000)}
    assert len(etags) == 20_000
    assert all(re.fullmatch(r"[0-9a-f]{24}", etag) for etag in etags)


def test_a_forked_child_draws_another_sequence() -> None:
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.write(writer, stamps.new_etag().encode())
        os._exit(0)
    os.close(writer)
    from_child = os.read(reader, 64).decode()
    os.close(reader)
    os.waitpid(child, 0)
    assert len(from_child) == 24
    assert from_child != stamps.new_etag()
