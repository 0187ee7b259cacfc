"""Model FLOPs of a pretraining step, for model-FLOPs utilisation (MFU).

Matmul FLOPs only (2 per multiply-add), counting what this implementation computes: the query stream on its own
rows (not on every position, as the original's ``target_mapping`` einsums do), the relative-position projection
once per step, and the position scores against every encoding row. Per sequence and layer, with S content-stream
tokens, M memory, K = S + M keys, R = 2S + M relative-position rows (XLNet's ``bi`` attention), P query-stream rows,
d = ``d_model``, f = ``d_inner``, a = ``d_attn`` = n_head x d_head (the heads' width, d in the released models):

* content stream: Q and O projections 4Sda, K and V projections 4Kda (memory is projected again every step),
  feed-forward 4Sdf, attention scores, position scores and values 2SKa + 2SRa + 2SKa;
* position projection: 2Rda per direction (two with ``bi_data``), once per step, so spread over the batch;
* query stream: Q and O 4Pda (and K, V 4Pda where its rows are keys too), feed-forward 4Pdf, attention
  2PK'a + 2PRa + 2PK'a, with K' = K (+ P where its rows are keys);

and the LM head 2 x rows x d x V once. Training = 3 x forward (no recomputation). S, P, the LM head's rows and
whether the query rows are keys are the objective's ``stream_layout`` (``xlnet_tf.objectives``); the figures for
each objective at the XLNet-Base shape are in docs/objectives.md ("Cost").
"""

from __future__ import annotations

from xlnet_tf.objectives import get_objective


def forward_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                               batch_size: int = 1, bi_data: bool = False, objective: str = "plm",
                               d_attn: int | None = None) -> float:
    """Forward matmul FLOPs per sequence (``seq_len`` tokens of text); the position projection (once per step)
    is spread over the batch. ``d_attn``: n_head x d_head where that is not ``d_model``."""
    d, f, m = d_model, d_inner, mem_len
    a = d_attn or d_model
    s, p, head_rows, query_keys = get_objective(objective).stream_layout(seq_len, num_predict)
    k = s + m  # keys
    r = 2 * s + m  # relative-position rows ('bi')
    directions = 2 if bi_data else 1
    content = 4 * s * d * a + 4 * k * d * a + 4 * s * d * f + 2 * s * k * a + 2 * s * r * a + 2 * s * k * a
    position = 2 * r * d * a * directions / batch_size
    query = 0
    if p:
        kq = k + p if query_keys else k  # the query stream's keys
        query = (4 * p * d * a + (4 * p * d * a if query_keys else 0) + 4 * p * d * f
                 + 2 * p * kq * a + 2 * p * r * a + 2 * p * kq * a)
    head = 2 * head_rows * d * n_token
    return n_layer * (content + position + query) + head


def train_flops_per_sequence(*args, **kwargs) -> float:
    return 3.0 * forward_flops_per_sequence(*args, **kwargs)
