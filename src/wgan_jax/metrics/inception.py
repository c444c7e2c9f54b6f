"""The FID Inception-v3 network (pytorch-fid's variant of the 2015-12-05 TF graph) in Flax linen.

The network returns the 2048-d pool3 features used by FID/KID/PR/DC and the 1008-way logits
used by the Inception score. Its weights are never downloaded: ``convert_pytorch_fid_weights``
turns a local copy of pytorch-fid's ``pt_inception-2015-12-05`` state dict (a ``.pth`` file, a
``.npz`` of the same keys, or an in-memory mapping) into Flax variables. Module and parameter
names mirror the state dict's, so the conversion is a mechanical renaming and transposition.

Differences from torchvision's Inception-v3 that the FID variant keeps: 3x3 average pools in the
A, C and first E blocks exclude padding from the mean, the last E block max-pools instead of
average-pooling, and the classifier has 1008 outputs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["InceptionExtractor", "FIDInceptionV3", "convert_pytorch_fid_weights",
           "export_state_dict_npz", "resize_bilinear", "INPUT_SIZE", "FEATURE_DIM"]

#: The network's input size (images are resized to 299 x 299).
INPUT_SIZE = 299
NUM_CLASSES = 1008
#: The pool3 features' size (FID's features).
FEATURE_DIM = 2048
_BN_EPS = 1e-3

Padding = tuple[tuple[int, int], tuple[int, int]]


def _pad(ph: int, pw: int) -> Padding:
    return ((ph, ph), (pw, pw))


class BasicConv(nn.Module):
    """Conv (no bias) -> BatchNorm (running statistics, eps 1e-3) -> ReLU."""

    features: int
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: Padding = ((0, 0), (0, 0))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(
            self.features,
            self.kernel,
            self.strides,
            padding=self.padding,
            use_bias=False,
            name="conv",
        )(x)
        x = nn.BatchNorm(use_running_average=True, epsilon=_BN_EPS, name="bn")(x)
        return nn.relu(x)


def _avg_pool_3x3(x: jax.Array) -> jax.Array:
    return nn.avg_pool(x, (3, 3), (1, 1), padding=_pad(1, 1), count_include_pad=False)


def _max_pool_3x3_s2(x: jax.Array) -> jax.Array:
    return nn.max_pool(x, (3, 3), (2, 2), padding="VALID")


class InceptionA(nn.Module):
    """35x35 block (Mixed_5b/c/d)."""

    pool_features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = BasicConv(64, (1, 1), name="branch1x1")(x)
        b5 = BasicConv(48, (1, 1), name="branch5x5_1")(x)
        b5 = BasicConv(64, (5, 5), padding=_pad(2, 2), name="branch5x5_2")(b5)
        b3 = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        b3 = BasicConv(96, (3, 3), padding=_pad(1, 1), name="branch3x3dbl_2")(b3)
        b3 = BasicConv(96, (3, 3), padding=_pad(1, 1), name="branch3x3dbl_3")(b3)
        bp = BasicConv(self.pool_features, (1, 1), name="branch_pool")(_avg_pool_3x3(x))
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(nn.Module):
    """Grid reduction 35 -> 17 (Mixed_6a)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = BasicConv(384, (3, 3), (2, 2), name="branch3x3")(x)
        bd = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(96, (3, 3), padding=_pad(1, 1), name="branch3x3dbl_2")(bd)
        bd = BasicConv(96, (3, 3), (2, 2), name="branch3x3dbl_3")(bd)
        return jnp.concatenate([b3, bd, _max_pool_3x3_s2(x)], axis=-1)


class InceptionC(nn.Module):
    """17x17 block with factorised 7x7 convolutions (Mixed_6b..6e)."""

    channels_7x7: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c7 = self.channels_7x7
        b1 = BasicConv(192, (1, 1), name="branch1x1")(x)
        b7 = BasicConv(c7, (1, 1), name="branch7x7_1")(x)
        b7 = BasicConv(c7, (1, 7), padding=_pad(0, 3), name="branch7x7_2")(b7)
        b7 = BasicConv(192, (7, 1), padding=_pad(3, 0), name="branch7x7_3")(b7)
        bd = BasicConv(c7, (1, 1), name="branch7x7dbl_1")(x)
        bd = BasicConv(c7, (7, 1), padding=_pad(3, 0), name="branch7x7dbl_2")(bd)
        bd = BasicConv(c7, (1, 7), padding=_pad(0, 3), name="branch7x7dbl_3")(bd)
        bd = BasicConv(c7, (7, 1), padding=_pad(3, 0), name="branch7x7dbl_4")(bd)
        bd = BasicConv(192, (1, 7), padding=_pad(0, 3), name="branch7x7dbl_5")(bd)
        bp = BasicConv(192, (1, 1), name="branch_pool")(_avg_pool_3x3(x))
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(nn.Module):
    """Grid reduction 17 -> 8 (Mixed_7a)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = BasicConv(192, (1, 1), name="branch3x3_1")(x)
        b3 = BasicConv(320, (3, 3), (2, 2), name="branch3x3_2")(b3)
        b7 = BasicConv(192, (1, 1), name="branch7x7x3_1")(x)
        b7 = BasicConv(192, (1, 7), padding=_pad(0, 3), name="branch7x7x3_2")(b7)
        b7 = BasicConv(192, (7, 1), padding=_pad(3, 0), name="branch7x7x3_3")(b7)
        b7 = BasicConv(192, (3, 3), (2, 2), name="branch7x7x3_4")(b7)
        return jnp.concatenate([b3, b7, _max_pool_3x3_s2(x)], axis=-1)


class InceptionE(nn.Module):
    """8x8 block with split 3x3 convolutions (Mixed_7b average-pools, Mixed_7c max-pools)."""

    max_pool: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = BasicConv(320, (1, 1), name="branch1x1")(x)
        b3 = BasicConv(384, (1, 1), name="branch3x3_1")(x)
        b3 = jnp.concatenate(
            [
                BasicConv(384, (1, 3), padding=_pad(0, 1), name="branch3x3_2a")(b3),
                BasicConv(384, (3, 1), padding=_pad(1, 0), name="branch3x3_2b")(b3),
            ],
            axis=-1,
        )
        bd = BasicConv(448, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(384, (3, 3), padding=_pad(1, 1), name="branch3x3dbl_2")(bd)
        bd = jnp.concatenate(
            [
                BasicConv(384, (1, 3), padding=_pad(0, 1), name="branch3x3dbl_3a")(bd),
                BasicConv(384, (3, 1), padding=_pad(1, 0), name="branch3x3dbl_3b")(bd),
            ],
            axis=-1,
        )
        if self.max_pool:
            pooled = nn.max_pool(x, (3, 3), (1, 1), padding=_pad(1, 1))
        else:
            pooled = _avg_pool_3x3(x)
        bp = BasicConv(192, (1, 1), name="branch_pool")(pooled)
        return jnp.concatenate([b1, b3, bd, bp], axis=-1)


class FIDInceptionV3(nn.Module):
    """FID Inception-v3 on NHWC inputs in [-1, 1] (already resized; 299x299 for real FID).

    Returns ``{"pool": [N, 2048], "logits": [N, 1008]}``; any input of at least 75x75 runs.
    """

    @nn.compact
    def __call__(self, x: jax.Array) -> dict[str, jax.Array]:
        x = BasicConv(32, (3, 3), (2, 2), name="Conv2d_1a_3x3")(x)
        x = BasicConv(32, (3, 3), name="Conv2d_2a_3x3")(x)
        x = BasicConv(64, (3, 3), padding=_pad(1, 1), name="Conv2d_2b_3x3")(x)
        x = _max_pool_3x3_s2(x)
        x = BasicConv(80, (1, 1), name="Conv2d_3b_1x1")(x)
        x = BasicConv(192, (3, 3), name="Conv2d_4a_3x3")(x)
        x = _max_pool_3x3_s2(x)
        x = InceptionA(32, name="Mixed_5b")(x)
        x = InceptionA(64, name="Mixed_5c")(x)
        x = InceptionA(64, name="Mixed_5d")(x)
        x = InceptionB(name="Mixed_6a")(x)
        x = InceptionC(128, name="Mixed_6b")(x)
        x = InceptionC(160, name="Mixed_6c")(x)
        x = InceptionC(160, name="Mixed_6d")(x)
        x = InceptionC(192, name="Mixed_6e")(x)
        x = InceptionD(name="Mixed_7a")(x)
        x = InceptionE(max_pool=False, name="Mixed_7b")(x)
        x = InceptionE(max_pool=True, name="Mixed_7c")(x)
        pool = jnp.mean(x, axis=(1, 2))
        logits = nn.Dense(NUM_CLASSES, name="fc")(pool)
        return {"pool": pool, "logits": logits}


# ------------------------------------------------------------------------------- resizing
def bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]`` weights of PyTorch's bilinear resize (align_corners=False).

    Source coordinate (i + 0.5) * in / out - 0.5, clamped at 0, linear between the two nearest
    pixels (the upper clamped at the edge); no antialiasing, as in ``F.interpolate``.
    """
    f32 = np.float32
    scale = f32(size_in) / f32(size_out)  # float32 coordinates, as PyTorch computes them
    src = np.maximum(scale * (np.arange(size_out, dtype=f32) + f32(0.5)) - f32(0.5), f32(0.0))
    lo = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = (src - lo.astype(f32)).astype(np.float64)
    m = np.zeros((size_out, size_in))
    np.add.at(m, (np.arange(size_out), lo), 1.0 - frac)
    np.add.at(m, (np.arange(size_out), hi), frac)
    return m


def resize_bilinear(images: jax.Array, size: int = INPUT_SIZE) -> jax.Array:
    """Resize NHWC images to ``size`` x ``size`` exactly as pytorch-fid's ``F.interpolate``."""
    rows = jnp.asarray(bilinear_matrix(images.shape[1], size), images.dtype)
    cols = jnp.asarray(bilinear_matrix(images.shape[2], size), images.dtype)
    return jnp.einsum("ih,nhwc,jw->nijc", rows, images, cols, precision="highest")


# ------------------------------------------------------------------------------- weights
def _load_state_dict(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A flat name -> numpy array mapping from a mapping, a ``.npz`` or a torch ``.pth`` file."""
    if isinstance(source, Mapping):
        items = source.items()
    elif os.fspath(source).endswith(".npz"):
        with np.load(source) as f:
            return {k: np.asarray(f[k]) for k in f.files}
    else:
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                f"reading {os.fspath(source)!r} needs PyTorch; or pass a .npz of the state dict"
            ) from e
        items = torch.load(source, map_location="cpu", weights_only=True).items()
    out = {}
    for key, value in items:
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        out[key] = np.asarray(value)
    return out


def export_state_dict_npz(
    source: str | os.PathLike | Mapping[str, Any], npz_path: str | os.PathLike
) -> None:
    """Save a state dict (e.g. the pytorch-fid ``.pth``) as a ``.npz`` usable without PyTorch."""
    np.savez(npz_path, **_load_state_dict(source))  # type: ignore[arg-type]


def _set(tree: dict, path: tuple[str, ...], value: np.ndarray) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def convert_pytorch_fid_weights(
    state_dict_path_or_dict: str | os.PathLike | Mapping[str, Any],
) -> dict[str, Any]:
    """Flax variables ``{"params", "batch_stats"}`` of ``FIDInceptionV3`` from pytorch-fid weights.

    Accepts the ``pt_inception-2015-12-05`` state dict (path to the ``.pth``, a ``.npz`` with the
    same keys, or a mapping of arrays/tensors). Conv kernels OIHW -> HWIO, the fc matrix is
    transposed, BN weight/bias/running_mean/running_var -> scale/bias/mean/var. ``AuxLogits.*`` and
    ``num_batches_tracked`` entries are ignored; missing or mis-shaped entries raise ValueError.
    """
    state = _load_state_dict(state_dict_path_or_dict)
    variables: dict[str, dict] = {"params": {}, "batch_stats": {}}
    for key, value in state.items():
        parts = tuple(key.split("."))
        if parts[0] == "AuxLogits" or parts[-1] == "num_batches_tracked":
            continue
        value = np.asarray(value, dtype=np.float32)
        *module, leaf = parts
        if module[-1:] == ["conv"] and leaf == "weight":
            _set(variables["params"], (*module, "kernel"), value.transpose(2, 3, 1, 0))
        elif module[-1:] == ["bn"] and leaf in ("weight", "bias"):
            name = "scale" if leaf == "weight" else "bias"
            _set(variables["params"], (*module, name), value)
        elif module[-1:] == ["bn"] and leaf in ("running_mean", "running_var"):
            name = "mean" if leaf == "running_mean" else "var"
            _set(variables["batch_stats"], (*module, name), value)
        elif module == ["fc"] and leaf in ("weight", "bias"):
            _set(
                variables["params"],
                ("fc", "kernel" if leaf == "weight" else "bias"),
                value.T if leaf == "weight" else value,
            )
        else:
            raise ValueError(f"unexpected entry {key!r} in the FID Inception state dict")
    _check_against_model(variables)
    return variables


@functools.cache
def _expected_shapes() -> dict[str, tuple[int, ...]]:
    """Variable path -> shape of an initialised ``FIDInceptionV3`` (traced once, not run)."""
    expected = jax.eval_shape(
        FIDInceptionV3().init, jax.random.key(0), jnp.zeros((1, 75, 75, 3), jnp.float32)
    )
    return {
        jax.tree_util.keystr(p): x.shape
        for p, x in jax.tree_util.tree_leaves_with_path(dict(expected))
    }


def _check_against_model(variables: dict[str, Any]) -> None:
    want = _expected_shapes()
    got = {
        jax.tree_util.keystr(p): x.shape for p, x in jax.tree_util.tree_leaves_with_path(variables)
    }
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        raise ValueError(
            f"state dict does not match the FID Inception: missing {missing[:3]}, extra {extra[:3]}"
        )
    for name, shape in want.items():
        if got[name] != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {got[name]}")


# ------------------------------------------------------------------------------- extractor
class InceptionExtractor:
    """Batched, jitted pool3 features and class probabilities of images in [-1, 1].

    Images are ``[N, H, W, C]`` with C = 3 (C = 1 is repeated to three channels); they are
    resized to 299x299 like pytorch-fid. The last partial batch is padded, so only one shape
    is ever compiled.

    `network` is the function ``(variables, images [B, H, W, 3]) -> {"pool", "logits"}`` the
    batches go through; None (the default) is the FID Inception on 299x299 resized images. Any
    other (a stand-in in tests, say) gets the same batching, padding and grey-to-RGB handling.
    """

    def __init__(
        self,
        variables: Mapping[str, Any],
        batch_size: int = 50,
        network: Callable[..., dict[str, Any]] | None = None,
    ) -> None:
        self.variables = jax.tree_util.tree_map(jnp.asarray, dict(variables))
        self.batch_size = batch_size
        model = FIDInceptionV3()

        def apply(variables: Any, images: jax.Array) -> dict[str, jax.Array]:
            # Full float32 matmuls/convs also on TPU, where the default would use bfloat16 passes.
            with jax.default_matmul_precision("highest"):
                return cast(dict[str, jax.Array], model.apply(variables, resize_bilinear(images)))

        self._apply: Callable[..., dict[str, Any]] = network or jax.jit(apply)

    @classmethod
    def from_pytorch_fid_weights(
        cls, state_dict_path_or_dict: str | os.PathLike | Mapping[str, Any], batch_size: int = 50
    ) -> InceptionExtractor:
        """Build from a local pytorch-fid state dict (see ``convert_pytorch_fid_weights``)."""
        return cls(convert_pytorch_fid_weights(state_dict_path_or_dict), batch_size)

    def _run(self, images: np.ndarray) -> dict[str, np.ndarray]:
        images = np.asarray(images, dtype=np.float32)
        if images.ndim != 4 or images.shape[-1] not in (1, 3):
            raise ValueError(f"images must be [N, H, W, 1 or 3], got {images.shape}")
        if images.shape[-1] == 1:
            images = np.repeat(images, 3, axis=-1)
        outs: dict[str, list[np.ndarray]] = {"pool": [], "logits": []}
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size]
            n = len(batch)
            if n < self.batch_size:
                pad = np.zeros((self.batch_size - n, *batch.shape[1:]), batch.dtype)
                batch = np.concatenate([batch, pad])
            result = self._apply(self.variables, batch)
            for key in outs:
                outs[key].append(np.asarray(result[key])[:n])
        return {k: np.concatenate(v) for k, v in outs.items()}

    def features(self, images: np.ndarray) -> np.ndarray:
        """2048-d pool3 features ``[N, 2048]`` (float32)."""
        return self._run(images)["pool"]

    def features_and_probs(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pool3 features and softmax class probabilities ``[N, 1008]`` in one pass."""
        out = self._run(images)
        return out["pool"], np.asarray(jax.nn.softmax(out["logits"].astype(np.float64), axis=-1))
