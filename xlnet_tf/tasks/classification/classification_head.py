"""The classification family's network: ``XLNetClassifier`` (run_classifier.py's head: sequence classification or
regression, the original's ``get_classification_loss``/``get_regression_loss``), and ``read_segments``, which
reads a long document through XLNet's memory for it (``--long_document=memory``)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.models.heads import FinetuneModel, dense_layer, network_inputs, summary_layer
from xlnet_tf.models.xlnet import _as_config


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetClassifier(FinetuneModel):
    """Sequence classification / regression (the original ``get_classification_loss``/``get_regression_loss``).

    Returns ``{"logits": [B, num_labels]}`` (float32; ``num_labels`` = 1 for regression). Head variables:
    ``model/classification_{scope}/logit/*`` or ``model/regression_{scope}/logit/*`` where ``scope`` is the
    task name (the original's ``cls_scope`` defaults to it).
    """

    def __init__(self, config, num_labels: int, task_scope: str = "task", regression: bool = False,
                 summary_type: str = "last", use_summ_proj: bool = True, num_segments: int = 1, mem_len: int = 0,
                 **kwargs):
        if num_segments < 1 or (num_segments > 1 and mem_len < 1):
            raise ValueError(f"num_segments={num_segments}, mem_len={mem_len}: a document of several segments "
                             "needs mem_len >= 1")
        if regression and num_labels != 1:
            raise ValueError(f"num_labels={num_labels}, regression=True: a regression has one output "
                             "(num_labels=1)")
        config = _as_config(config)
        if num_segments > 1:  # the whole of each segment is cached (no reuse_len: fine-tuning has no permutation)
            config = config.replace(mem_len=mem_len, reuse_len=None)
        super().__init__(config, **kwargs)
        self.num_segments, self.mem_len = num_segments, (mem_len if num_segments > 1 else 0)
        self.num_labels, self.task_scope, self.regression = num_labels, task_scope, regression
        self.summary_type, self.use_summ_proj = summary_type, use_summ_proj
        self.sequence_summary = summary_layer(self.config, summary_type, use_summ_proj, self.dtype_policy)
        self.logit = dense_layer(self.num_labels, self.config, "logit", dtype=self.dtype_policy)
        self.sequence_summary.build()
        self.logit.build((None, self.config.d_model))

    def serving_inputs(self, shape=(None, None)):
        if self.num_segments > 1 and shape[-1] is None:
            raise ValueError(f"{self.name}: a document of {self.num_segments} segments has a fixed length; export "
                             "it with input_signature=[model.serving_inputs((None, length))]")
        return super().serving_inputs(shape)

    @property
    def last_layer_rows(self):
        # a document of several segments reads every row of its earlier segments into memory
        return self.sequence_summary.rows_read if self.num_segments == 1 else None

    def call(self, features, training=None):
        inputs = network_inputs(features)
        if self.num_segments > 1:
            hidden = read_segments(self.xlnet, inputs, self.num_segments, training=training)[-1]
        else:
            rows = self.sequence_summary.rows(inputs["input_ids"])
            hidden = self.xlnet(inputs, training=training, output_rows=rows)["sequence_output"]
        logits = self.logit(self.sequence_summary(hidden, training=training))
        return {"logits": tf.cast(logits, tf.float32)}

    def tf1_variables(self):
        names = super().tf1_variables()
        names.update(self.sequence_summary.tf1_variables())
        prefix = f"model/{'regression' if self.regression else 'classification'}_{self.task_scope}/logit/"
        names[prefix + "kernel"] = self.logit.kernel
        names[prefix + "bias"] = self.logit.bias
        return names

    def get_config(self):
        return dict(super().get_config(), config=self.config.to_dict(), num_labels=self.num_labels,
                    task_scope=self.task_scope, regression=self.regression, summary_type=self.summary_type,
                    use_summ_proj=self.use_summ_proj, num_segments=self.num_segments, mem_len=self.mem_len)


def read_segments(network, inputs: dict, num_segments: int, training=None) -> list:
    """Reads a document through XLNet's memory: the content stream [B, L, D] of each of its ``num_segments``
    consecutive segments, in order.

    ``inputs``: ``input_ids`` (and ``segment_ids``, ``padding_mask``) [B, num_segments * L], one left-padded
    sequence of the whole document (``<sep> <cls>`` at its very end, so only the last segment holds them). Segment
    ``s`` attends to itself and to the memory: the last ``network.config.mem_len`` hidden states of the segments
    before it at every layer, gradient stopped (as in pretraining), with their padding rows blocked
    (``mems_padding_mask``). With ``mem_len >= (num_segments - 1) * L`` the result equals one pass over the whole
    sequence in which no token attends to a later segment (tests/test_long_document.py). Shapes are static per
    segment: the length must be a multiple of ``num_segments``, known when traced.
    """
    length = inputs["input_ids"].shape[1]
    if length is None or length % num_segments:
        raise ValueError(f"a document of {num_segments} segments needs a static length divisible by it, got {length}")
    seg_len, mem_len = length // num_segments, network.config.mem_len
    padding = inputs.get("padding_mask")
    if padding is None:
        padding = tf.ones_like(inputs["input_ids"], tf.float32)
    mems, mems_padding, outputs = None, None, []
    for s in range(num_segments):
        segment = {k: v[:, s * seg_len:(s + 1) * seg_len] for k, v in inputs.items()}
        if mems is not None:
            segment.update(mems=mems, mems_padding_mask=mems_padding)
        out = network(segment, training=training)
        outputs.append(out["sequence_output"])
        mems = out["new_mems"]
        rows = tf.cast(padding[:, s * seg_len:(s + 1) * seg_len], tf.float32)
        mems_padding = (rows if mems_padding is None else tf.concat([mems_padding, rows], axis=1))[:, -mem_len:]
    return outputs
