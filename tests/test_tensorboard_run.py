"""A run's TensorBoard records, read back with TensorBoard's own event reader.

At diagnostics.level="full" the trainer logs per-layer gradient norms; each logged step must also
give one TensorBoard histogram per network holding exactly those norms, next to the loss
scalars and the sample images.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator  # the [test] extra

from wgan_jax import records
from wgan_jax.config import get_config_schema
from wgan_jax.train import train_and_evaluate

pytestmark = pytest.mark.slow  # subprocesses or whole runs


def test_run_has_loss_scalars_sample_images_and_layer_gradient_histograms(tmp_path):
    c = get_config_schema()
    c.dataset, c.model.kind, c.image_size, c.num_channels = "digits", "dcgan", 8, 1
    c.model.width, c.model.z_dim = 8, 8
    c.global_batch_size, c.n_critic = 8, 1
    c.num_iterations, c.log_every, c.sample_every, c.plot_every = 4, 2, 2, 0
    c.checkpoint_every = 0
    c.diagnostics.level = "full"
    workdir = str(tmp_path / "run")
    train_and_evaluate(c, workdir)

    acc = event_accumulator.EventAccumulator(workdir, size_guidance={
        event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0,
        event_accumulator.IMAGES: 0,
    })
    acc.Reload()
    tags = acc.Tags()
    for name in ("critic_loss", "generator_loss", "wasserstein_estimate", "gradient_penalty"):
        assert [e.step for e in acc.Scalars(name)] == [2, 4], name
    assert "samples" in tags["images"]
    assert {e.step for e in acc.Images("samples")} == {2, 4}
    assert all(e.width > 8 and e.height > 8 for e in acc.Images("samples"))

    rows = [r for r in records.read_jsonl(f"{workdir}/metrics.jsonl") if "critic_loss" in r]
    assert [r["step"] for r in rows] == [2, 4]
    for net in ("critic", "generator"):
        tag = f"layer_grad_norms/{net}"
        assert tag in tags["histograms"], tags["histograms"]
        histograms = acc.Histograms(tag)
        assert [h.step for h in histograms] == [2, 4]
        for row, h in zip(rows, histograms, strict=True):
            norms = np.array([v for k, v in row.items() if k.startswith(f"grad_norm/{net}/")])
            assert norms.size >= 2  # one per layer
            value = h.histogram_value
            assert value.num == norms.size
            np.testing.assert_allclose(value.sum, norms.sum(), rtol=1e-5)
            np.testing.assert_allclose([value.min, value.max], [norms.min(), norms.max()],
                                       rtol=1e-5)
