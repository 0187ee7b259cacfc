"""Relative multi-head attention with two streams and memory: XLNet's ``rel_attn``.

For a query ``i`` and key ``j`` of head ``n`` (scale ``1/sqrt(d_head)``)::

    score[i, j] = ( (q_i + r_w_bias) . k_j                  content term ("ac")
                  + (q_i + r_r_bias) . r_{klen - dist(i,j)}  position term ("bd"), r = W_r . sinusoid
                  + (q_i + r_s_bias) . seg_embed[s_ij]       segment term ("ef"), s_ij = 1 iff different segments
                  ) * scale
    out_i = LayerNorm(h_i + dropout(W_o . sum_j dropout(softmax_j(score[i, :] + mask[i, :])) v_j))

Keys and values come from ``[memory ; content stream]``. The content stream ``h`` queries with ``q = W_q h``;
the query stream ``g`` uses the *same* weights, only for the P predicted positions, with its own mask (it may
not see its own token). Hidden states are batch-major [B, L, D]; inside the layer heads are head-major
[N, B, L, H] and scores [N, B, Lq, K], so every attention product is one batched matmul.

Position term: row ``r`` of the encoding is the distance ``klen - r``, and a query at key coordinate ``p_q`` reads
key ``j`` (at ``p_k``) in row ``klen - (p_q - p_k)``. XLNet's content stream sits at the consecutive coordinates
``mlen + i`` against the consecutive keys ``0..klen-1``, so the Transformer-XL skew applies (``rel_shift``). The
query stream's rows sit at arbitrary positions (the predicted targets), and with explicit position ids (UniLMv2's
and MPNet's appended copies sit at the positions of the tokens they copy) keys do too: there the row is gathered
(``gather_relative``), which picks the same numbers as the skew on consecutive positions.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf import kernels, ops
from xlnet_tf.kernels import fast
from xlnet_tf.kernels.dropout_mask import dropout
from xlnet_tf.layers.dropout import Dropout
from xlnet_tf.layers.linear import matmul
from xlnet_tf.layers.normalization import residual_layer_norm


def rel_shift(scores, klen):
    """Transformer-XL skew on the last two axes: [..., Lq, R] -> [..., Lq, klen], out[i, j] = in[i, Lq - i + j].

    The original's reshape-and-slice on time-major ``[Lq, R, B, N]`` scores, on the last two axes instead.
    """
    shape = tf.shape(scores)
    lead, qlen, rlen = shape[:-2], shape[-2], shape[-1]
    # Drop the first row of the [R, Lq] view: the first qlen entries of the flattened [Lq * R] trailing block.
    flat = tf.reshape(scores, tf.concat([lead, [qlen * rlen]], 0))[..., qlen:]
    return tf.reshape(flat, tf.concat([lead, [qlen, rlen - 1]], 0))[..., :klen]


def gather_relative(scores, query_pos, klen, key_pos=None):
    """Position term of queries and keys at arbitrary positions: head-major [N, B, Q, R] -> [N, B, Q, klen].

    ``query_pos`` [B, Q] and ``key_pos`` [B, klen] are key coordinates (``mlen + i`` for position ``i`` of the
    segment, memory at ``0..mlen-1``); ``key_pos`` None: the consecutive keys ``0..klen-1``. Key ``j`` of query
    ``i`` reads column ``klen - (query_pos[i] - key_pos[j])``. Columns past the table (future keys of 'uni'
    attention, which its mask blocks) are clamped. Under XLA, consecutive keys are a window of each row
    (``_relative_windows``); for a TPU, keys at explicit positions are that window's columns (``_key_columns``).
    """
    window = tf.get_static_value(klen)
    if window is not None and scores.shape.is_fully_defined() and ops.in_xla_context():
        if key_pos is None:
            return _relative_windows(scores, query_pos, int(window))
        if ops.for_tpu():
            return _key_columns(_relative_windows(scores, query_pos, int(window)), key_pos)
    shape = tf.shape(scores)
    rlen = shape[-1]
    if key_pos is None:
        key_pos = tf.range(klen)[None, :]
    index = klen - query_pos[:, :, None] + key_pos[:, None, :]
    index = tf.clip_by_value(index, 0, rlen - 1)  # [B, Q, klen], the same for every head
    # One flat index per element into the flattened scores (a 1-D gather): under XLA the index fuses into the
    # gather and its gradient's scatter. (A gather over [N, B, Q] as batch dimensions takes four int32 coordinates
    # per element, which XLA writes as a tensor 8x the bf16 scores' and reads twice per layer, bench/reports/gpu.md;
    # a gather along the axis of [N, B * Q * R] transposes its gradient twice.)
    size = scores.shape.num_elements()
    dtype = tf.int32 if size is not None and size < 2 ** 31 else tf.int64
    rows = tf.range(shape[0] * shape[1] * shape[2], dtype=dtype) * tf.cast(rlen, dtype)
    index = tf.cast(index, dtype)[None] + tf.reshape(rows, shape[:3])[..., None]
    return tf.gather(tf.reshape(scores, [-1]), index)


def _relative_windows(scores, query_pos, klen: int):
    """``gather_relative`` for consecutive keys under XLA: query ``i`` reads the ``klen`` consecutive columns from
    ``klen - query_pos[i]``, a window of its row, taken with one start per row (``ops.row_windows``). XLA's TPU
    backend prices a gather with an index per element at ~300x the bytes this one moves (bench/reports/gpu.md).
    Query positions are key coordinates (>= 0), so a window ends at most at column 2 * klen - 1: a table shorter
    than that (``attn_type='uni'``, or memory) is taken as extended by copies of its last column, the clamp above
    (``row_windows``' ``edge``)."""
    return ops.row_windows(scores, klen - query_pos, klen, edge=max(0, 2 * klen - scores.shape[-1]))


def _key_columns(windows, key_pos):
    """``windows`` [N, B, Q, T] (column t: the term against a key at coordinate t) at ``key_pos`` [B, K] ->
    [N, B, Q, K], for a TPU: a product with a one-hot [B, T, K] matrix, which its matrix units take, where XLA's
    TPU backend prices a gather with an index per element at ~300x the bytes it moves (UniLMv2's and MPNet's
    position terms, bench/reports/gpu.md). Exact: one term per sum, at HIGHEST precision (a float32 product at
    TensorFlow's default would round to bfloat16 there). Key positions are key coordinates, below T (the number
    of keys); one outside reads 0, not the table's edge."""
    from tensorflow.compiler.tf2xla.python import xla
    from tensorflow.compiler.xla import xla_data_pb2

    one_hot = tf.one_hot(tf.cast(key_pos, tf.int32), windows.shape[-1], axis=1, dtype=windows.dtype)  # [B, T, K]
    highest = xla_data_pb2.PrecisionConfig(operand_precision=[xla_data_pb2.PrecisionConfig.HIGHEST] * 2)

    def times_one_hot(x, axis):  # x [N, B, Q, .] contracted with the one-hot's ``axis``, batched over B
        numbers = xla_data_pb2.DotDimensionNumbers(lhs_contracting_dimensions=[3], rhs_contracting_dimensions=[axis],
                                                   lhs_batch_dimensions=[1], rhs_batch_dimensions=[0])
        return tf.transpose(xla.dot_general(x, one_hot, numbers, highest), [1, 0, 2, 3])  # [B, N, Q, .] -> [N, B..]

    @tf.custom_gradient
    def columns(windows):
        return times_one_hot(windows, 1), lambda dy: times_one_hot(dy, 2)
    return columns(windows)


@kernels.fast_path(fast=fast.attention_probs)
def attention_probs(ac, bd, ef, segment_diff, mask, query_pos, rate: float = 0.0, seed=None, key_pos=None,
                    values=None, aligned: bool = False):
    """``dropout(softmax(ac + shift(bd) + ef * segment_diff + mask))`` over the keys: [N, B, Q, K] in ac's dtype;
    with ``values`` [N, B, K, H], the attention vectors: those probabilities times the values, [N, B, Q, H].

    ac [N, B, Q, K] content scores; bd [N, B, Q, R] position scores against every encoding row, shifted by
    ``rel_shift`` (``query_pos`` None: rows are the last Q of K consecutive positions) or gathered at
    ``query_pos`` [B, Q] against keys at ``key_pos`` [B, K] (None: consecutive), or with ``aligned`` already
    [N, B, Q, K], column j the term against key j (``shifted_position_scores``); ef [N, B, Q, 1] and segment_diff
    bool [B, Q, K], or both None; mask: additive float32 [B|1, Q, K] or None. The sum and the softmax run in
    float32. Attention dropout at ``rate`` with ``seed`` (None: off).
    """
    klen = ac.shape[-1] or tf.shape(ac)[-1]  # static where known (gather_relative's windows need it)
    if not aligned:
        bd = rel_shift(bd, klen) if query_pos is None else gather_relative(bd, query_pos, klen, key_pos)
    score = tf.cast(ac, tf.float32) + tf.cast(bd, tf.float32)
    if ef is not None:
        score += tf.cast(ef, tf.float32) * tf.cast(segment_diff, tf.float32)
    if mask is not None:
        score += mask
    return _softmax_dropout(score, rate, seed, ac.dtype, values)


def _softmax_dropout(score, rate, seed, dtype, values=None):
    """``dropout(softmax(score))`` in ``dtype`` (score: float32 [..., K]), or that times ``values`` [..., K, H],
    back-propagated from the probabilities kept in ``dtype``: ``d_score = p * (d_p - sum(p * d_p))``, ``d_p`` the
    incoming gradient through the same mask.

    Under XLA with 16-bit activations the kept probabilities are written once (an optimisation barrier); else XLA
    recomputes the softmax from ac and bd inside each reader (the forward's two outputs, the backward's two
    kernels) with float32 intermediates between them, and keeps ac and bd alive for it: compiled for a GPU, the
    barrier saves bytes and memory (bench/reports/gpu.md). In float32 the recomputation costs less than the kept
    probabilities' bytes, so XLA keeps its choice. Float32: the values and gradient of ``dropout(softmax(score))``;
    16-bit: the probabilities are rounded to ``dtype`` before the dropout's scale and for the backward (one
    rounding each, as the matmuls that read them round them anyway).

    With the values, ``sum(p * d_p)`` is the attention vector's own dot product with its gradient (FlashAttention's
    row sum: ``sum_j kept_j (d_out . v_j) = d_out . out``), read from [..., H] instead of a pass over the [..., K]
    probabilities and their gradient: under XLA the backward is then one kernel over them, not two."""

    def forward(score):
        prob = tf.cast(tf.nn.softmax(score, axis=-1), dtype)
        if dtype != tf.float32 and ops.in_xla_context():
            prob, = ops.optimization_barrier(prob)
        return prob, tf.cast(dropout(tf.cast(prob, tf.float32), rate, seed), dtype)

    def d_score(prob, d_kept, row_sum=None):  # reads the kept ``prob`` (16-bit outside XLA too), not a float32 copy
        p = tf.cast(prob, tf.float32)
        d_prob = dropout(tf.cast(d_kept, tf.float32), rate, seed)
        if row_sum is None:
            row_sum = tf.reduce_sum(p * d_prob, axis=-1, keepdims=True)
        return p * (d_prob - row_sum)

    if values is None:
        @tf.custom_gradient
        def probs(score):
            prob, kept = forward(score)
            return kept, lambda d_out: d_score(prob, d_out)
        return probs(score)

    @tf.custom_gradient
    def attend(score, values):
        prob, kept = forward(score)
        out = tf.matmul(kept, values)

        def grad(d_out):
            row_sum = tf.reduce_sum(tf.cast(d_out, tf.float32) * tf.cast(out, tf.float32), axis=-1, keepdims=True)
            d_kept = tf.matmul(d_out, values, transpose_b=True)
            return d_score(prob, d_kept, row_sum), tf.matmul(kept, d_out, transpose_a=True)
        return out, grad
    return attend(score, values)


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
      biases: dict with ``r_w``, ``r_r`` and, with segments, ``r_s`` and ``seg_embed``.
      memory: [B, M, D] or None (no gradient flows into it).
      content_mask / query_mask: additive float32 masks [B|1, L|P, M+L] (broadcast over heads) or None.
      segment_diff: bool [B, L, M+L], True where query and key are in different segments (None: no term).
      query: g [B, P, D] or None; query_pos: [B, P] key coordinates of g's rows; query_segment_diff: [B, P, M+L];
      query_weight: [B, P] multiplies the query stream's attention vectors (0 for padded target rows).
      content_pos: [B, L] key coordinates of h's rows and key_pos [B, M+L] of the keys, or both None (XLNet:
        consecutive positions); explicit positions use the gathered position term in both streams.
      query_keys: the query stream also attends to its own rows (UniLMv2's appended tokens): its keys are
        ``[memory ; h ; g]``, its masks and segment_diff [B, P, M+L+P].
      content_out: False: h_out is not computed (None); the keys and values from h still are.
    Returns (h_out [B, L, D] or None, g_out [B, P, D] or None).
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

    def _project(self, x, name):
        """x [B, L, D] times the ``name`` kernel -> head-major [N, B, L, H]."""
        kernel = tf.cast(tf.reshape(getattr(self, f"{name}_kernel"), [self.d_model, -1]), self.compute_dtype)
        shape = tf.shape(x)
        y = matmul(tf.reshape(x, [-1, self.d_model]), kernel)
        return tf.transpose(tf.reshape(y, [shape[0], shape[1], self.n_head, self.d_head]), [2, 0, 1, 3])

    def _project_keys(self, memory, content, name):
        """Keys or values of ``[memory ; content]``, head-major [N, B, M + L, H]. The two parts are projected
        apart: the memory is a constant (no gradient flows into it), so the backward computes the input
        gradient of the content's rows only; one matmul over both would compute the memory's rows too, then drop
        them (base-512 plm: 2.6% of the step's FLOPs, on every device)."""
        projected = self._project(content, name)
        return projected if memory is None else tf.concat([self._project(memory, name), projected], axis=2)

    def call(self, content, position, biases, memory=None, content_mask=None, segment_diff=None, query=None,
             query_pos=None, query_mask=None, query_segment_diff=None, query_weight=None, content_pos=None,
             key_pos=None, query_keys=False, training=None, content_out=True):
        position = self._check_arguments(content, position, biases, memory, query,
                                         segment_diff is not None or query_segment_diff is not None)
        dtype = self.compute_dtype
        content = tf.cast(content, dtype)
        biases = {name: tf.cast(value, dtype) for name, value in biases.items()}
        if memory is not None:
            memory = tf.stop_gradient(tf.cast(memory, dtype))
        k, v = self._project_keys(memory, content, "k"), self._project_keys(memory, content, "v")  # [N, B, K, H]
        # The position encoding is shared by the batch: projected once, [N, X, R, H].
        k_r = self._project(tf.cast(position, dtype), "r")
        h_out = None
        if content_out:
            h_out = self._attend(content, k, v, k_r, biases, content_pos, key_pos, content_mask, segment_diff, None,
                                 training)
        if query is None:
            return h_out, None
        query = tf.cast(query, dtype)
        if query_keys:  # the content keys, then the query rows at their positions
            if key_pos is None:
                key_pos = tf.broadcast_to(tf.range(tf.shape(k)[2])[None, :], tf.shape(k)[1:3])
            key_pos = tf.concat([key_pos, query_pos], axis=1)
            k = tf.concat([k, self._project(query, "k")], axis=2)
            v = tf.concat([v, self._project(query, "v")], axis=2)
            # The position term reads row (number of keys) - (query_pos - key_pos), but the encoding's rows are
            # laid out for the content's klen keys: with P more keys, the query coordinates move by P to compensate.
            query_pos = query_pos + tf.shape(query)[1]
        else:
            k, v = _not_merged(k, v)
        g_out = self._attend(query, k, v, k_r, biases, query_pos, key_pos, query_mask, query_segment_diff,
                             query_weight, training)
        return h_out, g_out

    def _check_arguments(self, content, position, biases, memory, query, segments: bool):
        """A ValueError naming the argument where TensorFlow's error would come from deep in the layer, or none
        at all: a position table of another length than the keys' (``rel_shift`` reads its first columns)."""
        wanted = ("r_w", "r_r") + (("r_s", "seg_embed") if segments else ())
        missing = [name for name in wanted if name not in biases]
        if missing:
            raise ValueError(f"{self.name}: biases lack {', '.join(missing)} (they hold r_w and r_r, and with "
                             f"segment_diff r_s and seg_embed), got {sorted(biases)}")
        shapes = {name: tf.TensorShape(value.shape) for name, value in (
            ("content", content), ("memory", memory), ("query", query), ("position", position)) if value is not None}
        for name, shape in shapes.items():
            if shape.rank is not None and shape[-1] not in (None, self.d_model):
                raise ValueError(f"{self.name}: {name} must end in d_model = {self.d_model}, got shape "
                                 f"{shape.as_list()}")
        if shapes["position"].rank is None or shapes["content"].rank is None:
            return position
        rows, qlen = shapes["position"][-2], shapes["content"][1]
        mlen = 0 if memory is None else (shapes["memory"][1] if shapes["memory"].rank else None)
        if None not in (rows, qlen, mlen):
            klen = mlen + qlen
            if rows not in (klen + qlen, klen + 1):
                raise ValueError(f"{self.name}: position must have {klen + qlen} rows ('bi') or {klen + 1} ('uni'), "
                                 f"the encoding of {qlen} queries and {klen} keys ({mlen} of memory), got {rows}")
            return position
        if tf.executing_eagerly() or ops.in_xla_context():  # XLA drops Assert ops (and logs each)
            return position
        rows, qlen = tf.shape(position)[-2], tf.shape(content)[1]
        klen = qlen + (0 if memory is None else tf.shape(memory)[1])
        check = tf.debugging.Assert(tf.equal(rows, klen + qlen) | tf.equal(rows, klen + 1), [
            f"{self.name}: position must have keys + queries rows (attn_type bi) or keys + 1 (uni); got rows, "
            "queries, keys:", rows, qlen, klen])
        with tf.control_dependencies([check]):
            return tf.identity(position)

    def _attend(self, x, k, v, k_r, biases, query_pos, key_pos, mask, segment_diff, weight, training):
        """One stream: queries from x [B, Lq, D] (rows at ``query_pos``, or the consecutive content rows) against
        keys/values [N, B, K, H] (at ``key_pos``, or consecutive) -> LayerNorm(x + dropout(W_o attention))
        [B, Lq, D]."""
        q = self._project(x, "q")
        scale = tf.cast(self.scale, q.dtype)

        def scaled_query(bias):  # (q + bias) * scale: the score scale applied to the queries, not the scores
            return (q + biases[bias][:, None, None, :]) * scale  # [N, H] bias broadcast over [N, B, Lq, H]

        ac = tf.matmul(scaled_query("r_w"), k, transpose_b=True)
        aligned = query_pos is None and key_pos is None and _chunks_apply(ac, k_r)
        if aligned:
            bd = shifted_position_scores(scaled_query("r_r"), k_r, POSITION_CHUNK)
        else:
            bd = _position_scores(scaled_query("r_r"), k_r)
        ef = None
        if segment_diff is not None:
            # (q + r_s_bias) . seg_embed[s_ij] = e_0[i] + s_ij (e_1[i] - e_0[i]), and softmax ignores e_0[i] (it is
            # constant along row i): only the difference column is added where the segments differ.
            seg = tf.transpose(biases["seg_embed"], [1, 0, 2])  # [N, 2, H]
            ef = tf.einsum("nbqh,nh->nbq", scaled_query("r_s"), seg[:, 1] - seg[:, 0])[..., None]
        attn = attention_probs(ac, bd, ef, segment_diff, mask, query_pos, self.dropatt,
                               self._attention_dropout.call_seed(training), key_pos=key_pos, values=v,
                               aligned=aligned)  # [N, B, Lq, H]
        if weight is not None:
            attn *= tf.cast(weight, attn.dtype)[None, :, :, None]
        shape = tf.shape(x)
        attn = tf.reshape(tf.transpose(attn, [1, 2, 0, 3]), [-1, self.n_head * self.d_head])
        o_kernel = tf.cast(tf.reshape(self.o_kernel, [self.d_model, -1]), attn.dtype)
        out = tf.reshape(matmul(attn, o_kernel, transpose_weight=True), shape)
        norm = self.layer_norm
        return residual_layer_norm(out, x, norm.gamma, norm.beta, norm.epsilon, self.dropout,
                                   self._output_dropout.call_seed(training))

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout,
                      dropatt=self.dropatt, initializer_range=self.initializer_range)
        return config


def _not_merged(k, v):
    """The content's keys and values for the query stream: the same values, with 16-bit activations under XLA
    behind an optimisation barrier (identity gradient). XLA merges two matmuls that share an operand into one over
    their other operands concatenated: the two streams' scores against the same keys, and their probabilities
    against the same values, become one [N, B, L + P, K] product, whose backward copies both streams' gradients
    and probabilities into concatenated tensors: bytes for no FLOP saved (bench/reports/gpu.md; in float32 the
    barrier saved no time at base-512 and cost memory, so XLA is left its choice there)."""
    if k.dtype == tf.float32 or not ops.in_xla_context():
        return k, v
    return ops.optimization_barrier(k, v)


# Queries per chunk of the content stream's position term (``shifted_position_scores``): a chunk of c queries
# reads K + c encoding rows of the K + Lq, so smaller chunks compute fewer unread scores, but each reads its own
# window of the encoding (why 64: bench/reports/gpu.md, the seventh change).
POSITION_CHUNK = 64


def _chunks_apply(ac, k_r) -> bool:
    """Whether the content stream's position term (ac [N, B, Lq, K], k_r [N, X, R, H]) is scored in chunks of
    ``POSITION_CHUNK`` queries rather than all rows at once: only where the C++ attention kernel does not run,
    under XLA or in a process with a GPU or TPU (that kernel reads the unshifted scores in place: there is no
    skew's copy to save), with the shapes known when traced, at least two chunks of queries, and XLNet's ``bi``
    table (R = K + Lq). Not for a TPU, where the skew is a copy that lays its rows out again either way, and the
    chunks' windows and skews cost more than the unread scores they save (bench/reports/gpu.md)."""
    lq, klen = ac.shape[2], ac.shape[3]
    if (ops.cpu_process() and not ops.in_xla_context()) or ops.for_tpu():
        return False
    if None in (ac.shape[0], lq, klen, *k_r.shape[1:]) or k_r.shape[2] != klen + lq:
        return False
    return lq > POSITION_CHUNK and lq % POSITION_CHUNK == 0


def shifted_position_scores(q, k_r, chunk: int):
    """``rel_shift(position scores, K)`` computed ``chunk`` queries at a time: q [N, B, Lq, H] (the content
    stream's rows, consecutive), k_r [N, X, K + Lq, H] -> [N, B, Lq, K] (``aligned`` position scores).

    Query ``i`` reads encoding rows ``Lq - i .. Lq - i + K - 1``, so all of its chunk's queries read a window of
    K + chunk consecutive rows: each chunk multiplies its queries by its window and is skewed within it. The one
    matmul over every row computes Lq x (K + Lq) scores, of which the skew reads Lq x K (base-512: 1408 columns
    for 896 read); here Lq x (K + chunk) (960), and the skew's copy, which XLA writes anyway, reads that much less.
    """
    n, _, lq, h = q.shape
    x, rlen = k_r.shape[1], k_r.shape[2]
    klen, chunks, width = rlen - lq, lq // chunk, rlen - lq + chunk
    # Chunk m (queries m * chunk + i, i < chunk) reads rows from Lq - (m + 1) * chunk: the m-th window from the end
    windows = tf.reverse(tf.signal.frame(k_r, width, chunk, axis=2), axis=[2])  # [N, X, C, W, H]
    # [N, B, Lq, H] viewed as [N, X, B/X, C, chunk, H] (the batch halves of bi_data) -> [N, X, C, B/X * chunk, H]
    q = tf.transpose(tf.reshape(q, [n, x, -1, chunks, chunk, h]), [0, 1, 3, 2, 4, 5])
    scores = tf.matmul(tf.reshape(q, [n, x, chunks, -1, h]), windows, transpose_b=True)
    scores = rel_shift(tf.reshape(scores, [n, x, chunks, -1, chunk, width]), klen)  # [N, X, C, B/X, chunk, K]
    return tf.reshape(tf.transpose(scores, [0, 1, 3, 2, 4, 5]), [n, -1, lq, klen])


def _position_scores(q, k_r):
    """(q + r_r_bias) . r for every encoding row: q [N, B, Lq, H], k_r [N, X, R, H] -> [N, B, Lq, R].

    With X = 2 (bi_data) the first half of the batch reads the forward table and the second half the backward
    one: the batch is viewed as [X, B/X] and each half multiplies its own table.
    """
    shape = tf.shape(q)
    n_dir = tf.shape(k_r)[1]
    scores = tf.matmul(tf.reshape(q, [shape[0], n_dir, -1, shape[3]]), k_r, transpose_b=True)
    return tf.reshape(scores, tf.concat([shape[:3], [-1]], 0))
