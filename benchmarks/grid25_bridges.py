"""Where a trained 2-D generator's off-mode samples come from, in one picture.

    python benchmarks/grid25_bridges.py --workdir /tmp/wgan_quality/grid25_seed0 \
        --out benchmarks/results/grid25_bridges.png

Left: samples of the run's generator (EMA weights when kept), the ones Jacobian truncation at
the run's `sampling.jacobian_truncation` (or `--fraction`) drops in red. Right: the latent
plane (a 2-D latent only) coloured by log10 ||dG(z)/dz||_F^2, the dropped latents in red: the
thin lines where the generator crosses from one mode to the next. Prints the mode metrics of
the plain and the truncated samples (`metrics.toy.toy_mode_metrics`).
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a toy run's workdir")
    parser.add_argument("--out", required=True, help="the PNG written")
    parser.add_argument("--fraction", type=float, default=None,
                        help="share of latents dropped (default: the run's config)")
    parser.add_argument("--num", type=int, default=10_000)
    args = parser.parse_args()

    import jax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wgan_jax import jacobian_truncation as jt
    from wgan_jax.metrics.toy import toy_mixture, toy_mode_metrics
    from wgan_jax.runs import load_run
    from wgan_jax.sampling import generate_from_latents

    config, gan, state, step = load_run(args.workdir, "latest")
    fraction = (config.sampling.jacobian_truncation if args.fraction is None
                else args.fraction)
    use_ema = config.ema_decay > 0
    centres, std = toy_mixture(config.dataset.partition(":")[2])
    z = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (args.num, gan.z_dim)))
    x = generate_from_latents(gan, state, z, use_ema)
    norms = jt.jacobian_sq_norms(gan, state, z, use_ema)
    dropped = norms > np.quantile(norms, 1 - fraction) if fraction else np.zeros(len(z), bool)
    plain, kept = toy_mode_metrics(x, centres, std), toy_mode_metrics(x[~dropped], centres, std)
    print(f"step {step}; plain: {plain}")
    print(f"Jacobian truncation {fraction:.1%}: {kept}")

    panels = 2 if gan.z_dim == 2 else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 6.2), squeeze=False)
    ax = axes[0, 0]
    ax.scatter(*x[~dropped].T, s=1, c="k", alpha=0.4, lw=0)
    ax.scatter(*x[dropped].T, s=3, c="r", lw=0)
    ax.set_title(f"{len(x)} samples, step {step}: {plain['high_quality']:.1%} within 3 std "
                 f"of a mode;\n{kept['high_quality']:.1%} without the {fraction:.0%} in red",
                 fontsize=9)
    ax.set_aspect("equal")
    if panels == 2:
        ax = axes[0, 1]
        n = 400
        g = np.linspace(-3, 3, n, dtype=np.float32)
        grid = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
        image = np.log10(jt.jacobian_sq_norms(gan, state, grid, use_ema) + 1e-6).reshape(n, n)
        ax.imshow(image, origin="lower", extent=(-3, 3, -3, 3), cmap="viridis")
        ax.scatter(*z[dropped].T, s=2, c="r", lw=0)
        ax.set_xlim(-3, 3)
        ax.set_ylim(-3, 3)
        ax.set_title("latent plane: log10 ||dG/dz||_F^2; red: the dropped latents", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
