"""MPNet's masked and permuted language model (``mpnet``; Song et al., 2020): its batches, stream layout and loss.

Batches ignore the writer's targets: they mask 15% of the tokens blockwise as ``pmlm`` does
(``factorization.mask_blockwise``, drawn online from the batch seed), padded to K = ``max_masked(L)`` predicted
slots. Two streams as XLNet's:

* Content ``[the sequence (L) | [M] placeholders (K)]``: placeholders at the positions of the predicted tokens,
  corrupted 80/10/10 as MPNet's (``position_ids``; the placeholders' own rows are context rows, seeing the context
  and every placeholder).
* The query stream predicts the K tokens in order (one step per token: spans are consecutive in the order), with
  its own mask (``query_perm_mask``). The masks come from ``factorization.blocked_keys``.

Streams (what ``flops.py`` counts): the content stream of L + K tokens, the query stream of K rows, the LM head on
K rows. Loss: one term over the K predictions. No memory: the masks are defined within one sequence.
"""

from __future__ import annotations

from xlnet_tf.objectives import BatchShape, Objective, StreamLayout


class MaskedPermutedLM(Objective):
    name = "mpnet"
    description = "MPNet's masked and permuted LM"
    model_inputs = ("input_ids", "segment_ids", "position_ids", "perm_mask", "target_mapping", "query_perm_mask")
    loss_terms = ("mpnet",)
    has_memory = False

    def make_batch(self, records, shape: BatchShape, seed, vocab_size: int, perm_mask_dtype="float32") -> dict:
        import tensorflow as tf

        inputs = tf.ensure_shape(tf.cast(records["input"], tf.int32), [None, shape.seq_len])
        return make_mpnet_batch(inputs, records["seg_id"], seed, vocab_size, perm_mask_dtype)

    def stream_layout(self, seq_len: int, num_predict: int) -> StreamLayout:
        from xlnet_tf.data.factorization import max_masked

        k = max_masked(seq_len)
        return StreamLayout(seq_len + k, k, k, False)


def make_mpnet_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype="float32") -> dict:
    """MPNet's inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns (T = L + K): ``input_ids``, ``segment_ids``, ``position_ids`` int32 [B, T]; ``perm_mask`` [B, T, T];
    ``target_mapping`` float32 [B, K, T] (one-hot at the predicted token's slot, zero rows for padding);
    ``query_perm_mask`` [B, K, T]; ``target`` int32 [B, K]; ``target_mask`` float32 [B, K].
    """
    import tensorflow as tf

    from xlnet_tf.data.factorization import (CONTENT, PLACEHOLDER, PREDICTOR, blocked_keys, corrupt,
                                             gather_positions, mask_blockwise, with_blocked_padding)

    m = mask_blockwise(inputs, seed)
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
        "segment_ids": tf.concat([seg_id, gather_positions(seg_id, masked)], axis=1),
        "position_ids": tf.concat([zeros_l + tf.range(length)[None, :], masked], axis=1),
        "perm_mask": with_blocked_padding(content_blocked, valid_keys, perm_mask_dtype),
        "target_mapping": tf.one_hot(masked, length + k) * valid_f[:, :, None],
        "query_perm_mask": with_blocked_padding(query_blocked, valid_keys, perm_mask_dtype),
        "target": tf.where(valid, originals, 0),
        "target_mask": valid_f,
    }
