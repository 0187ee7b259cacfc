"""The residual connection and LayerNorm that close XLNet's attention and feed-forward blocks."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf import kernels
from xlnet_tf.kernels import fast
from xlnet_tf.kernels.dropout_mask import dropout


@kernels.fast_path(fast=fast.residual_layer_norm)
def residual_layer_norm(out, x, gamma, beta, epsilon: float, rate: float = 0.0, seed=None, bias=None):
    """``LayerNorm(x + dropout(out [+ bias]))`` over the last axis: out, x [..., D] -> x's dtype.

    The sums and the normalisation run in float32 (the original's ``tf.contrib.layers.layer_norm``: moments,
    then ``batch_normalization``); ``gamma``, ``beta``, ``bias`` [D]. Dropout at ``rate`` with ``seed`` (int [2];
    None: off).
    """
    y = tf.cast(out, tf.float32)
    if bias is not None:
        y += tf.cast(bias, tf.float32)
    y = dropout(y, rate, seed) + tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(y, axes=[-1], keepdims=True)
    y = tf.nn.batch_normalization(y, mean, variance, tf.cast(beta, tf.float32), tf.cast(gamma, tf.float32),
                                  epsilon)
    return tf.cast(y, x.dtype)
