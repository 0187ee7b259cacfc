"""Losses, returned as (sum, count) so the mean over the *global* batch is exact under any replica split."""

import tensorflow as tf


def permutation_lm_loss(lm_logits, target, target_mask):
    """XLNet's pretraining loss: cross-entropy of the query stream over the predicted positions, weighted by
    ``target_mask`` (0 for padded targets). Returns ``(sum of weighted losses, sum of weights)``.

    lm_logits: float [B, P, V]; target: int [B, P]; target_mask: float [B, P].
    """
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(target, tf.int32),
                                                            logits=tf.cast(lm_logits, tf.float32))
    weights = tf.cast(target_mask, tf.float32)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)
