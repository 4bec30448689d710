"""HttpRule path templates (google/api/http.proto, "Path template syntax"; AIP-127).

Table-driven cases cover the templates this API serves plus synthetic ones (``**``, bare ``{x}``,
several variables, verbs), every ``TemplateError``, and the percent-decoding rules: single-segment
variables fully decoded, multi-segment variables keeping ``%2F``. Hypothesis checks that
``expand`` then ``match`` gives back the values, and that ``match`` never raises.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ces_eval.contract import schema
from ces_eval.contract.templates import PathTemplate, TemplateError, parse_template

LIST = "/v1beta/{parent=projects/*/locations/*/apps/*}/evaluations"
UPDATE = "/v1beta/{evaluation.name=projects/*/locations/*/apps/*/evaluations/*}"
EXPORT_RESULTS = "/v1beta/{parent=projects/*/locations/*/apps/*/evaluations/*}/results:export"
RUN_METRICS = (
    "/v1beta/{evaluation_result_id=projects/*/locations/*/apps/*/evaluations/*/results/*}"
    ":runEvaluationResultMetrics"
)
RESET = "/emulator/v1/{name=projects/*}:reset"
REAL_TEMPLATES = [LIST, UPDATE, EXPORT_RESULTS, RUN_METRICS, RESET]
BOOKS = "/v1/{name=shelves/*/books/*}"

APP = "projects/p/locations/us/apps/a"
EVALUATION = f"{APP}/evaluations/e"


# --- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "verb", "variables"),
    [
        (LIST, None, ("parent",)),
        (UPDATE, None, ("evaluation.name",)),
        (EXPORT_RESULTS, "export", ("parent",)),
        (RUN_METRICS, "runEvaluationResultMetrics", ("evaluation_result_id",)),
        (RESET, "reset", ("name",)),
        ("/v1/{name}", None, ("name",)),
        ("/v1/{a}/b/{c.d=e/*}:get", "get", ("a", "c.d")),
        ("/v1/*/x/**", None, ()),
        ("/v1/{x}:a:b", "a:b", ("x",)),
        ("/v1/{name=shelves/**}:list", "list", ("name",)),
    ],
)
def test_parse_reports_verb_and_variables_in_order(
    template: str, verb: str | None, variables: tuple[str, ...]
) -> None:
    parsed = parse_template(template)
    assert (parsed.source, parsed.verb, parsed.variables) == (template, verb, variables)


def test_every_binding_of_the_api_parses_and_round_trips() -> None:
    bindings = schema.http_bindings()
    assert {binding.template for binding in bindings} >= set(REAL_TEMPLATES)
    for binding in bindings:
        template = parse_template(binding.template)
        values = {
            path: shape.replace("**", "x/y").replace("*", "id-1")
            for path, shape in _shapes(binding.template).items()
        }
        assert template.match(template.expand(values)) == values, binding.template


def _written(template: PathTemplate) -> str:
    """The template text rebuilt from its layout alone."""
    parts = [
        "/".join(texts) if field is None else "{" + field + "=" + "/".join(texts) + "}"
        for field, texts in template.layout()
    ]
    return "/" + "/".join(parts) + ("" if template.verb is None else f":{template.verb}")


@pytest.mark.parametrize(
    ("template", "written"),
    [
        ("/v1/{name}", "/v1/{name=*}"),
        ("/v1/{parent=projects/*/locations/*}/things:run", None),
        ("/v1/*/{name=shelves/**}:list", None),
        ("/v1beta/{evaluation.name=projects/*/locations/*/apps/*/evaluations/*}", None),
    ],
)
def test_layout_holds_the_template_as_written(template: str, written: str | None) -> None:
    assert _written(parse_template(template)) == (written or template)


def test_every_binding_is_parsed_once_and_shared() -> None:
    """Router, OpenAPI, authorization and the request log read the same parse of a binding."""
    for binding in schema.http_bindings():
        assert parse_template(binding.template) is parse_template(binding.template)
        assert _written(parse_template(binding.template)).replace("=*}", "}") == (
            binding.template.replace("=*}", "}")
        )


def test_templates_compare_by_source() -> None:
    assert parse_template(LIST) == parse_template(LIST)
    assert parse_template(LIST) != parse_template(UPDATE)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("v1/{name}", "a template must start with '/'"),
        ("", "a template must start with '/'"),
        ("/", "empty segment at offset 1"),
        ("/v1//x", "empty segment at offset 4"),
        ("/v1/", "empty segment at offset 4"),
        ("/{a=}", "empty segment at offset 4"),
        ("/{a=b/}", "empty segment at offset 6"),
        ("/{a", "unbalanced braces: '{' at offset 1 has no matching '}'"),
        ("/{a=b/*", "unbalanced braces: '{' at offset 1 has no matching '}'"),
        ("/a}", "unbalanced braces: '}' at offset 2 has no matching '{'"),
        ("/{a}}", "unbalanced braces: '}' at offset 4 has no matching '{'"),
        ("/{a=b/{c}}", "a variable must not contain another variable (offset 6)"),
        ("/{a{b}}", "a variable must not contain another variable (offset 3)"),
        ("/x{a}", "a variable must be a whole segment (offset 2)"),
        ("/{a}b", "a variable must be a whole segment (offset 4)"),
        ("/{a}/{a}", "field path 'a' is bound twice"),
        ("/{a}/{a.b}", "field paths 'a' and 'a.b' overlap"),
        ("/{a.b}/{a}", "field paths 'a.b' and 'a' overlap"),
        ("/**/x", "'**' must be the last segment (only the verb may follow it)"),
        ("/{a=**}/{b}", "'**' must be the last segment (only the verb may follow it)"),
        ("/{a=**/b}", "'**' must be the last segment (only the verb may follow it)"),
        ("/{}", "invalid field path ''"),
        ("/{1a}", "invalid field path '1a'"),
        ("/{a.}", "invalid field path 'a.'"),
        ("/{a-b}", "invalid field path 'a-b'"),
        ("/{a/b}", "invalid field path 'a/b'"),
        ("/a*b", "invalid literal 'a*b': '*' is a wildcard only as a whole segment"),
        ("/***", "invalid literal '***': '*' is a wildcard only as a whole segment"),
        ("/a b", "invalid literal 'a b': character ' ' is not allowed (percent-encode it)"),
        ("/a?b", "invalid literal 'a?b': character '?' is not allowed"),
        ("/{a=x:y}", "invalid literal 'x:y': character ':' is not allowed"),
        ("/a%zz", "invalid literal 'a%zz': malformed percent-encoding at '%zz'"),
        ("/a%2", "invalid literal 'a%2': malformed percent-encoding at '%2'"),
        ("/a%FF", "literal 'a%FF' does not decode to UTF-8 text"),
        ("/a:", "the verb after ':' is empty"),
        ("/a:b/c", "':' may only start the verb, after the last segment"),
        ("/a:b c", "invalid verb 'b c': character ' ' is not allowed"),
        ("/a:b%zz", "invalid verb 'b%zz': malformed percent-encoding"),
        ("/a:b%C3", "invalid verb 'b%C3': its percent-encoded bytes are not UTF-8"),
        ("/a:{b}", "invalid verb '{b}': character '{' is not allowed"),
    ],
)
def test_template_errors_name_template_and_reason(template: str, reason: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse_template(template)
    assert isinstance(caught.value, ValueError)
    assert caught.value.template == template
    assert caught.value.reason.startswith(reason)
    assert str(caught.value) == f"invalid path template {template!r}: {caught.value.reason}"


# --- matching ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "raw_path", "expected"),
    [
        # The API's own templates.
        (LIST, f"/v1beta/{APP}/evaluations", {"parent": APP}),
        (LIST, f"/v1beta/{APP}/evaluations/", None),  # trailing slash: an empty segment
        (LIST, f"/v1beta/{APP}/evaluations:export", None),  # the literal is not "evaluations"
        (LIST, f"/v1beta/{APP}/evaluations%3Aexport", None),
        (LIST, "/v1beta/projects/p/locations/us/evaluations", None),  # too few segments
        (LIST, f"/v1beta/{APP}/x/evaluations", None),  # too many
        (LIST, "/v1beta/projects//locations/us/apps/a/evaluations", None),
        (LIST, f"/v1/{APP}/evaluations", None),
        (LIST, f"/V1BETA/{APP}/evaluations", None),  # literals are case-sensitive
        (LIST, f"/%76%31beta/{APP}/evaluations", {"parent": APP}),  # decoded literal
        (LIST, f"v1beta/{APP}/evaluations", None),
        (LIST, f"/v1beta/{APP}/evaluations?pageSize=1", None),  # the query is not the path
        (LIST, "/v1beta/folders/p/locations/us/apps/a/evaluations", None),
        (UPDATE, f"/v1beta/{EVALUATION}", {"evaluation.name": EVALUATION}),
        (UPDATE, f"/v1beta/{EVALUATION}:run", {"evaluation.name": EVALUATION + ":run"}),
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:export", {"parent": EVALUATION}),
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results", None),  # verb missing
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results%3Aexport", None),  # encoded ":"
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:exportx", None),
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:Export", None),
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:%65xport", {"parent": EVALUATION}),
        (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:export:export", None),
        (
            RUN_METRICS,
            f"/v1beta/{EVALUATION}/results/r1:runEvaluationResultMetrics",
            {"evaluation_result_id": f"{EVALUATION}/results/r1"},
        ),
        (
            RUN_METRICS,
            f"/v1beta/{EVALUATION}/results/r:1:runEvaluationResultMetrics",
            {"evaluation_result_id": f"{EVALUATION}/results/r:1"},  # the rightmost ":" is the verb
        ),
        (RUN_METRICS, f"/v1beta/{EVALUATION}/results/:runEvaluationResultMetrics", None),
        (RESET, "/emulator/v1/projects/p:reset", {"name": "projects/p"}),
        (RESET, "/emulator/v1/projects/p", None),
        (RESET, "/emulator/v1/projects/p/x:reset", None),
        (RESET, "/emulator/v1/projects:reset", None),
        (RESET, "/emulator/v1/projects/p:reset/", None),
        # Single-segment variables are fully decoded, "%2F" included.
        ("/v1/{name}", "/v1/a%2Fb", {"name": "a/b"}),
        ("/v1/{name}", "/v1/a%2fb", {"name": "a/b"}),
        ("/v1/{name}", "/v1/a%20b", {"name": "a b"}),
        ("/v1/{name}", "/v1/a%3Ab", {"name": "a:b"}),
        ("/v1/{name}", "/v1/caf%C3%A9", {"name": "café"}),
        ("/v1/{name}", "/v1/caf%c3%a9", {"name": "café"}),
        ("/v1/{name}", "/v1/%F0%9F%98%80", {"name": "😀"}),
        ("/v1/{name}", "/v1/a+b", {"name": "a+b"}),  # "+" is not a space in a path
        ("/v1/{name}", "/v1/%25", {"name": "%"}),
        ("/v1/{name}", "/v1/a:b", {"name": "a:b"}),  # no verb in the template: ":" is data
        ("/v1/{name}", "/v1/é", {"name": "é"}),  # not ASCII: taken as is
        ("/v1/{name}", "/v1/a/b", None),
        ("/v1/{name}", "/v1/", None),
        ("/v1/{name}", "/v1", None),
        ("/v1/{name}", "/v1/%zz", None),  # malformed escapes match nothing
        ("/v1/{name}", "/v1/%", None),
        ("/v1/{name}", "/v1/a%2", None),
        ("/v1/{name}", "/v1/%FF", None),  # not UTF-8
        ("/v1/{name}", "/v1/%C3", None),  # truncated UTF-8
        ("/v1/{name}", "/v1/%C3x%A9", None),
        # Multi-segment variables keep "%2F" / "%2f" as sent and decode everything else.
        (BOOKS, "/v1/shelves/a%2Fb/books/c", {"name": "shelves/a%2Fb/books/c"}),
        (BOOKS, "/v1/shelves/a%2fb/books/c", {"name": "shelves/a%2fb/books/c"}),
        (BOOKS, "/v1/shelves/a%20b/books/c%3Ad", {"name": "shelves/a b/books/c:d"}),
        (BOOKS, "/v1/shelves/caf%C3%A9/books/1", {"name": "shelves/café/books/1"}),
        (BOOKS, "/v1/shelves/%25/books/1", {"name": "shelves/%/books/1"}),
        (BOOKS, "/v1/%73helves/1/books/2", {"name": "shelves/1/books/2"}),
        (BOOKS, "/v1/shelves/a%2Fb%zz/books/c", None),
        (BOOKS, "/v1/shelves/a/b/books/c", None),
        (BOOKS, "/v1/shelves/1/novels/2", None),
        # "**" matches zero or more segments (http.proto).
        ("/v1/{name=**}", "/v1/a/b%2Fc/d", {"name": "a/b%2Fc/d"}),
        ("/v1/{name=**}", "/v1/a", {"name": "a"}),
        ("/v1/{name=**}", "/v1", {"name": ""}),
        ("/v1/{name=**}", "/v1/", None),
        ("/v1/{name=**}", "/v1/a//b", None),
        ("/v1/{name=shelves/**}:list", "/v1/shelves:list", {"name": "shelves"}),
        ("/v1/{name=shelves/**}:list", "/v1/shelves/a/b:list", {"name": "shelves/a/b"}),
        ("/v1/{name=shelves/**}:list", "/v1/shelves/a/b", None),
        ("/v1/{name=shelves/**}:list", "/v1/books:list", None),
        ("/v1/*/x/**", "/v1/a/x", {}),
        ("/v1/*/x/**", "/v1/a/x/b/c", {}),
        ("/v1/*/x/**", "/v1/x", None),
        # Several variables, a single literal variable, verbs containing ":".
        ("/v1/{a}/b/{c.d=e/*}:get", "/v1/1/b/e/2:get", {"a": "1", "c.d": "e/2"}),
        ("/v1/{a}/b/{c.d=e/*}:get", "/v1/1/b/f/2:get", None),
        ("/v1/{x=me}", "/v1/me", {"x": "me"}),
        ("/v1/{x=me}", "/v1/m%65", {"x": "me"}),
        ("/v1/{x=me}", "/v1/you", None),
        ("/v1/{x}:a:b", "/v1/q:a:b", {"x": "q"}),
        ("/v1/{x}:a:b", "/v1/q:z:a:b", {"x": "q:z"}),
        ("/v1/{x}:a:b", "/v1/q:b", None),
        ("/v1/{x}:do", "/v1/a%2Fb:do", {"x": "a/b"}),
        ("/v1/{x}:do", "/v1:do", None),
    ],
)
def test_match(template: str, raw_path: str, expected: dict[str, str] | None) -> None:
    assert parse_template(template).match(raw_path) == expected


# --- expanding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "values", "path"),
    [
        (LIST, {"parent": APP}, f"/v1beta/{APP}/evaluations"),
        (UPDATE, {"evaluation.name": EVALUATION}, f"/v1beta/{EVALUATION}"),
        (EXPORT_RESULTS, {"parent": EVALUATION}, f"/v1beta/{EVALUATION}/results:export"),
        (RESET, {"name": "projects/p"}, "/emulator/v1/projects/p:reset"),
        (
            LIST,
            {"parent": "projects/a b/locations/é/apps/x:y"},
            "/v1beta/projects/a%20b/locations/%C3%A9/apps/x%3Ay/evaluations",
        ),
        ("/v1/{name}", {"name": "a/b c:é~._-"}, "/v1/a%2Fb%20c%3A%C3%A9~._-"),
        ("/v1/{name=shelves/*}", {"name": "shelves/%2F"}, "/v1/shelves/%252F"),
        ("/v1/{name=**}:run", {"name": ""}, "/v1:run"),
        ("/v1/{name=**}:run", {"name": "a/b"}, "/v1/a/b:run"),
        ("/v1/{name=shelves/**}", {"name": "shelves"}, "/v1/shelves"),
        ("/v1/{x=me}", {"x": "me"}, "/v1/me"),
        ("/v1/{x=m%65}", {"x": "me"}, "/v1/m%65"),
        ("/v1/{a}/b/{c.d=e/*}:get", {"a": "1", "c.d": "e/2"}, "/v1/1/b/e/2:get"),
    ],
)
def test_expand(template: str, values: dict[str, str], path: str) -> None:
    parsed = parse_template(template)
    assert parsed.expand(values) == path
    assert parsed.match(path) == values


@pytest.mark.parametrize(
    ("template", "values", "error", "message"),
    [
        (LIST, {}, KeyError, "no value for {parent}"),
        (LIST, {"parent": APP, "name": "x"}, ValueError, "no variable named name"),
        (LIST, {"parent": "projects/p"}, ValueError, "wrong number of segments"),
        (LIST, {"parent": APP + "/x"}, ValueError, "wrong number of segments"),
        (LIST, {"parent": "folders/p/locations/us/apps/a"}, ValueError, "segment 1 must be"),
        (LIST, {"parent": "projects//locations/us/apps/a"}, ValueError, "cannot be empty"),
        ("/v1/{name}", {"name": ""}, ValueError, "cannot be empty"),
        ("/v1/{x=me}", {"x": "you"}, ValueError, "expected 'me'"),
        ("/v1/{name=shelves/**}", {"name": "books/x"}, ValueError, "segment 1 must be"),
        ("/v1/{name=shelves/**}", {"name": ""}, ValueError, "wrong number of segments"),
        ("/v1/{name=shelves/**}", {"name": "shelves/"}, ValueError, "cannot be empty"),
        ("/v1/*/{x}", {"x": "a"}, ValueError, "wildcard '*' outside any variable"),
        ("/v1/{x}/**", {"x": "a"}, ValueError, "wildcard '**' outside any variable"),
    ],
)
def test_expand_rejects_values_that_do_not_fit(
    template: str, values: dict[str, str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        parse_template(template).expand(values)


# --- properties -------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\{([^=}]+)(?:=([^}]*))?\}")


def _shapes(template: str) -> dict[str, str]:
    """``{field_path: sub-template}`` of a template's variables, ``*`` when it has none."""
    return {m.group(1): m.group(2) or "*" for m in _VARIABLE.finditer(template)}


# Any text but "/" (the separator) and lone surrogates (not encodable): "%", ":", spaces,
# controls and any plane of Unicode included, so values need every kind of escaping.
_ID = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/"), min_size=1)


@st.composite
def _values(draw: st.DrawFn, template: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for path, shape in _shapes(template).items():
        parts: list[str] = []
        for piece in shape.split("/"):
            if piece == "**":
                parts += draw(st.lists(_ID, max_size=3))
            elif piece == "*":
                parts.append(draw(_ID))
            else:
                parts.append(piece)
        values[path] = "/".join(parts)
    return values


_SINGLE = "/v1/{name}"
_MIXED = "/v1/{a}/x/{b.c=y/*/**}:do"
_SAFE_PATH = re.compile(r"[A-Za-z0-9\-._~%/:]*")


@pytest.mark.parametrize("template", [*REAL_TEMPLATES, _MIXED])
@given(data=st.data())
def test_expand_then_match_round_trips(template: str, data: st.DataObject) -> None:
    parsed = parse_template(template)
    values = data.draw(_values(template))
    path = parsed.expand(values)
    assert _SAFE_PATH.fullmatch(path), path  # http.proto: all but [-_.~/0-9a-zA-Z] encoded
    assert parsed.match(path) == values


@given(value=st.text(st.characters(exclude_categories=("Cs",)), min_size=1))
def test_single_segment_values_round_trip_with_slashes(value: str) -> None:
    parsed = parse_template(_SINGLE)
    path = parsed.expand({"name": value})
    assert path.count("/") == 2
    assert parsed.match(path) == {"name": value}


_PATH_PIECES = st.sampled_from(
    [
        "/",
        "/",
        "%",
        "%2F",
        "%2f",
        "%C3",
        "%A9",
        "%zz",
        ":",
        ":export",
        ":reset",
        "*",
        "{",
        "é",
        "v1beta",
        "projects",
        "p",
        "locations",
        "apps",
        "evaluations",
        "results",
        "emulator",
        "v1",
    ]
)


@pytest.mark.parametrize(
    "template", [*REAL_TEMPLATES, _SINGLE, _MIXED, "/v1/{name=**}", "/v1/*/x/**", "/v1/{x}:a:b"]
)
@given(raw=st.one_of(st.text(), st.lists(_PATH_PIECES, max_size=20).map("".join)))
def test_match_never_raises(template: str, raw: str) -> None:
    parsed: PathTemplate = parse_template(template)
    for candidate in (raw, "/" + raw):
        result = parsed.match(candidate)
        assert result is None or set(result) == set(parsed.variables)


def _escape_one(raw: str, at: int) -> str:
    """``raw`` with its unreserved character ``at`` percent-encoded (same meaning)."""
    return raw[:at] + f"%{ord(raw[at]):02X}" + raw[at + 1 :]


# A path each template matches: the property tests below change them.
_EXAMPLES = [
    (LIST, f"/v1beta/{APP}/evaluations"),
    (UPDATE, f"/v1beta/{EVALUATION}"),
    (EXPORT_RESULTS, f"/v1beta/{EVALUATION}/results:export"),
    (RUN_METRICS, f"/v1beta/{EVALUATION}/results/r:runEvaluationResultMetrics"),
    (RESET, "/emulator/v1/projects/p:reset"),
    ("/v1/{name=**}", "/v1/a/b/c"),
    ("/v1/*/x/**", "/v1/a/x"),
    ("/v1/*/x/**", "/v1/a/x/b/c"),
    (BOOKS, "/v1/shelves/s/books/b"),
]


_WORDS = st.sampled_from(
    ["x", "", "v1", "v1beta", "projects", "apps", "evaluations", "results", "a:b", "p:reset"]
)


@pytest.mark.parametrize(("template", "path"), _EXAMPLES)
@given(data=st.data())
def test_a_path_without_escapes_matches_as_its_escaped_twin(
    template: str, path: str, data: st.DataObject
) -> None:
    """A path holding no ``%`` takes a shorter way through match; escaping one of its letters
    (which changes nothing it means) must give the same answer, for the template's own path
    with any segment changed, dropped or repeated."""
    parsed = parse_template(template)
    segments = path[1:].split("/")
    at = data.draw(st.integers(0, len(segments) - 1))
    change = data.draw(st.sampled_from(["replace", "drop", "repeat"]))
    if change == "replace":
        segments[at] = data.draw(_WORDS)
    elif change == "drop":
        del segments[at]
    else:
        segments.insert(at, segments[at])
    raw = "/" + "/".join(segments)
    letters = [i for i, c in enumerate(raw) if c.isascii() and c.isalpha()]
    twin = _escape_one(raw, data.draw(st.sampled_from(letters)))
    assert parsed.match(raw) == parsed.match(twin)


@pytest.mark.parametrize(("template", "path"), _EXAMPLES)
def test_fits_refuses_only_paths_that_do_not_match(template: str, path: str) -> None:
    """The router's quick refusal: never False for a path that matches (escaped or not),
    whose segment count is one the template's counts admit."""
    parsed = parse_template(template)
    fixed, more = parsed.counts
    for candidate in (path, _escape_one(path, 1), _escape_one(path, len(path) - 1)):
        assert parsed.match(candidate) is not None, candidate
        segments = candidate[1:].split("/")
        assert len(segments) >= fixed if more else len(segments) == fixed
        assert parsed.fits(segments)
    wrong = parse_template("/v1/shelves/{s}/books")
    assert not wrong.fits(["v1", "desks", "s", "books"])
    assert wrong.fits(["v1", "%73helves", "s", "books"])  # an escape: match decides
