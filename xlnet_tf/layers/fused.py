"""Element-wise chains compiled as single XLA loops, for training.

On CPU and GPU without whole-step XLA, TensorFlow runs ``dropout(gelu(h + b))``, ``LayerNorm(x + dropout(y + b))``,
the attention probabilities' ``cast(dropout(p))`` or the attention scores' ``float32(ac + bd + ef * s) + mask`` as
up to a dozen kernels, each a full pass over memory, forward and backward; on a 2-core CPU those passes cost as
much as the feed-forward matmuls in bfloat16. ``fused_op`` compiles such a chain forward into one XLA kernel and its
backward (recomputing the cheap forward instead of storing intermediates) into another, while the matmuls
around it stay on the native (oneDNN / cuBLAS) kernels. Whole-step ``jit_compile`` (and TPUs) simply inline them.

Training uses them; inference uses the plain ops unless traced inside ``inference_kernels()`` (batch prediction in
Python: about 20% faster on CPU), so a SavedModel exported the usual way needs no XLA in the serving binary.
Set ``XLNET_TF_FUSED_KERNELS=0`` to use the plain ops everywhere (a platform without XLA; dropout then draws its
random words from TensorFlow's Philox instead of ``dropout``'s XLA hash kernel).

The dropout decisions come in as the 16-bit random values of ``dropout.random_bits``, drawn in their own kernel
(hashing inside these kernels instead measured 3% slower in bfloat16 and 5% slower in float32), and are re-derived
from them in the backward pass.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os

import tensorflow as tf

from xlnet_tf import ops
from xlnet_tf.layers.dropout import keep_from_bits, keep_probability, keep_threshold


_INFERENCE = contextvars.ContextVar("xlnet_tf_fused_inference", default=False)


def enabled() -> bool:
    """Whether the fused kernels may be used at all (``XLNET_TF_FUSED_KERNELS``, default on)."""
    return os.environ.get("XLNET_TF_FUSED_KERNELS", "1") != "0"


def use(training) -> bool:
    """Whether a layer called with ``training`` runs the fused kernels."""
    return enabled() and (bool(training) or _INFERENCE.get())


@contextlib.contextmanager
def inference_kernels():
    """Functions traced inside also use the fused kernels at inference (not for SavedModel export)."""
    token = _INFERENCE.set(True)
    try:
        yield
    finally:
        _INFERENCE.reset(token)


def fused_op(math_fn, num_differentiable: int):
    """``op(*args)`` computing ``math_fn(*args)`` in one XLA kernel, with its gradient w.r.t. the first
    ``num_differentiable`` args in another (the rest get no gradient). ``math_fn`` must be pure TF math."""
    forward = tf.function(math_fn, jit_compile=True, autograph=False)

    @tf.function(jit_compile=True, autograph=False)
    def backward(dy, *args):
        diff = list(args[:num_differentiable])
        with tf.GradientTape() as tape:
            tape.watch(diff)
            y = math_fn(*diff, *args[num_differentiable:])
        return tape.gradient(y, diff, output_gradients=dy)

    def op(*args):
        rest = args[num_differentiable:]

        @tf.custom_gradient
        def apply(*diff):
            def grad(dy):
                return backward(dy, *diff, *rest)
            return forward(*diff, *rest), grad

        return apply(*args[:num_differentiable])

    return op


def _dropped(x, bits, rate):
    """x with dropout applied from ``bits`` (None: no dropout), in x's dtype."""
    if bits is None:
        return x
    keep, scale = keep_from_bits(bits, rate)
    return tf.where(keep, x * tf.cast(scale, x.dtype), tf.zeros([], x.dtype))


def _layer_norm(x, gamma, beta, epsilon):
    """The original's ``tf.contrib.layers.layer_norm`` (moments + ``batch_normalization``), in float32."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)


@functools.cache
def _activation_op(activation, rate):
    """The fused ``dropout(activation(h + bias))`` op, built once per (activation, rate); rate None: no dropout."""
    def math(h, bias, bits=None):
        y = activation(tf.cast(h, tf.float32) + tf.cast(bias, tf.float32))
        return tf.cast(_dropped(y, bits, rate), h.dtype)
    return fused_op(math, 2)


@functools.cache
def _layer_norm_op(epsilon, rate, with_bias):
    """The fused ``LayerNorm(x + dropout(out [+ bias]))`` op, built once per (epsilon, rate, with_bias); rate
    None: no dropout."""
    def math(out, *args):
        bias, (x, gamma, beta, *bits) = (args[0], args[1:]) if with_bias else (None, args)
        y = tf.cast(out, tf.float32)
        if bias is not None:
            y += tf.cast(bias, tf.float32)
        y = _dropped(y, bits[0] if bits else None, rate) + tf.cast(x, tf.float32)
        return tf.cast(_layer_norm(y, gamma, beta, epsilon), x.dtype)
    return fused_op(math, 5 if with_bias else 4)


def activation_dropout(h, activation, bias, bits=None, rate: float = 0.0):
    """``dropout(activation(h + bias))`` evaluated in float32; returns h's dtype. Taking the bias here (rather
    than after the matmul) keeps the matmul a plain one: oneDNN's fused MatMul+BiasAdd is ~30% slower on CPU."""
    if bits is None:
        return _activation_op(activation, None)(h, bias)
    return _activation_op(activation, rate)(h, bias, bits)


def residual_layer_norm(out, x, gamma, beta, epsilon: float, bits=None, rate: float = 0.0, bias=None):
    """``LayerNorm(x + dropout(out [+ bias]))`` with the sums and the norm in float32; returns x's dtype.

    On CPU this is the C++ kernel pair of ``xlnet_tf.ops`` (forward and backward each one pass, multi-threaded
    over rows); elsewhere, or where that library is unavailable, the XLA kernels below."""
    if _native_applies(out, x):
        return _native_residual_layer_norm(out, x, gamma, beta, epsilon, bits, rate, bias)
    args = [out] + ([] if bias is None else [bias]) + [x, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)]
    if bits is None:
        return _layer_norm_op(epsilon, None, bias is not None)(*args)
    return _layer_norm_op(epsilon, rate, bias is not None)(*args, bits)


def _native_applies(out, x) -> bool:
    """Whether the ``xlnet_tf.ops`` kernels run here: the library is built, not inside XLA (``jit_compile``,
    TPU), not a GPU process, float32 or bfloat16 rows of a known depth."""
    return (x.shape[-1] is not None and out.dtype == x.dtype and x.dtype in (tf.float32, tf.bfloat16)
            and not ops.in_xla_context() and ops.cpu_process() and ops.residual_layer_norm() is not None)


def _native_residual_layer_norm(out, x, gamma, beta, epsilon, bits, rate, bias):
    """``residual_layer_norm`` on the C++ kernel pair, over [rows, depth] views of ``out`` and ``x``."""
    forward, backward = ops.residual_layer_norm()
    depth = x.shape[-1]
    attrs = dict(has_bias=bias is not None, has_dropout=bits is not None, epsilon=float(epsilon), threshold=0,
                 scale=1.0)
    flat_bits = tf.zeros([0], tf.int16)
    if bits is not None:  # keep_from_bits' rule
        attrs.update(threshold=keep_threshold(rate), scale=1.0 / keep_probability(rate))
        flat_bits = tf.reshape(bits, [-1, depth])
    bias32 = tf.zeros([0]) if bias is None else tf.cast(bias, tf.float32)

    @tf.custom_gradient
    def apply(rows_out, rows_x, gamma32, beta32, bias32):
        def grad(dy):
            d = backward(dy, rows_out, rows_x, bias32, gamma32, flat_bits, **attrs)
            return d.d_out, d.d_x, d.d_gamma, d.d_beta, (None if bias is None else d.d_bias)
        return forward(rows_out, rows_x, bias32, gamma32, beta32, flat_bits, **attrs), grad

    gamma32, beta32 = (tf.cast(tf.convert_to_tensor(v), tf.float32) for v in (gamma, beta))
    y = apply(tf.reshape(out, [-1, depth]), tf.reshape(x, [-1, depth]), gamma32, beta32, bias32)
    return tf.reshape(y, tf.shape(x))


@functools.cache
def _dropout_op(rate, dtype):
    """The fused ``cast(dropout(x), dtype)`` op, built once per (rate, dtype)."""
    def math(x, bits):
        return tf.cast(_dropped(x, bits, rate), dtype)
    return fused_op(math, 1)


def dropout(x, bits=None, rate: float = 0.0, dtype=None):
    """``dropout(x)`` from ``bits`` (None: no dropout), cast to ``dtype`` (default x's), forward and backward
    each one kernel instead of the mask's separate compare, cast and multiplies."""
    dtype = tf.as_dtype(dtype or x.dtype)
    if bits is None:
        return tf.cast(x, dtype)
    return _dropout_op(rate, dtype)(x, bits)


@functools.cache
def _score_ops(with_segment, with_mask, dtype):
    """(forward, backward) XLA kernels of ``attention_score``, built once per (with_segment, with_mask, dtype)."""
    @tf.function(jit_compile=True, autograph=False)
    def forward(ac, bd, *args):
        score = tf.cast(ac, tf.float32) + tf.cast(bd, tf.float32)
        if with_segment:
            ef, segment_diff, *args = args
            score += tf.cast(ef, tf.float32) * tf.cast(segment_diff, tf.float32)
        if with_mask:
            score += args[0]
        return score

    @tf.function(jit_compile=True, autograph=False)
    def backward(d_score, *segment_diff):
        d_terms = tf.cast(d_score, dtype)  # the gradient of ac and of bd
        if not with_segment:
            return d_terms
        d_ef = tf.reduce_sum(d_score * tf.cast(segment_diff[0], tf.float32), axis=-1, keepdims=True)
        return d_terms, tf.cast(d_ef, dtype)

    return forward, backward


def attention_score(ac, bd, ef=None, segment_diff=None, mask=None):
    """``ac + bd [+ ef * segment_diff] [+ mask]`` in float32: [N, B, Lq, K] content and position scores in the
    compute dtype, ef [N, B, Lq, 1], segment_diff bool [B, Lq, K], mask float32 [B|1, Lq, K] (broadcast over heads).
    One kernel (and one for the gradient) instead of a pass per add, cast and multiply. The gradient needs only
    segment_diff, so the score-sized ac and bd are not kept for the backward pass."""
    forward, backward = _score_ops(ef is not None, mask is not None, ac.dtype)
    rest = ([segment_diff] if ef is not None else []) + ([mask] if mask is not None else [])

    @tf.custom_gradient
    def score(ac, bd, *ef_arg):
        def grad(d_score):
            if ef is None:
                d_terms = backward(d_score)
                return d_terms, d_terms
            d_terms, d_ef = backward(d_score, segment_diff)
            return d_terms, d_terms, d_ef
        return forward(ac, bd, *ef_arg, *rest), grad

    return score(ac, bd, *([ef] if ef is not None else []))
