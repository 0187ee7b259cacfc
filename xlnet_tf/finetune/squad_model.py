"""The SQuAD task around ``XLNetSquad``: the original loss, the fine-tuning task, and the in-graph answer selection
of its TF Serving export (``best_answers``)."""

from __future__ import annotations

import tensorflow as tf

from xlnet_tf.models.heads import XLNetSquad
from xlnet_tf.training.finetuning import FinetuneTask

# The head's inference outputs (the serve_ids signature of a SQuAD export).
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
