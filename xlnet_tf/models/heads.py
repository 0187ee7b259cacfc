"""What the fine-tuning heads are built of: ``FinetuneModel`` (the XLNet network plus a head), the original's
sequence summary (``SequenceSummary``), dense layers with its initializer, and the network's inputs among a head's
features. The heads themselves are their task families' (``tasks/<family>/<family>_head.py``: ``XLNetClassifier``,
``XLNetMultipleChoice``, ``XLNetSquad``, ``XLNetTagger``).

Every head keeps the network as ``.xlnet`` (so ``load_pretrained`` and native checkpoints work) and lists its
variables under their TF1 names in ``tf1_variables`` (so fine-tuned checkpoints of the original code load too).
Inputs follow the original fine-tuning layout: ``A <sep> B <sep> <cls>`` with the CLS token last and left padding.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.config import SUMMARY_TYPES, XLNetConfig
from xlnet_tf.models.xlnet import NamedInputs, XLNetModel, _as_config, from_config_frozen_or_not, refuse_their_names


def dense_layer(units, config, name, activation=None, use_bias=True, dtype=None):
    return keras.layers.Dense(units, activation=activation, use_bias=use_bias, name=name, dtype=dtype,
                              kernel_initializer=keras.initializers.RandomNormal(stddev=config.initializer_range))


def network_inputs(features):
    """The network's inputs among a head's features (which hold its labels and own inputs too)."""
    refuse_their_names(features, "a fine-tuning head")
    return {k: features[k] for k in ("input_ids", "segment_ids", "padding_mask") if k in features}


@keras.saving.register_keras_serializable(package="xlnet_tf")
class SequenceSummary(keras.layers.Layer):
    """The original ``summarize_sequence``: pick the summary token (``last`` = the final ``<cls>``, ``first``) or
    average (``mean``, padding included as in the original), then ``tanh`` projection and dropout.
    [B, L, D] -> [B, D], or the row it picks alone [B, 1, D] -> [B, D] (``rows``). Variables:
    ``model/sequnece_summary/summary/{kernel,bias}`` (sic)."""

    def __init__(self, config: XLNetConfig, summary_type: str = "last", use_proj: bool = True, **kwargs):
        super().__init__(**kwargs)
        if summary_type not in SUMMARY_TYPES:
            raise ValueError(f"summary_type must be one of {SUMMARY_TYPES}, got {summary_type!r}")
        config = _as_config(config)  # from_config gives its dict
        self.config, self.summary_type, self.use_proj = config, summary_type, use_proj
        self.proj = dense_layer(config.d_model, config, "summary", activation="tanh", dtype=self.dtype_policy)
        self.dropout = keras.layers.Dropout(config.dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.proj.build((None, self.config.d_model))
        self.built = True

    def rows(self, input_ids):
        """The position it picks in sequences like ``input_ids`` [B, L], as ``XLNetModel``'s ``output_rows`` [1]
        (the network's last layer then runs at that row only), or None: ``mean`` reads every row."""
        if self.summary_type == "last":
            return tf.shape(input_ids)[1:2] - 1
        if self.summary_type == "first":
            return tf.zeros([1], tf.int32)
        return None

    @property
    def rows_read(self):
        """How many rows of a sequence it reads: 1 (``rows`` picks it), or None for every row (``mean``)."""
        return None if self.summary_type == "mean" else 1

    def call(self, hidden, training=None):
        if self.summary_type == "last":
            summary = hidden[:, -1]
        elif self.summary_type == "first":
            summary = hidden[:, 0]
        else:
            summary = tf.reduce_mean(hidden, axis=1)
        if self.use_proj:
            summary = self.proj(summary)
        return self.dropout(summary, training=training)

    def get_config(self):
        return dict(super().get_config(), config=self.config.to_dict(), summary_type=self.summary_type,
                    use_proj=self.use_proj)

    @classmethod
    def from_config(cls, config):
        return from_config_frozen_or_not(cls, config)

    def tf1_variables(self):
        if not self.use_proj:
            return {}
        return {"model/sequnece_summary/summary/kernel": self.proj.kernel,
                "model/sequnece_summary/summary/bias": self.proj.bias}


def summary_layer(config: XLNetConfig, summary_type: str, use_proj: bool, dtype) -> SequenceSummary:
    """A head's ``SequenceSummary``, named: an auto-name would count the heads built before in the process
    (``sequence_summary_1``), and variable paths (training checkpoints, XLNetAdamW's ``no_decay_paths``) with it."""
    return SequenceSummary(config, summary_type, use_proj, dtype=dtype, name="sequence_summary")


class FinetuneModel(NamedInputs, keras.Model):
    """Shared plumbing: the network as ``.xlnet`` and config serialisation."""

    def __init__(self, config, **kwargs):
        super().__init__(name=kwargs.pop("name", None), dtype=kwargs.pop("dtype", None))
        self.config = _as_config(config)
        self.xlnet = XLNetModel(self.config, dtype=self.dtype_policy)

    @classmethod
    def from_config(cls, config):
        return from_config_frozen_or_not(cls, config)

    def tf1_variables(self):
        return dict(self.xlnet.tf1_variables())

    @property
    def last_layer_rows(self):
        """How many rows of a sequence the network's last layer runs at (``XLNetModel``'s ``output_rows``), or None
        for all of them: what the step costs (``flops.finetune_flops_per_sequence``). Every row unless a head
        says otherwise."""
        return None

    def _lookup_dependency(self, name, cached_dependencies=None):
        # The sequence summary was the attribute ``summary`` until it turned out to hide ``keras.Model.summary()``:
        # fine-tuning checkpoints written before name it so, and still restore.
        if name == "summary":
            name = "sequence_summary"
        return super()._lookup_dependency(name, cached_dependencies)
