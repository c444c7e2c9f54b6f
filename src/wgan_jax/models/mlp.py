"""MLP generator and critic: the WGAN-GP reference toy nets, also for small images.

For images (`out_shape` set) the generator ends in tanh and reshapes to the image; the critic
flattens its input. Fast on CPUs (matrix products only), e.g. for 8x8 stacked digits.
With `num_classes > 0` both take `(inputs, labels)`: the generator concatenates a label
embedding to z, the critic is a projection critic (`wgan_jax.models.conditional`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from wgan_jax.models.conditional import latent_with_label, projection_score, split_inputs
from wgan_jax.models.spectral import critic_layer

__all__ = ["MLPGenerator", "MLPCritic"]


class MLPGenerator(nn.Module):
    """z -> `depth` ReLU Dense layers of `width` -> Dense(out_dim); optional BatchNorm.

    With `out_shape` (e.g. an image's (H, W, C)) the output is tanh'ed into [-1, 1] and
    reshaped to `[B, *out_shape]`; without it, it is linear `[B, out_dim]` (toy data).
    """

    out_dim: int = 2
    width: int = 512
    depth: int = 3
    norm: str = "none"  # "batch" or "none"
    axis_name: str | None = "data"
    dtype: DTypeLike = jnp.float32
    out_shape: tuple[int, ...] = ()
    num_classes: int = 0  # > 0: z is (z, labels); a label embedding is concatenated to z

    @nn.compact
    def __call__(self, z: jax.Array, train: bool = True) -> jax.Array:
        z, labels = split_inputs(z, self.num_classes)
        h = latent_with_label(z.astype(self.dtype), labels, self.num_classes)
        for i in range(self.depth):
            # No bias before BatchNorm: it would cancel, its true gradient is 0, and Adam
            # would turn float noise in that gradient into full-size, device-dependent steps.
            h = nn.Dense(
                self.width, use_bias=self.norm != "batch", dtype=self.dtype, name=f"Dense_{i}"
            )(h)
            if self.norm == "batch":
                h = nn.BatchNorm(
                    use_running_average=not train, axis_name=self.axis_name, dtype=self.dtype,
                    use_fast_variance=False,
                )(h)
            h = nn.relu(h)
            self.sow("intermediates", f"relu_{i}", h)
        out = nn.Dense(self.out_dim, dtype=self.dtype, name=f"Dense_{self.depth}")(h)
        out = out.astype(jnp.float32)
        if self.out_shape:
            out = jnp.tanh(out).reshape(z.shape[0], *self.out_shape)
            self.sow("intermediates", "tanh", out)
        return out


class MLPCritic(nn.Module):
    """x -> `depth` ReLU Dense layers of `width` -> Dense(1); scores of shape [B].

    `norm="spectral"` normalises every Dense (see `wgan_jax.models.spectral`); `train` then
    says whether the power-iteration state is updated.
    """

    width: int = 512
    depth: int = 3
    norm: str = "none"  # "none", "layer" or "spectral"
    dtype: DTypeLike = jnp.float32
    axis_name: str | None = "data"  # the data-parallel axis (spectral norm's state only)
    num_classes: int = 0  # > 0: x is (x, labels); a projection critic

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        x, labels = split_inputs(x, self.num_classes)
        def dense(features: int, i: int, h: jax.Array) -> jax.Array:
            layer = nn.Dense(features, dtype=self.dtype, name=f"Dense_{i}")
            return critic_layer(layer, h, norm=self.norm, train=train, axis_name=self.axis_name)

        h = x.reshape(x.shape[0], -1).astype(self.dtype)
        for i in range(self.depth):
            h = dense(self.width, i, h)
            if self.norm == "layer":
                h = nn.LayerNorm(dtype=self.dtype)(h)
            h = nn.relu(h)
        out = dense(1, self.depth, h)[:, 0]
        if labels is not None:
            out = projection_score(self, h, out, labels, self.num_classes)
        return out.astype(jnp.float32)
