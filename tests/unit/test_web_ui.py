"""The web view's chart: an SVG drawn on the server by pygal, with no script and nothing fetched
from elsewhere (the page works offline), and pygal's legacy import hook gone once it is loaded
(Python 3.11 would warn on every later import). A result's pages: only the fields a page shows
are parsed, each page holds OUTCOMES_PER_PAGE entries, long blocks are cut."""

from __future__ import annotations

import base64
import datetime
import re
import sys
from typing import Any

import pytest

from ces_eval.errors import ServiceError
from ces_eval.generated.google.cloud.ces.v1beta import evaluation_pb2
from ces_eval.surfaces import web_ui


def test_the_pass_rate_chart_is_a_plain_svg_over_days() -> None:
    days = [datetime.date(2026, 12, 1), datetime.date(2026, 12, 2), datetime.date(2026, 12, 7)]
    svg = web_ui._pass_rate_chart([(day, 0.5) for day in days], "Pass rate by day (%)")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "<script" not in svg
    assert not re.search(r"""(href|src)=["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""", svg)
    assert all(day.isoformat() in svg for day in days) and "Pass rate by day" in svg
    # The axis is time: five days lie between the last two dots, one between the first two.
    dots = [float(x) for x in re.findall(r'<circle cx="([0-9.]+)"', svg)]
    assert len(dots) == 3
    assert dots[2] - dots[1] == pytest.approx(5 * (dots[1] - dots[0]))
    one = web_ui._pass_rate_chart([(days[2], 0.25)], "t")
    assert "2026-12-06" in one and "2026-12-08" in one  # a lone day stands between two
    assert web_ui._pass_rate_chart([], "t") == ""


def test_a_chart_sums_by_day_errors_counting_against() -> None:
    day = datetime.date(2026, 12, 7)
    encoded = web_ui._chart([(day, 1, 2), (day, 0, 2), (day + datetime.timedelta(1), 3, 3)], "t")
    values = re.findall(r'<desc class="value">([^<]*)</desc>', base64.b64decode(encoded).decode())
    assert values == ["2026-12-07: 25", "2026-12-08: 100"]  # 1 of 4, then 3 of 3
    assert web_ui._chart([(day, 0, 0)], "t") == ""


def test_no_finder_without_find_spec_is_left_behind() -> None:
    web_ui._pass_rate_chart([(datetime.date(2026, 12, 7), 1.0)], "t")
    assert all(hasattr(finder, "find_spec") for finder in sys.meta_path)


def _result() -> Any:
    result = evaluation_pb2.EvaluationResult(
        name="projects/p/locations/l/apps/a/evaluations/e/results/r",
        display_name="R",
        evaluation_status=evaluation_pb2.EvaluationResult.Outcome.FAIL,
    )
    for turn in range(3):
        replay = result.golden_result.turn_replay_results.add()
        for index in range(turn * 40):  # 0, 40 and 80 outcomes
            outcome = replay.expectation_outcome.add()
            outcome.expectation.note = f"turn {turn} outcome {index} " + "x" * (index * 100)
    return result


def test_a_slim_encoding_parses_as_the_message_with_only_those_fields() -> None:
    result = _result()
    slim = evaluation_pb2.EvaluationResult.FromString(
        web_ui._slim(result.SerializeToString(), web_ui._RESULT_ROW)
    )
    expected = evaluation_pb2.EvaluationResult()
    expected.CopyFrom(result)
    expected.ClearField("golden_result")
    assert slim == expected


def test_a_result_page_holds_its_share_of_outcomes_each_cut() -> None:
    data = _result().SerializeToString()
    first = web_ui._result_page(data, 1)
    # 1 entry for the empty turn, then 40 and 80 outcomes: 121 entries, 3 pages of 50.
    assert (first["pages"], first["total"], first["shown"]) == (3, 121, (1, 50))
    assert [(t["index"], t["first"], t["last"], t["count"]) for t in first["turns"]] == [
        (1, 1, 1, 0),  # the turn without outcomes: its placeholder (count 0)
        (2, 1, 40, 40),
        (3, 1, 9, 80),
    ]
    last = web_ui._result_page(data, 3)
    assert [(t["index"], t["first"], t["last"]) for t in last["turns"]] == [(3, 60, 80)]
    shown = last["turns"][0]["outcomes"][-1]["note"]
    assert shown.startswith("turn 2 outcome 79 x") and shown.endswith("more characters)")
    assert len(shown) < web_ui._SHOWN_CHARS + 100
    # The page's part of a turn is said in its heading; its outcomes are the rendered ones.
    assert last["result"]["turns"][0]["part"] == "outcomes 60\N{EN DASH}80 of 80"
    assert last["rendered"].count('class="msg agent') == 21
    with pytest.raises(ServiceError) as beyond:
        web_ui._result_page(data, 4)
    assert beyond.value.code.name == "NOT_FOUND"


@pytest.mark.parametrize("text", ["0", "-1", "x", "1.5", "²", "9" * 5000, ""])
def test_a_page_number_is_a_whole_number_from_1(text: str) -> None:
    with pytest.raises(ServiceError) as refused:
        web_ui._page_number([("page", text)])
    assert refused.value.code.name == "INVALID_ARGUMENT"
    assert len(refused.value.message) < 300
    assert web_ui._page_number([("page", "7")]) == 7 and web_ui._page_number([]) == 1
