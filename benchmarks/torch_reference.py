"""PyTorch eager reference timing of one WGAN-GP generator iteration (optional, needs torch).

One iteration = ``n_critic`` critic steps (Wasserstein loss + gradient penalty through
``torch.autograd.grad(create_graph=True)``) and one generator step, the way the original
WGAN-GP code trains. It is the yardstick for the JAX step on the same CPU; torch is NOT a
dependency of wgan_jax (install it by hand: ``pip install torch``).

    python benchmarks/torch_reference.py --model dcgan32 --iters 20 --json

prints one JSON line: seconds_per_iteration (median wall time), min, compile_seconds (0, eager),
devices (1), global_batch, n_critic, threads, plus model, torch version and
cpu_seconds_per_iteration (median process CPU time; steadier than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


@dataclass(frozen=True)
class Setting:
    """Hyperparameters of one reference model (from the WGAN-GP reference code)."""

    batch: int
    n_critic: int
    z_dim: int
    penalty_weight: float
    lr: float = 1e-4
    betas: tuple[float, float] = (0.5, 0.9)


SETTINGS = {
    "toy": Setting(batch=256, n_critic=5, z_dim=2, penalty_weight=0.1),
    "dcgan32": Setting(batch=32, n_critic=5, z_dim=128, penalty_weight=10.0),
}
DIM = 32  # DCGAN-32 width (the reference CIFAR model uses 128)
TOY_WIDTH = 512


def toy_models() -> tuple[nn.Module, nn.Module]:
    """The reference toy nets: 3 ReLU Linear layers of 512, then Linear to 2 (G) or 1 (D)."""

    def mlp(d_in: int, d_out: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(d_in, TOY_WIDTH),
            nn.ReLU(),
            nn.Linear(TOY_WIDTH, TOY_WIDTH),
            nn.ReLU(),
            nn.Linear(TOY_WIDTH, TOY_WIDTH),
            nn.ReLU(),
            nn.Linear(TOY_WIDTH, d_out),
        )

    return mlp(2, 2), mlp(2, 1)


class DCGANGenerator(nn.Module):
    """z -> Linear 4x4x4DIM + BN + ReLU -> ConvT to 2DIM, DIM (BN + ReLU) -> ConvT to 3, tanh."""

    def __init__(self, z_dim: int = 128, dim: int = DIM) -> None:
        super().__init__()
        self.dim = dim
        self.fc = nn.Sequential(nn.Linear(z_dim, 4 * 4 * 4 * dim), nn.BatchNorm1d(4 * 4 * 4 * dim))
        self.convs = nn.Sequential(
            nn.ConvTranspose2d(4 * dim, 2 * dim, 4, 2, 1),
            nn.BatchNorm2d(2 * dim),
            nn.ReLU(),
            nn.ConvTranspose2d(2 * dim, dim, 4, 2, 1),
            nn.BatchNorm2d(dim),
            nn.ReLU(),
            nn.ConvTranspose2d(dim, 3, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(z)).view(-1, 4 * self.dim, 4, 4)
        return self.convs(h)


def dcgan_critic(dim: int = DIM) -> nn.Module:
    """Conv 4x4/2 pad 1: 3 -> DIM -> 2DIM -> 4DIM with LeakyReLU 0.2, then Linear to 1."""
    return nn.Sequential(
        nn.Conv2d(3, dim, 4, 2, 1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(dim, 2 * dim, 4, 2, 1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(2 * dim, 4 * dim, 4, 2, 1),
        nn.LeakyReLU(0.2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4 * dim, 1),
    )


def eight_gaussians(batch: int, generator: torch.Generator) -> torch.Tensor:
    """The reference 8-Gaussians batch: scale-2 centres + N(0, 0.02^2), divided by 1.414."""
    s = 1.0 / math.sqrt(2.0)
    centres = 2.0 * torch.tensor(
        [(1, 0), (-1, 0), (0, 1), (0, -1), (s, s), (s, -s), (-s, s), (-s, -s)]
    )
    idx = torch.randint(0, 8, (batch,), generator=generator)
    points = centres[idx] + 0.02 * torch.randn(batch, 2, generator=generator)
    return points / 1.414


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """Two-sided penalty E[(||grad D(x_hat)|| - 1)^2] at random interpolates, differentiable."""
    alpha = torch.rand(real.shape[0], *([1] * (real.dim() - 1)))
    x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grads,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((grads.flatten(1).norm(dim=1) - 1) ** 2).mean()


class Trainer:
    """Holds both nets and optimizers; `iteration` runs one generator iteration."""

    def __init__(self, model: str, setting: Setting, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.model, self.setting = model, setting
        self.gen = torch.Generator().manual_seed(seed + 1)
        if model == "toy":
            self.generator, self.critic = toy_models()
        else:
            self.generator, self.critic = DCGANGenerator(setting.z_dim), dcgan_critic()
            # Synthetic images in [-1, 1]: the benchmark times the step, not data loading.
            shape = (setting.n_critic, setting.batch, 3, 32, 32)
            self.images = torch.rand(shape, generator=self.gen) * 2 - 1
        self.g_opt = torch.optim.Adam(
            self.generator.parameters(), lr=setting.lr, betas=setting.betas
        )
        self.d_opt = torch.optim.Adam(self.critic.parameters(), lr=setting.lr, betas=setting.betas)

    def real_batch(self, i: int) -> torch.Tensor:
        if self.model == "toy":
            return eight_gaussians(self.setting.batch, self.gen)
        return self.images[i]

    def noise(self) -> torch.Tensor:
        return torch.randn(self.setting.batch, self.setting.z_dim, generator=self.gen)

    def iteration(self) -> float:
        """n_critic critic steps then one generator step; returns the last critic loss."""
        s = self.setting
        for p in self.critic.parameters():
            p.requires_grad_(True)
        for i in range(s.n_critic):
            real = self.real_batch(i)
            with torch.no_grad():
                fake = self.generator(self.noise())
            self.d_opt.zero_grad(set_to_none=True)
            d_loss = self.critic(fake).mean() - self.critic(real).mean()
            d_loss = d_loss + s.penalty_weight * gradient_penalty(self.critic, real, fake)
            d_loss.backward()
            self.d_opt.step()
        for p in self.critic.parameters():
            p.requires_grad_(False)
        self.g_opt.zero_grad(set_to_none=True)
        g_loss = -self.critic(self.generator(self.noise())).mean()
        g_loss.backward()
        self.g_opt.step()
        return float(d_loss.detach())


def run(model: str, iters: int, warmup: int, threads: int) -> dict:
    """Times `iters` iterations after `warmup` untimed ones; returns the JSON record."""
    torch.set_num_threads(threads)
    setting = SETTINGS[model]
    trainer = Trainer(model, setting)
    for _ in range(warmup):
        trainer.iteration()
    times, cpu_times = [], []
    for _ in range(iters):
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.iteration()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {
        "framework": "torch",
        "torch_version": torch.__version__,
        "model": model,
        "seconds_per_iteration": statistics.median(times),
        "min": min(times),
        "cpu_seconds_per_iteration": statistics.median(cpu_times),
        "compile_seconds": 0.0,
        "devices": 1,
        "global_batch": setting.batch,
        "n_critic": setting.n_critic,
        "threads": torch.get_num_threads(),
        "iters": iters,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SETTINGS), default="dcgan32")
    parser.add_argument("--iters", type=int, default=20, help="timed generator iterations")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--iters and --threads must be >= 1, --warmup >= 0")
    if torch is None:
        print("error: torch is not installed (pip install torch)", file=sys.stderr)
        return 2
    record = run(args.model, args.iters, args.warmup, args.threads)
    if args.json:
        print(json.dumps(record))
    else:
        print(
            f"torch {record['torch_version']} {args.model}: "
            f"{1e3 * record['seconds_per_iteration']:.1f} ms/iteration median, "
            f"{1e3 * record['min']:.1f} ms min over {args.iters} "
            f"(batch {record['global_batch']}, n_critic {record['n_critic']}, "
            f"{record['threads']} threads)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
