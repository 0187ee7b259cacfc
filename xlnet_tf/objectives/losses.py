"""Losses, returned as (sum, count) so the mean over the *global* batch is exact under any replica split."""

import tensorflow as tf

from xlnet_tf import kernels
from xlnet_tf.kernels import fast


def cross_entropy(logits, labels):
    """``cross_entropy_and_hits`` of checked labels: a label outside ``[0, V)`` is an error on every device
    (TensorFlow's GPU kernel would return NaN)."""
    labels = tf.cast(labels, tf.int32)
    vocab = tf.shape(logits)[-1]
    with tf.control_dependencies([
            tf.debugging.assert_less(labels, vocab, message="label id outside the vocabulary"),
            tf.debugging.assert_non_negative(labels, message="negative label id")]):
        return cross_entropy_and_hits(logits, tf.identity(labels))


@kernels.fast_path(fast=fast.cross_entropy_and_hits)
def cross_entropy_and_hits(logits, labels):
    """Per row of float32 logits [..., V] and int32 labels [...] in ``[0, V)``: the cross-entropy
    ``-log softmax(logits)[label]`` and the hit, 1.0 where the label is the (first) arg max, else 0.0 (no
    gradient); both float32 [...]."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    return losses, hits


def prediction_terms(lm_logits, target, target_mask, names) -> dict:
    """Cross-entropy and accuracy of a pretraining objective's predictions, per loss term: the P prediction rows
    split into ``len(names)`` equal parts (XLNet: one term; UniLMv2: the [M] rows, then the [P] rows).

    lm_logits: float [B, P, V]; target: int [B, P]; target_mask: float [B, P] (0 for padded targets). Returns
    ``{name: (sum of losses, number correct, number of targets)}``, float32 scalars weighted by ``target_mask``.
    """
    losses, correct = cross_entropy(tf.cast(lm_logits, tf.float32), target)
    weights = tf.cast(target_mask, tf.float32)
    parts = [tf.split(x, len(names), axis=1) for x in (losses, correct, weights)]
    return {name: (tf.reduce_sum(loss * weight), tf.reduce_sum(right * weight), tf.reduce_sum(weight))
            for name, loss, right, weight in zip(names, *parts)}


def target_counts(target_mask, names) -> dict:
    """``prediction_terms``' counts alone: ``{name: number of targets}`` per part of the rows of ``target_mask``
    [B, P] (the same sums)."""
    return {name: tf.reduce_sum(weight)
            for name, weight in zip(names, tf.split(tf.cast(target_mask, tf.float32), len(names), axis=1))}
