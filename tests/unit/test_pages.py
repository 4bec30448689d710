"""Page sizes, order_by and page tokens (AIP-158, AIP-132), with hypothesis for tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.core.aip import names, pages
from ces_eval.errors import Code, ServiceError
from ces_eval.storage.base import Cursor, OrderBy, SortKey

TOKENS = pages.PageTokens(b"k" * 32)
cursors = st.builds(
    Cursor,
    value=st.one_of(st.integers(-(2**62), 2**62), st.text(max_size=80)),
    name=st.text(max_size=200),
)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(0, 50), (1, 1), (50, 50), (1000, 1000), (1001, 1000), (2**31 - 1, 1000)],
)
def test_page_size(requested: int, expected: int) -> None:
    assert pages.page_size(requested) == expected


def test_negative_page_size_is_invalid() -> None:
    with pytest.raises(ServiceError) as raised:
        pages.page_size(-5)
    assert raised.value.code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", OrderBy(SortKey.UPDATE_TIME, True)),
        ("name", OrderBy(SortKey.NAME, False)),
        ("create_time", OrderBy(SortKey.CREATE_TIME, True)),
        ("update_time", OrderBy(SortKey.UPDATE_TIME, True)),
        ("name desc", OrderBy(SortKey.NAME, True)),
        (" create_time   ASC ", OrderBy(SortKey.CREATE_TIME, False)),
    ],
)
def test_order_by(text: str, expected: OrderBy) -> None:
    assert pages.order_by(text) == expected


@pytest.mark.parametrize(
    "text", ["display_name", "name sideways", "name, create_time", "name desc asc"]
)
def test_bad_order_by(text: str) -> None:
    with pytest.raises(ServiceError):
        pages.order_by(text)


def test_a_collections_own_orders_take_their_direction() -> None:
    more = {"next_run": False, "last.create_time": True}
    assert pages.order_by("next_run", more=more) == OrderBy("next_run", False)
    assert pages.order_by("last.create_time asc", more=more) == OrderBy("last.create_time", False)
    assert pages.order_by("name", more=more) == OrderBy(SortKey.NAME, False)
    with pytest.raises(ServiceError) as raised:
        pages.order_by("next_run")  # another collection's order
    assert "use one of name, create_time, update_time." in raised.value.message


@given(cursor=cursors, query=st.text(max_size=100))
def test_tokens_round_trip(cursor: Cursor, query: str) -> None:
    assert TOKENS.decode(TOKENS.encode(query, cursor), query) == cursor


@given(cursor=cursors, query=st.text(max_size=50), other=st.text(max_size=50))
def test_tokens_are_bound_to_their_query(cursor: Cursor, query: str, other: str) -> None:
    token = TOKENS.encode(query, cursor)
    if other != query:
        with pytest.raises(ServiceError):
            TOKENS.decode(token, other)


@given(cursor=cursors, index=st.integers(min_value=0), replacement=st.characters())
def test_altered_tokens_are_rejected(cursor: Cursor, index: int, replacement: str) -> None:
    token = TOKENS.encode("q", cursor)
    position = index % len(token)
    altered = token[:position] + replacement + token[position + 1 :]
    if altered == token:
        return
    try:
        decoded = TOKENS.decode(altered, "q")
    except ServiceError as error:
        assert error.code is Code.INVALID_ARGUMENT
    else:
        # Only base64 padding-equivalent spellings may decode, and to the same cursor.
        assert decoded == cursor


@given(token=st.text(max_size=3000))
def test_arbitrary_tokens_never_crash(token: str) -> None:
    try:
        TOKENS.decode(token, "q")
    except ServiceError as error:
        assert error.code is Code.INVALID_ARGUMENT


def test_tokens_from_another_database_are_rejected() -> None:
    token = pages.PageTokens(b"other" * 8).encode("q", Cursor(1, "n"))
    with pytest.raises(ServiceError):
        TOKENS.decode(token, "q")


@given(st.from_regex(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True))
def test_every_aip_122_id_is_accepted(identifier: str) -> None:
    names.validate_id(identifier, "evaluation_id")
    assert names.EVALUATION.parse(f"projects/p/locations/l/apps/a/evaluations/{identifier}", "n")


@given(st.text(max_size=80))
def test_arbitrary_names_are_parsed_or_invalid(text: str) -> None:
    try:
        parts = names.EVALUATION.parse(text, "name")
    except ServiceError as error:
        assert error.code is Code.INVALID_ARGUMENT
        assert error.violations[0].field == "name"
    else:
        assert names.EVALUATION.format(**parts) == text
