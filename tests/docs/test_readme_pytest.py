"""README's pytest example (between ``<!-- pytest:begin -->`` and ``<!-- pytest:end -->``) is
word for word examples/pytest-suite/tests/test_quickstart.py, which
tests/integration/test_packaging.py runs with the built wheel and Google's client: the example
the README shows is a whole file that passes."""

from __future__ import annotations

import re

from tests.support import contract

_BLOCK = re.compile(r"<!-- pytest:begin -->\n```python\n(.*?)```\n<!-- pytest:end -->", re.S)


def test_the_readme_pytest_example_is_a_file_of_the_example_suite() -> None:
    found = _BLOCK.search((contract.ROOT / "README.md").read_text(encoding="utf-8"))
    assert found is not None, "README.md has no pytest block"
    quickstart = contract.ROOT / "examples" / "pytest-suite" / "tests" / "test_quickstart.py"
    assert found.group(1) == quickstart.read_text(encoding="utf-8")
