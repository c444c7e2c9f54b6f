"""GAN losses as pure functions of critic scores.

Each function takes the critic's raw scores (logits for the logistic loss) on a batch and
returns the mean over that batch. Under data parallelism the step averages these local means
with `lax.pmean`, which equals the global-batch mean because every device holds the same
number of examples. The relativistic pairing loss ("rpgan", `PAIRED_LOSSES`) scores pairs
(real i, fake i), so its generator loss takes the real scores too: `loss(fake, real)`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

__all__ = ["wasserstein_critic_loss", "wasserstein_generator_loss", "hinge_critic_loss",
           "hinge_generator_loss", "logistic_critic_loss", "logistic_generator_loss",
           "rpgan_critic_loss", "rpgan_generator_loss", "CRITIC_LOSSES", "GENERATOR_LOSSES",
           "PAIRED_LOSSES"]


def wasserstein_critic_loss(real_scores: jax.Array, fake_scores: jax.Array) -> jax.Array:
    """E[D(fake)] - E[D(real)]: the negative of the critic's Wasserstein estimate."""
    return jnp.mean(fake_scores) - jnp.mean(real_scores)


def wasserstein_generator_loss(fake_scores: jax.Array) -> jax.Array:
    """-E[D(G(z))]."""
    return -jnp.mean(fake_scores)


def hinge_critic_loss(real_scores: jax.Array, fake_scores: jax.Array) -> jax.Array:
    """E[relu(1 - D(real))] + E[relu(1 + D(fake))] (geometric GAN / SAGAN)."""
    return jnp.mean(jax.nn.relu(1.0 - real_scores)) + jnp.mean(jax.nn.relu(1.0 + fake_scores))


def hinge_generator_loss(fake_scores: jax.Array) -> jax.Array:
    """-E[D(G(z))], as for the Wasserstein loss."""
    return -jnp.mean(fake_scores)


def logistic_critic_loss(real_logits: jax.Array, fake_logits: jax.Array) -> jax.Array:
    """Binary cross-entropy of the classic GAN discriminator, on logits (stable)."""
    return jnp.mean(jax.nn.softplus(-real_logits)) + jnp.mean(jax.nn.softplus(fake_logits))


def logistic_generator_loss(fake_logits: jax.Array) -> jax.Array:
    """The non-saturating generator loss -E[log sigmoid(D(G(z)))]."""
    return jnp.mean(jax.nn.softplus(-fake_logits))


#: `config.loss` name -> the critic's loss `fn(real_scores, fake_scores)`.
CRITIC_LOSSES: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "wasserstein": wasserstein_critic_loss,
    "hinge": hinge_critic_loss,
    "logistic": logistic_critic_loss,
}
#: `config.loss` name -> the generator's loss `fn(fake_scores)` (`PAIRED_LOSSES`: also the
#: real scores, `fn(fake_scores, real_scores)`).
GENERATOR_LOSSES: dict[str, Callable[..., jax.Array]] = {
    "wasserstein": wasserstein_generator_loss,
    "hinge": hinge_generator_loss,
    "logistic": logistic_generator_loss,
}


def rpgan_critic_loss(real_scores: jax.Array, fake_scores: jax.Array) -> jax.Array:
    """RpGAN (Jolicoeur-Martineau 2019; R3GAN, Huang et al. 2024): E[softplus(D(fake_i) -
    D(real_i))] over pairs of real and fake examples (equal batches, paired by position)."""
    return jnp.mean(jax.nn.softplus(fake_scores - real_scores))


def rpgan_generator_loss(fake_scores: jax.Array, real_scores: jax.Array) -> jax.Array:
    """RpGAN's generator loss E[softplus(D(real_i) - D(fake_i))] (the pairs swapped)."""
    return jnp.mean(jax.nn.softplus(real_scores - fake_scores))


CRITIC_LOSSES["rpgan"] = rpgan_critic_loss
GENERATOR_LOSSES["rpgan"] = rpgan_generator_loss
#: Losses whose generator loss is `fn(fake_scores, real_scores)`: the step scores a real batch
#: in the generator's update too.
PAIRED_LOSSES = ("rpgan",)
