"""Model FLOPs of a pretraining step, for model-FLOPs utilisation (MFU).

Matmul FLOPs only (2 per multiply-add), counting what this implementation computes, as the FLOP model of
``shared/reference/pmlm-mpnet-performance.md`` section 3.2 (its "gather" column): the query stream on its P
target rows, the relative-position projection once per step, and the position scores against every encoding row
(R = 2 x tokens + memory); training = 3 x forward. Each objective's input (``xlnet_tf.objectives.batches``):

* ``plm`` (XLNet): content stream of L tokens, query stream of ``num_predict`` rows, the LM head on those rows.
* ``pmlm`` (UniLMv2): content stream of the L corrupted tokens; 2K appended rows (K = ``max_masked(L)``, the
  padded number of masked tokens: the originals and the pseudo masks) that attend to the L tokens and to each
  other (their keys and values projected too); the LM head on 2K rows (the [M] and the [P] predictions). The
  masked-out block (the L tokens never see the appended rows) is not computed, as s2s-ft's split attention.
* ``mpnet``: content stream of L + K tokens (the text and K placeholders), query stream of K rows, the LM head on
  K rows.
"""

from __future__ import annotations


def stream_lengths(objective: str, seq_len: int, num_predict: int) -> tuple[int, int, int, bool]:
    """(content-stream tokens, query-stream rows, LM-head rows, whether the query rows are keys too) of one
    sequence of ``objective``."""
    if objective == "plm":
        return seq_len, num_predict, num_predict or seq_len, False
    from xlnet_tf.data.factorization import max_masked

    k = max_masked(seq_len)
    if objective == "pmlm":
        return seq_len, 2 * k, 2 * k, True
    if objective == "mpnet":
        return seq_len + k, k, k, False
    raise ValueError(f"unknown objective {objective!r}")


def forward_flops_per_sequence(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, n_token,
                               batch_size: int = 1, bi_data: bool = False, objective: str = "plm") -> float:
    """Forward matmul FLOPs per sequence (``seq_len`` tokens of text); the position projection (once per step)
    is spread over the batch."""
    d, f, m = d_model, d_inner, mem_len
    s, p, head_rows, query_keys = stream_lengths(objective, seq_len, num_predict)
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
