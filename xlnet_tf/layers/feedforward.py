"""XLNet's position-wise feed-forward block (the original ``ff`` scope)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers import fused, linear
from xlnet_tf.layers.activations import ACTIVATIONS, gelu  # noqa: F401 - gelu: part of this module's API
from xlnet_tf.layers.dropout import Dropout


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
        self._inner_dropout = Dropout(dropout, dtype=self.dtype_policy)
        self._output_dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.layer_1.build((None, None, self.d_model))
        self.layer_2.build((None, None, self.d_inner))
        self.layer_norm.build((None, None, self.d_model))
        self.built = True

    def call(self, x, training=None):
        """x [..., D] -> [..., D]; or a list of such tensors (XLNet's two streams), sharing one cast of the
        weights to the compute dtype."""
        dtype = self.compute_dtype
        weights = [tf.cast(w, dtype) for w in (self.layer_1.kernel, self.layer_1.bias, self.layer_2.kernel,
                                               self.layer_2.bias)]
        if isinstance(x, (list, tuple)):
            return [self._apply(t, weights, training) for t in x]
        return self._apply(x, weights, training)

    def _apply(self, x, weights, training):
        kernel_1, bias_1, kernel_2, bias_2 = weights
        x = tf.cast(x, self.compute_dtype)
        shape = tf.shape(x)
        rows = tf.reshape(x, [-1, self.d_model])
        activation = ACTIVATIONS[self.activation]
        if fused.use(training):
            # Plain matmuls; bias, activation, dropout, residual and LayerNorm run in the two fused kernels.
            h = linear.matmul(rows, kernel_1)
            inner = fused.activation_dropout(h, self.activation, bias_1, self._inner_dropout.call_seed(training),
                                             self.dropout)
            out = tf.reshape(linear.matmul(inner, kernel_2), shape)
            norm = self.layer_norm
            return fused.residual_layer_norm(out, x, norm.gamma, norm.beta, norm.epsilon,
                                             self._output_dropout.call_seed(training), self.dropout, bias=bias_2)
        # The Dense layers' math (x W + b) as plain 2-D MatMul + BiasAdd on [B*L, D] rows.
        h = tf.nn.bias_add(linear.matmul(rows, kernel_1), bias_1)
        inner = self._inner_dropout(activation(h), training=training)
        out = tf.reshape(tf.nn.bias_add(linear.matmul(inner, kernel_2), bias_2), shape)
        return self.layer_norm(self._output_dropout(out, training=training) + x)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_inner=self.d_inner, activation=self.activation,
                      dropout=self.dropout, initializer_range=self.initializer_range)
        return config
