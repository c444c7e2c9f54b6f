"""The declared public surface: which modules are public, and every name they declare in
`__all__` importable, documented and type-annotated; the API reference covers exactly the
public modules; the top level (`import wgan_jax`) is lazy and loads no JAX.

A new module must be put in one of the three lists below (the test says which one lacks it):
PUBLIC (library API: `__all__`, in docs/reference/), INTERNAL (the package's plumbing, no
stability promise) or FACES (commands: their flags are documented in docs/command-line.md).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import pathlib
import re
import types

import pytest
from conftest import REPO, run_python

PACKAGE = pathlib.Path(REPO) / "src" / "wgan_jax"
REFERENCE = pathlib.Path(REPO) / "docs" / "reference"

PUBLIC = (
    "wgan_jax",
    # config and errors
    "config", "default_config", "errors",
    # pure JAX: losses, penalties, the state, the step, sampling
    "losses", "penalties", "state", "step", "sampling", "jacobian_truncation", "diagnostics",
    "augment", "precision",
    # networks
    "models", "models.contract", "models.checks", "models.dcgan", "models.mlp",
    "models.resnet", "models.conditional", "models.layers", "models.spectral",
    # data
    "data", "data.sources", "data.spec", "data.toy", "data.digits", "data.folder",
    "data.tfds_source", "data.images", "input_pipeline",
    # metrics and evaluation
    "metrics", "metrics.fid", "metrics.kid", "metrics.prdc", "metrics.inception",
    "metrics.inception_score", "metrics.toy", "metrics.stacked", "metrics.conditional",
    "metrics.wasserstein", "metrics.ranking", "metrics.feature_metrics",
    "metrics.digits_classifier",
    "evaluators", "evaluators.base", "evaluators.common", "evaluators.composite",
    "evaluators.run", "evaluators.features", "evaluators.toy", "evaluators.stacked",
    "evaluators.conditional", "evaluators.spaces",
    # a run: its records, health rules, plan, loop policies, checkpoints; loading; training
    "health", "records", "run_config", "eval_plan", "policies", "plots", "checkpoint", "runs",
    "train", "portable",
    # TPU slices and a run compiled for one without it
    "targets", "compile_check",
)
INTERNAL = (
    "augment_policy", "cli", "fs", "progress", "hlo_stats", "checkpoint_agreement",
    "checkpoint_best", "checkpoint_content", "workdir_lock", "faults", "peers", "supervisor",
)
FACES = ("main", "sample", "evaluate", "diagnose", "export", "compile")


def _all_modules() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        found.add(".".join(parts) or "wgan_jax")
    return found


def _import(name: str) -> types.ModuleType:
    return importlib.import_module(name if name == "wgan_jax" else f"wgan_jax.{name}")


def _declared() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC for name in _import(module).__all__]


def test_every_module_is_public_internal_or_a_face():
    listed = [*PUBLIC, *INTERNAL, *FACES]
    assert len(listed) == len(set(listed)), "a module is listed twice"
    unlisted = sorted(_all_modules() - set(listed))
    assert not unlisted, f"put these in PUBLIC, INTERNAL or FACES of {__file__}: {unlisted}"
    assert not set(listed) - _all_modules(), "a listed module does not exist"


@pytest.mark.parametrize("module", PUBLIC)
def test_public_module_declares_all_and_every_name_imports(module):
    mod = _import(module)
    assert inspect.getdoc(mod), f"{module} has no docstring"
    assert isinstance(getattr(mod, "__all__", None), list), f"{module} declares no __all__"
    assert len(mod.__all__) == len(set(mod.__all__)), f"{module}.__all__ repeats a name"
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names what it does not have: {missing}"


def _own_doc(obj: object) -> str:
    """`obj`'s own docstring ("" for the ones dataclasses and NamedTuples generate)."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    doc = (doc or "").strip()
    if isinstance(obj, type) and doc.startswith(f"{obj.__name__}("):
        return ""  # generated: "Name(field, ...)"
    return doc


def _attribute_documented(module: str, name: str) -> bool:
    """A module-level variable carries Sphinx's `#:` comment (before it or on its line) or a
    string right after it."""
    path = pathlib.Path(inspect.getfile(_import(module)))
    lines = path.read_text().splitlines()
    body = ast.parse(path.read_text()).body
    for i, node in enumerate(body):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            return True
        if "#:" in lines[node.lineno - 1]:
            return True
        return node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#:")
    return False


def _imported(module: str, name: str) -> bool:
    """Whether `module` imports `name` (a package re-exporting a submodule's constant)."""
    tree = ast.parse(pathlib.Path(inspect.getfile(_import(module))).read_text())
    return any(isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)
               for node in tree.body)


def _is_reexport(module: str, obj: object) -> bool:
    """A name a package re-exports from the public module that defines it (documented there)."""
    home = getattr(obj, "__module__", None) or ""
    return (home != f"wgan_jax.{module}" and home.startswith("wgan_jax.")
            and home.removeprefix("wgan_jax.") in PUBLIC)


def _members(cls: type) -> list[tuple[str, object, str]]:
    """A public class's own public methods and properties (not inherited, not generated), with
    their docstrings (a method that overrides a documented one inherits its docstring, as in
    the reference)."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        doc = inspect.getdoc(getattr(cls, name)) or ""
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            member, doc = member.fget, inspect.getdoc(member) or ""
        if inspect.isfunction(member) and member.__qualname__.startswith(cls.__qualname__):
            out.append((name, member, doc))
    return out


def test_every_public_name_is_documented():
    undocumented = []
    for module, name in _declared():
        if name == "__version__":
            continue
        obj = getattr(_import(module), name)
        if inspect.ismodule(obj) or (module == "wgan_jax") or _is_reexport(module, obj):
            continue  # documented in its own module
        if inspect.isclass(obj) or inspect.isfunction(inspect.unwrap(obj)):
            if not _own_doc(obj):
                undocumented.append(f"{module}.{name}")
            if inspect.isclass(obj):
                undocumented += [f"{module}.{name}.{m}" for m, _, doc in _members(obj)
                                 if m != "__init__" and not doc]
        elif not _attribute_documented(module, name) and not _imported(module, name):
            undocumented.append(f"{module}.{name} (a `#:` comment)")
    assert not undocumented, "\n".join(undocumented)


def _unannotated(fn: object) -> list[str]:
    signature = inspect.signature(fn)  # type: ignore[arg-type]
    missing = [p.name for p in signature.parameters.values()
               if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_every_public_function_and_method_is_annotated():
    unannotated = []
    for module, name in _declared():
        obj = getattr(_import(module), name)
        if module == "wgan_jax" or _is_reexport(module, obj):
            continue
        if inspect.isfunction(inspect.unwrap(obj)):
            unannotated += [f"{module}.{name}: {', '.join(missing)}"
                            for missing in [_unannotated(obj)] if missing]
        elif inspect.isclass(obj):
            for member_name, member, _ in _members(obj):
                if dataclasses.is_dataclass(obj) and member_name == "__init__":
                    continue  # generated from the annotated fields
                missing = _unannotated(member)
                if member_name == "__init__":
                    missing = [m for m in missing if m != "return"]
                if missing:
                    unannotated.append(f"{module}.{name}.{member_name}: {', '.join(missing)}")
    assert not unannotated, "\n".join(unannotated)


def _reference_modules() -> list[str]:
    found = []
    for page in sorted(REFERENCE.glob("*.md")):
        found += re.findall(r"^.. automodule:: (wgan_jax[\w.]*)$", page.read_text(), re.M)
    return found


def test_the_reference_documents_every_public_module_once():
    documented = _reference_modules()
    assert len(documented) == len(set(documented)), "a module is documented twice"
    want = {"wgan_jax" if m == "wgan_jax" else f"wgan_jax.{m}" for m in PUBLIC}
    assert set(documented) == want, (sorted(want - set(documented)),
                                     sorted(set(documented) - want))


def test_the_top_level_offers_its_names_from_their_modules():
    import wgan_jax

    assert wgan_jax.__all__ == ["__version__", *wgan_jax._LAZY]
    for name in wgan_jax.__all__:
        value = getattr(wgan_jax, name)
        assert name in dir(wgan_jax)
        home = wgan_jax._LAZY.get(name)
        if home:
            assert value is getattr(_import(home), name), name
        elif home == "":
            assert value is _import(name)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        wgan_jax.nonexistent  # noqa: B018


def test_type_checkers_see_the_lazy_names():
    """The `if TYPE_CHECKING:` imports of `wgan_jax/__init__.py` are exactly its lazy names,
    from the same modules (so mypy/pyright and the reference see what `__getattr__` gives)."""
    import wgan_jax

    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If)
                and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    seen = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom) and node.module.startswith("wgan_jax"):
            for alias in node.names:
                module = node.module.removeprefix("wgan_jax").removeprefix(".")
                seen[alias.name] = "" if module == "" else module
    assert seen == wgan_jax._LAZY


@pytest.mark.slow  # a fresh interpreter
def test_import_wgan_jax_loads_nothing_heavy():
    result = run_python(
        "import json, sys, time\n"
        "start = time.perf_counter()\n"
        "import wgan_jax\n"
        "seconds = time.perf_counter() - start\n"
        "heavy = ('jax', 'jaxlib', 'flax', 'optax', 'orbax', 'numpy', 'ml_collections', 'grain',\n"
        "         'tensorflow_datasets', 'matplotlib', 'typing')\n"
        "before = sorted(m for m in heavy if m in sys.modules)\n"
        "wgan_jax.make_train_step\n"
        "print(json.dumps([before, 'jax' in sys.modules, seconds]))\n")
    assert result.returncode == 0, result.stderr[-2000:]
    loaded, jax_after, seconds = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == [] and jax_after
    assert seconds < 1.0  # a hang or a heavy import, not a timing target (about 1.5 ms)
