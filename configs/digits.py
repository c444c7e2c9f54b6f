"""WGAN-GP DCGAN on scikit-learn's shipped digits at 16x16: the embedded default config.

Run: `python -m wgan_jax.main --config configs/digits.py --workdir runs/digits`
Reaches: after its 1,500 iterations, FID 1.24 on the digit classifier's features against the
297 held-out digits (precision 0.58, recall 0.87; the training digits themselves score 0.67),
one seed, 173 s on the 2-core CPU (benchmarks/README.md, "The default digits run").
"""

from wgan_jax.default_config import get_config  # noqa: F401
