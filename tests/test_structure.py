"""The package's shape: no import cycle (imports inside functions counted), no module imports a
higher layer, the faces do not import one another, and `config` and `diagnose` load no JAX.

The layers are ARCHITECTURE.md's picture, bottom to top; a new module gets a row in `LAYERS`
(the test says which one lacks it)."""

from __future__ import annotations

import ast
import json
import pathlib

import pytest
from conftest import run_python

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "src" / "wgan_jax"

# Bottom to top. A module may import its own layer and those below, never one above.
LAYERS: dict[str, tuple[str, ...]] = {
    # what every layer may read: errors, the schema and its choice names
    "config": ("errors", "config", "default_config", "augment_policy"),
    # plain Python / numpy: files, records, rules on metrics, metrics, data readers, the plan,
    # the loop's policies
    "base": ("fs", "plots", "records", "progress", "hlo_stats", "cli", "health", "run_config",
             "eval_plan", "metrics", "data", "policies", "checkpoint_best", "faults",
             "supervisor", "targets"),
    # JAX, pure: networks, losses, penalties, the state, sampling controls
    "core": ("precision", "augment", "losses", "penalties", "diagnostics", "models", "state",
             "sampling", "jacobian_truncation"),
    "step": ("step",),
    "edges": ("input_pipeline", "checkpoint", "checkpoint_agreement", "checkpoint_content",
              "workdir_lock", "peers"),
    "evaluation": ("evaluators",),
    "runs": ("runs", "portable", "compile_check"),
    "trainer": ("train",),
    "faces": ("main", "sample", "evaluate", "diagnose", "export", "compile"),
}
FACES = LAYERS["faces"]
LEVEL = {name: level for level, names in enumerate(LAYERS.values()) for name in names}


def _modules() -> dict[str, pathlib.Path]:
    """Dotted name below `wgan_jax` -> file, e.g. "data.sources", "models" (its __init__)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The package module a dotted import names (`wgan_jax.data.sources.num_classes` ->
    "data.sources"), None for other packages and the bare package."""
    if name != "wgan_jax" and not name.startswith("wgan_jax."):
        return None
    name = name.removeprefix("wgan_jax").removeprefix(".")
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """The package modules `module` imports anywhere in its file (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{module}: relative import; the package uses absolute ones")
        else:
            continue
        found |= {t for t in map(_target, names) if t and t != module}
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _level(module: str) -> int:
    top = module.split(".")[0]
    assert top in LEVEL, f"wgan_jax.{module} has no layer: add it to LAYERS in {__file__}"
    return LEVEL[top]


def test_every_module_has_a_layer_and_imports_none_above_it():
    upward = [f"wgan_jax.{m} ({list(LAYERS)[_level(m)]}) imports wgan_jax.{t} "
              f"({list(LAYERS)[_level(t)]})"
              for m, targets in GRAPH.items() for t in sorted(targets) if _level(t) > _level(m)]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    """Depth-first search for a back edge; the error names one cycle."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)


def test_the_scan_sees_imports_inside_functions():
    """A broken scan (top-level imports only) would miss these and pass the tests above."""
    assert "train" in GRAPH["main"]  # imported in `_main`, after the setup's stop handler
    assert {"config", "data.sources", "errors"} <= GRAPH["models.checks"]


def test_faces_do_not_import_each_other():
    crossing = [(m, t) for m in FACES for t in GRAPH[m] if t in FACES]
    assert not crossing


def test_config_is_a_leaf():
    """The schema imports from the package only errors and the policy names (no evaluation,
    data, augment, health or precision), so everything can read it."""
    assert GRAPH["config"] <= {"errors", "augment_policy"}


def test_the_run_door_checks_on_the_steps_mesh_axis():
    """`models.checks` sits below the step, so it names the axis instead of importing it."""
    import inspect

    from wgan_jax import step
    from wgan_jax.models.checks import check_run_networks

    assert inspect.signature(check_run_networks).parameters["axis_name"].default == step.AXIS


@pytest.mark.slow
def test_config_and_diagnose_import_no_jax():
    result = run_python(
        "import json, sys\n"
        "import wgan_jax.config, wgan_jax.default_config, wgan_jax.diagnose\n"
        "heavy = ('jax', 'jaxlib', 'flax', 'optax', 'orbax', 'grain', 'tensorflow', 'torch')\n"
        "loaded = sorted(m for m in heavy if m in sys.modules)\n"
        "import wgan_jax.step  # the probe sees JAX where it is loaded\n"
        "print(json.dumps([loaded, 'jax' in sys.modules]))\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[], True]
