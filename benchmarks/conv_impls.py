"""DownConv / UpConv impls on the DCGAN-32 nets, against PyTorch eager: the layer table.

    python benchmarks/conv_impls.py [--calls 25] [--threads 2] [--impls xla,s2d,matmul]
        [--batch 32] [--json out.json]

Times, for each `wgan_jax.models.layers` impl, three jitted functions of the DCGAN-32 nets of
`configs/bench_dcgan32.py` (DIM 32, batch 32 unless `--batch`) and the same three in PyTorch
eager when torch is installed (the nets of `torch_reference.py`, on the GPU when JAX runs on
one and torch sees CUDA): the critic penalty's double backward (the gradient with respect to
the critic's parameters of the two-sided penalty at BATCH inputs), the critic's forward +
backward, and the generator's forward + backward (BatchNorm in training mode). Calls are
interleaved across impls so that a slow spell hits all of them; the table shows the median
wall time per call. Below it: the fastest impl per case and for one generator iteration
(5 x the two critic cases + the generator case, as with n_critic = 5), which is what
`model.conv_impl="auto"` should be on this platform (`wgan_jax.models.layers.AUTO_IMPLS`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU

import jax
import jax.numpy as jnp
import numpy as np

from wgan_jax import penalties
from wgan_jax.models import layers
from wgan_jax.models.dcgan import DCGANCritic, DCGANGenerator

BATCH, DIM, Z = 32, 32, 128
CASES = ("critic GP double backward", "critic forward + backward", "generator forward + backward")
WEIGHTS = (5, 5, 1)  # calls per generator iteration with n_critic = 5: the "iteration" estimate
IMPLS = ("xla", "s2d", "matmul")


def jax_cases(impl: str, batch: int = BATCH) -> list[Callable[[], object]]:
    """The three timed calls for one impl, compiled, with their inputs bound."""
    critic = DCGANCritic(width=DIM, conv_impl=impl)
    gen = DCGANGenerator(image_size=32, channels=3, width=DIM, axis_name=None, conv_impl=impl)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(-1, 1, (batch, 32, 32, 3)), jnp.float32)
    z = jnp.asarray(rng.normal(size=(batch, Z)), jnp.float32)
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


def torch_cases(
    threads: int, batch: int = BATCH, device: str = "cpu"
) -> list[Callable[[], object]] | None:
    """The same calls in PyTorch eager on `device` (None when torch is not installed)."""
    try:
        import torch
    except ImportError:
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_reference import DCGANGenerator as TorchGenerator
    from torch_reference import dcgan_critic

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    critic, gen = dcgan_critic(DIM).to(device), TorchGenerator(Z, DIM).to(device)
    x = torch.rand(batch, 3, 32, 32, device=device) * 2 - 1
    z = torch.randn(batch, Z, device=device)

    def gp():
        xh = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(critic(xh).sum(), xh, create_graph=True)
        loss = ((g.flatten(1).norm(dim=1) - 1) ** 2).mean()
        return torch.autograd.grad(loss, list(critic.parameters()), allow_unused=True)

    def fb():
        return torch.autograd.grad(critic(x).mean(), list(critic.parameters()))

    def gfb():
        return torch.autograd.grad(gen(z).mean(), list(gen.parameters()))

    def synced(fn: Callable[[], object]) -> Callable[[], object]:
        def call() -> object:
            out = fn()
            if device != "cpu":
                torch.cuda.synchronize()
            return out
        return call

    return [synced(gp), synced(fb), synced(gfb)]


def fastest(medians: dict[str, list[float]]) -> dict[str, str]:
    """{case: impl, ..., "iteration": impl}: the impl with the least median per case, and
    with the least `WEIGHTS`-weighted sum (one n_critic = 5 generator iteration's calls)."""
    out = {case: min(medians, key=lambda k, i=i: medians[k][i]) for i, case in enumerate(CASES)}
    out["iteration"] = min(
        medians, key=lambda k: sum(w * t for w, t in zip(WEIGHTS, medians[k], strict=True)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--batch", type=int, default=BATCH, help="examples per call")
    parser.add_argument("--json", default="", help="also write the medians (seconds) here")
    args = parser.parse_args()
    impls = args.impls.split(",")
    unknown = [i for i in impls if i not in IMPLS]
    if unknown or args.calls < 1 or args.batch < 1:
        parser.error(f"--impls from {', '.join(IMPLS)} (got {args.impls!r}); --calls and "
                     "--batch >= 1")
    platform = jax.devices()[0].platform
    columns = {impl: jax_cases(impl, args.batch) for impl in impls}
    theirs = torch_cases(args.threads, args.batch, "cuda" if platform == "gpu" else "cpu")
    torch_name = (f"torch eager, {args.threads} threads" if platform != "gpu"
                  else "torch eager, cuda")
    if theirs is not None:
        columns[torch_name] = theirs
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
    medians = {k: [statistics.median(t) for t in times[k]] for k in columns}
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, batch {args.batch}, "
          f"median of {args.calls} calls")
    print("| case | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for i, case in enumerate(CASES):
        cells = [f"{medians[k][i] * 1e3:.1f} ms" for k in columns]
        print(f"| {case} | " + " | ".join(cells) + " |")
    best = fastest({k: medians[k] for k in impls})
    print()
    for case in CASES:
        print(f"fastest {case}: {best[case]}")
    print(f"fastest for one iteration (5 x critic cases + generator): {best['iteration']} "
          f"-> AUTO_IMPLS[{platform!r}] = {best['iteration']!r} "
          f"(now {layers.auto_impl(platform)!r})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform": platform, "device_kind": jax.devices()[0].device_kind,
                       "jax": jax.__version__, "batch": args.batch, "calls": args.calls,
                       "cases": list(CASES), "median_seconds": medians, "fastest": best}, f)


if __name__ == "__main__":
    main()
