"""Dropout with a cheap random-number path for CPU.

Keras' dropout draws ``StatelessRandomUniformV2`` floats (in the compute dtype) and selects with them; an XLNet
training step draws tens of millions of them, and on CPU the Philox generator is most of that cost (about 5 ns
per 32-bit word on two cores). Here each element gets 16 random bits: one Philox word makes two masks, half the
generator time. The mask keeps an element iff its 16 bits are at or above ``round(rate * 2^16)``, so the
realised rate is that fraction (0.1 -> 0.100006) and kept elements are scaled by exactly ``1 / (1 - realised
rate)``: the layer stays unbiased. The mask is a float multiplier applied with a custom gradient (``dy * mask``),
two multiplies instead of ``tf.where``'s selects, which are slow for bfloat16 on CPU.

Same seeding (the layer's Keras ``SeedGenerator``: a fresh seed per call), config and weights as
``keras.layers.Dropout``; with a ``noise_shape`` it falls back to Keras' implementation.
"""

from __future__ import annotations

import keras
import tensorflow as tf

_PHILOX = 1
_LEVELS = 2 ** 16


def keep_probability(rate: float) -> float:
    """The probability that ``fast_dropout`` keeps an element: ``1 - round(rate * 2^16) / 2^16``."""
    return 1.0 - round(rate * _LEVELS) / _LEVELS


def random_bits(shape, seed, static_last=None):
    """Uniform int16 values of ``shape`` (int [rank]) from ``seed`` (int [2]): two per Philox 32-bit word."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.cast(seed, tf.int64))
    if static_last is not None and static_last % 2 == 0:
        words_shape = tf.concat([shape[:-1], [static_last // 2]], 0)
        words = tf.raw_ops.StatelessRandomUniformFullIntV2(shape=words_shape, key=key, counter=counter,
                                                           alg=_PHILOX, dtype=tf.uint32)
        return tf.reshape(tf.bitcast(words, tf.int16), shape)  # [..., last/2, 2] -> [..., last]: a view
    size = tf.reduce_prod(shape)
    words = tf.raw_ops.StatelessRandomUniformFullIntV2(shape=[(size + 1) // 2], key=key, counter=counter,
                                                       alg=_PHILOX, dtype=tf.uint32)
    return tf.reshape(tf.reshape(tf.bitcast(words, tf.int16), [-1])[:size], shape)


def bits_like(x, seed):
    """``random_bits`` for a tensor shaped like ``x``."""
    return random_bits(tf.shape(x), seed, x.shape[-1] if x.shape.rank else None)


def keep_from_bits(bits, rate: float):
    """(keep mask, scale) for dropout ``rate`` from ``random_bits``: keep iff bits >= rate * 2^16 - 2^15 (the
    signed view of uniform 16-bit values), scale = 1 / keep_probability(rate)."""
    threshold = round(rate * _LEVELS) - _LEVELS // 2
    return bits >= tf.constant(threshold, tf.int16), 1.0 / keep_probability(rate)


def fast_dropout(x, rate: float, seed):
    """``x * keep / keep_probability(rate)`` with ``keep`` drawn from 16 random bits per element of ``seed``."""
    keep, scale = keep_from_bits(bits_like(x, seed), rate)
    return _multiply_by_constant_mask(x, tf.cast(keep, x.dtype) * tf.constant(scale, x.dtype))


@tf.custom_gradient
def _multiply_by_constant_mask(x, mask):
    def grad(dy):
        return dy * mask, None
    return x * mask, grad


@keras.saving.register_keras_serializable(package="xlnet_tf")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` (same seed generator and config) with ``fast_dropout``'s mask."""

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            if self.noise_shape is not None:
                return super().call(inputs, training=training)
            return fast_dropout(inputs, self.rate, self.seed_generator.next())
        return inputs

    def bits(self, inputs, training=False):
        """``random_bits`` for a fused kernel that applies this dropout itself; None when it is off."""
        if training and self.rate > 0:
            if self.noise_shape is not None:
                raise ValueError("fused dropout does not support noise_shape")
            return bits_like(inputs, self.seed_generator.next())
        return None
