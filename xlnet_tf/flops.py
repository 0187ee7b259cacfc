"""Model FLOPs of a pretraining step, for model-FLOPs utilisation (MFU).

Matmul FLOPs only (2 per multiply-add), counting what this implementation computes: the query stream on its own
rows (not on every position, as the original's ``target_mapping`` einsums do), the relative-position projection
once per step, and the position scores against every encoding row. Per sequence and layer, with S content-stream
tokens, M memory, K = S + M keys, R = 2S + M relative-position rows (XLNet's ``bi`` attention), P query-stream rows,
d = ``d_model``, f = ``d_inner``:

* content stream: Q and O projections 4Sd^2, K and V projections 4Kd^2 (memory is projected again every step),
  feed-forward 4Sdf, attention scores, position scores and values 2SKd + 2SRd + 2SKd;
* position projection: 2Rd^2 per direction (two with ``bi_data``), once per step, so spread over the batch;
* query stream: Q and O 4Pd^2 (and K, V 4Pd^2 where its rows are keys too), feed-forward 4Pdf, attention
  2PK'd + 2PRd + 2PK'd, with K' = K (+ P where its rows are keys);

and the LM head 2 x rows x d x V once. Training = 3 x forward (no recomputation). S, P, the LM head's rows and
whether the query rows are keys are the objective's ``stream_layout`` (``xlnet_tf.objectives``); the figures for
each objective at the XLNet-Base shape are in docs/objectives.md ("Cost").
"""

from __future__ import annotations

from xlnet_tf.objectives import get_objective


def forward_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                               batch_size: int = 1, bi_data: bool = False, objective: str = "plm") -> float:
    """Forward matmul FLOPs per sequence (``seq_len`` tokens of text); the position projection (once per step)
    is spread over the batch."""
    d, f, m = d_model, d_inner, mem_len
    s, p, head_rows, query_keys = get_objective(objective).stream_layout(seq_len, num_predict)
    k = s + m  # keys
    r = 2 * s + m  # relative-position rows ('bi')
    directions = 2 if bi_data else 1
    content = 4 * s * d * d + 4 * k * d * d + 4 * s * d * f + 2 * s * k * d + 2 * s * r * d + 2 * s * k * d
    position = 2 * r * d * d * directions / batch_size
    query = 0
    if p:
        kq = k + p if query_keys else k  # the query stream's keys
        query = (4 * p * d * d + (4 * p * d * d if query_keys else 0) + 4 * p * d * f
                 + 2 * p * kq * d + 2 * p * r * d + 2 * p * kq * d)
    head = 2 * head_rows * d * n_token
    return n_layer * (content + position + query) + head


def train_flops_per_sequence(*args, **kwargs) -> float:
    return 3.0 * forward_flops_per_sequence(*args, **kwargs)
