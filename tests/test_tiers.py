"""The fast tier stays fast: every test that spawns a subprocess or trains a whole run carries
the `slow` marker (`python -m pytest -q -m "not slow"` leaves it out; the README's
`python -m pytest -q` runs everything).

Found by reading each test module: a test is heavy when its body, a function of its module it
calls, a fixture it takes (its module's or conftest's) or a helper it imports from another test
module names one of `HEAVY`.
"""

from __future__ import annotations

import ast
import os

from conftest import REPO

TESTS = os.path.join(REPO, "tests")
# conftest's subprocess helpers, the subprocess module itself, and the trainer's entry points.
HEAVY = {"run_python", "run_json", "run_module", "subprocess", "Popen", "train_and_evaluate"}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)}


def _heavy_names(functions: dict[str, ast.FunctionDef], seeds: frozenset = frozenset()) -> set[str]:
    """The functions among `functions` that reach a `HEAVY` name (or one of `seeds`, heavy
    functions imported from other test modules) through calls or fixtures."""
    uses = {name: _names(node) | {a.arg for a in node.args.args}
            for name, node in functions.items()}
    heavy = {name for name, names in uses.items() if names & (HEAVY | seeds)}
    while True:
        more = {name for name, names in uses.items() if names & heavy} - heavy
        if not more:
            return heavy
        heavy |= more


def _imports_from_tests(tree: ast.Module) -> set[tuple[str, str]]:
    """(module, name) of every `from test_x import name` (at any depth) of a test module."""
    return {(n.module, a.name) for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(("test_", "own_"))
            for a in n.names}


def _marked_slow(node: ast.AST) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def _module_slow(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                  for t in n.targets)
               and "slow" in ast.unparse(n.value) for n in tree.body)


def test_every_subprocess_or_whole_run_test_is_marked_slow():
    def parse(name: str) -> ast.Module:
        with open(os.path.join(TESTS, name)) as f:
            return ast.parse(f.read())

    shared = _functions(parse("conftest.py"))
    modules = {name.removesuffix(".py"): parse(name) for name in sorted(os.listdir(TESTS))
               if name.startswith(("test_", "own_")) and name.endswith(".py")}
    heavy = {name: set() for name in modules}
    while True:  # heavy helpers imported from other test modules, to a fixed point
        before = sum(map(len, heavy.values()))
        for name, tree in modules.items():
            seeds = frozenset(imported for module, imported in _imports_from_tests(tree)
                              if imported in heavy.get(module, ()))
            heavy[name] = _heavy_names({**shared, **_functions(tree)}, seeds)
        if sum(map(len, heavy.values())) == before:
            break
    unmarked = [f"{name}.py::{test}" for name, tree in modules.items() if not _module_slow(tree)
                for test, node in _functions(tree).items()
                if test.startswith("test_") and test in heavy[name] and not _marked_slow(node)]
    assert not unmarked, "add @pytest.mark.slow to: " + ", ".join(unmarked)


def test_the_guard_sees_a_subprocess_behind_a_helper_and_a_fixture():
    tree = ast.parse(
        "import pytest\n"
        "def _launch():\n    return run_module(['wgan_jax.main'])\n"
        "@pytest.fixture\ndef trained():\n    return _launch()\n"
        "def test_a(trained):\n    assert trained\n"
        "def test_b():\n    assert 1\n"
        "@pytest.mark.slow\ndef test_c():\n    _launch()\n"
    )
    functions = _functions(tree)
    heavy = _heavy_names(functions)
    assert {"_launch", "trained", "test_a", "test_c"} <= heavy and "test_b" not in heavy
    assert _marked_slow(functions["test_c"]) and not _marked_slow(functions["test_a"])
    assert _module_slow(ast.parse("import pytest\npytestmark = pytest.mark.slow\n"))
