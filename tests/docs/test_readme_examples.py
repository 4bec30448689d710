"""README's example files, each shown whole between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``, are word for word the files that the tests run: the pytest example is
examples/pytest-suite/tests/test_quickstart.py (tests/integration/test_packaging.py runs it
with the built wheel and Google's client), the agent example examples/agent/agent.py
(tests/integration/test_agents.py evaluates it)."""

from __future__ import annotations

import re

import pytest

from tests.support import contract

EXAMPLES = {
    "pytest": contract.ROOT / "examples" / "pytest-suite" / "tests" / "test_quickstart.py",
    "agent": contract.ROOT / "examples" / "agent" / "agent.py",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_example_is_the_whole_file(name: str) -> None:
    block = re.compile(rf"<!-- {name}:begin -->\n```python\n(.*?)```\n<!-- {name}:end -->", re.S)
    found = block.search((contract.ROOT / "README.md").read_text(encoding="utf-8"))
    assert found is not None, f"README.md has no {name} block"
    assert found.group(1) == EXAMPLES[name].read_text(encoding="utf-8")
