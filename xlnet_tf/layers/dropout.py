"""Dropout with a cheap random-number path for CPU.

Keras' dropout draws ``StatelessRandomUniformV2`` floats (in the compute dtype) and selects with them; an XLNet
training step draws tens of millions of them, and on CPU TensorFlow's (scalar) Philox generator is a large part
of the step. Here each element gets 16 random bits, two per 32-bit word, and the words come from a counter-based
hash compiled by XLA (vectorised; about 2x cheaper than the Philox kernel on CPU, and the same numbers on every
device). The mask keeps an element iff its 16 bits are at or above ``round(rate * 2^16)``, so the realised rate is
that fraction (0.1 -> 0.100006) and kept elements are scaled by exactly ``1 / (1 - realised rate)``: the layer
stays unbiased. The mask is a float multiplier applied with a custom gradient (``dy * mask``), two multiplies
instead of ``tf.where``'s selects, which are slow for bfloat16 on CPU.

The hash: word ``i`` of a call with seed ``(s0, s1)`` is ``F(F(F(i ^ k0) + k1) ^ k0)`` with F MurmurHash3's 32-bit
finalizer (a bijection with full avalanche), ``k0 = F(s0 + 0x9E3779B9)`` and ``k1 = F(s1 ^ k0)``. With
``XLNET_TF_FUSED_KERNELS=0`` (a platform without XLA) the words come from TensorFlow's stateless Philox instead.

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


def _mix(v):
    """MurmurHash3's 32-bit finalizer (fmix32) on uint32 values."""
    def shift_xor(v, bits):
        return tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, tf.constant(bits, tf.uint32)))
    v = shift_xor(v, 16) * tf.constant(0x85EBCA6B, tf.uint32)
    v = shift_xor(v, 13) * tf.constant(0xC2B2AE35, tf.uint32)
    return shift_xor(v, 16)


def hash_words(count, seed):
    """``count`` uniform uint32 words from ``seed`` (int [2]): word i = F(F(F(i ^ k0) + k1) ^ k0)."""
    s = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    k0 = _mix(s[0] + tf.constant(0x9E3779B9, tf.uint32))
    k1 = _mix(tf.bitwise.bitwise_xor(s[1], k0))
    i = tf.bitcast(tf.range(count, dtype=tf.int32), tf.uint32)
    return _mix(tf.bitwise.bitwise_xor(_mix(_mix(tf.bitwise.bitwise_xor(i, k0)) + k1), k0))


@tf.function(jit_compile=True, autograph=False)
def _hash_words_kernel(words_shape, seed):
    return tf.reshape(hash_words(tf.reduce_prod(words_shape), seed), words_shape)


def _words(words_shape, seed):
    """Uniform uint32 words of ``words_shape``: the XLA hash kernel, or Philox without XLA."""
    from xlnet_tf.layers import fused  # fused builds on this module's masks

    if fused.enabled():
        return _hash_words_kernel(tf.cast(words_shape, tf.int32), seed)
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.cast(seed, tf.int64))
    return tf.raw_ops.StatelessRandomUniformFullIntV2(shape=words_shape, key=key, counter=counter, alg=_PHILOX,
                                                      dtype=tf.uint32)


def random_bits(shape, seed, static_last=None):
    """Uniform int16 values of ``shape`` (int [rank]) from ``seed`` (int [2]): two per 32-bit word."""
    if static_last is not None and static_last % 2 == 0:
        words = _words(tf.concat([shape[:-1], [static_last // 2]], 0), seed)
        return tf.reshape(tf.bitcast(words, tf.int16), shape)  # [..., last/2, 2] -> [..., last]: a view
    size = tf.reduce_prod(shape)
    words = _words(tf.reshape((size + 1) // 2, [1]), seed)
    return tf.reshape(tf.reshape(tf.bitcast(words, tf.int16), [-1])[:size], shape)


def bits_like(x, seed):
    """``random_bits`` for a tensor shaped like ``x``."""
    return random_bits(tf.shape(x), seed, x.shape[-1] if x.shape.rank else None)


def keep_threshold(rate: float) -> int:
    """The int16 threshold of ``keep_from_bits``: ``round(rate * 2^16) - 2^15`` (the signed view of 16 bits)."""
    return round(rate * _LEVELS) - _LEVELS // 2


def keep_from_bits(bits, rate: float):
    """(keep mask, scale) for dropout ``rate`` from ``random_bits``: keep iff bits >= ``keep_threshold(rate)``,
    scale = 1 / keep_probability(rate)."""
    return bits >= tf.constant(keep_threshold(rate), tf.int16), 1.0 / keep_probability(rate)


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

    def call_seed(self, training=False):
        """The seed (int [2]) of this call's mask for a kernel that hashes ``random_bits`` itself; None when off."""
        if training and self.rate > 0:
            if self.noise_shape is not None:
                raise ValueError("fused dropout does not support noise_shape")
            return self.seed_generator.next()
        return None

    def bits(self, inputs, training=False):
        """``random_bits`` for a fused kernel that applies this dropout itself; None when it is off."""
        seed = self.call_seed(training)
        return None if seed is None else bits_like(inputs, seed)
