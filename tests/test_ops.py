"""The C++ residual/LayerNorm kernels of ``xlnet_tf.ops`` against the XLA kernels they replace on CPU (which the
model tests check against the plain TensorFlow ops): forward and every gradient, float32 and bfloat16, with and
without the bias and dropout, a depth that is not a multiple of the kernels' 16 lanes."""

import shutil

import numpy as np
import pytest
import tensorflow as tf

from xlnet_tf import ops
from xlnet_tf.layers import dropout, fused

pytestmark = pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
                                reason="no C++ compiler: the custom kernels cannot be built here")


def _run(monkeypatch, custom: bool, dtype, with_bias: bool, with_dropout: bool, depth: int):
    monkeypatch.setenv("XLNET_TF_CUSTOM_OPS", "1" if custom else "0")
    ops._library.cache_clear()
    rng = np.random.default_rng(3)
    shape = (3, 37, depth)
    out = tf.cast(tf.constant(rng.normal(size=shape), tf.float32), dtype)
    x = tf.cast(tf.constant(rng.normal(size=shape), tf.float32), dtype)
    gamma = tf.Variable(rng.normal(1.0, 0.1, size=depth).astype(np.float32))
    beta = tf.Variable(rng.normal(0.0, 0.1, size=depth).astype(np.float32))
    bias = tf.Variable(rng.normal(0.0, 0.1, size=depth).astype(np.float32)) if with_bias else None
    seed = tf.constant([7, 11]) if with_dropout else None
    dy = tf.cast(tf.constant(rng.normal(size=shape), tf.float32), dtype)

    @tf.function
    def step(out, x):
        with tf.GradientTape() as tape:
            tape.watch([out, x])
            y = fused.residual_layer_norm(out, x, gamma, beta, 1e-12, seed, 0.1, bias=bias)
        watched = [out, x, gamma, beta] + ([bias] if with_bias else [])
        return [y] + tape.gradient(y, watched, output_gradients=dy)

    graph = step.get_concrete_function(out, x).graph
    used = any(op.type == "XlnetResidualLayerNorm" for op in graph.get_operations())
    return [tf.cast(t, tf.float32).numpy() for t in step(out, x)], used


@pytest.mark.parametrize("dtype,with_bias,with_dropout,depth", [
    (tf.float32, True, True, 64), (tf.float32, False, False, 40), (tf.float32, False, True, 40),
    (tf.bfloat16, True, True, 64)])
def test_custom_residual_layer_norm_matches_the_xla_kernels(monkeypatch, dtype, with_bias, with_dropout, depth):
    try:
        custom, used = _run(monkeypatch, True, dtype, with_bias, with_dropout, depth)
        reference, reference_used = _run(monkeypatch, False, dtype, with_bias, with_dropout, depth)
    finally:
        ops._library.cache_clear()
    assert used and not reference_used
    names = ["y", "d_out", "d_x", "d_gamma", "d_beta", "d_bias"]
    for name, a, b in zip(names, custom, reference):
        if dtype == tf.bfloat16 and name in ("y", "d_out", "d_x"):  # rounded to bfloat16: at most one ulp apart
            np.testing.assert_allclose(a, b, rtol=2 ** -7, atol=2 ** -7, err_msg=name)
        else:  # float32 round-off (sums over 37*3 rows for the parameter gradients)
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)


def test_custom_residual_layer_norm_rejects_bad_shapes():
    kernels = ops.residual_layer_norm()
    assert kernels is not None
    forward, _ = kernels
    rows, vec = tf.zeros([4, 8]), tf.zeros([8])
    with pytest.raises(tf.errors.InvalidArgumentError, match="gamma/beta must be \\[8\\], got \\[7\\]"):
        forward(rows, rows, tf.zeros([0]), tf.zeros([7]), vec, tf.zeros([0], tf.int32), has_bias=False,
                has_dropout=False, threshold=0, scale=1.0, epsilon=1e-12)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must be \[2\], got \[3\]"):
        forward(rows, rows, tf.zeros([0]), vec, vec, tf.zeros([3], tf.int32), has_bias=False,
                has_dropout=True, threshold=0, scale=1.0, epsilon=1e-12)


def _attention_probs(monkeypatch, custom: bool, dtype, stream: str, with_segment: bool, mask_batch, rate: float):
    """The attention layer's probabilities and their gradients (ac, bd, ef) with the custom kernels on or off.
    N=2, B=3, K=37 (13 memory + 24 current: not a multiple of the kernels' 16 lanes)."""
    from xlnet_tf.layers import attention

    monkeypatch.setenv("XLNET_TF_CUSTOM_OPS", "1" if custom else "0")
    ops._library.cache_clear()
    rng = np.random.default_rng(5)
    n, b, mlen, qlen = 2, 3, 13, 24
    klen = mlen + qlen
    if stream == "content":
        q, rlen, query_pos = qlen, klen + qlen, None
    else:  # the query stream: 5 target rows at random positions; a table shorter than the reach (clamped)
        q, rlen = 5, klen + 1
        query_pos = tf.constant(rng.integers(0, klen, size=(b, q)), tf.int32)
    ac = tf.cast(tf.constant(rng.normal(size=(n, b, q, klen)) * 3, tf.float32), dtype)
    bd = tf.cast(tf.constant(rng.normal(size=(n, b, q, rlen)) * 3, tf.float32), dtype)
    ef = tf.cast(tf.constant(rng.normal(size=(n, b, q, 1)), tf.float32), dtype) if with_segment else None
    segment_diff = tf.constant(rng.random((b, q, klen)) < 0.5) if with_segment else None
    mask = None
    if mask_batch is not None:
        blocked = rng.random((mask_batch, q, klen)) < 0.3
        blocked[0, 1, :] = True  # a fully masked row: uniform, as TensorFlow's softmax gives it
        mask = tf.constant(np.where(blocked, -1e30, 0.0).astype(np.float32))
    dy = tf.cast(tf.constant(rng.normal(size=(n, b, q, klen)), tf.float32), dtype)
    layer = attention.RelativeAttention(16, n, 8, dropatt=rate, dtype="float32" if dtype == tf.float32 else "mixed_bfloat16")
    seed = tf.constant([17, 23])
    layer._attention_dropout.call_seed = lambda training: seed  # both paths draw the same mask
    layer._attention_dropout.bits = lambda x, training: dropout.bits_like(x, seed)
    watched = [ac, bd] + ([ef] if with_segment else [])

    @tf.function
    def probs(ac, bd, *ef):
        with tf.GradientTape() as tape:
            tape.watch([ac, bd, *ef])
            prob = layer._probs(ac, bd, ef[0] if ef else None, segment_diff, mask, query_pos, training=True)
        return [prob] + tape.gradient(prob, [ac, bd, *ef], output_gradients=dy)

    graph = probs.get_concrete_function(*watched).graph
    used = any(op.type == "XlnetAttentionProbs" for op in graph.get_operations())
    return [tf.cast(t, tf.float32).numpy() for t in probs(*watched)], used


@pytest.mark.parametrize("dtype,stream,with_segment,mask_batch,rate", [
    (tf.float32, "content", True, 3, 0.1), (tf.float32, "content", False, None, 0.0),
    (tf.float32, "query", True, 3, 0.1), (tf.float32, "content", True, 1, 0.0),
    (tf.bfloat16, "content", True, 3, 0.1), (tf.bfloat16, "query", False, 1, 0.1)])
def test_custom_attention_probs_match_the_tensorflow_ops(monkeypatch, dtype, stream, with_segment, mask_batch, rate):
    """The C++ kernels (relative shift or query-position gather, segment term, mask, softmax, dropout hashed from
    the seed) against TensorFlow's softmax and the XLA dropout kernel with bits of the same seed: forward and the
    gradients of ac, bd (zero outside each row's shifted window) and ef."""
    try:
        custom, used = _attention_probs(monkeypatch, True, dtype, stream, with_segment, mask_batch, rate)
        reference, reference_used = _attention_probs(monkeypatch, False, dtype, stream, with_segment, mask_batch,
                                                     rate)
    finally:
        ops._library.cache_clear()
    assert used and not reference_used
    if rate:  # the same elements dropped: the seed's mask is hashed inside the kernel
        np.testing.assert_array_equal(custom[0] == 0, reference[0] == 0)
        assert 0.05 < (custom[0] == 0).mean() < 0.15 if mask_batch is None else (custom[0] == 0).mean() > 0.05
    for name, a, b in zip(["prob", "d_ac", "d_bd", "d_ef"], custom, reference):
        scale = np.abs(b).max()
        if dtype == tf.bfloat16:  # rounded to bfloat16 once: at most one ulp apart
            np.testing.assert_allclose(a, b, rtol=2 ** -7, atol=2 ** -8 * scale, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * scale, err_msg=name)


def test_custom_attention_probs_reject_bad_shapes():
    kernels = ops.attention_probs()
    assert kernels is not None
    forward, backward = kernels
    scores, table = tf.zeros([2, 3, 4, 8]), tf.zeros([2, 3, 4, 12])
    pos = tf.zeros([3, 4], tf.int32)
    args = dict(has_segment=False, has_mask=True, has_dropout=False, threshold=0, scale=1.0)
    none = dict(ef=tf.zeros([0]), segment_diff=tf.zeros([0], tf.bool), seed=tf.zeros([0], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mask must be \[1 or B, Q, K\] = \[3, 4, 8\], got \[3,4,7\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([3, 4, 7]), query_pos=pos, **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bd must be \[N, B, Q, R\]"):
        forward(ac=scores, bd=tf.zeros([2, 3, 5, 12]), mask=tf.zeros([1, 4, 8]), query_pos=pos, **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"query_pos must be \[B, Q\] = \[3, 4\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([1, 4, 8]), query_pos=tf.zeros([4, 3], tf.int32), **none, **args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must be \[2\]"):
        forward(ac=scores, bd=table, mask=tf.zeros([1, 4, 8]), query_pos=pos, ef=tf.zeros([0]),
                segment_diff=tf.zeros([0], tf.bool), seed=tf.zeros([3], tf.int32), **dict(args, has_dropout=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"softmax must be shaped like d_prob"):
        backward(d_prob=scores, softmax=tf.zeros([2, 3, 4, 7]), segment_diff=tf.zeros([0], tf.bool),
                 seed=tf.zeros([0], tf.int32), query_pos=pos, position_len=12, has_segment=False, has_dropout=False,
                 threshold=0, scale=1.0)


def _activation(monkeypatch, custom: bool, dtype, activation: str, with_dropout: bool):
    monkeypatch.setenv("XLNET_TF_CUSTOM_OPS", "1" if custom else "0")
    ops._library.cache_clear()
    rng = np.random.default_rng(11)
    shape = (3, 37, 40)
    h = tf.cast(tf.constant(rng.normal(size=shape) * 2, tf.float32), dtype)
    bias = tf.cast(tf.constant(rng.normal(size=shape[-1:]), tf.float32), dtype)
    dy = tf.cast(tf.constant(rng.normal(size=shape), tf.float32), dtype)
    seed = tf.constant([5, 9]) if with_dropout else None

    # The layers run the C++ pair in bfloat16 only (fused.activation_dropout); both dtypes are checked here.
    apply = fused._native_activation_dropout if custom else fused.activation_dropout

    @tf.function
    def step(h, bias):
        with tf.GradientTape() as tape:
            tape.watch([h, bias])
            y = apply(h, activation, bias, seed, 0.1)
        return [y] + tape.gradient(y, [h, bias], output_gradients=dy)

    graph = step.get_concrete_function(h, bias).graph
    used = any(op.type == "XlnetBiasActivationDropout" for op in graph.get_operations())
    return [tf.cast(t, tf.float32).numpy() for t in step(h, bias)], used


@pytest.mark.parametrize("dtype,activation,with_dropout", [
    (tf.float32, "gelu", True), (tf.float32, "gelu", False), (tf.float32, "relu", True),
    (tf.bfloat16, "gelu", True)])
def test_custom_bias_activation_dropout_matches_the_xla_kernels(monkeypatch, dtype, activation, with_dropout):
    """dropout(act(h + bias)) and its gradients (h, bias) on the C++ kernels against the XLA kernels, which the
    model tests check against plain TensorFlow: the same dropout mask from the same seed."""
    try:
        custom, used = _activation(monkeypatch, True, dtype, activation, with_dropout)
        reference, reference_used = _activation(monkeypatch, False, dtype, activation, with_dropout)
    finally:
        ops._library.cache_clear()
    assert used and not reference_used
    if with_dropout:
        np.testing.assert_array_equal(custom[0] == 0, reference[0] == 0)
    for name, a, b in zip(["y", "d_h", "d_bias"], custom, reference):
        scale = np.abs(b).max()
        if dtype == tf.bfloat16:  # rounded to bfloat16 (d_bias: a sum of bfloat16-rounded terms in XLA)
            np.testing.assert_allclose(a, b, rtol=2 ** -7, atol=2 ** -7 * scale, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 * scale, err_msg=name)


def test_custom_bias_activation_dropout_rejects_bad_shapes():
    forward, backward = ops.bias_activation_dropout()
    attrs = dict(activation="gelu", has_dropout=False, threshold=0, scale=1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be \[8\], got \[7\]"):
        forward(tf.zeros([4, 8]), tf.zeros([7]), tf.zeros([0], tf.int32), **attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dy must be shaped like h"):
        backward(tf.zeros([4, 7]), tf.zeros([4, 8]), tf.zeros([8]), tf.zeros([0], tf.int32), **attrs)


@pytest.mark.parametrize("dtype,native", [(tf.bfloat16, True), (tf.float32, False)])
def test_feed_forward_activation_uses_the_custom_kernel_in_bfloat16_only(dtype, native):
    """Measured: the C++ pair speeds up the bfloat16 step; in float32 XLA's kernels are as fast."""
    graph = tf.function(lambda h: fused.activation_dropout(h, "gelu", tf.zeros([8], dtype), tf.constant([1, 2]),
                                                           0.1)).get_concrete_function(tf.zeros([4, 8], dtype)).graph
    assert any(op.type == "XlnetBiasActivationDropout" for op in graph.get_operations()) == native
