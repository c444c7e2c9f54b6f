"""wgan_jax: exact data-parallel Wasserstein GANs with gradient penalty in JAX/Flax.

The top level offers what a library user reaches for first: the pure `losses` and
`penalties`, the trainer (`train_and_evaluate`, `get_config_schema`), a run on disk
(`load_run`, `generate_samples`), the pieces of an own training loop (`GAN`,
`create_train_state`, `StepConfig`, `make_train_step`, `make_mesh`, `place_state`,
`place_batches`, `update_modules`, `apply_generator`) and the errors a user can act on. Each
name lives in its module (`wgan_jax.runs.load_run` is `wgan_jax.load_run`) and is loaded
on first use: `import wgan_jax` itself loads no JAX (PEP 562 `__getattr__`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing.TYPE_CHECKING` without importing typing (a cheap import)

__version__ = "0.1.0"

# name -> the module that defines it ("" : the name is the submodule itself)
_LAZY: dict[str, str] = {
    "losses": "",
    "penalties": "",
    "get_config_schema": "config",
    "train_and_evaluate": "train",
    "load_run": "runs",
    "Run": "runs",
    "generate_samples": "runs",
    "GAN": "state",
    "TrainState": "state",
    "create_train_state": "state",
    "update_modules": "state",
    "apply_generator": "state",
    "StepConfig": "step",
    "make_train_step": "step",
    "make_mesh": "step",
    "place_state": "step",
    "place_batches": "step",
    "UserError": "errors",
    "ConfigError": "errors",
}

__all__ = ["__version__", "losses", "penalties", "get_config_schema", "train_and_evaluate",
           "load_run", "Run", "generate_samples", "GAN", "TrainState", "create_train_state",
           "update_modules", "apply_generator", "StepConfig", "make_train_step", "make_mesh",
           "place_state", "place_batches", "UserError", "ConfigError"]

if TYPE_CHECKING:  # what type checkers see; at run time, `__getattr__` loads them
    from typing import Any

    from wgan_jax import losses, penalties
    from wgan_jax.config import get_config_schema
    from wgan_jax.errors import ConfigError, UserError
    from wgan_jax.runs import Run, generate_samples, load_run
    from wgan_jax.state import GAN, TrainState, apply_generator, create_train_state, update_modules
    from wgan_jax.step import StepConfig, make_mesh, make_train_step, place_batches, place_state
    from wgan_jax.train import train_and_evaluate


def __getattr__(name: str) -> Any:
    """Loads a top-level name's module on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'wgan_jax' has no attribute {name!r}")
    import importlib  # here, not at the top: `import wgan_jax` stays cheap

    module = importlib.import_module(f"wgan_jax.{_LAZY[name] or name}")
    value = module if not _LAZY[name] else getattr(module, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted({*globals(), *_LAZY})
