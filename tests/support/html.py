"""HTML as the tests read it: parsed with the standard library's parser into a small tree, so
that a test asks for elements by tag and class and reads their text and attributes (what a
browser would show), instead of matching markup with patterns."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Element", "parse"]

# Elements that never hold others (HTML's void elements).
_VOID = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()  # noqa: SIM905
)


@dataclass
class Element:
    """One element: its tag, attributes, children and text (its own and its children's)."""

    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text inside, as the page holds it (entities decoded)."""
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self) -> list[Element]:
        """This element and every element inside it, in document order."""
        found = [self]
        for child in self.children:
            if isinstance(child, Element):
                found += child.iter()
        return found

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Element]:
        """The elements inside (this one included) of ``tag`` and holding the class ``cls``."""
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
        ]

    def find(self, tag: str | None = None, cls: str | None = None) -> Element:
        """The first of :meth:`find_all`; AssertionError when there is none."""
        found = self.find_all(tag, cls)
        assert found, f"no <{tag or '*'} class={cls!r}>"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.open[-1].children.append(element)
        if tag not in _VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(markup: str) -> Element:
    """``markup`` (a document or a fragment) as a tree under a ``#document`` element."""
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    return builder.root
