"""The package list, the one packaging fact pyproject.toml cannot state.

``ces_eval`` lives in ``src/``, except ``ces_eval.generated``: the top-level ``generated/`` folder
(GUIDE §7.6), mapped in under its import name by ``[tool.setuptools.package-dir]``.
``[tool.setuptools.packages.find]`` discovers packages below one root by their folder names, so it
cannot name ``generated/google/cloud`` as ``ces_eval.generated.google.cloud``; the list is therefore
computed here, from both folders, and never kept by hand.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages("src"),
        "ces_eval.generated",
        *(f"ces_eval.generated.{name}" for name in find_packages("generated")),
    ]
)
