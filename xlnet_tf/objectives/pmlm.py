"""UniLMv2's pseudo-masked language model (``pmlm``; Bao et al., 2020): its batches, stream layout and loss
``L_AE + L_PAR``.

Batches ignore the writer's targets: they mask 15% of the tokens blockwise (UniLMv2's Algorithm 1,
``factorization.mask_blockwise``), drawn online from the batch seed as XLNet's permutations are (a resumed run sees
the same masks again, every pass over the data draws new ones), padded to K = ``max_masked(L)`` predicted slots so
that shapes are static. One stream of ``[corrupted sequence (L) | originals of the masked tokens (K) | pseudo masks
[P] (K)]``:

* The corrupted sequence replaces the masked tokens 80/10/10 by ``<mask>`` / a random token / themselves.
* Appended tokens carry the position and segment of the token they copy (``target_mapping``); ``[P]`` starts from
  XLNet's ``mask_emb`` (``pseudo_mask``).
* The corrupted sequence sees only itself, so it is the content stream (XLNet's path, consecutive positions) and
  the appended tokens are the query stream, whose rows are keys for each other too (``query_perm_mask`` over
  L + 2K keys): s2s-ft's split attention, without the masked-out block. The masks come from
  ``factorization.blocked_keys``.
* Predictions (``lm_positions`` into ``[content ; query]``): the corrupted sequence at the masked positions (the
  autoencoding term ``ae``) and the ``[P]`` rows (the partially autoregressive term ``par``), same targets.

Streams (what ``flops.py`` counts): the content stream of the L corrupted tokens; 2K appended rows that attend to
the L tokens and to each other (their keys and values projected too); the LM head on 2K rows. The masked-out block
(the L tokens never see the appended rows) is not computed. No memory: the masks are defined within one sequence.
"""

from __future__ import annotations

from xlnet_tf.objectives import BatchShape, Objective, StreamLayout


class PseudoMaskedLM(Objective):
    name = "pmlm"
    description = "UniLMv2's pseudo-masked LM"
    model_inputs = ("input_ids", "segment_ids", "target_mapping", "query_ids", "pseudo_mask", "query_perm_mask",
                    "lm_positions")
    loss_terms = ("ae", "par")  # the prediction rows: the [M] rows, then the [P] rows
    has_memory = False

    def make_batch(self, records, shape: BatchShape, seed, vocab_size: int, perm_mask_dtype="float32") -> dict:
        import tensorflow as tf

        inputs = tf.ensure_shape(tf.cast(records["input"], tf.int32), [None, shape.seq_len])
        return make_pmlm_batch(inputs, records["seg_id"], seed, vocab_size, perm_mask_dtype)

    def stream_layout(self, seq_len: int, num_predict: int) -> StreamLayout:
        from xlnet_tf.data.factorization import max_masked

        k = max_masked(seq_len)
        return StreamLayout(seq_len, 2 * k, 2 * k, True, head_on_content=True)  # the ae rows


def make_pmlm_batch(inputs, seg_id, seed, vocab_size: int, perm_mask_dtype="float32") -> dict:
    """UniLMv2's pseudo-masked LM inputs for records ``inputs``, ``seg_id`` int [B, L] (L static); ``seed``: [2].

    Returns: ``input_ids``, ``segment_ids`` int32 [B, L] (the corrupted sequence); the 2K appended rows
    (originals, then pseudo masks): ``target_mapping`` float32 [B, 2K, L] (one-hot at the position copied, zero
    rows for padding), ``query_ids`` int32 [B, 2K], ``pseudo_mask`` int32 [B, 2K] (1 = [P]),
    ``query_perm_mask`` [B, 2K, L + 2K] (1 = may not attend; keys ``[sequence ; appended rows]``);
    ``lm_positions`` int32 [B, 2K] (the ``ae`` rows then the ``par`` rows); ``target`` int32 [B, 2K];
    ``target_mask`` float32 [B, 2K].
    """
    import tensorflow as tf

    from xlnet_tf.data.factorization import (CONTENT, PREDICTOR, blocked_keys, corrupt, gather_positions,
                                             mask_blockwise, with_blocked_padding)
    from xlnet_tf.tokenization import MASK_ID

    m = mask_blockwise(inputs, seed)
    masked, valid, originals = m.positions, m.valid, m.originals
    batch, length, k = tf.shape(m.inputs)[0], m.inputs.shape[1], masked.shape[1]
    slot_step = gather_positions(m.step, masked)
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
        "query_perm_mask": with_blocked_padding(blocked_keys(row_steps, row_roles, key_steps, key_roles),
                                                valid_keys, perm_mask_dtype),
        "lm_positions": appended(masked, length + k + tf.range(k)[None, :] * ones_k),
        "target": appended(target, target),
        "target_mask": appended(valid_f, valid_f),
    }
