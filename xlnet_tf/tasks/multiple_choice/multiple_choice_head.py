"""The multiple-choice family's network: ``XLNetMultipleChoice`` (run_race.py's head: one score per option)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.models.heads import FinetuneModel, dense_layer, network_inputs, summary_layer


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetMultipleChoice(FinetuneModel):
    """RACE-style multiple choice: each of the C option sequences is scored by summary -> ``logits/dense`` (1 unit).

    Features are [B, C, L]; returns ``{"logits": [B, C]}`` (float32).
    """

    def __init__(self, config, summary_type: str = "last", use_summ_proj: bool = True, **kwargs):
        super().__init__(config, **kwargs)
        self.summary_type, self.use_summ_proj = summary_type, use_summ_proj
        self.sequence_summary = summary_layer(self.config, summary_type, use_summ_proj, self.dtype_policy)
        self.score = dense_layer(1, self.config, "dense", dtype=self.dtype_policy)
        self.sequence_summary.build()
        self.score.build((None, self.config.d_model))

    @property
    def last_layer_rows(self):
        return self.sequence_summary.rows_read

    def serving_inputs(self, shape=(None, None, None)):  # [batch, choices, length]
        return super().serving_inputs(shape)

    def call(self, features, training=None):
        shape = tf.shape(features["input_ids"])
        flat = {k: tf.reshape(v, [-1, shape[-1]]) for k, v in network_inputs(features).items()}
        rows = self.sequence_summary.rows(flat["input_ids"])
        hidden = self.xlnet(flat, training=training, output_rows=rows)["sequence_output"]
        scores = self.score(self.sequence_summary(hidden, training=training))
        return {"logits": tf.reshape(tf.cast(scores, tf.float32), shape[:2])}

    def tf1_variables(self):
        names = super().tf1_variables()
        names.update(self.sequence_summary.tf1_variables())
        names["logits/dense/kernel"] = self.score.kernel
        names["logits/dense/bias"] = self.score.bias
        return names

    def get_config(self):
        return dict(super().get_config(), config=self.config.to_dict(), summary_type=self.summary_type,
                    use_summ_proj=self.use_summ_proj)
