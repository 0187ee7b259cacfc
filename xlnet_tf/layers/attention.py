"""Relative multi-head attention with two streams and memory: the attention math of XLNet in one place.

For a query ``i`` and key ``j`` of head ``n`` (scale ``1/sqrt(d_head)``)::

    score[i, j] = ( (q_i + r_w_bias) . k_j                  content term ("ac")
                  + (q_i + r_r_bias) . r_{klen - dist(i,j)}  position term ("bd"), r = W_r . sinusoid
                  + (q_i + r_s_bias) . seg_embed[s_ij]       segment term ("ef"), s_ij = 1 iff different segments
                  ) * scale
    out_i = LayerNorm(h_i + dropout(W_o . sum_j softmax_j(score[i, :] + mask_bias[i, :]) v_j))

Keys and values come from ``[memory ; content stream]``. The content stream ``h`` queries with ``q = W_q h``;
the query stream ``g`` uses the *same* weights but only for the P predicted positions, with its own mask (it
may not see its own token). Hidden states are batch-major [B, L, D]; inside the layer heads are head-major
[N, B, L, H] and scores [N, B, Lq, K], so every attention product is one batched matmul with no transposes
of score-sized tensors (the only transposes are of the [B, L, D]-sized projections).

Position term. The content stream's rows are consecutive positions, so the Transformer-XL "skew" applies:
compute ``(q + r_r_bias) . r`` against all R encoding rows and shift row ``i`` left by ``qlen - i``
(``rel_shift``, done with reshapes on the last two axes, no transposes). Query-stream rows sit at arbitrary
positions (the predicted targets), so their shift is a gather with index ``klen - (query_pos - key_pos)``:
the same numbers, for P rows instead of the original's scatter of every query stream into all L rows.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers import fused, linear
from xlnet_tf.layers.dropout import Dropout


def rel_shift(scores, klen):
    """Transformer-XL skew on the last two axes: [..., Lq, R] -> [..., Lq, klen], out[i, j] = in[i, Lq - i + j].

    Same result as the original's reshape-and-slice on time-major ``[Lq, R, B, N]`` scores, without moving the
    batch and head axes. Both cuts are ``tf.slice`` (gradient: a ``Pad``), not strided slices, whose gradient
    (``StridedSliceGrad``) is several times slower on CPU.
    """
    rank = scores.shape.rank
    shape = tf.shape(scores)
    lead, qlen, rlen = shape[:-2], shape[-2], shape[-1]
    # Drop the first row of the [R, Lq] view: the first qlen entries of the flattened [Lq * R] trailing block.
    flat = tf.reshape(scores, tf.concat([lead, [qlen * rlen]], 0))
    flat = tf.slice(flat, [0] * (rank - 2) + [qlen], [-1] * (rank - 2) + [qlen * (rlen - 1)])
    x = tf.reshape(flat, tf.concat([lead, [qlen, rlen - 1]], 0))
    return tf.slice(x, [0] * rank, [-1] * (rank - 1) + [klen])


def gather_relative(scores, query_pos, klen):
    """Position term of queries at arbitrary positions: head-major [N, B, Q, R] -> [N, B, Q, klen].

    ``query_pos`` [B, Q] are key coordinates (``mlen + i`` for position ``i`` of the segment); keys are the
    ``klen`` consecutive positions ``0..klen-1``. Row r of the encoding is distance ``klen - r``, so key ``j``
    reads column ``klen - (query_pos - j)``. Indices past the table (future keys of 'uni' attention, which the
    mask blocks) are clamped.
    """
    rlen = tf.shape(scores)[-1]
    index = klen - query_pos[:, :, None] + tf.range(klen)[None, None, :]
    index = tf.clip_by_value(index, 0, rlen - 1)  # [B, Q, klen], the same for every head
    index = tf.broadcast_to(index[None], tf.concat([tf.shape(scores)[:-1], [klen]], 0))
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
      content_bias / query_bias: additive float32 masks [B|1, L|P, M+L] (broadcast over heads) or None.
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
        self._output_dropout = Dropout(dropout, dtype=self.dtype_policy)
        self._attention_dropout = Dropout(dropatt, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "r", "o"):
            setattr(self, f"{name}_kernel", self.add_weight(name=f"{name}_kernel", shape=shape, initializer=init))
        self.layer_norm.build((None, None, self.d_model))
        self.built = True

    def _kernel(self, *names):
        """The named [D, N, H] kernels as one [D, len(names) * N * H] matrix in the compute dtype."""
        kernels = [tf.reshape(getattr(self, f"{n}_kernel"), [self.d_model, self.n_head * self.d_head])
                   for n in names]
        kernel = kernels[0] if len(kernels) == 1 else tf.concat(kernels, axis=1)
        return tf.cast(kernel, self.compute_dtype)

    def _heads(self, x, kernel, parts=1, memory=None):
        """Projections of ``x`` [B, L, D] (of ``[memory ; x]`` [B, M + L, D] with a memory) by ``kernel``
        [D, parts * N * H]: [parts, N, B, L (M + L), H], head-major, so every attention matmul is batched over
        (N, B) with no further transposes. One matmul for all ``parts`` (e.g. k and v)."""
        keys = x if memory is None else tf.concat([memory, x], axis=1)
        shape = tf.shape(keys)
        rows = tf.reshape(keys, [-1, self.d_model])
        if memory is None:
            y = linear.matmul(rows, kernel)
        else:
            y = _project_past_memory(rows, x, kernel, mlen=tf.shape(memory)[1])
        y = tf.reshape(y, tf.concat([shape[:2], [parts, self.n_head, self.d_head]], 0))
        return tf.transpose(y, [2, 3, 0, 1, 4])

    def _attend(self, q, k, v, k_r, biases, query_pos, mask, segment_diff, training):
        """Attention vectors [N, B, Lq, H] for queries q [N, B, Lq, H]; keys/values [N, B, K, H]; k_r
        [N, X, R, H]; mask [B|1, Lq, K] float32. The position term is skewed with ``rel_shift`` (content stream,
        ``query_pos`` None) or gathered at ``query_pos`` (query stream)."""
        scale = tf.cast(self.scale, q.dtype)
        # (q + bias) * scale == q * scale + bias * scale: the score scale rides on the (small) queries.
        q = q * scale
        ac = tf.matmul(q + biases["r_w"] * scale, k, transpose_b=True)
        bd_full = _position_scores(q + biases["r_r"] * scale, k_r)
        ef = None
        if segment_diff is not None:
            # (q + r_s_bias) . seg_embed[s_ij] = e_0[i] + s_ij (e_1[i] - e_0[i]). The same-segment score e_0[i]
            # is constant along row i, which softmax ignores: only the difference term is added (one [N, B, Lq]
            # column broadcast against s_ij, instead of selecting between two full score tensors).
            n, b, lq = tf.shape(q)[0], tf.shape(q)[1], tf.shape(q)[2]
            q_s = tf.reshape(q + biases["r_s"] * scale, [n, -1, self.d_head])
            seg = biases["seg_embed"]  # [N, 2, H]
            ef = tf.matmul(q_s, seg[:, 1:] - seg[:, :1], transpose_b=True)  # [N, B*Lq, 1]
            ef = tf.reshape(ef, [n, b, lq, 1])
        prob = self._probs(ac, bd_full, ef, segment_diff, mask, query_pos, training=training)
        return tf.matmul(prob, v)

    def _probs(self, ac, bd_full, ef, segment_diff, mask, query_pos, training=None):
        """Everything between the score matmuls and prob . v: shift/gather, segment term, mask, fp32 softmax,
        attention dropout. Training on CPU: one C++ kernel each way (``fused.attention_probs``)."""
        klen = tf.shape(ac)[-1]
        use_fused = fused.use(training)
        if use_fused and fused.attention_probs_native_applies(ac):
            if query_pos is None:  # the content stream: row i is key coordinate mlen + i
                qlen = tf.shape(ac)[2]
                query_pos = tf.range(klen - qlen, klen)[None, :]
            return fused.attention_probs(ac, bd_full, ef, segment_diff, mask, query_pos,
                                         self._attention_dropout.call_seed(training), self.dropatt)
        if query_pos is None:
            bd = rel_shift(bd_full, klen)
        else:
            bd = gather_relative(bd_full, query_pos, klen)
        if use_fused and ac.dtype != tf.float32:
            # One kernel for the adds, cast and mask: each is a slow pass in bfloat16/float16 on CPU. In float32
            # TensorFlow's own kernels measured as fast as the fused one.
            score = fused.attention_score(ac, bd, ef, segment_diff, mask)
        else:
            score = ac + bd
            if ef is not None:
                score += ef * tf.cast(segment_diff, ef.dtype)
            score = tf.cast(score, tf.float32)
            if mask is not None:
                score += mask
        prob = tf.nn.softmax(score, axis=-1)
        if use_fused:  # one kernel: mask, scale and cast to the compute dtype
            return fused.dropout(prob, self._attention_dropout.bits(prob, training), self.dropatt, self.compute_dtype)
        return self._attention_dropout(tf.cast(prob, self.compute_dtype), training=training)

    def _residual_norm(self, out, x, training=None):
        """LayerNorm(x + dropout(out)); one fused kernel when training."""
        if fused.use(training):
            norm = self.layer_norm
            return fused.residual_layer_norm(out, x, norm.gamma, norm.beta, norm.epsilon,
                                             self._output_dropout.call_seed(training), self.dropout)
        return self.layer_norm(self._output_dropout(out, training=training) + x)

    def _post_attention(self, x, attn_vec, kernel, training):
        """attn_vec [N, B, L, H] -> LayerNorm(x + dropout(W_o attn)) [B, L, D]."""
        shape = tf.shape(x)
        attn_vec = tf.reshape(tf.transpose(attn_vec, [1, 2, 0, 3]), [-1, self.n_head * self.d_head])
        out = tf.reshape(linear.matmul(attn_vec, kernel, transpose_weight=True), shape)
        return self._residual_norm(out, x, training=training)

    def call(self, content, position, biases, memory=None, content_bias=None, segment_diff=None, query=None,
             query_pos=None, query_bias=None, query_segment_diff=None, query_weight=None, training=None):
        dtype = self.compute_dtype
        content = tf.cast(content, dtype)
        biases = {name: tf.cast(value, dtype) for name, value in biases.items()}
        # r_w/r_r/r_s [N, H] broadcast against [N, B, L, H]; seg_embed [2, N, H] -> [N, 2, H].
        for name in ("r_w", "r_r", "r_s"):
            if name in biases:
                biases[name] = biases[name][:, None, None, :]
        if "seg_embed" in biases:
            biases["seg_embed"] = tf.transpose(biases["seg_embed"], [1, 0, 2])
        memory = None if memory is None else tf.stop_gradient(tf.cast(memory, dtype))
        k, v = tf.unstack(self._heads(content, self._kernel("k", "v"), parts=2, memory=memory))
        # The position encoding is shared by the batch: [N, X, R, H], projected once.
        n_dir = tf.shape(position)[0]
        k_r = linear.matmul(tf.reshape(tf.cast(position, dtype), [-1, self.d_model]), self._kernel("r"))
        k_r = tf.transpose(tf.reshape(k_r, [n_dir, -1, self.n_head, self.d_head]), [2, 0, 1, 3])

        q_kernel, o_kernel = self._kernel("q"), self._kernel("o")
        q = self._heads(content, q_kernel)[0]
        attn = self._attend(q, k, v, k_r, biases, None, content_bias, segment_diff, training)
        h_out = self._post_attention(content, attn, o_kernel, training)
        if query is None:
            return h_out, None

        query = tf.cast(query, dtype)
        q_g = self._heads(query, q_kernel)[0]
        attn_g = self._attend(q_g, k, v, k_r, biases, query_pos, query_bias, query_segment_diff, training)
        if query_weight is not None:
            attn_g *= tf.cast(query_weight, dtype)[None, :, :, None]
        g_out = self._post_attention(query, attn_g, o_kernel, training)
        return h_out, g_out

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout,
                      dropatt=self.dropatt, initializer_range=self.initializer_range)
        return config


def _position_scores(q, k_r):
    """(q + r_r_bias) . r for every encoding row: q [N, B, Lq, H], k_r [N, X, R, H] -> [N, B, Lq, R].

    With X = 2 (bi_data) the first half of the batch reads the forward rows and the second half the backward
    ones; either way it is one batched matmul per head over all (batch, query) rows against its table, never a
    batch-tiled copy.
    """
    shape = tf.shape(q)
    n_dir = tf.shape(k_r)[1]
    scores = tf.matmul(tf.reshape(q, [shape[0], n_dir, -1, shape[3]]), k_r, transpose_b=True)
    return tf.reshape(scores, tf.concat([shape[:3], [-1]], 0))


def _project_past_memory(rows, x, kernel, mlen):
    """``rows . kernel`` for rows = ``[memory ; x]`` [B * (M + L), D], with an input gradient for x's rows only.

    The original stops gradients at the memory, so the memory rows' input gradient is never used; skipping it
    saves a third of that matmul at ``mem_len = seq_len / 2`` (instead of the full product and a slice). The
    kernel's gradient uses every row.
    """
    @tf.custom_gradient
    def project(x, kernel):
        def grad(d_proj):
            width = tf.shape(kernel)[1]
            d_kernel = linear.weight_gradient(rows, d_proj)
            d_rows = tf.slice(tf.reshape(d_proj, [tf.shape(x)[0], -1, width]), [0, mlen, 0], [-1, -1, -1])
            d_x = linear.input_gradient(tf.reshape(d_rows, [-1, width]), kernel)
            return tf.reshape(d_x, tf.shape(x)), d_kernel
        return tf.matmul(rows, kernel), grad

    return project(x, kernel)
