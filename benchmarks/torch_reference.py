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
import dataclasses
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
    "dcgan64": Setting(batch=64, n_critic=5, z_dim=64, penalty_weight=10.0, lr=2e-4),
    "resnet32": Setting(
        batch=64, n_critic=5, z_dim=128, penalty_weight=10.0, lr=2e-4, betas=(0.0, 0.9)
    ),
}
# Image models: (image size, channels, width); the same as configs/bench_MODEL.py.
IMAGES = {"dcgan32": (32, 3, 32), "dcgan64": (64, 4, 16), "resnet32": (32, 3, 128)}
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


def _resamplings(size: int, smallest: int) -> int:
    return int(round(math.log2(size / smallest)))


class DCGANGenerator(nn.Module):
    """`wgan_jax.models.dcgan.DCGANGenerator` with BatchNorm: z -> Linear (no bias) to
    4x4x(DIM 2^(n-1)), BN + ReLU; ConvT 4x4/2 pad 1 (no bias) halving the channels down to DIM,
    each BN + ReLU; ConvT 4x4/2 pad 1 (bias) to the image channels, tanh."""

    def __init__(self, z_dim: int, dim: int, size: int = 32, channels: int = 3) -> None:
        super().__init__()
        n = _resamplings(size, 4)
        self.ch = dim * 2 ** (n - 1)
        self.fc = nn.Linear(z_dim, 4 * 4 * self.ch, bias=False)
        layers: list[nn.Module] = [nn.BatchNorm2d(self.ch), nn.ReLU()]
        ch = self.ch
        for _ in range(n - 1):
            layers += [
                nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ch // 2),
                nn.ReLU(),
            ]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, channels, 4, 2, 1), nn.Tanh()]
        self.convs = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.convs(self.fc(z).view(-1, self.ch, 4, 4))


def dcgan_critic(dim: int, size: int = 32, channels: int = 3) -> nn.Module:
    """`wgan_jax.models.dcgan.DCGANCritic` without norm: Conv 4x4/2 pad 1 (bias) from the image
    to DIM, 2DIM, ... (one per halving down to 4x4), LeakyReLU 0.2 each, Linear to 1."""
    layers: list[nn.Module] = []
    ch_in = channels
    for i in range(_resamplings(size, 4)):
        layers += [nn.Conv2d(ch_in, dim * 2**i, 4, 2, 1), nn.LeakyReLU(0.2)]
        ch_in = dim * 2**i
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(4 * 4 * ch_in, 1))


def _upsample(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.interpolate(x, scale_factor=2, mode="nearest")


class ResNetGenBlock(nn.Module):
    """`wgan_jax.models.resnet._GenBlock` with BatchNorm (no conv biases): shortcut = nearest 2x
    upsampling of a 1x1 conv; main = BN, ReLU, upsample, 3x3 conv, BN, ReLU, 3x3 conv."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.shortcut = nn.Conv2d(ch, ch, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv1 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, 1, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(_upsample(torch.relu(self.bn1(x))))
        h = self.conv2(torch.relu(self.bn2(h)))
        return h + _upsample(self.shortcut(x))


class ResNetGenerator(nn.Module):
    """`wgan_jax.models.resnet.ResNetGenerator`: Linear (no bias) to 4x4xW, one up block per
    doubling, BN, ReLU, 3x3 conv (bias) to the image channels, tanh."""

    def __init__(self, z_dim: int, width: int, size: int = 32, channels: int = 3) -> None:
        super().__init__()
        self.width = width
        self.fc = nn.Linear(z_dim, 4 * 4 * width, bias=False)
        self.blocks = nn.Sequential(
            *[ResNetGenBlock(width) for _ in range(_resamplings(size, 4))]
        )
        self.out = nn.Sequential(
            nn.BatchNorm2d(width), nn.ReLU(), nn.Conv2d(width, channels, 3, 1, 1), nn.Tanh()
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.fc(z).view(-1, self.width, 4, 4)))


class ResNetCriticBlock(nn.Module):
    """`wgan_jax.models.resnet._CriticBlock` without norm (conv biases on). "first": 3x3 conv,
    ReLU, 3x3 conv, 2x2 mean pool, + 1x1 conv of the mean-pooled input; "down": ReLU, 3x3 conv,
    ReLU, 3x3 conv, mean pool, + the same shortcut; "none": as "down" without pooling, identity
    shortcut."""

    def __init__(self, ch_in: int, ch: int, resample: str) -> None:
        super().__init__()
        self.resample = resample
        self.conv1 = nn.Conv2d(ch_in, ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(ch, ch, 3, 1, 1)
        self.shortcut = nn.Conv2d(ch_in, ch, 1) if resample != "none" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = nn.functional.avg_pool2d
        if self.resample == "first":
            h = pool(self.conv2(torch.relu(self.conv1(x))), 2)
        else:
            h = self.conv2(torch.relu(self.conv1(torch.relu(x))))
            if self.resample == "none":
                return h + x
            h = pool(h, 2)
        return h + self.shortcut(pool(x, 2))


class ResNetCritic(nn.Module):
    """`wgan_jax.models.resnet.ResNetCritic` without norm: a "first" block, "down" blocks to 8x8,
    two plain blocks, ReLU, global mean pool, Linear to 1."""

    def __init__(self, width: int, size: int = 32, channels: int = 3) -> None:
        super().__init__()
        kinds = ["first"] + ["down"] * (_resamplings(size, 8) - 1) + ["none", "none"]
        self.blocks = nn.Sequential(
            *[ResNetCriticBlock(channels if i == 0 else width, width, k)
              for i, k in enumerate(kinds)]
        )
        self.fc = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.blocks(x)).mean(dim=(2, 3)))


def build_models(model: str) -> tuple[nn.Module, nn.Module]:
    """The (generator, critic) pair of `model` (one of SETTINGS), freshly initialised."""
    if model == "toy":
        return toy_models()
    size, channels, width = IMAGES[model]
    z_dim = SETTINGS[model].z_dim
    if model.startswith("resnet"):
        return (ResNetGenerator(z_dim, width, size, channels),
                ResNetCritic(width, size, channels))
    return DCGANGenerator(z_dim, width, size, channels), dcgan_critic(width, size, channels)


def flax_layout_shapes(module: nn.Module) -> list[tuple[int, ...]]:
    """Parameter shapes in registration order, written in Flax's layout: Linear [in, out], Conv
    and ConvTranspose [kh, kw, in, out]; what `wgan_jax`'s net of the same architecture holds."""
    shapes = []
    for sub in module.modules():
        for name, p in sub.named_parameters(recurse=False):
            shape = tuple(p.shape)
            if name == "weight" and isinstance(sub, nn.Linear):
                shape = shape[::-1]
            elif name == "weight" and isinstance(sub, nn.ConvTranspose2d):
                shape = (*shape[2:], shape[0], shape[1])
            elif name == "weight" and isinstance(sub, nn.Conv2d):
                shape = (*shape[2:], shape[1], shape[0])
            shapes.append(shape)
    return shapes


def eight_gaussians(batch: int, generator: torch.Generator) -> torch.Tensor:
    """The reference 8-Gaussians batch: scale-2 centres + N(0, 0.02^2), divided by 1.414
    (on the generator's device)."""
    s = 1.0 / math.sqrt(2.0)
    device = generator.device
    centres = 2.0 * torch.tensor(
        [(1, 0), (-1, 0), (0, 1), (0, -1), (s, s), (s, -s), (-s, s), (-s, -s)], device=device
    )
    idx = torch.randint(0, 8, (batch,), generator=generator, device=device)
    points = centres[idx] + 0.02 * torch.randn(batch, 2, generator=generator, device=device)
    return points / 1.414


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """Two-sided penalty E[(||grad D(x_hat)|| - 1)^2] at random interpolates, differentiable."""
    alpha = torch.rand(real.shape[0], *([1] * (real.dim() - 1)), device=real.device)
    x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grads,) = torch.autograd.grad(critic(x_hat).sum(), x_hat, create_graph=True)
    return ((grads.flatten(1).norm(dim=1) - 1) ** 2).mean()


class Trainer:
    """Holds both nets and optimizers; `iteration` runs one generator iteration.

    `device`: where the nets and batches live ("cpu", "cuda"). `compiled`: the nets' own
    passes (generator, critic on real and fake, the generator's loss) go through
    `torch.compile`; the penalty's double backward runs the same critic eagerly, because
    torch.compile does not support double backward (pytorch/pytorch#183603, #181581).
    """

    def __init__(self, model: str, setting: Setting, seed: int = 0, device: str = "cpu",
                 compiled: bool = False) -> None:
        torch.manual_seed(seed)
        self.model, self.setting, self.device = model, setting, device
        self.gen = torch.Generator(device=device).manual_seed(seed + 1)
        self.generator, self.critic = (m.to(device) for m in build_models(model))
        self.g_fwd = torch.compile(self.generator) if compiled else self.generator
        self.d_fwd = torch.compile(self.critic) if compiled else self.critic
        if model != "toy":
            # Synthetic images in [-1, 1]: the benchmark times the step, not data loading.
            size, channels, _ = IMAGES[model]
            shape = (setting.n_critic, setting.batch, channels, size, size)
            self.images = torch.rand(shape, generator=self.gen, device=device) * 2 - 1
        self.g_opt = torch.optim.Adam(
            self.generator.parameters(), lr=setting.lr, betas=setting.betas
        )
        self.d_opt = torch.optim.Adam(self.critic.parameters(), lr=setting.lr, betas=setting.betas)

    def real_batch(self, i: int) -> torch.Tensor:
        if self.model == "toy":
            return eight_gaussians(self.setting.batch, self.gen)
        return self.images[i]

    def noise(self) -> torch.Tensor:
        return torch.randn(self.setting.batch, self.setting.z_dim, generator=self.gen,
                           device=self.device)

    def iteration(self) -> float:
        """n_critic critic steps then one generator step; returns the last critic loss."""
        s = self.setting
        for p in self.critic.parameters():
            p.requires_grad_(True)
        for i in range(s.n_critic):
            real = self.real_batch(i)
            with torch.no_grad():
                fake = self.g_fwd(self.noise())
            self.d_opt.zero_grad(set_to_none=True)
            d_loss = self.d_fwd(fake).mean() - self.d_fwd(real).mean()
            d_loss = d_loss + s.penalty_weight * gradient_penalty(self.critic, real, fake)
            d_loss.backward()
            self.d_opt.step()
        for p in self.critic.parameters():
            p.requires_grad_(False)
        self.g_opt.zero_grad(set_to_none=True)
        g_loss = -self.d_fwd(self.g_fwd(self.noise())).mean()
        g_loss.backward()
        self.g_opt.step()
        return float(d_loss.detach())


def run(model: str, iters: int, warmup: int, threads: int, device: str = "cpu",
        compiled: bool = False, batch: int = 0) -> dict:
    """Times `iters` iterations after `warmup` untimed ones; returns the JSON record.
    `batch` > 0 replaces the model's batch size."""
    torch.set_num_threads(threads)
    setting = SETTINGS[model]
    if batch:
        setting = dataclasses.replace(setting, batch=batch)
    trainer = Trainer(model, setting, device=device, compiled=compiled)
    t0 = time.perf_counter()
    for _ in range(warmup):
        trainer.iteration()
    warmup_seconds = time.perf_counter() - t0
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
        "compile_seconds": warmup_seconds if compiled else 0.0,
        "compiled": compiled,
        "device": device,
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
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the nets (the penalty's double backward stays eager)")
    parser.add_argument("--batch", type=int, default=0, help="batch size (0: the model's)")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 0:
        parser.error("--iters and --threads must be >= 1, --warmup and --batch >= 0")
    if torch is None:
        print("error: torch is not installed (pip install torch)", file=sys.stderr)
        return 2
    record = run(args.model, args.iters, args.warmup, args.threads, args.device, args.compile,
                 args.batch)
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
