"""The fast backend: where each applies, the same values as the plain definitions, computed faster.

Each function is the fast version of one plain definition, which names it (``@kernels.fast_path(fast=...)``)
and whose parameters it takes (names, order, kinds and defaults: checked when the plain definition is imported).
It returns ``NotImplemented`` where it does not apply, so the plain ops run. All of them are for CPU processes
outside XLA: TPUs and ``--jit_compile`` runs (XLA fuses the plain ops itself) and GPUs use the plain definitions.

* ``attention_probs``, ``residual_layer_norm``, ``bias_activation_dropout``, ``adamw_update``,
  ``cross_entropy_and_hits``: C++ kernel pairs (``xlnet_tf/ops``, built on first use, not on import), each one
  pass over memory each way where TensorFlow runs several kernels; the first three hash the dropout bits from the
  seed themselves, the same bits as ``dropout_mask``.
* ``matmul``: products with a transposed operand (the gradient products, the attention output projection, the LM
  head) as a unit-batch ``BatchMatMulV2``, which oneDNN runs faster than 2-D ``MatMul`` at these shapes.

What each one buys, measured A/B, is in bench/reports/performance.md.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf import ops
from xlnet_tf.kernels.dropout_mask import keep_probability, keep_threshold


def _native(kernel_pair) -> bool:
    """Whether an ``xlnet_tf.ops`` kernel can run here: a CPU process, not inside XLA, the library built."""
    return ops.cpu_process() and not ops.in_xla_context() and kernel_pair() is not None


def _dropout_attrs(rate, seed):
    """The kernels' dropout inputs: seed as int32 [2] ([0] without dropout), and the attributes has_dropout,
    threshold and scale of ``dropout_mask``'s rule."""
    if seed is None or rate == 0:
        return tf.zeros([0], tf.int32), dict(has_dropout=False, threshold=0, scale=1.0)
    return tf.cast(seed, tf.int32), dict(has_dropout=True, threshold=keep_threshold(rate),
                                         scale=1.0 / keep_probability(rate))


def _product(a, b, transpose_a=False, transpose_b=False):
    """``op(a) . op(b)`` for 2-D a, b: ``MatMul`` when nothing is transposed, else a unit-batch ``BatchMatMulV2``."""
    if not (transpose_a or transpose_b):
        return tf.matmul(a, b)
    return tf.raw_ops.BatchMatMulV2(x=a[None], y=b[None], adj_x=transpose_a, adj_y=transpose_b)[0]


def matmul(rows, weight, transpose_weight: bool = False):
    if not ops.cpu_process() or ops.in_xla_context():
        return NotImplemented

    @tf.custom_gradient
    def product(rows, weight):
        def grad(dy):
            if transpose_weight:  # y = rows . W^T
                return _product(dy, weight), _product(dy, rows, transpose_a=True)
            return _product(dy, weight, transpose_b=True), _product(rows, dy, transpose_a=True)
        return _product(rows, weight, transpose_b=transpose_weight), grad

    return product(rows, weight)


def attention_probs(ac, bd, ef, segment_diff, mask, query_pos, rate=0.0, seed=None, key_pos=None, values=None,
                    aligned=False):
    if ac.dtype not in (tf.float32, tf.bfloat16) or ac.shape.rank != 4 or not _native(ops.attention_probs):
        return NotImplemented
    forward, backward = ops.attention_probs()
    shape = tf.shape(ac)
    klen = shape[3]
    if aligned:  # column j is key j's: queries at coordinate klen read column klen - (klen - j) of consecutive keys
        query_pos, key_pos = tf.fill(shape[1:3], klen), None
    elif query_pos is None:  # the content stream: row i is key coordinate klen - qlen + i
        query_pos = tf.range(klen - shape[2], klen)[None, :]
    query_pos = tf.cast(tf.broadcast_to(query_pos, shape[1:3]), tf.int32)
    if key_pos is None:  # empty: the consecutive keys 0..klen-1 (a contiguous window of each row of bd)
        key_pos = tf.zeros([0], tf.int32)
    else:
        key_pos = tf.cast(tf.broadcast_to(key_pos, tf.stack([shape[1], klen])), tf.int32)
    seed, attrs = _dropout_attrs(rate, seed)
    attrs.update(has_segment=ef is not None)
    if mask is not None:
        mask = tf.broadcast_to(mask, tf.concat([tf.shape(mask)[:1], shape[2:]], 0))
    segment_diff = tf.zeros([0], tf.bool) if segment_diff is None else segment_diff
    position_len = tf.shape(bd)[-1]

    @tf.custom_gradient
    def probs(ac, bd, *ef_arg):
        prob, softmax = forward(ac, bd, ef_arg[0] if ef_arg else tf.zeros([0], ac.dtype), segment_diff,
                                tf.zeros([0]) if mask is None else mask, seed, query_pos, key_pos,
                                has_mask=mask is not None, **attrs)

        def grad(d_prob):
            d = backward(d_prob, softmax, segment_diff, seed, query_pos, key_pos, position_len, **attrs)
            return (d.d_ac, d.d_bd) + ((d.d_ef,) if ef_arg else ())
        return prob, grad

    prob = probs(ac, bd, *([] if ef is None else [ef]))
    return prob if values is None else tf.matmul(prob, values)


def residual_layer_norm(out, x, gamma, beta, epsilon, rate=0.0, seed=None, bias=None):
    depth = x.shape[-1]
    if (depth is None or out.dtype != x.dtype or x.dtype not in (tf.float32, tf.bfloat16)
            or not _native(ops.residual_layer_norm)):
        return NotImplemented
    forward, backward = ops.residual_layer_norm()
    seed, attrs = _dropout_attrs(rate, seed)
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


def bias_activation_dropout(h, bias, activation, rate=0.0, seed=None):
    depth = h.shape[-1]
    if (depth is None or h.dtype not in (tf.float32, tf.bfloat16) or activation not in ("gelu", "relu")
            or not _native(ops.bias_activation_dropout)):
        return NotImplemented
    forward, backward = ops.bias_activation_dropout()
    seed, attrs = _dropout_attrs(rate, seed)
    attrs.update(activation=activation)

    @tf.custom_gradient
    def apply(rows, bias):
        def grad(dy):
            d = backward(dy, rows, bias, seed, **attrs)
            return d.d_h, d.d_bias
        return forward(rows, bias, seed, **attrs), grad

    y = apply(tf.reshape(h, [-1, depth]), tf.cast(bias, h.dtype))
    return tf.reshape(y, tf.shape(h))


def adamw_update(var, m, v, grad, lr, beta_1, beta_2, epsilon, step, decay=None, grad_scale=None):
    if (var.dtype != tf.float32 or lr.shape.rank != 0 or ops.in_xla_context()
            or tf.DeviceSpec.from_string(var.device).device_type != "CPU" or ops.fused_adamw() is None):
        return NotImplemented
    one = tf.constant(1.0, tf.float32)
    return ops.fused_adamw()(var=var.handle, m=m.handle, v=v.handle, grad=tf.cast(grad, tf.float32),
                             grad_scale=one if grad_scale is None else tf.cast(grad_scale, tf.float32),
                             decay=one if decay is None else decay, lr=lr, beta1_power=tf.pow(beta_1, step),
                             beta2_power=tf.pow(beta_2, step), beta1=beta_1, beta2=beta_2, epsilon=epsilon)


def cross_entropy_and_hits(logits, labels):
    if logits.dtype != tf.float32 or not _native(ops.cross_entropy):
        return NotImplemented
    forward, backward = ops.cross_entropy()
    vocab = tf.shape(logits)[-1]
    rows, row_labels = tf.reshape(logits, [-1, vocab]), tf.reshape(tf.cast(labels, tf.int32), [-1])

    @tf.custom_gradient
    def loss_and_hits(rows):
        loss, hits, log_norm = forward(rows, row_labels)

        def grad(d_loss, d_hits):  # the hits have no gradient
            del d_hits
            return backward(d_loss, rows, row_labels, log_norm)
        return [loss, hits], grad

    loss, hits = loss_and_hits(rows)
    shape = tf.shape(labels)
    return tf.reshape(loss, shape), tf.reshape(hits, shape)
