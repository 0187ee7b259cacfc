"""XLNet's position-wise feed-forward block (the original ``ff`` scope)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf import kernels, ops
from xlnet_tf.kernels import fast
from xlnet_tf.kernels.dropout_mask import dropout
from xlnet_tf.layers.activations import ACTIVATIONS, gelu  # noqa: F401 - gelu: part of this module's API
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.linear import matmul
from xlnet_tf.layers.normalization import residual_layer_norm


@kernels.fast_path(fast=fast.bias_activation_dropout)
def bias_activation_dropout(h, bias, activation: str, rate: float = 0.0, seed=None):
    """``dropout(activation(h + bias))`` computed in float32, returned in h's dtype: h [..., F], bias [F];
    ``activation`` a name in ``ACTIVATIONS``; dropout at ``rate`` with ``seed`` (int [2]; None: off)."""
    # The bias's value, not the variable: a variable read inside tf.custom_gradient must be declared to it.
    y = ACTIVATIONS[activation](_add_bias(h, tf.convert_to_tensor(bias)))
    return tf.cast(dropout(y, rate, seed), h.dtype)


def _add_bias(h, bias):
    """``float32(h) + float32(bias)``; with 16-bit h, the bias's gradient is summed from h's (16-bit) gradient."""
    if h.dtype == tf.float32:
        return h + tf.cast(bias, tf.float32)

    @tf.custom_gradient
    def add(h, bias):
        def grad(dy):
            # The float32 gradient had two readers, h's cast and the bias's sum over rows, and XLA wrote it in
            # float32 between them (base-512 at batch 32: 0.2 GB a layer, written and read again). The sum reads
            # the 16-bit gradient the matmuls read (a bf16 layer's bias gradient), which is then written once. The
            # barrier keeps it 16-bit: XLA drops a float32 -> 16-bit -> float32 round trip where it may.
            d_h = tf.cast(dy, h.dtype)
            if ops.in_xla_context():
                d_h, = ops.optimization_barrier(d_h)
            d_bias = tf.reduce_sum(tf.reshape(tf.cast(d_h, tf.float32), [-1, tf.shape(dy)[-1]]), axis=0)
            return d_h, tf.cast(d_bias, bias.dtype)
        return tf.cast(h, tf.float32) + tf.cast(bias, tf.float32), grad

    return add(h, bias)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class PositionwiseFeedForward(keras.layers.Layer):
    """``LayerNorm(x + dropout(W_2 dropout(act(W_1 x + b_1)) + b_2))``: [B, L, D] -> [B, L, D].

    Weights (original names): ``layer_1`` [d_model, d_inner], ``layer_2`` [d_inner, d_model] with biases, and
    ``LayerNorm`` (epsilon 1e-12).
    """

    def __init__(self, d_model: int, d_inner: int, activation: str = "gelu", dropout: float = 0.0,
                 initializer_range: float = 0.02, **kwargs):
        kwargs["autocast"] = False  # kernels are cast explicitly; LayerNorm weights stay float32
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model, self.d_inner, self.activation = d_model, d_inner, activation
        self.dropout, self.initializer_range = dropout, initializer_range
        init = keras.initializers.RandomNormal(stddev=initializer_range)
        policy = self.dtype_policy
        self.layer_1 = keras.layers.Dense(d_inner, kernel_initializer=init, name="layer_1", dtype=policy)
        self.layer_2 = keras.layers.Dense(d_model, kernel_initializer=init, name="layer_2", dtype=policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="LayerNorm", dtype=policy)
        self._inner_dropout = Dropout(dropout, dtype=policy)
        self._output_dropout = Dropout(dropout, dtype=policy)

    def build(self, input_shape=None):
        self.layer_1.build((None, None, self.d_model))
        self.layer_2.build((None, None, self.d_inner))
        self.layer_norm.build((None, None, self.d_model))
        self.built = True

    def call(self, x, training=None):
        """x [B, L, D] -> [B, L, D]."""
        dtype = self.compute_dtype
        x = tf.cast(x, dtype)
        rows = tf.reshape(x, [-1, self.d_model])
        h = matmul(rows, tf.cast(self.layer_1.kernel, dtype))
        h = bias_activation_dropout(h, self.layer_1.bias, self.activation, self.dropout,
                                    self._inner_dropout.call_seed(training))
        out = tf.reshape(matmul(h, tf.cast(self.layer_2.kernel, dtype)), tf.shape(x))
        norm = self.layer_norm
        return residual_layer_norm(out, x, norm.gamma, norm.beta, norm.epsilon, self.dropout,
                                   self._output_dropout.call_seed(training), bias=self.layer_2.bias)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_inner=self.d_inner, activation=self.activation,
                      dropout=self.dropout, initializer_range=self.initializer_range)
        return config
