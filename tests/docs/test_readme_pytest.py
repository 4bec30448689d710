"""README's pytest example (between ``<!-- pytest:begin -->`` and ``<!-- pytest:end -->``) is
word for word a test of examples/pytest-suite, which tests/integration/test_packaging.py runs
with the built wheel and Google's client: the example the README shows is one that passes."""

from __future__ import annotations

import re

from tests.support import contract

_BLOCK = re.compile(r"<!-- pytest:begin -->\n```python\n(.*?)```\n<!-- pytest:end -->", re.S)


def test_the_readme_pytest_example_is_a_test_of_the_example_suite() -> None:
    found = _BLOCK.search((contract.ROOT / "README.md").read_text(encoding="utf-8"))
    assert found is not None, "README.md has no pytest block"
    suite = contract.ROOT / "examples" / "pytest-suite" / "tests" / "test_evaluations.py"
    assert found.group(1) in suite.read_text(encoding="utf-8")
