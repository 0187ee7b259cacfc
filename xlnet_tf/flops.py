"""Model FLOPs of a training step or a forward, for model-FLOPs utilisation (MFU).

Matmul FLOPs only (2 per multiply-add), counting what this implementation computes under XLA and on GPUs: the
query stream on its own rows (not on every position, as the original's ``target_mapping`` einsums do), the
relative-position projection once per step, and the position scores against the encoding rows each chunk of 64
content-stream queries reads. Per sequence and layer, with S content-stream tokens, M memory, K = S + M keys,
R = 2S + M relative-position rows (XLNet's ``bi`` attention), P query-stream rows, d = ``d_model``, f = ``d_inner``,
a = ``d_attn`` = n_head x d_head (the heads' width, d in the released models):

* content stream: Q and O projections 4Sda, K and V projections 4Kda (memory is projected again every step),
  feed-forward 4Sdf, attention scores, position scores and values 2SKa + 2SR'a + 2SKa, where R' = K + 64 when
  S is a multiple of 64 above 64 at consecutive positions (``shifted_position_scores``), else R (the C++ CPU
  kernels compute R, so a CPU step without XLA runs a little more than counted there);
* position projection: 2Rda per direction (two with ``bi_data``), once per step, so spread over the batch;
* query stream: Q and O 4Pda (and K, V 4Pda where its rows are keys too), feed-forward 4Pdf, attention
  2PK'a + 2PRa + 2PK'a, with K' = K (+ P where its rows are keys);

and the LM head 2 x rows x d x V once. Where the head reads only the query stream (XLNet's and MPNet's objectives),
the last layer's content stream feeds nothing but its own keys and values: XLA leaves the rest out (and so does
Grappler's pruning on TensorFlow's default path), and so does this count.

Objectives whose head reads ``lm_positions`` pick its rows from ``[content ; query]`` with a one-hot matmul,
2 x rows x (S + P) x d.

Training: every matmul again for each operand's gradient (2 x forward, no recomputation), except where an operand is
a constant (the position encodings, the memory's rows of the K and V projections, the one-hot pick): 3 x forward -
those. tests/test_flops.py checks these counts against the matmuls XLA runs in real steps. S, P, the LM head's
rows, whether the query rows are keys and whether the head reads the content stream are the objective's
``stream_layout`` (``xlnet_tf.objectives``); the figures for each objective at the XLNet-Base shape are in
docs/objectives.md ("Cost").
"""

from __future__ import annotations

from xlnet_tf.objectives import get_objective

POSITION_CHUNK = 64  # layers/attention.py's (tests/test_flops.py holds them equal), without importing TensorFlow


def forward_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                               batch_size: int = 1, bi_data: bool = False, objective: str = "plm",
                               d_attn: int | None = None) -> float:
    """Forward matmul FLOPs per sequence (``seq_len`` tokens of text); the position projection (once per step)
    is spread over the ``batch_size`` sequences of a replica's step. ``d_attn``: n_head x d_head where that is not
    ``d_model``. ``n_token`` 0: no LM head (a fine-tuning or inference forward)."""
    return _flops(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token, batch_size, bi_data,
                  objective, d_attn)[0]


def train_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                             batch_size: int = 1, bi_data: bool = False, objective: str = "plm",
                             d_attn: int | None = None) -> float:
    """Training-step matmul FLOPs per sequence: the forward and its backward (see the module docstring)."""
    forward, one_gradient = _flops(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token, batch_size,
                                   bi_data, objective, d_attn)
    return 3.0 * forward - one_gradient


def finetune_flops_per_sequence(config, seq_len: int, batch_size: int, output_rows: int | None = None) -> float:
    """A fine-tuning step's FLOPs per sequence for an ``XLNetConfig``: the backbone's content stream (no memory, no
    query stream, no LM head) at ``batch_size`` sequences per replica; ``output_rows``: the last layer runs at
    that many rows only (``XLNetModel``'s ``output_rows``: a classifier's one ``<cls>`` row), else at every row.
    The task heads are left out: a classifier's reads one row (negligible); SQuAD's end-logit layer runs on every
    row, about 1% of its step at the Base shape."""
    forward, one_gradient = _flops(config.n_layer, config.d_model, config.d_inner, seq_len, 0, 0, 0, batch_size,
                                   False, "plm", config.n_head * config.d_head, output_rows)
    return 3.0 * forward - one_gradient


def _rows(rows, keys, position_rows, d, f, a) -> float:
    """A layer's forward at ``rows`` query rows past the keys' and values' projections: Q and O, the
    feed-forward, attention scores, position scores and values."""
    return 4 * rows * d * a + 4 * rows * d * f + 2 * rows * (keys + position_rows + keys) * a


def _flops(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token, batch_size, bi_data, objective,
           d_attn, output_rows=None) -> tuple[float, float]:
    """(forward FLOPs per sequence, of which matmuls with a constant operand: one gradient, not two)."""
    d, f, m = d_model, d_inner, mem_len
    a = d_attn or d_model
    spec = get_objective(objective)
    layout = spec.stream_layout(seq_len, num_predict)
    s, p = layout.content, layout.query
    k = s + m  # keys
    r = 2 * s + m  # relative-position rows ('bi')
    # The content stream's position scores, chunk by chunk at consecutive positions (layers/attention.py)
    chunked = s > POSITION_CHUNK and s % POSITION_CHUNK == 0 and "position_ids" not in spec.model_inputs
    r_content = k + POSITION_CHUNK if chunked else r
    directions = 2 if bi_data else 1
    keys_values = 4 * k * d * a
    content = _rows(s, k, r_content, d, f, a)
    position = 2 * r * d * a * directions / batch_size
    query = 0
    if p:
        kq = k + p if layout.query_keys else k  # the query stream's keys
        query = (4 * p * d * a if layout.query_keys else 0) + _rows(p, kq, r, d, f, a)
    # The last layer's content stream past its keys and values: at every row, at output_rows only, or nowhere.
    last_rows = 0 if p and not layout.head_on_content else s if output_rows is None else output_rows
    head = 2 * layout.head_rows * d * n_token
    # With lm_positions, the head's rows are picked from [content ; query] by a one-hot matmul.
    pick = 2 * layout.head_rows * (s + p) * d if n_token and "lm_positions" in spec.model_inputs else 0
    last = _rows(last_rows, k, r_content if output_rows is None else r, d, f, a)  # output_rows: gathered rows
    forward = n_layer * (keys_values + position + query) + (n_layer - 1) * content + last + head + pick
    return forward, n_layer * (position + 4 * m * d * a) + pick
