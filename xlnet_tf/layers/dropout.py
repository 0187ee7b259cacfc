"""Dropout with a cheap random-number path for CPU.

Keras' dropout draws ``StatelessRandomUniformV2`` floats (in the compute dtype), which on CPU costs several ns
per element; an XLNet training step draws tens of millions of them. Raw 32-bit Philox bits
(``StatelessRandomUniformFullIntV2``) are several times cheaper, and comparing them with an integer threshold
gives the same Bernoulli(1 - rate) mask (exact to 2^-32). Same seeding (the layer's Keras ``SeedGenerator``: a
fresh seed per call), same config and weights as ``keras.layers.Dropout``; no ``noise_shape``.
"""

from __future__ import annotations

import keras
import tensorflow as tf

_PHILOX = 1


def fast_dropout(x, rate: float, seed):
    """``x * keep / (1 - rate)`` with ``keep ~ Bernoulli(1 - rate)`` drawn from ``seed`` (int [2])."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.cast(seed, tf.int64))
    bits = tf.raw_ops.StatelessRandomUniformFullIntV2(shape=tf.shape(x), key=key, counter=counter, alg=_PHILOX,
                                                      dtype=tf.uint32)
    # Signed view of uniform 32-bit words: uniform on [-2^31, 2^31); keep iff >= rate * 2^32 - 2^31.
    threshold = int(round(rate * 2.0 ** 32)) - 2 ** 31
    keep = tf.bitcast(bits, tf.int32) >= tf.constant(threshold, tf.int32)
    keep_prob = 1.0 - (threshold + 2 ** 31) / 2.0 ** 32
    return tf.where(keep, x * tf.constant(1.0 / keep_prob, x.dtype), tf.zeros([], x.dtype))


@keras.saving.register_keras_serializable(package="xlnet_tf")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` (same seed generator and config) with ``fast_dropout``'s mask."""

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            if self.noise_shape is not None:
                return super().call(inputs, training=training)
            return fast_dropout(inputs, self.rate, self.seed_generator.next())
        return inputs
