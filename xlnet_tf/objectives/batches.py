"""The pretraining objectives on one backbone: XLNet's permutation LM (``plm``), UniLMv2's pseudo-masked LM
(``pmlm``) and MPNet's masked and permuted LM (``mpnet``), as the model inputs the reader builds for each.

Every objective reads the same records (``create_pretraining_data``: text, segments, and XLNet's targets in
``is_masked``): the objective is chosen when the records are read, and its masks and factorisation orders are
drawn online from the batch seed, as XLNet's permutations are. So one data directory serves every objective
(a comparison trains them on identical text), a resumed run sees the same masks again, and every pass over the
data draws new ones. ``plm`` uses the writer's targets; ``pmlm`` and ``mpnet`` ignore them and mask 15% of the
tokens blockwise (UniLMv2's Algorithm 1, ``factorization.blockwise_steps``), padded to ``max_masked(seq_len)``
predicted slots so that shapes are static.

Layouts (L = seq_len, K = ``max_masked(L)``; one stream unless stated):

* ``pmlm``: ``[corrupted sequence (L) | originals of the masked tokens (K) | pseudo masks [P] (K)]``. The
  corrupted sequence replaces the masked tokens 80/10/10 by ``<mask>`` / a random token / themselves; appended
  tokens carry the position and segment of the token they copy (``target_mapping``); ``[P]`` starts from XLNet's
  ``mask_emb`` (``pseudo_mask``). The corrupted sequence sees only itself, so it is the content stream (XLNet's
  path, consecutive positions) and the appended tokens are the query stream, whose rows are keys for each other
  too (``query_perm_mask`` over L + 2K keys): s2s-ft's split attention, without the masked-out block. Predictions
  (``lm_positions`` into ``[content ; query]``): the corrupted sequence at the masked positions (the
  autoencoding term ``ae``) and the ``[P]`` rows (the partially autoregressive term ``par``), same targets.
* ``mpnet``: two streams as XLNet's. Content ``[the sequence (L) | [M] placeholders (K)]`` (placeholders at the
  positions of the predicted tokens, corrupted 80/10/10 as MPNet's); the query stream predicts the K tokens in
  order (one step per token: spans are consecutive in the order), with its own mask (``query_perm_mask``).

The masks all come from ``factorization.blocked_keys``.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from xlnet_tf.data.factorization import (CONTENT, PLACEHOLDER, PREDICTOR, blocked_keys, blockwise_steps, corrupt,
                                         eligible_for_masking, masked_in_order, max_masked)
from xlnet_tf.data.permutation import make_pretraining_batch
from xlnet_tf.objectives import get_objective
from xlnet_tf.tokenization import MASK_ID


def _gather(values, positions):
    return tf.gather(values, positions, batch_dims=1)


class _Masked(NamedTuple):
    """The blockwise prediction set of a batch of records [B, L] (K = ``max_masked(L)`` slots)."""

    inputs: tf.Tensor        # int32 [B, L]
    step: tf.Tensor          # int32 [B, L]: the span step of each masked position, 0 elsewhere
    positions: tf.Tensor     # int32 [B, K]: the masked positions in factorisation order (padded)
    valid: tf.Tensor         # bool [B, K]
    order: tf.Tensor         # int32 [B, L]: each masked position's 1-based place in that order, 0 elsewhere
    originals: tf.Tensor     # int32 [B, K]: the tokens at ``positions``
    corrupt_seed: tf.Tensor  # the seed of the 80/10/10 corruption


def _mask_blockwise(inputs, seed) -> _Masked:
    inputs = tf.cast(inputs, tf.int32)
    span_seed, corrupt_seed = tf.unstack(tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
    step = blockwise_steps(eligible_for_masking(inputs), span_seed)
    positions, valid, order = masked_in_order(step, max_masked(inputs.shape[1]))
    return _Masked(inputs, step, positions, valid, order, _gather(inputs, positions), corrupt_seed)


def _with_blocked_padding(blocked, valid_keys, dtype):
    """perm_mask [B, Q, K] in ``dtype``: ``blocked`` plus the padded key slots (invisible to everyone)."""
    return tf.cast(blocked | tf.logical_not(valid_keys)[:, None, :], dtype)


def make_pmlm_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype=tf.float32) -> dict[str, tf.Tensor]:
    """UniLMv2's pseudo-masked LM inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns: ``input_ids``, ``segment_ids`` int32 [B, L] (the corrupted sequence); the 2K appended rows
    (originals, then pseudo masks): ``target_mapping`` float32 [B, 2K, L] (one-hot at the position copied, zero
    rows for padding), ``query_ids`` int32 [B, 2K], ``pseudo_mask`` int32 [B, 2K] (1 = [P]),
    ``query_perm_mask`` [B, 2K, L + 2K] (1 = may not attend; keys ``[sequence ; appended rows]``);
    ``lm_positions`` int32 [B, 2K] (the ``ae`` rows then the ``par`` rows); ``target`` int32 [B, 2K];
    ``target_mask`` float32 [B, 2K].
    """
    m = _mask_blockwise(inputs, seed)
    masked, valid, originals = m.positions, m.valid, m.originals
    batch, length, k = tf.shape(m.inputs)[0], m.inputs.shape[1], masked.shape[1]
    slot_step = _gather(m.step, masked)
    ones_k = tf.ones([batch, k], tf.int32)

    def appended(originals_part, pseudo_part):  # [originals (K) | pseudo masks (K)]
        return tf.concat([originals_part, pseudo_part], axis=1)

    row_steps = appended(slot_step, slot_step)
    row_roles = appended(CONTENT * ones_k, PREDICTOR * ones_k)
    # Keys: the sequence (content, step 0: everyone sees it), then the appended rows.
    key_steps = tf.concat([tf.zeros([batch, length], tf.int32), row_steps], axis=1)
    key_roles = tf.concat([tf.fill([batch, length], CONTENT), row_roles], axis=1)
    valid_keys = tf.concat([tf.ones([batch, length], tf.bool), valid, valid], axis=1)
    valid_f = tf.cast(valid, tf.float32)
    mapping = tf.one_hot(masked, length) * valid_f[:, :, None]
    target = tf.where(valid, originals, 0)
    return {
        "input_ids": tf.where(m.step > 0, corrupt(m.inputs, m.corrupt_seed, vocab_size), m.inputs),
        "segment_ids": tf.cast(seg_id, tf.int32),
        "target_mapping": appended(mapping, mapping),
        "query_ids": appended(originals, MASK_ID * ones_k),
        "pseudo_mask": appended(0 * ones_k, ones_k),
        "query_perm_mask": _with_blocked_padding(blocked_keys(row_steps, row_roles, key_steps, key_roles),
                                                 valid_keys, perm_mask_dtype),
        "lm_positions": appended(masked, length + k + tf.range(k)[None, :] * ones_k),
        "target": appended(target, target),
        "target_mask": appended(valid_f, valid_f),
    }


def make_mpnet_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype=tf.float32) -> dict[str, tf.Tensor]:
    """MPNet's inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns (T = L + K): ``input_ids``, ``segment_ids``, ``position_ids`` int32 [B, T]; ``perm_mask`` [B, T, T];
    ``target_mapping`` float32 [B, K, T] (one-hot at the predicted token's slot, zero rows for padding);
    ``query_perm_mask`` [B, K, T]; ``target`` int32 [B, K]; ``target_mask`` float32 [B, K].
    """
    m = _mask_blockwise(inputs, seed)
    masked, valid, order, originals = m.positions, m.valid, m.order, m.originals
    seg_id = tf.cast(seg_id, tf.int32)
    batch, length, k = tf.shape(m.inputs)[0], m.inputs.shape[1], masked.shape[1]
    zeros_l, ones_k = tf.zeros([batch, length], tf.int32), tf.ones([batch, k], tf.int32)
    slot_step = (tf.range(k)[None, :] + 1) * ones_k  # one step per predicted token, in order
    key_steps = tf.concat([order, slot_step], axis=1)
    key_roles = tf.concat([zeros_l + CONTENT, PLACEHOLDER * ones_k], axis=1)
    valid_keys = tf.concat([tf.ones([batch, length], tf.bool), valid], axis=1)
    # The placeholders' own rows are context rows: they see the context and every placeholder.
    content_steps = tf.concat([order, 0 * ones_k], axis=1)
    content_blocked = blocked_keys(content_steps, tf.fill(tf.shape(content_steps), CONTENT), key_steps, key_roles)
    query_blocked = blocked_keys(slot_step, PREDICTOR * ones_k, key_steps, key_roles)
    valid_f = tf.cast(valid, tf.float32)
    return {
        "input_ids": tf.concat([m.inputs, corrupt(originals, m.corrupt_seed, vocab_size)], axis=1),
        "segment_ids": tf.concat([seg_id, _gather(seg_id, masked)], axis=1),
        "position_ids": tf.concat([zeros_l + tf.range(length)[None, :], masked], axis=1),
        "perm_mask": _with_blocked_padding(content_blocked, valid_keys, perm_mask_dtype),
        "target_mapping": tf.one_hot(masked, length + k) * valid_f[:, :, None],
        "query_perm_mask": _with_blocked_padding(query_blocked, valid_keys, perm_mask_dtype),
        "target": tf.where(valid, originals, 0),
        "target_mask": valid_f,
    }


def make_objective_batch(objective: str, inputs, is_masked, seg_id, seq_len: int, reuse_len: int,
                         perm_size: int, num_predict: int, seed, vocab_size: int,
                         perm_mask_dtype=tf.float32) -> dict[str, tf.Tensor]:
    """The model inputs of ``objective`` for a batch of records (``inputs``, ``is_masked``, ``seg_id`` [B, L]);
    XLNet's settings (``reuse_len``, ``perm_size``, ``num_predict``) apply to ``plm`` only, ``vocab_size`` (the
    random replacement tokens) to the others."""
    get_objective(objective)
    if objective == "plm":
        return make_pretraining_batch(inputs, is_masked, seg_id, seq_len, reuse_len, perm_size, num_predict, seed,
                                      perm_mask_dtype)
    inputs = tf.ensure_shape(tf.cast(inputs, tf.int32), [None, seq_len])
    build = make_pmlm_batch if objective == "pmlm" else make_mpnet_batch
    return build(inputs, seg_id, seed, vocab_size, perm_mask_dtype)
