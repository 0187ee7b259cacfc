"""Model FLOPs of an XLNet training step, for model-FLOPs utilisation (MFU).

Matmul FLOPs only (2 per multiply-add), counting the query stream on its P target rows (what this
implementation computes) and the relative-position projection once per step, as the FLOP model of
``shared/reference/pmlm-mpnet-performance.md`` section 3.2 (its "gather" column); training = 3 x forward.
"""

from __future__ import annotations


def forward_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                               batch_size: int = 1, bi_data: bool = False) -> float:
    """Forward matmul FLOPs per sequence; the position projection (once per step) is spread over the batch."""
    d, f, s, m, p = d_model, d_inner, seq_len, mem_len, num_predict
    k = s + m  # keys
    r = 2 * s + m  # relative-position rows ('bi')
    directions = 2 if bi_data else 1
    content = 4 * s * d * d + 4 * k * d * d + 4 * s * d * f + 2 * s * k * d + 2 * s * r * d + 2 * s * k * d
    position = 2 * r * d * d * directions / batch_size
    query = 0
    if p:
        query = 4 * p * d * d + 4 * p * d * f + 2 * p * k * d + 2 * p * r * d + 2 * p * k * d
    head = 2 * (p or s) * d * n_token
    return n_layer * (content + position + query) + head


def train_flops_per_sequence(*args, **kwargs) -> float:
    return 3.0 * forward_flops_per_sequence(*args, **kwargs)
