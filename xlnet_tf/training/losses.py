"""Losses, returned as (sum, count) so the mean over the *global* batch is exact under any replica split."""

import tensorflow as tf


def sparse_softmax_cross_entropy(logits, labels):
    """``-log softmax(logits)[label]`` per row: logits float32 [..., V], labels int [...] -> float32 [...]. A label
    outside ``[0, V)`` is an error on every device (TensorFlow's GPU kernel would return NaN)."""
    labels = tf.cast(labels, tf.int32)
    vocab = tf.shape(logits)[-1]
    with tf.control_dependencies([
            tf.debugging.assert_less(labels, vocab, message="label id outside the vocabulary"),
            tf.debugging.assert_non_negative(labels, message="negative label id")]):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def permutation_lm_loss(lm_logits, target, target_mask):
    """XLNet's pretraining loss: cross-entropy of the query stream over the predicted positions, weighted by
    ``target_mask`` (0 for padded targets). Returns ``(sum of weighted losses, sum of weights)``.

    lm_logits: float [B, P, V]; target: int [B, P]; target_mask: float [B, P].
    """
    losses = sparse_softmax_cross_entropy(tf.cast(lm_logits, tf.float32), target)
    weights = tf.cast(target_mask, tf.float32)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)
