"""4x4 stride-2 down/up convolutions and odd k x k stride-1 SAME convolutions with
interchangeable implementations.

`DownConv` is PyTorch's ``Conv2d(k=4, s=2, p=1)`` and `UpConv` is PyTorch's
``ConvTranspose2d(k=4, s=2, p=1)`` (output twice the input size), both on NHWC arrays.
Each has an ``impl`` attribute choosing how the SAME function is computed:

* ``"xla"``: one strided (``DownConv``) or input-dilated (``UpConv``) convolution, exactly
  what ``nn.Conv`` / ``nn.ConvTranspose`` with explicit padding emit.
* ``"s2d"``: the TPU/MLPerf rearrangement. ``DownConv`` = space-to-depth (2x2 blocks into
  channels) then a 2x2 stride-1 convolution; ``UpConv`` = a 2x2 stride-1 convolution to
  ``4 * features`` channels then depth-to-space. No strides and no dilated inputs remain, so
  the backward pass and the gradient penalty's double backward are plain stride-1
  convolutions (the layout TPUs like). On XLA:CPU it speeds up the generator's backward
  but NOT the critic's penalty double backward (slower than "xla" there).
* ``"matmul"``: matrix products and data movement only, no convolution kernels. ``DownConv``
  concatenates eight slices of the padded input, viewed as ``[N, H/2+1, 2, W/2+1, 2C]`` (a
  free reshape), into the ``[N, H/2, W/2, 16C]`` patch matrix in the kernel's own ``(kh, kw,
  c)`` order, times the kernel reshaped to ``[16C, F]``; for large patch matrices
  half-height row-pair patches and one product twice as wide (`_down_row_pairs`). ``UpConv``
  multiplies every input pixel by all 16 taps at once (``[C, 16F]``), then each of the four
  output phases sums four shifted taps (overlap-add): exactly the FLOPs of the layer, no
  cropped border. Every derivative, including the penalty's double backward, is then slices,
  pads, concatenations and matrix products, which XLA:CPU runs several times faster than its
  convolution kernels; a custom JVP (`_matmul`) keeps the weight gradients row-major
  products (see benchmarks/README.md).
* ``"auto"`` (default): the platform's entry of `AUTO_IMPLS`: "matmul" on CPU (measured),
  "xla" on TPU (the TPU compiler's own estimate: "s2d" 2.2 and "matmul" 3.3 times its cycles
  for the DCGAN-64, benchmarks/tpu_compile.py), "s2d" on GPU (on an H200 "matmul" is 1.27x
  faster on the DCGAN-32's layers but not yet timed on the ResNet), "xla" elsewhere. The
  platform is the default backend's, or the one `auto_resolved_for` names while a program
  for another platform is traced (`wgan_jax.portable` lowers a generator for several
  platforms at once).

All impls own the same parameters, ``{"kernel": [4, 4, in, out], "bias": [out]}``, the
tree ``nn.Conv`` / ``nn.ConvTranspose`` create, so checkpoints move freely between impls and
from models built with the Flax layers. The rearranged kernels are built inside ``__call__``.

`SameConv` is ``nn.Conv(features, (k, k), padding="SAME")`` for odd k (the ResNet's 3x3 and
1x1 layers). Its forward pass is XLA's convolution in every impl. With ``"xla"`` (and
``"s2d"``, which has nothing to rearrange at stride 1) its derivatives are XLA's own; with
``"matmul"`` (``"auto"`` on CPU) a custom VJP (`_same_conv_fast`) writes the input gradient
as a forward convolution of ``dY`` with the explicitly flipped and transposed kernel, and the
weight gradient as k row-major products ``dY^T [F, M] @ [M, k*C]`` of column-shifted slices.
XLA:CPU emits its own weight-gradient convolutions (``f01b_i01o->01bf``) and its
transposed-kernel input gradients (``b01f_01oi->b01f``) as naive loops, 0.25-5 GFLOP/s
(measured in the paper's ResNet step), while forward convolutions and products run at tens to
hundreds; the rewrite keeps every derivative, the penalty's double backward included, on
those fast kernels.

Kernel orientation of `UpConv`: Flax's ``nn.ConvTranspose`` default
(``transpose_kernel=False``): ``kernel[kh, kw, in, out]`` is cross-correlated with the
zero-dilated input, padded by 2 on each side. PyTorch's ``ConvTranspose2d.weight`` of shape
``[in, out, kh, kw]`` is the spatially flipped kernel; convert it with
`torch_conv_transpose_weight_to_flax`. ``Conv2d.weight`` ``[out, in, kh, kw]`` converts with
`torch_conv_weight_to_flax`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["SameConv", "DownConv", "UpConv", "same_conv", "down_conv", "up_conv", "resolve_impl",
           "auto_impl", "auto_resolved_for", "IMPLS"]

#: The convolution implementations (`config.model.conv_impl`; the module docstring says
#: what each computes).
IMPLS = ("xla", "s2d", "matmul", "auto")
_DIMS = ("NHWC", "HWIO", "NHWC")
Initializer = Callable[..., jax.Array]


def torch_conv_weight_to_flax(w: Any) -> np.ndarray:
    """PyTorch ``Conv2d.weight`` [out, in, kh, kw] -> HWIO kernel [kh, kw, in, out]."""
    return np.transpose(np.asarray(w), (2, 3, 1, 0))


def torch_conv_transpose_weight_to_flax(w: Any) -> np.ndarray:
    """PyTorch ``ConvTranspose2d.weight`` [in, out, kh, kw] -> `UpConv` kernel [kh, kw, in, out].

    PyTorch scatters each input pixel through the kernel (the gradient of a convolution);
    Flax's ``ConvTranspose`` correlates the dilated input with it, so the kernel is flipped.
    """
    return np.transpose(np.asarray(w), (2, 3, 0, 1))[::-1, ::-1].copy()


def space_to_depth(x: jax.Array) -> jax.Array:
    """[N, 2H, 2W, C] -> [N, H, W, 4C], channel order (row phase, column phase, C)."""
    n, h, w, c = x.shape
    x = x.reshape(n, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, h // 2, w // 2, 4 * c)


def depth_to_space(x: jax.Array) -> jax.Array:
    """[N, H, W, 4C] -> [N, 2H, 2W, C], the inverse of `space_to_depth`."""
    n, h, w, c4 = x.shape
    c = c4 // 4
    x = x.reshape(n, h, w, 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, 2 * h, 2 * w, c)


def down_kernel_s2d(kernel: jax.Array) -> jax.Array:
    """[4, 4, I, O] stride-2 kernel -> [2, 2, 4I, O] kernel acting on `space_to_depth` input.

    Tap ``(2 qh + ph, 2 qw + pw)`` of the 4x4 kernel becomes tap ``(qh, qw)`` on input
    channel block ``(ph, pw)``.
    """
    i, o = kernel.shape[2:]
    k = kernel.reshape(2, 2, 2, 2, i, o).transpose(0, 2, 1, 3, 4, 5)
    return k.reshape(2, 2, 4 * i, o)


def up_kernel_s2d(kernel: jax.Array) -> jax.Array:
    """[4, 4, I, O] transposed-conv kernel -> [2, 2, I, 4O] kernel followed by `depth_to_space`.

    Output pixel ``2b + r - 1`` (phase r) reads input pixels ``b - 1`` and ``b`` through taps
    ``1 - r`` and ``3 - r`` of the kernel: tap ``2 s + 1 - r`` becomes tap ``s`` of phase r.
    """
    i, o = kernel.shape[2:]
    k = kernel.reshape(2, 2, 2, 2, i, o)[:, ::-1, :, ::-1]
    k = k.transpose(0, 2, 4, 1, 3, 5)
    return k.reshape(2, 2, i, 4 * o)


# What "auto" is on each platform (`jax.default_backend()`): the impl that
# `python benchmarks/conv_impls.py` finds fastest there over the DCGAN-32 critic's penalty
# double backward, the critic's and the generator's forward + backward (it prints the
# fastest). cpu: measured (benchmarks/README.md). tpu: the TPU compiler's cycle estimates
# (benchmarks/tpu_compile.py). gpu: on an H200 "matmul" 5.4 ms, "s2d" 6.9 ms, "xla" 10.1 ms per
# DCGAN-32 iteration of layers; "s2d" kept until "matmul", which also replaces the stride-1
# convolutions' derivatives, is timed on the ResNet there (benchmarks/gpu_plan.sh impls).
# Platforms not listed get XLA's own convolutions.
AUTO_IMPLS = {"cpu": "matmul", "gpu": "s2d", "tpu": "xla"}


def auto_impl(platform: str) -> str:
    """The impl "auto" stands for on `platform` ("cpu", "gpu", "tpu", ...): `AUTO_IMPLS`."""
    return AUTO_IMPLS.get(platform, "xla")


# The platform "auto" resolves for while `auto_resolved_for` is active (None: the default
# backend's).
_AUTO_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "wgan_jax_auto_platform", default=None)


@contextlib.contextmanager
def auto_resolved_for(platform: str) -> Iterator[None]:
    """Inside, "auto" resolves to `auto_impl(platform)` instead of the default backend's impl:
    for a program traced here to run on `platform` ("cpu", "gpu", "tpu", ...)."""
    token = _AUTO_PLATFORM.set(platform)
    try:
        yield
    finally:
        _AUTO_PLATFORM.reset(token)


def resolve_impl(impl: str) -> str:
    """Map "auto" to the impl of the default backend (`auto_impl`), or of the platform
    `auto_resolved_for` names; others to themselves."""
    if impl not in IMPLS:
        raise ValueError(f"unknown impl {impl!r}; expected one of {IMPLS}")
    if impl == "auto":
        return auto_impl(_AUTO_PLATFORM.get() or jax.default_backend())
    return impl


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _matmul(a: jax.Array, k: jax.Array, precision: Any) -> jax.Array:
    """``a @ k`` for a [..., P] and k [P, O], with a weight gradient XLA:CPU runs fast.

    Same value and derivatives as ``jnp.matmul``. Only the tangent in ``k`` is written
    differently: its transpose, the weight gradient ``a^T dY`` summed over all rows, would
    otherwise compile on CPU to a transposed-operand product at a quarter of the matmul peak
    (Eigen). Here the narrower of ``a`` and ``dY`` is transposed into its own buffer (the
    optimization barriers stop XLA from folding the transpose back into the product), so the
    weight gradient is a plain row-major product.
    """
    return jnp.matmul(a, k, precision=precision)


@_matmul.defjvp
def _matmul_jvp(precision: Any, primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    a, k = primals
    da, dk = tangents
    barrier = lax.optimization_barrier
    rows = a.reshape(-1, a.shape[-1])
    if rows.shape[1] <= k.shape[1]:
        # Transpose: barrier(rows^T) @ dY, a [P, M] @ [M, O] product.
        dk_term = jnp.matmul(barrier(rows.T).T, dk, precision=precision)
    else:
        # Transpose: (barrier(dY^T) @ rows)^T, an [O, M] @ [M, P] product.
        dk_term = barrier(jnp.matmul(barrier(dk.T), rows.T, precision=precision)).T
    tangent = jnp.matmul(da, k, precision=precision) + dk_term.reshape(*a.shape[:-1], -1)
    return _matmul(a, k, precision), tangent


def _down_patches(x: jax.Array, ho: int, wo: int) -> jax.Array:
    """[N, 2ho+2, 2wo+2, C] padded input -> [N, ho, wo, 16C] 4x4 stride-2 windows, (kh, kw, c).

    Kernel row ``kh = 2a + p`` of output row i reads block row ``i + a``, phase p; kernel
    columns ``2b`` and ``2b + 1`` read the 2C contiguous values of block column ``j + b``.
    """
    n, c = x.shape[0], x.shape[-1]
    xr = x.reshape(n, ho + 1, 2, wo + 1, 2 * c)
    cols = [xr[:, a : a + ho, p, b : b + wo] for a in range(2) for p in range(2) for b in range(2)]
    return jnp.concatenate(cols, -1)


# `down_conv`'s "matmul" impl uses `_down_row_pairs` (unless its `row_pairs` argument says
# otherwise) when the output has at least this many rows AND the full patch matrix would hold
# at least this many elements (8 MB of float32).
# Its one extra block row of products costs 1/ho more FLOPs (12.5% at 8 rows); the halved patch
# matrix and the twice wider product repay that only for large patch matrices: measured faster
# for the 64 px RGBA DCGAN's 8.4-16.8 MB patches, slower for DCGAN-32's 1.5-4.2 MB ones
# (benchmarks/README.md). Otherwise, the full patches.
ROW_PAIR_MIN_ROWS = 8
ROW_PAIR_MIN_PATCH_ELEMENTS = 2**21


def uses_row_pairs(n: int, ho: int, wo: int, c: int) -> bool:
    """Whether the "matmul" `down_conv` of an [n, 2ho, 2wo, c] input takes the row-pair form
    by default: at least `ROW_PAIR_MIN_ROWS` output rows and a full [n, ho, wo, 16c] patch
    matrix of at least `ROW_PAIR_MIN_PATCH_ELEMENTS` elements."""
    return ho >= ROW_PAIR_MIN_ROWS and n * ho * wo * 16 * c >= ROW_PAIR_MIN_PATCH_ELEMENTS


def _down_row_pairs(
    x: jax.Array, kernel: jax.Array, ho: int, wo: int, precision: Any
) -> jax.Array:
    """`down_conv` of the padded input from half-height patches and one 2F-wide product.

    Kernel rows ``2a + p`` of output row i read block row ``i + a``. The [N, ho+1, wo, 8C]
    patches hold, per block row, both phases p and the four kernel columns (no `a`); one
    product with the kernel's two row blocks side by side ([8C, 2F]) gives every block row's
    contribution to output rows i (a = 0, first F) and i - 1 (a = 1, last F), which two
    row-shifted slices add up.
    """
    n, c, f = x.shape[0], x.shape[-1], kernel.shape[-1]
    xr = x.reshape(n, ho + 1, 2, wo + 1, 2 * c)
    cols = [xr[:, :, p, b : b + wo] for p in range(2) for b in range(2)]
    k = kernel.reshape(2, 8 * c, f).transpose(1, 0, 2).reshape(8 * c, 2 * f)
    z = _matmul(jnp.concatenate(cols, -1), k, precision)
    return z[:, :ho, :, :f] + z[:, 1:, :, f:]


# Output phase r of `UpConv` (output pixel 2m + r) sums input pixel m + offset through kernel
# tap k, for the two (offset, k) pairs of its phase (kernel in the flipped Flax orientation).
_UP_TAPS = (((0, 2), (-1, 0)), ((1, 3), (0, 1)))


def _shift(a: jax.Array, di: int, dj: int) -> jax.Array:
    """``b[:, m, q] = a[:, m + di, q + dj]``, zero outside; di, dj in {-1, 0, 1}."""
    h, w = a.shape[1:3]
    a = jnp.pad(a, ((0, 0), (max(-di, 0), max(di, 0)), (max(-dj, 0), max(dj, 0)), (0, 0)))
    return a[:, max(di, 0) : max(di, 0) + h, max(dj, 0) : max(dj, 0) + w]


def _up_matmul(x: jax.Array, kernel: jax.Array, precision: Any) -> jax.Array:
    """`up_conv` as one product to all 16 taps, then overlap-add of shifted taps per phase.

    The taps are split off with `jnp.split` (its transpose is one concatenation), so the
    backward pass never pads a whole 16-tap array per tap.
    """
    n, h, w, c = x.shape
    f = kernel.shape[-1]
    y = _matmul(x, kernel.transpose(2, 0, 1, 3).reshape(c, 16 * f), precision)
    taps = jnp.split(y, 16, axis=-1)
    rows = []
    for row_taps in _UP_TAPS:
        phases = []
        for col_taps in _UP_TAPS:
            terms = [
                _shift(taps[4 * kh + kw], di, dj)
                for di, kh in row_taps
                for dj, kw in col_taps
            ]
            phases.append(sum(terms[1:], terms[0]))
        rows.append(jnp.stack(phases, 3))
    return jnp.stack(rows, 2).reshape(n, 2 * h, 2 * w, f)


def _conv(
    x: jax.Array, kernel: jax.Array, stride: int, padding: Any, lhs_dilation: int, precision: Any
) -> jax.Array:
    return lax.conv_general_dilated(
        x,
        kernel,
        window_strides=(stride, stride),
        padding=padding,
        lhs_dilation=(lhs_dilation, lhs_dilation),
        dimension_numbers=_DIMS,
        precision=precision,
    )


def down_conv(
    x: jax.Array,
    kernel: jax.Array,
    impl: str = "auto",
    precision: Any = None,
    row_pairs: bool | None = None,
) -> jax.Array:
    """4x4 stride-2 convolution with padding 1 (PyTorch ``Conv2d(4, 2, 1)``), no bias.

    `row_pairs` chooses the "matmul" impl's patch form: True the row-pair patches, False the
    full patches, None (default) by size (`uses_row_pairs`); other impls ignore it. Both forms
    give the same function; the choice is for speed (and for tests of either form)."""
    impl = resolve_impl(impl)
    if impl == "xla":
        return _conv(x, kernel, 2, ((1, 1), (1, 1)), 1, precision)
    h, w = x.shape[1:3]
    if h < 2 or w < 2:
        raise ValueError(f"DownConv needs spatial size >= 2, got {h}x{w}")
    # Output size is H // 2; the padded input holds exactly 2 * (H // 2 + 1) rows
    # (for odd H the last row is never read by a 4x4/2 window, so it is dropped).
    ho, wo = h // 2, w // 2
    x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))[:, : 2 * ho + 2, : 2 * wo + 2]
    if impl == "s2d":
        return _conv(space_to_depth(x), down_kernel_s2d(kernel), 1, "VALID", 1, precision)
    if row_pairs is None:
        row_pairs = uses_row_pairs(x.shape[0], ho, wo, x.shape[-1])
    if row_pairs:
        return _down_row_pairs(x, kernel, ho, wo, precision)
    k = kernel.reshape(-1, kernel.shape[-1])
    return _matmul(_down_patches(x, ho, wo), k, precision)


def up_conv(
    x: jax.Array, kernel: jax.Array, impl: str = "auto", precision: Any = None
) -> jax.Array:
    """4x4 stride-2 transposed convolution (PyTorch ``ConvTranspose2d(4, 2, 1)``), no bias."""
    impl = resolve_impl(impl)
    if impl == "xla":
        return _conv(x, kernel, 1, ((2, 2), (2, 2)), 2, precision)
    if impl == "matmul":
        return _up_matmul(x, kernel, precision)
    x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    return depth_to_space(_conv(x, up_kernel_s2d(kernel), 1, "VALID", 1, precision))[:, 1:-1, 1:-1]


def _same_weight_grad(x: jax.Array, dy: jax.Array, kh: int, kw: int, precision: Any) -> jax.Array:
    """The kernel gradient ``[kh, kw, C, F]`` of a stride-1 SAME convolution of x [N, H, W, C]
    with output cotangent dy [N, H, W, F]: per kernel row, ``dY^T @ patches`` with the kw
    column-shifted slices of the padded input side by side, a row-major [F, M] @ [M, kw*C]
    product (``dY^T`` materialised once; the barrier keeps XLA from folding it back)."""
    n, h, w, c = x.shape
    f = dy.shape[-1]
    xp = jnp.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    dyt = lax.optimization_barrier(dy.reshape(-1, f).T)
    rows = []
    for i in range(kh):
        cols = jnp.concatenate([xp[:, i : i + h, j : j + w] for j in range(kw)], axis=-1)
        rows.append(jnp.matmul(dyt, cols.reshape(-1, kw * c), precision=precision))
    return jnp.stack(rows).reshape(kh, f, kw, c).transpose(0, 2, 3, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _same_conv_fast(x: jax.Array, kernel: jax.Array, precision: Any) -> jax.Array:
    """`same_conv`'s "matmul" impl: XLA's forward convolution, derivatives on fast kernels
    (module docstring). Differentiable to any order: its VJP calls it again."""
    return _conv(x, kernel, 1, "SAME", 1, precision)


def _same_conv_fast_fwd(x: jax.Array, kernel: jax.Array, precision: Any) -> tuple:
    return _conv(x, kernel, 1, "SAME", 1, precision), (x, kernel)


def _same_conv_fast_bwd(precision: Any, residuals: tuple, dy: jax.Array) -> tuple:
    x, kernel = residuals
    # The barrier keeps the flip and transpose a kernel of its own: folded into the
    # convolution's dimension numbers they would make it a slow transposed-kernel one again.
    flipped = lax.optimization_barrier(kernel[::-1, ::-1].transpose(0, 1, 3, 2))
    kh, kw = kernel.shape[:2]
    return (_same_conv_fast(dy, flipped, precision),
            _same_weight_grad(x, dy, kh, kw, precision).astype(kernel.dtype))


def _varying_alike(*arrays: jax.Array) -> list[jax.Array]:
    """Inside `shard_map`: `arrays` cast to vary along every manual mesh axis any of them varies
    along (a replicated kernel meeting per-device data), so that a custom VJP's cotangents have
    their primals' types; JAX's transpose of the cast then sums a kernel's gradient over the
    data axis, and only where that gradient is wanted. Unchanged elsewhere."""
    def vma(a: jax.Array) -> frozenset:  # jax >= 0.8: the manual axes the value varies along
        return frozenset(getattr(getattr(jax.typeof(a), "manual_axis_type", None), "varying", ()))

    union = frozenset().union(*map(vma, arrays))
    return [lax.pcast(a, tuple(sorted(union - vma(a))), to="varying") if union - vma(a) else a
            for a in arrays]


_same_conv_fast.defvjp(_same_conv_fast_fwd, _same_conv_fast_bwd)


def same_conv(x: jax.Array, kernel: jax.Array, impl: str = "auto", precision: Any = None
              ) -> jax.Array:
    """k x k stride-1 convolution with SAME padding, k odd (``nn.Conv(padding="SAME")``), no
    bias; "xla"/"s2d": XLA's derivatives, "matmul": `_same_conv_fast`'s."""
    kh, kw = kernel.shape[:2]
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"SameConv needs an odd kernel size, got {kh}x{kw}")
    if resolve_impl(impl) == "matmul":
        return _same_conv_fast(*_varying_alike(x, kernel), precision)
    return _conv(x, kernel, 1, "SAME", 1, precision)


class _Conv(nn.Module):
    """Shared attributes and parameters of `SameConv`, `DownConv` and `UpConv`."""

    features: int
    impl: str = "auto"
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: Any = None
    kernel_init: Initializer = nn.initializers.lecun_normal()
    bias_init: Initializer = nn.initializers.zeros_init()

    def _params(self, x: jax.Array, k: int) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """(x, kernel [k, k, C, features], bias or None), promoted to the compute dtype."""
        resolve_impl(self.impl)
        if x.ndim != 4:
            raise ValueError(f"expected NHWC input, got shape {x.shape}")
        kernel = self.param(
            "kernel", self.kernel_init, (k, k, x.shape[-1], self.features), self.param_dtype
        )
        bias = (
            self.param("bias", self.bias_init, (self.features,), self.param_dtype)
            if self.use_bias
            else None
        )
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
        return x, kernel, bias


class SameConv(_Conv):
    """``nn.Conv(features, (k, k), padding="SAME")`` on NHWC for odd k = `kernel_size`, with
    `same_conv`'s impls. Other attributes as `DownConv`. Parameters exactly as ``nn.Conv``'s."""

    kernel_size: int = 3

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, kernel, bias = self._params(x, self.kernel_size)
        y = same_conv(x, kernel, self.impl, self.precision)
        return y if bias is None else y + bias


class DownConv(_Conv):
    """PyTorch ``Conv2d(kernel_size=4, stride=2, padding=1)`` on NHWC: [N,H,W,C] -> [N,H/2,W/2,F].

    Attributes: features, impl ("auto" default, "matmul", "s2d" or "xla"), use_bias,
    dtype (compute), param_dtype, precision, kernel_init, bias_init, row_pairs (`down_conv`'s:
    None, the default, chooses by size). Parameters as ``nn.Conv``.
    """

    row_pairs: bool | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, kernel, bias = self._params(x, 4)
        y = down_conv(x, kernel, self.impl, self.precision, self.row_pairs)
        return y if bias is None else y + bias


class UpConv(_Conv):
    """PyTorch ``ConvTranspose2d(kernel_size=4, stride=2, padding=1)`` on NHWC: -> [N,2H,2W,F].

    Attributes as `DownConv`. Parameters as ``nn.ConvTranspose`` (``transpose_kernel=False``);
    import PyTorch weights with `torch_conv_transpose_weight_to_flax`.
    """

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, kernel, bias = self._params(x, 4)
        y = up_conv(x, kernel, self.impl, self.precision)
        return y if bias is None else y + bias
