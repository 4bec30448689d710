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


def test_forget_drops_every_fact_of_a_subject_and_no_other() -> None:
    recent = Recent(ttl=60)
    recent.put(("locked", "apps/a"), True)
    recent.put(("tools", "apps/a"), (True, False))
    recent.put(("locked", "apps/b"), False)
    recent.put("apps/a", "a bare key is not a fact of the subject")
    recent.forget("apps/a")
    assert recent.get(("locked", "apps/a")) is None
    assert recent.get(("tools", "apps/a")) is None
    assert recent.get(("locked", "apps/b")) is False
    assert recent.get("apps/a") == "a bare key is not a fact of the subject"
