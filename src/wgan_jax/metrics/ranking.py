"""The one rule for ranking evaluations: which way each metric is better, and which metric picks
the best checkpoint. Checkpoints, evaluation, early stopping, the health rules and `diagnose`
all ask this module, so they can never disagree.

Metric names are `eval/NAME` or, for metrics computed on learned features, `eval/NAME_SPACE`
with SPACE one of `FEATURE_SPACES` (`eval/fid_digits`: FID on the digit classifier's features;
`eval/fid_inception`: FID on Inception pool3 features). The direction and the preference look
at NAME only.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["lower_is_better", "is_better", "choose_metric", "split_name", "normalise",
           "is_eval_score", "HIGHER_IS_BETTER", "PREFERENCE"]

FEATURE_SPACES = ("inception", "digits")  # also the order among equal NAMEs, best first

#: Counts, fractions and scores; every other metric (fid, kid, w1, reverse_kl, kl, ...) is a
#: distance or divergence, so lower is better.
HIGHER_IS_BETTER = (
    "modes", "is", "inception_score", "precision", "recall", "density", "coverage",
    "high_quality", "hq", "accuracy", "label_accuracy",
)

#: The metric that picks the best checkpoint when `config.eval.metric` is "": the first of these
#: NAMEs an evaluation reports, then any other score in alphabetical order.
PREFERENCE = ("fid", "kid", "w1", "reverse_kl", "modes", "is")


def normalise(metric: str) -> str:
    """`fid` -> `eval/fid`; names already under `eval/` (and "") are returned as they are."""
    return metric if not metric or metric.startswith("eval/") else "eval/" + metric


def split_name(metric: str) -> tuple[str, str]:
    """`eval/fid_digits` -> ("fid", "digits"); `eval/reverse_kl` -> ("reverse_kl", "")."""
    name = metric.split("/")[-1].lower()
    for space in FEATURE_SPACES:
        if name.endswith("_" + space):
            return name[: -len(space) - 1], space
    return name, ""


def lower_is_better(metric: str) -> bool:
    """For `eval/NAME[_SPACE]` or `NAME`: False when NAME (or its first `_` word) is a score."""
    name, _ = split_name(metric)
    return not (name in HIGHER_IS_BETTER or name.split("_")[0] in HIGHER_IS_BETTER)


def is_better(metric: str, a: float, b: float) -> bool:
    """True if value `a` of `metric` is strictly better than `b`."""
    return a < b if lower_is_better(metric) else a > b


def is_eval_score(key: str) -> bool:
    """An `eval/*` score (not a spread such as `eval/kid_std`, a count of samples, or a class
    number such as `eval/fid_digits_class_worst_label`)."""
    return key.startswith("eval/") and not key.endswith(("_std", "/std", "num_samples", "_label"))


def _rank(key: str) -> tuple[int, int, str]:
    name, space = split_name(key)
    first = PREFERENCE.index(name) if name in PREFERENCE else len(PREFERENCE)
    second = FEATURE_SPACES.index(space) if space else len(FEATURE_SPACES)
    return first, second, key


def choose_metric(keys: Iterable[str], wanted: str = "") -> str:
    """The metric among `keys` that ranks evaluations, or "" when none fits.

    `wanted` (`config.eval.metric`, with or without `eval/`) picks the key of that exact name,
    else the keys whose NAME it is (`fid` -> `eval/fid_digits`); "" picks by `PREFERENCE`.
    Only eval scores (`is_eval_score`) are candidates.
    """
    scores = sorted((k for k in keys if is_eval_score(k)), key=_rank)
    wanted = normalise(wanted)
    if not wanted:
        return scores[0] if scores else ""
    if wanted in scores:
        return wanted
    name, space = split_name(wanted)
    matches = [k for k in scores if not space and split_name(k)[0] == name]
    return matches[0] if matches else ""
