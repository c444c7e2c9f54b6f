"""The config schema (every valid key with its default) and its validation.

Configs are data: `get_config_schema()` returns a *locked* `ml_collections.ConfigDict`, so a
config file or a `--config.key=value` override that names a key that does not exist fails at
once, and a value of the wrong type is refused by `ml_collections` itself. `validate_config`
then checks the values once, at the face of the program, and raises a one-line `ConfigError`
that names the key; deeper code trusts the config.

A leaf: it imports from the package only `errors` and the augmentation policy names, so every
module (and `diagnose`, which needs no JAX) can read it. What needs the data (the class count,
`wgan_jax.data.sources`) or the evaluation's plan (`wgan_jax.eval_plan`) is checked after
`validate_config`, by the trainer, still before anything is written.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import NoReturn

import ml_collections

from wgan_jax.augment_policy import parse_policy
from wgan_jax.errors import ConfigError

__all__ = ["get_config_schema", "validate_config", "check_schema", "apply_overrides", "data_shape",
           "default_health_config", "CHOICES", "LOSSES", "PENALTIES", "MODEL_KINDS", "TOY_DATASETS",
           "PRECISIONS"]

#: The values of `config.loss`.
LOSSES = ("wasserstein", "hinge", "logistic", "rpgan")
#: The values of `config.penalty` ("clip" and "none" are no penalty term).
PENALTIES = ("gp", "lp", "r1", "dragan", "r2", "r1r2", "clip", "none")
#: The built-in networks, the values of `config.model.kind`.
MODEL_KINDS = ("mlp", "dcgan", "resnet")
# The toy mixtures with modes (their centres: `wgan_jax.data.toy.MIXTURES`, in this order).
TOY_MIXTURES = ("8gaussians", "25gaussians", "ring8", "grid25")
#: The 2-D toy datasets: `config.dataset = "toy:NAME"`.
TOY_DATASETS = (*TOY_MIXTURES, "swissroll")
#: config.matmul_precision: the float32 matmul precision (`wgan_jax.precision`).
PRECISIONS = ("default", "high", "highest")
# model.generator / model.critic: "package.module:attribute" (the attribute may be dotted).
# Seeds: jax.random.PRNGKey keeps 32 bits without x64, so larger seeds would repeat smaller ones.
MAX_SEED = 2**31 - 1
# eval.num_samples with evaluation on: the metrics compare sample statistics (covariances,
# 5-nearest-neighbour balls), which need more than a handful of samples.
MIN_EVAL_SAMPLES = 10
FACTORY_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def default_health_config() -> dict:
    """Thresholds of every `wgan_jax.health` rule (`config.health`), with defaults meant to
    stay quiet on healthy WGAN-GP runs."""
    return {
        "enabled": True,
        "window": 20,  # rows in running medians
        "warmup": 5,  # rows seen before the ratio-based rules may fire
        "patience": 3,  # consecutive rows a condition must hold (and be absent to re-arm)
        "explode_factor": 10.0,
        "explode_abs": 1e6,
        "vanish_factor": 1e-3,
        "vanish_abs": 1e-8,
        "overpower_critic_loss": 0.05,
        "overpower_generator_rise": 2.0,
        "overpower_d_fake": 0.01,
        "wasserstein_growth": 10.0,
        "wasserstein_min": 1.0,  # |W| below this never counts as growing without bound
        "penalty_tolerance": 0.5,  # divided by penalty_weight when that is below 1
        "penalty_patience": 10,
        "diversity_min": 0.5,
        "diversity_drop": 0.75,
        "modes_drop": 0.75,
        "eval_tolerance": 0.2,
        "eval_patience": 2,
        "spike_factor": 20.0,
        "dead_max": 0.5,
        "saturated_max": 0.5,
    }


def get_config_schema() -> ml_collections.ConfigDict:
    """The schema: every config key with its default value (WGAN-GP on 25-Gaussians toy data).

    Config files start from it; the run `python -m wgan_jax.main` trains without `--config` is
    `wgan_jax.default_config.get_config()`.
    """
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.num_iterations = 2000  # generator iterations
    c.global_batch_size = 256
    c.n_critic = 5
    c.log_every = 100
    c.sample_every = 500  # 0: samples only at the end
    c.plot_every = 500  # PNG plots of the metrics; 0: only at the end

    c.dataset = "toy:25gaussians"
    c.data_dir = ""  # "" -> $WGAN_JAX_DATA_DIR or ~/.cache/wgan_jax/data
    c.image_size = 32
    c.num_channels = 1
    c.skip_corrupt_images = False
    c.data_split = "train"  # tfds:NAME only: the split read, in TFDS syntax ("test", "train[:80%]")
    c.data_label = "label"  # tfds:NAME, conditional runs: the ClassLabel feature holding labels
    c.folder_classes = False  # folder:/path: each immediate subfolder is a class (sorted names)
    c.dataset_size = 0  # image data: keep the first N examples of a fixed permutation; 0: all
    c.augment = ""  # DiffAugment policy, e.g. "translation,cutout,color"; "": off
    c.instance_noise = 0.0  # std of Gaussian noise on critic inputs, annealed to 0; 0: off

    c.loss = "wasserstein"
    c.penalty = "gp"
    c.penalty_weight = 0.1
    c.penalty_target = 1.0
    c.clip_value = 0.01  # penalty == "clip": critic weights kept in [-c, c]
    c.dragan_scale = 0.5  # penalty == "dragan": perturbation scale times the batch std

    c.generator_lr = 1e-4
    c.critic_lr = 1e-4
    c.generator_b1 = 0.5
    c.generator_b2 = 0.9
    c.critic_b1 = 0.5
    c.critic_b2 = 0.9
    c.lr_schedule = "constant"  # or "linear": decay to 0 over num_iterations
    c.ema_decay = 0.0  # EMA of generator weights; 0 disables; warm-up min(d, (1+t)/(10+t))
    c.compute_dtype = "float32"  # or "bfloat16": activations only; params, losses, norms in f32
    # float32 matmuls/convolutions: "default" (the platform's: TF32 on NVIDIA Ampere+, bfloat16
    # on TPU), "high" or "highest" (true float32); see wgan_jax.precision, docs/accelerators.md.
    c.matmul_precision = "default"

    c.model = ml_collections.ConfigDict()
    c.model.kind = "mlp"
    c.model.z_dim = 2
    c.model.width = 512  # MLP hidden width, or the base channel count (DIM) of conv nets
    c.model.depth = 3  # MLP hidden layers
    c.model.generator_norm = "none"  # "batch" (cross-replica) or "none"
    c.model.critic_norm = "none"  # "none", "layer", "spectral"; "batch" only without a penalty
    c.model.critic_output = "linear"  # "sigmoid" only for the classic DCGAN baseline
    # How convolutions are computed (the same function): "auto", "matmul", "s2d" or "xla"; see
    # wgan_jax.models.layers (dcgan: its 4x4 stride-2 convs; resnet: the derivatives of its
    # stride-1 convs).
    c.model.conv_impl = "auto"
    # "projection": class-conditional (projection critic, conditional BatchNorm / label
    # embedding in the generator); needs a dataset with labels (digits, stacked_digits,
    # tfds:NAME with data_label, folder:/path with folder_classes). "labels": class-conditional
    # with your own networks (model.generator / model.critic or objects), called with
    # labels=... (wgan_jax.models.contract).
    c.model.conditional = "none"
    # A conditional model's number of classes; 0 reads it from the data. The trainer writes the
    # data's count into the run's config.json, so `sample` works once the data is gone.
    c.model.num_classes = 0
    # Your own networks: "my_pkg.nets:make_generator", a factory called with the run's config
    # that returns a Flax NNX or Linen module or an (init, apply) pair; "" = the built-in kind.
    c.model.generator = ""
    c.model.critic = ""

    c.checkpoint_every = 500  # also at the end and on SIGTERM; 0: only then
    c.keep_checkpoints = 3
    c.max_consecutive_nonfinite = 5
    c.rollback_lr_factor = 0.5
    c.max_rollbacks = 3
    c.loss_explosion_factor = 0.0  # 0: off; else roll back when |critic loss| > factor x median

    c.eval_every = 0  # 0: off
    c.eval = ml_collections.ConfigDict()
    c.eval.num_samples = 2500
    c.eval.metric = ""  # the metric that picks the best checkpoint, "" = automatic
    c.eval.inception_weights = ""
    # The feature space of the image metrics: "auto" (digit classifier for digits and
    # stacked_digits, Inception when inception_weights is set), "digits", "inception", "none".
    c.eval.features = "auto"

    # How evaluation and `sample` draw from the trained generator. jacobian_truncation: the
    # share of latents dropped where the generator is steepest (wgan_jax.jacobian_truncation,
    # for data with separate modes); 0: off, plain N(0, I) latents.
    c.sampling = ml_collections.ConfigDict()
    c.sampling.jacobian_truncation = 0.0

    c.early_stopping = ml_collections.ConfigDict()
    c.early_stopping.patience = 0  # evaluations without improvement; 0: off

    c.diagnostics = ml_collections.ConfigDict()
    c.diagnostics.level = "basic"  # "off", "basic", "full"

    c.health = ml_collections.ConfigDict(default_health_config())  # thresholds of the rules

    # Faults during a run (docs/checkpoints-and-faults.md, wgan_jax.faults). peer_timeout_seconds:
    # with several processes, a process that stops answering (killed, frozen, its machine lost)
    # ends the run on every other process within this many seconds (JAX's heartbeat timeout).
    # watchdog: an iteration, a save or a restore that runs longer than
    # max(factor x the median recent iteration, seconds) ends the run with every thread's stack
    # written to WORKDIR/faults/; seconds 0: off.
    c.faults = ml_collections.ConfigDict()
    c.faults.peer_timeout_seconds = 30
    c.faults.watchdog = ml_collections.ConfigDict()
    c.faults.watchdog.seconds = 600.0
    c.faults.watchdog.factor = 20.0
    c.lock()
    return c


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict) -> None:
    """Sets dotted keys in place, e.g. {"model.width": 64}; unknown keys raise (locked)."""
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value


def _leaf_keys(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def unknown_key_message(key: str) -> str:
    """`config.KEY: no such config key`, with the closest known keys when there are any."""
    known = _leaf_keys(get_config_schema())
    close = difflib.get_close_matches(key, known, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"config.{key}: no such config key{hint}"


def unknown_override(argv: list[str]) -> str | None:
    """The first KEY of a `--config.KEY=value` argument that the schema does not have."""
    known = set(_leaf_keys(get_config_schema()))
    for arg in argv[1:]:
        if arg == "--":
            break
        name = arg.lstrip("-").split("=", 1)[0]
        if arg.startswith("-") and name.startswith("config."):
            key = name.removeprefix("config.")
            if key not in known:
                return key
    return None


def _fail(key: str, problem: str) -> NoReturn:
    raise ConfigError(f"config.{key}: {problem}")


def _number(key: str, value: object) -> float:
    """`value` as a float; `ConfigError` naming `key` when it is no number (e.g. a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(key, f"must be a number, got {value!r}")
    return float(value)


def _finite_at_least(key: str, value: object, minimum: float) -> None:
    number = _number(key, value)
    if not math.isfinite(number) or number < minimum:
        _fail(key, f"must be a finite number >= {minimum:g}, got {value!r}")


def check_schema(config: object, source: str) -> None:
    """`ConfigError` unless `config` is a `ConfigDict` with every key of the schema: what a
    config file's `get_config()` must return (start from `get_config_schema()`)."""
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(f"{source}: get_config() must return the schema's ConfigDict "
                          "(start from wgan_jax.config.get_config_schema()), got a "
                          f"{type(config).__name__}")
    have = set(_leaf_keys(config))
    missing = [key for key in _leaf_keys(get_config_schema()) if key not in have]
    if missing:
        raise ConfigError(f"{source}: get_config() lacks config keys {', '.join(missing[:3])}"
                          f"{' ...' if len(missing) > 3 else ''} (start from "
                          "wgan_jax.config.get_config_schema())")


def validate_config(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Checks the values once; raises `ConfigError` naming the key and what is wrong.

    The schema's own rules only: what needs the data or the evaluation's plan (the class
    count, `wgan_jax.data.sources.check_num_classes`; what evaluation can compute,
    `wgan_jax.eval_plan.eval_plan`) the trainer checks next, still before anything is written.
    """
    _validate_counts(config, num_devices)
    _validate_numbers(config)
    _validate_choices(config)
    _validate_model(config)
    _validate_dataset(config)
    _validate_conditional(config)
    _validate_eval(config)
    _validate_small_data(config)
    _validate_health(config)
    validate_faults(config)


def _positive_int(key: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or value < minimum:
        _fail(key, f"must be an integer >= {minimum}, got {value!r}")


def _validate_counts(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Iteration counts, periods, the batch (divisible by the devices) and the seed."""
    _positive_int("num_iterations", config.num_iterations)
    _positive_int("global_batch_size", config.global_batch_size)
    _positive_int("n_critic", config.n_critic)
    _positive_int("log_every", config.log_every)
    _positive_int("sample_every", config.sample_every, 0)
    _positive_int("plot_every", config.plot_every, 0)
    _positive_int("checkpoint_every", config.checkpoint_every, 0)
    _positive_int("eval_every", config.eval_every, 0)
    _positive_int("dataset_size", config.dataset_size, 0)
    _positive_int("keep_checkpoints", config.keep_checkpoints)
    if config.global_batch_size % num_devices:
        _fail(
            "global_batch_size",
            f"{config.global_batch_size} is not divisible by the {num_devices} devices",
        )
    _positive_int("seed", config.seed, 0)
    if config.seed > MAX_SEED:
        _fail("seed", f"must be an integer in [0, {MAX_SEED}], got {config.seed!r}")
    _positive_int("max_consecutive_nonfinite", config.max_consecutive_nonfinite, 0)
    _positive_int("max_rollbacks", config.max_rollbacks, 0)
    _positive_int("early_stopping.patience", config.early_stopping.patience, 0)


def _validate_numbers(config: ml_collections.ConfigDict) -> None:
    """Learning rates, penalty settings, rollback factors and Adam's betas."""
    for key in ("generator_lr", "critic_lr", "penalty_weight", "penalty_target", "clip_value",
                "dragan_scale", "instance_noise"):
        _finite_at_least(key, config[key], 0.0)
    factor = config.rollback_lr_factor
    if not (math.isfinite(factor) and 0.0 < factor <= 1.0):
        _fail("rollback_lr_factor", f"must be a number in (0, 1] (the learning rates are "
              f"multiplied by it at each rollback), got {factor!r}")
    explosion = config.loss_explosion_factor
    if not (math.isfinite(explosion) and (explosion == 0.0 or explosion > 1.0)):
        _fail("loss_explosion_factor", f"must be 0 (off) or a finite number > 1 (times the "
              f"running median), got {explosion!r}")
    for key in ("generator_b1", "generator_b2", "critic_b1", "critic_b2", "ema_decay"):
        if not 0.0 <= config[key] < 1.0:
            _fail(key, f"must be in [0, 1), got {config[key]!r}")


#: Keys with a fixed set of values, and those values.
CHOICES = {
    "loss": LOSSES,
    "penalty": PENALTIES,
    "lr_schedule": ("constant", "linear"),
    "compute_dtype": ("float32", "bfloat16"),
    "matmul_precision": PRECISIONS,
    "model.kind": MODEL_KINDS,
    "model.generator_norm": ("batch", "none"),
    "model.critic_norm": ("none", "layer", "spectral", "batch"),
    "model.critic_output": ("linear", "sigmoid"),
    "model.conv_impl": ("auto", "matmul", "s2d", "xla"),
    "model.conditional": ("none", "projection", "labels"),
    "diagnostics.level": ("off", "basic", "full"),
}


def _validate_choices(config: ml_collections.ConfigDict) -> None:
    for key, allowed in CHOICES.items():
        value = config
        for part in key.split("."):
            value = value[part]
        if value not in allowed:
            _fail(key, f"must be one of {', '.join(allowed)}; got {value!r}")


def _validate_model(config: ml_collections.ConfigDict) -> None:
    """Combinations of normalisation, penalty and output; factory paths; network sizes."""
    if config.model.critic_norm == "batch" and config.penalty in PENALTIES[:-2]:
        _fail(
            "model.critic_norm",
            "'batch' couples the examples of a batch, so a per-example gradient penalty is "
            "wrong; use 'layer' or 'none'",
        )
    if config.model.critic_norm == "spectral" and config.penalty == "clip":
        _fail("model.critic_norm", "'spectral' together with penalty='clip' (weight clipping)")
    if config.model.critic_output == "sigmoid" and config.loss != "logistic":
        _fail("model.critic_output", "'sigmoid' needs loss='logistic'")
    for key in ("generator", "critic"):
        path = config.model[key]
        if path and not FACTORY_PATH.fullmatch(path):
            _fail(f"model.{key}", f"must name a factory as 'package.module:function', got {path!r}")
    _positive_int("model.z_dim", config.model.z_dim)
    _positive_int("model.width", config.model.width)
    _positive_int("model.depth", config.model.depth)


# Integer thresholds of `config.health` (counts of rows or evaluations): at least 1.
_HEALTH_COUNTS = ("window", "warmup", "patience", "penalty_patience", "eval_patience")


def _validate_health(config: ml_collections.ConfigDict) -> None:
    """Every numeric `config.health` threshold is finite and >= 0 (counts >= 1)."""
    for key, value in config.health.items():
        if isinstance(value, bool):
            continue
        if key in _HEALTH_COUNTS:
            if not isinstance(value, int) or value < 1:
                _fail(f"health.{key}", f"must be an integer >= 1, got {value!r}")
        else:
            _finite_at_least(f"health.{key}", value, 0.0)


# faults.peer_timeout_seconds: JAX's heartbeat takes whole seconds; below a few seconds a busy
# host (a long compilation, a garbage collection) would count as lost.
MIN_PEER_TIMEOUT = 5
MAX_PEER_TIMEOUT = 3600


def validate_faults(config: ml_collections.ConfigDict) -> None:
    """`config.faults`: the bounds on a lost peer and the watchdog's. Checked by `main` before
    the processes connect (the peer timeout is an argument of `jax.distributed.initialize`)."""
    timeout = config.faults.peer_timeout_seconds
    if (isinstance(timeout, bool) or not isinstance(timeout, int)
            or not MIN_PEER_TIMEOUT <= timeout <= MAX_PEER_TIMEOUT):
        _fail("faults.peer_timeout_seconds", f"must be an integer in [{MIN_PEER_TIMEOUT}, "
              f"{MAX_PEER_TIMEOUT}] (seconds), got {timeout!r}")
    _finite_at_least("faults.watchdog.seconds", config.faults.watchdog.seconds, 0.0)
    _finite_at_least("faults.watchdog.factor", config.faults.watchdog.factor, 1.0)


def _validate_small_data(config: ml_collections.ConfigDict) -> None:
    """`dataset_size` and `augment` need images; `augment` names known augmentations."""
    toy = config.dataset.startswith("toy:")
    if config.dataset_size and toy:
        _fail("dataset_size", "toy data are drawn afresh every batch; there is no set to subset")
    try:
        policy = parse_policy(config.augment)
    except ValueError as e:
        _fail("augment", str(e))
    if policy and toy:
        _fail("augment", "DiffAugment needs image data, not toy data")


def _validate_dataset(config: ml_collections.ConfigDict) -> None:
    dataset = config.dataset
    kind, _, name = dataset.partition(":")
    if not config.data_split.strip():
        _fail("data_split", "must name a split, e.g. 'train' or 'test'")
    if kind != "tfds" and config.data_split != "train":
        _fail("data_split", f"only tfds:NAME datasets have splits; {dataset!r} has one set of "
              f"examples (got {config.data_split!r}, leave it 'train')")
    if kind == "toy":
        if name not in TOY_DATASETS:
            _fail("dataset", f"unknown toy dataset {name!r}; known: {', '.join(TOY_DATASETS)}")
        if config.model.kind != "mlp":
            _fail("model.kind", f"toy data is 2-D and needs 'mlp', got {config.model.kind!r}")
        return
    if kind in ("tfds", "folder") and not name:
        _fail("dataset", f"{kind!r} needs a name or path after the colon, e.g. '{kind}:...'")
    if kind not in ("tfds", "folder", "digits", "stacked_digits"):
        _fail(
            "dataset",
            f"unknown dataset {dataset!r}; use toy:NAME, digits, stacked_digits, tfds:NAME "
            "or folder:/path",
        )
    if config.image_size not in (8, 16, 32, 64):
        _fail("image_size", f"must be 8, 16, 32 or 64, got {config.image_size!r}")
    if config.num_channels not in (1, 3, 4):
        _fail("num_channels", f"must be 1, 3 or 4, got {config.num_channels!r}")
    if kind == "stacked_digits" and config.num_channels != 3:
        _fail("num_channels", "stacked_digits has 3 channels (one digit each)")


# Dataset kinds with labels conditional models can use (`wgan_jax.data.sources.num_classes`):
# digits 10, stacked_digits 1000 (class 100*R + 10*G + B), tfds:NAME the ClassLabel feature
# `data_label`, folder:/path its subfolders when `folder_classes` is on.
LABELLED_DATASETS = ("digits", "stacked_digits", "tfds", "folder")


def _validate_labels(config: ml_collections.ConfigDict) -> None:
    """`folder_classes` and `data_label` belong to folder and tfds datasets."""
    kind = config.dataset.partition(":")[0]
    if config.folder_classes and kind != "folder":
        _fail("folder_classes", f"only folder:/path datasets have class subfolders; "
              f"{config.dataset!r} has none (leave it False)")
    if kind == "tfds" and not config.data_label.strip():
        _fail("data_label", "must name the dataset's ClassLabel feature, e.g. 'label'")
    if kind != "tfds" and config.data_label != "label":
        _fail("data_label", f"only tfds:NAME datasets have label features; {config.dataset!r} "
              f"(got {config.data_label!r}, leave it 'label')")


def _validate_conditional(config: ml_collections.ConfigDict) -> None:
    _validate_labels(config)
    conditional = config.model.conditional
    if config.model.num_classes < 0 or (conditional == "none" and config.model.num_classes):
        _fail("model.num_classes", f"{config.model.num_classes}: only a conditional model has "
              "classes, and 0 reads their count from the data")
    if conditional == "none":
        return
    kind = config.dataset.partition(":")[0]
    if kind not in LABELLED_DATASETS or (kind == "folder" and not config.folder_classes):
        _fail("model.conditional", f"{conditional!r} needs class labels, and dataset "
              f"{config.dataset!r} has none the trainer can use (labelled: digits, "
              "stacked_digits, tfds:NAME with config.data_label, folder:/path with "
              "config.folder_classes=True)")
    own = [k for k in ("generator", "critic") if config.model[k]]
    if conditional == "projection" and own:
        _fail("model.conditional", f"'projection' is the built-in networks' conditioning; "
              f"with your own {' and '.join(own)} (model.{own[0]}) set 'labels': your "
              "networks get the labels as labels=... (see wgan_jax.models.contract)")
    if config.model.kind in ("dcgan", "resnet") and config.model.generator_norm != "batch":
        _fail("model.conditional", f"{conditional!r} with model.kind {config.model.kind!r} "
              "conditions the generator through its BatchNorms: needs "
              "model.generator_norm='batch'")


def _validate_eval(config: ml_collections.ConfigDict) -> None:
    """`config.eval.num_samples` with evaluation on, and `config.sampling`; what evaluation
    can compute for the data is `wgan_jax.eval_plan.eval_plan`'s check (the trainer runs it
    after this one)."""
    if config.eval_every > 0 and config.eval.num_samples < MIN_EVAL_SAMPLES:
        _fail("eval.num_samples", f"must be >= {MIN_EVAL_SAMPLES} when eval_every > 0 (the "
              f"metrics compare sample statistics), got {config.eval.num_samples!r}")
    fraction = config.sampling.jacobian_truncation
    if not (math.isfinite(fraction) and 0.0 <= fraction < 1.0):
        _fail("sampling.jacobian_truncation", f"must be in [0, 1) (the share of latents "
              f"dropped), got {fraction!r}")
    if fraction and config.model.conditional != "none":
        _fail("sampling.jacobian_truncation", "is for unconditional models; set it to 0 with "
              f"model.conditional={config.model.conditional!r}")


def data_shape(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """The shape of one example: (2,) for toy data, (H, W, C) for images."""
    if config.dataset.startswith("toy:"):
        return (2,)
    return (config.image_size, config.image_size, config.num_channels)
