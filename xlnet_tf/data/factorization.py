"""Factorisation orders as attention masks: the one mask builder of every pretraining objective, and the
prediction-set sampling shared by PMLM and MPNet. TF ops on whole batches (graph-safe, for tf.data).

Every token of an objective's input has a *step* (its place in the factorisation order; 0 = context, visible to
all) and a *role* as a query and as a key:

* ``CONTENT``: text (context, or the original of a predicted token). As a query it sees the content of the steps
  up to its own; as a key it is seen by content queries of the same or a later step and by predictors of a later
  step.
* ``PREDICTOR``: a token whose output predicts the token at its position (XLNet's and MPNet's query stream,
  UniLMv2's pseudo mask ``[P]``). As a query it sees the content of the steps *before* its own (never its own
  token); as a key (``[P]`` only) it is seen by the predictors of its own step (the other ``[P]`` of its span).
* ``PLACEHOLDER``: MPNet's ``[M]`` copies (position compensation). As a key it is seen exactly where the content
  of its step is not (``[M]`` of the steps not yet seen); its query rows are context rows (step 0).

``blocked_keys`` turns these into ``perm_mask`` (1 = may not attend). With this one rule:

=================  ==========================================  ====================================
objective          query rows (role, step)                     keys (role, step)
=================  ==========================================  ====================================
XLNet PLM          targets PREDICTOR, others CONTENT; rank     CONTENT; rank (context lowest)
UniLMv2 PMLM       corrupted text CONTENT 0, originals          the same as the rows
                   CONTENT s, ``[P]`` PREDICTOR s
MPNet              text CONTENT 0 / s, ``[M]`` CONTENT 0;        text CONTENT 0 / s, ``[M]``
                   query stream PREDICTOR s                     PLACEHOLDER s
=================  ==========================================  ====================================

``blockwise_steps`` is UniLMv2's blockwise masking (Algorithm 1), ``mask_blockwise`` the prediction set PMLM and
MPNet draw with it, ``corrupt`` BERT's 80/10/10 replacement.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf

from xlnet_tf.tokenization import CLS_ID, MASK_ID, PAD_ID, SEP_ID

CONTENT, PREDICTOR, PLACEHOLDER = 0, 1, 2
NUM_SPECIAL_IDS = 9  # <unk> ... <eop>: never drawn as a random replacement token


def blocked_keys(query_step, query_role, key_step, key_role=None):
    """bool [B, Q, K], True where query i may NOT attend key j (``perm_mask``).

    query_step, query_role: int [B, Q]; key_step, key_role: int [B, K] (``key_role`` None: every key is CONTENT,
    one comparison). Steps are any integers ordered like the factorisation order.
    """
    query_step = tf.cast(query_step, tf.int32)[:, :, None]
    key_step = tf.cast(key_step, tf.int32)[:, None, :]
    is_predictor = tf.equal(query_role, PREDICTOR)[:, :, None]
    # Content queries see content steps <= their own, predictors the steps < their own: one comparison against
    # the query's horizon (its step, plus one for content).
    horizon = query_step + tf.cast(tf.logical_not(is_predictor), tf.int32)
    unseen = key_step >= horizon
    if key_role is None:
        return unseen
    key_role = key_role[:, None, :]
    # MPNet's placeholders: visible for the steps whose content is not (yet) visible.
    blocked = tf.where(tf.equal(key_role, PLACEHOLDER), tf.logical_not(unseen), unseen)
    # UniLMv2's pseudo masks: visible to the predictors of the same step only.
    same_span = is_predictor & tf.equal(key_step, query_step)
    return tf.where(tf.equal(key_role, PREDICTOR), tf.logical_not(same_span), blocked)


def max_masked(seq_len: int, ratio: float = 0.15, max_block: int = 6) -> int:
    """Static bound on the tokens ``blockwise_steps`` masks in ``seq_len`` tokens: the goal plus the last span's
    overshoot (the number of predicted slots PMLM and MPNet inputs are padded to)."""
    return math.ceil(ratio * seq_len) + max_block - 1


def blockwise_steps(eligible, seed, ratio: float = 0.15, p_block: float = 0.4, min_block: int = 2,
                    max_block: int = 6, max_draws: int | None = None):
    """UniLMv2's blockwise masking (Algorithm 1) for a batch: int32 [B, L], 0 = not masked, s >= 1 = masked at
    factorisation step s (the s-th span accepted).

    ``eligible`` bool [B, L]: tokens a span may cover (not <sep>/<cls>/padding). Per example, until the spans
    cover ``ceil(ratio * eligible tokens)``: draw a start uniformly over the L positions and a length (with
    probability ``p_block`` uniform in ``[min_block, max_block]``, else 1); keep the span if it lies inside the
    sequence and covers only eligible, not yet masked tokens. The order of acceptance is the factorisation order.
    ``seed``: stateless seed [2]. At most ``max_draws`` (default 4 L) candidates per example are tried, all drawn
    up front so that the result depends on the seed only.
    """
    eligible = tf.cast(eligible, tf.bool)
    batch, length = tf.shape(eligible)[0], eligible.shape[1] or tf.shape(eligible)[1]
    draws = max_draws or 4 * int(length)
    goal = tf.cast(tf.math.ceil(ratio * tf.reduce_sum(tf.cast(eligible, tf.float32), axis=1)), tf.int32)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=3)
    starts = tf.random.stateless_uniform([batch, draws], seeds[0], 0, length, tf.int32)
    blocks = tf.random.stateless_uniform([batch, draws], seeds[1], min_block, max_block + 1, tf.int32)
    is_block = tf.random.stateless_uniform([batch, draws], seeds[2]) < p_block
    ends = starts + tf.where(is_block, blocks, 1)  # exclusive
    positions = tf.range(length)[None, :]

    def draw(i, step, covered, spans):
        start, end = starts[:, i:i + 1], ends[:, i:i + 1]
        span = (positions >= start) & (positions < end)
        free = eligible & tf.logical_not(step > 0)
        fits = (end[:, 0] <= length) & tf.logical_not(tf.reduce_any(span & tf.logical_not(free), axis=1))
        take = fits & (covered < goal)
        spans += tf.cast(take, tf.int32)
        step = tf.where(span & take[:, None], spans[:, None], step)
        covered += tf.where(take, end[:, 0] - start[:, 0], 0)
        return i + 1, step, covered, spans

    def not_done(i, step, covered, spans):
        return (i < draws) & tf.reduce_any(covered < goal)

    zeros = tf.zeros([batch], tf.int32)
    _, step, _, _ = tf.while_loop(not_done, draw, (tf.constant(0), tf.zeros_like(eligible, tf.int32), zeros,
                                                   zeros))
    return step


def eligible_for_masking(input_ids, padding_mask=None):
    """bool [B, L]: tokens that may be predicted (not <sep>, <cls>, <pad> or padding)."""
    ids = tf.cast(input_ids, tf.int32)
    ok = tf.logical_not(tf.equal(ids, SEP_ID) | tf.equal(ids, CLS_ID) | tf.equal(ids, PAD_ID))
    if padding_mask is not None:
        ok &= tf.cast(padding_mask, tf.bool)
    return ok


def masked_in_order(step, max_predict: int):
    """The masked positions in factorisation order (by step, then position).

    Returns ``positions`` int32 [B, P] (``P = max_predict``; slots past an example's count are padding),
    ``valid`` bool [B, P], and ``order`` int32 [B, L]: every masked position's 1-based place in that order
    (0 where not masked), i.e. the per-token steps of a token-level factorisation order.
    """
    length = tf.shape(step)[1]
    # Unmasked positions sort last; within a step (a span), positions in reading order.
    key = tf.where(step > 0, step * length + tf.range(length)[None, :], tf.int32.max)
    ordered = tf.argsort(key, axis=1, stable=True)
    count = tf.reduce_sum(tf.cast(step > 0, tf.int32), axis=1)
    valid = tf.range(max_predict)[None, :] < count[:, None]
    order = tf.where(step > 0, tf.argsort(ordered, axis=1) + 1, 0)  # the inverse permutation
    return ordered[:, :max_predict], valid, order


def corrupt(tokens, seed, vocab_size: int, mask_rate: float = 0.8, random_rate: float = 0.1):
    """BERT's corruption of predicted tokens [B, P]: ``<mask>`` with probability ``mask_rate``, a random
    non-special token with ``random_rate``, else unchanged."""
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    tokens = tf.cast(tokens, tf.int32)
    u = tf.random.stateless_uniform(tf.shape(tokens), seeds[0])
    random_tokens = tf.random.stateless_uniform(tf.shape(tokens), seeds[1], NUM_SPECIAL_IDS, vocab_size, tf.int32)
    return tf.where(u < mask_rate, MASK_ID, tf.where(u < mask_rate + random_rate, random_tokens, tokens))


def gather_positions(values, positions):
    """``values`` [B, L, ...] at ``positions`` int [B, K]: [B, K, ...]."""
    return tf.gather(values, positions, batch_dims=1)


class Masked(NamedTuple):
    """The blockwise prediction set of a batch of records [B, L] (K = ``max_masked(L)`` slots)."""

    inputs: tf.Tensor        # int32 [B, L]
    step: tf.Tensor          # int32 [B, L]: the span step of each masked position, 0 elsewhere
    positions: tf.Tensor     # int32 [B, K]: the masked positions in factorisation order (padded)
    valid: tf.Tensor         # bool [B, K]
    order: tf.Tensor         # int32 [B, L]: each masked position's 1-based place in that order, 0 elsewhere
    originals: tf.Tensor     # int32 [B, K]: the tokens at ``positions``
    corrupt_seed: tf.Tensor  # the seed of the 80/10/10 corruption


def mask_blockwise(inputs, seed) -> Masked:
    """UniLMv2's blockwise prediction set of records ``inputs`` int [B, L] (L static), from the stateless ``seed``
    [2] (which also gives the seed of the corruption)."""
    inputs = tf.cast(inputs, tf.int32)
    span_seed, corrupt_seed = tf.unstack(tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
    step = blockwise_steps(eligible_for_masking(inputs), span_seed)
    positions, valid, order = masked_in_order(step, max_masked(inputs.shape[1]))
    return Masked(inputs, step, positions, valid, order, gather_positions(inputs, positions), corrupt_seed)


def with_blocked_padding(blocked, valid_keys, dtype):
    """perm_mask [B, Q, K] in ``dtype``: ``blocked`` plus the padded key slots (invisible to everyone)."""
    return tf.cast(blocked | tf.logical_not(valid_keys)[:, None, :], dtype)
