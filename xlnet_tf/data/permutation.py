"""Factorisation orders and the tensors the XLNet pretraining step consumes, as TF ops (graph-safe, for tf.data).

Per example, as the original ``_local_perm`` + parser in ``data_utils.py``, but with stateless random ops so the
same (seed, example index) always gives the same order:

* The reused part [0, reuse_len) and the new part [reuse_len, seq_len) each get a *local* permutation: positions
  are cut into consecutive blocks of ``perm_size``, and one random permutation of ``perm_size`` offsets is
  applied inside every block, so block b precedes block b+1 in the factorisation order.
* Context tokens (not targets, not <sep>/<cls>) get rank -1: everybody sees them, they see no target.
  <sep>/<cls> take part in the permutation (they are hidden from earlier-ranked positions) but are never
  targets. ``perm_mask[i, j] = 1`` (i may NOT attend to j) iff ``self_rank[i] <= rank[j]`` and j is a target or
  functional token, with ``self_rank = rank`` for targets (a target never sees itself in the query stream) and
  ``rank + 1`` otherwise.
* The reused part never sees the new part (so the memory cached from it carries no information about later
  tokens); the new part sees all of the reused part.
* ``target_mapping`` [num_predict, L]: one-hot rows at the target positions in position order, zero rows as
  padding; ``target`` = the input token at each (the permutation LM predicts the token itself);
  ``target_mask`` 1 for real rows. If an example has more targets than ``num_predict`` (only possible with data
  not written by our writer), the first ``num_predict`` by position are kept; the others stay hidden in
  ``perm_mask`` but have no loss.
"""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.tokenization import CLS_ID, SEP_ID


def local_permutation(length: int, perm_size: int, seed) -> tf.Tensor:
    """int32 [length]: rank of every position in a block-local random order (``length % perm_size == 0``).

    Equivalent in distribution to the original's reshape/transpose/``random_shuffle``: position
    ``b*perm_size + k`` gets rank ``b*perm_size + sigma(k)`` for one uniform permutation sigma.
    """
    keys = tf.random.stateless_uniform([perm_size], seed=seed)
    sigma = tf.argsort(keys, stable=True)  # int32
    blocks = tf.range(length // perm_size, dtype=tf.int32)[:, None] * perm_size
    return tf.reshape(blocks + sigma[None, :], [length])


def _part_perm_mask(inputs, is_masked, perm_size: int, seed):
    """perm_mask [n, n] (float32) and target flags [n] (bool) of one part."""
    n = inputs.shape[0]
    rank = local_permutation(n, perm_size, seed)
    functional = tf.logical_or(tf.equal(inputs, SEP_ID), tf.equal(inputs, CLS_ID))
    targets = tf.logical_and(is_masked, tf.logical_not(functional))
    masked_or_func = tf.logical_or(targets, functional)
    rank = tf.where(masked_or_func, rank, -tf.ones_like(rank))
    self_rank = tf.where(targets, rank, rank + 1)
    perm_mask = tf.logical_and(self_rank[:, None] <= rank[None, :], masked_or_func[None, :])
    return tf.cast(perm_mask, tf.float32), targets


def make_pretraining_features(inputs, is_masked, seg_id, seq_len: int, reuse_len: int, perm_size: int,
                              num_predict: int, seed) -> dict[str, tf.Tensor]:
    """The model's per-example inputs from one record; ``seed`` is a shape-[2] int tensor (stateless seed).

    Returns ``input_ids`` int32 [L], ``segment_ids`` int32 [L], ``perm_mask`` float32 [L, L],
    ``target_mapping`` float32 [P, L], ``target`` int32 [P], ``target_mask`` float32 [P].
    """
    inputs = tf.cast(tf.reshape(inputs, [seq_len]), tf.int32)
    is_masked = tf.cast(tf.reshape(is_masked, [seq_len]), tf.bool)
    new_len = seq_len - reuse_len
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    mask_0, tgt_0 = _part_perm_mask(inputs[:reuse_len], is_masked[:reuse_len], perm_size, seeds[0])
    mask_1, tgt_1 = _part_perm_mask(inputs[reuse_len:], is_masked[reuse_len:], perm_size, seeds[1])
    perm_mask = tf.concat([
        tf.concat([mask_0, tf.ones([reuse_len, new_len])], axis=1),    # reused part: never sees the new part
        tf.concat([tf.zeros([new_len, reuse_len]), mask_1], axis=1),   # new part: sees all of the reused part
    ], axis=0)
    targets = tf.concat([tgt_0, tgt_1], axis=0)

    positions = tf.where(targets)[:, 0][:num_predict]  # keep the first num_predict targets (see module doc)
    positions = tf.cast(positions, tf.int32)
    actual = tf.shape(positions)[0]
    pad = num_predict - actual
    target_mapping = tf.concat([tf.one_hot(positions, seq_len, dtype=tf.float32),
                                tf.zeros([pad, seq_len], tf.float32)], axis=0)
    target = tf.concat([tf.gather(inputs, positions), tf.zeros([pad], tf.int32)], axis=0)
    target_mask = tf.concat([tf.ones([actual], tf.float32), tf.zeros([pad], tf.float32)], axis=0)
    return {
        "input_ids": inputs,
        "segment_ids": tf.cast(tf.reshape(seg_id, [seq_len]), tf.int32),
        "perm_mask": tf.reshape(perm_mask, [seq_len, seq_len]),
        "target_mapping": tf.reshape(target_mapping, [num_predict, seq_len]),
        "target": tf.reshape(target, [num_predict]),
        "target_mask": tf.reshape(target_mask, [num_predict]),
    }
