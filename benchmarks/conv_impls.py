"""DownConv / UpConv impls on the DCGAN-32 nets, against PyTorch eager: the layer table.

    python benchmarks/conv_impls.py [--calls 25] [--threads 2] [--impls xla,s2d,matmul]

Times, for each `wgan_jax.models.layers` impl, three jitted functions of the DCGAN-32 nets of
`configs/bench_dcgan32.py` (DIM 32, batch 32) and the same three in PyTorch eager when torch
is installed (the nets of `torch_reference.py`): the critic penalty's double backward (the
gradient with respect to the critic's parameters of the two-sided penalty at 32 inputs), the
critic's forward + backward, and the generator's forward + backward (BatchNorm in training
mode). Calls are interleaved across impls so that a slow spell hits all of them; the table
shows the median wall time per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from wgan_jax import penalties
from wgan_jax.models.dcgan import DCGANCritic, DCGANGenerator

BATCH, DIM, Z = 32, 32, 128
CASES = ("critic GP double backward", "critic forward + backward", "generator forward + backward")


def jax_cases(impl: str) -> list[Callable[[], object]]:
    """The three timed calls for one impl, compiled, with their inputs bound."""
    critic = DCGANCritic(width=DIM, conv_impl=impl)
    gen = DCGANGenerator(image_size=32, channels=3, width=DIM, axis_name=None, conv_impl=impl)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(-1, 1, (BATCH, 32, 32, 3)), jnp.float32)
    z = jnp.asarray(rng.normal(size=(BATCH, Z)), jnp.float32)
    cp = critic.init(jax.random.key(0), x)
    gv = gen.init(jax.random.key(1), z)

    def gen_loss(params):
        out, _ = gen.apply({**gv, "params": params}, z, mutable=["batch_stats"])
        return jnp.mean(out)

    def penalty(p, x):
        norms = penalties.input_gradient_norms(lambda x: critic.apply(p, x), x)
        return penalties.penalty_from_norms(norms)

    gp = jax.jit(jax.grad(penalty))
    fb = jax.jit(jax.grad(lambda p, x: jnp.mean(critic.apply(p, x))))
    gfb = jax.jit(jax.grad(gen_loss))
    calls = [lambda: gp(cp, x), lambda: fb(cp, x), lambda: gfb(gv["params"])]
    return [lambda c=c: jax.block_until_ready(c()) for c in calls]


def torch_cases(threads: int) -> list[Callable[[], object]] | None:
    """The same calls in PyTorch eager (None when torch is not installed)."""
    try:
        import torch
    except ImportError:
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_reference import DCGANGenerator as TorchGenerator
    from torch_reference import dcgan_critic

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    critic, gen = dcgan_critic(DIM), TorchGenerator(Z, DIM)
    x = torch.rand(BATCH, 3, 32, 32) * 2 - 1
    z = torch.randn(BATCH, Z)

    def gp():
        xh = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(critic(xh).sum(), xh, create_graph=True)
        loss = ((g.flatten(1).norm(dim=1) - 1) ** 2).mean()
        return torch.autograd.grad(loss, list(critic.parameters()), allow_unused=True)

    def fb():
        return torch.autograd.grad(critic(x).mean(), list(critic.parameters()))

    def gfb():
        return torch.autograd.grad(gen(z).mean(), list(gen.parameters()))

    return [gp, fb, gfb]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--impls", default="xla,s2d,matmul")
    args = parser.parse_args()
    columns = {impl: jax_cases(impl) for impl in args.impls.split(",")}
    theirs = torch_cases(args.threads)
    if theirs is not None:
        columns[f"torch eager, {args.threads} threads"] = theirs
    times: dict[str, list[list[float]]] = {k: [[] for _ in CASES] for k in columns}
    for calls in columns.values():
        for call in calls:
            call()
    for _ in range(args.calls):
        for name, calls in columns.items():
            for i, call in enumerate(calls):
                t = time.perf_counter()
                call()
                times[name][i].append(time.perf_counter() - t)
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, median of {args.calls} calls")
    print("| case | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for i, case in enumerate(CASES):
        cells = [f"{statistics.median(times[k][i]) * 1e3:.1f} ms" for k in columns]
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
