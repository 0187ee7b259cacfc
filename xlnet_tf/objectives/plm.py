"""XLNet's permutation language model (``plm``, the default objective): its batches, stream layout and loss.

Batches: as the original ``_local_perm`` + parser in ``data_utils.py``, computed for a whole batch at once
(tf.data map overhead per op dominates when it runs per example), with stateless random ops so that the same seed
always gives the same orders. They read the writer's targets (``is_masked``), so the data must have been written
with the training's ``reuse_len`` and ``num_predict`` (``record_fields``):

* The reused part [0, reuse_len) and the new part [reuse_len, seq_len) each get a *local* permutation: positions
  are cut into consecutive blocks of ``perm_size``, and one random permutation of the ``perm_size`` offsets is
  applied inside every block, so block b precedes block b+1 in the factorisation order.
* Context tokens (not targets, not <sep>/<cls>) get rank -1: everybody sees them, they see no target.
  <sep>/<cls> take part in the permutation (they are hidden from earlier-ranked positions) but are never
  targets. ``perm_mask[i, j] = 1`` (i may NOT attend to j) iff ``self_rank[i] <= rank[j]`` and j is a target or
  functional token, with ``self_rank = rank`` for targets (a target never sees itself in the query stream) and
  ``rank + 1`` otherwise: the rule of ``factorization.blocked_keys`` with targets as predictors, the rank as
  the step.
* The reused part never sees the new part (so the memory cached from it carries no information about later
  tokens); the new part sees all of the reused part.
* ``target_mapping`` [num_predict, L]: one-hot rows at the target positions in position order, zero rows as
  padding; ``target`` = the input token at each (the permutation LM predicts the token itself);
  ``target_mask`` 1 for real rows. If an example has more targets than ``num_predict`` (only possible with data
  not written by our writer), the first ``num_predict`` by position are kept; the others stay hidden in
  ``perm_mask`` but have no loss.

Streams: the content stream of L tokens (plus memory) and the query stream of ``num_predict`` rows, the LM head on
those rows. Loss: one term, the cross-entropy of the targets. Memory: the reused part of a sequence is cached for
the next one (``has_memory``).
"""

from __future__ import annotations

from xlnet_tf.objectives import BatchShape, Objective, StreamLayout


class PermutationLM(Objective):
    name = "plm"
    description = "XLNet's permutation LM"
    model_inputs = ("input_ids", "segment_ids", "perm_mask", "target_mapping")
    loss_terms = ("plm",)
    has_memory = True

    def shape_errors(self, shape: BatchShape) -> list[str]:
        errors = []
        seq_len, reuse_len, perm_size, num_predict = shape
        new_len = seq_len - reuse_len
        if not 0 < reuse_len < seq_len:
            errors.append(f"reuse_len={reuse_len} must be in [1, seq_len={seq_len})")
        elif perm_size <= 0 or reuse_len % perm_size or new_len % perm_size:
            # The original asserted perm_size <= reuse_len and <= seq_len-reuse_len; its reshape also needs both
            # parts to be whole blocks.
            errors.append(f"perm_size={perm_size} must divide reuse_len={reuse_len} and seq_len-reuse_len={new_len}")
        if num_predict <= 0:
            errors.append(f"num_predict={num_predict} must be positive")
        return errors

    def record_fields(self, shape: BatchShape) -> dict:
        return dict(reuse_len=shape.reuse_len, num_predict=shape.num_predict)

    def make_batch(self, records, shape: BatchShape, seed, vocab_size: int, perm_mask_dtype="float32") -> dict:
        return make_pretraining_batch(records["input"], records["is_masked"], records["seg_id"], shape.seq_len,
                                      shape.reuse_len, shape.perm_size, shape.num_predict, seed, perm_mask_dtype)

    def stream_layout(self, seq_len: int, num_predict: int) -> StreamLayout:
        return StreamLayout(seq_len, num_predict, num_predict or seq_len, False)


def local_permutation(batch: int, length: int, perm_size: int, seed):
    """int32 [batch, length]: every position's rank in a block-local random order (``length % perm_size == 0``).

    Equivalent in distribution to the original's reshape/transpose/``random_shuffle``: position
    ``b*perm_size + k`` gets rank ``b*perm_size + sigma(k)`` for one uniform permutation sigma per example.
    """
    import tensorflow as tf

    keys = tf.random.stateless_uniform([batch, perm_size], seed=seed)
    sigma = tf.argsort(keys, axis=-1, stable=True)  # int32
    blocks = tf.range(length // perm_size, dtype=tf.int32)[:, None] * perm_size
    return tf.reshape(blocks[None, :, :] + sigma[:, None, :], [batch, length])


def part_seeds(seed):
    """The stateless seeds of the reused and the new part's permutations, from the batch seed."""
    import tensorflow as tf

    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    return seeds[0], seeds[1]


def _ordered_tokens(inputs, is_masked):
    """(masked_or_func, targets), as the original: targets are the masked tokens that are not <sep>/<cls>;
    targets and functional tokens keep their rank, the other (context) tokens get rank -1."""
    import tensorflow as tf

    from xlnet_tf.tokenization import CLS_ID, SEP_ID

    functional = tf.logical_or(tf.equal(inputs, SEP_ID), tf.equal(inputs, CLS_ID))
    targets = tf.logical_and(is_masked, tf.logical_not(functional))
    return tf.logical_or(targets, functional), targets


def make_pretraining_batch(inputs, is_masked, seg_id, seq_len: int, reuse_len: int, perm_size: int,
                           num_predict: int, seed, perm_mask_dtype="float32") -> dict:
    """The model's inputs for a batch of records; ``seed`` is a shape-[2] int tensor (stateless seed).

    ``inputs``, ``is_masked``, ``seg_id``: [B, L] (any int type). Returns ``input_ids`` int32 [B, L],
    ``segment_ids`` int32 [B, L], ``perm_mask`` [B, L, L] (``perm_mask_dtype``, float32 by default),
    ``target_mapping`` float32 [B, P, L], ``target`` int32 [B, P], ``target_mask`` float32 [B, P].
    """
    import tensorflow as tf

    from xlnet_tf.data.factorization import CONTENT, PREDICTOR, blocked_keys

    inputs = tf.cast(inputs, tf.int32)
    batch = tf.shape(inputs)[0]
    is_masked = tf.cast(is_masked, tf.bool)
    new_len = seq_len - reuse_len
    seed_0, seed_1 = part_seeds(seed)
    rank_0 = local_permutation(batch, reuse_len, perm_size, seed_0)
    rank_1 = local_permutation(batch, new_len, perm_size, seed_1)
    mof_0, tgt_0 = _ordered_tokens(inputs[:, :reuse_len], is_masked[:, :reuse_len])
    mof_1, tgt_1 = _ordered_tokens(inputs[:, reuse_len:], is_masked[:, reuse_len:])
    targets = tf.concat([tgt_0, tgt_1], axis=1)
    # One step per position for the whole [L, L] mask (the mask is the largest tensor of the step; building it
    # from per-part blocks and concats costs several passes over memory). With S = 2L > every rank:
    #   reused context token   -1          -> seen by all, sees no reused target/functional token;
    #   reused target/func     rank        -> the original rule in the reused part, never seen by the new part;
    #   new context token      S           -> sees the whole reused part, no reused token sees it;
    #   new target/func        2S + rank   -> the original rule in the new part.
    big = 2 * seq_len
    step = tf.concat([tf.where(mof_0, rank_0, -1), tf.where(mof_1, 2 * big + rank_1, big)], axis=1)
    role = tf.where(targets, PREDICTOR, CONTENT)
    perm_mask = tf.cast(blocked_keys(step, role, step), perm_mask_dtype)

    # k-th target (in position order) -> row k of target_mapping; targets beyond num_predict get no row.
    slot = tf.where(targets, tf.cumsum(tf.cast(targets, tf.int32), axis=1) - 1, -1)
    match = tf.equal(slot[:, None, :], tf.range(num_predict, dtype=tf.int32)[None, :, None])  # [B, P, L]
    target_mapping = tf.cast(match, tf.float32)
    has_target = tf.reduce_any(match, axis=2)
    positions = tf.argmax(target_mapping, axis=2, output_type=tf.int32)
    target = tf.where(has_target, tf.gather(inputs, positions, batch_dims=1), 0)
    target_mask = tf.cast(has_target, tf.float32)
    return {
        "input_ids": tf.ensure_shape(inputs, [None, seq_len]),
        "segment_ids": tf.ensure_shape(tf.cast(seg_id, tf.int32), [None, seq_len]),
        "perm_mask": tf.ensure_shape(perm_mask, [None, seq_len, seq_len]),
        "target_mapping": tf.ensure_shape(target_mapping, [None, num_predict, seq_len]),
        "target": tf.ensure_shape(target, [None, num_predict]),
        "target_mask": tf.ensure_shape(target_mask, [None, num_predict]),
    }


def make_pretraining_features(inputs, is_masked, seg_id, seq_len: int, reuse_len: int, perm_size: int,
                              num_predict: int, seed, perm_mask_dtype="float32") -> dict:
    """``make_pretraining_batch`` for one example ([L] inputs; outputs without the batch axis)."""
    import tensorflow as tf

    out = make_pretraining_batch(tf.reshape(inputs, [1, seq_len]), tf.reshape(is_masked, [1, seq_len]),
                                 tf.reshape(seg_id, [1, seq_len]), seq_len, reuse_len, perm_size, num_predict,
                                 seed, perm_mask_dtype)
    return {k: v[0] for k, v in out.items()}
