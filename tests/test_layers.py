"""DownConv/UpConv: every impl computes the same function, with the same parameters."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wgan_jax.models import layers
from wgan_jax.models.layers import DownConv, UpConv

FAST_IMPLS = ("s2d", "matmul")
# (spatial size, input channels, output channels): sizes 4..64, odd and even, channels 1/3/4.
CASES = [(4, 1, 3), (7, 3, 4), (64, 4, 1)]


def _setup(cls, size, cin, cout, impl="xla", seed=0):
    x = jax.random.normal(jax.random.key(seed), (2, size, size + 2, cin))
    params = cls(cout, impl=impl).init(jax.random.key(seed + 1), x)
    # Non-zero bias so that its gradient is checked on equal terms.
    params = jax.tree.map(lambda p: p + 0.1 * jnp.ones_like(p), params)
    return x, params


def _close(actual, expected, rtol=1e-5):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape
        scale = max(1.0, float(np.abs(e).max()))
        np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * scale)


def _derivatives(module, params, x):
    """Values, input and parameter gradients, and the penalty's double backward (one jit)."""

    def smooth(p, x):
        y = module.apply(p, x)
        w = jnp.sin(jnp.arange(y.size, dtype=y.dtype)).reshape(y.shape)
        return jnp.sum(jnp.tanh(y) * w)

    def penalty(p, x):
        g = jax.grad(smooth, argnums=1)(p, x)
        norms = jnp.sqrt(jnp.sum(g**2, axis=(1, 2, 3)) + 1e-12)
        return jnp.mean((norms - 1.0) ** 2)

    def everything(p, x):
        return (
            module.apply(p, x),
            jax.grad(smooth, argnums=(0, 1))(p, x),
            jax.grad(penalty, argnums=(0, 1))(p, x),
        )

    return jax.jit(everything)(params, x)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [DownConv, UpConv])
@pytest.mark.parametrize("size,cin,cout", CASES)
def test_fast_impls_match_xla(cls, size, cin, cout):
    x, params = _setup(cls, size, cin, cout)
    expected = _derivatives(cls(cout, impl="xla"), params, x)
    for impl in FAST_IMPLS:
        _close(_derivatives(cls(cout, impl=impl), params, x), expected)


@pytest.mark.slow
@pytest.mark.parametrize("row_pairs", [True, False])
@pytest.mark.parametrize("size,cin,cout", [(4, 2, 3), (17, 3, 5)])
def test_down_matmul_both_patch_forms_match_xla(row_pairs, size, cin, cout):
    """`DownConv`'s matmul impl with row-pair patches and with full patches, at even and odd
    sizes, against the strided convolution: values, gradients, the double backward."""
    x, params = _setup(DownConv, size, cin, cout)
    layer = DownConv(cout, impl="matmul", row_pairs=row_pairs)
    # The form asked for is the one computed: one product F wide (full patches) or 2F wide
    # (row pairs, one row of blocks more).
    jaxpr = str(jax.make_jaxpr(layer.apply)(params, x))
    (shape,) = re.findall(r"f32\[([\d,]+)\] = dot_general", jaxpr)
    ho, wo = size // 2, (size + 2) // 2
    assert shape == (f"2,{ho + 1},{wo},{2 * cout}" if row_pairs else f"2,{ho},{wo},{cout}")
    expected = _derivatives(DownConv(cout, impl="xla"), params, x)
    _close(_derivatives(layer, params, x), expected)


def test_down_row_pairs_by_default_only_for_large_patch_matrices():
    """The size rule behind `row_pairs=None`: row pairs from 8 output rows and 2**21 patch
    elements (the 64 px RGBA DCGAN's first layers), full patches below (DCGAN-32's)."""
    assert layers.uses_row_pairs(64, 32, 32, 4)  # 64 px RGBA input, batch 64: 4.2M elements
    assert not layers.uses_row_pairs(64, 16, 16, 3)  # 32 px RGB, batch 64: 0.8M elements
    assert not layers.uses_row_pairs(10**6, 4, 4, 64)  # too few rows however large


@pytest.mark.parametrize("size,cin,cout", [(4, 1, 3), (7, 3, 8)])
def test_xla_down_equals_nn_conv(size, cin, cout):
    x, params = _setup(DownConv, size, cin, cout)
    ref = nn.Conv(cout, (4, 4), strides=(2, 2), padding=((1, 1), (1, 1)))
    assert jax.tree.map(jnp.shape, ref.init(jax.random.key(0), x)) == jax.tree.map(
        jnp.shape, params
    )
    y = DownConv(cout, impl="xla").apply(params, x)
    assert y.shape == (2, size // 2, (size + 2) // 2, cout)
    _close(y, ref.apply(params, x), rtol=1e-6)


@pytest.mark.parametrize("size,cin,cout", [(4, 1, 3), (7, 3, 8)])
def test_xla_up_equals_nn_conv_transpose(size, cin, cout):
    x, params = _setup(UpConv, size, cin, cout)
    ref = nn.ConvTranspose(cout, (4, 4), strides=(2, 2), padding=((2, 2), (2, 2)))
    assert jax.tree.map(jnp.shape, ref.init(jax.random.key(0), x)) == jax.tree.map(
        jnp.shape, params
    )
    y = UpConv(cout, impl="xla").apply(params, x)
    assert y.shape == (2, 2 * size, 2 * (size + 2), cout)
    _close(y, ref.apply(params, x), rtol=1e-6)


@pytest.mark.parametrize("cls", [DownConv, UpConv])
def test_parameter_trees_identical_across_impls(cls):
    x = jnp.zeros((1, 8, 8, 3))
    trees = {
        impl: cls(5, impl=impl).init(jax.random.key(0), x) for impl in ("xla", "s2d", "matmul")
    }
    for tree in trees.values():
        assert jax.tree.map(jnp.shape, tree) == {"params": {"kernel": (4, 4, 3, 5), "bias": (5,)}}
        _close(tree, trees["xla"], rtol=0)


def test_auto_resolves_per_backend():
    expected = "matmul" if jax.default_backend() == "cpu" else "s2d"
    assert layers.resolve_impl("auto") == expected
    assert layers.resolve_impl("xla") == "xla"


@pytest.mark.parametrize("cls", [DownConv, UpConv])
def test_unknown_impl_and_bad_rank_raise(cls):
    with pytest.raises(ValueError, match="unknown impl"):
        cls(2, impl="winograd").init(jax.random.key(0), jnp.zeros((1, 4, 4, 1)))
    with pytest.raises(ValueError, match="NHWC"):
        cls(2).init(jax.random.key(0), jnp.zeros((4, 4, 1)))


@pytest.mark.parametrize("cls", [DownConv, UpConv])
def test_no_bias_and_compute_dtype(cls):
    x = jnp.ones((1, 8, 8, 3))
    params = cls(4, use_bias=False).init(jax.random.key(0), x)
    assert set(params["params"]) == {"kernel"}
    y = cls(4, use_bias=False, dtype=jnp.bfloat16).apply(params, x)
    assert y.dtype == jnp.bfloat16
    assert params["params"]["kernel"].dtype == jnp.float32


def test_space_to_depth_round_trip():
    x = jax.random.normal(jax.random.key(0), (2, 6, 8, 3))
    z = layers.space_to_depth(x)
    assert z.shape == (2, 3, 4, 12)
    np.testing.assert_array_equal(z[0, 1, 2, 3:6], x[0, 2, 5])  # phase (0, 1) of block (1, 2)
    np.testing.assert_array_equal(layers.depth_to_space(z), x)


def test_torch_geometry_and_weight_converters():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 10, 6)).astype(np.float32)  # NCHW
    conv = torch.nn.Conv2d(3, 5, 4, 2, 1)
    up = torch.nn.ConvTranspose2d(3, 5, 4, 2, 1)
    with torch.no_grad():
        y_down = conv(torch.from_numpy(x)).numpy().transpose(0, 2, 3, 1)
        y_up = up(torch.from_numpy(x)).numpy().transpose(0, 2, 3, 1)
    x_nhwc = jnp.asarray(x.transpose(0, 2, 3, 1))
    down_params = {
        "params": {
            "kernel": layers.torch_conv_weight_to_flax(conv.weight.detach().numpy()),
            "bias": conv.bias.detach().numpy(),
        }
    }
    up_params = {
        "params": {
            "kernel": layers.torch_conv_transpose_weight_to_flax(up.weight.detach().numpy()),
            "bias": up.bias.detach().numpy(),
        }
    }
    for impl in ("xla", "s2d", "matmul"):
        _close(DownConv(5, impl=impl).apply(down_params, x_nhwc), y_down)
        _close(UpConv(5, impl=impl).apply(up_params, x_nhwc), y_up)


@pytest.mark.parametrize("cls", [DownConv, UpConv])
def test_matmul_impl_supports_forward_mode(cls):
    """The custom JVP of the matmul impl is the layer's true JVP (so jvp/jacfwd/hvp still work)."""
    x, params = _setup(cls, 6, 3, 4)
    dx = jax.random.normal(jax.random.key(7), x.shape)
    dp = jax.tree.map(lambda p: jnp.cos(jnp.arange(p.size, dtype=p.dtype)).reshape(p.shape), params)

    def jvp(impl):
        return jax.jvp(lambda p, x: cls(4, impl=impl).apply(p, x), (params, x), (dp, dx))

    _close(jvp("matmul"), jvp("xla"))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU code generation")
@pytest.mark.parametrize("cls", [DownConv, UpConv])
def test_matmul_impl_weight_gradient_is_a_row_major_product(cls):
    """No product in the compiled backward contracts its first operand's leading axis.

    That form (the weight gradient as XLA emits it for a plain matmul) runs on XLA:CPU at a
    quarter of the matmul peak; the matmul impl's JVP avoids it.
    """
    x, params = _setup(cls, 16, 32, 64)
    grad = jax.jit(jax.grad(lambda p, x: jnp.sum(cls(64, impl="matmul").apply(p, x) ** 2)))
    hlo = grad.lower(params, x).compile().as_text()
    assert " dot(" in hlo or "__ynn_fusion" in hlo
    assert "lhs_contracting_dims={0}" not in hlo


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU code generation")
def test_down_row_pairs_weight_gradient_is_a_row_major_product():
    """The row-pair form of `DownConv` keeps the matmul impl's row-major weight gradient."""
    x, params = _setup(DownConv, 16, 16, 32)
    layer = DownConv(32, impl="matmul", row_pairs=True)
    grad = jax.jit(jax.grad(lambda p, x: jnp.sum(layer.apply(p, x) ** 2)))
    hlo = grad.lower(params, x).compile().as_text()
    assert " dot(" in hlo or "__ynn_fusion" in hlo
    assert "lhs_contracting_dims={0}" not in hlo


@pytest.mark.slow
@pytest.mark.parametrize("k,size,cin,cout", [(3, 5, 3, 4), (3, 8, 4, 2), (1, 6, 3, 5)])
def test_same_conv_impls_match_nn_conv(k, size, cin, cout):
    """`SameConv` (the ResNet's layers) is ``nn.Conv(padding="SAME")`` with the same
    parameters, and its "matmul" impl's custom VJP gives the same values, input and parameter
    gradients and penalty double backward as XLA's own derivatives."""
    x = jax.random.normal(jax.random.key(0), (2, size, size + 1, cin))
    ref = nn.Conv(cout, (k, k), padding="SAME")
    params = jax.tree.map(lambda p: p + 0.1, ref.init(jax.random.key(1), x))
    for impl in ("xla", "matmul", "auto"):
        tree = layers.SameConv(cout, impl=impl, kernel_size=k).init(jax.random.key(1), x)
        assert jax.tree.map(jnp.shape, tree) == jax.tree.map(jnp.shape, params)
    expected = _derivatives(ref, params, x)
    for impl in ("xla", "matmul"):
        _close(_derivatives(layers.SameConv(cout, impl=impl, kernel_size=k), params, x),
               expected)
    with pytest.raises(ValueError, match="odd kernel"):
        layers.same_conv(x, jnp.zeros((2, 2, cin, cout)))


@pytest.mark.slow
def test_resnet_step_keeps_every_convolution_in_forward_layout():
    """In a compiled ResNet train step (penalty double backward inside `shard_map`), XLA's own
    derivatives bring weight-gradient (`f01b_i01o->...`) and transposed-kernel (`..._01oi->`)
    convolutions, which XLA:CPU runs as naive loops; with `SameConv`'s "matmul" impl only
    forward-layout ones (`b01f_01io->b01f`) remain."""
    import re

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from wgan_jax.config import apply_overrides, data_shape, get_config_schema
    from wgan_jax.state import create_train_state
    from wgan_jax.step import StepConfig, make_mesh, make_train_step
    from wgan_jax.train import build_gan

    def conv_labels(impl: str) -> set[str]:
        c = get_config_schema()
        apply_overrides(c, {"dataset": "digits", "image_size": 16, "num_channels": 1,
                            "model.kind": "resnet", "model.width": 8, "global_batch_size": 4,
                            "n_critic": 1, "model.conv_impl": impl, "diagnostics.level": "off"})
        mesh, shape, gan = make_mesh(), data_shape(c), build_gan(c)
        state = jax.eval_shape(lambda: create_train_state(gan, shape, 0, False))
        real = jax.ShapeDtypeStruct((1, 4, *shape), jnp.float32,
                                    sharding=NamedSharding(mesh, P(None, "data")))
        hlo = make_train_step(StepConfig.from_config(c), mesh, gan).lower(state, real)
        return set(re.findall(r"convolution\(.*dim_labels=([^,\s]+)", hlo.compile().as_text()))

    assert {"f01b_i01o->01bf", "b01f_01oi->b01f"} <= conv_labels("xla")
    assert conv_labels("matmul") == {"b01f_01io->b01f"}
