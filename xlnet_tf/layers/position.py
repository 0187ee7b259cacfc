"""Sinusoid relative positional encoding (Transformer-XL / XLNet).

Row ``r`` of the encoding stands for the relative distance ``klen - r`` between a query and a key, where a query
at position ``i`` of the current segment sits at ``mlen + i`` in key coordinates (memory first). The attention
layer projects the encoding once per step, shared by the whole batch; the original tiled it over the batch
before projecting, which multiplies that matmul by the batch size for no change in the result.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers.dropout import Dropout


def relative_distances(qlen, klen, attn_type: str = "bi"):
    """Distances covered by the encoding rows, float32 [R]: ``klen, klen-1, ..., -qlen+1`` ('bi', R = klen+qlen)
    or ``klen, ..., 0`` ('uni', R = klen+1), as in the original ``relative_positional_encoding``."""
    end = -qlen if attn_type == "bi" else -1
    return tf.range(tf.cast(klen, tf.float32), tf.cast(end, tf.float32), -1.0)


def sinusoid(distances, d_model: int):
    """``concat([sin(d * inv_freq), cos(d * inv_freq)])`` with ``inv_freq = 10000^(-2k/d_model)``: [R, d_model]."""
    inv_freq = 1.0 / (10000.0 ** (tf.range(0, d_model, 2.0) / d_model))
    angles = tf.einsum("i,d->id", distances, inv_freq)
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class RelativePositionEncoding(keras.layers.Layer):
    """The sinusoid table for one step: [X, R, d_model] in the compute dtype.

    ``X`` is 1, or 2 with ``bi_data`` (row 0 forward distances for the first half of the batch, row 1 the
    negated distances for the backward half). ``clamp_len > 0`` clips distances to ``[-clamp_len, clamp_len]``.
    The sinusoid itself is computed in float32 and cast, so half-precision policies lose no accuracy here.
    """

    def __init__(self, d_model: int, attn_type: str = "bi", bi_data: bool = False, clamp_len: int = -1,
                 dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.attn_type = attn_type
        self.bi_data = bi_data
        self.clamp_len = clamp_len
        self.dropout = dropout
        self._dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):  # no weights: built at once, as the network that holds it
        self.built = True

    def call(self, qlen, klen, training=None):
        fwd = relative_distances(qlen, klen, self.attn_type)
        directions = [fwd, -fwd] if self.bi_data else [fwd]
        if self.clamp_len > 0:
            directions = [tf.clip_by_value(d, -float(self.clamp_len), float(self.clamp_len)) for d in directions]
        table = tf.stack([sinusoid(d, self.d_model) for d in directions])
        table = tf.cast(table, self.compute_dtype)
        return self._dropout(table, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, attn_type=self.attn_type, bi_data=self.bi_data,
                      clamp_len=self.clamp_len, dropout=self.dropout)
        return config
