"""The PyTorch yardstick times the same networks as ours (torch only).

For each bench model: the torch generator's and critic's parameters, written in Flax's layout
(`torch_reference.flax_layout_shapes`), equal our nets' parameters in their creation order (a
missing bias, an extra norm, another width, kernel size or shortcut conv fails it); and with
our weights copied in, the torch nets compute our outputs (another padding, stride,
upsampling, pooling, activation or block order fails it). BatchNorm runs in inference mode.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_repo_file

from wgan_jax.config import data_shape
from wgan_jax.train import build_gan

torch = pytest.importorskip("torch")

MODELS = ("toy", "dcgan32", "dcgan64", "resnet32")


def _paths_in_order(params, prefix=()) -> list[tuple[str, ...]]:
    """Leaf paths in creation order (Flax's init dicts keep it; jax.tree sorts keys)."""
    out = []
    for name, value in params.items():
        path = (*prefix, name)
        out += _paths_in_order(value, path) if hasattr(value, "items") else [path]
    return out


def _init(model, example):
    """(params, state, params' leaves in creation order): traced once for the order, then
    initialised jitted (eager initialisation of the ResNet costs seconds)."""
    order = []

    def init(key, x):
        params, state = model.init(key, x)
        order.append(_paths_in_order(params))
        return params, state

    params, state = jax.jit(init)(jax.random.PRNGKey(0), example)
    leaves = []
    for path in order[0]:
        node = params
        for name in path:
            node = node[name]
        leaves.append(node)
    return params, state, leaves


def _copy_into(module, params: list, reshaped_output: bool, flattened_input: bool) -> None:
    """Our `params` (leaves in creation order) into the torch `module` (same order). The first
    Linear of an image generator feeds a reshape to [4, 4, C] (torch: [C, 4, 4]) and the last
    Linear of the DCGAN critic reads a flattened [4, 4, C] (torch: [C, 4, 4]): their weights
    are permuted to match."""
    nn = torch.nn
    leaves = iter(params)
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for sub in module.modules():
            for name, p in sub.named_parameters(recurse=False):
                a = np.asarray(next(leaves))
                if name == "weight" and isinstance(sub, nn.Linear):
                    if sub is linears[0] and reshaped_output:
                        a = a.reshape(a.shape[0], 4, 4, -1).transpose(0, 3, 1, 2)
                    if sub is linears[-1] and flattened_input:
                        a = a.reshape(4, 4, -1, a.shape[-1]).transpose(2, 0, 1, 3)
                    a = a.reshape(-1, p.shape[0]).T
                elif name == "weight" and isinstance(sub, nn.ConvTranspose2d):
                    a = a[::-1, ::-1].transpose(2, 3, 0, 1)
                elif name == "weight" and isinstance(sub, nn.Conv2d):
                    a = a.transpose(3, 2, 0, 1)
                p.copy_(torch.from_numpy(np.array(a)))


@pytest.mark.parametrize("model", MODELS)
def test_torch_nets_have_our_parameters(model):
    reference = load_repo_file("benchmarks/torch_reference.py")
    config = load_repo_file(f"configs/bench_{model}.py").get_config()
    gan = build_gan(config)
    g_params, g_state, g_leaves = _init(gan.generator, jnp.zeros((2, gan.z_dim)))
    d_params, d_state, d_leaves = _init(gan.critic, jnp.zeros((2, *data_shape(config))))
    setting = reference.SETTINGS[model]
    assert (setting.batch, setting.n_critic, setting.z_dim, setting.penalty_weight) == (
        config.global_batch_size, config.n_critic, config.model.z_dim, config.penalty_weight
    )
    if model != "toy":
        assert reference.IMAGES[model] == (
            config.image_size, config.num_channels, config.model.width
        )
    generator, critic = reference.build_models(model)
    for ours, leaves, theirs in ((g_params, g_leaves, generator), (d_params, d_leaves, critic)):
        assert reference.flax_layout_shapes(theirs) == [tuple(x.shape) for x in leaves]
        assert sum(p.numel() for p in theirs.parameters()) == sum(
            int(jnp.size(x)) for x in jax.tree.leaves(ours)
        )

    image = model != "toy"
    _copy_into(generator, g_leaves, reshaped_output=image, flattened_input=False)
    _copy_into(critic, d_leaves, reshaped_output=False, flattened_input=model.startswith("dcgan"))
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, gan.z_dim)).astype(np.float32)
    x = rng.uniform(-1, 1, size=(3, *data_shape(config))).astype(np.float32)
    ours_g = np.asarray(jax.jit(partial(gan.generator.apply, train=False))(g_params, g_state, z)[0])
    ours_d = np.asarray(jax.jit(partial(gan.critic.apply, train=False))(d_params, d_state, x)[0])
    generator.eval()
    to_torch = (lambda a: a.transpose(0, 3, 1, 2)) if image else (lambda a: a)
    with torch.no_grad():
        theirs_g = generator(torch.from_numpy(z)).numpy()
        theirs_d = critic(torch.from_numpy(np.ascontiguousarray(to_torch(x)))).numpy()
    np.testing.assert_allclose(theirs_g, to_torch(ours_g), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(theirs_d.reshape(-1), ours_d, rtol=1e-4, atol=2e-5)
