"""The model contract: every generator and critic is a pair of pure functions over pytrees.

A `Model` is::

    init(rng, example) -> (params, state)
    apply(params, state, x, *, train, rng=None) -> (out, new_state)

* `params`: the trainable arrays, a nested dict named by the network's own layers (what the
  optimizers, the EMA, the diagnostics and the checkpoints see).
* `state`: the other persistent arrays, e.g. BatchNorm statistics (later spectral-norm
  vectors); `{}` for a network without any. `apply(train=True)` returns its update;
  `apply(train=False)` returns it unchanged. It never holds activations or random keys.
* `train`: training (batch statistics, dropout on) or inference mode (running statistics,
  dropout off).
* `rng`: a PRNG key for this call's random numbers (dropout, noise injection); the train step
  passes raw `jax.random.PRNGKey` data, a different key per device, critic step and pass.
  `None` (inference) means the network must not need random numbers.
* `out`: the generator's samples `[B, ...]` or the critic's scores `[B]`.
* Class-conditional models take `x = (inputs, labels)` (a tuple pytree, int labels `[B]`):
  the generator `(latents, labels)`, the critic `(samples, labels)`; the contract is the same.
  An NNX or Linen module whose `__call__` takes a `labels` argument is called
  `module(inputs, labels=labels)` (Linen: `..., train=...`): the way to write your own
  conditional networks (`config.model.conditional = "labels"`). A module without one gets
  the tuple as its single input (the built-in networks do).

Full diagnostics also need activations (dead ReLUs, saturated tanh). A model may offer
`capture(params, state, x, *, train, rng=None) -> (out, new_state, activations)`, the same
computation also returning a flat dict `{name: array [B, ..., C]}`: names containing "relu"
count towards `dead_units/<net>`, the first containing "tanh" gives `saturated/<net>`.
Activations are returned beside `state`, never stored in it. `capture=None`: the step just
leaves those two statistics out.

`as_model(obj)` builds a `Model` from:

* a Flax NNX module (already initialised, so `init` returns its current variables and ignores
  `rng`; seed its `nnx.Rngs` yourself): `nnx.Param`s are `params`, every other variable except
  RNG streams and `nnx.Intermediate`s is `state`. `apply` merges them into the module inside
  the traced function, sets `model.train()` / `model.eval()` (Dropout's `deterministic`,
  BatchNorm's `use_running_average`), and re-seeds every RNG stream of the module from `rng`
  (so the module's own `nnx.Rngs` keys are never reused across calls or devices). The call
  runs under `nnx.capture(model, nnx.Intermediate)`: activations it sows with
  `self.sow(nnx.Intermediate, "relu_0", h)` are what `capture` returns.
* a Flax Linen module called as `module(x, train=...)`: `params` is the "params" collection,
  `state` the other collections except "intermediates"; `rng` becomes
  `rngs={"dropout": ...}` (the streams named by `rng_streams`, each its own key); sown
  "intermediates" are what `capture` returns.
* a plain `(init, apply)` pair of functions that already follow the contract above.
* a `Model`, returned as is.

BatchNorm in a generator must name the step's data axis (`axis_name="data"` by default) so
that its statistics are those of the global batch; a critic must not use BatchNorm under an
input-gradient penalty (it couples the examples of a batch). `wgan_jax.models.checks` checks
both, and the shapes, before a run or a train state starts.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
from flax import nnx, traverse_util

from wgan_jax.diagnostics import key_name

__all__ = ["Model", "as_model", "nnx_filters", "InitFn", "ApplyFn"]

PyTree = Any
#: `init(rng, example) -> (params, state)`.
InitFn = Callable[[jax.Array, jax.Array], tuple[PyTree, PyTree]]
#: `apply(params, state, x, *, train, rng) -> (out, new_state)`.
ApplyFn = Callable[..., tuple[jax.Array, PyTree]]
CaptureFn = Callable[..., tuple[jax.Array, PyTree, dict[str, jax.Array]]]


@dataclasses.dataclass(frozen=True)
class Model:
    """A network as pure functions (see the module docstring for the contract)."""

    init: InitFn
    apply: ApplyFn
    capture: CaptureFn | None = None
    kind: str = "functions"  # what it was made from: "nnx", "linen", "functions", "builtin"


def as_model(obj: Any, *, rng_streams: Sequence[str] = ("dropout",)) -> Model:
    """A `Model` from an NNX module, a Linen module, an `(init, apply)` pair or a `Model`.

    `rng_streams` names the Linen RNG streams fed from `rng` (NNX modules are re-seeded for
    all of their own streams). Anything else raises `TypeError` saying what was given.
    """
    if isinstance(obj, Model):
        return obj
    if isinstance(obj, type) and issubclass(obj, (nnx.Module, nn.Module)):
        raise TypeError(f"got the class {obj.__module__}.{obj.__qualname__} itself, not a "
                        f"module: pass an instance, {obj.__qualname__}(...)")
    if isinstance(obj, nnx.Module):
        return _from_nnx(obj)
    if isinstance(obj, nn.Module):
        if not _takes(obj, "train"):
            raise TypeError(f"the Linen module {type(obj).__qualname__}'s __call__ takes no "
                            "`train` argument: add one (def __call__(self, x, train: bool = "
                            "True)); the step calls it with train=True or False")
        return _from_linen(obj, tuple(rng_streams))
    if isinstance(obj, tuple) and len(obj) == 2 and all(callable(f) for f in obj):
        return Model(init=obj[0], apply=obj[1])
    raise TypeError(
        f"cannot use {_describe(obj)} as a network: expected a Flax NNX module (nnx.Module), "
        "a Flax Linen module (nn.Module), a pair of functions (init, apply) with "
        "init(rng, example) -> (params, state) and apply(params, state, x, *, train, rng) -> "
        "(out, new_state), or a wgan_jax.models.contract.Model"
    )


def _takes(module: Any, name: str) -> bool:
    """Whether a module's `__call__` accepts the keyword `name` (by name or **kwargs)."""
    try:
        parameters = inspect.signature(type(module).__call__).parameters.values()
    except (TypeError, ValueError):
        return True  # cannot tell: let the call say
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


def _call_args(x: Any, takes_labels: bool) -> tuple[tuple, dict]:
    """(args, kwargs) of a module call: a conditional input `(inputs, labels)` goes to a
    module whose `__call__` takes `labels` as `module(inputs, labels=labels)`, else as is."""
    if takes_labels and isinstance(x, tuple) and len(x) == 2:
        return (x[0],), {"labels": x[1]}
    return (x,), {}


def _describe(obj: Any) -> str:
    if isinstance(obj, tuple):
        return f"a tuple of {len(obj)} ({', '.join(type(x).__name__ for x in obj)})"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _model(init: InitFn, run: Callable[..., Any], kind: str) -> Model:
    """A `Model` whose `apply` and `capture` are `run(params, state, x, train, rng, capture)`."""

    def apply(params, state, x, *, train: bool, rng: jax.Array | None = None):
        out, new_state, _ = run(params, state, x, train, rng, capture=False)
        return out, new_state

    def capture(params, state, x, *, train: bool, rng: jax.Array | None = None):
        return run(params, state, x, train, rng, capture=True)

    return Model(init=init, apply=apply, capture=capture, kind=kind)


def _from_linen(module: Any, rng_streams: tuple[str, ...]) -> Model:
    takes_labels = _takes(module, "labels")

    def init(rng: jax.Array, example: jax.Array) -> tuple[PyTree, PyTree]:
        args, kwargs = _call_args(example, takes_labels)
        variables = dict(module.init(rng, *args, **kwargs, train=False))
        params = variables.pop("params", {})
        variables.pop("intermediates", None)
        return params, variables

    def run(params, state, x, train: bool, rng, capture: bool):
        rngs = (
            {name: jax.random.fold_in(rng, i) for i, name in enumerate(rng_streams)}
            if rng is not None else None
        )
        mutable = [k for k in state if k != "intermediates"] if train else []
        if capture:
            mutable.append("intermediates")
        variables = {"params": params, **state}
        args, kwargs = _call_args(x, takes_labels)
        if not mutable:
            return module.apply(variables, *args, **kwargs, train=train, rngs=rngs), state, {}
        out, updated = module.apply(variables, *args, **kwargs, train=train, rngs=rngs,
                                    mutable=mutable)
        updated = dict(updated)
        acts = _flat_names(updated.pop("intermediates", {}))
        return out, {**state, **updated}, acts

    builtin = type(module).__module__.startswith("wgan_jax.models.")
    return _model(init, run, "builtin" if builtin else "linen")


def nnx_filters() -> tuple[Any, Any]:
    """(params, state) filters of an NNX module: its `nnx.Param` variables, and every other
    variable except RNG streams and `nnx.Intermediate` ones (BatchNorm statistics, ...)."""
    return nnx.Param, nnx.Not(nnx.Any(nnx.Param, nnx.RngState, nnx.Intermediate))


def _from_nnx(module: Any) -> Model:
    template = nnx.clone(module)
    nnx.pop(template, nnx.Intermediate)
    _, other = nnx_filters()
    graphdef, params0, rngs0, state0 = nnx.split(  # type: ignore[misc]
        template, nnx.Param, nnx.RngState, other)
    takes_labels = _takes(module, "labels")

    def init(rng: jax.Array, example: jax.Array) -> tuple[PyTree, PyTree]:
        del rng, example  # an NNX module is initialised when it is constructed
        return nnx.to_pure_dict(params0), nnx.to_pure_dict(state0)

    def run(params, state, x, train: bool, rng, capture: bool):
        model = nnx.merge(
            graphdef, _filled(params0, params), _reseeded(rngs0, rng), _filled(state0, state)
        )
        if train:
            model.train()
        else:
            model.eval()
        args, kwargs = _call_args(x, takes_labels)
        out, acts = nnx.capture(model, nnx.Intermediate)(*args, **kwargs)
        new_state = nnx.to_pure_dict(nnx.state(model, other)) if train else state
        return out, new_state, _flat_names(nnx.to_pure_dict(acts)) if capture else {}

    return _model(init, run, "nnx")


def _filled(template: Any, values: PyTree) -> Any:
    """A new `nnx.State` like `template` holding `values` (a pure dict); `template` untouched."""
    state = nnx.State(dict(template))
    nnx.replace_by_pure_dict(state, values)
    return state


def _reseeded(rng_template: Any, rng: jax.Array | None) -> Any:
    """The module's RNG streams, every stream's key derived from `rng` and its count reset."""
    if rng is None:
        return rng_template
    typed = jax.numpy.issubdtype(rng.dtype, jax.dtypes.prng_key)
    base = rng if typed else jax.random.wrap_key_data(rng)
    flat = nnx.to_flat_state(rng_template)
    values: dict[tuple, Any] = {}
    for i, (path, var) in enumerate(flat):
        value = var.get_value()
        if path[-1] == "key":
            key = jax.random.fold_in(base, i)
            values[path] = jax.random.split(key, value.shape) if value.shape else key
        else:
            values[path] = jax.numpy.zeros_like(value)
    return _filled(rng_template, traverse_util.unflatten_dict(values))


def _flat_names(tree: PyTree) -> dict[str, jax.Array]:
    """Sown activations, any nesting -> {"Block_0/relu_0/0": array, ...} ("/"-joined path)."""
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        out["/".join(key_name(k) for k in path)] = leaf
    return out
