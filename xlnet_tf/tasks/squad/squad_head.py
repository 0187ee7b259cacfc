"""The SQuAD family's network: ``XLNetSquad``, XLNet's span-extraction head (the original ``get_qa_outputs``)."""

from __future__ import annotations

import keras
import tensorflow as tf

from xlnet_tf.layers.masks import large_negative
from xlnet_tf.models.heads import FinetuneModel, dense_layer, network_inputs


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetSquad(FinetuneModel):
    """XLNet's SQuAD head (the original ``get_qa_outputs``).

    Features: ``input_ids``, ``segment_ids``, ``padding_mask`` [B, L]; ``p_mask`` [B, L] (1 = not a paragraph
    token, so not an answer boundary); ``cls_index`` [B]; in training ``start_positions`` [B] (teacher forcing).
    Outputs (float32):
      training / with start_positions: ``start_log_probs`` [B, L], ``end_log_probs`` [B, L], ``cls_logits`` [B].
      inference: ``start_top_log_probs``/``start_top_index`` [B, start_n_top], ``end_top_log_probs``/
      ``end_top_index`` [B, start_n_top * end_n_top], ``cls_logits`` [B].
    Variables: ``start_logits/dense/*``, ``end_logits/dense_0/*``, ``end_logits/LayerNorm/*``,
    ``end_logits/dense_1/*``, ``answer_class/dense_0/*``, ``answer_class/dense_1/kernel``.
    """

    def __init__(self, config, start_n_top: int = 5, end_n_top: int = 5, **kwargs):
        super().__init__(config, **kwargs)
        c, policy = self.config, self.dtype_policy
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.start_dense = dense_layer(1, c, "start_dense", dtype=policy)
        self.end_dense_0 = dense_layer(c.d_model, c, "end_dense_0", activation="tanh", dtype=policy)
        self.end_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="end_layer_norm", dtype=policy)
        self.end_dense_1 = dense_layer(1, c, "end_dense_1", dtype=policy)
        self.answer_dense_0 = dense_layer(c.d_model, c, "answer_dense_0", activation="tanh", dtype=policy)
        self.answer_dense_1 = dense_layer(1, c, "answer_dense_1", use_bias=False, dtype=policy)
        self.dropout = keras.layers.Dropout(c.dropout, dtype=policy)
        d = c.d_model
        self.start_dense.build((None, d))
        self.end_dense_0.build((None, 2 * d))
        self.end_layer_norm.build((None, d))
        self.end_dense_1.build((None, d))
        self.answer_dense_0.build((None, 2 * d))
        self.answer_dense_1.build((None, d))

    def _end_logits(self, hidden, start_features, p_mask):
        """hidden [B, L, D] (or [B, L, K, D] with K start candidates broadcast), start_features alike."""
        x = self.end_dense_0(tf.concat([hidden, start_features], axis=-1))
        x = self.end_dense_1(self.end_layer_norm(x))[..., 0]
        x = tf.cast(x, tf.float32)
        return _masked(x, p_mask if len(x.shape) == 2 else p_mask[:, :, None])

    def serving_inputs(self, shape=(None, None)):
        return dict(super().serving_inputs(shape), p_mask=tf.TensorSpec(shape, tf.float32, "p_mask"),
                    cls_index=tf.TensorSpec(shape[:1], tf.int32, "cls_index"))

    def call(self, features, training=None):
        inputs = network_inputs(features)
        missing = [name for name in ("p_mask", "cls_index") if name not in features]
        if missing:
            raise ValueError(f"features: XLNetSquad takes p_mask [B, L] (1 = not an answer boundary) and cls_index [B] "
                             f"besides the network's inputs; {', '.join(missing)} missing")
        hidden = self.xlnet(inputs, training=training)["sequence_output"]
        p_mask = tf.cast(features["p_mask"], tf.float32)
        start_logits = _masked(tf.cast(self.start_dense(hidden)[..., 0], tf.float32), p_mask)
        start_log_probs = tf.nn.log_softmax(start_logits, axis=-1)
        outputs = {}
        if "start_positions" in features:
            start_index = tf.cast(features["start_positions"], tf.int32)
            start_h = tf.gather(hidden, start_index, batch_dims=1)  # [B, D] teacher-forced start
            start_features = tf.broadcast_to(start_h[:, None], tf.shape(hidden))
            end_log_probs = tf.nn.log_softmax(self._end_logits(hidden, start_features, p_mask), axis=-1)
            outputs.update(start_log_probs=start_log_probs, end_log_probs=end_log_probs)
        else:
            start_top_log_probs, start_top_index = tf.math.top_k(start_log_probs, k=self.start_n_top)
            start_h = tf.gather(hidden, start_top_index, batch_dims=1)  # [B, K, D]
            length = tf.shape(hidden)[1]
            hidden_k = tf.broadcast_to(hidden[:, :, None], [tf.shape(hidden)[0], length, self.start_n_top,
                                                            tf.shape(hidden)[2]])
            start_k = tf.broadcast_to(start_h[:, None], tf.shape(hidden_k))
            end_log_probs = tf.nn.log_softmax(self._end_logits(hidden_k, start_k, p_mask), axis=1)  # [B, L, K]
            end_top_log_probs, end_top_index = tf.math.top_k(tf.transpose(end_log_probs, [0, 2, 1]),
                                                             k=self.end_n_top)  # [B, K, end_n_top]
            batch = tf.shape(hidden)[0]
            outputs.update(start_top_log_probs=start_top_log_probs, start_top_index=start_top_index,
                           end_top_log_probs=tf.reshape(end_top_log_probs, [batch, -1]),
                           end_top_index=tf.reshape(end_top_index, [batch, -1]))
        # Answer class from the CLS state and the start-probability-weighted summary of the sequence.
        cls_h = tf.gather(hidden, tf.cast(features["cls_index"], tf.int32), batch_dims=1)
        start_p = tf.cast(tf.nn.softmax(start_logits, axis=-1), hidden.dtype)
        start_summary = tf.einsum("bl,bld->bd", start_p, hidden)
        x = self.answer_dense_0(tf.concat([start_summary, cls_h], axis=-1))
        x = self.dropout(x, training=training)
        outputs["cls_logits"] = tf.cast(self.answer_dense_1(x)[:, 0], tf.float32)
        return outputs

    def tf1_variables(self):
        names = super().tf1_variables()
        names.update({
            "start_logits/dense/kernel": self.start_dense.kernel, "start_logits/dense/bias": self.start_dense.bias,
            "end_logits/dense_0/kernel": self.end_dense_0.kernel, "end_logits/dense_0/bias": self.end_dense_0.bias,
            "end_logits/LayerNorm/gamma": self.end_layer_norm.gamma,
            "end_logits/LayerNorm/beta": self.end_layer_norm.beta,
            "end_logits/dense_1/kernel": self.end_dense_1.kernel, "end_logits/dense_1/bias": self.end_dense_1.bias,
            "answer_class/dense_0/kernel": self.answer_dense_0.kernel,
            "answer_class/dense_0/bias": self.answer_dense_0.bias,
            "answer_class/dense_1/kernel": self.answer_dense_1.kernel,
        })
        return names

    def get_config(self):
        return dict(super().get_config(), config=self.config.to_dict(), start_n_top=self.start_n_top,
                    end_n_top=self.end_n_top)


def _masked(logits, p_mask):
    """The original's ``logits * (1 - p_mask) - 1e30 * p_mask`` (float32 here, so the constant is safe)."""
    return logits * (1.0 - p_mask) + large_negative(tf.float32) * p_mask
