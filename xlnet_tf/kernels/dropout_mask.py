"""Dropout's mask, defined once for the plain ops and the C++ kernels (which hash the same bits themselves).

Each element gets 16 random bits, two per 32-bit word, and is kept iff its bits (read as int16) are at or above
``round(rate * 2^16) - 2^15``. The realised rate is ``round(rate * 2^16) / 2^16`` (0.1 -> 0.100006), and kept
elements are scaled by exactly ``1 / (1 - realised rate)``, so dropout stays unbiased.

Word ``i`` of a call with seed ``(s0, s1)`` is ``F(F(F(i ^ k0) + k1) ^ k0)``, with F MurmurHash3's 32-bit
finalizer (a bijection with full avalanche), ``k0 = F(s0 + 0x9E3779B9)`` and ``k1 = F(s1 ^ k0)``: a counter
hash, so the mask depends only on the seed and the element's index, on every device. (TensorFlow's Philox
generator draws the same amount of randomness several times slower on CPU.)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from xlnet_tf import ops

_LEVELS = 2 ** 16


def keep_probability(rate: float) -> float:
    """The probability that an element is kept: ``1 - round(rate * 2^16) / 2^16``."""
    return 1.0 - round(rate * _LEVELS) / _LEVELS


def keep_threshold(rate: float) -> int:
    """The int16 threshold: keep iff bits >= ``round(rate * 2^16) - 2^15`` (the signed view of 16 bits)."""
    return round(rate * _LEVELS) - _LEVELS // 2


def _mix(v):
    """MurmurHash3's 32-bit finalizer (fmix32) on uint32 values."""
    def shift_xor(v, bits):
        return tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, tf.constant(bits, tf.uint32)))
    v = shift_xor(v, 16) * tf.constant(0x85EBCA6B, tf.uint32)
    v = shift_xor(v, 13) * tf.constant(0xC2B2AE35, tf.uint32)
    return shift_xor(v, 16)


def _hash(i, seed):
    """Word ``i`` (uint32, any shape) of the stream of ``seed`` (int [2])."""
    s = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    k0 = _mix(s[0] + tf.constant(0x9E3779B9, tf.uint32))
    k1 = _mix(tf.bitwise.bitwise_xor(s[1], k0))
    return _mix(tf.bitwise.bitwise_xor(_mix(_mix(tf.bitwise.bitwise_xor(i, k0)) + k1), k0))


_ROW = 1024


def _counter(count):
    """``0, 1, ..., count - 1`` (uint32, ``count`` <= 2^32), as ``row * 1024 + column`` of two short ranges behind an
    XLA optimisation barrier. A plain ``tf.range(count)`` with the count known when XLA compiles is folded by
    TensorFlow's bridge into a literal of ``count`` words (gigabytes of constants in a base-size step at batch 32,
    in host memory while compiling and in the module); the barrier keeps the two short ranges from being folded into
    it, so the counter is computed in the fused loop. Same values, same bits. (Only inside ``_bits``, which XLA
    always compiles.)"""
    count = tf.cast(count, tf.int64)
    rows, columns = ops.optimization_barrier(tf.range(tf.cast((count + _ROW - 1) // _ROW, tf.int32)),
                                             tf.range(_ROW, dtype=tf.int32))
    rows, columns = tf.cast(rows, tf.uint32), tf.cast(columns, tf.uint32)
    return tf.reshape(rows[:, None] * _ROW + columns[None, :], [-1])[:count]


# Compiled by XLA into one vectorised loop (inlined under whole-step XLA and on TPU); op by op, the ten uint32
# passes would cost more than the rest of dropout.
@tf.function(jit_compile=True, autograph=False)
def _bits(shape, seed, in_shape: bool = False):
    """Element e's 16 bits are half ``e % 2`` (the low one first) of word ``e // 2``. Each word is hashed once and
    split by shifts along a trailing axis of two: under XLA the hash runs inside each dropout's kernel (viewed as
    int16 pairs, the words were written by one kernel and read back: XLA on a GPU does not fuse a view that changes
    the element width), and XLA's generated code shares it between the two halves (hashed per element, each word
    was hashed twice, and the hash, not memory, bounded the kernel; bench/reports/gpu.md).

    ``in_shape`` (a TPU's form): each element's index is counted in ``shape`` itself and its word hashed for it,
    the same bits with no flat stream to lay out again: a TPU tiles the last two axes of an array by (8, 128), so
    the trailing axis of two and the flat stream's reshape cost it copies of every word (bench/reports/gpu.md)."""
    if in_shape:
        return _bits_in_shape(shape, seed)
    count = tf.reduce_prod(shape)
    words = _hash(_counter((count + 1) // 2), seed)
    halves = tf.bitwise.right_shift(words[:, None], tf.constant([0, 16], tf.uint32))
    bits = tf.bitcast(tf.cast(halves, tf.uint16), tf.int16)
    return tf.reshape(tf.reshape(bits, [-1])[:count], shape)


def _bits_in_shape(shape, seed):
    rank = shape.shape[0]
    ranges = ops.optimization_barrier(*[tf.range(tf.cast(shape[d], tf.int32)) for d in range(rank)])  # as _counter
    sizes = tf.cast(shape, tf.uint32)
    index = tf.zeros([], tf.uint32)
    for d, values in enumerate(ranges):  # ((i0 * d1 + i1) * d2 + i2) ..., broadcast into ``shape``
        values = tf.reshape(tf.cast(values, tf.uint32), [-1] + [1] * (rank - 1 - d))
        index = index * sizes[d] + values
    words = _hash(tf.bitwise.right_shift(index, tf.constant(1, tf.uint32)), seed)
    half = tf.bitwise.left_shift(tf.bitwise.bitwise_and(index, tf.constant(1, tf.uint32)), tf.constant(4, tf.uint32))
    return tf.bitcast(tf.cast(tf.bitwise.right_shift(words, half), tf.uint16), tf.int16)


def random_bits(shape, seed):
    """Uniform int16 values of ``shape`` (int [rank]) from ``seed`` (int [2]): two per 32-bit word, in order
    (``tf.bitcast`` of the words to int16 gives the same values). Refused past 2^32 elements, the C++ kernels' limit
    per call, so every path draws the same masks (checked where the shape is known when traced)."""
    static = tf.get_static_value(shape)
    count = None if static is None else int(np.prod(static, dtype=np.int64))
    if count is not None and count > 2 ** 32:
        raise ValueError(f"dropout's bits for {count} elements (shape {list(static)}): at most 2^32 in one tensor")
    return _bits(tf.cast(shape, tf.int64), seed, ops.for_tpu())


def keep_mask(x, rate: float, seed):
    """bool, shaped like ``x``: the elements that dropout at ``rate`` with ``seed`` (int [2]) keeps."""
    bits = random_bits(tf.shape(x), seed)
    return bits >= tf.constant(keep_threshold(rate), tf.int16)


def dropout(x, rate: float, seed):
    """``x * keep / keep_probability(rate)``; ``seed`` None (or rate 0): x unchanged."""
    if seed is None or rate == 0:
        return x
    scale = tf.constant(1.0 / keep_probability(rate), x.dtype)
    return x * (tf.cast(keep_mask(x, rate, seed), x.dtype) * scale)
