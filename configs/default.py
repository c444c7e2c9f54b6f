"""The embedded default config (also what runs when --config is omitted): `configs/digits.py`.

Run: `python -m wgan_jax.main --config configs/default.py --workdir runs/default`
(the same as `python -m wgan_jax.main --workdir runs/default`).
Reaches: see `configs/digits.py` (benchmarks/README.md, "The default digits run").
"""

from wgan_jax.default_config import get_config  # noqa: F401
