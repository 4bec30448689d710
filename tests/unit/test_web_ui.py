"""The web view's chart: an SVG drawn on the server by pygal, with no script and nothing fetched
from elsewhere (the page works offline), and pygal's legacy import hook gone once it is loaded
(Python 3.11 would warn on every later import)."""

from __future__ import annotations

import re
import sys

from ces_eval.surfaces import web_ui


def test_the_pass_rate_chart_is_a_plain_svg() -> None:
    svg = web_ui._pass_rate_chart([("run-1", 0.5), ("run-2", 1.0)])
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "<script" not in svg
    assert not re.search(r"""(href|src)=["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""", svg)
    assert "run-1" in svg and "Pass rate over runs" in svg
    assert web_ui._pass_rate_chart([]) == ""


def test_no_finder_without_find_spec_is_left_behind() -> None:
    web_ui._pass_rate_chart([("run", 1.0)])
    assert all(hasattr(finder, "find_spec") for finder in sys.meta_path)
