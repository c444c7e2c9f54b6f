"""Label metrics of class-conditional runs, read by the digit classifier.

`ClassEvaluator` (conditional `digits`): `eval/label_accuracy`, the share of samples the
classifier reads as the label they were generated for, and the FID within each class on the
digit features against the real reference examples of that class: `eval/fid_digits_class_mean`
and `eval/fid_digits_class_worst` (its class: `eval/fid_digits_class_worst_label`).
`StackedLabelEvaluator` (conditional `stacked_digits`): `eval/label_accuracy`, the share whose
three per-channel digits are their label's. `heldout_label_accuracy`: the same accuracy on real
held-out digits, the floor a start line reports.
"""

from __future__ import annotations

import numpy as np

from wgan_jax.data.digits import digits_source, stacked_digits_classes
from wgan_jax.data.images import to_float
from wgan_jax.evaluators.base import Samples
from wgan_jax.evaluators.features import FeatureSpace
from wgan_jax.evaluators.spaces import digit_ink
from wgan_jax.metrics.conditional import label_accuracy, per_class_fid
from wgan_jax.metrics.digits_classifier import DigitClassifier, train_test_split_indices

__all__ = ["ClassEvaluator", "StackedLabelEvaluator", "heldout_label_accuracy"]


class ClassEvaluator:
    """Label accuracy and per-class FID of samples of the classes with a frequency > 0, on the
    digit classifier's features (`space`, whose reference examples have labels)."""

    def __init__(self, classifier: DigitClassifier, space: FeatureSpace,
                 class_frequencies: tuple[float, ...]) -> None:
        if not class_frequencies or not space.has_labels:
            raise ValueError("class metrics need the reference examples' labels and the data's "
                             "class frequencies")
        self.classifier, self.space = classifier, space
        self.classes = [k for k, p in enumerate(class_frequencies) if p > 0]

    def __call__(self, samples: Samples) -> dict[str, float]:
        features = samples.features(self.space)
        predicted = self.classifier.logits_from_features(features).argmax(axis=1)
        assert samples.labels is not None  # a conditional run's samples have labels
        fids = per_class_fid(self.space.reference(), self.space.reference_labels(), features,
                             samples.labels, self.classes)
        worst = int(np.argmax(fids))
        return {"eval/label_accuracy": label_accuracy(predicted, samples.labels),
                "eval/fid_digits_class_mean": float(fids.mean()),
                "eval/fid_digits_class_worst": float(fids[worst]),
                "eval/fid_digits_class_worst_label": float(self.classes[worst])}


class StackedLabelEvaluator:
    """`eval/label_accuracy` of stacked digits: all three per-channel digits must be the
    label's (`data.digits.stacked_digits_classes`)."""

    def __init__(self, classifier: DigitClassifier) -> None:
        self.classifier = classifier

    def __call__(self, samples: Samples) -> dict[str, float]:
        digits = self.classifier.predict_channels(samples.images)
        assert samples.labels is not None  # a conditional run's samples have labels
        return {"eval/label_accuracy": label_accuracy(stacked_digits_classes(digits),
                                                      samples.labels)}


def heldout_label_accuracy(
    classifier: DigitClassifier, image_size: int, num_channels: int
) -> tuple[float, int]:
    """(label accuracy, count) of the digit classifier on its held-out real digits at this
    size and channel count, read as the evaluator reads samples: the floor of
    `eval/label_accuracy`."""
    source = digits_source(image_size, num_channels)
    assert source.labels is not None  # the digits have labels
    _, test = train_test_split_indices(len(source.labels))
    images = np.clip(to_float(source.images[test]), -1.0, 1.0)
    predicted = classifier.predict(digit_ink(images))
    return label_accuracy(predicted, source.labels[test]), len(test)
