"""Losses, returned as (sum, count) so the mean over the *global* batch is exact under any replica split."""

import tensorflow as tf


def sparse_softmax_cross_entropy(logits, labels):
    """``-log softmax(logits)[label]`` per row: logits float32 [..., V], labels int [...] -> float32 [...].

    The same math as ``tf.nn.sparse_softmax_cross_entropy_with_logits`` (``log sum exp(l - max) - (l_label - max)``;
    gradient ``softmax - one_hot``), built from multi-threaded reductions and element-wise ops: on CPU TensorFlow's
    fused kernel runs on one thread and computes the [.., V] gradient in the forward pass, which sits on the
    step's critical path (the join of the two streams). The gradient is one scaled pass over the kept
    ``exp(l - max)`` plus a scatter at the labels.
    """
    logits = tf.convert_to_tensor(logits)
    vocab = tf.shape(logits)[-1]
    flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    label_index = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], 1)
    tf.debugging.assert_less(flat_labels, vocab, message="label id outside the vocabulary")  # as TF's kernel does
    tf.debugging.assert_non_negative(flat_labels, message="negative label id")

    @tf.custom_gradient
    def cross_entropy(flat_logits):
        row_max = tf.reduce_max(flat_logits, -1, keepdims=True)
        exp = tf.exp(flat_logits - row_max)
        total = tf.reduce_sum(exp, -1, keepdims=True)
        loss = tf.squeeze(tf.math.log(total) + row_max, -1) - tf.gather_nd(flat_logits, label_index)

        def grad(d_loss):
            return tf.tensor_scatter_nd_sub(exp * (d_loss[:, None] / total), label_index, d_loss)

        return loss, grad

    losses = cross_entropy(tf.reshape(logits, [-1, vocab]))
    return tf.reshape(losses, tf.shape(labels))


def permutation_lm_loss(lm_logits, target, target_mask):
    """XLNet's pretraining loss: cross-entropy of the query stream over the predicted positions, weighted by
    ``target_mask`` (0 for padded targets). Returns ``(sum of weighted losses, sum of weights)``.

    lm_logits: float [B, P, V]; target: int [B, P]; target_mask: float [B, P].
    """
    losses = sparse_softmax_cross_entropy(tf.cast(lm_logits, tf.float32), target)
    weights = tf.cast(target_mask, tf.float32)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)
