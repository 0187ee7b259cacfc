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
(hashing inside these XLA kernels instead measured 3% slower in bfloat16 and 5% slower in float32), and are
re-derived from them in the backward pass.

On CPU, chains run on the C++ kernels of ``xlnet_tf.ops`` instead: the residual LayerNorm, the attention
probabilities (``attention_probs``: shift, segment term, mask, softmax and dropout in one pass each way) and, in
bfloat16, the feed-forward activation. They hash the dropout bits themselves from the same seed, so the masks are
the ones ``random_bits`` would give: the fused ops take the layer's seed (``Dropout.call_seed``), not bits.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os

import tensorflow as tf

from xlnet_tf import ops
from xlnet_tf.layers.activations import ACTIVATIONS
from xlnet_tf.layers.dropout import bits_like, keep_from_bits, keep_probability, keep_threshold


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


def activation_dropout(h, activation: str, bias, seed=None, rate: float = 0.0):
    """``dropout(activation(h + bias))`` evaluated in float32 (``activation``: a name in
    ``activations.ACTIVATIONS``); returns h's dtype. Dropout at ``rate`` keeps what ``dropout.random_bits`` of
    ``seed`` (int [2]; None: no dropout) keeps. Taking the bias here (rather than after the matmul) keeps the
    matmul a plain one: oneDNN's fused MatMul+BiasAdd is ~30% slower on CPU.

    On CPU in bfloat16 this is the C++ kernel pair of ``xlnet_tf.ops`` (``bias_activation_dropout.cc``: bf16
    step -4.8% in an A/B run); in float32, or elsewhere, the XLA kernels of ``fused_op`` (in float32 the C++ pair
    measured no faster in the step, and slower alone: hashing the dropout bits in both passes costs more than XLA's
    separate bits kernel at this width)."""
    if h.dtype == tf.bfloat16 and _custom_kernels_usable(ops.bias_activation_dropout):
        return _native_activation_dropout(h, activation, bias, seed, rate)
    function = ACTIVATIONS[activation]
    if seed is None:
        return _activation_op(function, None)(h, bias)
    return _activation_op(function, rate)(h, bias, bits_like(h, seed))


def _dropout_attrs(seed, rate):
    """The custom kernels' dropout inputs: (seed as int32 [2], or [0] without dropout; attrs has_dropout,
    threshold, scale by ``keep_from_bits``' rule)."""
    if seed is None:
        return tf.zeros([0], tf.int32), dict(has_dropout=False, threshold=0, scale=1.0)
    return tf.cast(seed, tf.int32), dict(has_dropout=True, threshold=keep_threshold(rate),
                                         scale=1.0 / keep_probability(rate))


def _native_activation_dropout(h, activation, bias, seed, rate):
    """``activation_dropout`` on the C++ kernel pair, over [rows, depth] views of ``h``."""
    forward, backward = ops.bias_activation_dropout()
    seed, attrs = _dropout_attrs(seed, rate)
    attrs.update(activation=activation)

    @tf.custom_gradient
    def apply(h, bias):
        def grad(dy):
            d = backward(dy, h, bias, seed, **attrs)
            return d.d_h, d.d_bias
        return forward(h, bias, seed, **attrs), grad

    return apply(h, tf.cast(bias, h.dtype))


def residual_layer_norm(out, x, gamma, beta, epsilon: float, seed=None, rate: float = 0.0, bias=None):
    """``LayerNorm(x + dropout(out [+ bias]))`` with the sums and the norm in float32; returns x's dtype. Dropout
    at ``rate`` keeps what ``dropout.random_bits`` of ``seed`` (int [2]; None: no dropout) keeps.

    On CPU this is the C++ kernel pair of ``xlnet_tf.ops`` (forward and backward each one pass, multi-threaded
    over rows, the dropout bits hashed inside); elsewhere, or where that library is unavailable, the XLA kernels
    below."""
    if _native_applies(out, x):
        return _native_residual_layer_norm(out, x, gamma, beta, epsilon, seed, rate, bias)
    args = [out] + ([] if bias is None else [bias]) + [x, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)]
    if seed is None:
        return _layer_norm_op(epsilon, None, bias is not None)(*args)
    return _layer_norm_op(epsilon, rate, bias is not None)(*args, bits_like(out, seed))


def _custom_kernels_usable(kernels) -> bool:
    """Whether ``kernels`` (an ``xlnet_tf.ops`` accessor) can run here: not inside XLA (``jit_compile``, TPU), a
    CPU process, and the library built."""
    return not ops.in_xla_context() and ops.cpu_process() and kernels() is not None


def _native_applies(out, x) -> bool:
    """Whether the C++ residual LayerNorm runs here: float32 or bfloat16 rows of a known depth."""
    return (x.shape[-1] is not None and out.dtype == x.dtype and x.dtype in (tf.float32, tf.bfloat16)
            and _custom_kernels_usable(ops.residual_layer_norm))


def _native_residual_layer_norm(out, x, gamma, beta, epsilon, seed, rate, bias):
    """``residual_layer_norm`` on the C++ kernel pair, over [rows, depth] views of ``out`` and ``x``."""
    forward, backward = ops.residual_layer_norm()
    depth = x.shape[-1]
    seed, attrs = _dropout_attrs(seed, rate)
    attrs.update(has_bias=bias is not None, epsilon=float(epsilon))
    bias32 = tf.zeros([0]) if bias is None else tf.cast(bias, tf.float32)

    @tf.custom_gradient
    def apply(rows_out, rows_x, gamma32, beta32, bias32):
        def grad(dy):
            d = backward(dy, rows_out, rows_x, bias32, gamma32, seed, **attrs)
            return d.d_out, d.d_x, d.d_gamma, d.d_beta, (None if bias is None else d.d_bias)
        return forward(rows_out, rows_x, bias32, gamma32, beta32, seed, **attrs), grad

    gamma32, beta32 = (tf.cast(tf.convert_to_tensor(v), tf.float32) for v in (gamma, beta))
    y = apply(tf.reshape(out, [-1, depth]), tf.reshape(x, [-1, depth]), gamma32, beta32, bias32)
    return tf.reshape(y, tf.shape(x))


def attention_probs_native_applies(ac) -> bool:
    """Whether ``attention_probs`` runs here: float32 or bfloat16 scores, and the ``xlnet_tf.ops`` kernels
    usable (built, not inside XLA, a CPU process)."""
    return (ac.dtype in (tf.float32, tf.bfloat16) and ac.shape.rank == 4
            and _custom_kernels_usable(ops.attention_probs))


def attention_probs(ac, bd, ef, segment_diff, mask, query_pos, seed=None, rate: float = 0.0):
    """``dropout(softmax(ac + shift(bd) + ef * segment_diff + mask))`` on the C++ kernel pair of ``xlnet_tf.ops``
    (``attention_probs.cc``): [N, B, Q, K] probabilities in ac's dtype; the softmax in float32.

    ac [N, B, Q, K] and bd [N, B, Q, R] (position scores against every encoding row) in float32 or bfloat16;
    ef [N, B, Q, 1] and segment_diff bool [B, Q, K], or both None; mask float32 [B|1, Q, K] or None;
    query_pos [B, Q] (or broadcastable) the key coordinate of each query row: bd's column for key j is
    K - query_pos + j. Dropout at ``rate`` with ``seed`` (int [2]) keeps the elements that
    ``dropout.random_bits`` of that seed keeps (the kernels hash the same bits themselves); seed None: no dropout.
    Differentiable in ac, bd and ef. Check ``attention_probs_native_applies`` first."""
    forward, backward = ops.attention_probs()
    shape = tf.shape(ac)
    seed, attrs = _dropout_attrs(seed, rate)
    attrs.update(has_segment=ef is not None)
    if mask is not None:
        mask = tf.broadcast_to(mask, tf.concat([tf.shape(mask)[:1], shape[2:]], 0))
    segment_diff = tf.zeros([0], tf.bool) if segment_diff is None else segment_diff
    query_pos = tf.cast(tf.broadcast_to(query_pos, shape[1:3]), tf.int32)
    position_len = tf.shape(bd)[-1]

    @tf.custom_gradient
    def probs(ac, bd, *ef_arg):
        prob, softmax = forward(ac, bd, ef_arg[0] if ef_arg else tf.zeros([0], ac.dtype), segment_diff,
                                tf.zeros([0]) if mask is None else mask, seed, query_pos,
                                has_mask=mask is not None, **attrs)

        def grad(d_prob):
            d = backward(d_prob, softmax, segment_diff, seed, query_pos, position_len, **attrs)
            return (d.d_ac, d.d_bd) + ((d.d_ef,) if ef_arg else ())
        return prob, grad

    return probs(ac, bd, *([] if ef is None else [ef]))


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
