"""The tagging family's network: ``XLNetTagger`` (dropout and a dense layer on every position)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.models.heads import FinetuneModel, dense_layer, network_inputs


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTagger(FinetuneModel):
    """Token classification (tagging): dropout and a dense layer on every position of the content stream, as HF's
    ``XLNetForTokenClassification`` (the original code has no tagging head; its variables here are
    ``model/tagging_{scope}/logit/*``). Returns ``{"logits": [B, L, num_labels]}`` (float32)."""

    def __init__(self, config, num_labels: int, task_scope: str = "tagging", **kwargs):
        super().__init__(config, **kwargs)
        self.num_labels, self.task_scope = num_labels, task_scope
        self.dropout = keras.layers.Dropout(self.config.dropout, dtype=self.dtype_policy)
        self.logit = dense_layer(num_labels, self.config, "logit", dtype=self.dtype_policy)
        self.logit.build((None, self.config.d_model))

    def call(self, features, training=None):
        hidden = self.xlnet(network_inputs(features), training=training)["sequence_output"]
        return {"logits": tf.cast(self.logit(self.dropout(hidden, training=training)), tf.float32)}

    def tf1_variables(self):
        names = super().tf1_variables()
        names[f"model/tagging_{self.task_scope}/logit/kernel"] = self.logit.kernel
        names[f"model/tagging_{self.task_scope}/logit/bias"] = self.logit.bias
        return names

    def get_config(self):
        return dict(super().get_config(), config=self.config.to_dict(), num_labels=self.num_labels,
                    task_scope=self.task_scope)
