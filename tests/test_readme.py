"""The README's Python examples run as written (the library guide's: tests/test_docs_library.py)."""

from __future__ import annotations

import os
import re

from conftest import REPO


def _python_blocks() -> list[str]:
    with open(os.path.join(REPO, "README.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_pure_function_example_gives_the_closed_form():
    (block,) = [b for b in _python_blocks() if "penalties.gp(" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert abs(float(namespace["gp"]) - 16.0) < 1e-4
