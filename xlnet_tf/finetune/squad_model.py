"""The SQuAD task around ``XLNetSquad``: the original loss, the fine-tuning task, SavedModel export for serving."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.finetune.export import sequence_inputs, write_serving_model
from xlnet_tf.models.heads import XLNetSquad
from xlnet_tf.training.finetuning import FinetuneTask

INFERENCE_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")


def squad_loss(features, outputs):
    """The original loss per example: 1/2 (CE_start + CE_end) + 1/2 BCE(cls_logits, is_impossible).

    Returns ``(sum over the batch, batch size)`` as ``FinetuneTask.loss_fn`` expects (the loop divides by the
    global batch, so the result is the original's batch mean)."""
    start = tf.cast(features["start_positions"], tf.int32)
    end = tf.cast(features["end_positions"], tf.int32)
    start_ce = -tf.gather(outputs["start_log_probs"], start, batch_dims=1)
    end_ce = -tf.gather(outputs["end_log_probs"], end, batch_dims=1)
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(features["is_impossible"], tf.float32),
                                                  logits=outputs["cls_logits"])
    per_example = 0.5 * (start_ce + end_ce) + 0.5 * bce
    return tf.reduce_sum(per_example), tf.cast(tf.shape(per_example)[0], tf.float32)


def squad_task(config, start_n_top: int = 5, end_n_top: int = 5, dtype: str = "float32") -> FinetuneTask:
    return FinetuneTask(build_model=lambda: XLNetSquad(config, start_n_top=start_n_top, end_n_top=end_n_top,
                                                       dtype=dtype),
                        loss_fn=squad_loss)


def export_saved_model(model: XLNetSquad, export_dir: str) -> str:
    """Writes a TF Serving SavedModel of ``model``'s inference outputs to ``export_dir`` (built under a temporary
    name next to it, then renamed; an existing export is replaced only once the new one is complete).

    Signature ``serving_default``: int32 ``input_ids``/``segment_ids`` [batch, length], float32 ``padding_mask``
    (1 = token, 0 = padding) and ``p_mask`` (1 = not an answer position) [batch, length], int32 ``cls_index``
    [batch]; returns ``start_top_log_probs``/``start_top_index`` [batch, start_n_top], ``end_top_log_probs``/
    ``end_top_index`` [batch, start_n_top * end_n_top] and ``cls_logits`` [batch].
    """
    inputs = sequence_inputs(p_mask=tf.TensorSpec([None, None], tf.float32), cls_index=tf.TensorSpec([None], tf.int32))
    return write_serving_model(model, export_dir, inputs, lambda outputs: {k: outputs[k] for k in INFERENCE_OUTPUTS})
