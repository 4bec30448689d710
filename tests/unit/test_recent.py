"""Context.Recent (src/ces_eval/core/aip/context.py): facts trusted for a while, bounded."""

from __future__ import annotations

import time

from ces_eval.core.aip.context import Recent


def test_a_fact_is_trusted_for_its_time_then_forgotten() -> None:
    recent = Recent(ttl=0.05)
    recent.put("app", True)
    assert recent.get("app") is True
    time.sleep(0.06)
    assert recent.get("app") is None
    recent.put("app", False)
    assert recent.get("app") is False
    recent.drop("app")
    assert recent.get("app") is None


def test_the_oldest_facts_go_first_past_the_bound() -> None:
    recent = Recent(ttl=60, size=2)
    for key in ("a", "b", "c"):
        recent.put(key, key)
    assert [recent.get(key) for key in ("a", "b", "c")] == [None, "b", "c"]
    recent.put("b", "again")  # written again: the newest
    recent.put("d", "d")
    assert [recent.get(key) for key in ("b", "c", "d")] == ["again", None, "d"]
    recent.clear()
    assert recent.get("d") is None
