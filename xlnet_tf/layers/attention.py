"""Relative multi-head attention with two streams and memory: the attention math of XLNet in one place.

For a query ``i`` and key ``j`` of head ``n`` (scale ``1/sqrt(d_head)``)::

    score[i, j] = ( (q_i + r_w_bias) . k_j                  content term ("ac")
                  + (q_i + r_r_bias) . r_{klen - dist(i,j)}  position term ("bd"), r = W_r . sinusoid
                  + (q_i + r_s_bias) . seg_embed[s_ij]       segment term ("ef"), s_ij = 1 iff different segments
                  ) * scale
    out_i = LayerNorm(h_i + dropout(W_o . sum_j softmax_j(score[i, :] + mask_bias[i, :]) v_j))

Keys and values come from ``[memory ; content stream]``. The content stream ``h`` queries with ``q = W_q h``;
the query stream ``g`` uses the *same* weights but only for the P predicted positions, with its own mask (it
may not see its own token). Layouts are batch-major: hidden [B, L, D], heads [B, L, N, H], scores
[B, N, Lq, K].

Position term. The content stream's rows are consecutive positions, so the Transformer-XL "skew" applies:
compute ``(q + r_r_bias) . r`` against all R encoding rows and shift row ``i`` left by ``qlen - i``
(``rel_shift``, done with reshapes on the last two axes, no transposes). Query-stream rows sit at arbitrary
positions (the predicted targets), so their shift is a gather with index ``klen - (query_pos - key_pos)``:
the same numbers, for P rows instead of the original's scatter of every query stream into all L rows.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def rel_shift(scores, klen):
    """Transformer-XL skew on the last two axes: [..., Lq, R] -> [..., Lq, klen], out[i, j] = in[i, Lq - i + j].

    Same result as the original's reshape-and-slice on time-major ``[Lq, R, B, N]`` scores, without moving the
    batch and head axes.
    """
    shape = tf.shape(scores)
    lead, qlen, rlen = shape[:-2], shape[-2], shape[-1]
    x = tf.reshape(scores, tf.concat([lead, [rlen, qlen]], 0))[..., 1:, :]
    x = tf.reshape(x, tf.concat([lead, [qlen, rlen - 1]], 0))
    return x[..., :klen]


def gather_relative(scores, query_pos, klen):
    """Position term of queries at arbitrary positions: [B, N, Q, R] -> [B, N, Q, klen].

    ``query_pos`` [B, Q] are key coordinates (``mlen + i`` for position ``i`` of the segment); keys are the
    ``klen`` consecutive positions ``0..klen-1``. Row r of the encoding is distance ``klen - r``, so key ``j``
    reads column ``klen - (query_pos - j)``. Indices past the table (future keys of 'uni' attention, which the
    mask blocks) are clamped.
    """
    rlen = tf.shape(scores)[-1]
    index = klen - query_pos[:, :, None] + tf.range(klen)[None, None, :]
    index = tf.clip_by_value(index, 0, rlen - 1)
    index = tf.broadcast_to(index[:, None], tf.concat([tf.shape(scores)[:-1], [klen]], 0))
    return tf.gather(scores, index, batch_dims=3)


@keras.saving.register_keras_serializable(package="xlnet_tf")
class RelativeAttention(keras.layers.Layer):
    """XLNet's ``rel_attn``: relative multi-head attention over ``[memory ; h]`` for one or two streams.

    Weights (original checkpoint names): ``q, k, v, r, o`` kernels [d_model, n_head, d_head] (no biases) and
    the post-attention ``LayerNorm`` (epsilon 1e-12). The per-layer ``r_w_bias, r_r_bias, r_s_bias``
    [n_head, d_head] and ``seg_embed`` [2, n_head, d_head] are owned by the network (shared across layers when
    ``untie_r`` is False) and passed in.

    Call args:
      content: h [B, L, D].
      position: sinusoid table [X, R, D] (X = 2 with bi_data: forward rows for the first half of the batch).
      biases: dict with ``r_w``, ``r_r`` and optionally ``r_s``, ``seg_embed``.
      memory: [B, M, D] or None.
      content_bias / query_bias: additive float32 masks [B|1, 1, L|P, M+L] or None.
      segment_diff: bool [B, L, M+L], True where query and key are in different segments (None: no term).
      query: g [B, P, D] or None; query_pos: [B, P] key coordinates of g's rows; query_segment_diff: [B, P, M+L];
      query_weight: [B, P] multiplies the query stream's attention vectors (0 for padded target rows).
    Returns (h_out [B, L, D], g_out [B, P, D] or None).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0, dropatt: float = 0.0,
                 initializer_range: float = 0.02, **kwargs):
        # The float32 mask biases must not be cast to a float16 compute dtype (-1e30 would become -inf).
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_head
        self.dropout, self.dropatt, self.initializer_range = dropout, dropatt, initializer_range
        self.scale = 1.0 / (d_head ** 0.5)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="LayerNorm", dtype=self.dtype_policy)
        self._output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self._attention_dropout = keras.layers.Dropout(dropatt, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "r", "o"):
            setattr(self, f"{name}_kernel", self.add_weight(name=f"{name}_kernel", shape=shape, initializer=init))
        self.layer_norm.build((None, None, self.d_model))
        self.built = True

    def _project(self, x, kernel):
        return tf.einsum("bld,dnh->blnh", x, tf.cast(kernel, self.compute_dtype))

    def _attend(self, q, k, v, k_r, biases, shift, mask, segment_diff, training):
        """Attention vectors [B, Lq, N, H] for queries q [B, Lq, N, H]; ``shift(bd_full) -> bd``."""
        ac = tf.einsum("binh,bjnh->bnij", q + biases["r_w"], k)
        bd = shift(_position_scores(q + biases["r_r"], k_r))
        score = ac + bd
        if segment_diff is not None:
            ef = tf.einsum("binh,snh->bnis", q + biases["r_s"], biases["seg_embed"])
            score += tf.where(segment_diff[:, None], ef[..., 1:], ef[..., :1])
        score = tf.cast(score * tf.cast(self.scale, score.dtype), tf.float32)
        if mask is not None:
            score += mask
        prob = tf.cast(tf.nn.softmax(score, axis=-1), self.compute_dtype)
        prob = self._attention_dropout(prob, training=training)
        return tf.einsum("bnij,bjnh->binh", prob, v)

    def _post_attention(self, x, attn_vec, training):
        out = tf.einsum("binh,dnh->bid", attn_vec, tf.cast(self.o_kernel, self.compute_dtype))
        out = self._output_dropout(out, training=training)
        return self.layer_norm(out + x)

    def call(self, content, position, biases, memory=None, content_bias=None, segment_diff=None, query=None,
             query_pos=None, query_bias=None, query_segment_diff=None, query_weight=None, training=None):
        dtype = self.compute_dtype
        content = tf.cast(content, dtype)
        biases = {name: tf.cast(value, dtype) for name, value in biases.items()}
        keys_in = content if memory is None else tf.concat([tf.cast(memory, dtype), content], axis=1)
        klen = tf.shape(keys_in)[1]
        k = self._project(keys_in, self.k_kernel)
        v = self._project(keys_in, self.v_kernel)
        # The position encoding is shared by the batch: [X, R, N, H], projected once.
        k_r = tf.einsum("xrd,dnh->xrnh", tf.cast(position, dtype), tf.cast(self.r_kernel, dtype))

        q = self._project(content, self.q_kernel)
        attn = self._attend(q, k, v, k_r, biases, lambda s: rel_shift(s, klen), content_bias, segment_diff,
                            training)
        h_out = self._post_attention(content, attn, training)
        if query is None:
            return h_out, None

        query = tf.cast(query, dtype)
        q_g = self._project(query, self.q_kernel)
        attn_g = self._attend(q_g, k, v, k_r, biases, lambda s: gather_relative(s, query_pos, klen), query_bias,
                              query_segment_diff, training)
        if query_weight is not None:
            attn_g *= tf.cast(query_weight, dtype)[:, :, None, None]
        g_out = self._post_attention(query, attn_g, training)
        return h_out, g_out

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout,
                      dropatt=self.dropatt, initializer_range=self.initializer_range)
        return config


def _position_scores(q, k_r):
    """(q + r_r_bias) . r for every encoding row: q [B, Lq, N, H], k_r [X, R, N, H] -> [B, N, Lq, R].

    With X = 2 (bi_data) the first half of the batch reads the forward rows and the second half the backward
    ones; each half is one batched matmul against its own table, never a batch-tiled copy.
    """
    n_dir = tf.shape(k_r)[0]
    shape = tf.shape(q)
    q = tf.reshape(q, tf.concat([[n_dir, shape[0] // n_dir], shape[1:]], 0))
    scores = tf.einsum("xbinh,xrnh->xbnir", q, k_r)
    return tf.reshape(scores, tf.concat([[shape[0]], tf.shape(scores)[2:]], 0))
