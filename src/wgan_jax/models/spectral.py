"""Spectral normalisation of a critic's layers (Miyato et al. 2018), on Flax's `nn.SpectralNorm`.

`critic_layer(layer, x, norm=..., train=..., axis_name=...)` calls `layer(x)`; with
`norm == "spectral"` it calls it through `nn.SpectralNorm`, which divides every weight of two or
more dimensions by its largest singular value, estimated by one step of power iteration per call.
A kernel is viewed as a matrix with its output features last (`[-1, out]`: HWIO conv kernels,
including those of our `DownConv`, whose real `kernel` parameter is normalised before any
`impl` rearranges it); biases are left alone. Parameter paths stay those of the plain layer.

The power-iteration vector `u` and the last estimate `sigma` are model state, in the collection
`SPECTRAL_COLLECTION` (`{"SpectralNorm_i": {"<layer>/kernel/u": [1, out], ".../sigma": []}}`;
note that Flax's `init` stores each kernel already divided by its first, rough estimate):

* `train=True` (the critic's scoring passes in the train step) runs one power-iteration step from
  the stored `u`, normalises with the new estimate and stores `u` and `sigma` (the caller must
  apply with that collection mutable);
* `train=False` (the gradient penalty's input-gradient pass, evaluation) runs the same step from
  the stored `u` but stores nothing, so the penalty sees the weights the scoring pass saw and
  leaves the state alone.

Under `shard_map` with replicated parameters every device computes the same `u`, but JAX types it
as per-device ("varying") once the parameters were cast to varying for the loss; with `axis_name`
set, the new state is made replicated again with `lax.pmax` of the equal values (exact, and a few
hundred floats per pass), so it can leave the `shard_map` as a replicated output.
"""

from __future__ import annotations

import flax.linen as nn
import jax
from jax import lax

__all__ = ["critic_layer", "CRITIC_NORMS", "SPECTRAL_COLLECTION"]

#: The variable collection that holds spectral normalisation's power-iteration vectors.
SPECTRAL_COLLECTION = "spectral_norm"
CRITIC_NORMS = ("none", "layer", "spectral")  #: what every critic accepts (dcgan also "batch")


def critic_layer(
    layer: nn.Module,
    x: jax.Array,
    *,
    norm: str,
    train: bool,
    axis_name: str | None,
) -> jax.Array:
    """`layer(x)`, spectrally normalised when `norm == "spectral"` (call inside `nn.compact`).

    `axis_name`: the data-parallel mesh axis the caller runs under (`None` outside `shard_map`);
    only used when `train` is true.
    """
    if norm != "spectral":
        return layer(x)
    wrapped = nn.SpectralNorm(layer, collection_name=SPECTRAL_COLLECTION)
    y = wrapped(x, update_stats=train)
    if train and axis_name is not None and not wrapped.is_initializing():
        for name, value in wrapped.variables[SPECTRAL_COLLECTION].items():
            wrapped.put_variable(
                SPECTRAL_COLLECTION, name, lax.pmax(lax.stop_gradient(value), axis_name)
            )
    return y
