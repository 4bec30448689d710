"""HttpRule path templates: parse once, then match raw request paths and expand values back.

The syntax is the one of google/api/http.proto ("Path template syntax"), which AIP-127 builds on::

    Template = "/" Segments [ Verb ] ;
    Segments = Segment { "/" Segment } ;
    Segment  = "*" | "**" | LITERAL | Variable ;
    Variable = "{" FieldPath [ "=" Segments ] "}" ;
    FieldPath = IDENT { "." IDENT } ;
    Verb     = ":" LITERAL ;

``parse_template`` checks a template and compiles it into a list of segment matchers, so matching a
request costs one ``split`` and one pass over the segments. The rules, each one from http.proto
unless marked as our decision:

* ``*`` matches exactly one path segment; ``**`` matches zero or more segments and must be the last
  segment of the template (only the verb may follow). http.proto says "zero or more": a template
  ``/v1/{name=shelves/**}`` therefore matches ``/v1/shelves`` with ``name="shelves"``, as in
  grpc-gateway. At most one ``**`` can exist, since it must be last.
* ``{var}`` is ``{var=*}``. A variable must not contain another variable. Decision: the same field
  path may be bound once only, and no bound field path may lie inside another (``{a}/{a.b}``),
  because the second binding would silently overwrite part of the first.
* LITERAL is a run of RFC 3986 ``pchar`` (unreserved, percent-encoded, sub-delims, ``@``) except
  ``*`` (kept for the wildcards) and ``:`` (which starts the verb). Literals compare against the
  *decoded* request segment, so ``%76%31`` matches the literal ``v1``.
* Percent-decoding (http.proto, HttpRule "Path template syntax"): a variable that covers exactly one
  segment (``{var}``, ``{var=*}``) is fully decoded, so ``%2F`` becomes ``/``. A variable that
  covers several segments (``{var=projects/*}``, ``{var=**}``) is decoded except ``%2F`` / ``%2f``,
  which stay as sent: that is "reserved expansion" (``{+var}`` in RFC 6570), where an encoded
  slash is data and a raw slash separates segments. Decision: other reserved characters are
  decoded in multi-segment variables too (http.proto's HttpRule text; google.api.Http's
  ``fully_decode_reserved_expansion`` knob, which would keep them encoded, is not modelled).
* Decision: a segment with a malformed escape (``%zz``, a lone ``%``) or bytes that are not UTF-8
  (``%FF``) matches nothing, so such a path is "not found" instead of a guess at its meaning. Empty
  segments (``//``, a trailing ``/``) never match either: no resource ID is empty.
* The verb. A template with a verb ``:v`` matches only when the raw last segment ends with a raw
  ``:`` followed by ``v``; the verb is the text after the rightmost raw ``:`` whose decoded suffix
  equals ``v``, so a ``%3A`` (encoded colon) never starts a verb. A template *without* a verb keeps
  any ``:`` as part of the last segment, so ``/v1/{name=*}`` matches ``/v1/a:b`` with
  ``name="a:b"``. That is the current grpc-gateway behaviour (a suffix after the last colon is only
  a verb for patterns that declare one) and follows the grammar, where a verb belongs to the
  template. A router that wants ``GET /v1/x:unknownVerb`` to be 404/405 rather than a lookup of
  the resource ``x:unknownVerb`` can check the suffix against its own set of verbs, as Envoy's
  transcoder does; AIP-122 resource IDs never contain ``:``, so the lookup is a NOT_FOUND anyway.

``expand`` is the reverse (what a client does): literals as written, single-segment values with
every character except ``[-_.~0-9A-Za-z]`` percent-encoded (including ``/``), multi-segment values
encoded segment by segment with ``/`` kept as the separator. ``match(expand(v)) == v`` for every
``v`` that fits the template.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import NoReturn
from urllib.parse import quote

__all__ = ["PathTemplate", "TemplateError", "parse_template"]


class TemplateError(ValueError):
    """A path template that does not follow the http.proto grammar; ``str(e)`` names both."""

    def __init__(self, template: str, reason: str) -> None:
        super().__init__(f"invalid path template {template!r}: {reason}")
        self.template = template
        self.reason = reason


class _Kind(enum.Enum):
    LITERAL = "literal"
    STAR = "*"
    DOUBLE_STAR = "**"


@dataclass(frozen=True, slots=True)
class _Segment:
    kind: _Kind
    raw: str = ""
    """The literal as written in the template (emitted by ``expand``)."""
    decoded: str = ""
    """The literal fully percent-decoded (compared with the decoded request segment)."""
    reserved: str = ""
    """The literal decoded except ``%2F``: its text inside a multi-segment variable's value."""


@dataclass(frozen=True, slots=True)
class _Variable:
    field_path: str
    start: int
    end: int
    """Indices into the template's segments, ``end`` exclusive."""
    multi: bool
    """Covers more than one segment (or ``**``): reserved expansion, ``%2F`` kept."""


_PCT_ESCAPE = r"%[0-9A-Fa-f]{2}"
# RFC 3986 pchar without "*" (wildcards) and ":" (verb separator); see the module docstring.
_LITERAL = re.compile(rf"(?:[A-Za-z0-9\-._~!$&'()+,;=@]|{_PCT_ESCAPE})+")
# A verb is the rest of the template, so it may contain ":" (http.proto: Verb = ":" LITERAL).
_VERB = re.compile(rf"(?:[A-Za-z0-9\-._~!$&'()+,;=@:]|{_PCT_ESCAPE})+")
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ESCAPE_RUN = re.compile(rf"(?:{_PCT_ESCAPE})+")
_ENCODED_SLASH = re.compile(r"(%2[Ff])")


def _decode(raw: str) -> str | None:
    """Percent-decode ``raw`` as UTF-8; ``None`` if an escape is malformed or not UTF-8."""
    if "%" not in raw:
        return raw
    if _BAD_ESCAPE.search(raw):
        return None
    try:
        return _ESCAPE_RUN.sub(
            lambda run: bytes.fromhex(run.group().replace("%", "")).decode("utf-8"), raw
        )
    except UnicodeDecodeError:
        return None


def _decode_reserved(raw: str) -> str | None:
    """Decode like ``_decode`` but leave ``%2F`` / ``%2f`` as sent (reserved expansion)."""
    if "%" not in raw:
        return raw
    pieces = _ENCODED_SLASH.split(raw)
    out: list[str] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            out.append(piece)
            continue
        decoded = _decode(piece)
        if decoded is None:
            return None
        out.append(decoded)
    return "".join(out)


def _encode(value: str) -> str:
    """Percent-encode all but ``[-_.~0-9A-Za-z]`` (UTF-8), as http.proto asks of clients."""
    return quote(value, safe="")


@dataclass(frozen=True)
class PathTemplate:
    """A compiled HttpRule path template. Build it with ``parse_template``.

    ``source`` is the template text, ``verb`` its custom verb without the ``:`` (``None`` when it
    has none), ``variables`` the bound field paths in the order they appear.
    """

    source: str
    verb: str | None
    variables: tuple[str, ...]
    _segments: tuple[_Segment, ...] = field(repr=False, compare=False)
    _bindings: tuple[_Variable, ...] = field(repr=False, compare=False)
    _verb_decoded: str | None = field(repr=False, compare=False)
    # The index and decoded text of each literal segment, in order (for fits).
    _literals: tuple[tuple[int, str], ...] = field(default=(), repr=False, compare=False)

    def match(self, raw_path: str) -> dict[str, str] | None:
        """Match a raw (still percent-encoded) URL path, without its query string.

        Returns ``{field_path: value}`` with values decoded as the module docstring describes,
        or ``None`` when the path does not match. Never raises for any string.
        """
        raw_segments = self._split(raw_path)
        if raw_segments is None:
            return None
        if "%" not in raw_path:
            return self._match_plain(raw_segments)
        decoded: list[str] = []
        for raw, segment in zip(raw_segments, self._pattern(len(raw_segments)), strict=True):
            text = _decode(raw) if raw else None
            if text is None or (segment.kind is _Kind.LITERAL and segment.decoded != text):
                return None
            decoded.append(text)
        values: dict[str, str] = {}
        for variable in self._bindings:
            if not variable.multi:
                values[variable.field_path] = decoded[variable.start]
                continue
            end = len(raw_segments) if variable.end == len(self._segments) else variable.end
            parts = [_decode_reserved(raw) for raw in raw_segments[variable.start : end]]
            # Cannot be None once _decode succeeded: 0x2F is never inside a UTF-8 sequence.
            values[variable.field_path] = "/".join(part or "" for part in parts)
        return values

    def _match_plain(self, raw_segments: list[str]) -> dict[str, str] | None:
        """:meth:`match` of a path without escapes: each segment is its own decoding."""
        if "" in raw_segments:
            return None
        for index, literal in self._literals:
            if raw_segments[index] != literal:
                return None
        count = len(raw_segments)
        values: dict[str, str] = {}
        for variable in self._bindings:
            if not variable.multi:
                values[variable.field_path] = raw_segments[variable.start]
                continue
            end = count if variable.end == len(self._segments) else variable.end
            values[variable.field_path] = "/".join(raw_segments[variable.start : end])
        return values

    @property
    def counts(self) -> tuple[int, bool]:
        """How many segments a matching path has (its verb on the last), and whether it may
        have more (a template ending in ``**``: then that many or more, the ``**`` matching
        none)."""
        fixed = len(self._segments)
        if self._segments[-1].kind is _Kind.DOUBLE_STAR:
            return fixed - 1, True
        return fixed, False

    def fits(self, raw_segments: Sequence[str]) -> bool:
        """A quick refusal before :meth:`match`: False when a literal segment of the template
        (before the last, which may carry the verb) differs from the request's raw segment
        there and that holds no escape; the segment count is the caller's (:attr:`counts`)."""
        for index, literal in self._literals:
            if index >= len(raw_segments) - 1:
                break
            raw = raw_segments[index]
            if raw != literal and "%" not in raw:
                return False
        return True

    def _split(self, raw_path: str) -> list[str] | None:
        """The raw segments of ``raw_path`` without the verb; ``None`` if their count can't fit."""
        if not raw_path.startswith("/"):
            return None
        body: str | None = raw_path[1:]
        if self.verb is not None:
            body = self._strip_verb(raw_path[1:])
        if body is None:
            return None
        raw_segments = body.split("/") if body else []
        fixed = len(self._segments)
        if self._segments[-1].kind is _Kind.DOUBLE_STAR:
            return raw_segments if len(raw_segments) >= fixed - 1 else None
        return raw_segments if len(raw_segments) == fixed else None

    def _pattern(self, count: int) -> tuple[_Segment, ...]:
        """The template's segments for a path of ``count`` segments (``**`` repeated or dropped)."""
        segments = self._segments
        if segments[-1].kind is not _Kind.DOUBLE_STAR:
            return segments
        return segments[:-1] + (segments[-1],) * (count - len(segments) + 1)

    def _strip_verb(self, body: str) -> str | None:
        """``body`` without its ``:verb`` suffix, or ``None`` when it does not end in the verb."""
        last_slash = body.rfind("/")
        colon = len(body)
        while (colon := body.rfind(":", last_slash + 1, colon)) != -1:
            if _decode(body[colon + 1 :]) == self._verb_decoded:
                return body[:colon]
        return None

    def layout(self) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
        """The template's segments as written, in order and grouped: ``(None, (literal,))`` or
        ``(None, ("*",))`` for a segment outside every variable, ``(field_path, segments)`` for
        a variable (``{var}`` is ``("var", ("*",))``); the verb is :attr:`verb`. What a document
        of the template (OpenAPI's path) is built from, without parsing the text again."""
        starts = {variable.start: variable for variable in self._bindings}
        groups: list[tuple[str | None, tuple[str, ...]]] = []
        index = 0
        while index < len(self._segments):
            variable = starts.get(index)
            end = index + 1 if variable is None else variable.end
            texts = tuple(
                segment.raw if segment.kind is _Kind.LITERAL else segment.kind.value
                for segment in self._segments[index:end]
            )
            groups.append((None if variable is None else variable.field_path, texts))
            index = end
        return tuple(groups)

    def expand(self, values: Mapping[str, str]) -> str:
        """Build the raw URL path for ``values`` (``{field_path: value}``), as a client would.

        Raises ``KeyError`` for a variable without a value, ``ValueError`` for a value that does
        not fit its variable's sub-template (an empty segment, the wrong number of segments, a
        literal that differs), for a key that is not a variable, or when the template has a
        wildcard outside any variable (its text cannot be known).
        """
        unknown = sorted(set(values) - set(self.variables))
        if unknown:
            raise ValueError(f"{self.source}: no variable named {', '.join(unknown)}")
        starts = {variable.start: variable for variable in self._bindings}
        out: list[str] = []
        index = 0
        while index < len(self._segments):
            variable = starts.get(index)
            if variable is None:
                segment = self._segments[index]
                if segment.kind is not _Kind.LITERAL:
                    raise ValueError(
                        f"{self.source}: wildcard {segment.kind.value!r} outside any variable "
                        "cannot be expanded"
                    )
                out.append(segment.raw)
                index += 1
                continue
            if variable.field_path not in values:
                raise KeyError(f"{self.source}: no value for {{{variable.field_path}}}")
            out.extend(self._expand_variable(variable, values[variable.field_path]))
            index = variable.end
        path = "/" + "/".join(out)
        return path if self.verb is None else f"{path}:{self.verb}"

    def _expand_variable(self, variable: _Variable, value: str) -> list[str]:
        sub = self._segments[variable.start : variable.end]
        where = f"{self.source}: {{{variable.field_path}}} = {value!r}"
        if not variable.multi:
            segment = sub[0]
            if not value:
                raise ValueError(f"{where}: a path segment cannot be empty")
            if segment.kind is _Kind.LITERAL:
                if value != segment.decoded:
                    raise ValueError(f"{where}: expected {segment.decoded!r}")
                return [segment.raw]
            return [_encode(value)]
        double_star = sub[-1].kind is _Kind.DOUBLE_STAR
        parts = value.split("/") if value or not double_star else []
        fixed = sub[:-1] if double_star else sub
        if len(parts) < len(fixed) or (not double_star and len(parts) != len(fixed)):
            shape = "/".join(s.raw or s.kind.value for s in sub)
            raise ValueError(f"{where}: does not fit {shape!r} (wrong number of segments)")
        out: list[str] = []
        for position, part in enumerate(parts):
            if not part:
                raise ValueError(f"{where}: a path segment cannot be empty")
            segment = fixed[position] if position < len(fixed) else sub[-1]
            if segment.kind is _Kind.LITERAL:
                if part != segment.reserved:
                    raise ValueError(f"{where}: segment {position + 1} must be {segment.raw!r}")
                out.append(segment.raw)
            else:
                out.append(_encode(part))
        return out


@cache
def parse_template(template: str) -> PathTemplate:
    """Parse and compile an HttpRule path template; ``TemplateError`` says what is wrong. Parsed
    once per template text (a PathTemplate is immutable): the router, the OpenAPI document,
    authorization and the request log share each binding's parse."""
    return _Parser(template).parse()


class _Parser:
    """Recursive descent over the template text, one character index at a time."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.pos = 0
        self.segments: list[_Segment] = []
        self.bindings: list[_Variable] = []

    def fail(self, reason: str) -> NoReturn:
        raise TemplateError(self.source, reason)

    def peek(self) -> str:
        return self.source[self.pos] if self.pos < len(self.source) else ""

    def parse(self) -> PathTemplate:
        if not self.source.startswith("/"):
            self.fail("a template must start with '/'")
        self.pos = 1
        verb: str | None = None
        while True:
            self.segment()
            char = self.peek()
            if char == "/":
                self.pos += 1
                continue
            if char == ":":
                verb = self.source[self.pos + 1 :]
                if not verb:
                    self.fail("the verb after ':' is empty")
                if "/" in verb:
                    self.fail("':' may only start the verb, after the last segment")
                if not _VERB.fullmatch(verb) or _decode(verb) is None:
                    self.fail(f"invalid verb {verb!r}: {self.why_not_literal(verb, _VERB)}")
                break
            break  # the end: segment() stops only before "/", ":" or the end
        self.check()
        return PathTemplate(
            source=self.source,
            verb=verb,
            variables=tuple(variable.field_path for variable in self.bindings),
            _segments=tuple(self.segments),
            _bindings=tuple(self.bindings),
            _verb_decoded=None if verb is None else _decode(verb),
            _literals=tuple(
                (index, segment.decoded)
                for index, segment in enumerate(self.segments)
                if segment.kind is _Kind.LITERAL
            ),
        )

    def segment(self) -> None:
        """One top-level segment: a variable, a wildcard or a literal."""
        if self.peek() == "{":
            self.variable()
        else:
            self.segments.append(self.plain(stop="/:{}", in_variable=False))

    def plain(self, *, stop: str, in_variable: bool) -> _Segment:
        """A wildcard or literal segment, ending before a character of ``stop`` or the end."""
        start = self.pos
        while self.pos < len(self.source) and self.source[self.pos] not in stop:
            self.pos += 1
        text = self.source[start : self.pos]
        char = self.peek()
        if char == "{":
            if in_variable:
                self.fail(f"a variable must not contain another variable (offset {self.pos})")
            if text:
                self.fail(f"a variable must be a whole segment (offset {self.pos})")
        if char == "}" and not in_variable:
            self.fail(f"unbalanced braces: '}}' at offset {self.pos} has no matching '{{'")
        if not text:
            self.fail(f"empty segment at offset {start}")
        if text in ("*", "**"):
            return _Segment(_Kind.STAR if text == "*" else _Kind.DOUBLE_STAR)
        if not _LITERAL.fullmatch(text):
            self.fail(f"invalid literal {text!r}: {self.why_not_literal(text, _LITERAL)}")
        decoded = _decode(text)
        reserved = _decode_reserved(text)
        if decoded is None or reserved is None:
            self.fail(f"literal {text!r} does not decode to UTF-8 text")
        return _Segment(_Kind.LITERAL, raw=text, decoded=decoded, reserved=reserved)

    def variable(self) -> None:
        """``{field.path}`` or ``{field.path=Segments}`` at ``self.pos`` (on the ``{``)."""
        opening = self.pos
        self.pos += 1
        start = self.pos
        while self.pos < len(self.source) and self.source[self.pos] not in "={}":
            self.pos += 1
        field_path = self.source[start : self.pos]
        char = self.peek()
        if char == "":
            self.fail(f"unbalanced braces: '{{' at offset {opening} has no matching '}}'")
        if char == "{":
            self.fail(f"a variable must not contain another variable (offset {self.pos})")
        if not _FIELD_PATH.fullmatch(field_path):
            self.fail(
                f"invalid field path {field_path!r} (expected identifiers joined by '.', "
                "e.g. 'evaluation.name')"
            )
        first = len(self.segments)
        if char == "}":
            self.segments.append(_Segment(_Kind.STAR))
        else:
            self.pos += 1
            while True:
                self.segments.append(self.plain(stop="/{}", in_variable=True))
                char = self.peek()
                if char == "/":
                    self.pos += 1
                    continue
                if char == "":
                    self.fail(f"unbalanced braces: '{{' at offset {opening} has no matching '}}'")
                break
        self.pos += 1
        count = len(self.segments) - first
        multi = count > 1 or self.segments[-1].kind is _Kind.DOUBLE_STAR
        self.bindings.append(_Variable(field_path, first, len(self.segments), multi))
        after = self.peek()
        if after == "}":
            self.fail(f"unbalanced braces: '}}' at offset {self.pos} has no matching '{{'")
        if after not in ("", "/", ":"):
            self.fail(f"a variable must be a whole segment (offset {self.pos})")

    def check(self) -> None:
        """Whole-template rules: where ``**`` may stand, and distinct field paths."""
        for index, segment in enumerate(self.segments):
            if segment.kind is _Kind.DOUBLE_STAR and index != len(self.segments) - 1:
                self.fail("'**' must be the last segment (only the verb may follow it)")
        seen: list[str] = []
        for variable in self.bindings:
            path = variable.field_path
            for other in seen:
                if other == path:
                    self.fail(f"field path {path!r} is bound twice")
                if path.startswith(other + ".") or other.startswith(path + "."):
                    self.fail(f"field paths {other!r} and {path!r} overlap")
            seen.append(path)

    @staticmethod
    def why_not_literal(text: str, pattern: re.Pattern[str]) -> str:
        """Name the first character of ``text`` that ``pattern`` does not accept."""
        bad = _BAD_ESCAPE.search(text)
        if bad:
            return f"malformed percent-encoding at {text[bad.start() : bad.start() + 3]!r}"
        if _decode(text) is None:
            return "its percent-encoded bytes are not UTF-8"
        for char in text:
            if not pattern.fullmatch(char):
                if char == "*":
                    return "'*' is a wildcard only as a whole segment"
                return f"character {char!r} is not allowed (percent-encode it)"
        return "not a literal"  # pragma: no cover - every rejected text has a bad character
