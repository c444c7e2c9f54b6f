"""DiffAugment policy names (`config.augment`) and their parsing, without JAX.

The config validates `config.augment` with `parse_policy`; `wgan_jax.augment` applies the
augmentations these names stand for.
"""

from __future__ import annotations

POLICIES = ("color", "translation", "cutout")


def parse_policy(policy: str) -> tuple[str, ...]:
    """"translation,cutout" -> ("translation", "cutout"); "" -> (). Raises ValueError (one line)
    naming an unknown or repeated augmentation."""
    names = tuple(p.strip() for p in policy.split(",")) if policy.strip() else ()
    for name in names:
        if name not in POLICIES:
            raise ValueError(f"unknown augmentation {name!r}; known: {', '.join(POLICIES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"an augmentation is named twice in {policy!r}")
    return names
