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
    bits = dropout.random_bits(tf.constant(shape), tf.constant([7, 11]), depth) if with_dropout else None
    dy = tf.cast(tf.constant(rng.normal(size=shape), tf.float32), dtype)

    @tf.function
    def step(out, x):
        with tf.GradientTape() as tape:
            tape.watch([out, x])
            y = fused.residual_layer_norm(out, x, gamma, beta, 1e-12, bits, 0.1, bias=bias)
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
        forward(rows, rows, tf.zeros([0]), tf.zeros([7]), vec, tf.zeros([0], tf.int16), has_bias=False,
                has_dropout=False, threshold=0, scale=1.0, epsilon=1e-12)
    with pytest.raises(tf.errors.InvalidArgumentError, match="bits must be shaped like the rows"):
        forward(rows, rows, tf.zeros([0]), vec, vec, tf.zeros([3], tf.int16), has_bias=False,
                has_dropout=True, threshold=0, scale=1.0, epsilon=1e-12)
