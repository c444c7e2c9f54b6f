"""The float32 matrix-product precision a run computes at (`config.matmul_precision`).

XLA picks how float32 matrix products and convolutions are computed per platform unless the
program says otherwise (`jax.lax.Precision`): on CPU in float32 at every setting; on NVIDIA
GPUs since Ampere "default" and "high" are TF32 (inputs rounded to a 10-bit mantissa),
"highest" true float32; on TPUs "default" one bfloat16 pass, "high" three, "highest" six. The
train step, the evaluation's and the trainer's sampling, and `sample`/`evaluate` trace their
jitted functions inside `scope(name)`, so the compiled programs carry the stated precision on
every product and convolution that does not set its own (docs/accelerators.md;
tests/test_precision.py checks the lowered programs).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax

from wgan_jax.config import PRECISIONS

__all__ = ["scope", "within"]

F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Traces (and so compiles) the JAX code run inside at matmul precision `name`.

    jit's cache key includes this setting, so a jitted function called inside gets a program
    of its own for each precision. "default" is set explicitly too, so a global
    `jax_default_matmul_precision` does not override what the config states.
    """
    if name not in PRECISIONS:
        raise ValueError(f"matmul precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    with jax.default_matmul_precision(name):
        yield


def within(name: str, fn: F) -> F:
    """`fn` whose body runs inside `scope(name)` (for functions traced by `jax.jit`)."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with scope(name):
            return fn(*args, **kwargs)

    return wrapped  # type: ignore[return-value]
