"""CIFAR-10 on a TPU pod slice: the paper's ResNet WGAN-GP with a large global batch in bf16.

Run: `scripts/tpu/launch.sh --workdir gs://BUCKET/runs/cifar10 -- --config.data_dir=DIR`
(it runs `python -m wgan_jax.main --config configs/tpu_cifar10.py --workdir gs://...` on every
worker;
docs/tpu-pods.md). Reaches: unmeasured (never run on a TPU); `tests/test_eval_features.py`
checks it is a valid config that needs Inception weights to evaluate.

The global batch is split over every chip of the slice (it must divide by the chip count);
parameters, optimizer state, losses and penalty norms stay float32. Prepare CIFAR-10 once as
array_record in a bucket or local dir and pass `--config.data_dir=...`.
"""



def get_config():
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(
        "cifar10_resnet", os.path.join(os.path.dirname(__file__), "cifar10_resnet.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.global_batch_size = 512
    c.compute_dtype = "bfloat16"
    c.generator_lr = 4e-4
    c.critic_lr = 4e-4
    c.num_iterations = 50_000
    c.checkpoint_every = 1000
    # FID/KID on CIFAR-10 need Inception features: pass
    # --config.eval.inception_weights=PATH (pytorch-fid's .pth or .npz) --config.eval_every=5000.
    # Without the weights there is nothing to evaluate, and eval_every > 0 is a config error.
    c.eval_every = 0
    c.sample_every = 1000
    return c
