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
  tokens carry the position and segment of the token they copy; ``[P]`` is embedded as XLNet's ``mask_emb``
  (``pseudo_mask``). Predictions (``lm_positions``): the corrupted sequence at the masked positions (the
  autoencoding term ``ae``) and the ``[P]`` tokens (the partially autoregressive term ``par``), same targets.
* ``mpnet``: two streams as XLNet's. Content ``[the sequence (L) | [M] placeholders (K)]`` (placeholders at the
  positions of the predicted tokens, corrupted 80/10/10 as MPNet's); the query stream predicts the K tokens in
  order (one step per token: spans are consecutive in the order), with its own mask (``query_perm_mask``).

The masks all come from ``factorization.blocked_keys``.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from xlnet_tf.data.factorization import (CONTENT, PLACEHOLDER, PREDICTOR, blocked_keys, blockwise_steps, corrupt,
                                         eligible_for_masking, masked_in_order, max_masked)
from xlnet_tf.data.permutation import make_pretraining_batch
from xlnet_tf.tokenization import MASK_ID


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the training step needs to know about an objective."""

    name: str
    model_inputs: tuple[str, ...]  # batch keys the model reads (the rest: target, target_mask)
    # The prediction rows [B, P] split into equal parts, one loss term each; the loss is the sum of their means.
    loss_terms: tuple[str, ...]
    has_memory: bool  # whether Transformer-XL memory is defined for it


OBJECTIVES = {
    "plm": Objective("plm", ("input_ids", "segment_ids", "perm_mask", "target_mapping"), ("plm",), True),
    "pmlm": Objective("pmlm", ("input_ids", "segment_ids", "position_ids", "perm_mask", "pseudo_mask",
                               "lm_positions"), ("ae", "par"), False),
    "mpnet": Objective("mpnet", ("input_ids", "segment_ids", "position_ids", "perm_mask", "target_mapping",
                                 "query_perm_mask"), ("mpnet",), False),
}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {name!r}")
    return OBJECTIVES[name]


def num_predictions(objective: str, seq_len: int, num_predict: int) -> int:
    """Predicted slots per sequence: ``num_predict`` for plm, the padded maximum of masked tokens otherwise."""
    return num_predict if objective == "plm" else max_masked(seq_len)


def _gather(values, positions):
    return tf.gather(values, positions, batch_dims=1)


def _masked_tokens(inputs, seed, padding_mask=None):
    """The blockwise prediction set of a batch: (step [B, L], positions [B, K], valid [B, K], order [B, L])."""
    step = blockwise_steps(eligible_for_masking(inputs, padding_mask), seed)
    return (step,) + masked_in_order(step, max_masked(inputs.shape[1]))


def _with_blocked_padding(blocked, valid_keys, dtype):
    """perm_mask [B, Q, K] in ``dtype``: ``blocked`` plus the padded key slots (invisible to everyone)."""
    return tf.cast(blocked | tf.logical_not(valid_keys)[:, None, :], dtype)


def make_pmlm_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype=tf.float32) -> dict[str, tf.Tensor]:
    """UniLMv2's pseudo-masked LM inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns (T = L + 2K): ``input_ids``, ``segment_ids``, ``position_ids`` int32 [B, T]; ``perm_mask`` [B, T, T]
    (1 = may not attend); ``pseudo_mask`` int32 [B, T] (1 = ``[P]``); ``lm_positions`` int32 [B, 2K] (the
    ``ae`` rows then the ``par`` rows); ``target`` int32 [B, 2K]; ``target_mask`` float32 [B, 2K].
    """
    inputs = tf.cast(inputs, tf.int32)
    seg_id = tf.cast(seg_id, tf.int32)
    batch, length = tf.shape(inputs)[0], inputs.shape[1]
    span_seed, corrupt_seed = tf.unstack(tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
    step, masked, valid, _ = _masked_tokens(inputs, span_seed)
    k = masked.shape[1]
    originals = _gather(inputs, masked)
    corrupted = tf.where(step > 0, corrupt(inputs, corrupt_seed, vocab_size), inputs)
    slot_step = _gather(step, masked)

    def parts(*pieces):  # [A | B | C] along the tokens
        return tf.concat(pieces, axis=1)

    zeros_l, ones_k = tf.zeros([batch, length], tf.int32), tf.ones([batch, k], tf.int32)
    steps = parts(zeros_l, slot_step, slot_step)
    roles = parts(tf.fill([batch, length + k], CONTENT), PREDICTOR * ones_k)
    valid_keys = parts(tf.ones([batch, length], tf.bool), valid, valid)
    valid_f = tf.cast(valid, tf.float32)
    target = tf.where(valid, originals, 0)
    return {
        "input_ids": parts(corrupted, originals, MASK_ID * ones_k),
        "segment_ids": parts(seg_id, _gather(seg_id, masked), _gather(seg_id, masked)),
        "position_ids": parts(zeros_l + tf.range(length)[None, :], masked, masked),
        "perm_mask": _with_blocked_padding(blocked_keys(steps, roles, steps, roles), valid_keys, perm_mask_dtype),
        "pseudo_mask": parts(tf.zeros([batch, length + k], tf.int32), ones_k),
        "lm_positions": parts(masked, length + k + tf.range(k)[None, :] * ones_k),
        "target": parts(target, target),
        "target_mask": parts(valid_f, valid_f),
    }


def make_mpnet_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype=tf.float32) -> dict[str, tf.Tensor]:
    """MPNet's inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns (T = L + K): ``input_ids``, ``segment_ids``, ``position_ids`` int32 [B, T]; ``perm_mask`` [B, T, T];
    ``target_mapping`` float32 [B, K, T] (one-hot at the predicted token's slot, zero rows for padding);
    ``query_perm_mask`` [B, K, T]; ``target`` int32 [B, K]; ``target_mask`` float32 [B, K].
    """
    inputs = tf.cast(inputs, tf.int32)
    seg_id = tf.cast(seg_id, tf.int32)
    batch, length = tf.shape(inputs)[0], inputs.shape[1]
    span_seed, corrupt_seed = tf.unstack(tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
    _, masked, valid, order = _masked_tokens(inputs, span_seed)
    k = masked.shape[1]
    originals = _gather(inputs, masked)
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
        "input_ids": tf.concat([inputs, corrupt(originals, corrupt_seed, vocab_size)], axis=1),
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
