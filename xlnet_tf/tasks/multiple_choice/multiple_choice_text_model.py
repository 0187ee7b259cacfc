"""The multiple-choice family's Keras model on raw text: ``XLNetTextMultipleChoice``
(``xlnet_tf.XLNetTextMultipleChoice``), built on the text models' base (``xlnet_tf.tasks.text_models``)."""

from __future__ import annotations

from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from xlnet_tf.checkpoint import load_task_weights
from xlnet_tf.tasks.multiple_choice.multiple_choice_graph import encode_choices
from xlnet_tf.tasks.multiple_choice.multiple_choice_head import XLNetMultipleChoice
from xlnet_tf.tasks.text_data import checked_class_labels
from xlnet_tf.tasks.text_models import TextTaskModel, build_parts, checkpoint_source, hf_summary_settings


PARTS = ("article", "question", "options")
LABELS = "labels (the index of the right option)"


@keras.saving.register_keras_serializable(package="xlnet_tf")
class XLNetTextMultipleChoice(TextTaskModel):
    """RACE-style multiple choice on raw strings: ``multiple_choice_graph.encode_choices`` + ``XLNetMultipleChoice``.

    ``fit``/``evaluate``/``predict`` inputs: ``(article, question, options)`` -- tf.string [B], [B], [B, C] -- as
    a tuple, or a dict with those keys; ``call`` takes what ``encode_choices`` gives (each [B, C,
    S]). Output: ``logits`` float32 [B, C]; train with ``SparseCategoricalCrossentropy(from_logits=True)`` on the
    index of the right option.
    """

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 512, *, max_qa_length: Optional[int] = None,
                        config=None, spiece_model=None, lower_case: Optional[bool] = None,
                        summary_type: Optional[str] = None, use_summ_proj: Optional[bool] = None,
                        dropout: float = 0.1, dropatt: float = 0.1,
                        dtype: Optional[str] = None, name: Optional[str] = None,
                        new_head: bool = False) -> "XLNetTextMultipleChoice":
        """As ``XLNetTextClassifier.from_checkpoint``; ``max_qa_length`` as ``run_classifier.py``'s (the last
        question+option tokens kept)."""
        source = checkpoint_source(path)
        hf_head = hf_summary_settings(source, ("XLNetMultipleChoice",))
        preprocessor, config = build_parts(source, config, spiece_model, seq_length, lower_case, dropout, dropatt,
                                            max_qa_length=max_qa_length)
        network = XLNetMultipleChoice(config, summary_type=summary_type or hf_head.get("summary_type", "last"),
                                      use_summ_proj=hf_head.get("use_summ_proj", True) if use_summ_proj is None
                                      else use_summ_proj, dtype=dtype)
        load_task_weights(network, source, new_head)
        return cls(preprocessor, network, name=name)

    def preprocess(self, x) -> dict:
        """``(article, question, options)`` -- [B], [B], [B, C] strings -- or a dict with those keys -> the three
        inputs, each [B, C, S]."""
        return encode_choices(self.preprocessor, *self._parts(x))

    @staticmethod
    def _parts(x) -> tuple:
        if isinstance(x, dict):
            missing = [k for k in PARTS if k not in x]
            if missing:
                raise ValueError(f"inputs: a dict of {', '.join(PARTS)} lacks {', '.join(missing)}")
            return tuple(x[k] for k in PARTS)
        if not (isinstance(x, (tuple, list)) and len(x) == 3):
            raise ValueError(f"inputs: expected (article, question, options), got {type(x).__name__}")
        return tuple(x)

    def _arrays(self, x, y=None) -> tuple:
        x = tuple(x) if isinstance(x, list) and len(x) == 3 else x
        if isinstance(x, (tuple, dict)):  # arrays: their shape is lost once traced with others'
            options = self._parts(x)[2]
            counts = [len(o) if isinstance(o, (list, tuple)) else None for o in options] if isinstance(
                options, (list, tuple)) else []
            if len(set(counts)) > 1:
                raise ValueError(f"options: a list of as many options per question, got lengths {counts[:8]}")
            shape = options.shape if tf.is_tensor(options) else tf.TensorShape(np.shape(options))
            if shape.rank != 2:
                raise ValueError(f"options: expected [batch, choices] strings, got shape {shape}")
            if y is not None and not isinstance(y, dict) and shape[1] is not None:
                checked_class_labels(y, shape[1], LABELS)
        return x, y

    def _checked_labels(self, y):
        if y is None or isinstance(y, dict):
            return y
        return checked_class_labels(y, what=LABELS)

    def call(self, inputs, training=None):
        return self.network(self._token_ids(inputs), training=training)["logits"]

    def _serving_kind(self) -> str:
        return "multiple_choice"

    def _serving_extras(self) -> dict:
        return dict(max_qa_length=self.preprocessor.max_qa_length)
